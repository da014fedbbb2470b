"""The Verify tab's rows, pure: the estimate beside what llama.cpp reported or measured.

:func:`comparison_rows` puts the estimate beside a dry run (:class:`ComparisonRow` per
component, with the difference); :func:`benchmark_rows` adds a benchmark's measured
memory and speed (:class:`SpeedRow`); :func:`summarize` and :func:`summarize_benchmark`
give the one-line verdicts. :class:`EngineFailure` is a run that failed, in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.bench_result import (
    BenchResult,
    SpeedKind,
    Stat,
    compare_memory,
)
from app.measured.engine_report import EngineReport
from app.model.facts import offloaded_text
from app.model.spec import ModelSpec
from app.predict.estimate import MemoryEstimate
from app.predict.speed import SpeedFactors, predict_speed
from app.units import MIB, format_mib, plural

RunKind = Literal["dry_run", "benchmark", "users"]

PRINT_PRECISION_BYTES: Final = MIB // 200
"""llama.cpp prints its buffers in MiB to two decimals: its numbers are known to ±0.005 MiB
(``BUFFER_TOLERANCE_BYTES`` of :mod:`app.measured.bench_result` rounds that up)."""


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One component: ggtune's estimate, llama.cpp's number and what a benchmark measured,
    bytes (None: not reported / not measured)."""

    component: str
    estimate_bytes: int
    engine_bytes: int | None
    measured_bytes: int | None = None

    @property
    def reference_bytes(self) -> int | None:
        """What the estimate is compared with: llama.cpp's number, else the measurement."""
        return self.engine_bytes if self.engine_bytes is not None else self.measured_bytes

    @property
    def difference_bytes(self) -> int | None:
        """Return estimate minus llama.cpp's number (or the measurement), bytes."""
        ref = self.reference_bytes
        return None if ref is None else self.estimate_bytes - ref

    @property
    def difference_percent(self) -> float | None:
        """Return the difference as a percentage of the number compared with."""
        diff = self.difference_bytes
        ref = self.reference_bytes
        if diff is None or not ref:
            return None
        return 100.0 * diff / ref


@dataclass(frozen=True, slots=True)
class SpeedRow:
    """One speed figure: the model's prediction and the benchmark's measurement.

    ``unit`` is ``"tok/s"`` or ``"s"`` (time to first token); ``estimate`` may be None.
    """

    component: str
    estimate: float | None
    measured: Stat
    unit: str

    @property
    def difference_percent(self) -> float | None:
        """Return (estimate − measured) as a percentage of the measurement."""
        if self.estimate is None or not self.measured.mean:
            return None
        return 100.0 * (self.estimate - self.measured.mean) / self.measured.mean


TableRow = ComparisonRow | SpeedRow


HISTORY_LIMIT: Final = 50
"""The most past runs of a model read (and listed) at once."""


def saved_text(n_runs: int | None, noun: str) -> str:
    """Return where a run was stored, in words: " · saved to this model's history (3
    benchmarks)" (``n_runs`` of the model stored, this one included); "" when it was not
    stored (``None``). The database's row id means nothing to a user (it counts every
    model's runs), so it is not shown.

    >>> saved_text(1, "benchmark"), saved_text(None, "benchmark")
    (" · saved to this model's history (1 benchmark)", '')
    >>> saved_text(HISTORY_LIMIT, "Users run")
    " · saved to this model's history (50 or more Users runs)"
    """
    if n_runs is None:
        return ""
    count = f"{HISTORY_LIMIT} or more {noun}s" if n_runs >= HISTORY_LIMIT else plural(n_runs, noun)
    return f" · saved to this model's history ({count})"


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """A finished dry run: the rows, and what was run, in words."""

    rows: tuple[ComparisonRow, ...]
    summary: str
    report: EngineReport


@dataclass(frozen=True, slots=True)
class BenchmarkOutcome:
    """A finished benchmark: the rows (memory, then speed), a summary, and where it is stored.

    ``run_id`` is the results database's id (None when storing failed: ``store_error``);
    ``history_runs`` how many benchmarks of this model are stored now, this one included
    (up to :data:`HISTORY_LIMIT`; None when it was not stored).
    """

    rows: tuple[TableRow, ...]
    summary: str
    result: BenchResult
    run_id: int | None
    store_error: str | None = None
    history_runs: int | None = None


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """A run that failed: ``cause`` (one line), llama.cpp's last log lines, and which run.

    ``no_file`` is set when nothing was run because the model is a catalog entry.
    """

    cause: str
    log_tail: tuple[str, ...]
    kind: RunKind = "dry_run"
    no_file: bool = False


def comparison_rows(
    spec: ModelSpec, est: MemoryEstimate, report: EngineReport
) -> tuple[ComparisonRow, ...]:
    """Return estimate vs engine for weights, KV, recurrent, compute, output and the total.

    Sums over all devices on both sides (the dry run does not split weights per device).
    """

    def total(field: str) -> int:
        return sum(int(getattr(d, field)) for d in est.devices)

    rows = [
        ComparisonRow("Weights", spec.weights_bytes, report.model_size_bytes),
        ComparisonRow("KV cache", total("kv_bytes"), report.kv_bytes),
        ComparisonRow("Recurrent state", total("recurrent_bytes"), report.recurrent_bytes),
        ComparisonRow(
            "Compute buffers", total("compute_bytes"), sum(report.compute_buffer_bytes.values())
        ),
        ComparisonRow("Output buffer", total("output_bytes"), report.output_bytes),
    ]
    rows.append(
        ComparisonRow(
            "Total",
            sum(r.estimate_bytes for r in rows),
            sum(r.engine_bytes or 0 for r in rows),
        )
    )
    return tuple(rows)


