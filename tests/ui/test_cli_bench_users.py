"""``ggtune bench MODEL --users …``: N users on the real engine from the command line, the
JSON the issue names, predicted beside measured, stored; and bad flags as one line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.measured.results_db import ResultsDB, quick_file_hash
from ui.cli.main import run

USERS_KEYS = {
    "n_users",
    "per_user_tok_per_s",
    "aggregate_tok_per_s",
    "ttft_s",
    "ttft_p95_s",
    "tpot_p95_s",
    "goodput",
    "predicted_per_user_tok_per_s",
    "predicted_ttft_s",
}


@pytest.mark.engine
def test_users_json_table_and_store(
    smollm_path: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))  # kernels timed afresh
    db = tmp_path / "results.sqlite3"
    model = str(smollm_path)
    args = ["bench", model, "--users", "1,2", "--prompt", "16", "--gen", "6", "--db", str(db)]
    assert run([*args, "--ttft", "5", "--min-tps", "1", "--json"]) == 0
    out, err = capsys.readouterr()
    data = json.loads(out)
    assert [u["n_users"] for u in data["users"]] == [1, 2]
    for u in data["users"]:
        assert set(u) >= USERS_KEYS
        assert u["per_user_tok_per_s"] > 0
        assert u["predicted_per_user_tok_per_s"] > 0
        assert u["predicted_ttft_s"] > 0
        assert u["ttft_p95_s"] >= u["ttft_s"] * 0.99
        assert u["goodput"] == u["n_users"]  # ≥ 1 tok/s, first token within 5 s
    assert data["slo"] == {"ttft_s": 5.0, "min_tok_per_s": 1.0}
    assert data["settings"]["n_parallel"] == 2  # one slot per user when -np is not given
    assert data["answer"].startswith("2 users get ≥ 1 tok/s and first token ≤ 5 s")
    assert data["prediction_source"].startswith("not calibrated: this CPU's kernels")
    assert "timing this CPU's kernels" in err  # the first run times them, once
    stored = ResultsDB(db).users_runs(model_hash=quick_file_hash(smollm_path))
    assert [r.id for r in stored] == [data["run_id"]]

    assert run(args) == 0  # the table; the kernels are cached now
    out, err = capsys.readouterr()
    assert "timing this CPU's kernels" not in err
    assert "tok/s each" in out
    assert "goodput" in out
    assert "predicted:" in out
    assert "stored as load test #2" in out
    assert "calibrated on 1 run(s) of this machine" in out  # the first run feeds the model

    # ggtune plan says the stored run's count beside its prediction, under the same SLO
    served = max(u["n_users"] for u in data["users"] if u["goodput"] == u["n_users"])
    plan = ["plan", model, "--ctx", "256", "--min-tps", "1", "--ttft", "5", "--db", str(db)]
    assert run([*plan, "--no-simulate", "--json"]) == 0
    planned = json.loads(capsys.readouterr().out)
    assert planned["slo"] == {"ttft_s": 5.0, "min_tok_per_s": 1.0}
    assert planned["measured"]["served"] == served  # the run the first bench stored
    assert planned["measured"]["tested"] == 2
    assert planned["users_within_slo"] <= planned["max_users"]
    assert run([*plan, "--no-simulate"]) == 0
    text = capsys.readouterr().out
    assert f"Within first token ≤ 5 s, ≥ 1 tok/s each: {planned['users_within_slo']} user" in text
    assert f": {served} of up to 2 met it in a Users run" in text


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--users", "0"], "user counts must be 1…256"),
        (["--users", "1,x"], "expected user counts like 1,2,4"),
        (["--users", "2,2"], "each user count once"),
        (["--users", "4", "-np", "2"], "4 users need 4 parallel slots; -np is 2"),
        (["--users", "2", "-c", "256", "--prompt", "300"], "each user needs 332 tokens of"),
        (["--users", "2", "--arrivals", "wave"], "expected burst, staggered:SECONDS"),
        (["--users", "2", "--ttft", "0"], "the TTFT target must be > 0 s"),
    ],
)
def test_bad_users_flags_are_one_line(
    smollm_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    extra: list[str],
    message: str,
) -> None:
    args = ["bench", str(smollm_path), "--db", str(tmp_path / "r.sqlite3"), *extra]
    try:
        code = run(args)
    except SystemExit as exc:  # argparse refuses a bad type itself
        code = int(exc.code or 0)
    _out, err = capsys.readouterr()
    assert code == 2
    assert message in err
    assert "Traceback" not in err
