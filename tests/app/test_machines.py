"""The remembered machines of a pooled plan (app/planning/machines.py): kept atomically, read
without trust, never written over when unreadable."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from app.errors import GGTuneError, HardwareProfileError, PlanError, StateFileError
from app.planning.machines import (
    MAX_MACHINES,
    RemoteMachine,
    add_machine,
    load_machines,
    parse_machine,
    remove_machine,
    saved_hosts,
    set_enabled,
)

GIB = 1024**3


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "cfg" / "rpc_machines.json"


def test_add_list_toggle_remove(path: Path) -> None:
    assert load_machines(path) == ()
    add_machine(parse_machine("rtx-3060-12g@192.168.1.20:50052", name="gaming PC"), path)
    add_machine(parse_machine("32 GB@192.168.1.21:50052"), path)
    machines = load_machines(path)
    assert [m.endpoint for m in machines] == ["192.168.1.20:50052", "192.168.1.21:50052"]
    assert machines[0].name == "gaming PC"
    assert machines[0].label == "gaming PC"
    assert machines[1].label == "32 GB"
    # the same address again replaces it in place
    add_machine(RemoteMachine("192.168.1.20:50052", "rtx-3090", "the big one"), path)
    machines = load_machines(path)
    assert [(m.endpoint, m.hardware) for m in machines] == [
        ("192.168.1.20:50052", "rtx-3090"),
        ("192.168.1.21:50052", "32 GB"),
    ]
    # plans use the enabled ones, as the planner's RpcHost, in order
    hosts = saved_hosts(path)
    assert [h.endpoint for h in hosts] == ["192.168.1.20:50052", "192.168.1.21:50052"]
    assert hosts[0].hardware.gpus[0].capacity_bytes is not None
    assert not hosts[1].hardware.gpus  # no GPU: it lends its host (32 GiB of RAM)
    assert hosts[1].hardware.host.capacity_bytes == 32 * GIB
    set_enabled("the big one", False, path)
    assert [h.endpoint for h in saved_hosts(path)] == ["192.168.1.21:50052"]
    set_enabled("192.168.1.20:50052", True, path)
    assert len(saved_hosts(path)) == 2
    assert remove_machine("192.168.1.21:50052", path).hardware == "32 GB"
    assert [m.endpoint for m in load_machines(path)] == ["192.168.1.20:50052"]
    with pytest.raises(GGTuneError, match="no machine 'nope'"):
        remove_machine("nope", path)
    data = json.loads(path.read_text())
    assert data == {
        "machines": [
            {
                "endpoint": "192.168.1.20:50052",
                "hardware": "rtx-3090",
                "name": "the big one",
                "enabled": True,
            }
        ]
    }


@pytest.mark.parametrize(
    ("text", "error", "match"),
    [
        ("rtx-3090", PlanError, "HARDWARE@HOST:PORT"),
        ("rtx-3090@host", PlanError, "HOST:PORT"),
        ("rtx-3090@[::1]:50052", PlanError, "IPv6"),
        ("@10.0.0.1:50052", PlanError, "say what"),
        ("no-such-gpu@10.0.0.1:50052", HardwareProfileError, "no-such-gpu"),
    ],
)
def test_bad_machines_are_refused_and_nothing_is_written(
    path: Path, text: str, error: type[Exception], match: str
) -> None:
    with pytest.raises(error, match=match):
        add_machine(parse_machine(text), path)
    assert not path.exists()


def test_same_name_twice_needs_the_address(path: Path) -> None:
    add_machine(RemoteMachine("10.0.0.1:50052", "rtx-3090", "box"), path)
    add_machine(RemoteMachine("10.0.0.2:50052", "rtx-3090", "box"), path)
    with pytest.raises(GGTuneError, match="give the address"):
        remove_machine("box", path)


def test_at_most_sixteen(path: Path) -> None:
    for i in range(MAX_MACHINES):
        add_machine(RemoteMachine(f"10.0.0.{i + 1}:50052", "rtx-3090"), path)
    with pytest.raises(PlanError, match="at most 16"):
        add_machine(RemoteMachine("10.0.1.1:50052", "rtx-3090"), path)
    add_machine(RemoteMachine("10.0.0.1:50052", "rtx-4090"), path)  # replacing is fine
    assert len(load_machines(path)) == MAX_MACHINES


@pytest.mark.parametrize(
    "text",
    [
        "not json",
        "[]",
        '{"machines": 3}',
        '{"machines": [3]}',
        '{"machines": [{"endpoint": "a:1"}]}',
        '{"machines": [{"endpoint": "a:1", "hardware": "rtx-3090", "enabled": "yes"}]}',
        '{"machines": [{"endpoint": "[::1]:1", "hardware": "rtx-3090"}]}',
        '{"machines": [{"endpoint": "a:99999", "hardware": "rtx-3090"}]}',
        "[" * 100 + "]" * 100,
    ],
)
def test_an_unreadable_file_is_named_and_never_written_over(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True)
    path.write_text(text)
    with pytest.raises(StateFileError) as err:
        load_machines(path)
    assert str(path) in str(err.value)
    for change in (
        lambda: add_machine(RemoteMachine("10.0.0.1:50052", "rtx-3090"), path),
        lambda: remove_machine("10.0.0.1:50052", path),
        lambda: set_enabled("10.0.0.1:50052", False, path),
    ):
        with pytest.raises(StateFileError, match="left as it is"):
            change()
        assert path.read_text() == text


def test_a_fifo_is_not_waited_on(path: Path) -> None:
    if not hasattr(os, "mkfifo"):
        pytest.skip("no FIFOs here")
    path.parent.mkdir(parents=True)
    os.mkfifo(path)
    with pytest.raises(StateFileError):
        load_machines(path)


def test_a_machine_whose_profile_is_gone_is_named(path: Path) -> None:
    path.parent.mkdir(parents=True)
    entry = {"endpoint": "10.0.0.5:50052", "hardware": "my-removed-gpu", "name": ""}
    path.write_text(json.dumps({"machines": [entry]}))
    assert load_machines(path)[0].hardware == "my-removed-gpu"  # still listed
    with pytest.raises(HardwareProfileError, match=r"machine 10\.0\.0\.5:50052"):
        saved_hosts(path)
