"""Other machines: the user's computers that lend their GPUs (or RAM) to a plan over
llama.cpp's RPC backend, listed beside this machine on the Hardware tab.

:class:`MachinesBox` is the group box of
:class:`~ui.desktop.machines.controller.MachinesController` (the remembered machines): a
table (:mod:`ui.desktop.machines.table`: Use, Name, Address, Hardware, What it lends), the
fields to add one, Remove. Everything here runs on the GUI thread.
"""

from __future__ import annotations

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.planning.machines import RemoteMachine
from ui.desktop.machines.controller import MachinesController
from ui.desktop.machines.table import MachinesTableModel
from ui.desktop.shared.widgets import ERROR_STYLE, OK_STYLE, selectable_label


class MachinesBox(QGroupBox):
    """The Hardware tab's "Other machines" group (GUI thread)."""

    def __init__(self, controller: MachinesController, parent: QWidget | None = None) -> None:
        super().__init__("Other machines (llama.cpp RPC)", parent)
        self.controller = controller
        layout = QVBoxLayout(self)
        layout.addWidget(
            selectable_label(
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
        self.remove_button = QPushButton("Rem&ove")
        self.remove_button.clicked.connect(self.remove_selected)
        for widget in (self.address, self.hardware, self.name):
            row.addWidget(widget, 1)
        row.addWidget(self.add_button)
        row.addWidget(self.remove_button)
        layout.addLayout(row)
        self.feedback = selectable_label()
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