def benchmark_rows(
    spec: ModelSpec,
    est: MemoryEstimate,
    result: BenchResult,
    hardware: Hardware,
    factors: SpeedFactors | None = None,
) -> tuple[TableRow, ...]:
    """Return estimate vs llama.cpp (this load's log) vs measured, then the speeds.

    Memory: the components of :func:`comparison_rows` against the benchmark's own engine
    report, then the process's resident memory above its pre-load baseline (file-backed:
    the mapped weights; anonymous: the buffers; :func:`app.measured.bench_result.compare_memory`).
    Speed: prompt processing and generation from an empty cache and time to first token,
    beside :func:`app.predict.speed.predict_speed` for the same sizes with ``factors`` — the
    ones the Memory view quotes (calibrated on this machine's runs where it has some), so
    every tab shows the same figure.
    """
    rows: list[TableRow] = list(comparison_rows(spec, est, result.engine))
    for gap in compare_memory(est, result):
        if gap.source != "llama.cpp log":
            rows.append(ComparisonRow(gap.component, gap.estimated_bytes, None, gap.measured_bytes))
    settings = result.settings
    kinds: tuple[tuple[SpeedKind, str], ...] = (("pp", "Prompt processing"), ("tg", "Generation"))
    for kind, title in kinds:
        fig = result.speed(kind)
        if fig is None:
            continue
        predicted: float | None = None
        try:
            pred = predict_speed(
                spec, settings, hardware, n_prompt=max(1, fig.n_tokens), factors=factors
            )
            predicted = pred.prefill_tok_per_s if kind == "pp" else pred.decode_tok_per_s
        except GGTuneError:
            predicted = None
        rows.append(SpeedRow(f"{title} ({fig.name})", predicted, fig.tok_per_s, "tok/s"))
    try:
        ttft_pred: float | None = predict_speed(
            spec, settings, hardware, n_prompt=result.ttft.n_prompt, factors=factors
        ).ttft_s
    except GGTuneError:
        ttft_pred = None
    rows.append(
        SpeedRow(
            f"Time to first token ({result.ttft.n_prompt} tokens)",
            ttft_pred,
            result.ttft.stat,
            "s",
        )
    )
    return tuple(rows)


def summarize_benchmark(result: BenchResult) -> str:
    """Return what the benchmark ran, in one line."""
    engine = result.engine
    has_gpu = any(d.type in ("gpu", "igpu") for d in engine.devices)
    layers = offloaded_text(engine.offloaded_layers, engine.n_layer, has_gpu)
    return (
        f"{result.model_name} · {result.backend}, {layers}, "
        f"{result.n_threads} threads · load {result.load_s:.2f} s · {result.plan.mode} plan, "
        f"{plural(result.plan.repetitions, 'run')} per test, {result.duration_s:.1f} s in all"
    )


def summarize(report: EngineReport) -> str:
    """Return what the engine ran, in one line."""
    fa = "on" if report.flash_attn else "off"
    return (
        f"{report.model_desc} · {report.n_ctx:,} cells ({plural(report.n_seq_max, 'sequence')}), "
        f"flash attention {fa} · {report.engine_version}"
    )


def format_stat(stat: Stat, unit: str) -> str:
    digits = 3 if unit == "s" else 1
    sd = f" ± {stat.sd:.{digits}f}" if len(stat.values) > 1 else ""
    return f"{stat.mean:.{digits}f}{sd} {unit}"


def memory_text(row: ComparisonRow, col: int) -> str:
    if col == 0:
        return row.component
    if col == 1:
        return format_mib(row.estimate_bytes)
    if col == 2:
        # "—", as for the speeds: the cell's tooltip says llama.cpp has no such figure
        return "—" if row.engine_bytes is None else format_mib(row.engine_bytes)
    if col == 4:
        return "" if row.measured_bytes is None else format_mib(row.measured_bytes)
    diff = row.difference_bytes
    if diff is None:
        return ""
    if row.engine_bytes is not None and abs(diff) < PRINT_PRECISION_BYTES:
        # within the two decimals llama.cpp prints: no difference to speak of ("−0.00 MiB
        # (−1.32 %)" for a 0.38 MiB buffer was the printing's rounding, not the estimate)
        return "0.00 MiB"
    pct = row.difference_percent
    if pct is None or round(pct, 2) == 0:
        return format_mib(diff, signed=True)  # "(+0.00 %)" beside "0.00 MiB" says nothing
    # a no-break space before "%": a narrow column wraps before "(", never before "%)"
    return format_mib(diff, signed=True) + f" ({_signed(pct, 2)}\u00a0%)"


def _signed(value: float, digits: int) -> str:
    """Return ``value`` with its sign, a minus sign as :func:`format_mib` writes it; no
    sign where it rounds to zero ("0 %", not "-0 %").

    >>> _signed(-47.2, 0), _signed(-0.2, 0), _signed(0.79, 2)
    ('−47', '0', '+0.79')
    """
    if round(value, digits) == 0:
        return f"{0:.{digits}f}"
    text = f"{value:+.{digits}f}"
    return text.replace("-", "−", 1) if text.startswith("-") else text


def speed_text(row: SpeedRow, col: int) -> str:
    digits = 3 if row.unit == "s" else 1
    if col == 0:
        return row.component
    if col == 1:
        return "—" if row.estimate is None else f"{row.estimate:.{digits}f} {row.unit}"
    if col == 2:
        return "—"
    if col == 4:
        return format_stat(row.measured, row.unit)
    pct = row.difference_percent
    return "" if pct is None else f"{_signed(pct, 0)} %"
