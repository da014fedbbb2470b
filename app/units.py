"""Sizes, the safety margin, the depth speed is quoted at, and how sizes and speeds read.

The one home of these rules: every face and every module of app/ takes them from here, so
the CLI, the desktop views and the planner's words never disagree on a number's text.

Sizes are binary (1 GiB = 1024³ bytes), as llama.cpp prints them.
"""

from __future__ import annotations

from typing import Final, Literal

KIB: Final = 1024
MIB: Final = 1024**2
GIB: Final = 1024**3

DEFAULT_MARGIN_BYTES: Final = 1024 * MIB
"""Memory kept free per device: llama-server's ``--fit`` target (``-fitt``, default 1024 MiB;
``common/arg.cpp`` in the pinned llama.cpp, docs/engine.md)."""

SPEED_DEPTH_MAX: Final = 4096
"""The deepest point speed is quoted at, in tokens of one user's context."""


def speed_depth(n_ctx: int, n_parallel: int = 1) -> int:
    """Return the depth speed is quoted at: half of one user's context, at most 4096 tokens.

    ``n_ctx`` is the total context (llama-server's ``-c``, all slots together) and
    ``n_parallel`` the slots sharing it (``-np``): each user's conversation is
    ``n_ctx // n_parallel`` tokens deep at most, and is quoted halfway.

    >>> speed_depth(16384), speed_depth(16384, 4), speed_depth(2048, 4)
    (4096, 2048, 256)
    """
    per_user = n_ctx // max(1, n_parallel)
    return min(per_user // 2, SPEED_DEPTH_MAX)


def format_bytes(
    n: float | None, digits: int = 1, *, down_to: Literal["MiB", "bytes"] = "MiB"
) -> str:
    """Return a size with its unit: GiB from 1 GiB up, else MiB, ``digits`` decimals.

    ``down_to="bytes"`` goes on to KiB under 1 MiB and whole bytes under 1 KiB (for small
    figures such as the cache one token adds). The sign is kept; None is "unknown".

    >>> format_bytes(23 * GIB // 10), format_bytes(300 * MIB), format_bytes(-MIB, 2)
    ('2.3 GiB', '300.0 MiB', '-1.00 MiB')
    >>> format_bytes(18432, down_to="bytes"), format_bytes(640, down_to="bytes")
    ('18.0 KiB', '640 bytes')
    """
    if n is None:
        return "unknown"
    size = abs(n)
    if size >= GIB:
        return f"{n / GIB:.{digits}f} GiB"
    if down_to == "MiB" or size >= MIB:
        return f"{n / MIB:.{digits}f} MiB"
    if size >= KIB:
        return f"{n / KIB:.{digits}f} KiB"
    return f"{n:.0f} bytes"


def format_mib(n_bytes: int, *, signed: bool = False) -> str:
    """Return an exact-looking size in MiB, two decimals, as llama.cpp prints its buffers.

    ``signed`` writes a difference: "+0.25 MiB", "−1.50 MiB" (a minus sign), "0.00 MiB".

    >>> format_mib(1294 * MIB + MIB // 2), format_mib(-3 * MIB // 2, signed=True)
    ('1,294.50 MiB', '−1.50 MiB')
    """
    if not signed:
        return f"{n_bytes / MIB:,.2f} MiB"
    if n_bytes == 0:
        return "0.00 MiB"
    sign = "+" if n_bytes > 0 else "−"
    return f"{sign}{abs(n_bytes) / MIB:,.2f} MiB"


def format_transfer_rate(bytes_per_s: float) -> str:
    """Return a download's rate as both faces' progress lines give it, in MiB/s.

    >>> format_transfer_rate(45 * MIB), format_transfer_rate(0)
    ('45.0 MiB/s', '0.0 MiB/s')
    """
    return f"{bytes_per_s / MIB:.1f} MiB/s"


def format_tps(x: float) -> str:
    """Return a speed (tokens/s) with the digits that matter: "42", "3.5", "0.12".

    >>> format_tps(41.6), format_tps(3.46), format_tps(0.1234)
    ('42', '3.5', '0.12')
    """
    if x >= 10:
        return f"{x:.0f}"
    if x >= 1:
        return f"{x:.1f}"
    return f"{x:.2g}"


def format_seconds(seconds: float) -> str:
    """Return a duration a reader takes in at a glance: "0.40 s", "12 s", "31 min", "2.1 h".

    >>> format_seconds(0.404), format_seconds(12.3), format_seconds(1891.91), format_seconds(7560)
    ('0.40 s', '12 s', '32 min', '2.1 h')
    """
    if seconds < 10:
        return f"{seconds:.2f} s"
    if seconds < 90:
        return f"{seconds:.0f} s"
    if seconds < 5400:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def plural(n: int, word: str) -> str:
    """Return "1 user", "6 users": a count with its noun (English, regular plurals).

    >>> plural(1, "user"), plural(6, "user"), plural(0, "layer")
    ('1 user', '6 users', '0 layers')
    """
    return f"{n:,} {word}" if n == 1 else f"{n:,} {word}s"


def format_when(stamp: str) -> str:
    """Return an ISO-8601 time as people write it, in UTC; ``stamp`` itself when it does
    not read as one (nothing is lost).

    >>> format_when("2026-12-01T11:09:20+0000"), format_when("2026-03-04T01:02:03+01:00")
    ('1 Dec 2026, 11:09 UTC', '4 Mar 2026, 00:02 UTC')
    >>> format_when("yesterday")
    'yesterday'
    """
    from datetime import UTC, datetime

    try:
        when = datetime.fromisoformat(stamp)
    except ValueError:
        try:
            when = datetime.strptime(stamp, "%Y-%m-%dT%H:%M:%S%z")
        except ValueError:
            return stamp
    if when.tzinfo is not None:
        when = when.astimezone(UTC)
    month = when.strftime("%b")
    zone = " UTC" if when.tzinfo is not None else ""
    return f"{when.day} {month} {when.year}, {when:%H:%M}{zone}"
