"""What a benchmark run on the real engine measured, and how it compares with the estimate.

:func:`runner.benchmark.benchmark` loads the model with llama.cpp in a child process,
measures it and returns a :class:`BenchResult`; this module holds only frozen, picklable
data and pure functions over it, so ``app/`` and ``ui/`` use them without ``llama_cpp``.

Units live in the names: ``*_tok_per_s`` tokens per second, ``*_s`` seconds, ``*_bytes``
bytes. Every speed is measured ``repetitions`` times and reported as mean ± sample
standard deviation (:class:`Stat`), like llama-bench.

Example::

    result = benchmark("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096), BenchPlan.quick())
    result.speed("pp", depth=0).tok_per_s.mean     # prompt processing, tokens/s
    result.ttft.seconds.mean                       # time to first token, s
    for gap in compare_memory(estimate(spec, settings, hw), result):
        print(gap.component, gap.estimated_bytes, gap.measured_bytes, gap.within_tolerance)
"""

from __future__ import annotations

import dataclasses
import math
import statistics
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.measured.engine_report import EngineReport
from app.predict.estimate import EXTRA_WEIGHT_BUFFERS, MemoryEstimate
from app.settings import Settings
from app.units import MIB

BenchMode = Literal["quick", "thorough", "custom"]
SpeedKind = Literal["pp", "tg"]


BUFFER_TOLERANCE_BYTES: Final = MIB // 200 + 1
"""llama.cpp prints buffer sizes to 0.01 MiB: the nearest bytes are this close at worst."""

COMPUTE_REL_TOLERANCE: Final = 0.03
"""Compute buffers: the estimate is a model of the worst-case graph (tests/agreement)."""

COMPUTE_ABS_TOLERANCE_BYTES: Final = 2 * MIB

RSS_REL_TOLERANCE: Final = 0.10
"""Process RSS against the estimate: 10 % or :data:`RSS_ABS_TOLERANCE_BYTES`, the larger.

RSS is what the OS holds resident, not what llama.cpp reserved. The file-backed part (the
mapped weights, once read) is compared both ways. The anonymous part and the total are
*upper bounds*: a compute buffer is reserved for the worst-case graph but only the pages a
graph touched become resident, so the estimate may be far above RSS but must not be
below it by more than the tolerance (llama.cpp adds bookkeeping no estimate names: the
vocabulary, graph metadata, thread pools). docs/benchmarks.md records the measured gaps.
"""

RSS_ABS_TOLERANCE_BYTES: Final = 32 * MIB


# --- the plan ------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchPlan:
    """What to measure. Token counts in tokens; ``depth`` 0 skips the filled-context tests.

    ``n_prompt``: prompt-processing test size (llama-bench ``-p``); ``n_gen``: decode test
    size (``-n``); ``depth``: tokens already in the cache for the second pair of tests
    (``-d``; clamped by the runner to what the context holds); ``n_chat_prompt``: the
    prompt of the time-to-first-token test, real text; ``repetitions``: runs per test
    (``-r``).
    """

    mode: BenchMode
    n_prompt: int
    n_gen: int
    depth: int
    n_chat_prompt: int
    repetitions: int

    def __post_init__(self) -> None:
        assert self.n_prompt >= 1, f"n_prompt must be ≥ 1, got {self.n_prompt}"
        assert self.n_gen >= 1, f"n_gen must be ≥ 1, got {self.n_gen}"
        assert self.depth >= 0, f"depth must be ≥ 0, got {self.depth}"
        assert self.n_chat_prompt >= 1, f"n_chat_prompt must be ≥ 1, got {self.n_chat_prompt}"
        assert self.repetitions >= 1, f"repetitions must be ≥ 1, got {self.repetitions}"

    @classmethod
    def quick(cls) -> BenchPlan:
        """About 10-20 s on a 270M model on two CPU cores, loading included."""
        return cls("quick", n_prompt=512, n_gen=32, depth=512, n_chat_prompt=128, repetitions=2)

    @classmethod
    def thorough(cls) -> BenchPlan:
        """llama-bench's sizes (pp512, tg128), five repetitions, 4096 tokens of depth."""
        return cls(
            "thorough", n_prompt=512, n_gen=128, depth=4096, n_chat_prompt=256, repetitions=5
        )

    @classmethod
    def of(cls, mode: Literal["quick", "thorough"]) -> BenchPlan:
        """Return the named plan."""
        return cls.quick() if mode == "quick" else cls.thorough()


