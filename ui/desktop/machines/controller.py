"""The remembered other machines (:mod:`app.planning.machines`, the file ``ggtune hw
--rpc-add`` edits too): :class:`MachinesController` adds, removes and switches them on or
off (each change written atomically; a file that cannot be read is shown and never written
over) and gives the Recommend tab the ones that are on (:meth:`MachinesController.hosts`).
GUI thread: the file is a few hundred bytes and the compositions are profile lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import QObject, Signal

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
from ui.desktop.shared.model_card import describe_error


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
