"""Verify: run llama.cpp's own dry run for the settings on screen and compare, per component.

:class:`DryRunThread` runs :class:`runner.dry_run.DryRun` in a ``QThread`` (the thread
only waits: llama.cpp itself runs in runner's child process, so a crash or an out-of-memory
kill there leaves the app up). :class:`VerifyController` owns the run and emits dataclasses;
:class:`ComparisonTableModel` shows estimate vs engine vs difference; an engine failure opens
a dialog with its cause and llama.cpp's last log lines.

:class:`BenchmarkThread` runs :class:`runner.benchmark.Benchmark` the same way (quick plan by
default): the progress bar follows llama.cpp's load progress, then the benchmark's steps; the
result (RSS file-backed/anonymous, pp/tg tok/s, time to first token) joins the same table as
the *Measured* column, and is stored in the results database
(:class:`app.measured.results_db.ResultsDB`)
on the worker thread. The history of past runs of the model is read on the job pool. Every
benchmark error shows as a banner with its cause; the app stays up.

The estimate compared is for *this machine* (where the engine runs), whatever hardware the
memory view plans for.

A catalog model (``catalog:NAME``, planned from its published config) has no file to run:
the controller refuses it with :data:`~ui.desktop.model_card.CATALOG_NO_FILE` before any
child process starts, and the panel disables both buttons and says so.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final, Literal

from PySide6.QtCore import (
    QObject,
    Qt,
    QThread,
    Signal,
    Slot,
)
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.errors import EngineCancelledError, EngineError, GGTuneError
from app.hardware.devices import Hardware
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
    BenchResult,
    BenchStep,
    Loaded,
    LoadProgress,
    SpeedKind,
    Stat,
    compare_memory,
)
from app.measured.engine_report import EngineReport
from app.measured.results_db import ResultsDB, StoredRun, quick_file_hash
from app.model.catalog import is_catalog
from app.model.spec import ModelSpec
from app.predict.estimate import MemoryEstimate, estimate
from app.predict.speed import predict_speed
from app.settings import Settings
from app.units import format_mib
from runner.benchmark import Benchmark
from runner.dry_run import DryRun
from runner.worker import Event, StepEvent
from ui.desktop.banner import MessageBanner
from ui.desktop.jobs import run_job
from ui.desktop.model_card import CATALOG_NO_FILE, LoadedModel, describe_error
from ui.desktop.record_table import RIGHT, RecordTableModel

DRY_RUN_TIMEOUT_S: Final = 120.0
BENCH_TIMEOUT_S: Final = 300.0
"""Per benchmark step (loading, each timed test)."""
LOAD_SHARE: Final = 30
"""Percent of the benchmark's progress bar given to loading the model; the steps share the rest."""
HISTORY_LIMIT: Final = 50
RunKind = Literal["dry_run", "benchmark"]


# --- pure: the comparison -----------------------------------------------------------------


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


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """A finished dry run: the rows, and what was run, in words."""

    rows: tuple[ComparisonRow, ...]
    summary: str
    report: EngineReport


