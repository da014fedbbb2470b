"""The memory view: one stacked bar per device against its capacity, and the same numbers
as a table, with the predicted speed and how many users fit under the verdict.

:class:`MemoryBarsWidget` paints (``QPainter``) weights, KV cache, recurrent state, compute,
output and other memory of each device as one horizontal stacked bar, scaled to the
device's capacity, with a line at the capacity and a dashed line at the safety margin;
hovering shows the exact numbers. :class:`MemoryTableModel` holds the same numbers for the
table under it (keyboard and screen-reader users read them there). Both display an
:class:`~app.predict.estimate.MemoryEstimate`; neither computes anything.

:class:`MemoryPanel` puts them together with the speed line of
:class:`ui.desktop.shared.speed.SpeedController` (speed and users, shared with Compare and
Recommend).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import (
    QAbstractTableModel,
    QEvent,
    QModelIndex,
    QPersistentModelIndex,
    QPointF,
    QRectF,
    QSize,
    Qt,
)
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
from PySide6.QtWidgets import (
    QCheckBox,
    QHeaderView,
    QLabel,
    QSizePolicy,
    QTableView,
    QToolTip,
    QVBoxLayout,
    QWidget,
)

from app.planning.users import FIRST_TOKEN_PROMPT
from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.predict.verdict import device_label
from app.units import format_bytes, format_mib
from ui.desktop.memory.engine_check import EngineCheckController, EngineChecked, state_key
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.speed import SpeedController, SpeedSummary, speed_text


@dataclass(frozen=True, slots=True)
class Component:
    """One kind of memory: its ``DeviceEstimate`` field, name, colour and meaning."""

    field: str
    title: str
    color: str
    meaning: str
    growth: bool = False


COMPONENTS: Final = (
    Component("weights_bytes", "Weights", "#4e79a7", "the model's parameters"),
    Component("kv_bytes", "KV cache", "#f28e2b", "attention memory of the conversation"),
    Component("recurrent_bytes", "Recurrent state", "#b07aa1", "state of recurrent layers"),
    Component("compute_bytes", "Compute", "#59a14f", "scratch space for one micro-batch"),
    Component("output_bytes", "Output", "#76b7b2", "logits buffer on the host"),
    Component("other_bytes", "Other", "#9c9c9c", "repacked CPU weights and the like"),
    Component(
        "projector_bytes",
        "Projector",
        "#edc948",
        "the vision/audio projector (--mmproj): its weights and compute buffer",
    ),
    Component(
        "draft_bytes",
        "Draft model",
        "#ff9da7",
        "the draft model (-md): weights, KV for every slot and compute",
    ),
    Component(
        "prompt_cache_bytes",
        "Prompt cache (up to)",
        "#bab0ac",
        "llama-server's host prompt cache: starts empty and grows with use, up to "
        "--cache-ram (8 GiB by default)",
        growth=True,
    ),
    Component(
        "checkpoint_bytes",
        "Checkpoints (up to)",
        "#d4a6c8",
        "context checkpoints (sliding window or recurrent state): grow with use, up to "
        "--ctx-checkpoints (32) per slot",
        growth=True,
    ),
)
"""The bar's parts, in painting order; ``growth`` parts (hatched) come after the memory
held from the load on and are not in its total."""

_ROW_H: Final = 58
_BAR_H: Final = 24
_PAD: Final = 10
_LEGEND_H: Final = 26
_OVER_COLOR: Final = "#e15759"


def _component_bytes(device: DeviceEstimate, component: Component) -> int:
    value = getattr(device, component.field)
    assert isinstance(value, int), f"{component.field} must be bytes"
    return value


def device_title(device: DeviceEstimate) -> str:
    """Return "CUDA0 (GPU)" or "System RAM (CPU)"."""
    if device.kind == "host":
        return "System RAM (CPU)"
    return f"{device.name} (GPU)"


def device_tooltip(device: DeviceEstimate, margin_bytes: int) -> str:
    """Return the exact numbers of one device as rich text (MiB, two decimals)."""
    lines = [f"<b>{device_title(device)}</b>", "<table>"]
    for c in COMPONENTS:
        n = _component_bytes(device, c)
        if n:
            lines.append(
                f"<tr><td><span style='color:{c.color}'>■</span> {c.title}</td>"
                f"<td align='right'>&nbsp;{format_mib(n)}</td></tr>"
            )
            if c.growth:
                lines.append(f"<tr><td colspan='2'><i>&nbsp;&nbsp;{c.meaning}</i></td></tr>")
    lines.append(
        f"<tr><td><b>Total</b></td><td align='right'><b>&nbsp;{format_mib(device.total_bytes)}"
        "</b></td></tr>"
    )
    if device.growth_bytes:
        lines.append(
            "<tr><td>With growth (limits)</td><td align='right'>&nbsp;"
            f"{format_mib(device.total_bytes + device.growth_bytes)}</td></tr>"
        )
    if device.capacity_bytes is not None:
        lines.append(
            f"<tr><td>Capacity</td><td align='right'>&nbsp;{format_mib(device.capacity_bytes)}"
            "</td></tr>"
        )
        room = device.capacity_bytes - device.total_bytes
        word = "Free" if room >= 0 else "Over"
        lines.append(
            f"<tr><td>{word}</td><td align='right'>&nbsp;{format_mib(abs(room))}</td></tr>"
        )
    lines.append("</table>")
    lines.append(f"Layers here: {device.n_layers}. Safety margin: {format_bytes(margin_bytes)}.")
    return "".join(lines)


def describe_estimate(est: MemoryEstimate) -> str:
    """Return every bar in words (the accessible description of the painted view)."""
    parts = []
    for d in est.devices:
        comps = ", ".join(
            f"{c.title} {format_bytes(_component_bytes(d, c))}"
            for c in COMPONENTS
            if _component_bytes(d, c)
        )
        cap = "unknown" if d.capacity_bytes is None else format_bytes(d.capacity_bytes)
        parts.append(
            f"{device_label(d)}: {format_bytes(d.total_bytes)} of {cap} ({comps or 'nothing'})"
        )
    return ". ".join(parts) + "."


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
            w = _component_bytes(device, c) * per_byte
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
                n = _component_bytes(device, part)
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
            if c.field in always or any(_component_bytes(d, c) for d in devices)
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


_TABLE_ROWS: Final = (
    *((c.title, c.field) for c in COMPONENTS),
    ("Total", "total_bytes"),
    ("Capacity", "capacity_bytes"),
    ("Free", "headroom_bytes"),
)


class MemoryTableModel(QAbstractTableModel):
    """Components (rows) by devices (columns) of an estimate, in MiB; read-only.

    ``Qt.UserRole`` gives the raw bytes (None where unknown).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._devices: tuple[DeviceEstimate, ...] = ()

    def set_estimate(self, est: MemoryEstimate | None) -> None:
        """Show ``est`` (None: keep the last numbers)."""
        if est is None:
            return
        if len(est.devices) == len(self._devices) and all(
            a.name == b.name for a, b in zip(est.devices, self._devices, strict=True)
        ):
            self._devices = est.devices
            if self._devices:
                self.dataChanged.emit(
                    self.index(0, 0), self.index(len(_TABLE_ROWS) - 1, len(self._devices) - 1)
                )
            return
        self.beginResetModel()
        self._devices = est.devices
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of components (plus total, capacity, free)."""
        return 0 if parent.isValid() or not self._devices else len(_TABLE_ROWS)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of devices."""
        return 0 if parent.isValid() else len(self._devices)

    def _value(self, row: int, column: int) -> int | None:
        device = self._devices[column]
        value = getattr(device, _TABLE_ROWS[row][1])
        assert value is None or isinstance(value, int), "bytes or None"
        return value

    def data(
        self,
        index: QModelIndex | QPersistentModelIndex,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return MiB text, raw bytes (UserRole), alignment or a tooltip."""
        if not index.isValid():
            return None
        value = self._value(index.row(), index.column())
        if role == Qt.ItemDataRole.DisplayRole:
            if value is None:
                return "unknown"
            if _TABLE_ROWS[index.row()][1] == "headroom_bytes" and value < 0:
                return f"{format_mib(-value)} over"
            return format_mib(value)
        if role == Qt.ItemDataRole.UserRole:
            return value
        if role == Qt.ItemDataRole.TextAlignmentRole:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.ToolTipRole and index.row() < len(COMPONENTS):
            return f"{COMPONENTS[index.row()].title}: {COMPONENTS[index.row()].meaning}"
        return None

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return component names (rows) and device names (columns)."""
        if role != Qt.ItemDataRole.DisplayRole:
            return None
        if orientation == Qt.Orientation.Vertical:
            return _TABLE_ROWS[section][0] if 0 <= section < len(_TABLE_ROWS) else None
        if 0 <= section < len(self._devices):
            return device_title(self._devices[section])
        return None


# --- speed -------------------------------------------------------------------------------


_LEVEL_COLORS: Final = {
    "fits": "#2e7d32",
    "tight": "#b26a00",
    "spills": "#b26a00",
    "does_not_fit": "#c62828",
    "unknown": "#616161",
    "unverified": "#616161",
}


class MemoryPanel(QWidget):
    """The Memory tab: verdict, bars, what was resolved, and the table (GUI thread).

    Subscribes to :class:`~ui.desktop.shared.estimate_controller.EstimateController`.
    """

    def __init__(self, controller: EstimateController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.verdict_label = QLabel("Open a model to see where its memory goes.")
        self.verdict_label.setWordWrap(True)
        self.verdict_label.setAccessibleName("Verdict")
        self.verdict_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.verdict_label.font()
        font.setPointSizeF(font.pointSizeF() * 1.35)
        font.setBold(True)
        self.verdict_label.setFont(font)
        layout.addWidget(self.verdict_label)
        self.plan_label = QLabel()
        self.plan_label.setWordWrap(True)
        self.plan_label.setAccessibleName("What the runner will do")
        self.plan_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.plan_label)
        self.details_label = QLabel()
        self.details_label.setWordWrap(True)
        self.details_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.details_label)
        self.engine_label = QLabel()
        self.engine_label.setWordWrap(True)
        self.engine_label.setAccessibleName("Engine check")
        self.engine_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.engine_label)
        self.speed_label = QLabel()
        self.speed_label.setWordWrap(True)
        self.speed_label.setAccessibleName("Predicted speed")
        self.speed_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.speed_label)
        self.bars = MemoryBarsWidget()
        layout.addWidget(self.bars)
        self.zoom_box = QCheckBox("Zoom the bars to the memory used")
        self.zoom_box.setToolTip(
            "Stretch each bar over the memory used instead of the whole device, to see "
            "the parts of a small model; the numbers stay exact"
        )
        self.zoom_box.toggled.connect(self.bars.set_zoomed)
        layout.addWidget(self.zoom_box)
        self.resolved_label = QLabel()
        self.resolved_label.setWordWrap(True)
        self.resolved_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.resolved_label)
        self.table_model = MemoryTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Memory per device, in MiB")
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setAlternatingRowColors(True)
        self.table.setSizeAdjustPolicy(QTableView.SizeAdjustPolicy.AdjustToContents)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        layout.addWidget(self.table)
        layout.addStretch(1)
        controller.state_changed.connect(self._on_controller_state_changed)
        self._on_controller_state_changed(controller.state)
        # estimates not known to agree with llama.cpp get its own figures in the background
        self.engine = EngineCheckController(controller, self)
        self.engine.checking.connect(self._on_engine_checking)
        self.engine.checked.connect(self._on_engine_checked)
        self.engine.failed.connect(self._on_engine_failed)
        self.speed = SpeedController(controller, self)
        self.speed.speed_changed.connect(self._on_speed_changed)

    def _on_speed_changed(self, summary: SpeedSummary) -> None:
        self.speed_label.setText(speed_text(summary))
        tip = "Predicted for one user, half-way through the context"
        if summary.prediction is not None:
            tip += f"; speed model: {summary.prediction.factors_source}"
        if summary.capacity is not None:
            tip += f".\n{summary.capacity.why}"
        if summary.users is not None and summary.users.ttft_s is not None:
            tip += (
                f"\nWith {summary.users.n_users} arriving at once the last first token comes "
                f"after {summary.users.ttft_s:.2f} s (predicted, {FIRST_TOKEN_PROMPT}-token "
                "prompts); Verify's Users run measures it."
            )
        self.speed_label.setToolTip(tip)

    def _on_controller_state_changed(self, state: EstimateState) -> None:
        self.bars.set_estimate(state.estimate, state.margin_bytes)
        self.table_model.set_estimate(state.estimate)
        if state.model is None:
            return
        if state.error is not None:
            self._show_verdict("does_not_fit", f"Cannot run these settings: {state.error}", ())
            return
        v = state.verdict
        est = state.estimate
        if v is None or est is None:
            return
        engine = getattr(self, "engine", None)  # created after the first state
        checked = engine.result if engine is not None else None
        if checked is not None and checked.key == state_key(state):
            v = checked.verdict  # llama.cpp's figures for exactly these settings
        self._show_verdict(v.level, v.headline, v.details)
        self.plan_label.setText(plan_text(state))
        self.resolved_label.setText(resolved_text(est, state.hardware.label))

    def _on_engine_checking(self, busy: bool) -> None:
        if busy:
            self.engine_label.setText(
                "Not every figure is known to agree with llama.cpp for this model: "
                "checking with llama.cpp's dry run…"
            )
        elif self.engine.result is None:
            self.engine_label.setText("")

    def _on_engine_checked(self, checked: EngineChecked | None) -> None:
        if checked is None:
            return
        v = checked.verdict
        self._show_verdict(v.level, v.headline, v.details)
        self.engine_label.setText(checked.describe())

    def _on_engine_failed(self, message: str) -> None:
        self.engine_label.setText(message)

    def _show_verdict(self, level: str, headline: str, details: tuple[str, ...]) -> None:
        color = _LEVEL_COLORS.get(level, "#616161")
        self.verdict_label.setStyleSheet(f"color: {color};")
        self.verdict_label.setText(headline)
        self.details_label.setText("\n".join(details))


