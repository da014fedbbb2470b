"""Verify's Users run: N users on llama.cpp together, measured beside predicted.

:class:`UsersThread` times this CPU's kernels once where the speed model lacks them
(:func:`runner.kernel_bench.ensure_rates`), predicts the rounds
(:func:`app.planning.users.predict_every_count`: the load test's scheduling, the speed
model's step times) for every user count from 1 to the most the run serves, then runs the
load test
(:class:`runner.load_test.LoadTest`: 1, 2, 4 … users decoding together with continuous
batching, up to the slots on screen, at least 4) and stores it. The answer is a
:class:`UsersOutcome`; :mod:`ui.desktop.verify.users_view` shows it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QObject, QThread, Signal

from app.errors import EngineCancelledError, EngineError, GGTuneError
from app.hardware.devices import Hardware
from app.measured.results_db import ResultsDB, quick_file_hash
from app.measured.users_result import RoundSummary, Slo, UsersPlan, UsersResult, answer
from app.planning.users import predict_every_count
from app.predict.speed import SpeedFactors
from app.settings import Settings
from runner.load_test import LoadTest
from ui.desktop.shared.kernel_timing import Cancels, with_kernels
from ui.desktop.shared.model_card import LoadedModel, describe_error
from ui.desktop.shared.speed import load_speed_factors
from ui.desktop.verify.rows import HISTORY_LIMIT

USERS_TIMEOUT_S: Final = 600.0
"""Per load-test step (loading, each round)."""
MAX_USERS_RUN: Final = 16
"""The Users run serves 1, 2, 4 … up to the plan's slots (at least 4), at most this many."""


def users_counts(n_parallel: int) -> tuple[int, ...]:
    """Return the user counts of a Users run: 1, 2, 4 … up to the plan's slots (at least 4,
    at most :data:`MAX_USERS_RUN`), the slots themselves last.

    >>> users_counts(1), users_counts(6), users_counts(64)
    ((1, 2, 4), (1, 2, 4, 6), (1, 2, 4, 8, 16))
    """
    top = min(MAX_USERS_RUN, max(4, n_parallel))
    counts = [1]
    while counts[-1] * 2 <= top:
        counts.append(counts[-1] * 2)
    if counts[-1] != top:
        counts.append(top)
    return tuple(counts)


@dataclass(frozen=True, slots=True)
class UsersOutcome:
    """A finished Users run: the load test, the prediction of every user count from 1 to
    the most measured (``predicted``, by count), the SLO, the answers in words (the
    predicted one over every count, so it names the first user who misses), the factors'
    source, whether they are calibrated, and how storing it went."""

    result: UsersResult
    measured: tuple[RoundSummary, ...]
    predicted: dict[int, RoundSummary]
    slo: Slo
    answer: str
    predicted_answer: str
    prediction_source: str
    run_id: int | None
    store_error: str | None
    calibrated: bool = False
    history_runs: int | None = None
    """How many Users runs of this model are stored now, this one included (up to
    :data:`~ui.desktop.verify.rows.HISTORY_LIMIT`; None when it was not stored)."""


class UsersThread(QThread):
    """Time this CPU's kernels where needed, predict, then run the load test (worker
    thread; llama.cpp runs in runner's child processes).

    Emits ``progress(object)`` (:data:`~app.measured.bench_result.BenchProgress`, and a
    ``str`` while the kernels are timed), then exactly one of ``succeeded(UsersOutcome)``
    or ``failed(GGTuneError)``. :meth:`cancel` is safe from any thread.
    """

    progress = Signal(object)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(
        self,
        model: LoadedModel,
        settings: Settings,
        hardware: Hardware,
        plan: UsersPlan,
        slo: Slo,
        factors: SpeedFactors,
        db: ResultsDB | None,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._model, self._settings, self._hardware = model, settings, hardware
        self._plan, self._slo, self._factors, self._db = plan, slo, factors, db
        self._cancels = Cancels()
        self._test = LoadTest(
            model.path,
            settings,
            plan,
            timeout_s=USERS_TIMEOUT_S,
            on_progress=self.progress.emit,
        )

    @property
    def pid(self) -> int | None:
        """The load test's child process id while it runs."""
        return self._test.pid

    def cancel(self) -> None:
        """Kill whichever child runs; :meth:`run` then fails with EngineCancelledError."""
        self._cancels.cancel()
        self._test.cancel()

    def run(self) -> None:
        """Time kernels, predict, run, store and report (worker thread)."""
        try:
            if self._factors.n_measurements == 0:
                # a run started before the Memory view's calibration loaded (it loads on
                # the pool): read it the same way here, so the figure is the one every
                # tab shows a moment later, not the published ratios
                self._factors = load_speed_factors(self._model.spec, self._hardware, True)
            hardware = self._with_kernels()
            if self._cancels.cancelled:
                raise EngineCancelledError("cancelled while timing this CPU's kernels")
            predicted = predict_every_count(
                self._model.spec, self._settings, hardware, self._plan, self._slo, self._factors
            )
            result = self._test.run()
        except GGTuneError as err:
            self.failed.emit(err)
            return
        except Exception as err:  # never let an unexpected error die silently in a thread
            self.failed.emit(
                EngineError(f"the Users run failed unexpectedly: {describe_error(err)}")
            )
            return
        run_id: int | None = None
        store_error: str | None = None
        history: int | None = None
        if self._db is not None:
            try:
                model_hash = quick_file_hash(result.model_path)
                run_id = self._db.add_users(result, model_hash=model_hash, slo=self._slo)
                history = len(self._db.users_runs(model_hash=model_hash, limit=HISTORY_LIMIT))
            except Exception as err:  # sqlite3, a full disk: the run itself is fine
                store_error = f"the run was not stored: {describe_error(err)}"
        measured = result.summaries(self._slo)
        self.succeeded.emit(
            UsersOutcome(
                result,
                measured,
                predicted,
                self._slo,
                answer(measured, self._slo),
                answer([predicted[n] for n in sorted(predicted)], self._slo),
                self._factors.source,
                run_id,
                store_error,
                self._factors.n_measurements > 0,
                history,
            )
        )

    def _with_kernels(self) -> Hardware:
        """Return the hardware with this CPU's kernel rates (timed now where missing)."""

        return with_kernels(
            self._model.spec,
            self._settings,
            self._hardware,
            on_step=self.progress.emit,
            on_cancel_ready=self._cancels.add,
        )
