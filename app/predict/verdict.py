"""Say in plain words whether an estimate fits: the sentence above the memory bars.

:func:`verdict` reads a :class:`~app.predict.estimate.MemoryEstimate` and nothing else, so the
desktop app, the CLI and tests get the same words for the same numbers. Sizes are in
binary units (GiB, MiB: what llama.cpp prints and what ``--gpu-mem`` takes), one decimal.

The safety margin is the room a runner keeps free on each device: llama-server's ``--fit``
leaves 1024 MiB per device (``-fitt``, ``common/arg.cpp``; docs/sources.md §2), for the
driver, the desktop and buffers the estimate does not see. A device whose headroom is
positive but under the margin "fits, but tight".

Example::

    v = verdict(estimate(spec, settings, Hardware.cpu_only(32 * GIB)))
    v.level      # "fits"
    v.headline   # "Fits in system RAM with 21.4 GiB to spare"
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.units import DEFAULT_MARGIN_BYTES, format_bytes

VerdictLevel = Literal["fits", "tight", "spills", "does_not_fit", "unknown", "unverified"]
"""``fits``: every device has at least the margin left; ``tight``: fits, but some device has
less than the margin left; ``spills``: fits, with GPUs present but some layers on the host
(slower); ``does_not_fit``: some device is over its capacity; ``unknown``: a capacity is not
known; ``unverified``: a figure (KV cache, compute buffer) is not known to agree with
llama.cpp for this model, so there is no verdict until llama.cpp's own figure is in
(the engine check: a dry run, on a header stand-in when there is no file)."""


@dataclass(frozen=True, slots=True)
class DeviceVerdict:
    """One device's standing: ``headroom_bytes`` is capacity minus total (None: unknown)."""

    name: str
    label: str
    total_bytes: int
    capacity_bytes: int | None
    headroom_bytes: int | None
    within_margin: bool | None


@dataclass(frozen=True, slots=True)
class Verdict:
    """The answer in words: one ``headline`` and zero or more ``details`` lines."""

    level: VerdictLevel
    headline: str
    details: tuple[str, ...]
    devices: tuple[DeviceVerdict, ...]
    spilled_layers: int
    margin_bytes: int


def device_label(device: DeviceEstimate) -> str:
    """Return the device as a user reads it: "system RAM" for the host, else its name."""
    return "system RAM" if device.kind == "host" else device.name


def _device_verdict(device: DeviceEstimate, margin_bytes: int) -> DeviceVerdict:
    room = device.headroom_bytes
    return DeviceVerdict(
        name=device.name,
        label=device_label(device),
        total_bytes=device.total_bytes,
        capacity_bytes=device.capacity_bytes,
        headroom_bytes=room,
        within_margin=None if room is None else room >= margin_bytes,
    )


def _join(words: list[str]) -> str:
    if len(words) <= 2:
        return " and ".join(words)
    return ", ".join(words[:-1]) + " and " + words[-1]


def _growth_details(est: MemoryEstimate) -> list[str]:
    """Say what the prompt cache and checkpoints may add with use, and when that is more
    than a device holds (they are not part of the load-time verdict: they start empty)."""
    lines = []
    for d in est.devices:
        if not d.growth_bytes:
            continue
        parts = []
        if d.prompt_cache_bytes:
            parts.append(
                f"the prompt cache up to {format_bytes(d.prompt_cache_bytes)} (--cache-ram)"
            )
        if d.checkpoint_bytes:
            parts.append(
                f"context checkpoints up to {format_bytes(d.checkpoint_bytes)} (--ctx-checkpoints)"
            )
        line = f"{device_label(d)} grows with use: {_join(parts)}"
        room = d.headroom_bytes
        if room is not None and room < d.growth_bytes:
            over = d.growth_bytes - max(room, 0)
            line += f"; at their limits {format_bytes(over)} more than it has — set them lower"
        lines.append(line)
    return lines


