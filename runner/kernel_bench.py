"""Time llama.cpp's own CPU kernels on this machine: the compute half of the speed model.

A model's decode and prefill time on a CPU is mostly matrix products of quantized weights
with the activations (``GGML_OP_MUL_MAT``), and their cost per weight depends on the
quant type (how much unpacking each block takes), on how many tokens share one read of
the weights (1 for one user decoding, N for N users, hundreds in a prompt), on the
threads, and on whether llama.cpp repacks the type for this CPU (``CPU_REPACK``,
``ggml-cpu/repack.cpp``). Bandwidth alone does not see any of that; a FLOP rate alone
does not either. So this benchmark runs the engine's kernels themselves, through the
ggml library llama-cpp-python ships (ctypes; llama-cpp-python binds none of it):

* per type, row length and token count, a graph of ``y_i = mul_mat(W_i, x)`` over enough
  weight matrices (4 M weights each, rows of the model's lengths) that they do not fit in
  the CPU's caches, as a model's weights stream from RAM (:func:`stream_plan`: up to 31
  tokens, at least 96 MiB and four times the last-level cache; up to 255, twice that
  cache; from 256 on, where a product is compute-bound, one or two matrices), built and
  computed on the CPU backend with ``n_threads`` exactly as llama.cpp computes a model's
  graph; the weights go into the ``CPU_REPACK`` buffer for the types the caller says
  llama.cpp repacks;
* the per-node cost of the graph itself (a chain of tiny ops: the threads' barrier
  between two nodes), which a 135M model's ~600 nodes per token pay too.

Results are nanoseconds per weight (per token count) and microseconds per node:
:class:`KernelRates`. It runs in a child process (:class:`~runner.worker.EngineWorker`);
about 5–15 s for the types of one model on two cores. Example::

    rates = kernel_bench(("q4_K", "q6_K", "f32"), n_tokens=(1, 2, 4, 8, 512), n_threads=2,
                         repack=("q4_K",))
    rates.ns_per_weight("q4_K", 1)
"""

from __future__ import annotations

import ctypes
import dataclasses
import math
import os
import re
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from app.errors import EngineError, EngineUnsupportedError
from app.hardware.kernels import (
    AttentionTiming,
    KernelRates,
    KernelTiming,
    cached_rates,
    store_rates,
)
from app.predict.estimate import amx_takes
from app.predict.speed import KernelNeeds
from runner.worker import ChildChannel, ChildFailure, EngineWorker, ItemEvent

DEFAULT_TIMEOUT_S: Final = 300.0

MATRIX_WEIGHTS: Final = 4 * 2**20
"""Weights of each test matrix: its rows are ``MATRIX_WEIGHTS / columns``."""

DEFAULT_COLUMNS: Final = 2048
"""Row length (``ne0``) timed when the caller names only a type."""

STREAM_BYTES: Final = 96 * 2**20
"""Least weights per graph below ``LARGE_BATCH`` tokens: more than a desktop CPU's
last-level cache, so the weights come from RAM as a model's do."""

STREAM_CACHE_MULTIPLE: Final = 4
"""Below ``LARGE_BATCH`` tokens a graph streams this many times the last-level cache (a
server CPU's, 100–500 MiB, holds 96 MiB: its rounds then warm up and time the cache)."""

MAX_STREAM_BYTES: Final = 3 * 2**29
"""At most 1.5 GiB of test weights (and at most a quarter of the available memory)."""

LARGE_BATCH: Final = 32
"""From this many tokens on a product reads each weight for many tokens: twice the
last-level cache suffices (an AMX or wide-SIMD CPU is still bandwidth-bound at 64)."""

COMPUTE_BATCH: Final = 256
"""From this many tokens on a product is compute-bound: one or two matrices suffice."""

ROUNDS: Final = 5


ATTENTION_KV: Final = 4096
"""Cached tokens of the attention test (a long chat)."""

ATTENTION_HEADS: Final = 8


