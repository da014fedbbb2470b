"""How the CLI prints: sizes with their unit and plain-text tables."""

from __future__ import annotations


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
