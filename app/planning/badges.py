"""A GGUF file's badge: will it run here, and how fast, in two or three words.

The badge is the short answer the hub search and the Quantization dropdown show next to a
file: "fits on GPU, ~42 tok/s", "partial offload, ~8.5 tok/s", "fits in RAM, ~3.1 tok/s",
"too large", or "not verified" where the estimate has no verdict (a figure not known to
agree with llama.cpp, or a capacity not known: :attr:`MemoryEstimate.fits
<app.predict.estimate.MemoryEstimate.fits>` is None), so a guess never gets a green badge.

It is read off a :class:`~app.planning.compare.CompareRow`, the row the Compare tab and
``ggtune compare`` show for that quant at the same settings and hardware: the plan (the
runner's own fitting, or the most GPU layers that fit), the fit and the predicted speed
are all that row's, so a badge never disagrees with Compare.

Pure: no Qt. Example::

    rows = repo_rows(listing, read_models(listing), settings, hardware, SpeedFactors())
    for row in rows:
        print(row.name, badge(row).text)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.planning.compare import CompareRow, RunnerChoice, option_row
from app.planning.options import QuantOption
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.units import format_bytes, format_tps

__all__ = ["Badge", "BadgeKind", "badge", "quant_badges"]

BadgeKind = Literal["gpu", "partial", "ram", "too_large", "unverified", "unread"]
"""``gpu``: every layer on the GPUs; ``partial``: some layers (or experts) on the host;
``ram``: no GPU, it fits in system RAM; ``too_large``: some device is over its capacity;
``unverified``: the estimate has no verdict; ``unread``: the file's header was not read
(or the estimator refused its settings)."""


@dataclass(frozen=True, slots=True)
class Badge:
    """The short ``text`` shown beside a file, its ``kind`` (for colour; only ``gpu``,
    ``partial`` and ``ram`` are a yes) and a one-sentence ``detail`` (the tooltip)."""

    kind: BadgeKind
    text: str
    detail: str

    @property
    def runs(self) -> bool:
        """Whether the estimate says it fits (a verdict, not a guess)."""
        return self.kind in ("gpu", "partial", "ram")


def _speed(row: CompareRow) -> str:
    return f"~{format_tps(row.decode_tok_per_s)} tok/s"


def _over(row: CompareRow) -> str:
    """Return "12.3 GiB over on RTX 3060" for the device most over, or ""."""
    worst = max(
        ((used - cap, name) for name, used, cap in row.devices if cap is not None),
        default=None,
    )
    if worst is None or worst[0] <= 0:
        return ""
    return f"{format_bytes(worst[0])} over on {worst[1]}"


def badge(row: CompareRow) -> Badge:
    """Return the badge of ``row`` (a Compare row at the settings and hardware in force).

    ``fits`` None gives "not verified" whatever the layers; a speed is only shown for a
    plan that fits (a plan that cannot load has none).
    """
    if row.error is not None:
        return Badge("unread", "not read", f"Not estimated: {row.error}")
    if row.fits is None:
        return Badge(
            "unverified",
            "not verified",
            "No verdict: a figure of this estimate is not known to agree with llama.cpp for "
            "this model, or a capacity is unknown (run the engine check to verify)",
        )
    if row.fits is False:
        over = _over(row)
        return Badge(
            "too_large",
            "too large",
            f"Does not fit at these settings{': ' + over if over else ''}",
        )
    speed = _speed(row)
    if not row.has_gpu:
        return Badge(
            "ram",
            f"fits in RAM, {speed}",
            f"Fits in system RAM (no GPU); predicted {speed} writing, one user",
        )
    if row.gpu_layers >= row.n_layers and not row.n_cpu_moe:
        return Badge(
            "gpu",
            f"fits on GPU, {speed}",
            f"All {row.n_layers} layers on the GPU; predicted {speed} writing, one user",
        )
    on_gpu = f"{row.gpu_layers} of {row.n_layers} layers on the GPU"
    if row.n_cpu_moe:
        on_gpu += f", the experts of {row.n_cpu_moe} layers on the CPU"
    return Badge(
        "partial",
        f"partial offload, {speed}",
        f"{on_gpu[0].upper()}{on_gpu[1:]}; predicted {speed} writing, one user",
    )


def quant_badges(
    options: Sequence[QuantOption],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> dict[str, Badge]:
    """Return each quant option's badge by its name, from its Compare row at ``settings``
    (:func:`~app.planning.compare.option_row`; with ``runner``, as that runner would run
    it: the Memory view's plan). A level whose settings the estimator refuses gets an
    ``unread`` badge saying why; the others are unaffected."""
    out: dict[str, Badge] = {}
    for o in options:
        try:
            row = option_row(o, options, settings, hardware, factors, runner)
        except GGTuneError as err:
            out[o.name] = Badge("unread", "not estimated", f"Not estimated: {err}")
            continue
        out[o.name] = badge(row)
    return out