@dataclass(frozen=True, slots=True)
class KernelRequest:
    """What the child times (picklable): ggml type names as ``gguf`` spells them;
    ``attention`` as (cache type, head size) pairs, timed for ``attention_tokens``."""

    shapes: tuple[tuple[str, int], ...]
    """(weight type, row length ``ne0``): a product's cost per weight depends on both (a
    short row pays the per-row work of each dot product more often)."""
    n_tokens: tuple[int, ...]
    n_threads: int
    repack: tuple[str, ...] = ()
    rounds: int = ROUNDS
    attention: tuple[tuple[str, int], ...] = ()
    attention_tokens: tuple[int, ...] = (1, 8, 512)
    clock: str = "wall"
    """``wall`` (what a user waits), or ``cpu``: the process's CPU time over its threads,
    which other work on shared cores does not inflate (it leaves out the threads' waits)."""
    extra_buffers: bool = True
    """Weights in llama.cpp's AMX or CPU_REPACK buffer where a loaded model's would be;
    False: the plain CPU buffer for every type (``--no-repack``)."""
    stream_bytes: int = STREAM_BYTES
    """Weights per graph below ``LARGE_BATCH`` tokens (:func:`stream_plan`)."""
    cache_bytes: int = 0
    """The last-level cache: graphs of ``LARGE_BATCH``…``COMPUTE_BATCH`` tokens read twice
    as much (0: unknown, one or two matrices)."""


