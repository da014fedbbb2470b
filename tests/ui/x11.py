"""A real X11 desktop for looking at ggtune's screens: Xvfb, a window manager, xdotool.

The offscreen platform the pytest-qt tests use has no window manager: no decorations, no
minimum-size clamping, no real focus or keyboard. This module starts what a user has
(``Xvfb`` on a free display, ``openbox`` on it), runs the desktop app there, types and
clicks with ``xdotool``, and grabs the whole screen (window frame included) to a PNG::

    .venv/bin/python -m tests.ui.x11 shoot out.png --size 1280x800 --view compare
    .venv/bin/python -m tests.ui.x11 shoot out.png --size 1004x700 --scale 1.5
    .venv/bin/python -m tests.ui.x11 run --size 1280x800 -- key ctrl+3 sleep 2 shot a.png

``run`` takes a little script: ``key KEYS`` (xdotool key names, ``ctrl+3``), ``type TEXT``,
``click X Y`` (window coordinates), ``sleep S``, ``shot PATH``. The packages are listed in
the README (``openbox xdotool``; ``.ci/run`` installs them). docs/screens.md says what was
looked at with it. Everything started is stopped on the way out.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCREEN = "1920x1080"


def _need(program: str) -> str:
    path = shutil.which(program)
    if path is None:
        raise SystemExit(f"{program} is not installed: see the README (openbox xdotool xvfb)")
    return path


def _free_display() -> int:
    for n in range(90, 200):
        if not Path(f"/tmp/.X11-unix/X{n}").exists() and not Path(f"/tmp/.X{n}-lock").exists():
            return n
    raise SystemExit("no free X display number")


@contextmanager
def desktop(screen: str = SCREEN) -> Iterator[dict[str, str]]:
    """Start Xvfb and openbox; yield the environment that reaches them; stop both."""
    xvfb, openbox = _need("Xvfb"), _need("openbox")
    n = _free_display()
    server = subprocess.Popen(
        [xvfb, f":{n}", "-screen", "0", f"{screen}x24", "-nolisten", "tcp"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    env = {**os.environ, "DISPLAY": f":{n}"}
    env.pop("QT_QPA_PLATFORM", None)
    env.pop("WAYLAND_DISPLAY", None)
    wm = None
    try:
        deadline = time.monotonic() + 20
        while not Path(f"/tmp/.X11-unix/X{n}").exists():
            if server.poll() is not None or time.monotonic() > deadline:
                raise SystemExit(f"Xvfb :{n} did not start")
            time.sleep(0.1)
        wm = subprocess.Popen(
            [openbox], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        time.sleep(1.0)
        yield env
    finally:
        for process in (wm, server):
            if process is not None and process.poll() is None:
                process.terminate()
                try:
                    process.wait(10)
                except subprocess.TimeoutExpired:
                    process.kill()
                    process.wait()


def xdotool(env: dict[str, str], *args: str) -> str:
    """Run xdotool on the desktop; return what it printed."""
    out = subprocess.run(
        [_need("xdotool"), *args], env=env, capture_output=True, text=True, timeout=30
    )
    return out.stdout.strip()


def grab(env: dict[str, str], path: str) -> None:
    """Save the whole screen (what the user sees, window frame included) to ``path``."""
    code = (
        "import sys; from PySide6.QtGui import QGuiApplication; app = QGuiApplication([]);"
        "ok = app.primaryScreen().grabWindow(0).save(sys.argv[1]); sys.exit(0 if ok else 1)"
    )
    grab_env = {k: v for k, v in env.items() if k != "QT_SCALE_FACTOR"}
    subprocess.run([sys.executable, "-c", code, path], env=grab_env, check=True, timeout=60)


@contextmanager
def app(
    env: dict[str, str],
    *,
    size: str | None,
    scale: float | None,
    view: str | None,
    model: str | None,
    config: Path,
) -> Iterator[subprocess.Popen[bytes]]:
    """Run the desktop app on ``env``'s display with a settings folder of its own."""
    # the settings and the results database (Verify's benchmarks) of its own; the caches
    # (the demo models, the catalog's headers) stay the user's
    app_env = {**env, "XDG_CONFIG_HOME": str(config), "XDG_DATA_HOME": str(config / "data")}
    if scale:
        app_env["QT_SCALE_FACTOR"] = f"{scale:g}"
    argv = [sys.executable, "-m", "ui.desktop"]
    if model:
        argv.append(model)
    if size:
        argv += ["--size", size]
    if view:
        argv += ["--view", view]
    process = subprocess.Popen(argv, cwd=ROOT, env=app_env)
    try:
        deadline = time.monotonic() + 60
        while not xdotool(env, "search", "--onlyvisible", "--name", "ggtune"):
            if process.poll() is not None or time.monotonic() > deadline:
                raise SystemExit("the app's window did not appear")
            time.sleep(0.3)
        time.sleep(3.0)  # the model opens, the hardware is probed
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(15)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()


def play(env: dict[str, str], steps: Sequence[str]) -> None:
    """Play ``steps`` (see the module doc) against the app's window."""
    window = xdotool(env, "search", "--onlyvisible", "--name", "ggtune").split()[0]
    words = list(steps)
    while words:
        verb = words.pop(0)
        if verb == "key":
            xdotool(env, "key", "--window", window, "--clearmodifiers", words.pop(0))
        elif verb == "type":
            xdotool(env, "type", "--delay", "30", words.pop(0))
        elif verb == "click":
            x, y = words.pop(0), words.pop(0)
            xdotool(env, "mousemove", "--window", window, x, y, "click", "1")
        elif verb == "sleep":
            time.sleep(float(words.pop(0)))
        elif verb == "shot":
            grab(env, words.pop(0))
        else:
            raise SystemExit(f"unknown step {verb!r}")
        time.sleep(0.3)


def main(argv: Sequence[str] | None = None) -> int:
    """Take screenshots of the app on a real X11 desktop; see the module doc."""
    parser = argparse.ArgumentParser(prog="python -m tests.ui.x11")
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("shoot", "run"):
        p = sub.add_parser(name)
        if name == "shoot":
            p.add_argument("out")
        p.add_argument("--size", help="window size WxH (default: the app's own choice)")
        p.add_argument("--scale", type=float, help="QT_SCALE_FACTOR, e.g. 1.5")
        p.add_argument("--view", help="the tab to open on")
        p.add_argument("--model", help="the model to open (default: the demo model)")
        p.add_argument("--screen", default=SCREEN, help=f"the screen (default {SCREEN})")
        if name == "run":
            p.add_argument("steps", nargs="*")
    args = parser.parse_args(argv)
    with (
        tempfile.TemporaryDirectory() as config,
        desktop(args.screen) as env,
        app(
            env,
            size=args.size,
            scale=args.scale,
            view=args.view,
            model=args.model,
            config=Path(config),
        ),
    ):
        if args.command == "shoot":
            grab(env, args.out)
        else:
            play(env, args.steps)
    return 0


if __name__ == "__main__":
    sys.exit(main())
