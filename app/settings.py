"""Run settings in the engine's own terms, and each runner's defaults.

:class:`Settings` holds what reaches ``llama_model_params`` / ``llama_context_params``:
``n_ctx`` is the *total* number of KV cells requested from llama.cpp (as llama-server's
``-c``), not a per-user figure. Runner presets translate each runner's conventions (Ollama's
``num_ctx`` is per slot and multiplied by ``OLLAMA_NUM_PARALLEL``) into these terms.
"""

from __future__ import annotations

import dataclasses
import math
import re
from dataclasses import dataclass
from typing import Final, Literal, get_args

from app.errors import SettingsError

CacheType = Literal["f32", "f16", "bf16", "q8_0", "q4_0", "q4_1", "q5_0", "q5_1", "iq4_nl"]
FlashAttn = Literal["on", "off", "auto"]
RunnerName = Literal["llama-cpp-python", "llama-server", "ollama", "lmstudio"]

CACHE_TYPES: Final[tuple[CacheType, ...]] = get_args(CacheType)
FLASH_ATTN_MODES: Final[tuple[FlashAttn, ...]] = get_args(FlashAttn)
RUNNERS: Final[tuple[RunnerName, ...]] = get_args(RunnerName)

UINT32_MAX: Final = (1 << 32) - 1
"""Largest value of the ``uint32_t`` fields of ``llama_context_params`` (n_ctx, n_batch,
n_ubatch): a larger one reaches llama.cpp truncated (2^32 becomes 0 and aborts it)."""

INT32_MAX: Final = (1 << 31) - 1
"""Largest ``int32_t`` (``n_gpu_layers``, ``n_cpu_moe`` as the runners pass them)."""

MAX_SEQUENCES: Final = 256
"""LLAMA_MAX_SEQ (src/llama-cparams.h): llama.cpp refuses more parallel sequences."""

ALL_LAYERS: Final = -1
"""``n_gpu_layers`` value meaning every layer (and the output layer) on the GPU."""


@dataclass(frozen=True, slots=True)
class Settings:
    """How llama.cpp is asked to load and run a model.

    Units: ``n_ctx`` in tokens (cells, all slots together; 0 = the training context),
    batches in tokens. ``n_gpu_layers`` counts repeating layers plus the output layer, as
    llama.cpp does; -1 means all. ``tensor_split`` holds one proportion per GPU (empty =
    proportional to free memory).
    """

    n_ctx: int = 512
    n_gpu_layers: int = 0
    cache_type_k: CacheType = "f16"
    cache_type_v: CacheType = "f16"
    flash_attn: FlashAttn = "auto"
    n_parallel: int = 1
    kv_unified: bool = False
    swa_full: bool = True
    n_batch: int = 2048
    n_ubatch: int = 512
    n_cpu_moe: int = 0
    tensor_split: tuple[float, ...] = ()
    use_mmap: bool = True
    offload_kqv: bool = True
    repack: bool = True
    """llama.cpp's extra CPU weight buffers (``AMX``, ``CPU_REPACK``: a converted copy of
    the weights for faster CPU kernels); False is llama-server's ``--no-repack``
    (``llama_model_params.use_extra_bufts = false``): plain CPU weights only."""
    tensor_overrides: tuple[tuple[str, str], ...] = ()
    """llama.cpp's ``-ot PATTERN=BUFFER`` pairs in order (the first pattern that matches a
    tensor's name wins, ``std::regex_search``); BUFFER is ``"CPU"`` or a GPU's name."""

    def __post_init__(self) -> None:
        if not 0 <= self.n_ctx <= UINT32_MAX:
            raise SettingsError(
                f"context size must be 0 to {UINT32_MAX:,} tokens (llama.cpp's limit), "
                f"got {self.n_ctx:,}"
            )
        if not -1 <= self.n_gpu_layers <= INT32_MAX:
            raise SettingsError(f"GPU layers must be ≥ -1 (-1 = all), got {self.n_gpu_layers}")
        if self.cache_type_k not in CACHE_TYPES:
            raise SettingsError(f"unknown K cache type {self.cache_type_k!r}")
        if self.cache_type_v not in CACHE_TYPES:
            raise SettingsError(f"unknown V cache type {self.cache_type_v!r}")
        if self.flash_attn not in FLASH_ATTN_MODES:
            raise SettingsError(f"flash attention must be on, off or auto, not {self.flash_attn!r}")
        if not 1 <= self.n_parallel <= MAX_SEQUENCES:
            raise SettingsError(
                f"parallel sequences must be 1 to {MAX_SEQUENCES} (llama.cpp's limit), "
                f"got {self.n_parallel}"
            )
        if not (1 <= self.n_batch <= UINT32_MAX and 1 <= self.n_ubatch <= UINT32_MAX):
            raise SettingsError(
                f"batch sizes must be 1 to {UINT32_MAX:,} tokens, got {self.n_batch:,} and "
                f"{self.n_ubatch:,}"
            )
        if not 0 <= self.n_cpu_moe <= INT32_MAX:
            raise SettingsError(f"MoE layers on the CPU must be ≥ 0, got {self.n_cpu_moe}")
        if any(not math.isfinite(p) or p < 0 for p in self.tensor_split):
            raise SettingsError(
                "tensor split proportions must be numbers ≥ 0, got "
                + ",".join(f"{p:g}" for p in self.tensor_split)
            )
        for pattern, buffer in self.tensor_overrides:
            if not buffer:
                raise SettingsError(f"tensor override {pattern!r} names no buffer")
            try:
                re.compile(pattern)
            except re.error as err:
                raise SettingsError(f"tensor override {pattern!r} is not a regex: {err}") from None

    def replace(self, **changes: object) -> Settings:
        """Return a copy with ``changes`` applied (validated again)."""
        return dataclasses.replace(self, **changes)  # type: ignore[arg-type]