# --- figures -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Stat:
    """Mean and sample standard deviation of ``values`` (sd 0 for one value).

    >>> Stat.of([10.0, 12.0]).mean, round(Stat.of([10.0, 12.0]).sd, 3)
    (11.0, 1.414)
    """

    mean: float
    sd: float
    values: tuple[float, ...]

    @classmethod
    def of(cls, values: Iterable[float]) -> Stat:
        """Return the statistics of ``values`` (at least one)."""
        vs = tuple(values)
        assert vs, "a statistic needs at least one value"
        sd = statistics.stdev(vs) if len(vs) > 1 else 0.0
        return cls(statistics.fmean(vs), sd, vs)

    def format(self, digits: int = 1) -> str:
        """Return ``"mean ± sd"`` with ``digits`` decimals."""
        return f"{self.mean:.{digits}f} ± {self.sd:.{digits}f}"


@dataclass(frozen=True, slots=True)
class SpeedFigure:
    """One llama-bench style test: ``n_tokens`` processed after ``depth`` cached tokens.

    ``kind`` ``pp``: one prompt of ``n_tokens`` in batches of ``n_batch``; ``tg``:
    ``n_tokens`` tokens decoded one at a time. ``seconds`` holds each repetition's time.
    """

    kind: SpeedKind
    n_tokens: int
    depth: int
    seconds: tuple[float, ...]

    @property
    def name(self) -> str:
        """llama-bench's test name: ``pp512``, ``tg128``, ``pp512 @ d4096``."""
        base = f"{self.kind}{self.n_tokens}"
        return f"{base} @ d{self.depth}" if self.depth else base

    @property
    def tok_per_s(self) -> Stat:
        """Tokens per second over the repetitions."""
        return Stat.of(self.n_tokens / s if s > 0 else math.inf for s in self.seconds)


@dataclass(frozen=True, slots=True)
class TtftFigure:
    """Time to first token: a chat-sized prompt of ``n_prompt`` tokens from an empty cache
    until the first new token is picked (prompt processing plus one argmax over logits)."""

    n_prompt: int
    seconds: tuple[float, ...]

    @property
    def stat(self) -> Stat:
        """Seconds over the repetitions."""
        return Stat.of(self.seconds)


@dataclass(frozen=True, slots=True)
class MemorySnapshot:
    """The process's resident memory at one moment (Linux ``/proc/self/status``).

    ``rss_file_bytes`` is file-backed (``RssFile``: the mmapped weights, shared libraries),
    ``rss_anon_bytes`` anonymous (``RssAnon``: heap, llama.cpp's buffers). Both ``None``
    where the OS does not split RSS (then only ``rss_bytes`` is known).
    """

    rss_bytes: int
    rss_file_bytes: int | None
    rss_anon_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuMemory:
    """VRAM this process used on one NVIDIA GPU (NVML ``usedGpuMemory``), bytes."""

    index: int
    name: str
    used_bytes: int | None
    total_bytes: int


@dataclass(frozen=True, slots=True)
class MemoryMeasured:
    """Memory measured, not guessed.

    ``before_load``: the child after importing llama.cpp, before the model (the baseline
    the engine's own memory is measured from); ``loaded``: after the model and the
    context; ``peak_*``: the highest values seen during the whole run (sampled every
    20 ms; ``peak_rss_bytes`` is the kernel's high-water mark ``VmHWM`` where known).
    ``gpus`` per NVIDIA GPU, peak; ``gpu_note`` says why it is empty when it is.
    """

    before_load: MemorySnapshot
    loaded: MemorySnapshot
    peak_rss_bytes: int
    peak_rss_file_bytes: int | None
    peak_rss_anon_bytes: int | None
    gpus: tuple[GpuMemory, ...]
    gpu_note: str

    @property
    def engine_rss_bytes(self) -> int:
        """Peak RSS above the baseline: what loading and running the model added."""
        return self.peak_rss_bytes - self.before_load.rss_bytes


