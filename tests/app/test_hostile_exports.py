"""Exports onto things that are not plain files, and backups on a disk that fills up."""

from __future__ import annotations

import os
import resource
import socket
import stat
from pathlib import Path

import pytest

from app.errors import ExportError
from app.export.common import write_text_atomic


def _fifo(tmp_path: Path) -> Path:
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


def _device(tmp_path: Path) -> Path:
    if os.geteuid() != 0:
        pytest.skip("making a device node needs root")
    path = tmp_path / "null"
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, 3))  # a copy of /dev/null
    return path


def _socket(tmp_path: Path) -> Path:
    path = tmp_path / "sock"
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(path))
    server.close()
    return path


@pytest.mark.parametrize("make", [_fifo, _device, _socket], ids=["fifo", "device", "socket"])
def test_overwrite_refuses_anything_but_a_regular_file(tmp_path: Path, make: object) -> None:
    assert callable(make)
    target = make(tmp_path)
    mode = os.lstat(target).st_mode
    with pytest.raises(ExportError, match="not a regular file") as caught:
        write_text_atomic(target, "FROM x\n", overwrite=True)
    assert "\n" not in str(caught.value)
    assert os.lstat(target).st_mode == mode, "the special file was replaced"
    assert sorted(p.name for p in tmp_path.iterdir()) == [target.name]


def test_a_link_to_a_device_is_refused_too(tmp_path: Path) -> None:
    link = tmp_path / "out.Modelfile"
    link.symlink_to("/dev/null")
    with pytest.raises(ExportError, match="not a regular file"):
        write_text_atomic(link, "FROM x\n", overwrite=True)
    assert link.is_symlink()


def test_a_backup_on_a_full_disk_leaves_no_stub(tmp_path: Path) -> None:
    target = tmp_path / "config.json"
    target.write_text("x" * 100_000)
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (50_000, hard))
    try:
        with pytest.raises(ExportError, match=r"size limit|disk is full") as caught:
            write_text_atomic(target, "{}", overwrite=True, backup=True)
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert "\n" not in str(caught.value)
    assert target.read_text() == "x" * 100_000
    assert sorted(p.name for p in tmp_path.iterdir()) == ["config.json"]


@pytest.mark.parametrize(
    "name",
    [
        "x; rm -rf ~",
        "a\nFROM /etc/passwd",
        "",
        "a..b",
        "ns.x/model",
        "a/b/c/d",
        "m:",
        "é",
        "x" * 129,
    ],
)
def test_an_ollama_name_ollama_would_refuse_is_refused(smollm_path: Path, name: str) -> None:
    from app.export.ollama import export_ollama
    from app.settings import Settings

    with pytest.raises(ExportError, match="not a name Ollama accepts"):
        export_ollama(smollm_path, Settings(n_ctx=4096), name=name)


@pytest.mark.parametrize("name", ["mine", "me/mine:v1.2", "host.example/me/mine:latest", "a_b-c.d"])
def test_a_good_ollama_name_is_kept_and_quoted_in_the_comment(smollm_path: Path, name: str) -> None:
    import shlex

    from app.export.ollama import export_ollama
    from app.settings import Settings

    out = export_ollama(smollm_path, Settings(n_ctx=4096), name=name)
    assert out.model_name == name
    assert f"# Create it with: ollama create {shlex.quote(name)} -f Modelfile" in out.modelfile
