"""Put llama.cpp's own figures into an estimate where the analytic ones are not known right.

:func:`with_engine_figures` takes an :class:`~app.predict.estimate.MemoryEstimate` and
the :class:`~app.measured.engine_report.EngineReport` of a dry run of the same model and
settings (on the model file or its header stand-in) and returns the estimate with the
engine's KV cache / recurrent state and compute buffer in place of each figure the
estimate does not know to be right (``kv_status`` not ``exact``, ``compute_known``
False). ``engine_checked`` names what was replaced, so a verdict may be given and the
app can show which figures are llama.cpp's.

The engine's sizes are the MiB it prints (two decimals, ±5 KiB each). The dry run runs on
this machine: where the estimate places layers on GPUs, the engine's KV total is spread
over the devices in the estimate's proportions (by layers when the estimate had none),
and each device that holds the estimate's graph buffer gets the engine's.
"""

from __future__ import annotations

import dataclasses

from app.measured.engine_report import EngineReport
from app.predict.estimate import MemoryEstimate

__all__ = ["with_engine_figures"]


def _spread(total: int, weights: list[int]) -> list[int]:
    """Split ``total`` bytes in proportion to ``weights`` (all on the last when all are 0)."""
    whole = sum(weights)
    if whole <= 0:
        return [0] * (len(weights) - 1) + [total]
    parts = [total * w // whole for w in weights]
    parts[weights.index(max(weights))] += total - sum(parts)
    return parts


def with_engine_figures(est: MemoryEstimate, report: EngineReport) -> MemoryEstimate:
    """Return ``est`` with llama.cpp's figures where ``est``'s are not known to be right.

    Nothing changes (and ``engine_checked`` stays empty) when every figure is exact. The
    report must be for the same settings: its context size must match the estimate's.
    """
    assert report.n_ctx == est.context.n_ctx, (
        f"the dry run is for n_ctx {report.n_ctx}, the estimate for {est.context.n_ctx}"
    )
    devices = list(est.devices)
    checked: list[str] = []
    layers = [max(d.n_layers, 0) for d in devices]
    if not est.kv_exact:
        kv_weights = [d.kv_bytes for d in devices]
        kv = _spread(report.kv_bytes, kv_weights if sum(kv_weights) else layers)
        rs_weights = [d.recurrent_bytes for d in devices]
        rs = _spread(report.recurrent_bytes, rs_weights if sum(rs_weights) else layers)
        devices = [
            dataclasses.replace(d, kv_bytes=k, recurrent_bytes=r)
            for d, k, r in zip(devices, kv, rs, strict=True)
        ]
        checked += ["kv", "recurrent"]
    if not est.compute_exact:
        graph = max(d.compute_bytes for d in devices)
        buffers = report.compute_buffer_bytes
        engine = report.compute_bytes_on("CPU") or max(buffers.values(), default=0)
        devices = [
            dataclasses.replace(d, compute_bytes=engine) if d.compute_bytes == graph else d
            for d in devices
        ]
        checked.append("compute")
    if checked:
        host = next((i for i, d in enumerate(devices) if d.kind == "host"), len(devices) - 1)
        devices[host] = dataclasses.replace(devices[host], output_bytes=report.output_bytes)
        checked.append("output")
    return dataclasses.replace(
        est, devices=tuple(devices), engine_checked=(*est.engine_checked, *checked)
    )
