"""``ggtune bench`` end to end: a real (tiny) run on SmolLM2, its table, JSON and history."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ui.cli.main import run

TINY_PLAN = "32,8,64,16,2"


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bench") / "results.sqlite3"


@pytest.mark.engine
def test_bench_json_table_and_history(
    smollm_path: Path, db: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    model = str(smollm_path)
    args = ["bench", model, "-c", "512", "--plan", TINY_PLAN, "--db", str(db)]
    assert run([*args, "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["run_id"] == 1
    assert data["database"] == str(db)
    assert {s["name"] for s in data["speeds"]} == {"pp32", "tg8", "pp32 @ d64", "tg8 @ d64"}
    assert all(s["tok_per_s"] > 0 for s in data["speeds"])
    assert data["ttft"]["seconds"] > 0
    assert data["backend"] == "CPU"
    assert data["settings"]["n_ctx"] == 512
    rows = {(g["component"], g["device"]): g for g in data["comparison"]}
    assert rows["weights", "CPU"]["within_tolerance"]
    assert rows["KV cache", "CPU"]["within_tolerance"]
    assert rows["RSS total (peak − baseline)", "CPU"]["measured_bytes"] > 0
    assert "loading the model… 100%" in err
    assert "benchmark" in err
    assert "%" in err

    assert run(args) == 0
    out, _ = capsys.readouterr()
    assert "estimated vs measured:" in out
    assert "pp32 @ d64" in out
    assert "time to first token (16 tokens)" in out
    assert "stored as run #2" in out

    assert run(["bench", "--history", "--db", str(db)]) == 0
    out, _ = capsys.readouterr()
    lines = [line for line in out.splitlines() if line.strip()]
    assert len(lines) == 2 + 2  # header, rule, two runs (newest first)
    assert lines[2].split()[0] == "2"
    assert "llama 256M Q4_1" in lines[2]

    assert run(["bench", "--history", model, "--json", "--db", str(db)]) == 0
    out, _ = capsys.readouterr()
    assert [r["id"] for r in json.loads(out)] == [2, 1]


def test_history_of_an_empty_database(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "--history", "--db", str(tmp_path / "r.sqlite3")]) == 0
    assert capsys.readouterr().out.strip() == "no stored runs"


def test_a_corrupt_database_is_reported(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    db = tmp_path / "r.sqlite3"
    db.write_bytes(b"garbage " * 100)
    assert run(["bench", "--history", "--db", str(db)]) == 0
    err = capsys.readouterr().err
    assert "damaged" in err
    assert "r.sqlite3.corrupt-" in err
    assert len(list(tmp_path.glob("r.sqlite3.corrupt-*"))) == 1


def test_missing_model_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["bench", str(tmp_path / "nope.gguf"), "--db", str(tmp_path / "r")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no such model file" in err


def test_bench_needs_a_model(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "--db", str(tmp_path / "r")]) == 2
    assert "needs a MODEL" in capsys.readouterr().err


def test_planning_flags_are_refused(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["bench", str(smollm_path), "--gpu-mem", "24", "--db", str(tmp_path / "r")]) == 2
    assert "measures this machine" in capsys.readouterr().err


def test_quick_and_thorough_exclude_each_other(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "m.gguf", "--quick", "--thorough"]) == 2
    assert "not allowed with" in capsys.readouterr().err


def test_bad_plan_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["bench", "m.gguf", "--plan", "1,2"]) == 2
    assert "five numbers" in capsys.readouterr().err


@pytest.mark.engine
def test_a_run_the_database_refuses_is_printed_first(
    smollm_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    import sqlite3

    db = tmp_path / "results.sqlite3"
    conn = sqlite3.connect(db)
    conn.execute("PRAGMA user_version = 99")  # written by a newer ggtune: left alone
    conn.close()
    args = ["bench", str(smollm_path), "-c", "512", "--plan", TINY_PLAN, "--db", str(db)]
    assert run([*args, "--json"]) == 2
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert data["run_id"] is None
    assert "newer ggtune" in data["store_error"]
    assert all(s["tok_per_s"] > 0 for s in data["speeds"])
    last = err.strip().splitlines()[-1]
    assert last.startswith("ggtune: the run was measured but not stored:")


@pytest.mark.parametrize("value", ["0", "nan", "-1", "inf"])
def test_a_timeout_that_is_not_a_positive_number_is_refused(
    value: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["bench", "m.gguf", "--timeout", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "expected a number > 0" in err
