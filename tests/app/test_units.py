"""app/units.py: the one home of sizes, formatters, the margin and the speed depth."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.planning.compare import compare_rows
from app.planning.explain import explain_facts
from app.planning.options import quant_options
from app.predict.estimate import estimate
from app.predict.speed import SpeedFactors, predict_speed
from app.settings import Settings
from app.units import (
    GIB,
    KIB,
    MIB,
    SPEED_DEPTH_MAX,
    format_bytes,
    format_mib,
    format_tps,
    format_transfer_rate,
    speed_depth,
)

HW = Hardware.cpu_only(ram_bytes=32 * GIB)


@pytest.mark.parametrize("users", [1, 2, 4, 8])
def test_compare_and_explain_quote_speed_at_one_users_depth(gemma_path: Path, users: int) -> None:
    # The Compare rows once took half the *total* context: with 4 users they quoted tok/s
    # at twice the depth the Memory view and Explain use (half of one user's context).
    spec = model_spec(read_model(gemma_path))
    settings = Settings(n_ctx=4096 * users, n_parallel=users, kv_unified=False)
    depth = speed_depth(settings.n_ctx, settings.n_parallel)
    assert depth == 2048  # 4096 tokens per user, whatever the number of users
    factors = SpeedFactors()
    (row,) = compare_rows(spec, quant_options(spec, simulate=None), settings, HW, factors)
    expected = predict_speed(spec, settings, HW, depth=depth, factors=factors)
    assert row.decode_tok_per_s == round(expected.decode_tok_per_s, 2)
    facts = explain_facts(spec, settings, estimate(spec, settings, HW), HW, factors=factors)
    assert facts.depth == depth


def test_speed_depth_is_half_a_users_context_at_most_4096() -> None:
    assert speed_depth(32768) == SPEED_DEPTH_MAX == 4096
    assert [speed_depth(8192, n) for n in (1, 2, 4, 8)] == [4096, 2048, 1024, 512]
    assert speed_depth(1000, 0) == 500  # no slots count as one


def test_sizes_read_in_binary_units_with_their_sign() -> None:
    assert format_bytes(GIB) == "1.0 GiB"
    assert format_bytes(GIB - MIB) == "1023.0 MiB"
    assert format_bytes(int(1.5 * GIB), 2) == "1.50 GiB"
    assert format_bytes(-3 * MIB // 2, 2) == "-1.50 MiB"
    assert format_bytes(None) == "unknown"
    assert format_bytes(0, 2) == "0.00 MiB"
    assert format_bytes(18 * KIB, down_to="bytes") == "18.0 KiB"
    assert format_bytes(640, down_to="bytes") == "640 bytes"
    assert format_bytes(3 * MIB, down_to="bytes") == "3.0 MiB"
    assert format_mib(1294 * MIB + MIB // 2) == "1,294.50 MiB"
    assert format_mib(MIB // 4, signed=True) == "+0.25 MiB"
    assert format_mib(-3 * MIB // 2, signed=True) == "−1.50 MiB"
    assert format_mib(0, signed=True) == "0.00 MiB"


def test_download_rates_read_in_mib_per_s() -> None:
    assert format_transfer_rate(45 * MIB) == "45.0 MiB/s"
    assert format_transfer_rate(MIB // 10) == "0.1 MiB/s"
    assert format_transfer_rate(2.5 * MIB) == "2.5 MiB/s"
    assert format_transfer_rate(0) == "0.0 MiB/s"


def test_speeds_keep_the_digits_that_matter() -> None:
    assert [format_tps(x) for x in (41.6, 10.0, 3.46, 1.0, 0.1234, 0.0)] == [
        "42",
        "10",
        "3.5",
        "1.0",
        "0.12",
        "0",
    ]


def test_times_read_as_people_write_them() -> None:
    """Issue 18: no raw ISO stamps on screen ('2026-12-01T11:09:20+0000')."""
    from app.units import format_when

    assert format_when("2026-12-01T11:09:20+0000") == "1 Dec 2026, 11:09 UTC"
    assert format_when("2026-03-04T01:02:03+01:00") == "4 Mar 2026, 00:02 UTC"
    assert format_when("2026-03-04T01:02:03") == "4 Mar 2026, 01:02"
    assert format_when("not a time") == "not a time"