def runner_defaults(runner: RunnerName, *, gpu_total_bytes: int | None = None) -> Settings:
    """Return the settings ``runner`` uses when the user sets nothing.

    ``gpu_total_bytes`` (all GPUs together) matters for Ollama, whose default context
    depends on VRAM. Sources: llama-cpp-python 0.3.36 ``Llama.__init__``; llama.cpp
    ``common/common.h`` and ``tools/server`` (PR #16736: 4 slots, unified KV); Ollama
    ``envconfig``/``llm/server.go``; lmstudio-js ``lms-kv-config/src/schema.ts``.
    See docs/sources.md §2.
    """
    if runner == "llama-cpp-python":
        # Llama(): n_ctx=512, n_batch=512, n_ubatch=512, flash_attn=False, n_gpu_layers=0;
        # swa_full and kv_unified keep the C API defaults (true, false).
        return Settings(
            n_ctx=512,
            n_gpu_layers=0,
            flash_attn="off",
            n_batch=512,
            n_ubatch=512,
            swa_full=True,
            kv_unified=False,
            n_parallel=1,
        )
    if runner == "llama-server":
        # -c 0 (training context), -ngl auto (all that fit), -fa auto, -np auto = 4 slots
        # sharing one unified cache, swa_full off, -b 2048 -ub 512.
        return Settings(
            n_ctx=0,
            n_gpu_layers=ALL_LAYERS,
            flash_attn="auto",
            n_parallel=4,
            kv_unified=True,
            swa_full=False,
            n_batch=2048,
            n_ubatch=512,
        )
    if runner == "ollama":
        # num_ctx default by VRAM (4k below 24 GiB, 32k to 48 GiB, 256k above), one slot,
        # -c num_ctx*parallel -np parallel (so not unified), num_batch 512 -> -b and -ub.
        gib = 1024**3
        vram = gpu_total_bytes or 0
        num_ctx = 4096 if vram < 24 * gib else 32768 if vram < 48 * gib else 262144
        return Settings(
            n_ctx=num_ctx,
            n_gpu_layers=ALL_LAYERS,
            flash_attn="auto",
            n_parallel=1,
            kv_unified=False,
            swa_full=False,
            n_batch=512,
            n_ubatch=512,
        )
    if runner == "lmstudio":
        # lmstudio-js packages/lms-kv-config/src/schema.ts: offloadRatio "max",
        # numParallelSessions 4 with useUnifiedKvCache, evalBatchSize 2048 /
        # physicalBatchSize 512, flashAttention false. contextLength is machine dependent
        # (schema default 2048); ggtune plans with 4096.
        return Settings(
            n_ctx=4096,
            n_gpu_layers=ALL_LAYERS,
            flash_attn="off",
            n_parallel=4,
            kv_unified=True,
            swa_full=False,
            n_batch=2048,
            n_ubatch=512,
        )
    raise SettingsError(f"unknown runner {runner!r}; choose one of {', '.join(RUNNERS)}")
