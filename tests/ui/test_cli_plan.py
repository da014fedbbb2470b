"""ggtune compare / recommend / plan: the CLI over app.planning.planner, on catalog models and
profiles."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from ui.cli.main import run
from ui.cli.plan import ROUGH_CPU


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert run(list(argv)) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def test_compare_lists_every_quant_with_memory_speed_and_quality(
    capsys: pytest.CaptureFixture[str],
) -> None:
    data = run_json(
        capsys, "compare", "catalog:llama-3.1-8b", "--profile", "rtx-3060-12g", "--ctx", "8192",
        "--ram", "64", "--json",
    )  # fmt: skip
    rows = {r["quant"]: r for r in data["rows"]}
    assert rows["F16"]["origin"] == "catalog"
    assert rows["Q4_K_M"]["origin"] == "simulated"
    assert rows["F16"]["gpu_layers"] < rows["F16"]["n_layers"]  # 15 GiB does not fit 11
    assert rows["Q4_K_M"]["gpu_layers"] == rows["Q4_K_M"]["n_layers"]
    assert rows["Q4_K_M"]["decode_tok_per_s"] > 5 * rows["F16"]["decode_tok_per_s"]
    assert rows["Q4_K_M"]["kld"] == pytest.approx(0.0313, abs=1e-3)
    assert set(rows["Q8_0"]["devices"]) == {"CUDA0", "CPU"}
    assert 8.4 < rows["Q8_0"]["bits_per_weight"] < 8.6


def test_compare_prints_a_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compare", "catalog:smollm2-135m", "--profile", "rtx-3060-12g"]) == 0
    out = capsys.readouterr().out
    assert "quant" in out
    assert "Q4_K_M" in out
    assert "simulated" in out


def test_recommend_says_why_with_the_runner_up(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--profile",
        "rtx-3060-12g", "--ram", "64", "--json",
    )  # fmt: skip
    assert data["feasible"] is True
    best = data["best"]
    assert isinstance(best, dict)
    assert best["quant"] == "Q4_K_M"
    assert best["all_on_gpu"]
    assert "Runner-up" in str(data["why"])
    assert "tok/s" in str(data["why"])
    assert run(["recommend", "catalog:llama-3.1-8b", "--goal", "longest-context",
                "--profile", "rtx-3060-12g", "--ram", "64"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert out.startswith("Longest context:")
    assert "llama-server command: llama-server -m catalog:llama-3.1-8b -c " in out


def test_plan_answers_how_many_users_fit(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "plan", "catalog:llama-3.1-8b", "--users", "4", "--ctx", "8192", "--min-tps",
        "20", "--profile", "rtx-3060-12g", "--ram", "64", "--json",
    )  # fmt: skip
    assert data["fits"] is True
    assert int(data["max_users"]) >= 4
    assert data["limit"] in ("memory", "speed")


def test_plan_needs_ctx_and_speed(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["plan", "catalog:llama-3.1-8b", "--users", "4"]) == 2
    assert "--ctx" in capsys.readouterr().err


def test_recommend_on_a_real_file_of_this_machine(
    capsys: pytest.CaptureFixture[str], smollm_path: Path, tmp_path: Path
) -> None:
    # an empty results database: no runs to calibrate from, the defaults say so
    data = run_json(
        capsys, "recommend", str(smollm_path), "--goal", "best-quality", "--ram", "8",
        "--db", str(tmp_path / "none.sqlite3"), "--no-simulate", "--json",
    )  # fmt: skip
    best = data["best"]
    assert isinstance(best, dict)
    assert best["quant"] == "Q4_1"
    assert best["origin"] == "on disk"
    assert "not calibrated" in best["speed"]["calibration"]


def test_plan_says_the_cpu_figure_is_rough_until_its_kernels_are_timed(
    capsys: pytest.CaptureFixture[str],
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # a machine never timed
    argv = ["plan", str(smollm_path), "--ctx", "2048", "--min-tps", "5",
            "--db", str(tmp_path / "none.sqlite3")]  # fmt: skip
    data = run_json(capsys, *argv, "--json")
    assert data["cpu_priced_by"] == "bandwidth"
    assert run(argv) == 0
    assert ROUGH_CPU in capsys.readouterr().out
    # a profile's GPU holds every layer: the CPU prices nothing, nothing to say
    gpu = run_json(capsys, "plan", "catalog:llama-3.1-8b", "--ctx", "8192", "--min-tps", "20",
                   "--profile", "rtx-3060-12g", "--ram", "64", "--json")  # fmt: skip
    assert gpu["cpu_priced_by"] is None
