"""The Explain tab's three small painted pictures, with the open model's numbers: where the
memory goes and what one new token reads (:class:`StackedBar` of the :class:`Segment`
objects :func:`memory_segments` and :func:`read_segments` make), and the KV cache layer by
layer (:class:`LayerCacheWidget`; :func:`layer_kinds` says what each layer keeps:
full-attention layers every token, sliding-window layers only the window, recurrent layers
a fixed summary).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.planning.explain import ExplainFacts, fmt_tokens
from app.units import format_bytes
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.shared.estimate_controller import EstimateState

_COLOR: Final = {c.field: c.color for c in COMPONENTS}
_KV_COLOR: Final = _COLOR["kv_bytes"]
_WEIGHTS_COLOR: Final = _COLOR["weights_bytes"]
_RECURRENT_COLOR: Final = _COLOR["recurrent_bytes"]
_PAD: Final = 8


@dataclass(frozen=True, slots=True)
class Segment:
    """One part of a stacked bar: a name, its bytes and its colour."""

    title: str
    n_bytes: float
    color: str


def memory_segments(f: ExplainFacts) -> tuple[Segment, ...]:
    """Return the memory split of the estimate: weights, KV, recurrent, compute, other."""
    parts = (
        Segment("Weights", f.weights_bytes, _COLOR["weights_bytes"]),
        Segment("KV cache", f.kv_bytes, _COLOR["kv_bytes"]),
        Segment("Recurrent state", f.recurrent_bytes, _COLOR["recurrent_bytes"]),
        Segment("Compute", f.compute_bytes, _COLOR["compute_bytes"]),
        Segment("Other", f.other_bytes, _COLOR["other_bytes"]),
    )
    return tuple(s for s in parts if s.n_bytes > 0)


def read_segments(f: ExplainFacts) -> tuple[Segment, ...]:
    """Return what one new token reads: the weights it uses, then the cache (and state)."""
    total = f.bytes_per_token_read
    cache: float = f.kv_bytes_per_token_full * f.depth
    cache += f.kv_bytes_per_token_swa * (min(f.depth, f.n_swa) if f.n_swa else f.depth)
    cache = min(cache, total)
    parts = (
        Segment("Weights", total - cache, _WEIGHTS_COLOR),
        Segment("Earlier tokens' cache", cache, _KV_COLOR),
    )
    return tuple(s for s in parts if s.n_bytes > 0)


class StackedBar(QWidget):
    """A caption, one horizontal bar of :class:`Segment` objects, and a label per segment."""

    HEIGHT: Final = 64

    def __init__(self, name: str, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._caption = ""
        self._segments: tuple[Segment, ...] = ()
        self.setAccessibleName(name)
        self.setMinimumHeight(self.HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_bar(self, caption: str, segments: Sequence[Segment]) -> None:
        """Show ``segments`` under ``caption``."""
        self._caption = caption
        self._segments = tuple(segments)
        described = ", ".join(
            f"{s.title} {format_bytes(s.n_bytes, down_to='bytes')}" for s in self._segments
        )
        self.setAccessibleDescription(f"{caption}: {described}")
        self.setToolTip(described)
        self.update()

    @property
    def caption(self) -> str:
        """The line above the bar."""
        return self._caption

    def sizeHint(self) -> QSize:
        """Return a wide, short bar."""
        return QSize(480, self.HEIGHT)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint the caption, the bar and the labels under it."""
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        fm = QFontMetrics(self.font())
        painter.setPen(text)
        width = self.width() - 2 * _PAD
        painter.drawText(
            QRectF(_PAD, 2, width, fm.height()),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            fm.elidedText(self._caption, Qt.TextElideMode.ElideRight, width),
        )
        total = sum(s.n_bytes for s in self._segments)
        bar = QRectF(_PAD, fm.height() + 6, width, 18)
        painter.setPen(QPen(muted, 1))
        painter.setBrush(Qt.BrushStyle.NoBrush)
        painter.drawRoundedRect(bar, 3, 3)
        if total <= 0:
            return
        x = bar.left()
        for s in self._segments:
            w = s.n_bytes / total * bar.width()
            painter.fillRect(QRectF(x, bar.top(), w, bar.height()), QColor(s.color))
            x += w
        # labels flow like a legend under the bar, in the bar's order
        lx = bar.left()
        label_y = bar.bottom() + 3
        for s in self._segments:
            label = f"{s.title} {format_bytes(s.n_bytes, down_to='bytes')}"
            lw = fm.horizontalAdvance(label)
            if lx + 11 + lw > bar.right() + 1:
                break
            painter.fillRect(QRectF(lx, label_y + 4, 8, 8), QColor(s.color))
            painter.setPen(text)
            painter.drawText(
                QRectF(lx + 11, label_y, lw + 2, fm.height()),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                label,
            )
            lx += 11 + lw + 14


