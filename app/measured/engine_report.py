"""llama.cpp's own numbers for one model and one :class:`~app.settings.Settings`.

:func:`runner.dry_run.dry_run` fills an :class:`EngineReport` in a child process; this
module holds only the frozen data, so ``app/`` and ``ui/`` use it without importing
``llama_cpp``.

Two kinds of numbers, with different precision:

* **exact**, from the C API: ``model_size_bytes`` (``llama_model_size``: the sum of
  ``ggml_nbytes`` over the weights), ``model_n_params``, ``n_layer``, ``n_ctx``,
  ``n_ctx_seq``, ``n_seq_max``, and the devices' memory;
* **rounded by llama.cpp**, parsed from its log: every buffer size and cache size is
  printed as MiB with two decimals (``%8.2f``/``%7.2f``), so it is known to ±0.005 MiB
  (±5243 bytes). Each such size is kept twice: ``mib`` as printed and ``bytes``, the
  nearest whole byte (``round(mib * 2**20)``), which is *not* exact.

What the log shows depends on the mode (see ``runner/dry_run.py``):

* ``no_alloc`` (dry run): llama.cpp allocates dummy buffers, so the *model* and *KV*
  buffer lines print ``0.00 MiB``; the KV cache ``size = ...`` lines, the compute buffer
  lines (the sizes the scheduler *would* allocate) and the output buffer line carry real
  numbers; recurrent-state (``RS``) buffers are really allocated even then;
* ``alloc``: every line carries the size of a real allocation.

Example::

    report = dry_run("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096, swa_full=False))
    report.kv_caches[0].cells           # 4096 (the non-SWA layers)
    report.kv_caches[1].cells           # 1024 (the SWA layers: 512 window + 512 ubatch)
    report.compute_buffer_bytes         # {"CPU": 539492352}  (514.50 MiB, rounded)
    report.model_size_bytes             # 246587904 (exact)
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Literal

from app.settings import Settings
from app.units import MIB

EngineMode = Literal["no_alloc", "alloc"]
DeviceType = Literal["cpu", "gpu", "igpu", "accel", "meta", "unknown"]


def mib_to_bytes(mib: float) -> int:
    """Return the whole number of bytes nearest to ``mib`` mebibytes (2**20 bytes)."""
    return round(mib * MIB)


@dataclass(frozen=True, slots=True)
class BufferSize:
    """One ``<buffer> <kind> buffer size = X MiB`` line of the llama.cpp log.

    ``buffer`` is the ggml buffer name: ``CPU``, ``CPU_Mapped`` (weights mmapped from the
    file), ``CPU_REPACK`` (weights repacked for the CPU kernels), ``AMX`` (weights packed
    for the AMX kernels of an AMX CPU), ``CUDA0``,
    ``CUDA_Host`` ... ``mib`` is as printed (two decimals), ``bytes`` the nearest byte.
    """

    buffer: str
    mib: float
    bytes: int


@dataclass(frozen=True, slots=True)
class KvCacheInfo:
    """One ``llama_kv_cache: size = ...`` line: a KV cache as llama.cpp created it.

    ``cells`` is the size of *one stream* (``kv_size``); the cache holds ``streams``
    of them (1 when ``kv_unified``, else ``n_seq_max``) and serves ``seqs`` sequences.
    ``layers`` counts the layers with KV in this cache. ``role`` is the text of the
    preceding ``creating <role> KV cache`` line (``"non-SWA"`` / ``"SWA"`` for an iSWA
    model, ``"main"`` / ``"indexer"`` ...), ``""`` for a plain cache. Sizes in MiB as
    printed (``%7.2f``); the ``*_bytes`` properties are the nearest bytes.
    """

    role: str
    cells: int
    layers: int
    seqs: int
    streams: int
    type_k: str
    type_v: str
    size_mib: float
    k_mib: float
    v_mib: float

    @property
    def swa(self) -> bool:
        """Whether this is the sliding-window cache of an iSWA model."""
        return self.role == "SWA"

    @property
    def total_cells(self) -> int:
        """Cells over all streams."""
        return self.cells * self.streams

    @property
    def k_bytes(self) -> int:
        """K size in bytes, nearest to the printed MiB."""
        return mib_to_bytes(self.k_mib)

    @property
    def v_bytes(self) -> int:
        """V size in bytes, nearest to the printed MiB."""
        return mib_to_bytes(self.v_mib)

    @property
    def size_bytes(self) -> int:
        """K+V size in bytes, nearest to the printed MiB."""
        return mib_to_bytes(self.size_mib)


@dataclass(frozen=True, slots=True)
class RecurrentCacheInfo:
    """One ``llama_memory_recurrent: size = ...`` line: recurrent state (Mamba, RWKV...).

    ``cells`` = ``max(1, n_seq_max)`` state slots; R and S are the two state tensors per
    layer, P a third one some architectures use (0.00 MiB otherwise). MiB as printed.
    """

    cells: int
    layers: int
    seqs: int
    rs_seq: int
    type_r: str
    type_s: str
    size_mib: float
    r_mib: float
    s_mib: float
    p_mib: float

    @property
    def size_bytes(self) -> int:
        """R+S+P size in bytes, nearest to the printed MiB."""
        return mib_to_bytes(self.size_mib)


@dataclass(frozen=True, slots=True)
class EngineDevice:
    """A ggml backend device as llama.cpp sees it (``ggml_backend_dev_*``).

    Memory in bytes, read in the child before the model was loaded.
    """

    name: str
    description: str
    type: DeviceType
    free_bytes: int
    total_bytes: int


def _sum_by_buffer(sizes: Iterable[BufferSize]) -> dict[str, int]:
    total: dict[str, int] = {}
    for size in sizes:
        total[size.buffer] = total.get(size.buffer, 0) + size.bytes
    return total


@dataclass(frozen=True, slots=True)
class EngineReport:
    """What llama.cpp reported for ``settings`` on ``model_path`` (see the module doc).

    Buffers are tuples in log order; a buffer name can occur more than once (one KV
    buffer per cache of an iSWA model, one ``CPU_Mapped`` buffer per file of a split
    model); the ``*_buffer_bytes`` properties sum them per name.
    ``flash_attn`` is the resolved choice (``auto`` resolved by llama.cpp's probe),
    ``flash_attn_requested`` what the context was created with as llama.cpp printed it
    (``"auto"``, ``"enabled"``, ``"disabled"``; a quantized V cache turns ``auto`` into
    ``enabled``). ``offloaded_layers`` is ``(offloaded, offloadable)`` from the
    ``offloaded N/M layers to GPU`` line, ``None`` on builds without GPU offload.
    ``log`` holds every llama.cpp log line of the model load and of this context (all
    levels, DEBUG included), without the trailing newline.
    """

    model_path: str
    settings: Settings
    mode: EngineMode
    # exact, from the C API
    model_size_bytes: int
    model_n_params: int
    model_desc: str
    n_layer: int
    n_ctx_train: int
    n_ctx: int
    n_ctx_seq: int
    n_seq_max: int
    n_batch: int
    n_ubatch: int
    # parsed from the log (sizes rounded to 0.01 MiB by llama.cpp)
    kv_unified: bool
    flash_attn: bool
    flash_attn_requested: str
    model_buffers: tuple[BufferSize, ...]
    kv_buffers: tuple[BufferSize, ...]
    rs_buffers: tuple[BufferSize, ...]
    compute_buffers: tuple[BufferSize, ...]
    output_buffers: tuple[BufferSize, ...]
    kv_caches: tuple[KvCacheInfo, ...]
    recurrent_caches: tuple[RecurrentCacheInfo, ...]
    offloaded_layers: tuple[int, int] | None
    # the engine
    devices: tuple[EngineDevice, ...]
    system_info: str
    engine_version: str
    log: tuple[str, ...]

    @property
    def model_buffer_bytes(self) -> dict[str, int]:
        """Weights per buffer name, bytes (0 in ``no_alloc`` mode: dummy buffers)."""
        return _sum_by_buffer(self.model_buffers)

    @property
    def kv_buffer_bytes(self) -> dict[str, int]:
        """KV cache per buffer name, bytes (0 in ``no_alloc`` mode: dummy buffers)."""
        return _sum_by_buffer(self.kv_buffers)

    @property
    def rs_buffer_bytes(self) -> dict[str, int]:
        """Recurrent state per buffer name, bytes."""
        return _sum_by_buffer(self.rs_buffers)

    @property
    def compute_buffer_bytes(self) -> dict[str, int]:
        """Compute (scratch) buffers per buffer name, bytes; buffers ≤ 1 byte are not logged."""
        return _sum_by_buffer(self.compute_buffers)

    @property
    def output_buffer_bytes(self) -> dict[str, int]:
        """Host output (logits) buffer per buffer name, bytes."""
        return _sum_by_buffer(self.output_buffers)

    @property
    def kv_bytes(self) -> int:
        """K+V of every KV cache, bytes (sum of the nearest bytes of each printed part)."""
        return sum(c.k_bytes + c.v_bytes for c in self.kv_caches)

    @property
    def recurrent_bytes(self) -> int:
        """All recurrent state, bytes (nearest to the printed MiB)."""
        return sum(c.size_bytes for c in self.recurrent_caches)

    @property
    def output_bytes(self) -> int:
        """All output buffers, bytes."""
        return sum(b.bytes for b in self.output_buffers)

    def compute_bytes_on(self, buffer: str) -> int:
        """Compute buffers named ``buffer`` (``"CPU"``, ``"CUDA0"`` ...), bytes; 0 if none."""
        return sum(b.bytes for b in self.compute_buffers if b.buffer == buffer)

    def to_dict(self, *, include_log: bool = False) -> dict[str, Any]:
        """Return the report as plain JSON-ready data (lists, dicts, numbers, strings).

        Adds the derived totals (``kv_bytes``, ``recurrent_bytes``, ``output_bytes``,
        ``*_buffer_bytes``); the log is left out unless ``include_log``.
        """
        data: dict[str, Any] = _plain(dataclasses.asdict(self))
        if not include_log:
            del data["log"]
        data.update(
            kv_bytes=self.kv_bytes,
            recurrent_bytes=self.recurrent_bytes,
            output_bytes=self.output_bytes,
            model_buffer_bytes=self.model_buffer_bytes,
            kv_buffer_bytes=self.kv_buffer_bytes,
            rs_buffer_bytes=self.rs_buffer_bytes,
            compute_buffer_bytes=self.compute_buffer_bytes,
            output_buffer_bytes=self.output_buffer_bytes,
        )
        return data


def _plain(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v) for v in value]
    return value
