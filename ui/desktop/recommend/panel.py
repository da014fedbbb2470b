"""The Recommend tab: say what matters, get settings for it, the reasons, and the runner-up.

:class:`RecommendController` runs :func:`app.planning.planner.recommend` (the search ``ggtune
recommend`` runs, with the same quant options and speed factors) on the job pool; a newer
request or Cancel drops an older answer, so the GUI never waits. :meth:`RecommendController.apply`
puts the plan's settings on the sliders through
:meth:`~ui.desktop.shared.estimate_controller.EstimateController.update`. The settings apply to
the file that is open; when the plan is for another (simulated) quant, Apply also selects
that level in the Settings panel's Quantization combo
(:meth:`~ui.desktop.shared.estimate_controller.EstimateController.set_quant`), and
:func:`apply_note` says that the file has to be downloaded or made with ``llama-quantize``.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QObject, Qt, QTimer, Signal
from PySide6.QtGui import QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QProgressBar,
    QPushButton,
    QScrollArea,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.goals import Candidate, Goal, GoalName, Recommendation
from app.planning.machines import RemoteMachine
from app.planning.options import DEFAULT_MAX_KLD, QuantOption, own_quant_name, quant_options
from app.planning.planner import recommend, server_argv
from app.planning.words import RPC_SECURITY_NOTE, fmt_ctx
from app.predict.speed import SpeedFactors
from app.units import GIB, format_bytes, format_tps
from ui.desktop.compare.rows import compare_options
from ui.desktop.machines.panel import MachinesController
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.estimate_controller import EstimateController
from ui.desktop.shared.jobs import LatestJob
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.speed import SpeedController, model_file_bytes

GOAL_TITLES: Final[dict[GoalName, str]] = {
    "longest-context": "Longest context",
    "fastest": "Fastest",
    "best-quality": "Best quality",
    "users": "Several users at a speed",
}


@dataclass(frozen=True, slots=True)
class GoalForm:
    """What the goal form holds (tokens, tok/s, GiB); :meth:`goal` turns it into a Goal.

    Mirrors ``ggtune recommend``'s flags: ``ctx`` is ``--ctx`` (context per user; 0 for
    the goal's default), ``any_quant`` ``--any-quant``, ``only_open_file``
    ``--no-simulate``.
    """

    name: GoalName = "longest-context"
    n_users: int = 1
    min_tok_per_s: float = 0.0
    ctx: int = 0
    min_ctx: int = 0
    leave_free_gib: float = 0.0
    any_quant: bool = False
    only_open_file: bool = False
    use_machines: bool = True
    """Also plan over the other machines that are on (the Hardware tab), as
    ``--rpc-saved``."""

    def goal(self, margin_bytes: int) -> Goal:
        """Return the planner's goal (raises PlanError on nonsense, e.g. 0 users)."""
        return Goal(
            self.name,
            ctx=self.ctx or None,
            min_ctx=self.min_ctx,
            n_users=self.n_users,
            min_tok_per_s=self.min_tok_per_s or None,
            leave_free_bytes=int(self.leave_free_gib * GIB),
            margin_bytes=margin_bytes,
            max_kld=None if self.any_quant else DEFAULT_MAX_KLD,
        )


@dataclass(frozen=True, slots=True)
class RecommendOutcome:
    """A finished search: the recommendation for the model at ``model_path``."""

    model_path: str
    open_quant: str
    recommendation: Recommendation


def plan(
    spec: ModelSpec,
    hardware: Hardware,
    goal: Goal,
    options: tuple[QuantOption, ...],
    factors: SpeedFactors,
) -> Recommendation:
    """Run the planner (pure; seconds for a large model, so call it on the pool)."""
    return recommend(spec, hardware, goal, options=options, factors=factors)


