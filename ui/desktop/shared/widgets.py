"""Small widget helpers every panel uses: signals blocked for a block of code."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from PySide6.QtCore import QObject


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
