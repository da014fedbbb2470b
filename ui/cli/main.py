"""The ggtune command line: every capability of the app, scriptable.

``ggtune inspect MODEL`` describes a model; ``ggtune estimate MODEL [flags]`` says where every
byte goes; :data:`ui.cli.commands.COMMANDS` lists the rest, each in its own module of
ui/cli/. Errors are one line on stderr and exit code 2.

Only the module of the command being run is imported (:func:`build_parser`): the others
appear in ``ggtune --help`` by name and help line, so ``ggtune inspect`` does not pay for
``ggtune bench``'s imports.
"""

from __future__ import annotations

import argparse
import importlib
import multiprocessing
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from app.errors import GGTuneError
from ui.cli.commands import COMMANDS
from ui.cli.output import EXIT_USAGE, Parser

Handler = Callable[[argparse.Namespace], int]


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """Return the ``ggtune`` argument parser.

    With ``argv``, only the command ``argv`` names is built in full (its module imported and
    its ``register(sub)`` called); every other command is a name with its help line, enough
    for ``ggtune --help`` and for an unknown command's error. Without ``argv``, every
    command is built in full.
    """
    parser = Parser(prog="ggtune", description="Will this model fit, how fast, what settings?")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)
    wanted = _command_in(argv)
    full = {c.module for c in COMMANDS.values()} if argv is None else set()
    if wanted is not None:
        full.add(COMMANDS[wanted].module)
    for module_name in dict.fromkeys(c.module for c in COMMANDS.values()):  # in order
        if module_name in full:
            importlib.import_module(module_name).register(sub)
        else:
            for name, command in COMMANDS.items():
                if command.module == module_name:
                    sub.add_parser(name, help=command.help)
    return parser


def _command_in(argv: Sequence[str] | None) -> str | None:
    """Return the command ``argv`` names (its first word), or None."""
    if not argv or argv[0].startswith("-"):
        return None
    return argv[0] if argv[0] in COMMANDS else None


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors: one line on stderr, code 2)."""
    try:
        args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    except SystemExit as stop:  # --help, or a bad flag (already reported on stderr)
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except GGTuneError as err:
        print(f"ggtune: {err}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ggtune: interrupted", file=sys.stderr)
        return 130


def main() -> NoReturn:
    """Console-script entry point."""
    multiprocessing.freeze_support()
    sys.exit(run())


if __name__ == "__main__":
    main()
