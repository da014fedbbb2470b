"""The one ``ggtune`` executable: the desktop app, the CLI, or a self-test.

``ggtune`` is both the console script and the frozen bundle's executable
(``packaging/ggtune.spec``), so a double-click and a terminal reach the same code:

* no arguments (a double-click): the desktop app, on the last model or the demo model;
* a model first (anything path-like, :func:`is_model_arg`: a file manager's "Open with",
  ``ggtune MISSING.gguf``): the desktop app on it; a file that is not there or not a model
  is the app's error to show ("no such file"), in its window;
* ``--screenshot PATH [--view NAME] [--size WxH] [MODEL]``: render a view of the app on the
  demo model (or ``MODEL``) to a PNG and exit; on the ``offscreen`` Qt platform when there
  is no display (see :func:`screenshot`);
* ``--selftest [--model PATH]``: open the main window offscreen on the demo model (or
  ``PATH``), estimate, dry-run llama.cpp in the child process, print what happened and
  exit 0, or non-zero with the reason on the last line;
* anything else: the command line (:func:`ui.cli.main.run`), e.g. ``ggtune estimate MODEL``.

In a frozen bundle :func:`main` calls :func:`multiprocessing.freeze_support` before anything
else: the runner's ``spawn`` children start this same executable, and that call turns them
into the child instead of a second app. Outside a bundle the call does nothing, so it is not
made and multiprocessing (~10 ms of imports) is left to the commands that start a child. Qt
is imported only on the desktop paths, so CLI runs and the runner's children stay light.

Example::

    $ ggtune --selftest
    selftest: ok in 6.1 s
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Final, NoReturn

from app.paths import is_frozen

SELFTEST_TIMEOUT_S: Final = 180.0
"""The whole self-test: window, model header, hardware probe, estimate and the dry run."""

EXIT_FAILED: Final = 1
EXIT_USAGE: Final = 2


def main(argv: Sequence[str] | None = None) -> NoReturn:
    """Console-script and bundle entry point: dispatch on the arguments, then exit."""
    if is_frozen():  # first: a frozen spawn child stops here
        import multiprocessing

        multiprocessing.freeze_support()
    sys.exit(dispatch(sys.argv[1:] if argv is None else list(argv)))


def dispatch(argv: Sequence[str]) -> int:
    """Run the desktop app, the self-test or the CLI for ``argv``; return the exit status."""
    args = list(argv)
    if args and args[0] == "--selftest":
        return selftest(args[1:])
    if any(a == "--screenshot" or a.startswith("--screenshot=") for a in args):
        return screenshot(args)
    if not args or is_model_arg(args[0]):
        from ui.desktop.__main__ import main as desktop_main

        return desktop_main(args)
    if args[0] == "-m" and is_frozen():
        # app.sources.demo_models fetches the demo model with `sys.executable -m pip`; in a bundle
        # sys.executable is this program, which carries no pip. Say so (pip's caller shows
        # this last stderr line to the user) instead of a CLI usage error.
        print(
            "ERROR: the ggtune bundle cannot run `python -m ...` (no pip inside), so it "
            "cannot download the demo model; open a .gguf file instead",
            file=sys.stderr,
        )
        return EXIT_USAGE
    from ui.cli.main import run

    return run(args)


def is_model_arg(arg: str) -> bool:
    """Whether the first argument names a model to open in the desktop app, not a command.

    Anything path-like is: a name ending in ``.gguf``, one with a folder separator or a
    leading ``~``, or an existing file; whether the file is there or readable is the app's
    to say ("no such file" in its window), not a CLI usage error. Command names win.
    """
    from ui.cli.commands import COMMANDS

    if not arg or arg.startswith("-") or arg in COMMANDS:
        return False
    separators = {"/", os.sep} | ({os.altsep} if os.altsep else set())
    return (
        arg.lower().endswith(".gguf")
        or any(sep in arg for sep in separators)
        or arg.startswith("~")
        or os.path.isfile(arg)
    )


# --- screenshots --------------------------------------------------------------------------


def screenshot(argv: Sequence[str]) -> int:
    """Render a view of the app to a PNG and exit: ``ui.desktop``'s ``--screenshot``.

    Without a display (and no ``QT_QPA_PLATFORM`` of the caller's) Qt draws offscreen.
    """
    from ui.desktop.__main__ import main as desktop_main

    try:
        return desktop_main(list(argv))
    except SystemExit as stop:  # a usage error or no GUI here, already explained on stderr
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE


# --- the self-test ------------------------------------------------------------------------


def _say(text: str) -> None:
    print(f"selftest: {text}", flush=True)


def default_model() -> Path:
    """Return where the demo model lives in the user cache (it may be absent)."""
    from app.sources.demo_models import GEMMA, models_dir

    return models_dir() / GEMMA.filename


def selftest_parser() -> argparse.ArgumentParser:
    """Return the parser of ``ggtune --selftest``'s own options."""
    parser = argparse.ArgumentParser(
        prog="ggtune --selftest",
        description="Open the main window offscreen, estimate, dry-run llama.cpp, exit 0.",
    )
    parser.add_argument(
        "--model", metavar="PATH", help="a .gguf file (default: the demo model in the cache)"
    )
    parser.add_argument(
        "--timeout", type=float, default=SELFTEST_TIMEOUT_S, metavar="S", help="give up after S"
    )
    return parser


def selftest(argv: Sequence[str] = ()) -> int:
    """Check that the app works here, end to end; return 0, or 1 with the reason last.

    The main window is shown on the ``offscreen`` Qt platform unless ``QT_QPA_PLATFORM``
    says otherwise, with throw-away settings (the user's recent files are left alone).
    """
    try:
        args = selftest_parser().parse_args(list(argv))
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    started = time.monotonic()
    model = Path(args.model) if args.model else default_model()
    _say(f"ggtune {_version()} on Python {sys.version.split()[0]}, frozen: {is_frozen()}")
    if not model.is_file():
        where = "" if args.model else " (the demo model is fetched by `python3 tasks.py run`)"
        _say(f"FAILED: no model file at {model}{where}; pass --model PATH to a .gguf file")
        return EXIT_FAILED
    _say(f"model {model}")
    os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
    from ui.desktop.preflight import diagnose

    _platform, problem = diagnose()
    if problem is not None:  # Qt would abort the process (SIGABRT) instead
        _say(f"FAILED: the desktop app cannot start: {problem}")
        return EXIT_FAILED
    import tempfile  # the self-test's alone: ~3 ms every CLI run would pay

    with tempfile.TemporaryDirectory(prefix="ggtune-selftest-") as scratch:
        from ui.desktop.selftest import run_window

        code, reason = run_window(str(model), Path(scratch), args.timeout)
    elapsed = time.monotonic() - started
    if code == 0:
        _say(f"ok in {elapsed:.1f} s")
    else:
        _say(f"FAILED after {elapsed:.1f} s: {reason}")
    return code


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("ggtune")
    except PackageNotFoundError:  # a bundle may carry no metadata
        return "(version unknown)"


if __name__ == "__main__":
    main()