@dataclass(frozen=True, slots=True)
class MachineInfo:
    """The machine the run happened on (what the hardware fingerprint is made of)."""

    cpu_model: str
    physical_cores: int
    logical_cores: int
    ram_bytes: int
    os: str
    gpus: tuple[str, ...]


# --- progress (parent-side, from the child's messages) --------------------------------


@dataclass(frozen=True, slots=True)
class LoadProgress:
    """llama.cpp's load progress callback: ``fraction`` 0..1 of the weights loaded."""

    fraction: float


@dataclass(frozen=True, slots=True)
class Loaded:
    """The model and context are up: llama.cpp's buffers (from its log) and times in s."""

    load_s: float
    context_s: float
    report: EngineReport


@dataclass(frozen=True, slots=True)
class BenchStep:
    """Benchmark step ``index`` (1-based) of ``total`` starts; ``label`` names it."""

    index: int
    total: int
    label: str

    @property
    def fraction(self) -> float:
        """Share of the benchmark done before this step, 0..1."""
        return (self.index - 1) / self.total


BenchProgress = LoadProgress | Loaded | BenchStep


# --- the result ----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class BenchResult:
    """Everything one benchmark run measured (see the module doc).

    ``engine`` is llama.cpp's own report for this load and context (``alloc`` mode):
    every buffer it logged, the KV caches, the devices and ``offloaded_layers``.
    ``started_at`` is ISO 8601 UTC. ``n_threads`` is what llama.cpp was given.
    """

    model_path: str
    settings: Settings
    plan: BenchPlan
    n_threads: int
    use_mlock: bool
    engine: EngineReport
    load_s: float
    context_s: float
    speeds: tuple[SpeedFigure, ...]
    ttft: TtftFigure
    memory: MemoryMeasured
    machine: MachineInfo
    started_at: str
    duration_s: float

    @property
    def model_name(self) -> str:
        """llama.cpp's description of the model (architecture, size, quantization)."""
        return self.engine.model_desc

    @property
    def backend(self) -> str:
        """The backends that hold model weights, e.g. ``"CPU"`` or ``"CUDA0+CPU"``."""
        names: list[str] = []
        for b in self.engine.model_buffers:
            name = "CPU" if b.buffer.startswith("CPU") else b.buffer
            if b.bytes and name not in names:
                names.append(name)
        names.sort(key=lambda n: n == "CPU")  # GPUs first, as llama.cpp orders devices
        return "+".join(names) or "CPU"

    @property
    def offloaded_layers(self) -> tuple[int, int]:
        """``(offloaded, offloadable)`` layers; ``(0, n_layer + 1)`` on a CPU-only build."""
        if self.engine.offloaded_layers is not None:
            return self.engine.offloaded_layers
        return (0, self.engine.n_layer + 1)

    def speed(self, kind: SpeedKind, *, depth: int | None = 0) -> SpeedFigure | None:
        """Return the ``kind`` test at ``depth`` (``None``: the deepest one), if run."""
        found = [s for s in self.speeds if s.kind == kind]
        if depth is None:
            return max(found, key=lambda s: s.depth, default=None)
        return next((s for s in found if s.depth == depth), None)


