"""Quality tables (app/model/quality.py, profiles/quality/): the shipped numbers and bad files.

Expected values are llama.cpp's ``tools/perplexity/README.md`` "LLaMA 3 8b Scoreboard"
(vendored in llama-cpp-python 0.3.36) and docs/sources.md §4, not ggtune's own output.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from app.errors import GGTuneError
from app.model.quality import (
    QUALITY_DIR,
    QualityProfileError,
    kv_quality,
    load_quality,
    weight_quality,
)
from app.model.quant import file_type


def test_weight_table_matches_the_perplexity_readme() -> None:
    table = load_quality()
    q4 = weight_quality(table, "Q4_K_M")
    assert q4 is not None
    assert (q4.model, q4.imatrix, q4.delta_ppl, q4.kld) == ("Llama-3-8B", None, 0.175482, 0.031273)
    assert q4.same_top_token_pct == pytest.approx(91.901)
    assert "perplexity/README.md" in q4.source.url
    q8 = weight_quality(table, "q8_0")
    assert q8 is not None
    assert (q8.delta_ppl, q8.kld) == (0.002650, 0.001355)
    with_imatrix = weight_quality(table, "Q4_K_M", imatrix=True)
    assert with_imatrix is not None
    assert (with_imatrix.imatrix, with_imatrix.delta_ppl) == ("WT 10m", 0.151303)
    # only measured with an imatrix: returned even when none is asked for
    iq2 = weight_quality(table, "IQ2_XXS")
    assert iq2 is not None
    assert (iq2.imatrix, iq2.delta_ppl) == ("WT 10m", 7.860148)
    llama2 = weight_quality(table, "Q4_K_M", model="Llama-2-7B")
    assert llama2 is not None
    assert llama2.kld == 0.012686
    assert weight_quality(table, "TQ1_0") is None


def test_every_weight_quant_is_a_llama_cpp_file_type() -> None:
    for m in load_quality().weights:
        assert file_type(m.quant).name == m.quant


def test_loss_grows_as_bits_shrink() -> None:
    table = load_quality()
    chain = ["Q8_0", "Q6_K", "Q5_K_M", "Q4_K_M", "Q3_K_M", "Q2_K"]
    losses = [weight_quality(table, q) for q in chain]
    assert all(m is not None for m in losses)
    klds = [m.kld for m in losses if m is not None]
    assert klds == sorted(klds)


def test_kv_table() -> None:
    table = load_quality()
    (q8, ollama) = kv_quality(table, "Q8_0")
    assert (q8.delta_ppl, q8.approximate) == (0.005, True)
    assert q8.source is not None
    assert q8.source.url.endswith("/pull/7412")
    assert ollama.source is not None
    assert ollama.source.url.endswith("ollama/pull/6279")
    assert "no noticeable quality impact" in ollama.note
    (q4,) = kv_quality(table, "q4_0")
    assert q4.delta_ppl is None
    assert "varies by model" in q4.note
    assert kv_quality(table, "f16")[0].delta_ppl == 0.0
    assert kv_quality(table, "iq4_nl") == ()


# --- bad files ------------------------------------------------------------------------

Edit = Callable[[dict[str, Any]], None]


def _copy(tmp_path: Path, file: str, edit: Edit) -> Path:
    shutil.copytree(QUALITY_DIR, tmp_path, dirs_exist_ok=True)
    path = tmp_path / file
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    return path


def _set(key: str, value: object, index: int = 0) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        data["measurements"][index][key] = value

    return edit


def _drop(key: str) -> Edit:
    def edit(data: dict[str, Any]) -> None:
        del data["measurements"][0][key]

    return edit


def _duplicate(data: dict[str, Any]) -> None:
    data["measurements"].append(dict(data["measurements"][0]))


def _version(data: dict[str, Any]) -> None:
    data["schema_version"] = 2


@pytest.mark.parametrize(
    ("file", "edit", "message"),
    [
        ("weight_quants.json", _drop("kld"), r"measurement #0 \(F16\): missing 'kld'"),
        ("weight_quants.json", _set("kld", "low"), r"'kld' should be a number"),
        ("weight_quants.json", _set("ppl", -1), r"'ppl' out of range"),
        ("weight_quants.json", _set("same_top_token_pct", 120.0), "above 100"),
        ("weight_quants.json", _set("source", "blog"), "unknown source 'blog'"),
        ("weight_quants.json", _duplicate, "measured twice on Llama-3-8B"),
        ("weight_quants.json", _version, "schema_version 2 is not 1"),
        ("kv_quants.json", _set("approximate", "yes"), r"'approximate' should be true or false"),
        ("kv_quants.json", _drop("note"), r"measurement #0 \(f16\): missing 'note'"),
    ],
)
def test_bad_file_names_file_and_entry(tmp_path: Path, file: str, edit: Edit, message: str) -> None:
    path = _copy(tmp_path, file, edit)
    with pytest.raises(QualityProfileError, match=message) as info:
        load_quality(tmp_path)
    assert info.value.path == str(path)
    assert str(path) in str(info.value)
    assert isinstance(info.value, GGTuneError)


def test_not_json_and_missing_file(tmp_path: Path) -> None:
    (tmp_path / "weight_quants.json").write_text("{ not json")
    with pytest.raises(QualityProfileError, match="not valid JSON"):
        load_quality(tmp_path)
    with pytest.raises(QualityProfileError, match="cannot read"):
        load_quality(tmp_path / "nowhere")
