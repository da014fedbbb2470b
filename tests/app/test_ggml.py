"""ggtune's own ggml/GGUF tables: the same as gguf-py's, and read without importing numpy."""

from __future__ import annotations

import io
import json
import struct
import subprocess
import sys

import gguf

from app.model.ggml import (
    GGML_QUANT_SIZES,
    GGML_TYPES,
    GGMLQuantizationType,
    GGUFValueType,
    LlamaFileType,
)
from app.model.gguf_reader import read_header


def test_ggml_types_match_gguf_py() -> None:
    for type_id, (block, size) in gguf.GGML_QUANT_SIZES.items():
        ours = GGML_TYPES[int(type_id)]
        assert (ours.name, ours.block_size, ours.type_size) == (type_id.name, block, size)
        assert GGMLQuantizationType[type_id.name] == int(type_id)
        assert GGML_QUANT_SIZES[GGMLQuantizationType(int(type_id))] == (block, size)
    # Q2_0 (ggml 42) is newer than gguf-py 0.19: 64 values in 2 + 16 bytes (ggml-common.h)
    assert (GGML_TYPES[42].block_size, GGML_TYPES[42].type_size) == (64, 18)
    assert [t.name for t in GGMLQuantizationType] == [t.name for t in GGML_TYPES.values()]


def test_value_and_file_types_match_gguf_py() -> None:
    assert {t.name: t.value for t in GGUFValueType} == {t.name: t.value for t in gguf.GGUFValueType}
    theirs = {t.name.removeprefix("MOSTLY_"): t.value for t in gguf.LlamaFileType}
    theirs.pop("GUESSED")  # a flag llama.cpp ORs in, not a file type
    ours = {t.name: t.value for t in LlamaFileType}
    assert {k: v for k, v in ours.items() if k in theirs} == theirs
    assert set(ours) - set(theirs) == {"Q2_0"}


def test_a_q2_0_tensor_is_read_as_the_pinned_ggml_reads_it() -> None:
    # gguf-py 0.19 does not know ggml type 42; llama.cpp at the pin loads it, so must we.
    name = b"blk.0.ffn_up.weight"
    header = b"GGUF" + struct.pack("<IQQ", 3, 1, 0)
    header += struct.pack("<Q", len(name)) + name + struct.pack("<I", 2)
    header += struct.pack("<2q", 128, 2) + struct.pack("<IQ", 42, 0)
    header += bytes(-len(header) % 32) + bytes(4096)
    (tensor,) = read_header(io.BytesIO(header), name="q2_0.gguf").tensors
    assert (tensor.type_name, tensor.n_bytes) == ("Q2_0", 2 * 2 * 18)


def test_reading_and_estimating_import_neither_gguf_nor_numpy() -> None:
    code = (
        "import sys, json\n"
        "import app.model.gguf_reader, app.model.spec, app.model.catalog, app.model.quant\n"
        "import app.predict.estimate, app.export.llama_cpp_python\n"
        "print(json.dumps(sorted(m for m in ('gguf', 'numpy') if m in sys.modules)))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True, timeout=60
    ).stdout
    assert json.loads(out) == []
