"""How the CLI writes: plain-text tables, and usage errors as one line with exit code 2."""

from __future__ import annotations

import argparse
from typing import NoReturn


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