def verdict(est: MemoryEstimate, *, margin_bytes: int = DEFAULT_MARGIN_BYTES) -> Verdict:
    """Return whether ``est`` fits, in plain words.

    ``margin_bytes`` is the room to keep free on every device (see the module doc). The
    headline names the first thing a user must know, in this order: a figure not known
    to agree with llama.cpp (no verdict on a guess, unless it does not fit even without
    that figure), what does not fit, what is unknown, layers spilled to system RAM, a
    margin not kept, and else where the model fits and how much is left.
    """
    assert margin_bytes >= 0, f"margin must be ≥ 0 bytes, got {margin_bytes}"
    devices = tuple(_device_verdict(d, margin_bytes) for d in est.devices)
    gpus = [d for d in est.devices if d.kind == "gpu"]
    host = next((d for d in est.devices if d.kind == "host"), None)
    n_layers = sum(d.n_layers for d in est.devices)
    spilled = host.n_layers if gpus and host is not None else 0
    details: list[str] = []
    for dv in devices:
        if dv.headroom_bytes is None:
            details.append(f"{dv.label}: needs {format_bytes(dv.total_bytes)}, capacity unknown")
        elif dv.headroom_bytes < 0:
            details.append(
                f"{dv.label}: needs {format_bytes(dv.total_bytes)} of "
                f"{format_bytes(dv.capacity_bytes or 0)}, {format_bytes(-dv.headroom_bytes)} over"
            )
        else:
            details.append(
                f"{dv.label}: {format_bytes(dv.total_bytes)} of "
                f"{format_bytes(dv.capacity_bytes or 0)}, "
                f"{format_bytes(dv.headroom_bytes)} to spare"
            )

    if not est.exact and est.fits is not False:
        missing = _join(list(est.not_estimated()))
        capacity = [(d, dv) for d, dv in zip(est.devices, devices, strict=True) if d.capacity_bytes]
        without = [
            f"{dv.label}: {format_bytes(est.certain_bytes(d))} of "
            f"{format_bytes(d.capacity_bytes or 0)} without them"
            for d, dv in capacity
            if d.total_bytes
        ]
        return Verdict(
            level="unverified",
            headline=f"Not verified: {missing} — llama.cpp's own figure is needed",
            details=(
                "No verdict on a guess: run the engine check (Verify, or ggtune estimate "
                "--verify) for llama.cpp's figures",
                *without,
            ),
            devices=devices,
            spilled_layers=spilled,
            margin_bytes=margin_bytes,
        )
    over = [dv for dv in devices if dv.headroom_bytes is not None and dv.headroom_bytes < 0]
    unknown = [dv for dv in devices if dv.headroom_bytes is None]
    tight = [dv for dv in devices if dv.within_margin is False and dv not in over]
    level: VerdictLevel
    if over:
        level = "does_not_fit"
        parts = [f"{format_bytes(-(dv.headroom_bytes or 0))} over on {dv.label}" for dv in over]
        headline = "Does not fit: " + _join(parts)
    elif unknown:
        level = "unknown"
        total = sum(dv.total_bytes for dv in unknown)
        names = _join([dv.label for dv in unknown])
        headline = f"Needs {format_bytes(total)} on {names}, whose capacity is unknown"
    elif spilled:
        level = "spills"
        headline = f"Spills {spilled} of {n_layers} layers to system RAM"
        details.insert(0, "Layers in system RAM run at the speed of system memory: slower")
    elif tight:
        level = "tight"
        parts = [f"{format_bytes(dv.headroom_bytes or 0)} on {dv.label}" for dv in tight]
        keep = format_bytes(margin_bytes)
        headline = f"Fits, but tight: only {_join(parts)} to spare (keep {keep} free)"
    else:
        level = "fits"
        if gpus:
            used = [dv for dv, d in zip(devices, est.devices, strict=True) if d.kind == "gpu"]
            least = min(used, key=lambda dv: dv.headroom_bytes or 0)
            spare = format_bytes(least.headroom_bytes or 0)
            if len(gpus) == 1:
                headline = f"Fits on the GPU with {spare} to spare"
            else:
                headline = f"Fits on {len(gpus)} GPUs with at least {spare} to spare on each"
        else:
            room = devices[-1].headroom_bytes or 0
            headline = f"Fits in system RAM with {format_bytes(room)} to spare"
    details += _growth_details(est)
    return Verdict(
        level=level,
        headline=headline,
        details=tuple(details),
        devices=devices,
        spilled_layers=spilled,
        margin_bytes=margin_bytes,
    )
