"""The Recommend tab: say what matters, get settings for it, the reasons, and the runner-up.

:class:`RecommendPanel` holds the goal form, Run / Cancel / Apply, the plan in words and the
runner-up; :class:`~ui.desktop.recommend.controller.RecommendController` runs the search and
applies it, :mod:`ui.desktop.recommend.rows` says what the form and the answer hold.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Final

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QKeyEvent, QResizeEvent, QShowEvent
from PySide6.QtWidgets import (
    QBoxLayout,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFileDialog,
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

from app.errors import GGTuneError
from app.export.common import write_text_atomic
from app.planning.machines import RemoteMachine
from app.planning.pool import pool_scripts
from ui.desktop.recommend.controller import RecommendController
from ui.desktop.recommend.rows import (
    GOAL_TITLES,
    GoalForm,
    RecommendOutcome,
    pooled_commands,
    settings_summary,
)
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.widgets import ERROR_STYLE, confirm, signals_blocked

STALE_TEXT: Final = "Out of date: the goal changed since this plan. Press Recommend (or Enter)."


def _ask_folder(parent: QWidget, start: str) -> str | None:
    folder = QFileDialog.getExistingDirectory(parent, "Save the scripts in", start)
    return folder or None


class RecommendPanel(QWidget):
    """The Recommend tab (GUI thread): the goal form, Recommend/Cancel with a busy bar,
    then the settings, the reasons, the runner-up and Apply."""

    def __init__(self, controller: RecommendController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.ask_folder: Callable[[QWidget, str], str | None] = _ask_folder
        self.confirm: Callable[[QWidget, str, str], bool] = confirm
        self.scripts_folder = str(Path.home())
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
        form.addRow("G&oal:", self.goal_box)
        self.users = QSpinBox()
        self.users.setRange(1, 1024)
        self.users.setToolTip(
            "How many people (or programs) use the model at once; it follows the Settings "
            "panel's parallel users until you change it here"
        )
        self._users_edited = False
        self.users.setValue(controller.settings_users)
        self._on_users_value(self.users.value())
        self.users.valueChanged.connect(self._on_users_value)
        controller.users_changed.connect(self._on_settings_users)
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
        form.addRow("Con&text each:", self.ctx)
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
        self.run_button = QPushButton("Recommen&d")
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
        self.stale_label = QLabel(STALE_TEXT)
        self.stale_label.setWordWrap(True)
        self.stale_label.setStyleSheet(ERROR_STYLE)
        self.stale_label.setVisible(False)
        self.stale_label.setAccessibleName("Out of date")
        result.addWidget(self.stale_label)
        self._answered: GoalForm | None = None  # the form the plan shown answers
        self._asked: GoalForm | None = None
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
        self.scripts_button = QPushButton("Save s&cripts…")
        self.scripts_button.setToolTip(
            "Save a script per machine: ggml-rpc-server for each other machine, "
            "llama-server --rpc for this one"
        )
        self.scripts_button.setVisible(False)
        self.scripts_button.clicked.connect(self.save_scripts)
        apply_row.addWidget(self.scripts_button)
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
        for spin in (self.users, self.min_tps, self.ctx, self.min_ctx, self.leave_free):
            spin.valueChanged.connect(self._show_stale)
        for check in (self.any_quant, self.only_file, self.use_machines):
            check.toggled.connect(self._show_stale)
        self.goal_box.currentIndexChanged.connect(self._show_stale)

    def keyPressEvent(self, event: QKeyEvent) -> None:
        """Enter in the form runs Recommend (a spin box or a combo passes it on)."""
        if event.key() in (Qt.Key.Key_Return, Qt.Key.Key_Enter) and self.run_button.isEnabled():
            self.run_button.click()
            return
        super().keyPressEvent(event)

    def _on_users_value(self, n: int) -> None:
        self.users.setSuffix(" user" if n == 1 else " users")
        if not self.users.signalsBlocked() and self.sender() is self.users:
            self._users_edited = True

    def _on_settings_users(self, n: int) -> None:
        if not self._users_edited and n != self.users.value():
            with signals_blocked(self.users):
                self.users.setValue(n)
            self._on_users_value(n)
            self._show_stale()

    def _show_stale(self, *_args: object) -> None:
        """Mark the plan shown out of date while the form asks something else."""
        stale = self._answered is not None and self.form() != self._answered
        self.stale_label.setVisible(stale)

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
        self._asked = self.form()
        self.controller.run(self._asked)

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
        self._answered = self._asked
        self._show_stale()
        rec = outcome.recommendation
        self.apply_label.clear()
        if rec.best is None:
            self.settings_label.setText("Nothing fits this goal.")
        else:
            prefix = "" if rec.feasible else "Closest plan (the goal is not met): "
            self.settings_label.setText(prefix + settings_summary(rec.best))
        self.why_label.setText(rec.why + (f"\n{outcome.users_line}" if outcome.users_line else ""))
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
        self.scripts_button.setVisible(pooled)

    def save_scripts(self) -> list[Path]:
        """Save the pooled plan's scripts into a folder the user picks (each written
        atomically; files already there replaced only when the user says so); return
        the paths written."""
        outcome = self.controller.outcome
        if outcome is None:
            return []
        windows = sys.platform == "win32"
        try:
            scripts = pool_scripts(outcome.model_path, outcome.recommendation, windows=windows)
        except GGTuneError as exc:
            self.banner.show_message(str(exc))
            return []
        chosen = self.ask_folder(self, self.scripts_folder)
        if chosen is None:
            return []
        folder = Path(chosen)
        taken = [s.filename for s in scripts if (folder / s.filename).exists()]
        if taken and not self.confirm(
            self,
            "Replace the scripts?",
            f"{', '.join(taken)} already in {folder}. Replace them?",
        ):
            return []
        written: list[Path] = []
        try:
            for script in scripts:
                path = write_text_atomic(
                    folder / script.filename, script.text, overwrite=bool(taken)
                )
                written.append(path)
                if not windows:
                    mode = path.stat().st_mode
                    path.chmod(mode | ((mode & 0o444) >> 2))  # executable where readable
        except (GGTuneError, OSError) as exc:
            done = f" ({len(written)} of {len(scripts)} written)" if written else ""
            self.banner.show_message(f"{folder}: the scripts could not be saved{done}: {exc}")
            return written
        self.scripts_folder = str(folder)
        run = "powershell -File" if windows else "sh"
        self.apply_label.setText(
            f"Saved {len(written)} scripts in {folder}: start "
            + ", then ".join(f"{run} {p.name}" for p in written)
            + " (each on its machine, this one last)"
        )
        return written

    def _on_controller_failed(self, message: str) -> None:
        self.banner.show_message(message)
