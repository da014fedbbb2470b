"""The memory bars: one stacked bar per device against its capacity (``QPainter``).

:class:`MemoryBarsWidget` paints the parts of :data:`~ui.desktop.memory.components.COMPONENTS`
of each device as one horizontal stacked bar, scaled to the device's capacity, with a line
at the capacity and a dashed line at the safety margin; hovering shows the exact numbers.
It displays an :class:`~app.predict.estimate.MemoryEstimate`; it computes nothing.
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import QEvent, QPointF, QRectF, QSize, Qt
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFontMetrics,
    QHelpEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QResizeEvent,
)
from PySide6.QtWidgets import QSizePolicy, QToolTip, QWidget

from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.units import format_bytes, format_mib
from ui.desktop.memory.components import COMPONENTS, component_bytes
from ui.desktop.memory.words import describe_estimate, device_title, device_tooltip

_ROW_H: Final = 58


_BAR_H: Final = 24


_PAD: Final = 10


_LEGEND_H: Final = 26


_OVER_COLOR: Final = "#e15759"


class MemoryBarsWidget(QWidget):
    """Paint one stacked bar per device (GUI thread). Feed it with :meth:`set_estimate`.

    ``paint_count`` counts paint events (the benchmark and tests check repaints).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._estimate: MemoryEstimate | None = None
        self._margin_bytes = 0
        self._stale = False
        self._hover: tuple[int, int] | None = None  # (device row, component index)
        self._zoomed = False
        self.paint_count = 0
        self.setMouseTracking(True)
        self.setFocusPolicy(Qt.FocusPolicy.StrongFocus)
        policy = QSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        policy.setHeightForWidth(True)
        self.setSizePolicy(policy)
        self.setAccessibleName("Memory per device")
        self.setMinimumWidth(260)

    @property
    def estimate(self) -> MemoryEstimate | None:
        """The estimate painted now."""
        return self._estimate

    @property
    def stale(self) -> bool:
        """Whether the painted estimate is an old one (the settings now in force fail)."""
        return self._stale

    @property
    def zoomed(self) -> bool:
        """Whether each bar spans the memory used rather than the device's capacity."""
        return self._zoomed

    def set_zoomed(self, zoomed: bool) -> None:
        """Scale each bar to the memory used (a small model in a big RAM), or back."""
        if zoomed != self._zoomed:
            self._zoomed = zoomed
            self._hover = None
            self.update()

    def set_estimate(self, est: MemoryEstimate | None, margin_bytes: int) -> None:
        """Show ``est``; None keeps the last bars, greyed, as stale."""
        if est is None:
            self._stale = self._estimate is not None
        else:
            self._estimate = est
            self._stale = False
            self.setAccessibleDescription(describe_estimate(est))
        self._margin_bytes = margin_bytes
        if self.height() != self.heightForWidth(self.width()):
            self.updateGeometry()
        self.update()

    def sizeHint(self) -> QSize:
        """Return room for every device row and the legend."""
        return QSize(520, self.heightForWidth(520))

    def minimumSizeHint(self) -> QSize:
        """Return the height of all rows at the current width (the width may shrink)."""
        return QSize(260, self.heightForWidth(max(260, self.width())))

    def resizeEvent(self, event: QResizeEvent) -> None:
        """Ask for more height when the legend wraps onto another line."""
        super().resizeEvent(event)
        if self.height() != self.heightForWidth(self.width()):
            self.updateGeometry()

    # --- geometry ---

    def _bar_rect(self, row: int) -> QRectF:
        top = _PAD + row * _ROW_H + 22
        return QRectF(_PAD, top, max(10.0, self.width() - 2 * _PAD), _BAR_H)

    def _scale_bytes(self, device: DeviceEstimate) -> int:
        used = device.total_bytes + device.growth_bytes
        if self._zoomed:  # the capacity line is drawn only where it falls on the bar
            return max(used, 1)
        return max(device.capacity_bytes or 0, used, 1)

    def _segments(self, row: int, device: DeviceEstimate) -> list[tuple[int, QRectF]]:
        rect = self._bar_rect(row)
        per_byte = rect.width() / self._scale_bytes(device)
        x = rect.left()
        out = []
        for i, c in enumerate(COMPONENTS):
            w = component_bytes(device, c) * per_byte
            if w > 0:
                out.append((i, QRectF(x, rect.top(), w, rect.height())))
                x += w
        return out

    def _hit(self, pos: QPointF) -> tuple[int, int | None] | None:
        if self._estimate is None:
            return None
        for row, device in enumerate(self._estimate.devices):
            rect = self._bar_rect(row)
            band = QRectF(rect.left(), rect.top() - 22, rect.width(), _ROW_H)
            if not band.contains(pos):
                continue
            for i, seg in self._segments(row, device):
                if seg.adjusted(-1, 0, 1, 0).contains(pos):
                    return row, i
            return row, None
        return None

    # --- events ---

    def event(self, event: QEvent) -> bool:
        """Show the exact numbers of the device under the mouse as a tooltip."""
        if event.type() == QEvent.Type.ToolTip and isinstance(event, QHelpEvent):
            hit = self._hit(QPointF(event.pos()))
            if hit is None or self._estimate is None:
                QToolTip.hideText()
                event.ignore()
                return True
            device = self._estimate.devices[hit[0]]
            text = device_tooltip(device, self._margin_bytes)
            if hit[1] is not None:  # the part under the mouse first, with what it is
                part = COMPONENTS[hit[1]]
                n = component_bytes(device, part)
                text = f"<b>{part.title}</b>: {format_mib(n)} — {part.meaning}<hr>" + text
            QToolTip.showText(event.globalPos(), text, self)
            return True
        return super().event(event)

    def mouseMoveEvent(self, event: QMouseEvent) -> None:
        """Highlight the segment under the mouse."""
        hit = self._hit(event.position())
        hover = None if hit is None or hit[1] is None else (hit[0], hit[1])
        if hover != self._hover:
            self._hover = hover
            self.update()
        super().mouseMoveEvent(event)

    def leaveEvent(self, event: QEvent) -> None:
        """Drop the highlight."""
        if self._hover is not None:
            self._hover = None
            self.update()
        super().leaveEvent(event)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint the rows and the legend."""
        self.paint_count += 1
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        fm = QFontMetrics(self.font())
        if self._estimate is None:
            painter.setPen(text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "No model open")
            return
        if self._stale:
            painter.setOpacity(0.35)
        for row, device in enumerate(self._estimate.devices):
            self._paint_row(painter, row, device, pal, fm)
        painter.setOpacity(1.0)
        self._paint_legend(painter, pal, fm)
        if self.hasFocus():
            pen = QPen(pal.color(QPalette.ColorRole.Highlight), 1, Qt.PenStyle.DotLine)
            painter.setPen(pen)
            painter.setBrush(Qt.BrushStyle.NoBrush)
            painter.drawRect(QRectF(self.rect()).adjusted(0.5, 0.5, -0.5, -0.5))

    def _paint_row(
        self,
        painter: QPainter,
        row: int,
        device: DeviceEstimate,
        pal: QPalette,
        fm: QFontMetrics,
    ) -> None:
        rect = self._bar_rect(row)
        text = pal.color(QPalette.ColorRole.WindowText)
        muted = pal.color(QPalette.ColorRole.PlaceholderText)
        cap = device.capacity_bytes
        title = device_title(device)
        used = format_bytes(device.total_bytes)
        if cap is None:
            right = f"{used} used, capacity unknown"
        elif cap >= device.total_bytes:
            right = f"{used} of {format_bytes(cap)} · {format_bytes(cap - device.total_bytes)} free"
        else:
            right = f"{used} of {format_bytes(cap)} · {format_bytes(device.total_bytes - cap)} over"
        if self._zoomed:
            right = f"zoomed to {used} used · " + right.split(" · ", 1)[-1]
        baseline = rect.top() - 7
        painter.setPen(text)
        font = painter.font()
        font.setBold(True)
        painter.setFont(font)
        painter.drawText(QPointF(rect.left(), baseline), title)
        font.setBold(False)
        painter.setFont(font)
        painter.setPen(text if cap is None or cap >= device.total_bytes else QColor(_OVER_COLOR))
        title_font = painter.font()
        title_font.setBold(True)
        room = rect.width() - QFontMetrics(title_font).horizontalAdvance(title) - 12
        right = fm.elidedText(right, Qt.TextElideMode.ElideLeft, max(0, int(room)))
        painter.drawText(QPointF(rect.right() - fm.horizontalAdvance(right), baseline), right)

        # the track: the whole capacity
        painter.setPen(QPen(muted, 1))
        painter.setBrush(pal.color(QPalette.ColorRole.Base))
        painter.drawRoundedRect(rect, 3, 3)
        per_byte = rect.width() / self._scale_bytes(device)
        for i, seg in self._segments(row, device):
            color = QColor(COMPONENTS[i].color)
            if self._hover == (row, i):
                color = color.lighter(130)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            if COMPONENTS[i].growth:  # not held yet: hatched, after the total
                painter.setBrush(QBrush(color, Qt.BrushStyle.Dense4Pattern))
            painter.drawRect(seg)
        if cap is not None and device.total_bytes > cap:
            over = QRectF(rect.left() + cap * per_byte, rect.top(), 0, rect.height())  # held
            over.setRight(rect.left() + device.total_bytes * per_byte)
            painter.setBrush(QColor(_OVER_COLOR))
            painter.setOpacity(painter.opacity() * 0.55)
            painter.drawRect(over)
            painter.setOpacity(0.35 if self._stale else 1.0)
            painter.setBrush(Qt.BrushStyle.BDiagPattern)
            painter.drawRect(over)
        if cap is not None and cap * per_byte <= rect.width() + 0.5:
            x_cap = rect.left() + cap * per_byte
            painter.setPen(QPen(text, 2))
            painter.drawLine(QPointF(x_cap, rect.top() - 3), QPointF(x_cap, rect.bottom() + 3))
            if self._margin_bytes and cap > self._margin_bytes:
                x_margin = rect.left() + (cap - self._margin_bytes) * per_byte
                painter.setPen(QPen(text, 1, Qt.PenStyle.DashLine))
                painter.drawLine(QPointF(x_margin, rect.top()), QPointF(x_margin, rect.bottom()))

    def _legend_items(self) -> list[tuple[str, str, str]]:
        """Return (kind, colour, text) of each legend entry: swatch, solid or dashed line."""
        devices = self._estimate.devices if self._estimate else ()
        always = ("weights_bytes", "kv_bytes", "compute_bytes")
        items = [
            ("swatch", c.color, c.title)
            for c in COMPONENTS
            if c.field in always or any(component_bytes(d, c) for d in devices)
        ]
        items.append(("solid", "", "capacity"))
        if self._margin_bytes:
            items.append(("dashed", "", f"{format_bytes(self._margin_bytes)} safety margin"))
        return items

    def _legend_layout(self, width: int) -> list[tuple[float, int, tuple[str, str, str]]]:
        """Return (x, line, item) for each legend entry, wrapping at ``width`` pixels."""
        fm = QFontMetrics(self.font())
        x, line, out = float(_PAD), 0, []
        for item in self._legend_items():
            w = 15 + fm.horizontalAdvance(item[2]) + 14
            if x + w > width - _PAD and x > _PAD:
                x, line = float(_PAD), line + 1
            out.append((x, line, item))
            x += w
        return out

    def _legend_lines(self, width: int) -> int:
        layout = self._legend_layout(width)
        return 1 + (layout[-1][1] if layout else 0)

    def hasHeightForWidth(self) -> bool:
        """The legend wraps, so the height follows the width."""
        return True

    def heightForWidth(self, width: int) -> int:
        """Return the height of all rows and the wrapped legend at ``width`` pixels."""
        n = len(self._estimate.devices) if self._estimate else 1
        return 2 * _PAD + n * _ROW_H + self._legend_lines(width) * _LEGEND_H

    def _paint_legend(self, painter: QPainter, pal: QPalette, fm: QFontMetrics) -> None:
        assert self._estimate is not None, "legend needs an estimate"
        top = _PAD + len(self._estimate.devices) * _ROW_H + 6
        text = pal.color(QPalette.ColorRole.WindowText)
        for x, line, (kind, color, title) in self._legend_layout(self.width()):
            y = top + line * _LEGEND_H
            if kind == "swatch":
                painter.setPen(Qt.PenStyle.NoPen)
                painter.setBrush(QColor(color))
                painter.drawRect(QRectF(x, y + 3, 11, 11))
            else:
                style = Qt.PenStyle.SolidLine if kind == "solid" else Qt.PenStyle.DashLine
                painter.setPen(QPen(text, 2 if kind == "solid" else 1, style))
                painter.drawLine(QPointF(x + 5, y + 1), QPointF(x + 5, y + 15))
            painter.setPen(text)
            painter.drawText(QPointF(x + 15, y + 13), title)
