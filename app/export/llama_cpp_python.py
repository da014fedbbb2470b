"""llama-cpp-python: a ``Llama(...)`` snippet for the pinned version (0.3.36).

``Llama.__init__`` (llama_cpp/llama.py) takes ``n_ctx``, ``n_gpu_layers`` (negative = all,
``llama_model::n_gpu_layers``), ``n_batch``, ``n_ubatch``, ``flash_attn`` (a bool:
enabled or disabled, no auto), ``type_k``/``type_v`` (ggml type numbers), ``swa_full``,
``offload_kqv``, ``use_mmap`` and ``tensor_split``. It has no ``n_seq_max`` or
``kv_unified`` keyword (only ``embedding=True`` sets them), so one sequence is all it runs.

Example::

    print(export_llama_cpp_python("/models/gemma.gguf", settings).text)
"""

from __future__ import annotations

import os
from typing import Final

from app.export.common import ExportText
from app.model.ggml import GGMLQuantizationType
from app.settings import ALL_LAYERS, CacheType, Settings

__all__ = ["LLAMA_CPP_PYTHON_VERSION", "export_llama_cpp_python", "llama_kwargs"]

LLAMA_CPP_PYTHON_VERSION: Final = "0.3.36"


def _ggml_type(cache_type: CacheType) -> int:
    # llama_cpp.py lacks a GGML_TYPE_BF16 constant, so write the numbers (ggml.h enum).
    return int(GGMLQuantizationType[cache_type.upper()])


def llama_kwargs(
    model_path: str | os.PathLike[str], settings: Settings
) -> tuple[dict[str, object], tuple[str, ...]]:
    """Return the ``Llama()`` keyword arguments for ``settings`` and notes on what differs."""
    s = settings
    notes: list[str] = []
    kwargs: dict[str, object] = {
        "model_path": os.fspath(model_path),
        "n_ctx": s.n_ctx,
        "n_gpu_layers": -1 if s.n_gpu_layers == ALL_LAYERS else s.n_gpu_layers,
        "n_batch": s.n_batch,
        "n_ubatch": s.n_ubatch,
        "flash_attn": s.flash_attn != "off",
        "type_k": _ggml_type(s.cache_type_k),
        "type_v": _ggml_type(s.cache_type_v),
        "swa_full": s.swa_full,
        "offload_kqv": s.offload_kqv,
        "use_mmap": s.use_mmap,
    }
    if s.tensor_split:
        kwargs["tensor_split"] = list(s.tensor_split)
    if s.flash_attn == "auto":
        notes.append(
            "Llama() has no flash attention auto: flash_attn=True (auto enables it wherever "
            "the backend supports it, and ggtune sizes the cache for it)"
        )
    if s.n_parallel > 1 or s.kv_unified:
        notes.append(
            f"Llama() has no n_seq_max/kv_unified keyword in {LLAMA_CPP_PYTHON_VERSION}: it runs "
            f"one sequence, so {s.n_parallel} parallel slots cannot be expressed "
            "(use llama-server)"
        )
    if s.n_cpu_moe:
        notes.append("Llama() has no MoE-on-CPU keyword; -ncmoe is not applied (use llama-server)")
    if not s.repack:
        notes.append(
            "Llama() has no keyword for use_extra_bufts; weight repacking stays on "
            "(use llama-server --no-repack)"
        )
    return kwargs, tuple(notes)


def export_llama_cpp_python(model_path: str | os.PathLike[str], settings: Settings) -> ExportText:
    """Return a Python snippet that loads the model with ``settings``."""
    kwargs, notes = llama_kwargs(model_path, settings)
    lines = [
        f"# llama-cpp-python=={LLAMA_CPP_PYTHON_VERSION}",
        "from llama_cpp import Llama",
        "",
        "llm = Llama(",
    ]
    for key, value in kwargs.items():
        comment = ""
        if key in ("type_k", "type_v"):
            comment = f"  # {getattr(settings, 'cache_type_' + key[-1])}"
        lines.append(f"    {key}={value!r},{comment}")
    lines.append(")")
    lines += [f"# note: {n}" for n in notes]
    return ExportText(text="\n".join(lines) + "\n", filename="load_model.py", notes=notes)
