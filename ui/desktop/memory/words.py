"""The Memory tab's words: device names, the exact numbers on hover, every bar in words, the
runner's plan and what llama.cpp will create."""

from __future__ import annotations

from app.predict.estimate import DeviceEstimate, MemoryEstimate
from app.predict.verdict import device_label
from app.units import format_bytes, format_mib
from ui.desktop.memory.components import COMPONENTS, component_bytes
from ui.desktop.shared.estimate_controller import EstimateState


def device_title(device: DeviceEstimate) -> str:
    """Return "CUDA0 (GPU)" or "System RAM (CPU)"."""
    if device.kind == "host":
        return "System RAM (CPU)"
    return f"{device.name} (GPU)"


def device_tooltip(device: DeviceEstimate, margin_bytes: int) -> str:
    """Return the exact numbers of one device as rich text (MiB, two decimals)."""
    lines = [f"<b>{device_title(device)}</b>", "<table>"]
    for c in COMPONENTS:
        n = component_bytes(device, c)
        if n:
            lines.append(
                f"<tr><td><span style='color:{c.color}'>■</span> {c.title}</td>"
                f"<td align='right'>&nbsp;{format_mib(n)}</td></tr>"
            )
            if c.growth:
                lines.append(f"<tr><td colspan='2'><i>&nbsp;&nbsp;{c.meaning}</i></td></tr>")
    lines.append(
        f"<tr><td><b>Total</b></td><td align='right'><b>&nbsp;{format_mib(device.total_bytes)}"
        "</b></td></tr>"
    )
    if device.growth_bytes:
        lines.append(
            "<tr><td>With growth (limits)</td><td align='right'>&nbsp;"
            f"{format_mib(device.total_bytes + device.growth_bytes)}</td></tr>"
        )
    if device.capacity_bytes is not None:
        lines.append(
            f"<tr><td>Capacity</td><td align='right'>&nbsp;{format_mib(device.capacity_bytes)}"
            "</td></tr>"
        )
        room = device.capacity_bytes - device.total_bytes
        word = "Free" if room >= 0 else "Over"
        lines.append(
            f"<tr><td>{word}</td><td align='right'>&nbsp;{format_mib(abs(room))}</td></tr>"
        )
    lines.append("</table>")
    lines.append(f"Layers here: {device.n_layers}. Safety margin: {format_bytes(margin_bytes)}.")
    return "".join(lines)


def describe_estimate(est: MemoryEstimate) -> str:
    """Return every bar in words (the accessible description of the painted view)."""
    parts = []
    for d in est.devices:
        comps = ", ".join(
            f"{c.title} {format_bytes(component_bytes(d, c))}"
            for c in COMPONENTS
            if component_bytes(d, c)
        )
        cap = "unknown" if d.capacity_bytes is None else format_bytes(d.capacity_bytes)
        parts.append(
            f"{device_label(d)}: {format_bytes(d.total_bytes)} of {cap} ({comps or 'nothing'})"
        )
    return ". ".join(parts) + "."


def plan_text(state: EstimateState) -> str:
    """Return what the runner will do with the settings left to it, in a few lines."""
    plan = state.plan
    if plan is None:
        return ""
    lines = [plan.summary + "."]
    lines += list(plan.details)
    if plan.decided:
        lines.append("Move a setting to pin it; Reset gives them back to the runner.")
    lines += list(plan.notes)
    return "\n".join(lines)


def resolved_text(est: MemoryEstimate, hardware_label: str) -> str:
    """Return what llama.cpp will create, in one paragraph (cells, caches, batches)."""
    ctx = est.context
    kinds = {
        "kv": "full-attention",
        "kv_swa": "sliding-window",
        "kv_idx": "indexer-key",
        "recurrent": "recurrent",
    }
    caches = "; ".join(
        f"{c.n_layers} {kinds[c.kind]} layers × {c.cells:,} cells"
        + (f" × {c.n_stream} streams" if c.n_stream > 1 else "")
        + ("" if c.kind == "recurrent" else f" ({c.type_k}/{c.type_v})")
        for c in est.caches
    )
    text = (
        f"Context {ctx.n_ctx:,} cells ({ctx.n_stream} × {ctx.n_ctx_seq:,}), batch "
        f"{ctx.n_batch:,}/{ctx.n_ubatch:,} tokens, flash attention "
        f"{'on' if ctx.flash_attn else 'off'}. Cache: {caches or 'none'}. {hardware_label}."
    )
    if est.notes:
        text += " " + " ".join(est.notes)
    return text
