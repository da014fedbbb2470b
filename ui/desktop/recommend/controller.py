"""The Recommend tab's controller.

:class:`RecommendController` runs :func:`app.planning.planner.recommend` (the search ``ggtune
recommend`` runs, with the same quant options and speed factors) on the job pool; a newer
request or Cancel drops an older answer, so the GUI never waits. :meth:`RecommendController.apply`
puts the plan's settings on the sliders through
:meth:`~ui.desktop.shared.estimate_controller.EstimateController.update`. The settings apply to
the file that is open; when the plan is for another (simulated) quant, Apply also selects
that level in the Settings panel's Quantization combo
(:meth:`~ui.desktop.shared.estimate_controller.EstimateController.set_quant`), and
:func:`~ui.desktop.recommend.rows.apply_note` says that the file has to be downloaded or made
with ``llama-quantize``.
"""

from __future__ import annotations

import dataclasses

from PySide6.QtCore import QObject, Signal

from app.errors import GGTuneError
from app.model.catalog import is_catalog
from app.planning.goals import Recommendation
from app.planning.options import QuantOption, own_quant_name, quant_options
from app.planning.users import measured_users, plan_users_line
from ui.desktop.compare.rows import compare_options
from ui.desktop.machines.controller import MachinesController
from ui.desktop.recommend.rows import GoalForm, RecommendOutcome, apply_note, plan
from ui.desktop.shared.estimate_controller import EstimateController
from ui.desktop.shared.jobs import LatestJob
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.speed import USERS_SLO, SpeedController, model_file_bytes


class RecommendController(QObject):
    """Plans for a goal on the job pool and applies the result (GUI thread).

    Signals: ``finished(RecommendOutcome)``, ``failed(str)`` (one line, no traceback),
    ``busy_changed(bool)``, ``applied(str)`` (what Apply did, in words), ``model_changed()``
    (the last answer is gone).
    """

    finished = Signal(object)
    failed = Signal(str)
    busy_changed = Signal(bool)
    applied = Signal(str)
    model_changed = Signal()
    users_changed = Signal(int)

    def __init__(
        self,
        estimates: EstimateController,
        speed: SpeedController,
        parent: QObject | None = None,
        *,
        machines: MachinesController | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._speed = speed
        self.machines = machines
        self._options: dict[tuple[str, bool], tuple[QuantOption, ...]] = {}
        self._outcome: RecommendOutcome | None = None
        self._job = LatestJob(0, self._on_job_done, self._on_job_failed, self)
        self._job.busy_changed.connect(self.busy_changed)
        estimates.model_changed.connect(self._on_estimates_model_changed)
        estimates.settings_changed.connect(lambda s: self.users_changed.emit(s.n_parallel))

    @property
    def settings_users(self) -> int:
        """The parallel users the Settings panel holds (the form starts from them)."""
        return self._estimates.settings.n_parallel

    @property
    def busy(self) -> bool:
        """Whether a search is under way."""
        return self._job.busy

    @property
    def outcome(self) -> RecommendOutcome | None:
        """The latest answer for the open model (None before one, or after a new model)."""
        return self._outcome

    def run(self, form: GoalForm) -> None:
        """Plan for ``form`` on the pool (replaces a search under way)."""
        state = self._estimates.state
        model = state.model
        if model is None:
            self.failed.emit("Open a model first.")
            return
        try:
            goal = form.goal(state.margin_bytes)
        except Exception as err:  # PlanError: shown, never raised into Qt
            self.failed.emit(f"Cannot plan for that: {describe_error(err)}")
            return
        spec = model.spec
        hardware = state.hardware.hardware
        if form.use_machines and self.machines is not None:
            goal = dataclasses.replace(goal, rpc_hosts=self.machines.hosts())
        factors = self._speed.factors
        this_machine = state.hardware.source == "local"
        key = (spec.path, form.only_open_file)
        known = self._options.get(key)
        only_file = form.only_open_file
        open_quant = own_quant_name(spec)

        def job() -> tuple[tuple[str, bool], tuple[QuantOption, ...], RecommendOutcome]:
            if known is not None:
                options = known
            elif only_file:
                options = quant_options(spec, simulate=None, file_bytes=model_file_bytes(spec))
            else:
                options = compare_options(spec)
            rec = plan(spec, hardware, goal, options, factors)
            line = users_line(rec) if goal.name == "users" else None
            return key, options, RecommendOutcome(spec.path, open_quant, rec, line)

        def users_line(rec: Recommendation) -> str | None:
            if rec.best is None or rec.rpc is not None:
                return None
            measured = None
            if this_machine and not is_catalog(spec.path):
                measured = measured_users(spec.path, USERS_SLO)
            try:
                return plan_users_line(rec.best, hardware, USERS_SLO, factors, measured)
            except GGTuneError:
                return None

        self._job.request(job, now=True)

    def cancel(self) -> None:
        """Stop waiting for the search under way (its answer is dropped)."""
        self._job.cancel()

    def apply(self) -> str | None:
        """Put the best plan's settings on the sliders; return what was done (None: nothing)."""
        outcome = self._outcome
        model = self._estimates.model
        if outcome is None or outcome.recommendation.best is None or model is None:
            return None
        if outcome.model_path != model.spec.path:
            return None
        best = outcome.recommendation.best
        if outcome.recommendation.rpc is not None:
            return None  # a plan over several machines runs from its commands
        simulated = not best.quant.on_disk and best.quant.name != outcome.open_quant
        self._estimates.set_quant(best.quant.name if simulated else None)
        self._estimates.update(**dataclasses.asdict(best.settings))
        note = apply_note(best, outcome.open_quant)
        self.applied.emit(note)
        return note

    def _on_job_done(
        self, result: tuple[tuple[str, bool], tuple[QuantOption, ...], RecommendOutcome]
    ) -> None:
        key, options, outcome = result
        self._options[key] = options
        model = self._estimates.model
        if model is None or model.spec.path != outcome.model_path:
            return  # another model opened meanwhile
        self._outcome = outcome
        self.finished.emit(outcome)

    def _on_job_failed(self, error: Exception) -> None:
        self.failed.emit(f"Could not plan: {describe_error(error)}")

    def _on_estimates_model_changed(self, _model: object) -> None:
        self._job.cancel()
        self._outcome = None
        self._options.clear()
        self.model_changed.emit()

    @property
    def has_model(self) -> bool:
        """Whether a model is open to plan for."""
        return self._estimates.model is not None
