"""The speed model against published llama.cpp results on GPUs (no weights needed).

Run: ``.venv/bin/python -m bench.bench_speed_published [--markdown]``.

Every row of ``tests/app/data/published_llama_cpp_speeds.json`` (llama.cpp's own
benches/ for the M2 Ultra and the DGX Spark at the pinned commit, and llama-bench tables in
llama.cpp pull requests for RTX 3090/4090 and RX 7900 XTX, each with its link) is predicted
with the published ratios alone (not calibrated): the catalog model at the quant the row
names is written as a header stand-in (:func:`app.sources.standins.engine_target`, a
sparse file of the model's size), read back as a user's file would be, and predicted on
the row's hardware profile with all layers on the GPU and flash attention on. Goals:
decode within 20 %, prompt processing within 30 % (tests/app/test_speed_published.py).
"""

from __future__ import annotations

import argparse
import json
import statistics
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

TABLE = (
    Path(__file__).resolve().parent.parent
    / "tests"
    / "app"
    / "data"
    / ("published_llama_cpp_speeds.json")
)
DECODE_GOAL = 0.20
PREFILL_GOAL = 0.30


@dataclass(frozen=True)
class Row:
    """One published figure."""

    source: str
    link: str
    hardware: str
    model: str
    quant: str
    test: str
    n_tokens: int
    depth: int
    n_ubatch: int
    tok_per_s: float

    @property
    def name(self) -> str:
        d = f" @ d{self.depth}" if self.depth else ""
        ub = " (ub 1)" if self.n_ubatch == 1 else ""
        return f"{self.test}{self.n_tokens}{d}{ub}"

    @property
    def goal(self) -> float:
        return DECODE_GOAL if self.test == "tg" else PREFILL_GOAL


def rows() -> list[Row]:
    """Return the published rows."""
    data = json.loads(TABLE.read_text(encoding="utf-8"))
    links = data["sources"]
    return [Row(link=links[r["source"]], **r) for r in data["rows"]]


@cache
def standin_spec(model: str, quant: str) -> Any:
    """Return the spec read back from the header stand-in of catalog ``model`` at ``quant``."""
    from app.model.catalog import catalog_header
    from app.model.gguf_reader import read_model
    from app.model.quant import simulate_quant
    from app.model.spec import model_spec
    from app.sources.standins import engine_target

    spec = simulate_quant(model_spec(catalog_header(model)), quant).spec
    target = engine_target(spec)
    return model_spec(read_model(target.path))


def predict(row: Row) -> float:
    """Return the predicted tok/s of ``row`` (published ratios, not calibrated)."""
    from app.hardware.profiles import compose
    from app.predict.speed import SpeedFactors, SpeedMeasurement, predict_measurement
    from app.settings import Settings

    spec = standin_spec(row.model, row.quant)
    hardware = compose(row.hardware)
    settings = Settings(
        n_ctx=-(-(row.depth + row.n_tokens + 256) // 256) * 256,
        n_gpu_layers=999,
        flash_attn="on",
        n_batch=max(2048, row.n_ubatch),
        n_ubatch=row.n_ubatch,
    )
    kind = "tg" if row.test == "tg" else "pp"
    m = SpeedMeasurement(spec, settings, hardware, kind, row.n_tokens, row.depth, row.tok_per_s)
    return predict_measurement(m, SpeedFactors())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.parse_args()
    print(
        "| hardware | model | quant | test | published tok/s | predicted | error | goal | source |"
    )
    print("|---|---|---|---|--:|--:|--:|---|---|")
    errors: dict[str, list[float]] = {"tg": [], "pp": []}
    for row in rows():
        p = predict(row)
        e = p / row.tok_per_s - 1
        errors[row.test].append(e)
        ok = "met" if abs(e) <= row.goal else "**missed**"
        print(
            f"| {row.hardware} | {row.model} | {row.quant} | {row.name} | "
            f"{row.tok_per_s:,.1f} | {p:,.1f} | {100 * e:+.0f}% | ±{100 * row.goal:.0f}% {ok} | "
            f"[{row.source}]({row.link}) |"
        )
    for kind, errs in errors.items():
        a = sorted(abs(x) for x in errs)
        goal = DECODE_GOAL if kind == "tg" else PREFILL_GOAL
        met = sum(1 for x in a if x <= goal)
        print(
            f"\n{kind}: median |error| {100 * statistics.median(a):.0f}%, worst "
            f"{100 * a[-1]:.0f}%, {met} of {len(a)} within ±{100 * goal:.0f}%"
        )


if __name__ == "__main__":
    main()
