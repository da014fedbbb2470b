"""A dismissible message above a view: an error's cause in plain words, never a traceback."""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import QFrame, QHBoxLayout, QLabel, QToolButton, QWidget


class MessageBanner(QFrame):
    """A dismissible one-line message (errors), hidden until :meth:`show_message` (GUI thread).

    ``name`` is the object name the style sheet targets (one per place it is used).
    """

    def __init__(self, parent: QWidget | None = None, *, name: str = "banner") -> None:
        super().__init__(parent)
        self.setObjectName(name)
        self.setStyleSheet(
            f"#{name} {{ background: #fdecea; border: 1px solid #e57373; border-radius: 4px; }}"
            f"#{name} QLabel {{ color: #7f1d1d; }}"
        )
        layout = QHBoxLayout(self)
        layout.setContentsMargins(8, 4, 4, 4)
        self.label = QLabel()
        self.label.setWordWrap(True)
        self.label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.label.setTextFormat(Qt.TextFormat.PlainText)  # errors quote file contents
        self.label.setAccessibleName("Error")
        layout.addWidget(self.label, 1)
        self.detail_label = QLabel()
        self.detail_label.setWordWrap(True)
        self.detail_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.detail_label.setTextFormat(Qt.TextFormat.PlainText)
        self.detail_label.setAccessibleName("Error detail")
        self.detail_label.hide()
        self.details_button = QToolButton()
        self.details_button.setText("Details")
        self.details_button.setToolTip("What the reader found, where (for a bug report)")
        self.details_button.setCheckable(True)
        self.details_button.setAutoRaise(True)
        self.details_button.toggled.connect(self.detail_label.setVisible)
        self.details_button.hide()
        layout.addWidget(self.detail_label, 1)
        layout.addWidget(self.details_button)
        close = QToolButton()
        close.setText("✕")
        close.setToolTip("Dismiss")
        close.setAccessibleName("Dismiss message")
        close.setAutoRaise(True)
        close.clicked.connect(self.hide)
        layout.addWidget(close)
        self.hide()

    def show_message(self, text: str, detail: str = "") -> None:
        """Show ``text`` (one line or a few), with ``detail`` behind a Details button."""
        self.label.setText(text)
        self.detail_label.setText(detail)
        self.details_button.setChecked(False)
        self.details_button.setVisible(bool(detail))
        self.detail_label.hide()
        self.show()
