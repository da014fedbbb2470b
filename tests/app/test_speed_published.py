"""The speed model, not calibrated, against published llama.cpp results on GPUs.

Each row of tests/app/data/published_llama_cpp_speeds.json (with its link) is predicted
from a header stand-in of the catalog model at the row's quant — a sparse file of the
model's size holding only its header, read back like a user's file — on the row's hardware
profile (bench/bench_speed_published.py; the table in docs/benchmarks.md). Goals: decode
within 20 %, prompt processing within 30 %.

The rows the model does not meet yet are listed in KNOWN_MISSES with the reason; they are
strict xfails, so a change that brings one within its goal shows up here too.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.bench_speed_published import Row, predict, rows

_DGX_PP = "GB10 has no published FP16 rate; the model assumes 20 TFLOPS (llama.cpp reaches ~35-45)"
_AMD = (
    "llama.cpp's ROCm kernels reach ~54 % of the RX 7900 XTX's bandwidth and far less of its "
    "dual-issue FP16 peak; ggtune applies NVIDIA's ratios to every discrete GPU"
)
_MOE_METAL = "MoE decode on Metal is slower than its bandwidth (many small expert products)"

KNOWN_MISSES: dict[tuple[str, str, str], str] = {
    ("m2-ultra", "gpt-oss-120b", "tg32 @ d16384"): _MOE_METAL,
    ("m2-ultra", "qwen3-30b-a3b", "tg32"): _MOE_METAL,
    ("m2-ultra", "qwen3-30b-a3b", "tg32 @ d16384"): _MOE_METAL,
    ("dgx-spark", "gpt-oss-20b", "pp2048"): _DGX_PP,
    ("dgx-spark", "gpt-oss-20b", "tg32"): "gpt-oss decodes at 95 % of GB10's bandwidth",
    ("dgx-spark", "gpt-oss-20b", "pp2048 @ d16384"): _DGX_PP,
    ("dgx-spark", "gpt-oss-120b", "pp2048"): _DGX_PP,
    ("dgx-spark", "qwen3-30b-a3b", "pp2048"): _DGX_PP,
    ("dgx-spark", "qwen3-30b-a3b", "pp2048 @ d16384"): _DGX_PP,
    ("dgx-spark", "qwen2.5-7b-instruct", "pp2048"): _DGX_PP,
    ("dgx-spark", "qwen2.5-7b-instruct", "pp2048 @ d16384"): _DGX_PP,
    ("dgx-spark", "gemma-3-4b", "pp2048"): _DGX_PP,
    ("dgx-spark", "gemma-3-4b", "pp2048 @ d16384"): _DGX_PP,
    ("rtx-4090", "llama-3.1-8b", "pp512"): "int8 tensor-core MMQ beats the FP16 peak on Ada",
    ("rx-7900-xtx", "llama-3.1-8b", "pp2048"): _AMD,
    ("rx-7900-xtx", "llama-3.1-8b", "pp2048 @ d4096"): _AMD,
    ("rx-7900-xtx", "llama-3.1-8b", "tg64"): _AMD,
    ("rx-7900-xtx", "llama-3.1-8b", "tg64 @ d4096"): _AMD,
}


def _params() -> list[object]:
    out: list[object] = []
    for row in rows():
        key = (row.hardware, row.model, row.name)
        marks = []
        if key in KNOWN_MISSES:
            marks.append(pytest.mark.xfail(reason=KNOWN_MISSES[key], strict=True))
        out.append(pytest.param(row, marks=marks, id=f"{row.hardware}-{row.model}-{row.name}"))
    return out


@pytest.fixture(autouse=True)
def _standins_in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def test_every_row_has_a_link_and_a_known_model() -> None:
    from app.model.catalog import catalog_header

    found = rows()
    assert len(found) >= 40
    for row in found:
        assert row.link.startswith("https://github.com/ggml-org/llama.cpp/")
        catalog_header(row.model)  # raises for an unknown entry
    keys = {(r.hardware, r.model, r.name) for r in found}
    assert set(KNOWN_MISSES) <= keys, "a known miss names no row"


@pytest.mark.parametrize("row", _params())
def test_published_speed_within_goal(row: Row) -> None:
    predicted = predict(row)
    error = predicted / row.tok_per_s - 1.0
    assert abs(error) <= row.goal, (
        f"{row.hardware} {row.model} {row.quant} {row.name}: predicted {predicted:,.1f} tok/s, "
        f"published {row.tok_per_s:,.1f} ({100 * error:+.0f}%, goal ±{100 * row.goal:.0f}%)"
    )
