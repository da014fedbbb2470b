"""The Hardware tab's words, pure (no Qt): :func:`describe_report` says what the probe of
this machine found, and each probe's state with its reason.
"""

from __future__ import annotations

from typing import Final

from app.hardware.report import HardwareReport
from app.units import format_bytes, format_when

STATE_MARKS: Final = {"ok": "✓", "none": "–", "unknown": "⚠"}


def describe_report(report: HardwareReport) -> tuple[str, str]:
    """Return (devices, probes): what was found, and each probe's state with its reason."""
    lines: list[str] = []
    h = report.host
    if h is None:
        lines.append(f"CPU: unknown ({report.status('host').detail})")
    else:
        ram = "unknown" if h.ram_total_bytes is None else format_bytes(h.ram_total_bytes)
        cores = h.physical_cores or "?"
        lines.append(f"CPU: {h.cpu_model or 'unknown'}, {cores} cores, {ram} RAM")
    bw = report.host_bandwidth
    lines.append(
        "RAM bandwidth: "
        + (
            "unknown"
            if bw is None
            else f"{bw.gb_per_s:.1f} GB/s (measured {format_when(bw.measured_at)})"
        )
    )
    if not report.gpus:
        lines.append("GPUs: none found")
    for g in report.gpus:
        memory = "memory unknown" if g.total_bytes is None else format_bytes(g.total_bytes)
        bandwidth = "" if g.bandwidth_gb_per_s is None else f", {g.bandwidth_gb_per_s:.0f} GB/s"
        used = "" if g.engine_name else " (no llama.cpp backend: not planned for)"
        lines.append(f"{g.engine_name or 'GPU'}: {g.name}, {memory}{bandwidth}{used}")
        lines.extend(f"    note: {n}" for n in g.notes)
    probes = [f"{STATE_MARKS.get(s.state, '?')} {s.probe}: {s.detail}" for s in report.statuses]
    return "\n".join(lines), "\n".join(probes)