def stream_plan(cache_bytes: int | None, available_bytes: int | None) -> int:
    """Return the weights per graph of the few-token products on a CPU whose last-level cache
    is ``cache_bytes`` with ``available_bytes`` of free memory (either ``None``: unknown).

    ``STREAM_CACHE_MULTIPLE`` times the cache, at least ``STREAM_BYTES``, at most
    ``MAX_STREAM_BYTES`` and a quarter of the available memory, but never under
    ``STREAM_BYTES`` (what every earlier timing used).
    """
    want = STREAM_CACHE_MULTIPLE * cache_bytes if cache_bytes else STREAM_BYTES
    cap = MAX_STREAM_BYTES
    if available_bytes is not None:
        cap = min(cap, available_bytes // 4)
    return max(STREAM_BYTES, min(want, cap))


def matrices_for(n_tokens: int, n_stream: int, item_bytes: int, cache_bytes: int) -> int:
    """Return how many of ``n_stream`` matrices (or attention layers) of ``item_bytes`` each
    one graph of ``n_tokens`` tokens uses (see the module's first point)."""
    if n_tokens < LARGE_BATCH:
        return n_stream
    if n_tokens < COMPUTE_BATCH and cache_bytes > 0:
        return min(n_stream, max(2, math.ceil(2 * cache_bytes / max(1, item_bytes))))
    return max(1, min(2, n_stream))


# --- the child ----------------------------------------------------------------------


class _InitParams(ctypes.Structure):
    # ggml.h: struct ggml_init_params { size_t mem_size; void * mem_buffer; bool no_alloc; }
    _fields_ = [
        ("mem_size", ctypes.c_size_t),
        ("mem_buffer", ctypes.c_void_p),
        ("no_alloc", ctypes.c_bool),
    ]


class _Ggml:
    """The ggml functions the benchmark calls (child only)."""

    def __init__(self) -> None:
        from llama_cpp import llama_cpp as bindings
        from llama_cpp._ctypes_extensions import load_shared_library

        libs = []
        for name in ("ggml-base", "ggml-cpu", "ggml"):
            try:
                libs.append(load_shared_library(name, bindings._base_path))
            except (RuntimeError, OSError, FileNotFoundError):
                continue
        vp, sz, i64, i32 = ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int64, ctypes.c_int

        def fn(name: str, restype: Any, argtypes: list[Any]) -> Any:
            for lib in libs:
                f = getattr(lib, name, None)
                if f is not None:
                    f.restype, f.argtypes = restype, argtypes
                    return f
            raise ChildFailure(
                f"the ggml library of llama-cpp-python has no {name}()",
                error=EngineUnsupportedError,
            )

        self.init = fn("ggml_init", vp, [_InitParams])
        self.free = fn("ggml_free", None, [vp])
        self.new_tensor_2d = fn("ggml_new_tensor_2d", vp, [vp, i32, i64, i64])
        self.new_tensor_3d = fn("ggml_new_tensor_3d", vp, [vp, i32, i64, i64, i64])
        self.flash_attn_ext = fn(
            "ggml_flash_attn_ext",
            vp,
            [vp, vp, vp, vp, vp, ctypes.c_float, ctypes.c_float, ctypes.c_float],
        )
        self.nbytes = fn("ggml_nbytes", sz, [vp])
        self.mul_mat = fn("ggml_mul_mat", vp, [vp, vp, vp])
        self.scale = fn("ggml_scale", vp, [vp, vp, ctypes.c_float])
        self.new_graph_custom = fn("ggml_new_graph_custom", vp, [vp, sz, ctypes.c_bool])
        self.build_forward_expand = fn("ggml_build_forward_expand", None, [vp, vp])
        self.tensor_overhead = fn("ggml_tensor_overhead", sz, [])
        self.graph_overhead_custom = fn("ggml_graph_overhead_custom", sz, [sz, ctypes.c_bool])
        self.row_size = fn("ggml_row_size", sz, [i32, i64])
        self.requires_imatrix = fn("ggml_quantize_requires_imatrix", ctypes.c_bool, [i32])
        self.quantize_chunk = fn("ggml_quantize_chunk", sz, [i32, vp, vp, i64, i64, i64, vp])
        self.cpu_init = fn("ggml_backend_cpu_init", vp, [])
        self.cpu_set_n_threads = fn("ggml_backend_cpu_set_n_threads", None, [vp, i32])
        self.backend_free = fn("ggml_backend_free", None, [vp])
        self.alloc_from_buft = fn("ggml_backend_alloc_ctx_tensors_from_buft", vp, [vp, vp])
        self.alloc_ctx_tensors = fn("ggml_backend_alloc_ctx_tensors", vp, [vp, vp])
        self.buffer_free = fn("ggml_backend_buffer_free", None, [vp])
        self.tensor_set = fn("ggml_backend_tensor_set", None, [vp, vp, sz, sz])
        self.graph_compute = fn("ggml_backend_graph_compute", i32, [vp, vp])
        self.dev_by_type = fn("ggml_backend_dev_by_type", vp, [i32])
        self.dev_buffer_type = fn("ggml_backend_dev_buffer_type", vp, [vp])
        self.dev_backend_reg = fn("ggml_backend_dev_backend_reg", vp, [vp])
        self.reg_proc = fn("ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p])
        self.buft_name = fn("ggml_backend_buft_name", ctypes.c_char_p, [vp])

    def context(self, n_tensors: int, graph_size: int = 0) -> Any:
        size = n_tensors * self.tensor_overhead() + 1024
        if graph_size:
            size += self.graph_overhead_custom(graph_size, False)
        ctx = self.init(_InitParams(size, None, True))
        if not ctx:
            raise ChildFailure("ggml_init failed")
        return ctx

    def buffer_types(self) -> dict[str, Any]:
        """Return the CPU device's buffer types by name (``CPU``, ``CPU_REPACK`` …)."""
        dev = self.dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
        found = {}
        default = self.dev_buffer_type(dev)
        found[(self.buft_name(default) or b"").decode()] = default
        proc = self.reg_proc(self.dev_backend_reg(dev), b"ggml_backend_dev_get_extra_bufts")
        if proc:
            get = ctypes.CFUNCTYPE(ctypes.POINTER(ctypes.c_void_p), ctypes.c_void_p)(proc)
            arr = get(dev)
            i = 0
            while arr and arr[i]:
                found[(self.buft_name(arr[i]) or b"").decode()] = arr[i]
                i += 1
        return found


def _type_id(name: str) -> int:
    from app.model.ggml import GGML_TYPES

    for t in GGML_TYPES.values():
        if t.name.lower() == name.lower():
            return t.id
    raise ChildFailure(f"unknown ggml type {name!r}", error=EngineUnsupportedError)


def _matrix_rows(cols: int) -> int:
    """Rows of a test matrix ``cols`` wide: about MATRIX_WEIGHTS weights, a multiple of 32
    (CPU_REPACK interleaves 8 rows; the AMX buffer takes multiples of 32)."""
    return max(64, MATRIX_WEIGHTS // cols // 32 * 32)


def _weights(g: _Ggml, type_id: int, cols: int, rng: Any) -> bytes:
    """Return one matrix of random weights quantized to ``type_id`` (llama.cpp's quantizer)."""
    import numpy as np

    rows = _matrix_rows(cols)
    src = rng.standard_normal((rows, cols), dtype=np.float32) * 0.02
    size = g.row_size(type_id, cols) * rows
    dst = ctypes.create_string_buffer(size)
    imatrix = None
    if g.requires_imatrix(type_id):
        ones = np.ones(cols, dtype=np.float32)
        imatrix = ones.ctypes.data_as(ctypes.c_void_p)
    done = g.quantize_chunk(
        type_id, src.ctypes.data_as(ctypes.c_void_p), dst, 0, rows, cols, imatrix
    )
    assert done == size, f"ggml_quantize_chunk wrote {done} bytes, {size} expected"
    return dst.raw


_CLOCK: list[tuple[str, int]] = [("wall", 1)]
"""The child's clock: ``wall``, or ``cpu`` (the process's CPU time over its threads)."""


def clock_s() -> float:
    """Return the child's clock in seconds (see :data:`_CLOCK`)."""
    kind, n_threads = _CLOCK[0]
    if kind == "cpu":
        return time.process_time() / n_threads
    return time.perf_counter()


def _time_graph(g: _Ggml, backend: Any, graph: Any, rounds: int) -> list[float]:
    if g.graph_compute(backend, graph) != 0:  # warm-up, untimed
        raise ChildFailure("ggml_backend_graph_compute failed")
    out = []
    for _ in range(rounds):
        t0 = clock_s()
        g.graph_compute(backend, graph)
        out.append(clock_s() - t0)
    return out


def _time_type(
    g: _Ggml,
    backend: Any,
    buft: Any,
    type_name: str,
    cols: int,
    n_tokens: Sequence[int],
    rounds: int,
    rng: Any,
    stream_bytes: int = STREAM_BYTES,
    cache_bytes: int = 0,
) -> list[tuple[int, list[float]]]:
    """Return per token count the seconds per weight of each round."""
    import numpy as np

    tid = _type_id(type_name)
    rows = _matrix_rows(cols)
    data = _weights(g, tid, cols, rng)
    n_stream = max(1, math.ceil(stream_bytes / len(data)))
    results = []
    wctx = g.context(n_stream)
    mats = [g.new_tensor_2d(wctx, tid, cols, rows) for _ in range(n_stream)]
    wbuf = g.alloc_from_buft(wctx, buft)
    if not wbuf:
        raise ChildFailure(f"could not allocate {n_stream} {type_name} matrices")
    try:
        for w in mats:
            g.tensor_set(w, data, 0, len(data))
        for n in n_tokens:
            used = mats[: matrices_for(n, n_stream, len(data), cache_bytes)]
            xctx = g.context(1)
            x = g.new_tensor_2d(xctx, 0, cols, n)  # GGML_TYPE_F32 activations
            xbuf = g.alloc_ctx_tensors(xctx, backend)
            act = (rng.standard_normal((n, cols), dtype=np.float32)).tobytes()
            g.tensor_set(x, act, 0, len(act))
            gctx = g.context(len(used), 4 * len(used) + 16)
            graph = g.new_graph_custom(gctx, 4 * len(used) + 16, False)
            for w in used:
                g.build_forward_expand(graph, g.mul_mat(gctx, w, x))
            ybuf = g.alloc_ctx_tensors(gctx, backend)
            try:
                secs = _time_graph(g, backend, graph, rounds)
            finally:
                g.buffer_free(ybuf)
                g.free(gctx)
                g.buffer_free(xbuf)
                g.free(xctx)
            weights = len(used) * cols * rows
            results.append((n, [s / weights for s in secs]))
    finally:
        g.buffer_free(wbuf)
        g.free(wctx)
    return results


def _time_attention(
    g: _Ggml,
    backend: Any,
    kv_type: str,
    head_dim: int,
    n_tokens: Sequence[int],
    rounds: int,
    stream_bytes: int = STREAM_BYTES,
    cache_bytes: int = 0,
) -> list[AttentionTiming]:
    """Time ``ggml_flash_attn_ext`` over ``ATTENTION_KV`` cells of ``kv_type``, one layer
    per graph node, enough layers that the cache streams from RAM (:func:`matrices_for`)."""
    import numpy as np

    tid = _type_id(kv_type)
    kv_bytes = 2 * g.row_size(tid, head_dim) * ATTENTION_KV * ATTENTION_HEADS
    n_layers = max(1, math.ceil(stream_bytes / kv_bytes))
    kctx = g.context(2 * n_layers)
    ks = [
        g.new_tensor_3d(kctx, tid, head_dim, ATTENTION_KV, ATTENTION_HEADS) for _ in range(n_layers)
    ]
    vs = [
        g.new_tensor_3d(kctx, tid, head_dim, ATTENTION_KV, ATTENTION_HEADS) for _ in range(n_layers)
    ]
    kbuf = g.alloc_ctx_tensors(kctx, backend)
    out = []
    try:
        rows = ATTENTION_KV * ATTENTION_HEADS
        src = np.random.default_rng(3).standard_normal((rows, head_dim), dtype=np.float32)
        size = g.row_size(tid, head_dim) * rows
        blob = ctypes.create_string_buffer(size)
        if kv_type.lower() in ("f16",):
            blob.raw = src.astype(np.float16).tobytes()
        elif kv_type.lower() == "f32":
            blob.raw = src.tobytes()
        else:
            g.quantize_chunk(
                tid, src.ctypes.data_as(ctypes.c_void_p), blob, 0, rows, head_dim, None
            )
        for t in (*ks, *vs):
            g.tensor_set(t, blob.raw, 0, size)
        for n in n_tokens:
            used = matrices_for(n, n_layers, kv_bytes, cache_bytes)
            qctx = g.context(used)
            qs = [g.new_tensor_3d(qctx, 0, head_dim, n, ATTENTION_HEADS) for _ in range(used)]
            qbuf = g.alloc_ctx_tensors(qctx, backend)
            q = np.random.default_rng(5).standard_normal(head_dim * n * ATTENTION_HEADS)
            qb = q.astype(np.float32).tobytes()
            for t in qs:
                g.tensor_set(t, qb, 0, len(qb))
            gctx = g.context(used, 4 * used + 16)
            graph = g.new_graph_custom(gctx, 4 * used + 16, False)
            scale = 1.0 / math.sqrt(head_dim)
            for i in range(used):
                g.build_forward_expand(
                    graph, g.flash_attn_ext(gctx, qs[i], ks[i], vs[i], None, scale, 0.0, 0.0)
                )
            ybuf = g.alloc_ctx_tensors(gctx, backend)
            try:
                secs = _time_graph(g, backend, graph, rounds)
            finally:
                g.buffer_free(ybuf)
                g.free(gctx)
                g.buffer_free(qbuf)
                g.free(qctx)
            elements = used * n * ATTENTION_HEADS * ATTENTION_KV * head_dim
            out.append(
                AttentionTiming(kv_type, head_dim, n, ATTENTION_KV, min(secs) / elements * 1e9)
            )
    finally:
        g.buffer_free(kbuf)
        g.free(kctx)
    return out


OVERHEAD_LAYERS: Final = (2, 24)
"""Layer counts of the two tiny models whose decode time gives the cost per graph node."""

OVERHEAD_STEPS: Final = 60


def write_probe_model(path: str, n_layer: int, n_embd: int = 64, n_ff: int = 128) -> None:
    """Write a tiny Llama (F32, ``n_embd`` wide, a 259-token byte vocabulary) to ``path``.

    Its matrices are so small that decoding it costs what llama.cpp spends around the
    kernels: building and scheduling the graph, and the threads meeting after each node.
    """
    import numpy as np
    from gguf import GGUFWriter, TokenType

    w = GGUFWriter(path, "llama")
    w.add_name("ggtune overhead probe")
    w.add_context_length(4096)
    w.add_embedding_length(n_embd)
    w.add_block_count(n_layer)
    w.add_feed_forward_length(n_ff)
    w.add_head_count(4)
    w.add_head_count_kv(4)
    w.add_layer_norm_rms_eps(1e-5)
    w.add_rope_freq_base(10000.0)
    w.add_file_type(0)
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{i:02X}>" for i in range(256)]
    w.add_tokenizer_model("llama")
    w.add_token_list(tokens)
    w.add_token_scores([0.0] * len(tokens))
    specials = [TokenType.UNKNOWN, TokenType.CONTROL, TokenType.CONTROL]
    w.add_token_types([int(t) for t in specials] + [int(TokenType.BYTE)] * 256)
    w.add_bos_token_id(1)
    w.add_eos_token_id(2)
    w.add_unk_token_id(0)
    rng = np.random.default_rng(0)

    def tensor(name: str, *ne: int) -> None:  # ggml order (columns first), numpy reversed
        w.add_tensor(name, (rng.standard_normal(ne[::-1]) * 0.02).astype(np.float32))

    tensor("token_embd.weight", n_embd, len(tokens))
    tensor("output_norm.weight", n_embd)
    tensor("output.weight", n_embd, len(tokens))
    for i in range(n_layer):
        b = f"blk.{i}."
        tensor(b + "attn_norm.weight", n_embd)
        for name in ("attn_q", "attn_k", "attn_v", "attn_output"):
            tensor(b + name + ".weight", n_embd, n_embd)
        tensor(b + "ffn_norm.weight", n_embd)
        tensor(b + "ffn_gate.weight", n_embd, n_ff)
        tensor(b + "ffn_up.weight", n_embd, n_ff)
        tensor(b + "ffn_down.weight", n_ff, n_embd)
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


class _LogCapture(ChildChannel):
    """A channel that also keeps the log lines (the probe reads its node count there)."""

    def __init__(self, inner: ChildChannel) -> None:
        self.inner = inner
        self.lines: list[str] = []

    def log(self, level: int, text: str) -> None:
        self.lines.append(text)
        self.inner.log(level, text)

    def step(self, label: str) -> None:
        self.inner.step(label)

    def send(self, item: object) -> None:
        self.inner.send(item)


_NODES = re.compile(r"graph: nodes = (\d+)")


def _decode_overhead(channel: ChildChannel, n_threads: int) -> tuple[float, float, int]:
    """Return (µs per node, µs per decode outside the nodes, nodes per layer) from decoding
    two tiny models one token at a time (the fastest step: other work on the cores only ever
    adds time)."""
    from app.settings import Settings
    from runner.dry_run import ModelLoad, context_params, load_model, open_engine

    capture = _LogCapture(channel)
    engine = open_engine(capture)
    b = engine.bindings
    progress = b.llama_progress_callback(lambda _fraction, _data: True)
    found: list[tuple[int, float]] = []
    with tempfile.TemporaryDirectory(prefix="ggtune-probe-") as tmp:
        for n_layer in OVERHEAD_LAYERS:
            path = os.path.join(tmp, f"probe-{n_layer}.gguf")
            write_probe_model(path, n_layer)
            settings = Settings(n_ctx=512, n_batch=512, n_ubatch=512, flash_attn="auto")
            keep: list[object] = []
            model = load_model(
                engine, capture, path, ModelLoad.from_settings(settings, "alloc"), keep, progress
            )
            capture.lines.clear()
            cparams = context_params(b, settings)
            cparams.n_threads = cparams.n_threads_batch = n_threads
            ctx = b.llama_init_from_model(model, cparams)
            engine.forwarder.flush()
            nodes = [int(m.group(1)) for line in capture.lines if (m := _NODES.search(line))]
            batch = b.llama_batch_init(1, 0, 1)
            try:
                if not ctx or not nodes:
                    raise ChildFailure("the overhead probe model did not start")
                secs = []
                for pos in range(OVERHEAD_STEPS + 4):
                    batch.n_tokens = 1
                    batch.token[0] = 3 + pos % 256
                    batch.pos[0] = pos
                    batch.n_seq_id[0] = 1
                    batch.seq_id[0][0] = 0
                    batch.logits[0] = 1
                    t0 = clock_s()
                    if b.llama_decode(ctx, batch) != 0:
                        raise ChildFailure("llama_decode failed on the overhead probe model")
                    b.llama_synchronize(ctx)
                    if pos >= 4:
                        secs.append(clock_s() - t0)
                found.append((nodes[-1], min(secs)))
            finally:
                b.llama_batch_free(batch)
                if ctx:
                    b.llama_free(ctx)
                b.llama_model_free(model)
                del keep
    (n0, t0), (n1, t1) = found
    per_node = max(0.0, (t1 - t0) / (n1 - n0))
    base = max(0.0, t0 - n0 * per_node)
    per_layer = round((n1 - n0) / (OVERHEAD_LAYERS[1] - OVERHEAD_LAYERS[0]))
    return per_node * 1e6, base * 1e6, per_layer


def kernel_child(request: KernelRequest, channel: ChildChannel) -> None:
    """Time every type of ``request`` in this (child) process; send one :class:`KernelRates`."""
    # OpenMP's wait policy: the engine's default, as in a model (WAIT_POLICY_NOTE)
    import numpy as np

    from runner.load_test import read_loadavg

    t_start = time.perf_counter()
    _CLOCK[0] = (request.clock, request.n_threads)
    channel.step("starting ggml")
    g = _Ggml()
    backend = g.cpu_init()
    if not backend:
        raise ChildFailure("ggml_backend_cpu_init failed", error=EngineUnsupportedError)
    try:
        g.cpu_set_n_threads(backend, request.n_threads)
        bufts = g.buffer_types()
        cpu = bufts.get("CPU") or next(iter(bufts.values()))
        repack = bufts.get("CPU_REPACK") if request.extra_buffers else None
        amx = bufts.get("AMX") if request.extra_buffers else None
        rng = np.random.default_rng(7)
        timings = []
        for name, cols in request.shapes:
            channel.step(f"timing {name} matrix products {cols} wide")
            # the buffer a loaded model's weight of this type and width lands in: AMX first
            # where this CPU has it and takes the shape, then CPU_REPACK (ggml-cpu.cpp
            # ggml_backend_cpu_get_extra_buffer_types)
            use_amx = amx is not None and amx_takes(name, cols, _matrix_rows(cols))
            use_repack = (
                not use_amx
                and repack is not None
                and name.lower() in {r.lower() for r in request.repack}
            )
            buft = amx if use_amx else repack if use_repack else cpu
            for n, per_weight in _time_type(
                g, backend, buft, name, cols, request.n_tokens, request.rounds, rng,
                request.stream_bytes, request.cache_bytes,
            ):  # fmt: skip
                ns = tuple(s * 1e9 for s in per_weight)
                timings.append(
                    KernelTiming(
                        name, n, min(ns), ns, use_repack or use_amx, cols,
                        buffer="AMX" if use_amx else "CPU_REPACK" if use_repack else "CPU",
                    )
                )  # fmt: skip
        attention = []
        for kv_type, head_dim in request.attention:
            channel.step(f"timing attention over a {kv_type} cache")
            attention += _time_attention(
                g, backend, kv_type, head_dim, request.attention_tokens, request.rounds,
                request.stream_bytes, request.cache_bytes,
            )  # fmt: skip
        channel.step("timing llama.cpp's cost per graph node")
        node_us, decode_us, nodes_per_layer = _decode_overhead(channel, request.n_threads)
    finally:
        g.backend_free(backend)
    channel.send(
        KernelRates(
            n_threads=request.n_threads,
            timings=tuple(timings),
            attention=tuple(attention),
            node_us=node_us,
            decode_us=decode_us,
            probe_nodes_per_layer=nodes_per_layer,
            clock=request.clock,
            measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            buffer_types=tuple(bufts),
            seconds=time.perf_counter() - t_start,
            loadavg=read_loadavg(),
            stream_bytes=request.stream_bytes,
            cache_bytes=request.cache_bytes,
        )
    )


def kernel_bench(
    shapes: Sequence[tuple[str, int] | str],
    *,
    n_tokens: Sequence[int] = (1, 2, 4, 8, 512),
    n_threads: int,
    repack: Sequence[str] = (),
    attention: Sequence[tuple[str, int]] = (),
    attention_tokens: Sequence[int] = (1, 8, 512),
    rounds: int = ROUNDS,
    clock: str = "wall",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_cancel_ready: Callable[[Callable[[], None]], None] | None = None,
    extra_buffers: bool = True,
    cache_bytes: int | None = None,
    available_bytes: int | None = None,
) -> KernelRates:
    """Time llama.cpp's matrix products on this CPU for ``shapes``: (weight type, row length)
    pairs such as ``("Q4_K", 2048)``, or a type alone (``"F16"``: rows of 2048).

    ``repack`` names the types llama.cpp repacks on this CPU (their weights then sit in the
    ``CPU_REPACK`` buffer, as in a loaded model: :func:`app.predict.estimate.
    repack_type_names`); on a CPU with AMX the types and widths its buffer takes sit there
    (:func:`app.predict.estimate.amx_takes`). ``extra_buffers`` False uses neither.
    ``on_cancel_ready`` receives a function that kills the child (any thread may call it;
    the run then raises EngineCancelledError). ``cache_bytes`` and ``available_bytes``
    size the streamed weights (:func:`stream_plan`; None: this machine's, from
    :func:`app.hardware.host.last_level_cache_bytes` and the host probe). Raises
    :class:`~app.errors.EngineError` subclasses when the child fails.
    """
    assert n_threads >= 1, f"n_threads must be ≥ 1, got {n_threads}"
    assert all(n >= 1 for n in n_tokens), f"token counts must be ≥ 1, got {n_tokens}"
    assert clock in ("wall", "cpu"), f"clock must be wall or cpu, got {clock!r}"
    pairs = tuple((s, DEFAULT_COLUMNS) if isinstance(s, str) else s for s in shapes)
    if cache_bytes is None or available_bytes is None:
        from app.hardware.host import last_level_cache_bytes, probe_host

        if cache_bytes is None:
            cache_bytes = last_level_cache_bytes() or 0
        if available_bytes is None:
            available_bytes = probe_host().ram_available_bytes
    request = KernelRequest(
        pairs,
        tuple(n_tokens),
        n_threads,
        tuple(repack),
        rounds,
        tuple(attention),
        tuple(attention_tokens),
        clock,
        extra_buffers,
        stream_plan(cache_bytes, available_bytes),
        cache_bytes,
    )
    worker = EngineWorker(kernel_child, request, timeout_s=timeout_s)
    if on_cancel_ready is not None:
        on_cancel_ready(worker.cancel)
    run = worker.run()
    for e in run.events:
        if isinstance(e, ItemEvent) and isinstance(e.item, KernelRates):
            return e.item
    raise EngineError("the kernel benchmark ended without results")


DEFAULT_TOKENS: Final = (1, 2, 4, 8, 16, 64, 512)
"""Token counts timed for each weight type: one user to eight decoding together, short
prompts, and a full micro-batch of prefill."""


def ensure_rates(
    needs: KernelNeeds,
    *,
    n_threads: int,
    rates: KernelRates | None = None,
    cache_dir: Path | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_cancel_ready: Callable[[Callable[[], None]], None] | None = None,
) -> KernelRates:
    """Return this machine's kernel rates covering ``needs``, timing what is missing.

    ``rates`` are the ones already known (the cache's, see
    :func:`app.hardware.kernels.cached_rates`); whatever they lack is timed now in a child
    process (:func:`kernel_bench`, a few seconds per type) and merged into the cache.
    """
    from app.hardware.bandwidth import machine_key
    from app.hardware.host import probe_host

    host = probe_host()
    key = machine_key(host)
    if rates is None:
        rates = cached_rates(key, n_threads, cache_dir=cache_dir)
    missing = needs.missing(rates)
    if rates is not None and not missing:
        return rates
    measured = kernel_bench(
        sorted(missing.shapes),
        n_tokens=DEFAULT_TOKENS,
        n_threads=n_threads,
        repack=sorted(needs.repack),
        attention=sorted(missing.attention),
        attention_tokens=DEFAULT_TOKENS,
        rounds=3,
        timeout_s=timeout_s,
        on_cancel_ready=on_cancel_ready,
        extra_buffers=needs.extra_buffers,
        available_bytes=host.ram_available_bytes,
    )
    return store_rates(dataclasses.replace(measured, machine_key=key), cache_dir=cache_dir)
