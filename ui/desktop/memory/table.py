"""The memory table: the bars' numbers as components by devices, in MiB (keyboard and
screen-reader users read them here). It displays an estimate; it computes nothing."""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QPersistentModelIndex, Qt
from PySide6.QtWidgets import QWidget

from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.units import format_mib
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.memory.words import device_title

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
