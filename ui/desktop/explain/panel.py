"""The Explain tab: what happens between prompt and answer, with the open model's numbers.

The words come from :func:`app.planning.explain.explain_facts` /
:func:`app.planning.explain.sections_from_facts`
(pure); this module only renders them: the sections as simple HTML in a
:class:`QTextBrowser`, and three small painted pictures — where the memory goes, what one
new token reads (and so the speed bound), and the KV cache layer by layer (full-attention
layers keep every token, sliding-window layers only the window, recurrent layers a fixed
summary).

A catalog model (``catalog:NAME``) has no file: :func:`catalog_sections` says so where the
words speak of "this file", and at which quant level its weights are planned.

Cost: the explanation runs a few estimates (~15 ms), so it is refreshed ``DELAY_MS`` after
the settings rest, and only while the tab is visible; a hidden tab just notes that it is
out of date and catches up in :meth:`ExplainPanel.showEvent`.
"""

from __future__ import annotations

import dataclasses
import html
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QPointF, QRectF, QSize, Qt, QTimer
from PySide6.QtGui import QColor, QFontMetrics, QPainter, QPaintEvent, QPalette, QPen, QShowEvent
from PySide6.QtWidgets import (
    QLabel,
    QSizePolicy,
    QSplitter,
    QTextBrowser,
    QVBoxLayout,
    QWidget,
)

from app.errors import GGTuneError
from app.planning.explain import (
    ExplainFacts,
    Section,
    explain_facts,
    fmt_tokens,
    sections_from_facts,
)
from app.planning.options import own_quant_name
from app.predict.speed import SpeedFactors
from app.units import format_bytes, format_tps
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState

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


def catalog_sections(
    sections: Sequence[Section],
    model_name: str,
    quant: str | None,
    converted: str,
    bits_per_weight: float,
) -> tuple[Section, ...]:
    """Return ``sections`` told for a catalog model planned at ``quant`` (None: as the
    converter writes it, ``converted``, e.g. F16, at ``bits_per_weight``): the weights step
    says there is no file and where its numbers come from.
    """
    where = (
        f"quantized to {quant}, the level picked in Settings"
        if quant
        else f"as converted ({converted}), before quantizing; pick a quant level in Settings "
        "to plan the file you would download"
    )
    lead = (
        f"{model_name} comes from ggtune's catalog: there is no file yet, so its weights are "
        f"planned from the published config, {where}."
    )
    unquantized = (
        f"At {converted} each weight keeps its {bits_per_weight:.0f} bits from training. "
        "Quantizing rounds them to fewer bits, like saving a photo as a smaller JPEG: much "
        "smaller, slightly less exact. Fewer bits mean less memory and faster writing (less "
        "to read per token), at some cost in quality."
    )
    out = []
    for section in sections:
        if section.key == "weights":
            rest = tuple(
                # the weights are not quantized yet, and there is no file to speak of
                unquantized
                if quant is None and bits_per_weight >= 15.5 and p.startswith("This file")
                else p.replace("This file is quantized as", "Planned as", 1)
                for p in section.paragraphs[1:]
            )
            section = dataclasses.replace(
                section, paragraphs=(*section.paragraphs[:1], lead, *rest)
            )
        out.append(section)
    return tuple(out)


def sections_html(sections: Sequence[Section], pal: QPalette) -> str:
    """Return the sections as simple HTML: a heading, paragraphs, the key numbers."""
    muted = pal.color(QPalette.ColorRole.PlaceholderText).name()
    out = []
    for s in sections:
        out.append(f"<h3>{html.escape(s.title)}</h3>")
        out.extend(f"<p>{html.escape(p)}</p>" for p in s.paragraphs)
        if s.numbers:
            cells = " · ".join(
                f"<span style='color:{muted}'>{html.escape(n.label)}:</span> "
                f"<b>{html.escape(n.text)}</b>"
                for n in s.numbers
            )
            out.append(f"<p>{cells}</p>")
    return "".join(out)


class ExplainPanel(QWidget):
    """The Explain tab (GUI thread). ``factors`` returns the speed factors in force.

    ``refresh_count`` counts explanations built (tests check hidden tabs cost nothing).
    """

    DELAY_MS: Final = 100

    def __init__(
        self,
        estimates: EstimateController,
        factors: Callable[[], SpeedFactors] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._factors = factors or SpeedFactors
        self._dirty = True
        self._sections: tuple[Section, ...] = ()
        self.refresh_count = 0

        self.memory_bar = StackedBar("Where the memory goes")
        self.read_bar = StackedBar("What one new token reads")
        self.layers = LayerCacheWidget()
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.hide()
        pictures = QWidget()
        column = QVBoxLayout(pictures)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.memory_bar)
        column.addWidget(self.read_bar)
        column.addWidget(self.layers)
        column.addStretch(1)
        self.text = QTextBrowser()
        self.text.setOpenExternalLinks(False)
        self.text.setAccessibleName("Explanation")
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(pictures)
        splitter.addWidget(self.text)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.message)
        layout.addWidget(splitter, 1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.DELAY_MS)
        self._timer.timeout.connect(self.refresh)
        estimates.state_changed.connect(self._on_estimates_state_changed)

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections shown now."""
        return self._sections

    @property
    def dirty(self) -> bool:
        """Whether the text is older than the settings (refreshed when shown)."""
        return self._dirty

    def section(self, key: str) -> Section | None:
        """Return the section called ``key`` ("kv", "speed"…), or None."""
        return next((s for s in self._sections if s.key == key), None)

    def _on_estimates_state_changed(self, _state: EstimateState) -> None:
        self._dirty = True
        if self.isVisible():
            self._timer.start()

    def showEvent(self, event: QShowEvent) -> None:
        """Catch up with changes made while the tab was hidden."""
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the explanation for the current state."""
        self._timer.stop()
        self._dirty = False
        self.refresh_count += 1
        state = self._estimates.state
        if state.model is None:
            self._show_message("Open a model to see how it works.")
            return
        if state.estimate is None:
            self._show_message(
                f"These settings cannot run ({state.error}); showing the last ones that could."
            )
            return
        try:
            facts = explain_facts(
                state.spec or state.model.spec,
                state.settings,
                state.estimate,
                state.hardware.hardware,
                factors=self._factors(),
            )
        except GGTuneError as err:
            self._show_message(f"Could not explain these settings: {err}")
            return
        self.message.hide()
        self._sections = sections_from_facts(facts)
        if state.model.is_catalog:
            self._sections = catalog_sections(
                self._sections,
                state.model.card.title,
                state.quant,
                own_quant_name(state.model.spec),
                facts.bits_per_weight,
            )
        bar = self.text.verticalScrollBar()
        position = bar.value()
        self.text.setHtml(sections_html(self._sections, self.palette()))
        bar.setValue(position)
        self.memory_bar.set_bar(
            f"Where the memory goes: {format_bytes(facts.total_bytes, down_to='bytes')} in all",
            memory_segments(facts),
        )
        if facts.bound_tok_per_s > 0:
            gbs = facts.bandwidth_bytes_per_s / 1e9
            caption = (
                "What one new token reads: "
                f"{format_bytes(facts.bytes_per_token_read, down_to='bytes')} "
                f"÷ {gbs:.0f} GB/s → at most {format_tps(facts.bound_tok_per_s)} tokens/s"
            )
            self.read_bar.set_bar(caption, read_segments(facts))
            self.read_bar.show()
        else:
            self.read_bar.hide()
        self.layers.set_facts(facts, layer_kinds(state))

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()
