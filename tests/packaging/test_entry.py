"""The ``ggtune`` entry point (ui/entry.py) unfrozen: dispatch, --selftest, data paths.

The frozen twin of these checks is test_bundle.py, which builds the bundle (minutes).
"""

from __future__ import annotations

import ctypes.util
import os
import struct
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from app import paths
from ui import entry

ROOT = Path(__file__).resolve().parents[2]


def requires_qt() -> None:
    pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (ggtune[desktop])")


@pytest.fixture
def desktop_calls(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Record calls of the desktop app's main() instead of opening a window."""
    requires_qt()
    import ui.desktop.__main__ as desktop

    calls: list[list[str]] = []

    def fake_main(argv: Sequence[str] | None = None) -> int:
        calls.append(list(argv or []))
        return 0

    monkeypatch.setattr(desktop, "main", fake_main)
    return calls


def test_no_arguments_open_the_desktop_app(desktop_calls: list[list[str]]) -> None:
    assert entry.dispatch([]) == 0
    assert desktop_calls == [[]]


def test_one_gguf_file_opens_it_in_the_desktop_app(
    desktop_calls: list[list[str]], gemma_path: Path
) -> None:
    assert entry.dispatch([str(gemma_path)]) == 0
    assert desktop_calls == [[str(gemma_path)]]


def test_a_missing_gguf_opens_the_desktop_app(desktop_calls: list[list[str]]) -> None:
    # the app shows "no such file" in its window (tests/ui/desktop/test_open_from_the_...)
    assert entry.dispatch(["missing.gguf"]) == 0
    assert desktop_calls == [["missing.gguf"]]


@pytest.mark.parametrize(
    "arg", ["MODEL.GGUF", "models/llama", "./x", "~/m.gguf", "/no/such/file", "a\\b.gguf"]
)
def test_any_path_like_first_argument_is_a_model(arg: str) -> None:
    assert entry.is_model_arg(arg)


@pytest.mark.parametrize("arg", ["estimate", "hw", "inspect", "estimat", "--help", "-c", ""])
def test_commands_options_and_typos_are_not_models(arg: str) -> None:
    assert not entry.is_model_arg(arg)


def test_a_command_name_wins_over_a_file_of_that_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "hw").write_text("not a model")
    (tmp_path / "notes").write_text("not a model either")
    assert not entry.is_model_arg("hw")
    assert entry.is_model_arg("notes")  # an existing file: the app says what is wrong


def test_a_model_with_desktop_options_goes_to_the_desktop(
    desktop_calls: list[list[str]],
) -> None:
    assert entry.dispatch(["m.gguf", "--view", "verify"]) == 0
    assert desktop_calls == [["m.gguf", "--view", "verify"]]


