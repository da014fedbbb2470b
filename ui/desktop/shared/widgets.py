"""Small widget helpers the panels share: signals blocked for a block of code, a Yes/Cancel
question, a selectable wrapped label, and the colours of an error and a success line."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Final

from PySide6.QtCore import QObject, Qt
from PySide6.QtWidgets import QLabel, QMessageBox, QWidget

ERROR_STYLE: Final = "color: #b3261e;"
OK_STYLE: Final = "color: #1b5e20;"


@contextlib.contextmanager
def signals_blocked(*objects: QObject) -> Iterator[None]:
    """Block the signals of ``objects`` for the ``with`` body, then restore them.

    One context for many widgets (``QSignalBlocker`` takes one object each).
    """
    previous = [o.blockSignals(True) for o in objects]
    try:
        yield
    finally:
        for o, was in zip(objects, previous, strict=True):
            o.blockSignals(was)


def confirm(parent: QWidget, title: str, text: str) -> bool:
    """Ask ``text`` with Yes and Cancel (Cancel the default); return whether Yes was chosen."""
    answer = QMessageBox.question(
        parent,
        title,
        text,
        QMessageBox.StandardButton.Yes | QMessageBox.StandardButton.Cancel,
        QMessageBox.StandardButton.Cancel,
    )
    return answer == QMessageBox.StandardButton.Yes


def selectable_label(text: str = "") -> QLabel:
    """Return a label that wraps its text and lets the user select it (to copy)."""
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label
