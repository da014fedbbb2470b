"""``ggtune quants``: every quant level of a model, simulated, with its quality cost."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from ui.cli.main import run


def test_quants_json(smollm_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["quants", str(smollm_path), "--json"]) == 0
    rows = {row["quant"]: row for row in json.loads(capsys.readouterr().out)}
    q4 = rows["Q4_K_M"]
    # the size of the file llama.cpp's quantizer writes (tests/app/test_quant.py)
    assert q4["file_bytes"] == 105454144
    assert q4["needs_imatrix"] is False
    assert q4["quality"]["model"] == "Llama-3-8B"
    assert q4["quality"]["kld"] == 0.031273
    assert rows["IQ2_XXS"]["needs_imatrix"] is True
    assert rows["IQ2_XXS"]["quality"]["imatrix"] == "WT 10m"
    assert rows["Q1_0"]["possible"] is False


def test_quants_table(smollm_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["quants", str(smollm_path)]) == 0
    out = capsys.readouterr().out
    assert "Q4_K_M" in out
    assert "+0.175 PPL" in out
    assert "needed" in out
