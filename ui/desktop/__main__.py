"""Start the desktop app: ``ggtune-desktop`` or ``python -m ui.desktop``.

``--screenshot PATH`` renders the window on the demo model (or ``--model``) to a PNG and
exits (offscreen without a display); ``--size WxH`` sets the window size and ``--view
memory|verify|compare|recommend|export|explain|hardware`` the tab. Qt is imported inside
:func:`main`, so runner's spawned children, which import this module, stay light, and only
after :func:`ui.desktop.preflight.ensure_gui` has checked that it can open a window here
(else one line naming what is missing, and exit status 2).
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import sys
from collections.abc import Sequence


def _size(value: str) -> tuple[int, int]:
    width, sep, height = value.lower().partition("x")
    if not sep or not width.isdigit() or not height.isdigit():
        raise argparse.ArgumentTypeError(f"expected WIDTHxHEIGHT, e.g. 1000x700, got {value!r}")
    return int(width), int(height)


def build_parser() -> argparse.ArgumentParser:
    """Return the command-line parser of the desktop app."""
    parser = argparse.ArgumentParser(
        prog="ggtune-desktop", description="ggtune's desktop app: see where the memory goes."
    )
    parser.add_argument("model", nargs="?", help="a .gguf file to open (default: the last one)")
    parser.add_argument("--screenshot", metavar="PATH", help="save the window as a PNG and exit")
    parser.add_argument("--size", type=_size, metavar="WxH", help="window size, e.g. 1000x700")
    parser.add_argument(
        "--view",
        choices=("memory", "verify", "compare", "recommend", "export", "explain", "hardware"),
        default=None,
        help="tab to show",
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the app; return its exit status."""
    multiprocessing.freeze_support()
    args = build_parser().parse_args(argv)
    from ui.desktop.preflight import ensure_gui, has_display

    if args.screenshot is not None and not has_display():
        os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")  # a PNG needs no display
    ensure_gui()  # one line and exit 2 where Qt would abort (a missing xcb library)
    from ui.desktop.app import run_app

    return run_app(args.model, screenshot=args.screenshot, size=args.size, view=args.view)


if __name__ == "__main__":
    sys.exit(main())
