"""The context control: a logarithmic slider (snapping to 256 tokens) and a number box."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QSlider, QSpinBox, QVBoxLayout, QWidget

from ui.desktop.shared.scales import context_steps, format_tokens, nearest_step
from ui.desktop.shared.widgets import signals_blocked


class ContextControl(QWidget):
    """A logarithmic slider (snapping to 256 tokens) and a number box, kept in step.

    ``slider`` positions index :attr:`steps`; the box takes any value in range.
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.steps: tuple[int, ...] = context_steps(4096)
        self.slider = QSlider(Qt.Orientation.Horizontal)
        self.slider.setAccessibleName("Context size")
        self.spin = QSpinBox()
        self.spin.setSuffix(" tokens")
        self.spin.setSingleStep(256)
        self.spin.setAccelerated(True)
        self.spin.setKeyboardTracking(False)
        self.spin.setAccessibleName("Context size in tokens")
        self.spin.setGroupSeparatorShown(True)
        self.spin.setMinimumWidth(120)
        # the slider on a row of its own: beside the box it was 35-50 px long (issue 18)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(0, 0, 0, 0)
        layout.setSpacing(2)
        layout.addWidget(self.slider)
        layout.addWidget(self.spin)
        self.set_maximum(4096)

    def set_maximum(self, max_tokens: int) -> None:
        """Let the context go up to ``max_tokens`` (signals blocked)."""
        value = self.spin.value()
        self.steps = context_steps(max_tokens)
        with signals_blocked(self.slider, self.spin):
            self.slider.setRange(0, len(self.steps) - 1)
            self.slider.setPageStep(max(1, len(self.steps) // 8))
            self.spin.setRange(self.steps[0], self.steps[-1])
        self.show_value(value)

    def show_value(self, n_tokens: int) -> None:
        """Show ``n_tokens`` in both controls (signals blocked)."""
        with signals_blocked(self.slider, self.spin):
            self.spin.setValue(n_tokens)
            self.slider.setValue(nearest_step(self.steps, n_tokens))
        self.slider.setToolTip(f"{n_tokens:,} tokens ({format_tokens(n_tokens)})")
