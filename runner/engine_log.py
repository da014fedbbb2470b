"""Read llama.cpp's numbers out of its log lines.

Pure functions over lines of text (no ``llama_cpp`` import). Each pattern matches the
text after the ``func:`` prefix, which moves between llama.cpp versions; the format
strings they follow are quoted from the vendored llama.cpp (llama-cpp-python 0.3.36,
``vendor/llama.cpp``):

* ``load_tensors: %12s model buffer size = %8.2f MiB`` (``src/llama-model.cpp``)
* ``llama_context: %10s  output buffer size = %8.2f MiB`` (``src/llama-context.cpp``)
* ``llama_kv_cache: %10s KV buffer size = %8.2f MiB`` and
  ``llama_kv_cache: size = %7.2f MiB (%6u cells, %3d layers, %2u/%u seqs), K (%s): %7.2f
  MiB, V (%s): %7.2f MiB`` (``src/llama-kv-cache.cpp``; ``seqs`` is ``n_seq_max/n_stream``)
* ``llama_kv_cache_iswa: creating non-SWA KV cache, size = %u cells`` and ``creating
  SWA KV cache`` (``src/llama-kv-cache-iswa.cpp``; other caches print ``creating main
  KV cache``, ``creating indexer KV cache`` ...), each followed by its ``size =`` line
* ``llama_memory_recurrent: %10s RS buffer size = %8.2f MiB`` and
  ``llama_memory_recurrent: size = %7.2f MiB (%6u cells, %3d layers, %2u seqs %2u
  rs_seq), R (%s): %7.2f MiB, S (%s): %7.2f MiB, P (%s): %7.2f MiB``
  (``src/llama-memory-recurrent.cpp``)
* ``sched_reserve: %10s compute buffer size = %8.2f MiB`` (``src/llama-context.cpp``;
  printed only for buffers over 1 byte; in ``no_alloc`` mode the size is the one
  ``graph_reserve`` computed without allocating)
* ``llama_context: n_ctx = %u``, ``n_ctx_seq``, ``n_seq_max``, ``n_batch``, ``n_ubatch``,
  ``flash_attn = auto|enabled|disabled``, ``kv_unified = true|false``
* ``resolve_fused_ops: Flash Attention enabled`` / ``Flash Attention not supported, set
  to disabled`` (only when flash attention was ``auto``)
* ``load_tensors: offloaded %d/%d layers to GPU`` (only on builds with GPU offload)
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Final

from app.measured.engine_report import BufferSize, KvCacheInfo, RecurrentCacheInfo, mib_to_bytes

_NUM: Final = r"(-?\d+(?:\.\d+)?)"

_BUFFER_RE: Final = re.compile(
    rf"(\S+)\s+(model|KV|RS|compute|output) buffer size =\s*{_NUM} MiB\s*$"
)
_KV_CACHE_RE: Final = re.compile(
    rf"size =\s*{_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+)/(\d+) seqs\), "
    rf"K \((\w+)\):\s*{_NUM} MiB, V \((\w+)\):\s*{_NUM} MiB"
)
_RECURRENT_RE: Final = re.compile(
    rf"size =\s*{_NUM} MiB \(\s*(\d+) cells,\s*(\d+) layers,\s*(\d+) seqs\s+(\d+) rs_seq\), "
    rf"R \((\w+)\):\s*{_NUM} MiB, S \((\w+)\):\s*{_NUM} MiB, P \((\w+)\):\s*{_NUM} MiB"
)
_CREATING_RE: Final = re.compile(r"creating\s+(.*?)\s*KV cache, size =\s*\d+ cells")
_CONTEXT_INT_RE: Final = re.compile(
    r"llama_context: (n_seq_max|n_ctx|n_ctx_seq|n_batch|n_ubatch)\s+= (\d+)\s*$"
)
_FLASH_REQUESTED_RE: Final = re.compile(r"llama_context: flash_attn\s+= (\w+)\s*$")
_KV_UNIFIED_RE: Final = re.compile(r"llama_context: kv_unified\s+= (true|false)\s*$")
_FLASH_RESOLVED_RE: Final = re.compile(
    r"Flash Attention (enabled|not supported, set to disabled)\s*$"
)
_OFFLOADED_RE: Final = re.compile(r"offloaded (\d+)/(\d+) layers to GPU")

LOG_LEVEL_INFO: Final = 2
LOG_LEVEL_ERROR: Final = 4
LOG_LEVEL_CONT: Final = 5
"""``enum ggml_log_level`` (``ggml/include/ggml.h``): NONE 0, DEBUG 1, INFO 2, WARN 3,
ERROR 4, CONT 5 (continues the previous message)."""


class LogLineJoiner:
    """Join llama.cpp log messages into whole lines and pass each on at once.

    ``on_log(level, text, user_data)`` has the signature of ``ggml_log_callback``. A
    message may hold several lines or end without a newline; a ``CONT`` message continues
    the previous one, any other level starts a new message (and ends an unfinished line).
    Each line goes to ``emit(level, line)`` without its newline, with the level of the
    message that started it. ``errors`` collects the non-empty ERROR lines (the caller
    clears it between steps); the first one usually names the cause.

    >>> lines = []
    >>> joiner = LogLineJoiner(lambda level, line: lines.append((level, line)))
    >>> for level, text in [(2, b"load: a"), (5, b"bc\\nnext"), (3, b"warn\\n")]:
    ...     joiner.on_log(level, text, None)
    >>> lines
    [(2, 'load: abc'), (2, 'next'), (3, 'warn')]
    """

    def __init__(self, emit: Callable[[int, str], None]) -> None:
        self._emit = emit
        self._pending = ""
        self._level = LOG_LEVEL_INFO
        self.errors: list[str] = []

    def on_log(self, level: int, text: bytes | None, _user_data: object) -> None:
        """Take one message from llama.cpp (called from C through ctypes: never raises)."""
        try:
            if level != LOG_LEVEL_CONT:
                self.flush()
                self._level = level
            chunk = self._pending + (text or b"").decode("utf-8", "replace")
            *lines, self._pending = chunk.split("\n")
            for line in lines:
                self._forward(line)
        except Exception:  # an exception must not cross into C; drop the fragment
            self._pending = ""

    def flush(self) -> None:
        """Pass on an unfinished line, if any."""
        if self._pending:
            line, self._pending = self._pending, ""
            self._forward(line)

    def _forward(self, line: str) -> None:
        if self._level == LOG_LEVEL_ERROR and line.strip():
            self.errors.append(line.strip())
        self._emit(self._level, line)


@dataclass(frozen=True, slots=True)
class LogFacts:
    """What one model load plus one context creation logged; ``None`` = not in the log."""

    model_buffers: tuple[BufferSize, ...]
    kv_buffers: tuple[BufferSize, ...]
    rs_buffers: tuple[BufferSize, ...]
    compute_buffers: tuple[BufferSize, ...]
    output_buffers: tuple[BufferSize, ...]
    kv_caches: tuple[KvCacheInfo, ...]
    recurrent_caches: tuple[RecurrentCacheInfo, ...]
    n_ctx: int | None
    n_ctx_seq: int | None
    n_seq_max: int | None
    n_batch: int | None
    n_ubatch: int | None
    kv_unified: bool | None
    flash_attn_requested: str | None
    flash_attn: bool | None
    offloaded_layers: tuple[int, int] | None


def parse_buffer_line(line: str) -> tuple[str, BufferSize] | None:
    """Return ``(kind, size)`` for a ``<buffer> <kind> buffer size = X MiB`` line.

    ``kind`` is ``model``, ``KV``, ``RS``, ``compute`` or ``output``.

    >>> parse_buffer_line("load_tensors:   CPU_Mapped model buffer size =   235.16 MiB")
    ('model', BufferSize(buffer='CPU_Mapped', mib=235.16, bytes=246583132))
    """
    m = _BUFFER_RE.search(line)
    if m is None:
        return None
    mib = float(m.group(3))
    return m.group(2), BufferSize(buffer=m.group(1), mib=mib, bytes=mib_to_bytes(mib))


def parse_kv_cache_line(line: str, role: str = "") -> KvCacheInfo | None:
    """Return the cache a ``llama_kv_cache: size = ...`` line describes, else ``None``.

    >>> c = parse_kv_cache_line("llama_kv_cache: size =   45.00 MiB (   512 cells,  30 "
    ...     "layers,  4/4 seqs), K (f16):   22.50 MiB, V (f16):   22.50 MiB")
    >>> (c.cells, c.layers, c.seqs, c.streams, c.type_k, c.k_mib)
    (512, 30, 4, 4, 'f16', 22.5)
    """
    m = _KV_CACHE_RE.search(line)
    if m is None:
        return None
    return KvCacheInfo(
        role=role,
        size_mib=float(m.group(1)),
        cells=int(m.group(2)),
        layers=int(m.group(3)),
        seqs=int(m.group(4)),
        streams=int(m.group(5)),
        type_k=m.group(6),
        k_mib=float(m.group(7)),
        type_v=m.group(8),
        v_mib=float(m.group(9)),
    )


def parse_recurrent_line(line: str) -> RecurrentCacheInfo | None:
    """Return the state a ``llama_memory_recurrent: size = ...`` line describes."""
    m = _RECURRENT_RE.search(line)
    if m is None:
        return None
    return RecurrentCacheInfo(
        size_mib=float(m.group(1)),
        cells=int(m.group(2)),
        layers=int(m.group(3)),
        seqs=int(m.group(4)),
        rs_seq=int(m.group(5)),
        type_r=m.group(6),
        r_mib=float(m.group(7)),
        type_s=m.group(8),
        s_mib=float(m.group(9)),
        p_mib=float(m.group(11)),
    )


def parse_log(lines: Iterable[str]) -> LogFacts:
    """Collect the numbers of one model load and one context from its log ``lines``.

    Lines are taken one at a time, without their trailing newline; lines that match no
    pattern are skipped. If a value is printed twice (it is not, for one context), the
    last one wins.
    """
    buffers: dict[str, list[BufferSize]] = {
        k: [] for k in ("model", "KV", "RS", "compute", "output")
    }
    kv_caches: list[KvCacheInfo] = []
    recurrent: list[RecurrentCacheInfo] = []
    ints: dict[str, int] = {}
    kv_unified: bool | None = None
    flash_requested: str | None = None
    flash_resolved: bool | None = None
    offloaded: tuple[int, int] | None = None
    role = ""

    for line in lines:
        if " buffer size = " in line:
            parsed = parse_buffer_line(line)
            if parsed is not None:
                buffers[parsed[0]].append(parsed[1])
            continue
        if "size = " in line and " cells," in line:
            cache = parse_kv_cache_line(line, role)
            if cache is not None:
                kv_caches.append(cache)
                role = ""
                continue
            state = parse_recurrent_line(line)
            if state is not None:
                recurrent.append(state)
                continue
        if (m := _CREATING_RE.search(line)) is not None:
            role = " ".join(m.group(1).split())
        elif (m := _CONTEXT_INT_RE.search(line)) is not None:
            ints[m.group(1)] = int(m.group(2))
        elif (m := _FLASH_REQUESTED_RE.search(line)) is not None:
            flash_requested = m.group(1)
        elif (m := _KV_UNIFIED_RE.search(line)) is not None:
            kv_unified = m.group(1) == "true"
        elif (m := _FLASH_RESOLVED_RE.search(line)) is not None:
            flash_resolved = m.group(1) == "enabled"
        elif (m := _OFFLOADED_RE.search(line)) is not None:
            offloaded = (int(m.group(1)), int(m.group(2)))

    # llama_context::resolve_fused_ops probes only when flash attention is "auto"; an
    # explicit choice stands as printed (src/llama-context.cpp).
    flash_attn = flash_resolved
    if flash_requested == "enabled":
        flash_attn = True
    elif flash_requested == "disabled":
        flash_attn = False

    return LogFacts(
        model_buffers=tuple(buffers["model"]),
        kv_buffers=tuple(buffers["KV"]),
        rs_buffers=tuple(buffers["RS"]),
        compute_buffers=tuple(buffers["compute"]),
        output_buffers=tuple(buffers["output"]),
        kv_caches=tuple(kv_caches),
        recurrent_caches=tuple(recurrent),
        n_ctx=ints.get("n_ctx"),
        n_ctx_seq=ints.get("n_ctx_seq"),
        n_seq_max=ints.get("n_seq_max"),
        n_batch=ints.get("n_batch"),
        n_ubatch=ints.get("n_ubatch"),
        kv_unified=kv_unified,
        flash_attn_requested=flash_requested,
        flash_attn=flash_attn,
        offloaded_layers=offloaded,
    )
