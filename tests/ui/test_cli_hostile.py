"""Bad input on the command line: every case is one line on stderr and exit 2, no traceback.

Flags that are not numbers llama.cpp could take, values past llama.cpp's own limits, URLs
that do not parse, and output paths that cannot be written.
"""

from __future__ import annotations

from pathlib import Path

import pytest

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
