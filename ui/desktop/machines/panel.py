"""Other machines: the user's computers that lend their GPUs (or RAM) to a plan over
llama.cpp's RPC backend, listed beside this machine on the Hardware tab.

:class:`MachinesController` holds the remembered machines (:mod:`app.planning.machines`,
the file ``ggtune hw --rpc-add`` edits too), adds, removes and switches them on or off
(each change written atomically; a file that cannot be read is shown and never written
over) and gives the Recommend tab the ones that are on (:meth:`MachinesController.hosts`).
:class:`MachinesBox` is its group box: a table (Use, Name, Address, Hardware, What it
lends), the fields to add one, Remove. Everything here runs on the GUI thread: the file is
a few hundred bytes and the compositions are profile lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from PySide6.QtCore import QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.errors import GGTuneError
from app.planning.goals import RpcHost
from app.planning.machines import (
    RemoteMachine,
    add_machine,
    load_machines,
    machines_path,
    remove_machine,
    set_enabled,
)
from app.units import format_bytes
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.record_table import RecordTableModel

ERROR_STYLE: Final = "color: #b3261e;"
OK_STYLE: Final = "color: #1b5e20;"
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


class MachinesController(QObject):
    """The remembered machines (GUI thread); ``changed(tuple)`` after each change,
    ``failed(str)`` with one line when the file cannot be read or a change is refused."""

    changed = Signal(object)
    failed = Signal(str)

    def __init__(self, parent: QObject | None = None, *, path: Path | None = None) -> None:
        super().__init__(parent)
        self.path = path or machines_path()
        self._machines: tuple[RemoteMachine, ...] = ()
        self.problem = ""
        self.reload()

    @property
    def machines(self) -> tuple[RemoteMachine, ...]:
        """The machines, in the order added."""
        return self._machines

    def reload(self) -> None:
        """Read the file again (an unreadable one: none, and :attr:`problem` says why)."""
        try:
            self._machines = load_machines(self.path)
            self.problem = ""
        except GGTuneError as err:
            self._machines = ()
            self.problem = f"The machines file is not used: {describe_error(err)}"
            self.failed.emit(self.problem)
        self.changed.emit(self._machines)

    def add(self, endpoint: str, hardware: str, name: str = "") -> bool:
        """Remember a machine (replacing one at that address); False (and ``failed``) if
        the address or the hardware does not read, or the file cannot be written."""
        try:
            machine = RemoteMachine(endpoint.strip(), hardware.strip(), name.strip())
            self._machines = add_machine(machine, self.path)
        except (GGTuneError, OSError) as err:
            self.failed.emit(f"Not added: {describe_error(err)}")
            return False
        self.problem = ""
        self.changed.emit(self._machines)
        return True

    def remove(self, endpoint: str) -> None:
        """Forget the machine at ``endpoint``."""
        self._change(lambda: remove_machine(endpoint, self.path), "Not removed")

    def set_enabled(self, endpoint: str, enabled: bool) -> None:
        """Say whether plans use the machine at ``endpoint``."""
        self._change(lambda: set_enabled(endpoint, enabled, self.path), "Not changed")

    def hosts(self) -> tuple[RpcHost, ...]:
        """Return the machines that are on, as the planner's hosts (those whose hardware
        no longer reads are left out: :func:`lends` says why in the table)."""
        out = []
        for m in self._machines:
            if not m.enabled:
                continue
            try:
                out.append(m.host())
            except GGTuneError:
                continue
        return tuple(out)

    def _change(self, action: Callable[[], object], what: str) -> None:
        try:
            action()
            self._machines = load_machines(self.path)
        except (GGTuneError, OSError) as err:
            self.failed.emit(f"{what}: {describe_error(err)}")
            return
        self.changed.emit(self._machines)


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


def _label(text: str = "") -> QLabel:
    label = QLabel(text)
    label.setWordWrap(True)
    label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
    return label


class MachinesBox(QGroupBox):
    """The Hardware tab's "Other machines" group (GUI thread)."""

    def __init__(self, controller: MachinesController, parent: QWidget | None = None) -> None:
        super().__init__("Other machines (llama.cpp RPC)", parent)
        self.controller = controller
        layout = QVBoxLayout(self)
        layout.addWidget(
            _label(
                "Computers that lend their GPUs (or, without one, their CPU and RAM) to a plan: "
                "each runs ggml-rpc-server, and the Recommend tab plans across them and this "
                "machine and gives the commands. Only on a trusted network: the server has no "
                "password or encryption."
            )
        )
        self.model = MachinesTableModel(controller, self)
        self.table = QTableView()
        self.table.setModel(self.model)
        self.table.setAccessibleName("Other machines")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.setMinimumHeight(110)
        layout.addWidget(self.table)
        row = QHBoxLayout()
        self.address = QLineEdit()
        self.address.setPlaceholderText("address, e.g. 192.168.1.20:50052")
        self.address.setAccessibleName("Machine address")
        self.hardware = QLineEdit()
        self.hardware.setPlaceholderText("what it has, e.g. rtx-3060-12g, or 32 GB")
        self.hardware.setAccessibleName("Machine hardware")
        self.hardware.setToolTip(
            "A hardware profile or composition, as in Combine ('2x rtx-3090', 'm4-pro:48GB'); "
            "a size alone ('32 GB') for a machine without a GPU: it lends its RAM"
        )
        self.name = QLineEdit()
        self.name.setPlaceholderText("name (optional)")
        self.name.setAccessibleName("Machine name")
        self.add_button = QPushButton("&Add machine")
        self.add_button.clicked.connect(self.add)
        self.address.returnPressed.connect(self.add)
        self.hardware.returnPressed.connect(self.add)
        self.remove_button = QPushButton("Remo&ve")
        self.remove_button.clicked.connect(self.remove_selected)
        for widget in (self.address, self.hardware, self.name):
            row.addWidget(widget, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        layout.addLayout(row)
        self.feedback = _label()
        self.feedback.setAccessibleName("Other machines check")
        layout.addWidget(self.feedback)
        controller.changed.connect(self._on_changed)
        controller.failed.connect(self._on_failed)
        self._on_changed(controller.machines)
        if controller.problem:
            self._on_failed(controller.problem)

    def add(self) -> None:
        """Add the machine the fields describe; the fields clear when it was added."""
        if self.controller.add(self.address.text(), self.hardware.text(), self.name.text()):
            for field in (self.address, self.hardware, self.name):
                field.clear()

    def remove_selected(self) -> None:
        """Forget the selected machine."""
        rows = self.table.selectionModel().selectedRows()
        if not rows:
            self._on_failed("Select a machine first.")
            return
        machine = rows[0].data(Qt.ItemDataRole.UserRole)
        assert isinstance(machine, RemoteMachine), "the table holds machines"
        self.controller.remove(machine.endpoint)

    def _on_changed(self, machines: tuple[RemoteMachine, ...]) -> None:
        self.model.set_rows(tuple(machines))
        on = sum(1 for m in machines if m.enabled)
        self.feedback.setStyleSheet(OK_STYLE)
        self.feedback.setText(
            f"{on} of {len(machines)} used in plans ({self.controller.path})"
            if machines
            else f"None yet (kept in {self.controller.path})"
        )

    def _on_failed(self, message: str) -> None:
        self.feedback.setStyleSheet(ERROR_STYLE)
        self.feedback.setText(message)
