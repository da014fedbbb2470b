"""``ggtune compare REPO`` against the local fake hub: one row per quant file, headers only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.sources.demo_models import GEMMA, SMOLLM
from app.sources.refs import is_repo
from tests.fake_hub import REPO, FakeHub
from ui.cli.main import run

HW = ["--gpu-mem", "8", "--ram", "16", "--no-calibrate"]


def test_is_repo(tmp_path: Path) -> None:
    assert is_repo("org/name-GGUF")
    assert is_repo("org/name-GGUF:Q4_K_M")
    assert is_repo("hf.co/org/name-GGUF")
    assert is_repo("https://huggingface.co/org/name-GGUF")
    assert not is_repo("catalog:llama-3.1-8b")
    assert not is_repo("https://huggingface.co/org/m/resolve/main/m-Q4_K_M.gguf")
    assert not is_repo("https://example.com/org/name")
    assert not is_repo("models/missing.gguf")
    (tmp_path / "org").mkdir()
    assert not is_repo(str(tmp_path / "org"))


def test_compare_repo_rows_per_quant_file(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compare", REPO, "--ctx", "4096", *HW, "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repo"] == REPO
    assert data["n_ctx"] == 4096
    rows = {r["quant"]: r for r in data["rows"]}
    assert set(rows) == {"Q8_0", "Q4_1", "Q4_K_M"}
    assert {r["origin"] for r in data["rows"]} == {"hub"}
    gemma = rows["Q4_K_M"]
    assert gemma["error"] is None
    assert gemma["name"] == "demo-Q4_K_M.gguf"
    assert gemma["file_bytes"] == GEMMA.size_bytes
    assert 4.5 < gemma["bits_per_weight"] < 8
    assert set(gemma["devices"]) == {"CUDA0", "CPU"}
    assert gemma["fits"] is True
    assert gemma["decode_tok_per_s"] > 0
    assert gemma["kld"] == pytest.approx(0.0313, abs=1e-3)  # Q4_K_M by its label
    assert rows["Q4_1"]["file_bytes"] == SMOLLM.size_bytes
    assert rows["Q4_1"]["kld_nearest"] is not None
    assert len(rows["Q8_0"]["files"]) == 2  # the split model's shards joined
    assert any("IQ2_XS" in issue for issue in data["issues"])
    # Only headers travelled: far less than the 250 MB + 98 MB of the files.
    assert hub.sent("/cdn/") < 20 * 2**20


def test_compare_repo_same_numbers_as_hf(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compare", f"hf.co/{REPO}", "--ctx", "2048", *HW, "--json"]) == 0
    rows = {r["quant"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    # ggtune hf at the same placement (every layer on the GPU, which fits) agrees.
    assert run(["hf", REPO, "-c", "2048", "-ngl", "999", "-np", "1", *HW[:-1], "--json"]) == 0
    hf = {r["quant"]: r for r in json.loads(capsys.readouterr().out)["models"]}
    for quant, row in rows.items():
        assert row["bits_per_weight"] == hf[quant]["bits_per_weight"]
        assert row["file_bytes"] == hf[quant]["size_bytes"]


def test_compare_repo_table_and_unreadable_file(
    hub: FakeHub, capsys: pytest.CaptureFixture[str]
) -> None:
    repo = hub.repos[REPO]
    sha = repo.files["demo-Q4_1.gguf"].sha256
    hub.fail[f"/cdn/{sha}"] = (404, {})
    assert run(["compare", f"https://huggingface.co/{REPO}", *HW]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out
    assert "hub" in out
    assert "CUDA0" in out
    assert "demo-Q4_1.gguf:" in out  # its error, on a line of its own
    assert "nothing downloaded" in out
    assert run(["compare", REPO, *HW, "--json"]) == 0
    rows = {r["quant"]: r for r in json.loads(capsys.readouterr().out)["rows"]}
    assert rows["Q4_1"]["error"]
    assert rows["Q4_1"]["bits_per_weight"] is None
    assert rows["Q4_K_M"]["error"] is None


def test_compare_unknown_repo_is_one_line(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["compare", "ggtune-test/nope", *HW]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no such repository" in err
