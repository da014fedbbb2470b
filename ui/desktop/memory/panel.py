"""The Memory tab: the verdict, one stacked bar per device against its capacity
(:mod:`ui.desktop.memory.bars`), what llama.cpp will create, and the same numbers as a table
(:mod:`ui.desktop.memory.table`), with the predicted speed and how many users fit.

:class:`MemoryPanel` puts them together with the speed line of
:class:`ui.desktop.shared.speed.SpeedController` (speed and users, shared with Compare and
Recommend) and the engine check (:mod:`ui.desktop.memory.engine_check`).
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QCheckBox, QHeaderView, QLabel, QTableView, QVBoxLayout, QWidget

from app.planning.users import FIRST_TOKEN_PROMPT
from app.units import format_seconds
from ui.desktop.memory.bars import MemoryBarsWidget
from ui.desktop.memory.engine_check import EngineCheckController, EngineChecked, state_key
from ui.desktop.memory.table import MemoryTableModel
from ui.desktop.memory.words import plan_text, resolved_text
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.speed import SpeedController, SpeedSummary, speed_text

_LEVEL_COLORS: Final = {
    "fits": "#2e7d32",
    "tight": "#b26a00",
    "spills": "#b26a00",
    "does_not_fit": "#c62828",
    "unknown": "#616161",
    "unverified": "#616161",
}


class MemoryPanel(QWidget):
    """The Memory tab: verdict, bars, what was resolved, and the table (GUI thread).

    Subscribes to :class:`~ui.desktop.shared.estimate_controller.EstimateController`.
    """

    def __init__(self, controller: EstimateController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.verdict_label = QLabel("Open a model to see where its memory goes.")
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setAccessibleName("Verdict")
        self.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.verdict_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        font.setBold(True)
        self.verdict_label.setFont(font)
        layout.addWidget(self.verdict_label)
        self.plan_label = QLabel()
        self.plan_label.setWordWrap(True)
        self.plan_label.setAccessibleName("What the runner will do")
        self.plan_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.plan_label)
        self.details_label = QLabel()
        self.details_label.setWordWrap(True)
        self.details_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.details_label)
        self.engine_label = QLabel()
        self.engine_label.setWordWrap(True)
        self.engine_label.setAccessibleName("Engine check")
        self.engine_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.engine_label)
        self.speed_label = QLabel()
        self.speed_label.setWordWrap(True)
        self.speed_label.setAccessibleName("Predicted speed")
        self.speed_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.speed_label)
        self.bars = MemoryBarsWidget()
        layout.addWidget(self.bars)
        self.zoom_box = QCheckBox("Zoom the bars to the memory used")
        self.zoom_box.setToolTip(
            "Stretch each bar over the memory used instead of the whole device, to see "
            "the parts of a small model; the numbers stay exact"
        )
        self.zoom_box.toggled.connect(self.bars.set_zoomed)
        layout.addWidget(self.zoom_box)
        self.resolved_label = QLabel()
        self.resolved_label.setWordWrap(True)
        self.resolved_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.resolved_label)
        self.table_model = MemoryTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Memory per device, in MiB")
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setAlternatingRowColors(True)
        self.table.setSizeAdjustPolicy(QTableView.SizeAdjustPolicy.AdjustToContents)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.table)
        layout.addStretch(1)
        controller.state_changed.connect(self._on_controller_state_changed)
        self._on_controller_state_changed(controller.state)
        # estimates not known to agree with llama.cpp get its own figures in the background
        self.engine = EngineCheckController(controller, self)
        self.engine.checking.connect(self._on_engine_checking)
        self.engine.checked.connect(self._on_engine_checked)
        self.engine.failed.connect(self._on_engine_failed)
        self.speed = SpeedController(controller, self)
        self.speed.speed_changed.connect(self._on_speed_changed)

    def _on_speed_changed(self, summary: SpeedSummary) -> None:
        self.speed_label.setText(speed_text(summary))
        tip = "Predicted for one user, half-way through the context"
        if summary.prediction is not None:
            tip += f"; speed model: {summary.prediction.factors_source}"
        if summary.capacity is not None:
            tip += f".\n{summary.capacity.why}"
        if summary.users is not None and summary.users.ttft_s is not None:
            tip += (
                f"\nWith {summary.users.n_users} arriving at once the last first token comes "
                f"after {format_seconds(summary.users.ttft_s)} (predicted, "
                f"{FIRST_TOKEN_PROMPT}-token prompts); Verify's Users run measures it."
            )
        self.speed_label.setToolTip(tip)

    def _on_controller_state_changed(self, state: EstimateState) -> None:
        self.bars.set_estimate(state.estimate, state.margin_bytes)
        self.table_model.set_estimate(state.estimate)
        if state.model is None:
            return
        if state.error is not None:
            self._show_verdict("does_not_fit", f"Cannot run these settings: {state.error}", ())
            return
        v = state.verdict
        est = state.estimate
        if v is None or est is None:
            return
        engine = getattr(self, "engine", None)  # created after the first state
        checked = engine.result if engine is not None else None
        if checked is not None and checked.key == state_key(state):
            v = checked.verdict  # llama.cpp's figures for exactly these settings
        self._show_verdict(v.level, v.headline, v.details)
        self.plan_label.setText(plan_text(state))
        self.resolved_label.setText(resolved_text(est, state.hardware.label))

    def _on_engine_checking(self, busy: bool) -> None:
        if busy:
            self.engine_label.setText(
                "Not every figure is known to agree with llama.cpp for this model: "
                "checking with llama.cpp's dry run…"
            )
        elif self.engine.result is None:
            self.engine_label.setText("")

    def _on_engine_checked(self, checked: EngineChecked | None) -> None:
        if checked is None:
            return
        v = checked.verdict
        self._show_verdict(v.level, v.headline, v.details)
        self.engine_label.setText(checked.describe())

    def _on_engine_failed(self, message: str) -> None:
        self.engine_label.setText(message)

    def _show_verdict(self, level: str, headline: str, details: tuple[str, ...]) -> None:
        color = _LEVEL_COLORS.get(level, "#616161")
        self.verdict_label.setStyleSheet(f"color: {color};")
        self.verdict_label.setText(headline)
        self.details_label.setText("\n".join(details))
