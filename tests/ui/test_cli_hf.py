"""``ggtune hf`` and ``ggtune inspect/estimate URL`` against the local fake hub."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from app.sources.demo_models import GEMMA, SMOLLM
from tests.fake_hub import REPO, FakeHub
from ui.cli.main import run


def test_hf_compares_every_quant(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hf", REPO, "--ctx", "4096", "--gpu-mem", "8", "--ram", "16", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["repo"] == REPO
    rows = {r["quant"]: r for r in data["models"]}
    assert set(rows) == {"Q8_0", "Q4_1", "Q4_K_M"}
    gemma = rows["Q4_K_M"]
    assert gemma["size_bytes"] == GEMMA.size_bytes
    assert gemma["architecture"] == "gemma3"
    assert 4.5 < gemma["bits_per_weight"] < 8
    assert gemma["n_ctx"] == 4096
    assert [d["kind"] for d in gemma["devices"]] == ["gpu", "host"]
    assert gemma["fits"] is True
    assert len(rows["Q8_0"]["files"]) == 2
    assert [e["path"] for e in data["extras"]] == ["mmproj-demo-F16.gguf"]
    # Only headers travelled.
    assert hub.sent("/cdn/") < 20 * 2**20


def test_hf_table(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hf", f"hf.co/{REPO}:Q4_1", "--gpu-mem", "8"]) == 0
    out = capsys.readouterr().out
    assert "Q4_1" in out
    assert "Q4_K_M" not in out.split("download one")[0]
    assert "CUDA0" in out


def test_hf_download(hub: FakeHub, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hf", REPO, "--download", "Q4_1", "--to", str(tmp_path / "m")]) == 0
    captured = capsys.readouterr()
    assert Path(captured.out.strip()) == tmp_path / "m" / "demo-Q4_1.gguf"
    assert (tmp_path / "m" / "demo-Q4_1.gguf").stat().st_size == SMOLLM.size_bytes
    assert "of 93.81 MiB" in captured.err


def test_hf_errors_are_one_line(hub: FakeHub, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hf", "ggtune-test/nope"]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert "no such repository" in err
    assert run(["hf", REPO, "--download", "Q9_K"]) == 2
    assert "no file or quant 'Q9_K'" in capsys.readouterr().err


def test_inspect_and_estimate_a_url(
    hub: FakeHub, gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    url = f"{hub.endpoint}/files/gemma.gguf"
    assert run(["inspect", url, "--json"]) == 0
    remote = json.loads(capsys.readouterr().out)
    assert run(["inspect", str(gemma_path), "--json"]) == 0
    local = json.loads(capsys.readouterr().out)
    assert remote["path"] == url
    assert {**remote, "path": None} == {**local, "path": None}
    assert run(["estimate", url, "-c", "2048", "--gpu-mem", "4", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["context"]["n_ctx"] == 2048
    hub.refuse_range = True  # (gemma's header is cached by its ETag now: no range needed)
    assert run(["inspect", f"{hub.endpoint}/files/smollm.gguf"]) == 2
    assert "range requests" in capsys.readouterr().err