class LayerCacheWidget(QWidget):
    """The KV cache as a column per layer, filled to the tokens each layer keeps.

    Full-attention layers fill to the whole context, sliding-window layers stop at their
    window (a dashed line marks it), recurrent layers hold a small fixed block.
    """

    HEIGHT: Final = 140

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._facts: ExplainFacts | None = None
        self._kinds: tuple[str, ...] = ()
        self.setAccessibleName("KV cache per layer")
        self.setMinimumHeight(self.HEIGHT)
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)

    def set_facts(self, facts: ExplainFacts, kinds: Sequence[str]) -> None:
        """Show ``facts``; ``kinds`` has one of "full", "swa", "recurrent", "none" per layer."""
        self._facts = facts
        self._kinds = tuple(kinds)
        self.setAccessibleDescription(self.describe())
        self.update()

    def describe(self) -> str:
        """Return the picture in words."""
        f = self._facts
        if f is None:
            return ""
        parts = []
        if f.n_full_layers:
            parts.append(f"{f.n_full_layers} layers keep all {fmt_tokens(f.n_ctx)}")
        if f.n_swa_layers:
            parts.append(f"{f.n_swa_layers} layers keep the last {fmt_tokens(f.n_swa)}")
        if f.n_recurrent_layers:
            parts.append(f"{f.n_recurrent_layers} recurrent layers keep a fixed summary")
        return "; ".join(parts)

    def sizeHint(self) -> QSize:
        """Return a wide picture of fixed height."""
        return QSize(480, self.HEIGHT)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint one column per layer and the legend."""
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        base = pal.color(QPalette.ColorRole.AlternateBase)
        fm = QFontMetrics(self.font())
        f = self._facts
        painter.setPen(text)
        width = self.width() - 2 * _PAD
        if f is None:
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No model open")
            return
        caption = f"The KV cache, layer by layer, at {fmt_tokens(f.n_ctx)} (height = tokens kept)"
        painter.drawText(
            QRectF(_PAD, 2, width, fm.height()),
            Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
            fm.elidedText(caption, Qt.TextElideMode.ElideRight, width),
        )
        axis_w = fm.horizontalAdvance(f"{f.n_ctx:,}") + 6
        top = fm.height() + 8
        legend_h = fm.height() + 6
        area = QRectF(_PAD + axis_w, top, width - axis_w, self.height() - top - legend_h - 4)
        n = max(1, len(self._kinds))
        step = area.width() / n
        gap = min(3.0, step * 0.25)
        painter.setPen(muted)
        painter.drawText(
            QRectF(_PAD, area.top() - 2, axis_w - 4, fm.height()),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignTop,
            f"{f.n_ctx:,}",
        )
        painter.drawText(
            QRectF(_PAD, area.bottom() - fm.height(), axis_w - 4, fm.height()),
            Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignBottom,
            "0",
        )
        kv = QColor(_KV_COLOR)
        swa_color = QColor(_KV_COLOR)
        swa_color.setAlphaF(0.6)
        for i, kind in enumerate(self._kinds):
            col = QRectF(area.left() + i * step + gap / 2, area.top(), step - gap, area.height())
            painter.fillRect(col, base)
            if kind == "full":
                painter.fillRect(col, kv)
            elif kind == "swa":
                frac = min(1.0, f.n_swa / max(1, f.n_ctx))
                h = max(6.0, frac * col.height())
                painter.fillRect(QRectF(col.left(), col.bottom() - h, col.width(), h), swa_color)
            elif kind == "recurrent":
                h = min(12.0, col.height())
                painter.fillRect(
                    QRectF(col.left(), col.bottom() - h, col.width(), h), QColor(_RECURRENT_COLOR)
                )
        if f.n_swa_layers and f.n_swa:
            frac = min(1.0, f.n_swa / max(1, f.n_ctx))
            y = area.bottom() - max(6.0, frac * area.height())
            pen = QPen(text, 1, Qt.PenStyle.DashLine)
            painter.setPen(pen)
            painter.drawLine(QPointF(area.left(), y), QPointF(area.right(), y))
            note = f"sliding window: {fmt_tokens(f.n_swa)}"
            nw = fm.horizontalAdvance(note) + 8
            box = QRectF(area.left() + 4, y - fm.height() - 2, nw, fm.height())
            painter.fillRect(box, pal.color(QPalette.ColorRole.Window))
            painter.setPen(text)
            painter.drawText(box, Qt.AlignmentFlag.AlignCenter, note)
        # legend
        items = []
        if f.n_full_layers:
            items.append((kv, f"keeps every token ({f.n_full_layers} layers)"))
        if f.n_swa_layers:
            items.append((swa_color, f"keeps the last {fmt_tokens(f.n_swa)} ({f.n_swa_layers})"))
        if f.n_recurrent_layers:
            items.append((QColor(_RECURRENT_COLOR), f"fixed summary ({f.n_recurrent_layers})"))
        x = area.left()
        y = self.height() - legend_h + 2
        for color, label in items:
            lw = fm.horizontalAdvance(label)
            if x + 12 + lw > self.width() - _PAD:
                break
            painter.fillRect(QRectF(x, y + 3, 9, 9), color)
            painter.setPen(text)
            painter.drawText(
                QRectF(x + 12, y, lw + 2, fm.height()),
                Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter,
                label,
            )
            x += 12 + lw + 16


def layer_kinds(state: EstimateState) -> tuple[str, ...]:
    """Return per trunk layer what it keeps: "full", "swa", "recurrent" or "none"."""
    assert state.model is not None, "layer kinds need a model"
    spec = state.model.spec
    out = []
    for il in range(spec.n_layer):
        if spec.is_recurrent[il]:
            out.append("recurrent")
        elif spec.n_head_kv[il] == 0 or spec.memory_kind in ("none", "unknown", "recurrent"):
            out.append("none")
        elif spec.is_swa[il] and spec.n_swa:
            out.append("swa")
        else:
            out.append("full")
    return tuple(out)
