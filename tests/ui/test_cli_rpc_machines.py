"""ggtune hw --rpc-add/--rpc-remove/--rpc-off/--rpc-list and ggtune recommend --rpc-saved: the
remembered machines of a pooled plan, on the command line."""

from __future__ import annotations

import json
import shlex
from pathlib import Path
from typing import Any

import pytest

from ui.cli.main import run


@pytest.fixture(autouse=True)
def config(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    return tmp_path / "config" / "ggtune" / "rpc_machines.json"


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> Any:
    assert run(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_remember_list_and_forget(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    assert run(["hw", "--rpc-list"]) == 0
    assert "none: ggtune hw --rpc-add" in capsys.readouterr().out
    rows = _json(
        capsys, "hw", "--rpc-add", "rtx-3060-12g@192.168.1.20:50052", "--rpc-name", "PC",
        "--json",
    )  # fmt: skip
    assert rows[0]["endpoint"] == "192.168.1.20:50052"
    assert rows[0]["name"] == "PC"
    assert rows[0]["devices"][0]["kind"] == "gpu"
    assert run(["hw", "--rpc-add", "32 GB@192.168.1.21:50052"]) == 0
    out = capsys.readouterr().out
    assert "192.168.1.21:50052: 32 GB — lends CPU 32.0 GiB; planned with" in out
    assert config.is_file()
    assert run(["hw", "--rpc-off", "PC"]) == 0
    assert "192.168.1.20:50052 (PC): rtx-3060-12g — lends" in capsys.readouterr().out
    rows = _json(capsys, "hw", "--rpc-list", "--json")
    assert [r["enabled"] for r in rows] == [False, True]
    assert run(["hw", "--rpc-remove", "192.168.1.21:50052"]) == 0
    capsys.readouterr()
    assert [r["endpoint"] for r in _json(capsys, "hw", "--rpc-list", "--json")] == [
        "192.168.1.20:50052"
    ]


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["hw", "--rpc-add", "rtx-3090"], "HARDWARE@HOST:PORT"),
        (["hw", "--rpc-add", "rtx-3090@[fe80::1]:50052"], "IPv6"),
        (["hw", "--rpc-add", "rtx-3090@host:0"], "1 to 65535"),
        (["hw", "--rpc-add", "warp-drive@10.0.0.1:50052"], "warp-drive"),
        (["hw", "--rpc-remove", "10.9.9.9:1"], "no machine"),
        (["hw", "--rpc-name", "x"], "--rpc-name goes with --rpc-add"),
        (["recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--rpc-saved"], "no machine"),
    ],
)
def test_bad_input_is_one_line(
    capsys: pytest.CaptureFixture[str], config: Path, argv: list[str], message: str
) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1
    assert message in err
    assert not config.exists()


def test_an_unreadable_file_is_kept(capsys: pytest.CaptureFixture[str], config: Path) -> None:
    config.parent.mkdir(parents=True)
    config.write_text("{broken")
    assert run(["hw", "--rpc-add", "rtx-3090@10.0.0.1:50052"]) == 2
    err = capsys.readouterr().err
    assert "not valid JSON" in err
    assert "left as it is" in err
    assert config.read_text() == "{broken"


def test_recommend_with_the_remembered_machines(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hw", "--rpc-add", "rtx-3090:120GB@10.0.0.2:50052"]) == 0
    assert run(["hw", "--rpc-add", "rtx-3090:120GB@10.0.0.3:50053"]) == 0
    assert run(["hw", "--rpc-off", "10.0.0.3:50053"]) == 0
    capsys.readouterr()
    data = _json(
        capsys, "recommend", "catalog:llama-3.1-70b", "--goal", "fastest", "--profile",
        "rtx-4090", "--ram", "64", "--no-simulate", "--any-quant", "--kv-types", "q8_0",
        "--rpc-saved", "--json",
    )  # fmt: skip
    assert data["goal"]["rpc_hosts"] == ["10.0.0.2:50052"]  # the one that is on
    assert data["rpc"]["remote_commands"] == ["ggml-rpc-server -H 10.0.0.2 -p 50052 -c"]
    assert data["command"] is not None, data["why"]
    argv = shlex.split(data["command"])
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052"
    assert argv[argv.index("-ts") + 1].count(",") == 1  # RPC0 and this machine's CUDA0
    # --rpc-host and --rpc-saved together; the same address twice is refused
    assert (
        run(["recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--rpc-host",
             "rtx-3090@10.0.0.2:50052", "--rpc-saved"]) == 2
    )  # fmt: skip
    assert "own host:port" in capsys.readouterr().err


def test_recommend_writes_the_scripts(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    folder = tmp_path / "scripts"
    # Llama-3.1-8B F16 (15 GiB) needs both 12 GB cards
    argv = [
        "recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--ram", "16",
        "--rpc-host", "rtx-3060-12g@192.168.1.20:50052", "--rpc-host", "rtx-3060-12g@pc.lan:50053",
        "--no-simulate", "--no-calibrate", "--write-scripts", str(folder),
    ]  # fmt: skip
    assert run(argv) == 0
    out = capsys.readouterr().out
    names = sorted(p.name for p in folder.iterdir())
    assert names == [
        "llama-server.sh", "rpc-server-192.168.1.20-50052.sh", "rpc-server-pc.lan-50053.sh",
    ]  # fmt: skip
    assert f"sh {folder / 'llama-server.sh'}" in out
    first = (folder / "rpc-server-192.168.1.20-50052.sh").read_text()
    assert first.startswith("#!/bin/sh\n")
    assert "exec ggml-rpc-server -H 192.168.1.20 -p 50052 -c\n" in first
    assert "no authentication or encryption" in first
    named = (folder / "rpc-server-pc.lan-50053.sh").read_text()
    assert "exec ggml-rpc-server -H 0.0.0.0 -p 50053 -c\n" in named  # -H takes no names
    main = (folder / "llama-server.sh").read_text()
    line = next(x for x in main.splitlines() if x.startswith("exec "))
    server = shlex.split(line)[1:]
    assert server[server.index("--rpc") + 1] == "192.168.1.20:50052,pc.lan:50053"
    # nothing replaced unasked; --overwrite replaces
    (folder / "llama-server.sh").write_text("mine")
    assert run(argv) == 2
    assert "already there" in capsys.readouterr().err
    assert (folder / "llama-server.sh").read_text() == "mine"
    assert run([*argv, "--overwrite", "--windows"]) == 0
    assert (folder / "llama-server.ps1").is_file()
    # without other machines there is nothing to write
    assert run(["recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--ram", "16",
                "--write-scripts", str(folder)]) == 2  # fmt: skip
    assert "no plan over several machines" in capsys.readouterr().err