@dataclass(frozen=True, slots=True)
class BenchmarkOutcome:
    """A finished benchmark: the rows (memory, then speed), a summary, and where it is stored.

    ``run_id`` is the results database's id (None when storing failed: ``store_error``).
    """

    rows: tuple[TableRow, ...]
    summary: str
    result: BenchResult
    run_id: int | None
    store_error: str | None = None


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
    spec: ModelSpec, est: MemoryEstimate, result: BenchResult, hardware: Hardware
) -> tuple[TableRow, ...]:
    """Return estimate vs llama.cpp (this load's log) vs measured, then the speeds.

    Memory: the components of :func:`comparison_rows` against the benchmark's own engine
    report, then the process's resident memory above its pre-load baseline (file-backed:
    the mapped weights; anonymous: the buffers; :func:`app.measured.bench_result.compare_memory`).
    Speed: prompt processing and generation from an empty cache and time to first token,
    beside :func:`app.predict.speed.predict_speed` for the same sizes.
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
            pred = predict_speed(spec, settings, hardware, n_prompt=max(1, fig.n_tokens))
            predicted = pred.prefill_tok_per_s if kind == "pp" else pred.decode_tok_per_s
        except GGTuneError:
            predicted = None
        rows.append(SpeedRow(f"{title} ({fig.name})", predicted, fig.tok_per_s, "tok/s"))
    try:
        ttft_pred: float | None = predict_speed(
            spec, settings, hardware, n_prompt=result.ttft.n_prompt
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
    on, of = result.offloaded_layers
    return (
        f"{result.model_name} · {result.backend}, {on}/{of} layers offloaded, "
        f"{result.n_threads} threads · load {result.load_s:.2f} s · {result.plan.mode} plan, "
        f"{result.plan.repetitions} run(s) per test, {result.duration_s:.1f} s in all"
    )


def summarize(report: EngineReport) -> str:
    """Return what the engine ran, in one line."""
    fa = "on" if report.flash_attn else "off"
    return (
        f"{report.model_desc} · {report.n_ctx:,} cells ({report.n_seq_max} sequence(s)), "
        f"flash attention {fa} · {report.engine_version}"
    )


# --- the table ----------------------------------------------------------------------------

_HEADERS: Final = ("Component", "Estimate", "llama.cpp", "Difference", "Measured")


def _format_stat(stat: Stat, unit: str) -> str:
    digits = 3 if unit == "s" else 1
    sd = f" ± {stat.sd:.{digits}f}" if len(stat.values) > 1 else ""
    return f"{stat.mean:.{digits}f}{sd} {unit}"


def _memory_text(row: ComparisonRow, col: int) -> str:
    if col == 0:
        return row.component
    if col == 1:
        return format_mib(row.estimate_bytes)
    if col == 2:
        return "not reported" if row.engine_bytes is None else format_mib(row.engine_bytes)
    if col == 4:
        return "" if row.measured_bytes is None else format_mib(row.measured_bytes)
    diff = row.difference_bytes
    if diff is None:
        return ""
    pct = row.difference_percent
    return format_mib(diff, signed=True) + ("" if pct is None else f" ({pct:+.2f} %)")


def _speed_text(row: SpeedRow, col: int) -> str:
    digits = 3 if row.unit == "s" else 1
    if col == 0:
        return row.component
    if col == 1:
        return "—" if row.estimate is None else f"{row.estimate:.{digits}f} {row.unit}"
    if col == 2:
        return "—"
    if col == 4:
        return _format_stat(row.measured, row.unit)
    pct = row.difference_percent
    return "" if pct is None else f"{pct:+.0f} %"


class ComparisonTableModel(RecordTableModel[TableRow]):
    """Rows of :class:`ComparisonRow` and :class:`SpeedRow` (read-only).

    Columns: component, estimate, llama.cpp, difference, measured; memory in MiB. The
    difference is against llama.cpp's number, or the measurement where llama.cpp has none.
    ``Qt.UserRole`` gives the raw numbers (bytes; tok/s or s).
    """

    HEADERS = _HEADERS

    def cell(self, record: TableRow, column: int, role: int) -> object:
        """Return the text, the raw number (UserRole) or the alignment of a cell."""
        row, col = record, column
        if role == Qt.ItemDataRole.DisplayRole:
            return _speed_text(row, col) if isinstance(row, SpeedRow) else _memory_text(row, col)
        if role == Qt.ItemDataRole.UserRole:
            if isinstance(row, SpeedRow):
                diff = row.difference_percent
                return (row.component, row.estimate, None, diff, row.measured.mean)[col]
            return (
                row.component,
                row.estimate_bytes,
                row.engine_bytes,
                row.difference_bytes,
                row.measured_bytes,
            )[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return RIGHT
        return None


_HISTORY_HEADERS: Final = ("Date", "Plan", "Context", "pp tok/s", "tg tok/s", "TTFT", "Peak RSS")


class HistoryTableModel(RecordTableModel[StoredRun]):
    """Past benchmark runs of one model (:class:`app.measured.results_db.StoredRun`), newest first.

    ``Qt.UserRole`` gives the run's id in every column.
    """

    HEADERS = _HISTORY_HEADERS

    def cell(self, record: StoredRun, column: int, role: int) -> object:
        """Return the text, the run id (UserRole) or the alignment of a cell."""
        run = record
        if role == Qt.ItemDataRole.DisplayRole:
            n_ctx = run.settings.get("n_ctx")
            cells = (
                run.created_at.replace("T", " ")[:16],
                run.mode,
                f"{n_ctx:,}" if isinstance(n_ctx, int) else "?",
                "—" if run.pp_tok_per_s is None else f"{run.pp_tok_per_s:.1f}",
                "—" if run.tg_tok_per_s is None else f"{run.tg_tok_per_s:.1f}",
                "—" if run.ttft_s is None else f"{run.ttft_s:.3f} s",
                "—" if run.peak_rss_bytes is None else format_mib(run.peak_rss_bytes),
            )
            return cells[column]
        if role == Qt.ItemDataRole.UserRole:
            return run.id
        if role == Qt.ItemDataRole.TextAlignmentRole and column > 1:
            return RIGHT
        return None


# --- the run ------------------------------------------------------------------------------


class DryRunThread(QThread):
    """Wait for one dry run (worker thread); the engine runs in runner's child process.

    Emits ``step(str)`` as the child reports steps, then exactly one of
    ``succeeded(EngineReport)`` or ``failed(GGTuneError)``. :meth:`cancel` is safe from any
    thread.
    """

    step = Signal(str)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, dry_run: DryRun, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._dry_run = dry_run

    @property
    def pid(self) -> int | None:
        """The engine child's process id while it runs."""
        return self._dry_run.pid

    def cancel(self) -> None:
        """Kill the child; :meth:`run` then fails with EngineCancelledError."""
        self._dry_run.cancel()

    def run(self) -> None:
        """Run the dry run and report (worker thread)."""
        try:
            reports = self._dry_run.run()
        except GGTuneError as err:
            self.failed.emit(err)
        except Exception as err:  # never let an unexpected error die silently in a thread
            self.failed.emit(EngineError(f"the dry run failed unexpectedly: {describe_error(err)}"))
        else:
            self.succeeded.emit(reports[0])


