"""The GUI preflight: where Qt would abort, every GUI entry point says one line and exits 2.

The failing library is made unloadable for real: a stub ``libxcb-icccm.so.4`` (compiled
here, needing a library that does not exist) sits first on LD_LIBRARY_PATH, so the dynamic
loader picks it and fails, exactly as on a machine without libxcb-icccm4. The control test
shows that Qt itself dies of SIGABRT in that environment.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path

import pytest

from tests.packaging.conftest import STUBBED
from ui.desktop import preflight

ROOT = Path(__file__).resolve().parents[2]

pytestmark = pytest.mark.skipif(not preflight.LINUX_LIKE, reason="X11/Wayland platforms only")


def requires_qt() -> None:
    pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (ggtune[desktop])")


def gui_env(**extra: str) -> dict[str, str]:
    """This environment without any display or Qt platform choice, plus ``extra``."""
    env = dict(os.environ)
    for name in ("DISPLAY", "WAYLAND_DISPLAY", "QT_QPA_PLATFORM", "XDG_SESSION_TYPE"):
        env.pop(name, None)
    env.update(extra)
    return env


def run(
    argv: Sequence[str | os.PathLike[str]], env: dict[str, str]
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [os.fspath(a) for a in argv],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


ENTRY_POINTS = {
    "ggtune": [sys.executable, "-m", "ui.entry"],
    "ggtune MISSING.gguf": [sys.executable, "-m", "ui.entry", "MISSING.gguf"],
    "python -m ui.desktop": [sys.executable, "-m", "ui.desktop"],
    "bundle launcher": [sys.executable, "packaging/launcher.py"],
}


@pytest.mark.parametrize("entry", list(ENTRY_POINTS))
def test_an_unloadable_xcb_library_is_one_line_and_exit_2(entry: str, broken_lib_dir: Path) -> None:
    requires_qt()
    env = gui_env(DISPLAY=":97", LD_LIBRARY_PATH=str(broken_lib_dir))
    result = run(ENTRY_POINTS[entry], env)
    assert result.returncode == preflight.EXIT_NO_GUI, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    line = lines[0]
    assert line.startswith("ggtune: the desktop app cannot start: Qt's X11 plugin (xcb) needs")
    assert STUBBED in line
    if preflight.distribution() == "debian":
        assert "apt install" in line
        assert "libxcb-icccm4" in line
    assert result.stdout == ""


def test_qt_alone_aborts_in_that_environment(broken_lib_dir: Path) -> None:
    """The control: without the preflight, Qt kills the process (what users got)."""
    requires_qt()
    env = gui_env(DISPLAY=":97", LD_LIBRARY_PATH=str(broken_lib_dir), QT_QPA_PLATFORM="xcb")
    code = "from PySide6.QtWidgets import QApplication; QApplication([])"
    result = run([sys.executable, "-c", code], env)
    assert result.returncode == -signal.SIGABRT, result.stderr


def test_tasks_run_with_a_display_but_broken_qt_says_the_same_line(broken_lib_dir: Path) -> None:
    requires_qt()
    if not (ROOT / ".venv").is_dir():
        pytest.skip("tasks.py run needs the set-up's .venv")
    env = gui_env(DISPLAY=":97", LD_LIBRARY_PATH=str(broken_lib_dir))
    result = run([sys.executable, "tasks.py", "run"], env)
    assert result.returncode == preflight.EXIT_NO_GUI, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("ggtune: the desktop app cannot start: Qt's X11 plugin (xcb) needs")
    assert STUBBED in last
    assert last.endswith("then run `python3 tasks.py run` again.")


def test_no_display_is_one_line_and_exit_2() -> None:
    requires_qt()
    result = run([sys.executable, "-m", "ui.desktop"], gui_env())
    assert result.returncode == preflight.EXIT_NO_GUI
    (line,) = result.stderr.strip().splitlines()
    assert "no display: neither DISPLAY (X11) nor WAYLAND_DISPLAY is set" in line


def test_an_x_server_that_is_not_there_is_one_line_and_exit_2() -> None:
    requires_qt()
    qt = preflight.find_qt()
    assert qt is not None
    if preflight.check_platform(qt, "xcb", connect=False).missing:
        pytest.skip("this machine lacks xcb libraries (.ci/run installs them)")
    result = run([sys.executable, "-m", "ui.desktop"], gui_env(DISPLAY=":96"))
    assert result.returncode == preflight.EXIT_NO_GUI, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "cannot connect to the X server at DISPLAY=:96" in line


def test_wayland_is_taken_when_x11_libraries_are_missing(monkeypatch: pytest.MonkeyPatch) -> None:
    requires_qt()
    qt = preflight.find_qt()
    assert qt is not None
    outcome = {
        "xcb": preflight.PlatformCheck("xcb", missing=[STUBBED]),
        "wayland": preflight.PlatformCheck("wayland"),
    }
    monkeypatch.setattr(preflight, "check_platform", lambda _qt, p, connect=True: outcome[p])
    env = {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}
    preflight.ensure_gui(env)
    assert env["QT_QPA_PLATFORM"] == "wayland"
    outcome["wayland"] = preflight.PlatformCheck("wayland", problem="cannot connect")
    platform, problem = preflight.diagnose({"DISPLAY": ":0", "WAYLAND_DISPLAY": "w"}, qt)
    assert platform is None
    assert problem is not None
    assert STUBBED in problem
    assert "Wayland plugin: cannot connect" in problem


def test_the_session_type_orders_the_platforms() -> None:
    both = {"DISPLAY": ":0", "WAYLAND_DISPLAY": "wayland-0"}
    assert preflight.candidates(both) == ["xcb", "wayland"]
    assert preflight.candidates({**both, "XDG_SESSION_TYPE": "wayland"}) == ["wayland", "xcb"]
    assert preflight.candidates({"WAYLAND_DISPLAY": "w"}) == ["wayland"]
    assert preflight.candidates({**both, "QT_QPA_PLATFORM": "offscreen"}) == ["offscreen"]
    assert preflight.candidates({}) == []


@pytest.mark.parametrize(
    ("release", "command"),
    [
        ({"ID": "debian"}, "apt install libxcb-icccm4 libxcb-keysyms1"),
        ({"ID": "ubuntu", "ID_LIKE": "debian"}, "apt install libxcb-icccm4 libxcb-keysyms1"),
        ({"ID": "fedora"}, "dnf install xcb-util-wm xcb-util-keysyms"),
        ({"ID": "manjaro", "ID_LIKE": "arch"}, "pacman -S --needed xcb-util-wm xcb-util-keysyms"),
    ],
)
def test_the_install_command_fits_the_distribution(release: dict[str, str], command: str) -> None:
    line = preflight.install_command(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"], release)
    assert command in line


def test_the_install_command_says_it_for_one_library() -> None:
    one = preflight.install_command(["libxcb-icccm.so.4"], {"ID": "debian"})
    assert one.startswith("install it with `")
    assert one.endswith("apt install libxcb-icccm4`")
    two = preflight.install_command(["libxcb-icccm.so.4", "libxcb-keysyms.so.1"], {"ID": "arch"})
    assert two.startswith("install them with `")


def test_an_unknown_distribution_gets_the_library_names() -> None:
    line = preflight.install_command(["libxcb-icccm.so.4"], {"ID": "gentoo"})
    assert line == "install the packages that provide libxcb-icccm.so.4"


def test_preflight_passes_under_a_real_x_server() -> None:
    requires_qt()
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("Xvfb is not installed (.ci/run installs it)")
    display = next(n for n in range(150, 400) if not Path(f"/tmp/.X11-unix/X{n}").exists())
    server = subprocess.Popen(
        [xvfb, f":{display}", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        socket = Path(f"/tmp/.X11-unix/X{display}")
        for _ in range(300):
            if socket.exists():
                break
            subprocess.run(["sleep", "0.05"], check=False)
        result = run([sys.executable, "-m", "ui.desktop.preflight"], gui_env(DISPLAY=f":{display}"))
    finally:
        server.terminate()
        server.wait(10)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok: Qt platform xcb"
