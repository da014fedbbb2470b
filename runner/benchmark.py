"""Load a model on the real engine, in a child process, and measure it like llama-bench.

:func:`benchmark` (or :class:`Benchmark`, cancellable) runs one child process per run
(``spawn``, through :class:`~runner.worker.EngineWorker`). The child loads the model with
the low-level llama.cpp API for the given :class:`~app.settings.Settings` (the same
parameter mapping as the dry run, :mod:`runner.dry_run`), creates the context, and then:

1. warms up (one batch and one token, untimed);
2. per repetition, like llama-bench: prompt processing (``pp``: ``n_prompt`` random
   tokens through ``llama_decode`` in batches of ``n_batch``) and decoding (``tg``:
   ``n_gen`` tokens one at a time), from an empty cache and again after ``depth`` cached
   tokens (filled untimed, as ``llama-bench -d``);
3. time to first token: a chat-sized prompt of real text from an empty cache until the
   first new token is picked;

while a sampler thread reads the process's resident memory (file-backed and anonymous)
every 20 ms and, where NVML is present, the VRAM the process holds on each NVIDIA GPU.

The parent sees the run as it happens through ``on_progress``: :class:`~app.measured.bench_result.
LoadProgress` (llama.cpp's progress callback), :class:`~app.measured.bench_result.Loaded` (load
time and llama.cpp's buffer sizes, parsed from its log), :class:`~app.measured.bench_result.
BenchStep` per timed step; the result is a :class:`~app.measured.bench_result.BenchResult`. A
failure raises an :class:`~app.errors.EngineError` subclass with the cause, llama.cpp's
last log lines and the exit code or signal; the parent stays up and can run again.

Example::

    from app.measured.bench_result import BenchPlan
    from runner.benchmark import benchmark

    result = benchmark("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096), BenchPlan.quick(),
                       on_progress=print)
    result.speed("tg").tok_per_s.format()          # '61.2 ± 0.4'
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import platform
import random
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from app.errors import EngineError, EngineLoadError, EngineUnsupportedError, ModelFileNotFoundError
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
    BenchResult,
    BenchStep,
    GpuMemory,
    Loaded,
    LoadProgress,
    MachineInfo,
    MemoryMeasured,
    MemorySnapshot,
    SpeedFigure,
    SpeedKind,
    TtftFigure,
)
from app.measured.engine_report import EngineReport
from app.settings import Settings
from runner.dry_run import (
    LOAD_MODE_MMAP,
    MAX_DEVICES,
    MAX_TENSOR_BUFT_OVERRIDES,
    ContextFacts,
    EngineFacts,
    ModelFacts,
    ModelLoad,
    build_report,
    check_rpc_endpoint,
    context_params,
    load_model,
    open_engine,
    probe_rpc_servers,
)
from runner.worker import ChildChannel, ChildFailure, EngineWorker, Event, ItemEvent, LogEvent

DEFAULT_TIMEOUT_S: Final = 300.0
"""Per step (starting, loading, the context, each timed test)."""

LOAD_MODE_MLOCK: Final = 2
LOAD_MODE_MMAP_MLOCK: Final = 3
"""``enum llama_load_mode`` (llama.h): mlock without / with mmap."""

SAMPLE_INTERVAL_S: Final = 0.02

WAIT_POLICY_NOTE: Final = (
    "OpenMP's wait policy is the engine's own default, as llama-server runs it (libgomp "
    "spins briefly at each barrier); a user's OMP_WAIT_POLICY wins"
)
"""Why the children leave ``OMP_WAIT_POLICY`` alone. ggml's barrier between two graph
nodes is ``#pragma omp barrier`` in an OpenMP build (``ggml-cpu.c``, ``ggml_barrier``), so
``passive`` (which earlier children set) put a thread to sleep ~600 times per token of a
135M model: on the 2-core Xeon of docs/benchmarks.md the demo model decoded at 28.4 tok/s
with it and 49.8 without, at 2 threads, where llama-server decodes at the latter."""

CHAT_TEXT: Final = (
    "I have a small garden behind my flat and would like to grow tomatoes, basil and "
    "peppers this summer. The plot gets about six hours of sun, the soil is heavy clay, "
    "and I can water every evening. What should I plant first, how far apart, and what "
    "should I add to the soil so the roots do not drown after a storm? "
)
"""Real text for the time-to-first-token prompt (repeated up to the plan's length)."""


def physical_cores() -> int:
    """Return the number of physical CPU cores (llama.cpp's best thread count), ≥ 1."""
    import psutil

    return max(1, psutil.cpu_count(logical=False) or os.cpu_count() or 1)


@dataclass(frozen=True, slots=True)
class BenchRequest:
    """What the child does (picklable). ``n_threads`` for both decoding and batches."""

    model_path: str
    settings: Settings
    plan: BenchPlan
    n_threads: int
    use_mlock: bool = False
    seed: int = 1234
    rpc_servers: tuple[str, ...] = ()


# --- messages child -> parent (picklable) ---------------------------------------------


@dataclass(frozen=True, slots=True)
class _ChildLoaded:
    load_s: float
    context_s: float
    facts: ContextFacts


@dataclass(frozen=True, slots=True)
class _ChildResult:
    speeds: tuple[SpeedFigure, ...]
    ttft: TtftFigure
    memory: MemoryMeasured
    machine: MachineInfo
    n_threads: int


# --- the child: memory --------------------------------------------------------------


def _status_kib(fields: tuple[str, ...]) -> dict[str, int] | None:
    """Read ``fields`` (kB) from /proc/self/status, or None where there is none."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            text = f.read()
    except OSError:
        return None
    found: dict[str, int] = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in fields:
            found[key] = int(value.split()[0]) * 1024
    return found


def memory_snapshot() -> MemorySnapshot:
    """Return this process's RSS, split into file-backed and anonymous where the OS can."""
    status = _status_kib(("VmRSS", "RssFile", "RssAnon"))
    if status and "VmRSS" in status:
        return MemorySnapshot(status["VmRSS"], status.get("RssFile"), status.get("RssAnon"))
    import psutil

    return MemorySnapshot(int(psutil.Process().memory_info().rss), None, None)


class _Nvml:
    """Per-process VRAM through NVML (nvidia-ml-py), when the driver library is there."""

    def __init__(self) -> None:
        self.note = ""
        self.handles: list[tuple[int, str, Any, int]] = []
        self.peak: dict[int, int] = {}
        try:
            import pynvml  # type: ignore[import-untyped, import-not-found, unused-ignore]

            pynvml.nvmlInit()
            for i in range(pynvml.nvmlDeviceGetCount()):
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                name = pynvml.nvmlDeviceGetName(h)
                total = int(pynvml.nvmlDeviceGetMemoryInfo(h).total)
                self.handles.append((i, name if isinstance(name, str) else name.decode(), h, total))
            self._nvml: Any = pynvml
            if not self.handles:
                self.note = "NVML sees no NVIDIA GPU"
        except ImportError:
            self.note = "VRAM not measured: nvidia-ml-py (pynvml) is not installed"
        except Exception as exc:  # NVMLError_LibraryNotFound, driver not loaded ...
            self.note = f"VRAM not measured: NVML unavailable ({type(exc).__name__})"

    def sample(self, pid: int) -> None:
        for index, _name, handle, _total in self.handles:
            try:
                procs = self._nvml.nvmlDeviceGetComputeRunningProcesses(handle)
            except Exception:
                continue
            used = sum(int(p.usedGpuMemory or 0) for p in procs if p.pid == pid)
            self.peak[index] = max(self.peak.get(index, 0), used)

    def results(self) -> tuple[GpuMemory, ...]:
        return tuple(
            GpuMemory(i, name, self.peak.get(i), total) for i, name, _h, total in self.handles
        )


class _MemorySampler:
    """Sample RSS every 20 ms (and VRAM every 10th time) in a thread; keep the peaks."""

    def __init__(self) -> None:
        self.peak_file = 0
        self.peak_anon = 0
        self.peak_rss = 0
        self.split = True
        self.nvml = _Nvml()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="memory-sampler", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def sample(self) -> None:
        snap = memory_snapshot()
        self.peak_rss = max(self.peak_rss, snap.rss_bytes)
        if snap.rss_file_bytes is None or snap.rss_anon_bytes is None:
            self.split = False
        else:
            self.peak_file = max(self.peak_file, snap.rss_file_bytes)
            self.peak_anon = max(self.peak_anon, snap.rss_anon_bytes)

    def _loop(self) -> None:
        pid = os.getpid()
        i = 0
        while not self._stop.wait(SAMPLE_INTERVAL_S):
            self.sample()
            if self.nvml.handles and i % 10 == 0:
                self.nvml.sample(pid)
            i += 1

    def stop(self, before: MemorySnapshot, loaded: MemorySnapshot) -> MemoryMeasured:
        self._stop.set()
        self._thread.join(1.0)
        self.sample()
        if self.nvml.handles:
            self.nvml.sample(os.getpid())
        hwm = _status_kib(("VmHWM",))
        peak = max(self.peak_rss, (hwm or {}).get("VmHWM", 0))
        return MemoryMeasured(
            before_load=before,
            loaded=loaded,
            peak_rss_bytes=peak,
            peak_rss_file_bytes=self.peak_file if self.split else None,
            peak_rss_anon_bytes=self.peak_anon if self.split else None,
            gpus=self.nvml.results(),
            gpu_note=self.nvml.note,
        )


def machine_info(facts: EngineFacts) -> MachineInfo:
    """Describe this machine: CPU model, cores, RAM, OS, the GPUs llama.cpp sees."""
    import psutil

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("model name", "Model", "Hardware") and value.strip():
                    cpu = value.strip()
                    break
    except OSError:
        pass
    return MachineInfo(
        cpu_model=cpu,
        physical_cores=physical_cores(),
        logical_cores=os.cpu_count() or 1,
        ram_bytes=int(psutil.virtual_memory().total),
        os=platform.platform(terse=True),
        gpus=tuple(d.description or d.name for d in facts.devices if d.type in ("gpu", "igpu")),
    )


# --- the child: decoding ------------------------------------------------------------


class _Decoder:
    """One sequence (id 0) on a context, fed through ``llama_decode`` with one batch."""

    def __init__(self, bindings: Any, ctx: Any, n_batch: int) -> None:
        self.b = bindings
        self.ctx = ctx
        self.n_batch = n_batch
        self.batch = bindings.llama_batch_init(n_batch, 0, 1)
        self.mem = bindings.llama_get_memory(ctx)
        self.pos = 0

    def free(self) -> None:
        self.b.llama_batch_free(self.batch)

    def clear(self) -> None:
        self.b.llama_memory_clear(self.mem, True)
        self.pos = 0

    def truncate(self, n_past: int) -> None:
        """Forget every position from ``n_past`` on (refill when the memory cannot)."""
        if n_past == 0:
            self.clear()
        elif n_past > self.pos or not self.b.llama_memory_seq_rm(self.mem, 0, n_past, -1):
            raise _Refill
        else:
            self.pos = n_past

    def decode(self, tokens: list[int], *, logits_last: bool = True) -> None:
        """Decode ``tokens`` after the current position, ``n_batch`` at a time."""
        batch = self.batch
        for start in range(0, len(tokens), self.n_batch):
            chunk = tokens[start : start + self.n_batch]
            batch.n_tokens = len(chunk)
            for i, tok in enumerate(chunk):
                batch.token[i] = tok
                batch.pos[i] = self.pos + i
                batch.n_seq_id[i] = 1
                batch.seq_id[i][0] = 0
                batch.logits[i] = 0
            if logits_last and start + len(chunk) == len(tokens):
                batch.logits[len(chunk) - 1] = 1
            rc = self.b.llama_decode(self.ctx, batch)
            if rc != 0:
                raise ChildFailure(
                    f"llama_decode returned {rc} at position {self.pos} "
                    "(1: no room in the KV cache, 2: aborted, <0: error)",
                    error=EngineError,
                )
            self.pos += len(chunk)
        self.b.llama_synchronize(self.ctx)


class _Refill(Exception):
    """The memory cannot forget part of a sequence (recurrent state): refill from empty."""


def _tokenize(bindings: Any, vocab: Any, text: str, n_max: int) -> list[int]:
    data = text.encode()
    buf = (ctypes.c_int32 * (len(data) + 8))()
    n = bindings.llama_tokenize(vocab, data, len(data), buf, len(buf), True, False)
    return list(buf[: max(0, min(n, n_max))])


def create_context(
    bindings: Any, model: Any, settings: Settings, n_threads: int, forwarder: Any
) -> tuple[Any, float, ContextFacts]:
    """Create the context of ``settings`` with ``n_threads`` for decode and batches; return
    it, the seconds it took and what llama.cpp made of it. Raise :class:`ChildFailure`
    (an :class:`~app.errors.EngineLoadError`) with llama.cpp's own reason when it refuses.
    The benchmark and the load test share it."""
    forwarder.errors.clear()
    cparams = context_params(bindings, settings)
    cparams.n_threads = n_threads
    cparams.n_threads_batch = n_threads
    t0 = time.perf_counter()
    ctx = bindings.llama_init_from_model(model, cparams)
    context_s = time.perf_counter() - t0
    forwarder.flush()
    if not ctx:
        why = f": {forwarder.errors[0]}" if forwarder.errors else ""
        raise ChildFailure(f"llama.cpp could not create the context{why}", error=EngineLoadError)
    facts = ContextFacts(
        index=0,
        n_ctx=bindings.llama_n_ctx(ctx),
        n_ctx_seq=bindings.llama_n_ctx_seq(ctx),
        n_seq_max=bindings.llama_n_seq_max(ctx),
        n_batch=bindings.llama_n_batch(ctx),
        n_ubatch=bindings.llama_n_ubatch(ctx),
    )
    return ctx, context_s, facts


def benchmark_child(request: BenchRequest, channel: ChildChannel) -> None:
    """Run ``request`` in this (child) process, reporting through ``channel``.

    Sends :class:`EngineFacts`, :class:`~app.measured.bench_result.LoadProgress` items,
    :class:`ModelFacts`, a loaded message, :class:`~app.measured.bench_result.BenchStep` items and
    the measurements; each load, the context and each timed step is a worker step.
    """
    # OMP_WAIT_POLICY is left as the user has it (WAIT_POLICY_NOTE): the engine's default
    # is what a runner gets. On cores other work keeps busy it decodes far slower (2.0 vs
    # 52.6 tok/s measured on two shared cores, docs/benchmarks.md) — as llama-server would.
    import numpy as np

    engine = open_engine(channel, request.rpc_servers)
    before = memory_snapshot()  # the interpreter and llama.cpp's libraries, no model yet
    sampler = _MemorySampler()
    sampler.start()
    bindings, forwarder = engine.bindings, engine.forwarder
    settings = request.settings
    last = [-1.0]

    def on_progress(fraction: float, _user_data: object) -> bool:
        # called per tensor; forward whole percents only
        if fraction >= 1.0 or fraction - last[0] >= 0.01:
            last[0] = fraction
            channel.send(LoadProgress(min(1.0, float(fraction))))
        return True

    progress = bindings.llama_progress_callback(on_progress)
    load = ModelLoad.from_settings(settings, "alloc")
    if request.use_mlock:
        mode = LOAD_MODE_MMAP_MLOCK if load.load_mode == LOAD_MODE_MMAP else LOAD_MODE_MLOCK
        load = dataclasses.replace(load, load_mode=mode)
    keep_alive: list[object] = []
    t0 = time.perf_counter()
    model = load_model(engine, channel, request.model_path, load, keep_alive, progress)
    load_s = time.perf_counter() - t0
    ctx = None
    decoder: _Decoder | None = None
    try:
        channel.step("creating the context")
        ctx, context_s, facts = create_context(
            bindings, model, settings, request.n_threads, forwarder
        )
        channel.send(_ChildLoaded(load_s, context_s, facts))
        loaded = memory_snapshot()

        vocab = bindings.llama_model_get_vocab(model)
        n_vocab = bindings.llama_vocab_n_tokens(vocab)
        rng = random.Random(request.seed)
        plan = request.plan
        # every test must fit one sequence's cells; the depth gives way first
        room = facts.n_ctx_seq - 1
        n_prompt = min(plan.n_prompt, room)
        n_gen = min(plan.n_gen, room)
        n_chat = min(plan.n_chat_prompt, room)
        depth = max(0, min(plan.depth, room - max(n_prompt, n_gen)))
        depths = (0, depth) if depth else (0,)
        total = 1 + plan.repetitions * (2 * len(depths) + 1)
        step = 0

        def begin(label: str) -> None:
            nonlocal step
            step += 1
            channel.step(label)
            channel.send(BenchStep(step, total, label))

        def tokens(n: int) -> list[int]:
            return [rng.randrange(n_vocab) for _ in range(n)]

        decoder = _Decoder(bindings, ctx, facts.n_batch)
        dec = decoder
        begin("warming up")
        dec.clear()
        dec.decode(tokens(min(n_prompt, facts.n_batch)))
        dec.decode(tokens(1))

        # All repetitions at depth 0, then the cache is filled once to ``depth`` and each
        # test at depth starts from there (positions past it are removed; llama-bench
        # refills per repetition, which leaves the same cache state and costs more).
        times: dict[tuple[SpeedKind, int], list[float]] = {}
        tests: tuple[tuple[SpeedKind, int], ...] = (("pp", n_prompt), ("tg", n_gen))
        for d in depths:
            for rep in range(plan.repetitions):
                for kind, n in tests:
                    begin(f"{kind}{n}{f' @ d{d}' if d else ''}, run {rep + 1}")
                    try:
                        dec.truncate(d)
                    except _Refill:
                        dec.clear()
                        dec.decode(tokens(d), logits_last=False)
                    batch = tokens(n)
                    t0 = time.perf_counter()
                    if kind == "pp":
                        dec.decode(batch)
                    else:
                        for tok in batch:
                            dec.decode([tok])
                    times.setdefault((kind, d), []).append(time.perf_counter() - t0)
        chat_tokens = _tokenize(bindings, vocab, CHAT_TEXT * (1 + n_chat // 40), n_chat)
        ttft: list[float] = []
        for rep in range(plan.repetitions):
            begin(f"time to first token ({len(chat_tokens)}-token prompt), run {rep + 1}")
            dec.clear()
            t0 = time.perf_counter()
            dec.decode(chat_tokens)
            logits = bindings.llama_get_logits_ith(ctx, -1)
            int(np.ctypeslib.as_array(logits, shape=(n_vocab,)).argmax())
            ttft.append(time.perf_counter() - t0)
        speeds = tuple(
            SpeedFigure(kind, n_prompt if kind == "pp" else n_gen, d, tuple(ts))
            for (kind, d), ts in times.items()
        )
        channel.send(
            _ChildResult(
                speeds=speeds,
                ttft=TtftFigure(len(chat_tokens), tuple(ttft)),
                memory=sampler.stop(before, loaded),
                machine=machine_info(engine.facts),
                n_threads=request.n_threads,
            )
        )
    finally:
        if decoder is not None:
            decoder.free()
        if ctx:
            bindings.llama_free(ctx)
        bindings.llama_model_free(model)
        forwarder.flush()
        del keep_alive


# --- the parent ---------------------------------------------------------------------


class Benchmark:
    """A cancellable benchmark run of one model with one settings; :meth:`run` blocks.

    ``cancel()`` may be called from any other thread: the child is gone within a second
    and :meth:`run` raises :class:`~app.errors.EngineCancelledError`. ``on_progress`` is
    called in the thread that called :meth:`run`, for each progress message as it arrives.
    ``n_threads`` ``None`` means the physical cores.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        settings: Settings,
        plan: BenchPlan,
        *,
        n_threads: int | None = None,
        use_mlock: bool = False,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_progress: Callable[[BenchProgress], None] | None = None,
        rpc_servers: Sequence[str] = (),
    ) -> None:
        if not os.path.isfile(model_path):
            raise ModelFileNotFoundError("no such model file", path=model_path)
        if len(settings.tensor_split) > MAX_DEVICES:
            raise EngineUnsupportedError(
                f"tensor split has {len(settings.tensor_split)} entries; llama.cpp takes at "
                f"most {MAX_DEVICES}"
            )
        if settings.n_cpu_moe > MAX_TENSOR_BUFT_OVERRIDES - 1:
            raise EngineUnsupportedError(
                f"n_cpu_moe={settings.n_cpu_moe} needs more tensor overrides than llama.cpp "
                f"takes ({MAX_TENSOR_BUFT_OVERRIDES})"
            )
        assert n_threads is None or n_threads >= 1, f"n_threads must be ≥ 1, got {n_threads}"
        self.request = BenchRequest(
            model_path=os.fspath(model_path),
            settings=settings,
            plan=plan,
            n_threads=n_threads or physical_cores(),
            use_mlock=use_mlock,
            rpc_servers=tuple(check_rpc_endpoint(e) for e in rpc_servers),
        )
        self._on_progress = on_progress
        self._log: list[str] = []
        self._engine: EngineFacts | None = None
        self._model: ModelFacts | None = None
        self._loaded: Loaded | None = None
        self._worker = EngineWorker(
            benchmark_child, self.request, timeout_s=timeout_s, on_event=self._on_event
        )

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._worker.pid

    def run(self) -> BenchResult:
        """Run the benchmark; return what it measured (raises EngineError subclasses)."""
        probe_rpc_servers(self.request.rpc_servers)
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        try:
            events = self._worker.run().events
        except EngineError:
            raise
        except BaseException:
            if self._worker.pid is not None:
                self._worker.cancel()  # e.g. KeyboardInterrupt in the parent: no orphan
            raise
        final = next(
            (
                e.item
                for e in events
                if isinstance(e, ItemEvent) and isinstance(e.item, _ChildResult)
            ),
            None,
        )
        if final is None or self._loaded is None:
            raise EngineError("the engine finished without reporting its measurements")
        return BenchResult(
            model_path=self.request.model_path,
            settings=self.request.settings,
            plan=self.request.plan,
            n_threads=final.n_threads,
            use_mlock=self.request.use_mlock,
            engine=self._loaded.report,
            load_s=self._loaded.load_s,
            context_s=self._loaded.context_s,
            speeds=final.speeds,
            ttft=final.ttft,
            memory=final.memory,
            machine=final.machine,
            started_at=started.isoformat(timespec="seconds"),
            duration_s=time.perf_counter() - t0,
        )

    def cancel(self) -> None:
        """Kill the child now; :meth:`run` raises EngineCancelledError."""
        self._worker.cancel()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, LogEvent):
            self._log.append(event.text)
            return
        if not isinstance(event, ItemEvent):
            return
        item = event.item
        progress: BenchProgress | None = None
        if isinstance(item, EngineFacts):
            self._engine = item
        elif isinstance(item, ModelFacts):
            self._model = item
        elif isinstance(item, LoadProgress | BenchStep):
            progress = item
        elif isinstance(item, _ChildLoaded):
            assert self._engine is not None, "engine facts come first"
            assert self._model is not None, "model facts come before the context"
            report: EngineReport = build_report(
                self.request.model_path,
                "alloc",
                self.request.settings,
                self._engine,
                self._model,
                item.facts,
                tuple(self._log),
            )
            self._loaded = progress = Loaded(item.load_s, item.context_s, report)
        if progress is not None and self._on_progress is not None:
            self._on_progress(progress)


def benchmark(
    model_path: str | os.PathLike[str],
    settings: Settings,
    plan: BenchPlan,
    *,
    n_threads: int | None = None,
    use_mlock: bool = False,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_progress: Callable[[BenchProgress], None] | None = None,
    rpc_servers: Sequence[str] = (),
) -> BenchResult:
    """Benchmark ``model_path`` with ``settings`` in one child process; see the module doc.

    ``timeout_s`` bounds each step. ``rpc_servers`` (``host:port`` of running
    ggml-rpc-servers) become devices RPC0, RPC1 … as with llama.cpp's ``--rpc``. Raises
    :class:`~app.errors.EngineError` subclasses (crashed, load failure, time-out,
    cancelled) and ``ModelFileNotFoundError``.
    """
    return Benchmark(
        model_path,
        settings,
        plan,
        n_threads=n_threads,
        use_mlock=use_mlock,
        timeout_s=timeout_s,
        on_progress=on_progress,
        rpc_servers=rpc_servers,
    ).run()
