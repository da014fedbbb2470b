"""A file's badge (app.planning.badges) agrees with the Compare row at the same settings.

Qwen3-8B from the catalog at 32k context on machines chosen so that each badge comes up;
what each machine must give is argued from the estimate's own per-device figures (not
from the badge function), and the speed shown is the Compare row's.
"""

from __future__ import annotations

import dataclasses

import pytest

from app.hardware.devices import Hardware
from app.model.catalog import catalog_header
from app.model.spec import model_spec
from app.planning.badges import Badge, badge, quant_badges
from app.planning.compare import CompareRow, option_row
from app.planning.options import QuantOption, quant_options
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.units import GIB, format_tps

SETTINGS = Settings(n_ctx=32768)


@pytest.fixture(scope="module")
def qwen_quants() -> tuple[QuantOption, ...]:
    return quant_options(model_spec(catalog_header("qwen3-8b")), names=("Q4_K_M", "Q8_0"))


def _rows(options: tuple[QuantOption, ...], hardware: Hardware) -> dict[str, CompareRow]:
    return {o.name: option_row(o, options, SETTINGS, hardware, SpeedFactors()) for o in options}


def _check_agrees(options: tuple[QuantOption, ...], hardware: Hardware) -> dict[str, Badge]:
    badges = quant_badges(options, SETTINGS, hardware, SpeedFactors())
    rows = _rows(options, hardware)
    assert set(badges) == set(rows)
    for name, row in rows.items():
        b = badges[name]
        assert b == badge(row)
        speed = f"~{format_tps(row.decode_tok_per_s)} tok/s"
        # a speed only where the plan runs; never a yes without a verdict
        assert (speed in b.text) is (row.fits is True), (name, b, row.fits)
        assert b.runs is (row.fits is True)
    return badges


def test_a_big_gpu_holds_every_layer(qwen_quants: tuple[QuantOption, ...]) -> None:
    hw = Hardware.with_gpus([48 * GIB], 64 * GIB)
    badges = _check_agrees(qwen_quants, hw)
    for name, row in _rows(qwen_quants, hw).items():
        assert row.gpu_layers == row.n_layers  # 16 GiB of F16 weights fit in 48 GiB
        assert badges[name].kind == "gpu"
        assert badges[name].text.startswith("fits on GPU, ~")


def test_a_12_gb_gpu_takes_q4_whole_and_f16_in_part(qwen_quants: tuple[QuantOption, ...]) -> None:
    hw = Hardware.with_gpus([12 * GIB], 32 * GIB)
    badges = _check_agrees(qwen_quants, hw)
    rows = _rows(qwen_quants, hw)
    # F16 weights alone (15.3 GiB) are more than the GPU: some layers stay on the host.
    assert rows["F16"].gpu_layers < rows["F16"].n_layers
    assert badges["F16"].kind == "partial"
    assert badges["F16"].text.startswith("partial offload, ~")
    assert "layers on the GPU" in badges["F16"].detail
    assert rows["Q4_K_M"].gpu_layers == rows["Q4_K_M"].n_layers
    assert badges["Q4_K_M"].kind == "gpu"


def test_too_small_everywhere_is_too_large_with_no_speed(
    qwen_quants: tuple[QuantOption, ...],
) -> None:
    hw = Hardware.with_gpus([2 * GIB], 2 * GIB)
    badges = _check_agrees(qwen_quants, hw)
    for b in badges.values():
        assert (b.kind, b.text) == ("too_large", "too large")
        assert "over on" in b.detail
        assert "tok/s" not in b.text


def test_cpu_only_fits_in_ram(qwen_quants: tuple[QuantOption, ...]) -> None:
    badges = _check_agrees(qwen_quants, Hardware.cpu_only(64 * GIB))
    assert {b.kind for b in badges.values()} == {"ram"}
    assert all(b.text.startswith("fits in RAM, ~") for b in badges.values())


def test_an_unknown_capacity_is_not_verified(qwen_quants: tuple[QuantOption, ...]) -> None:
    badges = _check_agrees(qwen_quants, Hardware.cpu_only(None))
    assert {(b.kind, b.text) for b in badges.values()} == {("unverified", "not verified")}


def test_no_verdict_is_never_green_whatever_the_layers(
    qwen_quants: tuple[QuantOption, ...],
) -> None:
    row = _rows(qwen_quants, Hardware.with_gpus([48 * GIB], 64 * GIB))["Q4_K_M"]
    assert badge(row).kind == "gpu"
    guess = dataclasses.replace(row, fits=None)  # a figure not known to agree with llama.cpp
    b = badge(guess)
    assert (b.kind, b.text, b.runs) == ("unverified", "not verified", False)
    unread = dataclasses.replace(row, error="the connection closed")
    assert badge(unread).kind == "unread"
    assert "the connection closed" in badge(unread).detail


def test_experts_on_the_cpu_are_a_partial_offload(
    qwen_quants: tuple[QuantOption, ...],
) -> None:
    row = _rows(qwen_quants, Hardware.with_gpus([48 * GIB], 64 * GIB))["Q4_K_M"]
    b = badge(dataclasses.replace(row, n_cpu_moe=4))
    assert b.kind == "partial"
    assert "experts of 4 layers on the CPU" in b.detail
