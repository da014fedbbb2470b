r"""How the CLI writes: plain-text tables, usage errors as one line with exit code 2, and
text that cannot drive the terminal.

Model names, architectures, Ollama tags and file names come from files ggtune did not
write; printed raw, ``\x1b]0;…\a`` retitles the window and ``\x1b[2J`` clears the screen.
:class:`TerminalSafe` wraps stdout and stderr for the whole run (ui/cli/main.py): every
control character but newline and tab is written escaped (``\x1b``), and the CLI's own
progress lines pass their ``\r`` and erase-line through :func:`control` alone.
"""

from __future__ import annotations

import argparse
import io
import re
from typing import NoReturn, TextIO


def print_table(rows: list[list[str]]) -> None:
    """Print ``rows`` as aligned columns, the first row a header underlined with dashes."""
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    for j, r in enumerate(rows):
        print(
            "  ".join(
                c.ljust(w) if i == 0 else c.rjust(w)
                for i, (c, w) in enumerate(zip(r, widths, strict=True))
            )
        )
        if j == 0:
            print("  ".join("-" * w for w in widths))


EXIT_USAGE = 2
"""Exit status of a usage error or of any :class:`~app.errors.GGTuneError`."""


class Parser(argparse.ArgumentParser):
    """ArgumentParser whose errors are one line and exit code 2 (no usage dump)."""

    def error(self, message: str) -> NoReturn:
        command = self.prog.split()[1:]  # "ggtune" or "ggtune inspect"
        see = " ".join(["ggtune", *command, "--help"])
        self.exit(EXIT_USAGE, f"ggtune: {message} (see {see})\n")


_CONTROL = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
"""C0 controls but tab and newline, DEL, C1 controls, and the line separators and bidi
overrides that reorder what a terminal shows."""


def printable(text: str) -> str:
    r"""Return ``text`` with every control character written as an escape (``\x1b``)."""
    return _CONTROL.sub(lambda m: m.group().encode("unicode_escape").decode("ascii"), text)


class TerminalSafe(io.TextIOBase):
    """A text stream that escapes control characters on their way to ``stream``."""

    def __init__(self, stream: TextIO) -> None:
        super().__init__()
        self.stream = stream

    def write(self, text: str) -> int:
        """Write ``text`` escaped; return the length of ``text``."""
        self.stream.write(printable(text))
        return len(text)

    def control(self, sequence: str) -> None:
        r"""Write one of the CLI's own cursor controls (``\r``, erase line) unescaped."""
        assert sequence in ("\r", "\x1b[K", "\r\x1b[K"), f"not a known control: {sequence!r}"
        self.stream.write(sequence)

    def flush(self) -> None:
        """Flush the stream below."""
        self.stream.flush()

    def isatty(self) -> bool:
        """Return whether the stream below is a terminal."""
        return self.stream.isatty()

    def fileno(self) -> int:
        """Return the file descriptor of the stream below."""
        return self.stream.fileno()

    @property
    def encoding(self) -> str:  # type: ignore[override]
        """Return the encoding of the stream below."""
        return getattr(self.stream, "encoding", "utf-8") or "utf-8"


def control(stream: TextIO, sequence: str) -> None:
    """Write a cursor control to ``stream``: unescaped through a :class:`TerminalSafe`."""
    if isinstance(stream, TerminalSafe):
        stream.control(sequence)
    else:
        stream.write(sequence)
