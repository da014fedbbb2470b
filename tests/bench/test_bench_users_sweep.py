"""bench/bench_users_sweep.py's --skip (a quant name leaves out that quant only), and how
bench/bench_speed_model.py judges a run with repetitions."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from bench.bench_users_sweep import parse_skip, skipped


def test_skip_names_a_whole_quant_not_a_substring() -> None:
    skip = parse_skip("Q2_0@4096, Q4_K@0")
    assert skip == {("Q2_0", 4096), ("Q4_K", 0)}
    assert skipped("gemma3-270m-Q2_0.gguf", 4096, skip)
    assert skipped("smollm2-135m-Q2_0.gguf", 4096, skip)
    # a substring matched these before: TQ2_0 contains Q2_0, Q4_K_M contains Q4_K
    assert not skipped("gemma3-270m-TQ2_0.gguf", 4096, skip)
    assert not skipped("gemma3-270m-Q4_K_M.gguf", 0, skip)
    assert not skipped("gemma3-270m-Q2_0.gguf", 0, skip)  # another depth runs


def test_skip_by_file_stem_leaves_the_other_model() -> None:
    skip = parse_skip("gemma3-270m-Q2_0@4096")
    assert skipped("gemma3-270m-Q2_0.gguf", 4096, skip)
    assert not skipped("smollm2-135m-Q2_0.gguf", 4096, skip)
    assert not skipped("gemma3-270m-TQ2_0.gguf", 4096, skip)


def test_skip_ignores_entries_without_a_depth() -> None:
    assert parse_skip("") == set()
    assert parse_skip("Q2_0") == set()


def _three_rounds(smollm_path: Path) -> tuple[Any, ...]:
    """A measured run of the committed sweep, its 1-user round served three times: the
    second copy 1.5x slower in every step, the third 0.8x. Returns the record, the plain
    round, the three rounds, and the spec and hardware to judge them on."""
    from app.hardware.devices import Device, Hardware
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec
    from bench.bench_speed_model import read_text

    data = Path(__file__).parents[2] / "bench/data/users_sweep_d0_d4096_2026-12-02.jsonl.xz"
    record = json.loads(read_text(data).splitlines()[0])
    one = next(r for r in record["rounds"] if r["n_users"] == 1)
    slow, fast = (
        {**one, "steps": [[*s[:3], s[3] * f, s[4] * f] for s in one["steps"]]} for f in (1.5, 0.8)
    )
    record = {**record, "plan": {**record["plan"], "n_users": [1], "repetitions": 3}, "fill": []}
    spec = model_spec(read_model(smollm_path))
    hw = Hardware(host=Device("CPU", "host", 24 << 30, 20 << 30, 20.0))
    return record, one, [slow, one, fast], spec, hw


def test_the_judge_takes_the_median_round_of_repetitions(smollm_path: Path) -> None:
    # the judge keeps one point per figure, the median round's (the original), not three
    from bench.bench_speed_model import points_of

    record, one, three, spec, hw = _three_rounds(smollm_path)
    plain = points_of({**record, "rounds": [one]}, spec, hw, "cpu")
    repeated = points_of({**record, "rounds": three}, spec, hw, "cpu")
    assert sorted(p.what for p in repeated) == ["decode", "ttft"]
    assert [(p.what, p.measured) for p in repeated] == [(p.what, p.measured) for p in plain]


def test_the_noise_floor_is_each_other_round_against_the_median_one(smollm_path: Path) -> None:
    # rounds at 1.5x, 1x and 0.8x the time of every step: the median round is the 1x one,
    # and the other two lie +50 % and -20 % off it in TTFT (seconds) and -33 % and +25 %
    # in decode (tok/s)
    from bench.bench_speed_model import median_rounds, points_of, round_spread

    record, one, three, spec, hw = _three_rounds(smollm_path)
    every = points_of({**record, "rounds": three}, spec, hw, "cpu", rounds=True)
    assert len(every) == 6
    assert len(median_rounds(every)) == 2
    spread = round_spread(every)
    assert sorted(round(e, 3) for e in spread["ttft"]) == [-0.2, 0.5]
    assert sorted(round(e, 3) for e in spread["decode"]) == [-0.333, 0.25]
    # one round alone has no spread
    assert round_spread(points_of({**record, "rounds": [one]}, spec, hw, "cpu", rounds=True)) == {}


def test_a_broken_sweep_line_is_named_not_a_traceback(tmp_path: Path) -> None:
    import pytest

    from bench.bench_speed_model import read_records

    good = tmp_path / "good.jsonl"
    good.write_text('{"file": "a.gguf", "n_threads": 2}\n')
    assert read_records([good]) == [{"file": "a.gguf", "n_threads": 2}]
    cut = tmp_path / "cut.jsonl"
    cut.write_text('{"file": "a.gguf", "n_threads": 2}\n{"file": "b.gg')
    with pytest.raises(SystemExit, match=r"cut\.jsonl:2: not a sweep run \(cut short"):
        read_records([good, cut])
    other = tmp_path / "other.jsonl"
    other.write_text("[1, 2]\n")
    with pytest.raises(SystemExit, match=r"other\.jsonl:1: not a sweep run: it has no file"):
        read_records([other])
    with pytest.raises(SystemExit, match="cannot read the sweep"):
        read_records([tmp_path / "missing.jsonl"])
