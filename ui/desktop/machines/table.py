"""The other machines as a table (Use, Name, Address, Hardware, What it lends):
:class:`MachinesTableModel`, and :func:`lends`, what a machine lends a plan in words.
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt

from app.errors import GGTuneError
from app.planning.machines import RemoteMachine
from app.units import format_bytes
from ui.desktop.machines.controller import MachinesController
from ui.desktop.shared.record_table import RecordTableModel

COLUMNS: Final = ("Use", "Name", "Address", "Hardware", "Lends")


def lends(machine: RemoteMachine) -> str:
    """Return what ``machine`` lends a plan, in words ("NVIDIA … 11.0 GiB"), or why not."""
    try:
        hw = machine.host().hardware
    except GGTuneError as err:
        return f"? ({err})"
    if not hw.gpus:
        return f"its CPU and {format_bytes(hw.host.capacity_bytes)} of RAM"
    return ", ".join(f"{g.description or g.name} {format_bytes(g.capacity_bytes)}" for g in hw.gpus)


class MachinesTableModel(RecordTableModel[RemoteMachine]):
    """One machine per row; the Use column is a check box that switches it on or off."""

    HEADERS = COLUMNS

    def __init__(self, controller: MachinesController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._controller = controller

    def cell(self, record: RemoteMachine, column: int, role: int) -> object:
        """Return a cell's text, its check state (Use) or the machine (UserRole)."""
        if role == Qt.ItemDataRole.UserRole:
            return record
        if column == 0 and role == Qt.ItemDataRole.CheckStateRole:
            return Qt.CheckState.Checked if record.enabled else Qt.CheckState.Unchecked
        if role == Qt.ItemDataRole.DisplayRole and column > 0:
            return (record.name, record.endpoint, record.hardware, lends(record))[column - 1]
        if role == Qt.ItemDataRole.ToolTipRole and column == 0:
            return "Plan with this machine (the Recommend tab)"
        return None

    def flags(self, index: QModelIndex | QPersistentModelIndex) -> Qt.ItemFlag:
        """Rows are selectable; the Use cell can be checked."""
        base = super().flags(index)
        if index.isValid() and index.column() == 0:
            return base | Qt.ItemFlag.ItemIsUserCheckable
        return base

    def setData(
        self,
        index: QModelIndex | QPersistentModelIndex,
        value: object,
        role: int = Qt.ItemDataRole.EditRole,
    ) -> bool:
        """Switch a machine on or off from its Use check box."""
        if role != Qt.ItemDataRole.CheckStateRole or index.column() != 0 or not index.isValid():
            return False
        record = self.rows[index.row()]
        checked = value in (Qt.CheckState.Checked, Qt.CheckState.Checked.value)
        self._controller.set_enabled(record.endpoint, checked)
        return True
