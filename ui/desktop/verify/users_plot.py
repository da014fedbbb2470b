"""Verify's Users plot: each user's tok/s and time to first token against the user count,
measured beside predicted, with the SLO's lines (GUI thread).

:func:`plot_points` (pure) pairs the load test's measured summaries with the prediction of
the same rounds, :func:`predicted_curve` the prediction of every count;
:class:`UsersPlotWidget` paints them with ``QPainter`` in two panels — tok/s each (higher
is better; the SLO's minimum as a line) and first token in seconds (lower is better; the
SLO's limit as a line) — measured solid with filled dots, predicted dashed through every
count with open dots where it was measured. The numbers are in the tooltip and the
accessible description too.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QPointF, QRectF, QSize, Qt
from PySide6.QtGui import QColor, QPainter, QPaintEvent, QPalette, QPen
from PySide6.QtWidgets import QSizePolicy, QWidget

from app.measured.users_result import RoundSummary, Slo

MEASURED_COLOR: Final = QColor(31, 119, 180)
PREDICTED_COLOR: Final = QColor(255, 127, 14)
SLO_COLOR: Final = QColor(200, 40, 40)


@dataclass(frozen=True, slots=True)
class UsersPoint:
    """One user count: measured and predicted per-user tok/s and mean TTFT (s)."""

    n_users: int
    measured_tok_per_s: float
    predicted_tok_per_s: float | None
    measured_ttft_s: float
    predicted_ttft_s: float | None


def plot_points(
    measured: Sequence[RoundSummary], predicted: Mapping[int, RoundSummary]
) -> tuple[UsersPoint, ...]:
    """Return the plot's points: each measured user count with its prediction, by count."""
    out = []
    for s in sorted(measured, key=lambda s: s.n_users):
        p = predicted.get(s.n_users)
        out.append(
            UsersPoint(
                s.n_users,
                s.per_user_tok_per_s,
                p.per_user_tok_per_s if p else None,
                s.ttft_s,
                p.ttft_s if p else None,
            )
        )
    return tuple(out)


def predicted_curve(predicted: Mapping[int, RoundSummary]) -> tuple[tuple[int, float, float], ...]:
    """Return the prediction of every count as (users, tok/s each, first token s), by count."""
    return tuple(
        (n, predicted[n].per_user_tok_per_s, predicted[n].ttft_s) for n in sorted(predicted)
    )


def describe(points: Sequence[UsersPoint], slo: Slo) -> str:
    """Return the plot's numbers in words (tooltip, accessible description)."""
    lines = [f"SLO: {slo.describe()}"]
    for p in points:
        pt = f" (predicted {p.predicted_tok_per_s:.1f})" if p.predicted_tok_per_s else ""
        pf = f" (predicted {p.predicted_ttft_s:.2f} s)" if p.predicted_ttft_s else ""
        lines.append(
            f"{p.n_users} user{'s' if p.n_users != 1 else ''}: {p.measured_tok_per_s:.1f} "
            f"tok/s each{pt}, first token {p.measured_ttft_s:.2f} s{pf}"
        )
    return "\n".join(lines)