@dataclass(frozen=True, slots=True)
class _BenchJob:
    """What a benchmark thread needs besides the run itself (to compare and to store)."""

    model: LoadedModel
    estimate: MemoryEstimate
    hardware: Hardware
    db: ResultsDB | None


class BenchmarkThread(QThread):
    """Wait for one benchmark (worker thread); the engine runs in runner's child process.

    Emits ``progress(object)`` per :data:`app.measured.bench_result.BenchProgress`, then exactly one
    of ``succeeded(BenchmarkOutcome)`` or ``failed(GGTuneError)``. The comparison and
    storing the run in the results database happen here too, off the GUI thread.
    :meth:`cancel` is safe from any thread.
    """

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(
        self,
        model: LoadedModel,
        settings: Settings,
        plan: BenchPlan,
        job: _BenchJob,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._job = job
        self._bench = Benchmark(
            model.path, settings, plan, timeout_s=BENCH_TIMEOUT_S, on_progress=self._on_progress
        )

    @property
    def pid(self) -> int | None:
        """The engine child's process id while it runs."""
        return self._bench.pid

    def cancel(self) -> None:
        """Kill the child; :meth:`run` then fails with EngineCancelledError."""
        self._bench.cancel()

    def _on_progress(self, event: BenchProgress) -> None:
        self.progress.emit(event)

    def run(self) -> None:
        """Run the benchmark, compare, store, and report (worker thread)."""
        job = self._job
        try:
            result = self._bench.run()
            rows = benchmark_rows(job.model.spec, job.estimate, result, job.hardware)
        except GGTuneError as err:
            self.failed.emit(err)
            return
        except Exception as err:  # never let an unexpected error die silently in a thread
            self.failed.emit(
                EngineError(f"the benchmark failed unexpectedly: {describe_error(err)}")
            )
            return
        run_id: int | None = None
        store_error: str | None = None
        if job.db is not None:
            try:
                run_id = job.db.add(result, model_hash=quick_file_hash(result.model_path))
                for moved in job.db.set_aside:
                    store_error = f"{moved.reason}; it was kept as {moved.path}"
            except Exception as err:  # sqlite3, a full disk: the run itself is fine
                store_error = f"the run was not stored: {describe_error(err)}"
        summary = summarize_benchmark(result)
        self.succeeded.emit(BenchmarkOutcome(rows, summary, result, run_id, store_error))


def _make_dry_run(path: str, settings: Settings, on_event: object) -> DryRun:
    assert callable(on_event), "on_event must be callable"
    return DryRun(path, [settings], timeout_s=DRY_RUN_TIMEOUT_S, on_event=on_event)


class VerifyController(QObject):
    """Run one dry run or benchmark at a time and say how it went (GUI thread).

    Signals: ``running_changed(bool)``, ``step(str)``, ``finished(VerifyResult)``,
    ``failed(EngineFailure)``, ``cancelled()``; for benchmarks also ``progress(int, str)``
    (percent 0..100 and what is happening), ``benchmark_finished(BenchmarkOutcome)``,
    ``history_changed(tuple[StoredRun, ...])`` and ``history_failed(str)``.

    ``results_db`` is where benchmarks are stored and the history is read (default: the
    user's database; tests pass their own); ``bench_plan`` the benchmark's plan (default:
    :meth:`BenchPlan.quick`). :meth:`start` runs the kind asked for last by
    :meth:`request_kind` (a dry run unless asked otherwise), so one "run what is on screen"
    request from the window serves both buttons.
    """

    running_changed = Signal(bool)
    step = Signal(str)
    finished = Signal(object)
    failed = Signal(object)
    cancelled = Signal()
    progress = Signal(int, str)
    benchmark_finished = Signal(object)
    history_changed = Signal(object)
    history_failed = Signal(str)

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        results_db: ResultsDB | None = None,
        bench_plan: BenchPlan | None = None,
    ) -> None:
        super().__init__(parent)
        self._thread: DryRunThread | BenchmarkThread | None = None
        self._context: tuple[LoadedModel, MemoryEstimate] | None = None
        self._cancelling = False
        self._next_kind: RunKind = "dry_run"
        self._kind: RunKind | None = None
        self._db = results_db
        self.bench_plan: BenchPlan = bench_plan or BenchPlan.quick()
        self._history_path: str | None = None

    @property
    def running(self) -> bool:
        """Whether a dry run or a benchmark is under way."""
        return self._thread is not None

    @property
    def kind(self) -> RunKind | None:
        """What is under way: ``"dry_run"``, ``"benchmark"`` or None."""
        return self._kind if self._thread is not None else None

    @property
    def dry_run_thread(self) -> DryRunThread | BenchmarkThread | None:
        """The thread of the run under way (tests read its child's pid)."""
        return self._thread

    @property
    def results_db(self) -> ResultsDB:
        """The results database (the user's unless one was given); opening it is lazy."""
        if self._db is None:
            self._db = ResultsDB()
        return self._db

    def set_results_db(self, db: ResultsDB) -> None:
        """Store benchmarks in and read the history from ``db`` from now on."""
        self._db = db

    def request_kind(self, kind: RunKind) -> None:
        """Make the next :meth:`start` a ``kind`` run."""
        self._next_kind = kind

    def start(self, model: LoadedModel, settings: Settings, hardware: Hardware) -> None:
        """Run what was asked for (a dry run by default) of ``model`` with ``settings``.

        The estimate compared is for ``hardware``, which should be this machine: the engine
        runs here.
        """
        kind, self._next_kind = self._next_kind, "dry_run"
        if kind == "benchmark":
            self.start_benchmark(model, settings, hardware)
            return
        assert self._thread is None, "one run at a time"
        if model.is_catalog:
            self.failed.emit(EngineFailure(CATALOG_NO_FILE, (), "dry_run", no_file=True))
            return
        try:
            est = estimate(model.spec, settings, hardware)
            dry_run = _make_dry_run(model.path, settings, self._on_engine_event)
        except GGTuneError as err:
            self.failed.emit(EngineFailure(describe_error(err), ()))
            return
        self._context = (model, est)
        self._cancelling = False
        thread = DryRunThread(dry_run, self)
        thread.step.connect(self.step)
        thread.succeeded.connect(self._on_thread_succeeded)
        thread.failed.connect(self._on_thread_failed)
        self._launch(thread, "dry_run")
        self.refresh_history(model.path)

    def start_benchmark(
        self,
        model: LoadedModel,
        settings: Settings,
        hardware: Hardware,
        plan: BenchPlan | None = None,
    ) -> None:
        """Benchmark ``model`` with ``settings`` (``plan``, default :attr:`bench_plan`)."""
        assert self._thread is None, "one run at a time"
        if model.is_catalog:
            self.failed.emit(EngineFailure(CATALOG_NO_FILE, (), "benchmark", no_file=True))
            return
        try:
            est = estimate(model.spec, settings, hardware)
            job = _BenchJob(model, est, hardware, self.results_db)
            thread = BenchmarkThread(model, settings, plan or self.bench_plan, job, self)
        except Exception as err:  # a refused setting, a missing file: a banner, not a crash
            self.failed.emit(EngineFailure(describe_error(err), (), "benchmark"))
            return
        self._context = (model, est)
        self._cancelling = False
        thread.progress.connect(self._on_bench_progress)
        thread.succeeded.connect(self._on_bench_succeeded)
        thread.failed.connect(self._on_thread_failed)
        self._launch(thread, "benchmark")
        self.refresh_history(model.path)

    def _launch(self, thread: DryRunThread | BenchmarkThread, kind: RunKind) -> None:
        self._thread = thread
        self._kind = kind
        self.running_changed.emit(True)
        thread.start()

    def cancel(self) -> None:
        """Stop the run under way (the child is killed off the GUI thread)."""
        thread = self._thread
        if thread is None or self._cancelling:
            return
        self._cancelling = True
        self.step.emit("cancelling…")
        run_job(thread.cancel, on_success=lambda _r: None, on_failure=lambda _e: None, parent=self)

    def wait(self, timeout_ms: int = 5000) -> bool:
        """Cancel and wait for the run under way to end (for closing the window)."""
        thread = self._thread
        if thread is None:
            return True
        thread.cancel()
        return bool(thread.wait(timeout_ms))

    def refresh_history(self, model_path: str) -> None:
        """Read the stored runs of ``model_path`` on the job pool; emit ``history_changed``.

        A catalog model has no file, so no runs: the history is empty at once.
        """
        self._history_path = model_path
        if is_catalog(model_path):
            self.history_changed.emit(())
            return
        db = self.results_db

        def query() -> tuple[str, tuple[StoredRun, ...]]:
            runs = db.runs(model_hash=quick_file_hash(model_path), limit=HISTORY_LIMIT)
            return model_path, tuple(runs)

        run_job(query, on_success=self._on_history, on_failure=self._on_history_failed, parent=self)

    def _on_history(self, answer: tuple[str, tuple[StoredRun, ...]]) -> None:
        path, runs = answer
        if path == self._history_path:  # a newer request wins
            self.history_changed.emit(runs)

    def _on_history_failed(self, error: Exception) -> None:
        self.history_failed.emit(
            f"The history of past runs could not be read: {describe_error(error)}"
        )

    def _on_engine_event(self, event: Event) -> None:
        """Forward step labels (worker thread: a signal crosses to the GUI thread)."""
        thread = self._thread
        if isinstance(event, StepEvent) and isinstance(thread, DryRunThread):
            thread.step.emit(event.label)

    def _on_bench_progress(self, event: BenchProgress) -> None:
        if self._cancelling:
            return
        if isinstance(event, LoadProgress):
            pct = round(LOAD_SHARE * event.fraction)
            self.progress.emit(pct, f"loading the model ({round(100 * event.fraction)} %)")
        elif isinstance(event, Loaded):
            self.progress.emit(LOAD_SHARE, f"loaded in {event.load_s:.2f} s")
        elif isinstance(event, BenchStep):
            pct = LOAD_SHARE + round((100 - LOAD_SHARE) * event.fraction)
            self.progress.emit(pct, f"step {event.index} of {event.total}: {event.label}")

    def _end(self) -> None:
        thread = self._thread
        assert thread is not None, "a run must be under way"
        thread.wait()
        thread.deleteLater()
        self._thread = None
        self._kind = None
        self.running_changed.emit(False)

    @Slot(object)
    def _on_thread_succeeded(self, report: EngineReport) -> None:
        self._end()
        assert self._context is not None, "start() sets the context"
        model, est = self._context
        rows = comparison_rows(model.spec, est, report)
        self.finished.emit(VerifyResult(rows, summarize(report), report))

    @Slot(object)
    def _on_bench_succeeded(self, outcome: BenchmarkOutcome) -> None:
        self._end()
        self.progress.emit(100, "done")
        self.benchmark_finished.emit(outcome)
        self.refresh_history(outcome.result.model_path)

    @Slot(object)
    def _on_thread_failed(self, error: GGTuneError) -> None:
        kind = self._kind or "dry_run"
        self._end()
        if isinstance(error, EngineCancelledError):
            self.cancelled.emit()
            return
        tail = error.log_tail if isinstance(error, EngineError) else ()
        self.failed.emit(EngineFailure(describe_error(error), tuple(tail), kind))