# --- estimate vs measured ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MemoryGap:
    """One component, estimated beside measured on one device; bytes.

    ``source`` says what was measured: ``"llama.cpp log"`` (its buffer sizes, printed to
    0.01 MiB), ``"process RSS"`` (the OS) or ``"NVML"``. ``tolerance_bytes`` is the
    agreement the estimate promises; with ``upper_bound`` the estimate only promises not
    to be *below* the measurement by more than that (reserved ≥ resident).
    """

    component: str
    device: str
    estimated_bytes: int
    measured_bytes: int
    tolerance_bytes: int
    source: str
    upper_bound: bool = False

    @property
    def difference_bytes(self) -> int:
        """Estimated minus measured (positive: the estimate is higher)."""
        return self.estimated_bytes - self.measured_bytes

    @property
    def relative(self) -> float | None:
        """Difference over measured, or ``None`` when nothing was measured."""
        return self.difference_bytes / self.measured_bytes if self.measured_bytes else None

    @property
    def within_tolerance(self) -> bool:
        """Whether the estimate is within the stated tolerance of the measurement."""
        if self.upper_bound:
            return self.difference_bytes >= -self.tolerance_bytes
        return abs(self.difference_bytes) <= self.tolerance_bytes


def _is_host_buffer(name: str) -> bool:
    # CPU, CPU_Mapped, CPU_REPACK, and pinned host memory of a GPU backend (CUDA_Host)
    return name.startswith("CPU") or name.endswith("_Host")


def _rss_tolerance(measured: int) -> int:
    return max(int(RSS_REL_TOLERANCE * max(measured, 0)), RSS_ABS_TOLERANCE_BYTES)


def compare_memory(est: MemoryEstimate, result: BenchResult) -> tuple[MemoryGap, ...]:
    """Return estimate vs measured per component and device, then the process's RSS.

    Buffers come from llama.cpp's log of this very load (weights: ``CPU_Mapped``/``CPU``
    or the GPU's buffer; ``AMX`` and ``CPU_REPACK`` are the estimate's *other*). The RSS
    rows compare the peak above the pre-load baseline: file-backed with the mapped weights (both
    ways), anonymous and total as upper bounds (see :data:`RSS_REL_TOLERANCE`). ``est``
    must be for the same settings and the devices llama.cpp used.
    """
    report = result.engine
    gaps: list[MemoryGap] = []
    rounding = BUFFER_TOLERANCE_BYTES

    def buffers(sizes: dict[str, int], device: str, *, host: bool) -> int:
        return sum(b for n, b in sizes.items() if (_is_host_buffer(n) if host else n == device))

    model = report.model_buffer_bytes
    weights = {n: b for n, b in model.items() if n not in EXTRA_WEIGHT_BUFFERS}
    n_weight_buffers = max(
        1, sum(1 for b in report.model_buffers if b.buffer not in EXTRA_WEIGHT_BUFFERS)
    )
    extra = [b for b in report.model_buffers if b.buffer in EXTRA_WEIGHT_BUFFERS]
    for dev in est.devices:
        host = dev.kind == "host"
        rows = [
            ("weights", dev.weights_bytes, buffers(weights, dev.name, host=host),
             n_weight_buffers * rounding),
            ("KV cache", dev.kv_bytes, buffers(report.kv_buffer_bytes, dev.name, host=host),
             max(1, len(report.kv_buffers)) * rounding),
            ("recurrent state", dev.recurrent_bytes,
             buffers(report.rs_buffer_bytes, dev.name, host=host), rounding),
            ("output", dev.output_bytes,
             buffers(report.output_buffer_bytes, dev.name, host=host), rounding),
        ]  # fmt: skip
        if host:
            rows.insert(
                1,
                (
                    "weights (repacked)",
                    dev.other_bytes,
                    sum(b.bytes for b in extra),
                    max(1, len(extra)) * rounding,
                ),
            )
            compute = report.compute_bytes_on("CPU")
        else:
            compute = report.compute_bytes_on(dev.name)
        compute_tol = max(int(COMPUTE_REL_TOLERANCE * compute), COMPUTE_ABS_TOLERANCE_BYTES)
        rows.insert(-1, ("compute", dev.compute_bytes, compute, compute_tol))
        for component, estimated, measured, tolerance in rows:
            if estimated == 0 and measured == 0:
                continue
            gaps.append(
                MemoryGap(component, dev.name, estimated, measured, tolerance, "llama.cpp log")
            )

    host_est = next(d for d in est.devices if d.kind == "host")
    mem = result.memory
    base = mem.before_load
    mapped_est = host_est.weights_bytes if result.settings.use_mmap else 0
    if mem.peak_rss_file_bytes is not None and base.rss_file_bytes is not None:
        measured = mem.peak_rss_file_bytes - base.rss_file_bytes
        gaps.append(
            MemoryGap(
                "RSS file-backed (mapped weights)",
                host_est.name,
                mapped_est,
                measured,
                _rss_tolerance(measured),
                "process RSS",
            )
        )
    if mem.peak_rss_anon_bytes is not None and base.rss_anon_bytes is not None:
        measured = mem.peak_rss_anon_bytes - base.rss_anon_bytes
        gaps.append(
            MemoryGap(
                "RSS anonymous (buffers)",
                host_est.name,
                host_est.total_bytes - mapped_est,
                measured,
                _rss_tolerance(measured),
                "process RSS",
                upper_bound=True,
            )
        )
    rss = mem.engine_rss_bytes
    gaps.append(
        MemoryGap(
            "RSS total (peak − baseline)",
            host_est.name,
            host_est.total_bytes,
            rss,
            _rss_tolerance(rss),
            "process RSS",
            upper_bound=True,
        )
    )
    for gpu in mem.gpus:
        dev_name = f"CUDA{gpu.index}"
        gpu_est = next((d for d in est.devices if d.name == dev_name), None)
        if gpu_est is None or gpu.used_bytes is None:
            continue
        gaps.append(
            MemoryGap(
                "VRAM used by the process",
                dev_name,
                gpu_est.total_bytes,
                gpu.used_bytes,
                _rss_tolerance(gpu.used_bytes),
                "NVML",
                upper_bound=True,
            )
        )
    return tuple(gaps)


