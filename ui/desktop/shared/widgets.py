"""Small widget helpers the panels share: signals blocked for a block of code, a Yes/Cancel
question, a selectable wrapped label, the colours of an error and a success line, and
tooltips that wrap."""

from __future__ import annotations

import contextlib
import html
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


TIP_WIDTH_CHARS = 70
"""About where a tooltip wraps (Qt wraps rich text only; a plain one is one long line)."""


def wrap_tip(text: str) -> str:
    """Return ``text`` as a tooltip that wraps (rich text, the words escaped).

    >>> wrap_tip("a < b")
    '<qt>a &lt; b</qt>'
    """
    if text.startswith("<qt>") or len(text) <= TIP_WIDTH_CHARS:
        return text
    return f"<qt>{html.escape(text, quote=False)}</qt>"


def wrap_tooltips(root: QWidget) -> None:
    """Make every long plain tooltip under ``root`` wrap (Qt shows plain text as one line:
    ~1,900 px for some, clipped at both screen edges). Cheap: call it again after a change
    that sets new tooltips (a tab shown, a model opened)."""
    for widget in (root, *root.findChildren(QWidget)):
        text = widget.toolTip()
        if text:
            wrapped = wrap_tip(text)
            if wrapped != text:
                widget.setToolTip(wrapped)