def pooled_commands(outcome: RecommendOutcome) -> str:
    """Return, for a plan over several machines, each machine's share and the commands that
    start it: ``ggml-rpc-server`` on each remote, ``llama-server --rpc …`` here."""
    rec = outcome.recommendation
    rpc = rec.rpc
    if rpc is None or rec.best is None:
        return ""
    lines = ["Each machine's share:"]
    for m in rpc.machines:
        cap = f" of {format_bytes(m.capacity_bytes)}" if m.capacity_bytes else ""
        what = f" ({m.label})" if m.label else ""
        load = f"; loading sends it {format_bytes(m.load_bytes)}" if m.load_bytes else ""
        lines.append(
            f"  {m.machine}{what}: {m.n_layers} layers, {format_bytes(m.total_bytes)}{cap}{load}"
        )
    lines.append("On each other machine:")
    for host, argv in zip(rpc.hosts, rpc.remote_commands, strict=True):
        lines.append(f"  {host.endpoint}:  {shlex.join(argv)}")
    lines.append("On this machine:")
    lines.append(f"  {shlex.join(server_argv(outcome.model_path, rec))}")
    lines.append(RPC_SECURITY_NOTE)
    return "\n".join(lines)


def settings_summary(c: Candidate) -> str:
    """Return the plan's settings in one line, as the Settings panel names them."""
    s = c.settings
    ngl = "all" if s.n_gpu_layers < 0 else str(s.n_gpu_layers)
    parts = [
        f"{c.quant.name} ({c.quant.origin})",
        f"context {fmt_ctx(s.n_ctx)}"
        + (f" ({fmt_ctx(c.n_ctx_per_user)} × {s.n_parallel} users)" if s.n_parallel > 1 else ""),
        f"GPU layers {ngl}",
        f"KV cache {s.cache_type_k}/{s.cache_type_v}",
        f"flash attention {s.flash_attn}",
    ]
    if s.kv_unified:
        parts.append("one shared cache")
    if s.n_cpu_moe:
        parts.append(f"experts of {s.n_cpu_moe} layers on the CPU")
    if not s.use_mmap:
        parts.append("mmap off")
    speed = c.speed
    parts.append(f"~{format_tps(speed.per_user_tok_per_s)} tok/s per user")
    used = sum(d.total_bytes for d in c.estimate.devices)
    parts.append(f"{format_bytes(used)} in all")
    return ", ".join(parts)


def apply_note(c: Candidate, open_quant: str) -> str:
    """Return what Apply did, and what is left to do when the plan is for another quant."""
    if c.quant.on_disk or c.quant.name == open_quant:
        return "Applied: the sliders now hold this plan for the file you have open."
    imatrix = " (with --imatrix)" if c.quant.needs_imatrix else ""
    return (
        f"Applied, with {c.quant.name} simulated (your file is {open_quant}): to run it, "
        f"download a {c.quant.name} GGUF or make one with llama-quantize{imatrix}."
    )


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
            return key, options, RecommendOutcome(spec.path, open_quant, rec)

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


