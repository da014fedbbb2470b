"""The verdict in plain words, from hand-built estimates whose sums are easy to check.

Every number here is chosen so the expected text can be worked out by hand: 1 GiB =
1024 MiB, one decimal, the margin is llama-server's 1024 MiB unless a test says otherwise.
"""

from __future__ import annotations

import dataclasses

import pytest

from app.predict.estimate import DeviceEstimate, MemoryEstimate, ResolvedContext
from app.predict.verdict import verdict
from app.units import DEFAULT_MARGIN_BYTES, format_bytes

GIB = 1024**3
MIB = 1024**2


def device(
    name: str,
    *,
    weights: int,
    kv: int = 0,
    compute: int = 0,
    capacity: int | None,
    layers: int,
) -> DeviceEstimate:
    return DeviceEstimate(
        name=name,
        kind="host" if name == "CPU" else "gpu",
        weights_bytes=weights,
        kv_bytes=kv,
        recurrent_bytes=0,
        compute_bytes=compute,
        output_bytes=0,
        other_bytes=0,
        capacity_bytes=capacity,
        n_layers=layers,
    )


def memory(*devices: DeviceEstimate) -> MemoryEstimate:
    ctx = ResolvedContext(
        n_ctx=4096,
        n_ctx_seq=4096,
        n_stream=1,
        n_batch=2048,
        n_ubatch=512,
        flash_attn=True,
        swa_full=False,
    )
    n_gpu = sum(d.n_layers for d in devices if d.kind == "gpu")
    return MemoryEstimate(
        devices=devices,
        caches=(),
        context=ctx,
        n_gpu_layers=n_gpu,
        kv_rule_known=True,
        notes=(),
    )


def test_sizes_use_gib_from_one_gib_and_mib_below() -> None:
    assert format_bytes(GIB) == "1.0 GiB"
    assert format_bytes(GIB - MIB) == "1023.0 MiB"
    assert format_bytes(int(21.44 * GIB)) == "21.4 GiB"
    assert format_bytes(-3 * GIB) == "-3.0 GiB"  # kept; the verdict words "over" itself


def test_fits_in_system_ram_with_room_to_spare() -> None:
    est = memory(device("CPU", weights=2 * GIB, kv=GIB, capacity=24 * GIB + 410 * MIB, layers=30))
    v = verdict(est)
    assert v.level == "fits"
    assert v.headline == "Fits in system RAM with 21.4 GiB to spare"
    assert v.details == ("system RAM: 3.0 GiB of 24.4 GiB, 21.4 GiB to spare",)
    assert v.spilled_layers == 0
    assert v.margin_bytes == DEFAULT_MARGIN_BYTES


def test_fits_on_one_gpu() -> None:
    est = memory(
        device("CUDA0", weights=20 * GIB, kv=GIB + 922 * MIB, capacity=24 * GIB, layers=33),
        device("CPU", weights=300 * MIB, capacity=64 * GIB, layers=0),
    )
    v = verdict(est)
    assert (v.level, v.headline) == ("fits", "Fits on the GPU with 2.1 GiB to spare")


def test_fits_on_two_gpus_names_the_smaller_room() -> None:
    est = memory(
        device("CUDA0", weights=20 * GIB, capacity=24 * GIB, layers=16),
        device("CUDA1", weights=22 * GIB, capacity=24 * GIB, layers=17),
        device("CPU", weights=300 * MIB, capacity=64 * GIB, layers=0),
    )
    assert verdict(est).headline == "Fits on 2 GPUs with at least 2.0 GiB to spare on each"


def test_spilled_layers_are_counted_from_the_host() -> None:
    est = memory(
        device("CUDA0", weights=7 * GIB, capacity=8 * GIB + 512 * MIB, layers=26),
        device("CPU", weights=2 * GIB, capacity=32 * GIB, layers=6),
    )
    v = verdict(est)
    assert v.level == "spills"
    assert v.headline == "Spills 6 of 32 layers to system RAM"
    assert v.spilled_layers == 6
    assert v.details[0].startswith("Layers in system RAM run at the speed of system memory")


