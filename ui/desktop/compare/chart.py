"""The Compare tab's chart: memory or speed of each quant level as a bar (``QPainter``)."""

from __future__ import annotations

from typing import Final, Literal

from PySide6.QtCore import (
    QPointF,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFontMetrics,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
)
from PySide6.QtWidgets import (
    QSizePolicy,
    QWidget,
)

from app.planning.compare import CompareRow
from app.units import format_bytes, format_tps

ChartMetric = Literal["memory", "speed"]

NO_SPEED: Final = "does not fit: no speed"
"""What a row that does not fit shows instead of a speed (it cannot run at all)."""


def runs(row: CompareRow) -> bool:
    """Whether the row's plan can run, so that its speeds mean something."""
    return row.fits is not False and row.error is None


def speed_words(row: CompareRow) -> str:
    """Return "13 tok/s", or why there is no speed."""
    if row.error:
        return "header not read"
    return f"{format_tps(row.decode_tok_per_s)} tok/s" if runs(row) else NO_SPEED


_BAR_H: Final = 16


_GAP: Final = 6


_PAD: Final = 8


_FIT_COLOR: Final = "#4e79a7"


_PARTIAL_COLOR: Final = "#f28e2b"


_OVER_COLOR: Final = "#e15759"


class CompareChartWidget(QWidget):
    """Paint one horizontal bar per quant (GUI thread): memory against the capacity of all
    devices together, or predicted writing speed. Clicking a bar emits ``row_clicked(int)``.
    """

    row_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: tuple[CompareRow, ...] = ()
        self.empty_text = "Open a model to compare its quant levels."
        """What the chart says while it has no rows (the panel says why when nothing came)."""
        self._metric: ChartMetric = "memory"
        self._selected = -1
        self.paint_count = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAccessibleName("Quants compared, as a chart")
        self.setMinimumHeight(120)

    @property
    def chart_metric(self) -> ChartMetric:
        """What the bars show."""
        return self._metric

    def set_rows(self, rows: tuple[CompareRow, ...]) -> None:
        """Show ``rows``."""
        self._rows = rows
        self.setAccessibleDescription(
            "; ".join(f"{r.quant}: {format_bytes(r.total_bytes)}, {speed_words(r)}" for r in rows)
        )
        self.updateGeometry()
        self.update()

    def set_metric(self, metric: ChartMetric) -> None:
        """Show memory or speed."""
        self._metric = metric
        self.update()

    def set_selected(self, row: int) -> None:
        """Outline bar ``row`` (-1: none)."""
        self._selected = row
        self.update()

    def sizeHint(self) -> QSize:
        """Return room for every bar."""
        return QSize(480, 2 * _PAD + max(1, len(self._rows)) * (_BAR_H + _GAP) + 36)

    def _label_width(self, fm: QFontMetrics) -> int:
        return max((fm.horizontalAdvance(r.quant) for r in self._rows), default=40) + 12

    def _row_at(self, y: float) -> int:
        row = int((y - _PAD) // (_BAR_H + _GAP))
        return row if 0 <= row < len(self._rows) else -1

    def mousePressEvent(self, event: QMouseEvent) -> None:
        """Select the quant under the mouse."""
        row = self._row_at(event.position().y())
        if row >= 0:
            self.row_clicked.emit(row)
        super().mousePressEvent(event)

    def _capacity(self) -> int | None:
        first = next((r for r in self._rows if r.devices), None)
        caps = [d[2] for d in first.devices] if first is not None else []
        if not caps or any(c is None for c in caps):
            return None
        return sum(c for c in caps if c is not None)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint the bars, the capacity line and the values."""
        self.paint_count += 1
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        fm = QFontMetrics(self.font())
        if not self._rows:
            painter.setPen(text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, self.empty_text)
            return
        label_w = self._label_width(fm)
        value_w = fm.horizontalAdvance("00.0 GiB of 00.0 GiB") + 8
        left = _PAD + label_w
        width = max(20.0, self.width() - left - value_w - _PAD)
        cap = self._capacity()
        if self._metric == "memory":
            top_value = float(max([r.total_bytes for r in self._rows] + [cap or 0, 1]))
        else:
            top_value = max([r.decode_tok_per_s for r in self._rows if runs(r)] + [1e-9])
        for i, row in enumerate(self._rows):
            y = _PAD + i * (_BAR_H + _GAP)
            if self._metric == "memory":
                value: float = row.total_bytes
            else:  # a plan that does not fit has no speed: no bar
                value = row.decode_tok_per_s if runs(row) else 0.0
            w = width * value / top_value
            font = painter.font()
            font.setBold(row.on_disk)
            painter.setFont(font)
            painter.setPen(text)
            painter.drawText(
                QRectF(_PAD, y, label_w - 6, _BAR_H),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                row.quant,
            )
            if row.fits is False:
                color = QColor(_OVER_COLOR)
            elif row.has_gpu and (row.gpu_layers < row.n_layers or row.n_cpu_moe):
                color = QColor(_PARTIAL_COLOR)
            else:
                color = QColor(_FIT_COLOR)
            simulated = row.origin == "simulated"
            if simulated:
                color.setAlpha(170)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            bar = QRectF(left, y, max(1.0, w), _BAR_H)
            painter.drawRect(bar)
            if simulated:
                painter.setBrush(QBrush(QColor(255, 255, 255, 150), Qt.BrushStyle.BDiagPattern))
                painter.drawRect(bar)
            if i == self._selected:
                painter.setPen(QPen(pal.color(QPalette.ColorRole.Highlight), 2))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRect(bar.adjusted(-1, -1, 1, 1))
            if row.error:
                label = "header not read"
            elif self._metric == "memory":
                label = format_bytes(row.total_bytes)
            else:
                label = speed_words(row)
            painter.setPen(text)
            painter.drawText(QPointF(left + w + 6, y + _BAR_H - 4), label)
        font = painter.font()
        font.setBold(False)
        painter.setFont(font)
        bottom = _PAD + len(self._rows) * (_BAR_H + _GAP)
        if self._metric == "memory" and cap is not None:
            x = left + width * cap / top_value
            painter.setPen(QPen(text, 2))
            painter.drawLine(QPointF(x, _PAD - 3), QPointF(x, bottom - _GAP + 3))
            painter.drawText(QPointF(x + 4, bottom + 12), f"capacity {format_bytes(cap)}")
        legend = (
            "solid: a file (yours, or on the hub) · hatched: simulated · orange: part on the CPU · "
            "red: does not fit"
        )
        painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        room = int(self.width() - 2 * _PAD)
        painter.drawText(
            QPointF(_PAD, bottom + 30), fm.elidedText(legend, Qt.TextElideMode.ElideRight, room)
        )
