"""``ggtune --screenshot PATH --view NAME --size WxH``: a real subprocess renders the app on
the demo model to a PNG and exits; with no display it falls back to Qt's offscreen platform."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("PySide6")

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
TIMEOUT_S = 120


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == PNG_MAGIC, "not a PNG"
    assert head[12:16] == b"IHDR"
    width, height = struct.unpack(">II", head[16:24])
    return int(width), int(height)


def run_entry(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY")}
    env.pop("QT_QPA_PLATFORM", None)  # no display, no platform: ggtune picks offscreen
    env["XDG_CONFIG_HOME"] = str(tmp_path / "config")  # the user's settings stay untouched
    return subprocess.run(
        [sys.executable, "-m", "ui.entry", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=TIMEOUT_S,
        check=False,
    )


@pytest.mark.parametrize("view", ["verify", "memory"])
def test_screenshot_renders_a_view_to_a_png_and_exits(
    tmp_path: Path, gemma_path: Path, view: str
) -> None:
    out = tmp_path / f"{view}.png"
    done = run_entry(
        "--screenshot", str(out), "--view", view, "--size", "1200x800", tmp_path=tmp_path
    )
    assert done.returncode == 0, done.stderr
    assert f"screenshot saved to {out}" in done.stderr
    assert png_size(out) == (1200, 800)
    assert out.stat().st_size > 10_000  # a drawn window, not an empty image


def test_screenshot_usage_error_exits_2(tmp_path: Path) -> None:
    done = run_entry("--screenshot", str(tmp_path / "x.png"), "--view", "nope", tmp_path=tmp_path)
    assert done.returncode == 2
    assert "invalid choice" in done.stderr
    assert not (tmp_path / "x.png").exists()
