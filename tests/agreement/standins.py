"""Header stand-ins of catalog models for the fit grid (a test helper, not app code).

llama.cpp's dry run (``no_alloc``, load mode none) reads the header and never the tensor
data, so a sparse file with the header and the right size stands in for a model of any
size. This writes one from a :class:`~app.model.spec.ModelSpec` (a catalog model, or a
quant of it simulated by :func:`app.model.quant.simulate_quant`) with ``gguf.GGUFWriter``;
the tokenizer is llama.cpp's "none" (``src/llama-vocab.cpp``: ``<arch>.vocab_size``
dummy tokens), which changes no buffer the fit measures.

A prototype until the architecture helper's stand-in writer lands in app/; then the grid
uses that one.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from app.model.spec import ModelSpec

_ALIGN = 32


def _put(writer: GGUFWriter, key: str, value: object) -> None:
    if isinstance(value, bool):
        writer.add_key_value(key, value, GGUFValueType.BOOL)
    elif isinstance(value, int):
        kind = GGUFValueType.UINT32 if 0 <= value < 2**32 else GGUFValueType.INT64
        writer.add_key_value(key, value, kind)
    elif isinstance(value, float):
        writer.add_key_value(key, value, GGUFValueType.FLOAT32)
    elif isinstance(value, str):
        writer.add_key_value(key, value, GGUFValueType.STRING)
    elif isinstance(value, (list, tuple)):
        items = list(value)
        if all(isinstance(v, bool) for v in items):
            writer.add_key_value(key, items, GGUFValueType.ARRAY, sub_type=GGUFValueType.BOOL)
        elif all(isinstance(v, int) for v in items):
            writer.add_key_value(key, items, GGUFValueType.ARRAY, sub_type=GGUFValueType.INT32)
        elif all(isinstance(v, (int, float)) for v in items):
            writer.add_key_value(key, items, GGUFValueType.ARRAY, sub_type=GGUFValueType.FLOAT32)
        else:
            writer.add_key_value(
                key, [str(v) for v in items], GGUFValueType.ARRAY, sub_type=GGUFValueType.STRING
            )
    else:
        raise TypeError(f"{key}: cannot write {type(value).__name__}")


def write_standin(spec: ModelSpec, metadata: Mapping[str, object], path: Path) -> Path:
    """Write a sparse GGUF for ``spec``'s tensors with ``metadata``; return ``path``."""
    arch = str(metadata["general.architecture"])
    writer = GGUFWriter(path, arch)
    for key, value in metadata.items():
        if key in (
            "general.architecture",
            "GGUF.version",
            "GGUF.tensor_count",
            "GGUF.kv_count",
        ) or key.startswith("tokenizer."):
            continue
        _put(writer, key, value)
    writer.add_key_value("tokenizer.ggml.model", "none", GGUFValueType.STRING)
    data_bytes = 0
    for t in spec.tensors:
        writer.add_tensor_info(
            t.name,
            tuple(reversed(t.shape)),
            np.dtype(np.float32),
            t.n_bytes,
            raw_dtype=GGMLQuantizationType(t.ggml_type),
        )
        data_bytes += -(-t.n_bytes // _ALIGN) * _ALIGN
    writer.write_header_to_file(path)
    writer.write_kv_data_to_file()
    writer.write_ti_data_to_file()
    writer.close()
    with path.open("r+b") as f:
        f.seek(0, 2)
        start = -(-f.tell() // _ALIGN) * _ALIGN
        f.truncate(start + data_bytes)
    return path
