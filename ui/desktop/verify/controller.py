"""The Verify tab's controller: one llama.cpp run at a time for the model on screen.

:class:`VerifyController` starts a dry run or a benchmark of the open model at the
settings on screen (:mod:`ui.desktop.verify.threads`), turns the answer into rows
(:mod:`ui.desktop.verify.rows`), stores benchmarks in the results database and reads
the model's history on the job pool; every failure is an
:class:`~ui.desktop.verify.rows.EngineFailure`, never a traceback.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from PySide6.QtCore import (
    QObject,
    Signal,
    Slot,
)

from app.errors import EngineCancelledError, EngineCrashedError, EngineError, GGTuneError
from app.hardware.devices import Hardware
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
    BenchStep,
    Loaded,
    LoadProgress,
)
from app.measured.engine_report import EngineReport
from app.measured.results_db import ResultsDB, StoredRun, StoredUsersRun, quick_file_hash
from app.measured.users_result import Slo, UsersPlan, settings_for_users
from app.model.catalog import is_catalog
from app.predict.estimate import MemoryEstimate, estimate, repack_is_safe
from app.predict.speed import SpeedFactors
from app.settings import Settings
from runner.worker import Event, StepEvent
from ui.desktop.shared.jobs import run_job
from ui.desktop.shared.model_card import CATALOG_NO_FILE, LoadedModel, describe_error
from ui.desktop.verify.rows import (
    HISTORY_LIMIT,
    BenchmarkOutcome,
    EngineFailure,
    RunKind,
    VerifyResult,
    comparison_rows,
    summarize,
)
from ui.desktop.verify.threads import BenchJob, BenchmarkThread, DryRunThread, make_dry_run
from ui.desktop.verify.users_run import UsersOutcome, UsersThread, users_counts

LOAD_SHARE: Final = 30
"""Percent of the benchmark's progress bar given to loading the model; the steps share the rest."""


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
    users_finished = Signal(object)
    history_changed = Signal(object)
    users_history_changed = Signal(object)
    """(model path, the newest stored Users run of it or None), read with the history."""
    history_failed = Signal(str)

    def __init__(
        self,
        parent: QObject | None = None,
        *,
        results_db: ResultsDB | None = None,
        bench_plan: BenchPlan | None = None,
    ) -> None:
        super().__init__(parent)
        self._thread: DryRunThread | BenchmarkThread | UsersThread | None = None
        self._context: tuple[LoadedModel, MemoryEstimate] | None = None
        self._cancelling = False
        self._next_kind: RunKind = "dry_run"
        self._amx_risk = False  # the run has packed weights on a CPU with AMX
        self._kind: RunKind | None = None
        self._db = results_db
        self.bench_plan: BenchPlan = bench_plan or BenchPlan.quick()
        self.users_plan: UsersPlan | None = None
        """The Users run's plan (None: quick, 1, 2, 4 … up to the slots on screen)."""
        self.slo = Slo()
        self.speed_factors: Callable[[], SpeedFactors] = SpeedFactors
        """The factors the Memory view quotes (the main window connects them), so Verify's
        predicted column is the same figure."""
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
    def dry_run_thread(self) -> DryRunThread | BenchmarkThread | UsersThread | None:
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
        self._amx_risk = settings.repack and not repack_is_safe(hardware.host)
        if kind == "benchmark":
            self.start_benchmark(model, settings, hardware)
            return
        if kind == "users":
            self.start_users(model, settings, hardware)
            return
        assert self._thread is None, "one run at a time"
        if model.is_catalog:
            self.failed.emit(EngineFailure(CATALOG_NO_FILE, (), "dry_run", no_file=True))
            return
        try:
            est = estimate(model.spec, settings, hardware)
            dry_run = make_dry_run(model.path, settings, self._on_engine_event)
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
            job = BenchJob(model, est, hardware, self.results_db, self.speed_factors())
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

    def start_users(self, model: LoadedModel, settings: Settings, hardware: Hardware) -> None:
        """Serve 1, 2, 4 … users of ``model`` together (:attr:`users_plan`), measured beside
        predicted under :attr:`slo`."""
        assert self._thread is None, "one run at a time"
        if model.is_catalog:
            self.failed.emit(EngineFailure(CATALOG_NO_FILE, (), "users", no_file=True))
            return
        try:
            plan = self.users_plan or UsersPlan.quick(users_counts(settings.n_parallel))
            run_settings = settings_for_users(model.spec, settings, plan)
            estimate(model.spec, run_settings, hardware)  # refuses what llama.cpp refuses
            thread = UsersThread(
                model, run_settings, hardware, plan, self.slo, self.speed_factors(),
                self.results_db, self,
            )  # fmt: skip
        except Exception as err:  # a refused setting, a missing file: a banner, not a crash
            self.failed.emit(EngineFailure(describe_error(err), (), "users"))
            return
        self._cancelling = False
        thread.progress.connect(self._on_users_progress)
        thread.succeeded.connect(self._on_users_succeeded)
        thread.failed.connect(self._on_thread_failed)
        self._launch(thread, "users")

    def _on_users_progress(self, event: object) -> None:
        self._on_bench_progress(event)  # type: ignore[arg-type]

    @Slot(object)
    def _on_users_succeeded(self, outcome: UsersOutcome) -> None:
        self._end()
        self.progress.emit(100, "done")
        self.users_finished.emit(outcome)

    def _launch(self, thread: DryRunThread | BenchmarkThread | UsersThread, kind: RunKind) -> None:
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
            self.users_history_changed.emit((model_path, None))
            return
        db = self.results_db

        def query() -> tuple[str, tuple[StoredRun, ...], StoredUsersRun | None]:
            model_hash = quick_file_hash(model_path)
            runs = db.runs(model_hash=model_hash, limit=HISTORY_LIMIT)
            users = db.users_runs(model_hash=model_hash, limit=1)
            return model_path, tuple(runs), (users[0] if users else None)

        run_job(query, on_success=self._on_history, on_failure=self._on_history_failed, parent=self)

    def _on_history(self, answer: tuple[str, tuple[StoredRun, ...], StoredUsersRun | None]) -> None:
        path, runs, users = answer
        if path == self._history_path:  # a newer request wins
            self.history_changed.emit(runs)
            self.users_history_changed.emit((path, users))

    def _on_history_failed(self, error: Exception) -> None:
        self.history_failed.emit(
            f"The history of past runs could not be read: {describe_error(error)}"
        )

    def _on_engine_event(self, event: Event) -> None:
        """Forward step labels (worker thread: a signal crosses to the GUI thread)."""
        thread = self._thread
        if isinstance(event, StepEvent) and isinstance(thread, DryRunThread):
            thread.step.emit(event.label)

    def _on_bench_progress(self, event: BenchProgress | str) -> None:
        if self._cancelling:
            return
        if isinstance(event, str):  # timing this CPU's kernels first
            self.progress.emit(0, event)
        elif isinstance(event, LoadProgress):
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
        cause = describe_error(error)
        if isinstance(error, EngineCrashedError) and self._amx_risk:
            cause += (
                " — this CPU has AMX, whose llama.cpp kernels crash on some machines "
                "(llama.cpp issue #20824): turn off “Repack weights for this CPU”"
            )
        self.failed.emit(EngineFailure(cause, tuple(tail), kind))