class RecommendPanel(QWidget):
    """The Recommend tab (GUI thread): the goal form, Recommend/Cancel with a busy bar,
    then the settings, the reasons, the runner-up and Apply."""

    def __init__(self, controller: RecommendController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.controller = controller
        outer = QVBoxLayout(self)
        self.banner = MessageBanner(name="recommend_banner")
        outer.addWidget(self.banner)

        self._row = row = QBoxLayout(QBoxLayout.Direction.LeftToRight)
        form_box = QGroupBox("What matters to you")
        form = QFormLayout(form_box)
        self.goal_box = QComboBox()
        for name, title in GOAL_TITLES.items():
            self.goal_box.addItem(title, name)
        self.goal_box.setToolTip("What the plan should make as good as it can")
        self.goal_box.currentIndexChanged.connect(self._on_goal_box_changed)
        form.addRow("&Goal:", self.goal_box)
        self.users = QSpinBox()
        self.users.setRange(1, 1024)
        self.users.setToolTip("How many people (or programs) use the model at once")
        form.addRow("&Users at once:", self.users)
        self.min_tps = QDoubleSpinBox()
        self.min_tps.setRange(0.0, 10_000.0)
        self.min_tps.setDecimals(1)
        self.min_tps.setSpecialValueText("any")
        self.min_tps.setSuffix(" tok/s")
        self.min_tps.setToolTip("The writing speed each user must get at least (0: any)")
        form.addRow("Speed &each:", self.min_tps)
        self.ctx = QSpinBox()
        self.ctx.setRange(0, 10_000_000)
        self.ctx.setSingleStep(1024)
        self.ctx.setSpecialValueText("default")
        self.ctx.setSuffix(" tokens")
        self.ctx.setToolTip("How much text each user's conversation holds (0: the goal's default)")
        form.addRow("&Context each:", self.ctx)
        self.min_ctx = QSpinBox()
        self.min_ctx.setRange(0, 10_000_000)
        self.min_ctx.setSingleStep(1024)
        self.min_ctx.setSpecialValueText("none")
        self.min_ctx.setSuffix(" tokens")
        self.min_ctx.setToolTip("Never plan for less context than this")
        form.addRow("&Minimum context:", self.min_ctx)
        self.leave_free = QDoubleSpinBox()
        self.leave_free.setRange(0.0, 4096.0)
        self.leave_free.setDecimals(1)
        self.leave_free.setSuffix(" GiB")
        self.leave_free.setToolTip(
            "Memory to keep free on every device for other programs (on top of the 1 GiB margin)"
        )
        form.addRow("&Leave free:", self.leave_free)
        self.any_quant = QCheckBox("Also quants below Q4_K_M's quality")
        self.any_quant.setToolTip("Allow smaller, lossier quants (KL divergence above 0.031)")
        form.addRow("", self.any_quant)
        self.only_file = QCheckBox("Only the open model's own quant")
        self.only_file.setToolTip("Do not suggest other quant levels")
        form.addRow("", self.only_file)
        self.use_machines = QCheckBox("Also my other machines")
        self.use_machines.setChecked(True)
        self.use_machines.setToolTip(
            "Plan across this machine and the other machines that are on in the Hardware tab "
            "(llama.cpp's RPC backend)"
        )
        form.addRow("", self.use_machines)
        if controller.machines is not None:
            controller.machines.changed.connect(self._on_machines_changed)
            self._on_machines_changed(controller.machines.machines)
        else:
            self.use_machines.setVisible(False)
        buttons = QHBoxLayout()
        self.run_button = QPushButton("&Recommend")
        self.run_button.setDefault(True)
        self.run_button.clicked.connect(self._on_run_clicked)
        buttons.addWidget(self.run_button)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(controller.cancel)
        buttons.addWidget(self.cancel_button)
        form.addRow(buttons)
        self.progress = QProgressBar()
        self.progress.setRange(0, 0)
        self.progress.setTextVisible(False)
        self.progress.setMaximumHeight(8)
        self.progress.setVisible(False)
        self.progress.setAccessibleName("Planning")
        form.addRow(self.progress)
        row.addWidget(form_box)

        result_box = QGroupBox("The plan")
        result = QVBoxLayout(result_box)
        self.settings_label = QLabel("Choose a goal and press Recommend.")
        self.settings_label.setWordWrap(True)
        font = self.settings_label.font()
        font.setBold(True)
        self.settings_label.setFont(font)
        self.settings_label.setAccessibleName("Recommended settings")
        self.settings_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        result.addWidget(self.settings_label)
        self.why_label = QLabel()
        self.why_label.setWordWrap(True)
        self.why_label.setAccessibleName("Why")
        self.why_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        result.addWidget(self.why_label)
        self.runner_up_label = QLabel()
        self.runner_up_label.setWordWrap(True)
        self.runner_up_label.setAccessibleName("Runner-up")
        self.runner_up_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        result.addWidget(self.runner_up_label)
        self.machines_label = QLabel()
        self.machines_label.setWordWrap(True)
        self.machines_label.setAccessibleName("Commands for each machine")
        self.machines_label.setTextFormat(Qt.TextFormat.PlainText)
        self.machines_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.machines_label.setVisible(False)
        result.addWidget(self.machines_label)
        apply_row = QHBoxLayout()
        self.apply_button = QPushButton("&Apply to the sliders")
        self.apply_button.setEnabled(False)
        self.apply_button.setToolTip("Set the Settings panel to this plan")
        self.apply_button.clicked.connect(self._on_apply_clicked)
        apply_row.addWidget(self.apply_button)
        apply_row.addStretch(1)
        result.addLayout(apply_row)
        self.apply_label = QLabel()
        self.apply_label.setWordWrap(True)
        self.apply_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        result.addWidget(self.apply_label)
        result.addStretch(1)
        scroll = QScrollArea()
        scroll.setWidget(result_box)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        row.addWidget(scroll, 1)
        outer.addLayout(row, 1)

        controller.finished.connect(self._on_controller_finished)
        controller.failed.connect(self._on_controller_failed)
        controller.busy_changed.connect(self._on_controller_busy_changed)
        controller.applied.connect(self.apply_label.setText)
        controller.model_changed.connect(self._on_controller_model_changed)
        self._on_goal_box_changed(0)

    NARROW_PX: Final = 900

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Put the plan under the form when the tab is narrow."""
        narrow = event.size().width() < self.NARROW_PX
        direction = QBoxLayout.Direction.TopToBottom if narrow else QBoxLayout.Direction.LeftToRight
        if self._row.direction() != direction:
            self._row.setDirection(direction)
        super().resizeEvent(event)

    def showEvent(self, event: QShowEvent) -> None:
        """Plan for the form's goal the first time the tab shows a model."""
        super().showEvent(event)
        self._maybe_auto_run()

    def _on_controller_model_changed(self) -> None:
        QTimer.singleShot(0, self._maybe_auto_run)

    def _maybe_auto_run(self) -> None:
        c = self.controller
        if self.isVisible() and c.has_model and c.outcome is None and not c.busy:
            self._on_run_clicked()

    def form(self) -> GoalForm:
        """Return what the form holds."""
        name = self.goal_box.currentData()
        assert name in GOAL_TITLES, f"unknown goal {name!r}"
        return GoalForm(
            name=name,
            n_users=self.users.value(),
            min_tok_per_s=self.min_tps.value(),
            ctx=self.ctx.value(),
            min_ctx=self.min_ctx.value(),
            leave_free_gib=self.leave_free.value(),
            any_quant=self.any_quant.isChecked(),
            only_open_file=self.only_file.isChecked(),
            use_machines=self.use_machines.isChecked(),
        )

    def set_form(self, form: GoalForm) -> None:
        """Fill the form from ``form``."""
        self.goal_box.setCurrentIndex(self.goal_box.findData(form.name))
        self.users.setValue(form.n_users)
        self.min_tps.setValue(form.min_tok_per_s)
        self.ctx.setValue(form.ctx)
        self.min_ctx.setValue(form.min_ctx)
        self.leave_free.setValue(form.leave_free_gib)
        self.any_quant.setChecked(form.any_quant)
        self.only_file.setChecked(form.only_open_file)
        self.use_machines.setChecked(form.use_machines)

    def _on_machines_changed(self, machines: tuple[RemoteMachine, ...]) -> None:
        on = sum(1 for m in machines if m.enabled)
        self.use_machines.setText(f"Also my other machines ({on} on, Hardware tab)")
        self.use_machines.setEnabled(on > 0)

    def _on_goal_box_changed(self, _index: int) -> None:
        longest = self.goal_box.currentData() == "longest-context"
        self.ctx.setEnabled(not longest)
        self.min_ctx.setEnabled(longest)

    def _on_run_clicked(self) -> None:
        self.banner.hide()
        self.controller.run(self.form())

    def _on_apply_clicked(self) -> None:
        self.controller.apply()

    def _on_controller_busy_changed(self, busy: bool) -> None:
        self.progress.setVisible(busy)
        self.cancel_button.setEnabled(busy)
        if busy:
            self.apply_button.setEnabled(False)
            self.settings_label.setText("Planning…")
        elif self.controller.outcome is None:
            self.settings_label.setText("Choose a goal and press Recommend.")
        else:
            self._on_controller_finished(self.controller.outcome)

    def _on_controller_finished(self, outcome: RecommendOutcome) -> None:
        self.banner.hide()
        rec = outcome.recommendation
        self.apply_label.clear()
        if rec.best is None:
            self.settings_label.setText("Nothing fits this goal.")
        else:
            prefix = "" if rec.feasible else "Closest plan (the goal is not met): "
            self.settings_label.setText(prefix + settings_summary(rec.best))
        self.why_label.setText(rec.why)
        if rec.runner_up is not None:
            self.runner_up_label.setText("Runner-up: " + settings_summary(rec.runner_up))
        else:
            self.runner_up_label.setText("No runner-up: nothing else fits.")
        pooled = rec.rpc is not None and rec.best is not None
        self.apply_button.setEnabled(rec.best is not None and not pooled)
        self.apply_button.setToolTip(
            "A plan over several machines runs from the commands above; the sliders plan "
            "this machine alone"
            if pooled
            else "Set the Settings panel to this plan"
        )
        self.machines_label.setText(pooled_commands(outcome) if pooled else "")
        self.machines_label.setVisible(pooled)

    def _on_controller_failed(self, message: str) -> None:
        self.banner.show_message(message)