def test_cli_arguments_run_the_cli(gemma_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert entry.dispatch(["inspect", str(gemma_path), "--json"]) == 0
    assert '"architecture": "gemma3"' in capsys.readouterr().out


def test_main_calls_freeze_support_before_anything(monkeypatch: pytest.MonkeyPatch) -> None:
    import multiprocessing

    order: list[str] = []
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(multiprocessing, "freeze_support", lambda: order.append("freeze"))
    monkeypatch.setattr(entry, "dispatch", lambda argv: order.append(f"dispatch {argv}") or 7)
    with pytest.raises(SystemExit) as stop:
        entry.main(["hw"])
    assert stop.value.code == 7
    assert order == ["freeze", "dispatch ['hw']"]


@pytest.mark.parametrize("command", ["inspect", "estimate"])
def test_a_files_cli_run_imports_nothing_it_does_not_use(command: str, gemma_path: Path) -> None:
    # Start-up budget of 0.2 s (docs/benchmarks.md, section cli): outside a bundle
    # freeze_support does nothing (no multiprocessing, ~10 ms), a file is not a catalog entry
    # (no catalog, ~4 ms), and no TOML is read (no tomllib). Without NVIDIA's driver NVML's
    # absence is known before pynvml's ~10 ms of import (app/hardware/nvidia.py).
    unused = ["multiprocessing", "app.model.catalog", "tomllib"]
    if ctypes.util.find_library("nvidia-ml") is None:
        unused.append("pynvml")
    if sys.platform.startswith("linux"):  # RAM and cores from psutil's files; no sysctl to run
        unused += ["psutil", "subprocess"]
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['ggtune', {command!r}, {str(gemma_path)!r}, '--json']\n"
        "try:\n    runpy.run_module('ui.entry', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        f"print([m for m in {unused!r} if m in sys.modules], file=sys.stderr)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stderr.strip().splitlines()[-1] == "[]"


def test_frozen_pip_call_gets_a_clear_refusal(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # app.sources.demo_models runs `sys.executable -m pip download`: in a bundle that is ggtune.
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    assert entry.dispatch(["-m", "pip", "download", "x"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("ERROR: the ggtune bundle cannot run `python -m")


def test_selftest_without_a_model_fails_with_the_reason(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    assert entry.selftest(["--model", str(tmp_path / "none.gguf")]) == 1
    last = capsys.readouterr().out.splitlines()[-1]
    assert last.startswith("selftest: FAILED: no model file at")


def test_selftest_default_model_is_the_demo_model_in_the_cache(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("GGTUNE_MODELS_DIR", str(tmp_path))
    assert entry.default_model() == tmp_path / "gemma-3-270m-q4_k_m.gguf"
    assert entry.selftest([]) == 1
    assert "tasks.py run" in capsys.readouterr().out


@pytest.mark.engine
def test_selftest_runs_window_estimate_and_dry_run(gemma_path: Path) -> None:
    """The whole self-test, unfrozen, in its own process (it owns a QApplication)."""
    requires_qt()
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    result = subprocess.run(
        [sys.executable, "-m", "ui.entry", "--selftest", "--model", str(gemma_path)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "selftest: main window shown" in out
    assert "selftest: estimate: " in out
    assert "selftest: dry run ok: gemma3 270M" in out
    assert out.splitlines()[-1].startswith("selftest: ok in ")


# --- app/paths.py -------------------------------------------------------------------------


def test_data_dir_is_the_repository_profiles_folder_unfrozen() -> None:
    assert not paths.is_frozen()
    assert paths.data_dir() == ROOT / "profiles"
    assert (paths.data_dir() / "hardware").is_dir()
    assert paths.icons_dir() == ROOT / "packaging" / "icons"


def test_data_dir_is_under_meipass_when_frozen(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setattr(sys, "frozen", True, raising=False)
    monkeypatch.setattr(sys, "_MEIPASS", str(tmp_path), raising=False)
    assert paths.data_dir() == tmp_path / "profiles"
    assert paths.icons_dir() == tmp_path / "icons"


# --- the icon and the desktop entry ---------------------------------------------------------


@pytest.mark.parametrize("size", [16, 24, 32, 48, 64, 128, 256, 512])
def test_icon_pngs_are_committed_at_their_size(size: int) -> None:
    png = (ROOT / "packaging" / "icons" / f"ggtune-{size}.png").read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    width, height = struct.unpack(">II", png[16:24])  # the IHDR chunk
    assert (width, height) == (size, size)


def test_windows_icon_holds_every_size_up_to_256() -> None:
    ico = (ROOT / "packaging" / "icons" / "ggtune.ico").read_bytes()
    reserved, kind, count = struct.unpack("<HHH", ico[:6])
    assert (reserved, kind) == (0, 1)
    sides = sorted(ico[6 + 16 * i] or 256 for i in range(count))
    assert sides == [16, 24, 32, 48, 64, 128, 256]


def test_app_icon_is_set_from_the_pngs(request: pytest.FixtureRequest) -> None:
    requires_qt()
    request.getfixturevalue("qapp")  # pytest-qt's QApplication: pixmaps need one
    from ui.desktop.app import app_icon

    sizes = {(s.width(), s.height()) for s in app_icon().availableSizes()}
    assert {(16, 16), (256, 256), (512, 512)} <= sizes


def test_desktop_entry_names_the_icon_and_the_executable() -> None:
    text = (ROOT / "packaging" / "linux" / "ggtune.desktop").read_text(encoding="utf-8")
    lines = text.splitlines()
    assert lines[0] == "[Desktop Entry]"
    keys = dict(line.split("=", 1) for line in lines[1:] if "=" in line)
    assert keys["Type"] == "Application"
    assert keys["Name"] == "ggtune"
    assert keys["Icon"] == "ggtune"  # the hicolor theme name; app.DESKTOP_FILE matches
    assert keys["Exec"].split()[0] == "ggtune"
    assert keys["StartupWMClass"] == "ggtune"