def result_to_dict(result: BenchResult) -> dict[str, Any]:
    """Return ``result`` as JSON-ready data; the key names are a stable interface.

    Speeds carry ``tok_per_s`` and ``tok_per_s_sd`` beside the raw seconds; the engine
    report is :meth:`~app.measured.engine_report.EngineReport.to_dict` (without the log).
    """
    data: dict[str, Any] = {
        "model_path": result.model_path,
        "model_name": result.model_name,
        "settings": dataclasses.asdict(result.settings),
        "plan": dataclasses.asdict(result.plan),
        "n_threads": result.n_threads,
        "use_mlock": result.use_mlock,
        "backend": result.backend,
        "offloaded_layers": list(result.offloaded_layers),
        "load_s": result.load_s,
        "context_s": result.context_s,
        "speeds": [
            {
                "name": s.name,
                "kind": s.kind,
                "n_tokens": s.n_tokens,
                "depth": s.depth,
                "tok_per_s": s.tok_per_s.mean,
                "tok_per_s_sd": s.tok_per_s.sd,
                "seconds": list(s.seconds),
            }
            for s in result.speeds
        ],
        "ttft": {
            "n_prompt": result.ttft.n_prompt,
            "seconds": result.ttft.stat.mean,
            "seconds_sd": result.ttft.stat.sd,
            "samples": list(result.ttft.seconds),
        },
        "memory": dataclasses.asdict(result.memory)
        | {"engine_rss_bytes": result.memory.engine_rss_bytes},
        "machine": dataclasses.asdict(result.machine),
        "engine": result.engine.to_dict(),
        "started_at": result.started_at,
        "duration_s": result.duration_s,
    }
    return data


def gap_to_dict(gap: MemoryGap) -> dict[str, Any]:
    """Return one comparison row as JSON-ready data."""
    return dataclasses.asdict(gap) | {
        "difference_bytes": gap.difference_bytes,
        "within_tolerance": gap.within_tolerance,
    }
