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
import io
import os
import sys
from collections.abc import Callable, Sequence
from typing import NoReturn

from app.errors import GGTuneError, GGUFError
from app.paths import is_frozen
from ui.cli.commands import COMMANDS
from ui.cli.output import EXIT_USAGE, Parser, TerminalSafe

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


EXIT_BROKEN_PIPE = 141
"""128 + SIGPIPE: what a shell reports for a command whose reader went away (``| head``)."""

EXIT_INTERNAL = 70
"""EX_SOFTWARE: ggtune itself failed (a bug): one line, and the traceback with GGTUNE_DEBUG=1."""


def run(argv: Sequence[str] | None = None) -> int:
    """Run the CLI and return its exit code (errors: one line on stderr, code 2).

    stdout and stderr are :class:`~ui.cli.output.TerminalSafe` for the run: text from
    model files cannot drive the terminal. ``| head`` ends quietly (exit 141); an error
    of the operating system is one line naming the file; anything unexpected is one line
    too (exit 70; ``GGTUNE_DEBUG=1`` shows the traceback).
    """
    out, err_stream = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = TerminalSafe(out), TerminalSafe(err_stream)
    try:
        code = _run(argv)
        # Into a pipe stdout is block-buffered (unless PYTHONUNBUFFERED): a short output is
        # written only here, so a reader that went away shows here, and is 141 too.
        try:
            sys.stdout.flush()
        except ValueError:  # stdout was closed: nothing more to write
            _silence(out)
    except BrokenPipeError:
        _silence(out)
        return EXIT_BROKEN_PIPE
    finally:
        sys.stdout, sys.stderr = out, err_stream
    return code


def _run(argv: Sequence[str] | None) -> int:
    try:
        args = build_parser(sys.argv[1:] if argv is None else argv).parse_args(argv)
    except SystemExit as stop:  # --help, or a bad flag (already reported on stderr)
        return stop.code if isinstance(stop.code, int) else EXIT_USAGE
    handler: Handler = args.handler
    try:
        return handler(args)
    except GGTuneError as err:
        print(f"ggtune: {err}", file=sys.stderr)
        if os.environ.get("GGTUNE_DEBUG") and isinstance(err, GGUFError):
            print(f"ggtune: reader detail: {err.detail}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        print("ggtune: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        raise
    except OSError as err:  # a file or the disk failed where no command expected it
        where = f"{err.filename}: " if err.filename else ""
        print(f"ggtune: {where}{err.strerror or err}", file=sys.stderr)
        return EXIT_USAGE
    except Exception as err:  # a bug: one line for the user, the traceback on request
        if os.environ.get("GGTUNE_DEBUG"):
            raise
        text = " ".join(str(err).split())[:200]
        print(
            f"ggtune: internal error ({type(err).__name__}: {text}); please report it, "
            "GGTUNE_DEBUG=1 shows the details",
            file=sys.stderr,
        )
        return EXIT_INTERNAL


def _silence(stream: object) -> None:
    """Point the real stdout at /dev/null so the exit flush cannot fail again."""
    try:
        fd = stream.fileno()  # type: ignore[attr-defined]
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, fd)
        os.close(null)
    except (OSError, ValueError, AttributeError, io.UnsupportedOperation):
        pass


def main() -> NoReturn:
    """Console-script entry point."""
    if is_frozen():  # a frozen spawn child stops here; elsewhere the call does nothing
        import multiprocessing

        multiprocessing.freeze_support()
    sys.exit(run())


if __name__ == "__main__":
    main()
