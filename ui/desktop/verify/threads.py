"""llama.cpp runs for the Verify tab, each on a ``QThread`` of its own.

:class:`DryRunThread` runs :class:`runner.dry_run.DryRun` and :class:`BenchmarkThread` a
benchmark (:func:`runner.benchmark.benchmark`) in the runner's child process; the thread
only waits on the child, which a cancel kills. Their signals answer on the GUI thread.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import (
    QObject,
    QThread,
    Signal,
)

from app.errors import EngineCancelledError, EngineError, GGTuneError
from app.hardware.devices import Hardware
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
)
from app.measured.results_db import ResultsDB, quick_file_hash
from app.predict.estimate import MemoryEstimate
from app.predict.speed import SpeedFactors
from app.settings import Settings
from runner.benchmark import Benchmark
from runner.dry_run import DryRun
from ui.desktop.shared.kernel_timing import Cancels, with_kernels
from ui.desktop.shared.model_card import LoadedModel, describe_error
from ui.desktop.verify.rows import (
    HISTORY_LIMIT,
    BenchmarkOutcome,
    benchmark_rows,
    summarize_benchmark,
)

DRY_RUN_TIMEOUT_S: Final = 120.0


BENCH_TIMEOUT_S: Final = 300.0
"""Per benchmark step (loading, each timed test)."""


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
class BenchJob:
    """What a benchmark thread needs besides the run itself (to compare and to store)."""

    model: LoadedModel
    estimate: MemoryEstimate
    hardware: Hardware
    db: ResultsDB | None
    factors: SpeedFactors | None = None
    """The factors the Memory view quotes: Verify's predicted column is the same figure."""


class BenchmarkThread(QThread):
    """Wait for one benchmark (worker thread); the engine runs in runner's child process.

    Times this CPU's kernels first where the speed model lacks them (``progress`` then
    carries :data:`~ui.desktop.shared.kernel_timing.KERNELS_STEP`, a str). Emits
    ``progress(object)`` per :data:`app.measured.bench_result.BenchProgress`, then exactly one
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
        job: BenchJob,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._job = job
        self._settings = settings
        self._cancels = Cancels()
        self._bench = Benchmark(
            model.path, settings, plan, timeout_s=BENCH_TIMEOUT_S, on_progress=self._on_progress
        )

    @property
    def pid(self) -> int | None:
        """The engine child's process id while it runs."""
        return self._bench.pid

    def cancel(self) -> None:
        """Kill the child; :meth:`run` then fails with EngineCancelledError."""
        self._cancels.cancel()
        self._bench.cancel()

    def _priced_hardware(self) -> Hardware:
        """Return the job's hardware with this CPU's kernels, timed first where missing (the
        estimate column then prices the CPU as the Memory view does once they are timed)."""

        job = self._job
        hardware = with_kernels(
            job.model.spec,
            self._settings,
            job.hardware,
            on_step=self.progress.emit,
            on_cancel_ready=self._cancels.add,
        )
        if self._cancels.cancelled:
            raise EngineCancelledError("cancelled while timing this CPU's kernels")
        return hardware

    def _on_progress(self, event: BenchProgress) -> None:
        self.progress.emit(event)

    def run(self) -> None:
        """Run the benchmark, compare, store, and report (worker thread)."""
        job = self._job
        try:
            hardware = self._priced_hardware()
            result = self._bench.run()
            rows = benchmark_rows(job.model.spec, job.estimate, result, hardware, job.factors)
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
        history: int | None = None
        if job.db is not None:
            try:
                model_hash = quick_file_hash(result.model_path)
                run_id = job.db.add(result, model_hash=model_hash)
                for moved in job.db.set_aside:
                    store_error = f"{moved.reason}; it was kept as {moved.path}"
                # what the history below will list (the same query, the same limit)
                history = len(job.db.runs(model_hash=model_hash, limit=HISTORY_LIMIT))
            except Exception as err:  # sqlite3, a full disk: the run itself is fine
                store_error = f"the run was not stored: {describe_error(err)}"
        summary = summarize_benchmark(result)
        self.succeeded.emit(BenchmarkOutcome(rows, summary, result, run_id, store_error, history))


def make_dry_run(path: str, settings: Settings, on_event: object) -> DryRun:
    assert callable(on_event), "on_event must be callable"
    return DryRun(path, [settings], timeout_s=DRY_RUN_TIMEOUT_S, on_event=on_event)