def test_does_not_fit_says_by_how_much_and_where() -> None:
    est = memory(
        device("CUDA0", weights=26 * GIB, compute=int(1.2 * GIB), capacity=24 * GIB, layers=33),
        device("CPU", weights=300 * MIB, capacity=64 * GIB, layers=0),
    )
    v = verdict(est)
    assert v.level == "does_not_fit"
    assert v.headline == "Does not fit: 3.2 GiB over on CUDA0"
    assert "CUDA0: needs 27.2 GiB of 24.0 GiB, 3.2 GiB over" in v.details


def test_does_not_fit_beats_spilling_and_lists_every_device_over() -> None:
    est = memory(
        device("CUDA0", weights=9 * GIB, capacity=8 * GIB, layers=20),
        device("CPU", weights=40 * GIB, capacity=32 * GIB, layers=12),
    )
    v = verdict(est)
    assert v.level == "does_not_fit"
    assert v.headline == "Does not fit: 1.0 GiB over on CUDA0 and 8.0 GiB over on system RAM"


def test_headroom_under_the_margin_is_tight() -> None:
    est = memory(device("CPU", weights=15 * GIB + 512 * MIB, capacity=16 * GIB, layers=30))
    v = verdict(est)
    assert v.level == "tight"
    assert (
        v.headline == "Fits, but tight: only 512.0 MiB on system RAM to spare (keep 1.0 GiB free)"
    )
    assert verdict(est, margin_bytes=256 * MIB).level == "fits"


def test_exactly_full_fits_and_one_byte_more_does_not() -> None:
    full = memory(device("CPU", weights=8 * GIB, capacity=8 * GIB, layers=1))
    assert verdict(full, margin_bytes=0).level == "fits"
    over = memory(device("CPU", weights=8 * GIB + 1, capacity=8 * GIB, layers=1))
    assert verdict(over, margin_bytes=0).level == "does_not_fit"


def test_unknown_capacity_says_what_is_needed() -> None:
    est = memory(device("CPU", weights=3 * GIB, capacity=None, layers=30))
    v = verdict(est)
    assert v.level == "unknown"
    assert v.headline == "Needs 3.0 GiB on system RAM, whose capacity is unknown"
    assert v.devices[0].within_margin is None


def test_negative_margin_is_refused() -> None:
    est = memory(device("CPU", weights=GIB, capacity=8 * GIB, layers=1))
    with pytest.raises(AssertionError, match="margin"):
        verdict(est, margin_bytes=-1)


# --- no verdict on a guess ----------------------------------------------------------------


def test_unknown_kv_rule_gets_no_green_verdict() -> None:
    est = dataclasses.replace(
        memory(device("CPU", weights=4 * GIB, compute=GIB, capacity=32 * GIB, layers=30)),
        kv_rule_known=False,
        kv_status="unknown",
    )
    assert est.fits is None
    v = verdict(est)
    assert v.level == "unverified"
    assert v.headline.startswith("Not verified: the KV cache (no rule for this architecture)")
    assert "system RAM: 5.0 GiB of 32.0 GiB without them" in v.details  # weights + compute


def test_unverified_compute_still_does_not_fit_when_weights_alone_overflow() -> None:
    est = dataclasses.replace(
        memory(device("CPU", weights=40 * GIB, compute=GIB, capacity=32 * GIB, layers=30)),
        compute_known=False,
    )
    assert est.fits is False
    assert verdict(est).level == "does_not_fit"


def test_a_guessed_compute_buffer_cannot_make_it_not_fit() -> None:
    # over capacity only because of the guessed compute figure: no verdict either way
    est = dataclasses.replace(
        memory(device("CPU", weights=30 * GIB, compute=3 * GIB, capacity=32 * GIB, layers=30)),
        compute_known=False,
    )
    assert est.fits is None
    assert verdict(est).level == "unverified"


def test_engine_figures_give_a_verdict_and_say_so() -> None:
    est = dataclasses.replace(
        memory(device("CPU", weights=4 * GIB, kv=0, compute=GIB, capacity=32 * GIB, layers=30)),
        kv_status="modelled",
        compute_known=False,
        engine_checked=("kv", "recurrent", "compute", "output"),
    )
    assert est.exact
    assert est.fits is True
    assert verdict(est).level == "fits"
