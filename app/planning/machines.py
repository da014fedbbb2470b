"""The user's other machines, lent to a plan through llama.cpp's RPC backend, remembered.

A :class:`RemoteMachine` is an address (``host:port``, as ``llama-server --rpc`` takes it),
what the machine has (a hardware composition such as ``rtx-3060-12g``,
``mac-mini-m4-16g`` or ``32 GB`` for a machine without a GPU, read by
:func:`app.hardware.profiles.compose`), a name and whether plans use it. They are kept in
``<user config dir>/rpc_machines.json`` (``~/.config/ggtune`` on Linux), written atomically;
``ggtune hw --rpc-add/--rpc-remove/--rpc-list`` and the desktop's Hardware tab edit the same
file, and ``ggtune recommend/plan --rpc-saved`` and the Recommend tab plan with the enabled
ones (:func:`saved_hosts`). A file that cannot be read is never written over.

Example::

    add_machine(RemoteMachine("192.168.1.20:50052", "rtx-3060-12g", name="gaming PC"))
    hosts = saved_hosts()          # RpcHost per enabled machine, in the order added
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Final

from app.errors import GGTuneError, HardwareProfileError, PlanError, StateFileError
from app.export.rpc_server import parse_endpoint
from app.hardware.devices import Device
from app.hardware.profiles import ProfileSet, compose
from app.planning.goals import RpcHost
from app.state_files import load_json

__all__ = [
    "MAX_MACHINES",
    "RemoteMachine",
    "add_machine",
    "load_machines",
    "machines_path",
    "parse_machine",
    "remove_machine",
    "save_machines",
    "saved_hosts",
    "set_enabled",
]

MAX_MACHINES: Final = 16
"""llama.cpp places a model on at most 16 devices (``LLAMA_MAX_DEVICES``)."""
MAX_FILE_BYTES: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class RemoteMachine:
    """One machine running ``ggml-rpc-server`` (see the module doc)."""

    endpoint: str
    hardware: str
    name: str = ""
    enabled: bool = True

    def __post_init__(self) -> None:
        parse_endpoint(self.endpoint)  # PlanError with llama.cpp's reason
        if not self.hardware.strip():
            raise PlanError(f"say what {self.endpoint} has (e.g. rtx-3060-12g, or 32 GB)")

    @property
    def label(self) -> str:
        """Return its name, or what it has."""
        return self.name or self.hardware

    def host(self, profiles: ProfileSet | None = None) -> RpcHost:
        """Return it as the planner's :class:`~app.planning.goals.RpcHost`.

        Raise :class:`~app.errors.HardwareProfileError` when its hardware does not read.
        """
        hw = compose(self.hardware, profiles=profiles, default_host=Device("CPU", "host"))
        return RpcHost(hw, self.endpoint, label=self.label)


def parse_machine(text: str, *, name: str = "") -> RemoteMachine:
    """Return the machine ``HARDWARE@HOST:PORT`` describes (``rtx-3090@192.168.1.20:50052``,
    as ``--rpc-host`` and ``ggtune hw --rpc-add`` take it); PlanError says what is wrong."""
    hardware, at, endpoint = text.strip().rpartition("@")
    if not at:
        raise PlanError(
            f"give the machine as HARDWARE@HOST:PORT (e.g. rtx-3060-12g@192.168.1.20:50052 "
            f"or '32 GB@192.168.1.21:50052'), got {text!r}"
        )
    return RemoteMachine(endpoint.strip(), hardware.strip(), name.strip())


def machines_path() -> Path:
    """Return ``<user config dir>/rpc_machines.json``."""
    import platformdirs

    return Path(platformdirs.user_config_dir("ggtune", appauthor=False)) / "rpc_machines.json"


def _entry(item: object, path: Path) -> RemoteMachine:
    if not isinstance(item, dict):
        raise StateFileError("an entry is not an object", path=path)
    endpoint, hardware = item.get("endpoint"), item.get("hardware")
    name, enabled = item.get("name", ""), item.get("enabled", True)
    if not isinstance(endpoint, str) or not isinstance(hardware, str):
        raise StateFileError('an entry lacks "endpoint" or "hardware" text', path=path)
    if not isinstance(name, str) or not isinstance(enabled, bool):
        raise StateFileError('an entry\'s "name" or "enabled" is of the wrong type', path=path)
    try:
        return RemoteMachine(endpoint, hardware, name, enabled)
    except PlanError as err:
        raise StateFileError(str(err), path=path) from None


def load_machines(path: Path | None = None) -> tuple[RemoteMachine, ...]:
    """Return the remembered machines (none when there is no file).

    Raise :class:`~app.errors.StateFileError` for a file that cannot be used (not JSON,
    not a list of machines, a bad address…), naming it; nothing is written then.
    """
    target = path or machines_path()
    if not os.path.lexists(target):
        return ()
    data = load_json(target, max_bytes=MAX_FILE_BYTES)
    items = data.get("machines") if isinstance(data, dict) else None
    if not isinstance(items, list):
        raise StateFileError('not a machines file (no "machines" list)', path=target)
    return tuple(_entry(item, target) for item in items[:MAX_MACHINES])


def save_machines(machines: tuple[RemoteMachine, ...], path: Path | None = None) -> Path:
    """Write ``machines`` atomically (the file replaced whole or not at all)."""
    from app.export.common import write_text_atomic

    if len(machines) > MAX_MACHINES:
        raise PlanError(f"at most {MAX_MACHINES} machines (llama.cpp's device limit)")
    target = path or machines_path()
    data = {
        "machines": [
            {"endpoint": m.endpoint, "hardware": m.hardware, "name": m.name, "enabled": m.enabled}
            for m in machines
        ]
    }
    write_text_atomic(target, json.dumps(data, indent=2) + "\n", overwrite=True, make_parents=True)
    return target


def _current(path: Path | None) -> tuple[RemoteMachine, ...]:
    try:
        return load_machines(path)
    except StateFileError as err:
        raise StateFileError(
            f"{err.message}; it was left as it is: fix or remove it, then try again",
            path=err.path,
        ) from None


def add_machine(
    machine: RemoteMachine,
    path: Path | None = None,
    *,
    profiles: ProfileSet | None = None,
) -> tuple[RemoteMachine, ...]:
    """Remember ``machine`` (replacing one at the same address); return them all.

    Its hardware must read (:class:`~app.errors.HardwareProfileError` otherwise), and the
    file must be readable (:class:`~app.errors.StateFileError`); nothing is written then.
    """
    machine.host(profiles)  # the composition must read before anything is written
    current = _current(path)
    kept = [m for m in current if m.endpoint != machine.endpoint]
    if len(kept) >= MAX_MACHINES:
        raise PlanError(f"at most {MAX_MACHINES} machines (llama.cpp's device limit)")
    index = next((i for i, m in enumerate(current) if m.endpoint == machine.endpoint), None)
    machines = list(kept)
    machines.insert(len(kept) if index is None else index, machine)
    save_machines(tuple(machines), path)
    return tuple(machines)


def _find(machines: tuple[RemoteMachine, ...], which: str) -> RemoteMachine:
    key = which.strip()
    found = [m for m in machines if key in (m.endpoint, m.name)]
    if not found:
        known = ", ".join(m.endpoint for m in machines) or "none remembered"
        raise GGTuneError(f"no machine {key!r} (remembered: {known})")
    if len(found) > 1:
        raise GGTuneError(f"{key!r} names {len(found)} machines; give the address")
    return found[0]


def remove_machine(which: str, path: Path | None = None) -> RemoteMachine:
    """Forget the machine at address or with name ``which``; return it."""
    current = _current(path)
    gone = _find(current, which)
    save_machines(tuple(m for m in current if m is not gone), path)
    return gone


def set_enabled(which: str, enabled: bool, path: Path | None = None) -> RemoteMachine:
    """Say whether plans use the machine ``which`` (address or name); return it."""
    current = _current(path)
    target = _find(current, which)
    changed = replace(target, enabled=enabled)
    save_machines(tuple(changed if m is target else m for m in current), path)
    return changed


def saved_hosts(
    path: Path | None = None, *, profiles: ProfileSet | None = None
) -> tuple[RpcHost, ...]:
    """Return the enabled machines as :class:`~app.planning.goals.RpcHost`, in order.

    Raise :class:`~app.errors.StateFileError` for an unreadable file and
    :class:`~app.errors.HardwareProfileError` naming the machine whose hardware no longer
    reads (a custom profile removed since).
    """
    hosts = []
    for m in load_machines(path):
        if not m.enabled:
            continue
        try:
            hosts.append(m.host(profiles))
        except HardwareProfileError as err:
            raise HardwareProfileError(f"machine {m.endpoint} ({m.hardware}): {err}") from None
    return tuple(hosts)