class UsersPlotWidget(QWidget):
    """Two small charts of a load test (see the module doc); :meth:`set_data` fills them."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._points: tuple[UsersPoint, ...] = ()
        self._curve: tuple[tuple[int, float, float], ...] = ()
        self._slo = Slo()
        self.setObjectName("users_plot")
        self.setAccessibleName("Users: tok/s each and time to first token against users")
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Fixed)
        self.setMinimumHeight(170)

    @property
    def points(self) -> tuple[UsersPoint, ...]:
        """What the plot shows."""
        return self._points

    def sizeHint(self) -> QSize:
        return QSize(640, 200)

    @property
    def curve(self) -> tuple[tuple[int, float, float], ...]:
        """The predicted line: (users, tok/s each, first token s) of every count."""
        return self._curve

    def set_data(
        self,
        points: Sequence[UsersPoint],
        slo: Slo,
        curve: Sequence[tuple[int, float, float]] = (),
    ) -> None:
        """Show ``points`` against ``slo``, the predicted line through ``curve`` (every
        count; the points' own predictions without one). Repaints."""
        self._points = tuple(points)
        self._curve = tuple(curve)
        self._slo = slo
        text = describe(self._points, slo)
        self.setToolTip(text)
        self.setAccessibleDescription(text)
        self.update()

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint both charts."""
        del event
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        w, h = self.width(), self.height()
        gap = 16
        half = (w - gap) / 2
        left = QRectF(0, 0, half, h)
        right = QRectF(half + gap, 0, half, h)
        pts = self._points
        curve = self._curve
        if not curve:
            curve = tuple(
                (p.n_users, p.predicted_tok_per_s, p.predicted_ttft_s)
                for p in pts
                if p.predicted_tok_per_s is not None and p.predicted_ttft_s is not None
            )
        self._chart(
            painter,
            left,
            "tok/s each by users (higher is better)",
            [(p.n_users, p.measured_tok_per_s) for p in pts],
            [(n, tps) for n, tps, _t in curve],
            self._slo.min_tok_per_s,
            f"SLO ≥ {self._slo.min_tok_per_s:g}",  # tok/s: the chart's title says so
        )
        self._chart(
            painter,
            right,
            "first token, s, by users (lower is better)",
            [(p.n_users, p.measured_ttft_s) for p in pts],
            [(n, ttft) for n, _tps, ttft in curve],
            self._slo.ttft_s,
            f"SLO ≤ {self._slo.ttft_s:g} s",
        )
        painter.end()

    def _chart(
        self,
        painter: QPainter,
        box: QRectF,
        title: str,
        measured: Sequence[tuple[int, float]],
        predicted: Sequence[tuple[int, float]],
        slo: float,
        slo_label: str,
    ) -> None:
        text = self.palette().color(QPalette.ColorRole.WindowText)
        fm = painter.fontMetrics()
        line_h = fm.height()
        painter.setPen(text)
        painter.drawText(QPointF(box.left() + 2, box.top() + line_h), title)
        plot = QRectF(
            box.left() + 40,
            box.top() + line_h + 6,
            box.width() - 48,
            box.height() - 3 * line_h - 10,
        )
        painter.setPen(QPen(text, 1))
        painter.drawLine(plot.bottomLeft(), plot.bottomRight())
        painter.drawLine(plot.bottomLeft(), plot.topLeft())
        if not measured:
            painter.drawText(plot, Qt.AlignmentFlag.AlignCenter, "No users run yet")
            return
        values = [v for _n, v in (*measured, *predicted) if math.isfinite(v)]
        top = max([*values, slo]) * 1.15 or 1.0
        ns = sorted({n for n, _v in (*measured, *predicted)})
        lo, hi = math.log2(min(ns)), math.log2(max(ns))

        def x(n: int) -> float:
            if hi == lo:
                return plot.center().x()
            return plot.left() + 10 + (plot.width() - 20) * (math.log2(n) - lo) / (hi - lo)

        def y(v: float) -> float:
            return plot.bottom() - plot.height() * min(v, top) / top

        ticks = sorted({n for n, _v in measured} | {max(ns)})
        for n in ticks:  # x ticks: the user counts measured (the title names the axis)
            painter.drawText(
                QPointF(x(n) - fm.horizontalAdvance(str(n)) / 2, plot.bottom() + line_h), str(n)
            )
        painter.drawText(QPointF(box.left(), plot.top() + line_h / 2), f"{top:.3g}")
        painter.drawText(QPointF(box.left() + 20, plot.bottom()), "0")
        slo_pen = QPen(SLO_COLOR, 1, Qt.PenStyle.DashLine)
        painter.setPen(slo_pen)
        painter.drawLine(QPointF(plot.left(), y(slo)), QPointF(plot.right(), y(slo)))
        at_measured = {n for n, _v in measured}
        for line, color, style, filled in (
            (predicted, PREDICTED_COLOR, Qt.PenStyle.DashLine, False),
            (measured, MEASURED_COLOR, Qt.PenStyle.SolidLine, True),
        ):
            finite = [(n, v) for n, v in line if math.isfinite(v)]
            dots = [QPointF(x(n), y(v)) for n, v in finite]
            painter.setPen(QPen(color, 2, style))
            for a, b in itertools.pairwise(dots):
                painter.drawLine(a, b)
            painter.setBrush(color if filled else Qt.BrushStyle.NoBrush)
            for (n, _v), d in zip(finite, dots, strict=True):
                if filled or n in at_measured:
                    painter.drawEllipse(d, 3.5, 3.5)
            painter.setBrush(Qt.BrushStyle.NoBrush)
        # the legend under the axis (the SLO's label there too: on the line it hid points)
        legend_y = box.bottom() - 2
        x0 = plot.left()
        legend = [("● measured", MEASURED_COLOR)]
        if predicted:  # a stored run shown again has no prediction
            legend.append(("○ predicted", PREDICTED_COLOR))
        legend.append((f"- - {slo_label}", SLO_COLOR))
        for text_, color in legend:
            painter.setPen(QPen(color, 2))
            painter.drawText(QPointF(x0, legend_y), text_)
            x0 += fm.horizontalAdvance(text_ + "   ")