# --- the panel ----------------------------------------------------------------------------

RUN_TIP: Final = "Run llama.cpp's dry run with the settings on screen (F5)"
BENCH_TIP: Final = (
    "Load the model on llama.cpp with the settings on screen and measure its memory, "
    "prompt and generation speed and time to first token; the run is stored"
)
NOT_RUN: Final = "Not run yet."


class VerifyPanel(QWidget):
    """The Verify tab: Dry run and Benchmark, progress, Cancel, the comparison table and the
    history of past benchmarks of the model (GUI thread).

    ``request_run`` is called with no arguments when the user asks for a run; the main
    window answers by calling :meth:`VerifyController.start` with the state on screen (the
    Benchmark button first asks the controller for a benchmark, so the same request serves).

    :meth:`set_model` says which model is open (the main window connects its
    ``estimates.model_changed`` to it). A catalog model disables both runs.
    """

    def __init__(
        self, controller: VerifyController, request_run: object, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        assert callable(request_run), "request_run must be callable"
        self._controller = controller
        self._request_run = request_run
        self._no_file = False
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Ask llama.cpp itself what these settings cost on this machine. A dry run reads "
            "the model without loading its weights (as llama-server's --fit does), in a few "
            "seconds; a quick benchmark loads it and measures memory and speed. Both run in "
            "a separate process."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row = QHBoxLayout()
        self.run_button = QPushButton("&Dry run on llama.cpp")
        self.run_button.setToolTip(RUN_TIP)
        self.run_button.clicked.connect(self._on_run_clicked)
        self.bench_button = QPushButton("&Benchmark (quick)")
        self.bench_button.setToolTip(BENCH_TIP)
        self.bench_button.clicked.connect(self._on_bench_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the run (Esc)")
        self.cancel_button.setShortcut("Esc")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(controller.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setTextVisible(False)
        self.progress.setAccessibleName("Run progress")
        self.progress.hide()  # shown while a run is under way
        row.addWidget(self.run_button)
        row.addWidget(self.bench_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress, 1)
        row.addStretch(0)
        layout.addLayout(row)
        self.banner = MessageBanner(name="verify_banner")
        layout.addWidget(self.banner)
        self.status = QLabel(NOT_RUN)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.table_model = ComparisonTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Estimate compared with llama.cpp and the measurement")
        self.table.verticalHeader().hide()
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.ResizeToContents)
        self.table.setAlternatingRowColors(True)
        self.history_model = HistoryTableModel(self)
        self.history = QTableView()
        self.history.setModel(self.history_model)
        self.history.setAccessibleName("Past benchmarks of this model")
        self.history.verticalHeader().hide()
        self.history.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.history.setAlternatingRowColors(True)
        self.history.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        history_box = QWidget()
        history_layout = QVBoxLayout(history_box)
        history_layout.setContentsMargins(0, 0, 0, 0)
        self.history_label = QLabel("Past benchmarks of this model: none yet.")
        history_layout.addWidget(self.history_label)
        history_layout.addWidget(self.history, 1)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.table)
        splitter.addWidget(history_box)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout.addWidget(splitter, 1)
        note = QLabel(
            "llama.cpp prints sizes in MiB with two decimals, so its numbers are known to "
            "±0.005 MiB; weights are exact. Measured: the engine process's resident memory "
            "above its level before loading, and the benchmark's speeds (mean ± sd)."
        )
        note.setWordWrap(True)
        note.setEnabled(False)
        layout.addWidget(note)

        controller.running_changed.connect(self._on_controller_running_changed)
        controller.step.connect(self._on_controller_step)
        controller.progress.connect(self._on_controller_progress)
        controller.finished.connect(self._on_controller_finished)
        controller.benchmark_finished.connect(self._on_controller_benchmark_finished)
        controller.failed.connect(self._on_controller_failed)
        controller.cancelled.connect(self._on_controller_cancelled)
        controller.history_changed.connect(self._on_controller_history_changed)
        controller.history_failed.connect(self.banner.show_message)

    def _on_run_clicked(self) -> None:
        self._controller.request_kind("dry_run")
        self._call_request_run()

    def _on_bench_clicked(self) -> None:
        self._controller.request_kind("benchmark")
        self._call_request_run()
        self._controller.request_kind("dry_run")  # nothing started (no model): forget it

    def _call_request_run(self) -> None:
        request = self._request_run
        assert callable(request), "checked in __init__"
        request()

    def showEvent(self, event: QShowEvent) -> None:
        """Show the history of the model on screen (read on the job pool)."""
        super().showEvent(event)
        estimates = getattr(self.window(), "estimates", None)
        model = getattr(estimates, "model", None)
        if isinstance(model, LoadedModel):
            self.set_model(model)

    def set_model(self, model: LoadedModel | None) -> None:
        """Say which model is open; while shown, read its history (on the job pool).

        A catalog model has no file: nothing can run, and it has no history.
        """
        no_file = model is not None and model.is_catalog
        if no_file != self._no_file:
            self._no_file = no_file
            tip = CATALOG_NO_FILE if no_file else None
            self.run_button.setToolTip(tip or RUN_TIP)
            self.bench_button.setToolTip(tip or BENCH_TIP)
            if no_file:
                self.banner.hide()
                self.table_model.set_rows(())  # the last run was of another model
                self.status.setText(CATALOG_NO_FILE)
            elif self.status.text() == CATALOG_NO_FILE:
                self.status.setText(NOT_RUN)
            self._update_buttons()
        if model is not None and self.isVisible():
            self._controller.refresh_history(model.path)

    def _update_buttons(self) -> None:
        running = self._controller.running
        self.run_button.setEnabled(not running and not self._no_file)
        self.bench_button.setEnabled(not running and not self._no_file)
        self.cancel_button.setEnabled(running)

    def _on_controller_running_changed(self, running: bool) -> None:
        self._update_buttons()
        bench = self._controller.kind == "benchmark"
        self.progress.setRange(0, 100 if bench else (0 if running else 1))
        self.progress.setValue(0)
        self.progress.setTextVisible(bench)
        self.progress.setVisible(running)
        if running:
            self.banner.hide()
            self.status.setText("Starting llama.cpp…")
            self.cancel_button.setFocus()
        else:
            self.run_button.setFocus()

    def _on_controller_step(self, label: str) -> None:
        self.status.setText(label[:1].upper() + label[1:] + "…")

    def _on_controller_progress(self, percent: int, label: str) -> None:
        self.progress.setValue(percent)
        self.status.setText(label[:1].upper() + label[1:] + ("" if percent >= 100 else "…"))

    def _on_controller_finished(self, result: VerifyResult) -> None:
        self.table_model.set_rows(result.rows)
        self.status.setText(f"Done: {result.summary}")

    def _on_controller_benchmark_finished(self, outcome: BenchmarkOutcome) -> None:
        self.table_model.set_rows(outcome.rows)
        stored = "" if outcome.run_id is None else f" · stored as run #{outcome.run_id}"
        self.status.setText(f"Done: {outcome.summary}{stored}")
        if outcome.store_error:
            self.banner.show_message(f"Benchmark done, but {outcome.store_error}.")

    def _on_controller_history_changed(self, runs: tuple[StoredRun, ...]) -> None:
        self.history_model.set_rows(runs)
        n = len(runs)
        if n:
            text = f"Past benchmarks of this model on any machine ({n}, newest first):"
        elif self._no_file:
            text = "Past benchmarks of this model: none (a catalog model has no file)."
        else:
            text = "Past benchmarks of this model: none yet."
        self.history_label.setText(text)

    def _on_controller_cancelled(self) -> None:
        self.status.setText("Cancelled; llama.cpp was stopped.")

    def _on_controller_failed(self, failure: EngineFailure) -> None:
        if failure.no_file:  # nothing was run: say why, no dialog
            self.status.setText(failure.cause)
            return
        self.status.setText(f"Failed: {failure.cause}")
        if failure.kind == "benchmark":
            last = f" (llama.cpp said: {failure.log_tail[-1].strip()})" if failure.log_tail else ""
            self.banner.show_message(f"The benchmark failed: {failure.cause}{last}")
            return
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Dry run failed")
        box.setText("llama.cpp could not run these settings.")
        box.setInformativeText(failure.cause)
        if failure.log_tail:
            box.setDetailedText("\n".join(failure.log_tail))
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setObjectName("engine_failure_dialog")
        box.open()