def plan_text(state: EstimateState) -> str:
    """Return what the runner will do with the settings left to it, in a few lines."""
    plan = state.plan
    if plan is None:
        return ""
    lines = [plan.summary + "."]
    lines += list(plan.details)
    if plan.decided:
        lines.append("Move a setting to pin it; Reset gives them back to the runner.")
    lines += list(plan.notes)
    return "\n".join(lines)


def resolved_text(est: MemoryEstimate, hardware_label: str) -> str:
    """Return what llama.cpp will create, in one paragraph (cells, caches, batches)."""
    ctx = est.context
    kinds = {
        "kv": "full-attention",
        "kv_swa": "sliding-window",
        "kv_idx": "indexer-key",
        "recurrent": "recurrent",
    }
    caches = "; ".join(
        f"{c.n_layers} {kinds[c.kind]} layers × {c.cells:,} cells"
        + (f" × {c.n_stream} streams" if c.n_stream > 1 else "")
        + ("" if c.kind == "recurrent" else f" ({c.type_k}/{c.type_v})")
        for c in est.caches
    )
    text = (
        f"Context {ctx.n_ctx:,} cells ({ctx.n_stream} × {ctx.n_ctx_seq:,}), batch "
        f"{ctx.n_batch:,}/{ctx.n_ubatch:,} tokens, flash attention "
        f"{'on' if ctx.flash_attn else 'off'}. Cache: {caches or 'none'}. {hardware_label}."
    )
    if est.notes:
        text += " " + " ".join(est.notes)
    return text
