"""Bad input on the command line: every case is one line on stderr and exit 2, no traceback.

Flags that are not numbers llama.cpp could take, values past llama.cpp's own limits, URLs
that do not parse, and output paths that cannot be written.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFValueType

from ui.cli.main import run


def one_line_error(capsys: pytest.CaptureFixture[str]) -> str:
    """Return the single stderr line (and check there is exactly one, with no traceback)."""
    err = capsys.readouterr().err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1, err
    assert "Traceback" not in err
    assert lines[0].startswith("ggtune: ")
    return lines[0]


@pytest.mark.parametrize(
    "flags",
    [
        ["--ram", "nan"],
        ["--ram", "inf"],
        ["--ram", "-5"],
        ["--ram", "0"],
        ["--gpu-mem", "inf"],
        ["--gpu-mem", "nan"],
        ["--gpu-mem", "24", "-1"],
        ["-ts", "nan,1"],
        ["-ts", "inf,1"],
        ["-c", str(2**32)],
        ["-b", str(2**32)],
        ["-ub", str(2**32)],
        ["-np", "257"],
        ["-ngl", str(2**31)],
    ],
    ids=lambda f: " ".join(f),
)
def test_an_impossible_flag_is_one_line(
    smollm_path: Path, flags: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["estimate", str(smollm_path), *flags]) == 2
    line = one_line_error(capsys)
    assert any(word in line for word in ("expected a number", "must be", "llama.cpp")), line


@pytest.mark.parametrize("url", ["http://[::1", "https://[bad/x.gguf", "http://:99999/x.gguf"])
def test_a_url_that_does_not_parse_is_one_line(
    url: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["inspect", url]) == 2
    one_line_error(capsys)


def test_an_output_name_too_long_for_the_disk_is_one_line(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    target = tmp_path / ("m" * 300 + ".Modelfile")
    assert run(["export", str(smollm_path), "--to", "ollama", "-o", str(target)]) == 2
    line = one_line_error(capsys)
    assert "too long" in line


def test_an_unreadable_model_is_one_line(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["inspect", "/proc/self/mem"]) == 2
    assert "cannot read" in one_line_error(capsys)


# --------------------------------------------------------------------------- finding 12

EVIL = "\x1b]0;pwned\x07\x1b[2J\x9b31m\u202e"


def _evil_model(tmp_path: Path, name: str = "evil") -> Path:
    from tests.zoo.dense import SPECS, write_spec

    path = tmp_path / f"{name}.gguf"
    write_spec(
        SPECS["llama"],
        path,
        "llama",
        overrides={"general.name": (GGUFValueType.STRING, f"x{EVIL}y", None)},
    )
    return path


def test_a_model_name_cannot_drive_the_terminal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _evil_model(tmp_path)
    assert run(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "\x07" not in out
    assert "\u202e" not in out
    assert "x\\x1b]0;pwned\\x07\\x1b[2J" in out
    assert run(["estimate", str(path), "--ram", "8"]) == 0
    assert "\x1b" not in capsys.readouterr().out


def test_an_error_naming_a_hostile_file_name_is_escaped(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / f"m{EVIL}.gguf"
    path.write_bytes(b"not a model at all")
    assert run(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "\x1b" not in err
    assert "\\x1b[2J" in err


def test_an_ollama_tag_cannot_drive_the_terminal(
    tmp_path: Path,
    gemma_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import json

    models = tmp_path / "ollama"
    folder = models / "manifests" / "registry.ollama.ai" / "library" / f"demo{EVIL}"
    folder.mkdir(parents=True)
    blob = models / "blobs" / ("sha256-" + "b" * 64)
    blob.parent.mkdir(parents=True)
    blob.symlink_to(gemma_path)
    layer = {"mediaType": "application/vnd.ollama.image.model", "digest": "sha256:" + "b" * 64}
    (folder / f"latest{EVIL}").write_text(json.dumps({"layers": [layer]}))
    monkeypatch.setenv("OLLAMA_MODELS", str(models))
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")  # no server: nothing to compare with
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    assert run(["library"]) == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out
    assert "demo\\x1b]0;pwned" in out


# --------------------------------------------------------------------------- finding 11


@pytest.mark.parametrize("unbuffered", [False, True], ids=["buffered", "PYTHONUNBUFFERED"])
def test_a_reader_that_goes_away_ends_quietly(smollm_path: Path, unbuffered: bool) -> None:
    import os
    import subprocess
    import sys

    # Buffered (a clean machine's default), the short output reaches the pipe only at the
    # last flush; PYTHONUNBUFFERED=1 (set on some dev machines) writes it at once.
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    if unbuffered:
        env["PYTHONUNBUFFERED"] = "1"
    read_end, write_end = os.pipe()
    os.close(read_end)  # `| head` that has already gone
    try:
        proc = subprocess.run(
            [
                sys.executable,
                "-c",
                "from ui.cli.main import main; main()",
                "inspect",
                str(smollm_path),
            ],
            stdout=write_end,
            stderr=subprocess.PIPE,
            text=True,
            timeout=120,
            cwd=Path(__file__).resolve().parents[2],
            env=env,
        )
    finally:
        os.close(write_end)
    assert proc.returncode == 141
    assert proc.stderr == ""


def test_an_unexpected_error_is_one_line(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import ui.cli.inspect

    def broken(args: object) -> int:
        raise ZeroDivisionError("division by zero")

    monkeypatch.setattr(ui.cli.inspect, "run_inspect", broken)
    monkeypatch.delenv("GGTUNE_DEBUG", raising=False)
    assert run(["inspect", "x.gguf"]) == 70
    line = one_line_error(capsys)
    assert "internal error (ZeroDivisionError" in line


def test_a_damaged_file_is_one_plain_line_and_the_detail_comes_on_request(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "cut.gguf"
    path.write_bytes(b"GGUF\x03\x00\x00\x00\x01\x00")
    monkeypatch.delenv("GGTUNE_DEBUG", raising=False)
    assert run(["inspect", str(path)]) == 2
    line = one_line_error(capsys)
    assert "cut short" in line
    assert "byte" not in line
    monkeypatch.setenv("GGTUNE_DEBUG", "1")
    assert run(["inspect", str(path)]) == 2
    err = capsys.readouterr().err
    assert "reader detail: at byte 8:" in err
