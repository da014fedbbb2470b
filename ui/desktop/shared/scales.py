"""Slider scales and number formats of the desktop app: pure functions, no Qt.

The context slider is logarithmic: each step multiplies the context by about the same
factor, every value is a multiple of 256 (llama.cpp pads the context to 256 cells,
``src/llama-context.cpp``), and powers of two are always reachable.

>>> steps = context_steps(32768)
>>> steps[0], steps[-1], 4096 in steps, all(s % 256 == 0 for s in steps)
(256, 32768, True, True)
>>> steps[nearest_step(steps, 5000)]
5120
"""

from __future__ import annotations

import bisect
import math
from typing import Final

from app.units import KIB

CONTEXT_QUANTUM: Final = 256
"""Context sizes snap to multiples of this many tokens (llama.cpp pads cells to 256)."""

STEPS_PER_OCTAVE: Final = 16
"""Log-spaced points per doubling of the context; duplicates after snapping are dropped."""


def snap_context(n_tokens: int) -> int:
    """Return ``n_tokens`` rounded to the nearest multiple of 256, at least 256."""
    return max(CONTEXT_QUANTUM, round(n_tokens / CONTEXT_QUANTUM) * CONTEXT_QUANTUM)


def context_steps(max_tokens: int) -> tuple[int, ...]:
    """Return the context sizes the slider stops at, ascending, from 256 to ``max_tokens``.

    ``max_tokens`` itself is always the last step even when it is not a multiple of 256.
    """
    top = max(max_tokens, CONTEXT_QUANTUM)
    values = {CONTEXT_QUANTUM, top}
    if top > CONTEXT_QUANTUM:
        octaves = math.log2(top / CONTEXT_QUANTUM)
        n = max(1, math.ceil(octaves * STEPS_PER_OCTAVE))
        for i in range(n + 1):
            v = snap_context(int(CONTEXT_QUANTUM * 2 ** (octaves * i / n)))
            if v <= top:
                values.add(v)
        p = CONTEXT_QUANTUM
        while p <= top:
            values.add(p)
            p *= 2
    return tuple(sorted(values))


def nearest_step(steps: tuple[int, ...], n_tokens: int) -> int:
    """Return the index of the step nearest to ``n_tokens`` (ties go to the lower one)."""
    assert steps, "no steps"
    i = bisect.bisect_left(steps, n_tokens)
    if i == 0:
        return 0
    if i >= len(steps):
        return len(steps) - 1
    return i if steps[i] - n_tokens < n_tokens - steps[i - 1] else i - 1


def format_tokens(n_tokens: int) -> str:
    """Return a token count as people say it: "512", "8k", "131k" (1k = 1,024)."""
    if n_tokens >= KIB and n_tokens % KIB == 0:
        return f"{n_tokens // KIB}k"
    if n_tokens >= 10 * KIB:
        return f"{n_tokens / KIB:.1f}k"
    return f"{n_tokens:,}"
