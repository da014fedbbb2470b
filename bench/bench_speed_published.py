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
from collections.abc import Callable
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


def predict(row: Row, factors: Any = None) -> float:
    """Return the predicted tok/s of ``row`` (published ratios, not calibrated; or
    ``factors``)."""
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
    return predict_measurement(m, factors or SpeedFactors())


def implied(row: Row, field: str, lo: float = 0.01, hi: float = 2.0) -> float:
    """Return the value of ``SpeedFactors.field`` (the other factors at their defaults)
    under which ``row`` is predicted as published (``lo``/``hi`` when out of range)."""
    import dataclasses
    import math

    from app.predict.speed import SpeedFactors

    def err(v: float) -> float:
        f = dataclasses.replace(SpeedFactors(), **{field: v})
        return math.log(predict(row, f) / row.tok_per_s)

    a, b = math.log(lo), math.log(hi)
    ea, eb = err(lo), err(hi)
    if ea * eb > 0:
        return lo if abs(ea) < abs(eb) else hi
    for _ in range(50):
        m = (a + b) / 2
        em = err(math.exp(m))
        if (em > 0) == (ea > 0):
            a, ea = m, em
        else:
            b = m
    return math.exp((a + b) / 2)


def mmq_rows(row: Row) -> bool:
    """Prompt processing from an empty cache (the products dominate) on a GPU with an
    INT8 rate, of quantized weights (llama.cpp's MMQ kernels)."""
    from app.hardware.profiles import compose
    from app.predict.speed import MMQ_TYPES

    if row.test != "pp" or row.depth:
        return False
    gpu = compose(row.hardware).gpus[0]
    spec = standin_spec(row.model, row.quant)
    return bool(gpu.int8_tops) and any(t.type_name.upper() in MMQ_TYPES for t in spec.tensors)


def unified_mmq_rows(row: Row) -> bool:
    """:func:`mmq_rows` on a unified-memory GPU (GB10)."""
    from app.hardware.profiles import compose

    return mmq_rows(row) and compose(row.hardware).gpus[0].unified_memory


def discrete_mmq_rows(row: Row) -> bool:
    """:func:`mmq_rows` on a discrete GPU."""
    from app.hardware.profiles import compose

    return mmq_rows(row) and not compose(row.hardware).gpus[0].unified_memory


def cuda_depth_rows(row: Row) -> bool:
    """Prompt processing after a depth on a CUDA GPU (flash attention's share grows)."""
    from app.hardware.profiles import compose

    return (
        row.test == "pp" and row.depth > 0 and compose(row.hardware).gpus[0].name.startswith("CUDA")
    )


def rocm_rows(test: str) -> Callable[[Row], bool]:
    """Rows of ``test`` (tg, pp) on a ROCm GPU."""

    def chosen(row: Row) -> bool:
        from app.hardware.profiles import compose

        return row.test == test and compose(row.hardware).gpus[0].name.startswith("ROCm")

    return chosen


def metal_depth_rows(row: Row) -> bool:
    """Decode rows at a depth on a Metal GPU whose model has a row at depth 0 there."""
    from app.hardware.profiles import compose

    if row.test != "tg" or not row.depth:
        return False
    if not compose(row.hardware).gpus[0].name.startswith("MTL"):
        return False
    return _depth0(row) is not None


def _depth0(row: Row) -> Row | None:
    """Return the row of the same test, model and hardware at depth 0, if published."""
    key = (row.hardware, row.model, row.quant, row.test, row.n_tokens)
    return next(
        (
            r
            for r in rows()
            if (r.hardware, r.model, r.quant, r.test, r.n_tokens) == key and not r.depth
        ),
        None,
    )


def implied_depth_scale(row: Row, field: str) -> float:
    """Return the scale of the KV read time under which the extra time per token from the
    model's depth-0 row to ``row`` is as published (linear in the scale)."""
    import dataclasses

    from app.predict.speed import SpeedFactors

    base = _depth0(row)
    assert base is not None

    def extra(scale: float) -> float:
        f = dataclasses.replace(SpeedFactors(), **{field: scale})
        return 1 / predict(row, f) - 1 / predict(base, f)

    measured = 1 / row.tok_per_s - 1 / base.tok_per_s
    e0, e1 = extra(0.0), extra(1.0)
    return (measured - e0) / (e1 - e0)


def metal_moe_rows(row: Row) -> bool:
    """Decode rows of a mixture of experts on a Metal GPU."""
    from app.hardware.profiles import compose

    if row.test != "tg" or not compose(row.hardware).gpus[0].name.startswith("MTL"):
        return False
    return standin_spec(row.model, row.quant).n_expert > 0


def implied_nonnegative(row: Row, field: str) -> float:
    """Return :func:`implied` in [0, …): 0 for a row the model predicts slower already."""
    import dataclasses

    from app.predict.speed import SpeedFactors

    if predict(row, dataclasses.replace(SpeedFactors(), **{field: 0.0})) <= row.tok_per_s:
        return 0.0
    return implied(row, field, lo=1e-9, hi=1e-3)


FITS: dict[str, tuple[Callable[[Row], bool], Callable[[Row, str], float]]] = {
    "gpu_mmq_efficiency": (discrete_mmq_rows, implied),
    "unified_mmq_efficiency": (unified_mmq_rows, implied),
    "cuda_attention_efficiency": (cuda_depth_rows, implied),
    "rocm_bandwidth_ratio": (rocm_rows("tg"), implied),
    "rocm_compute_ratio": (rocm_rows("pp"), implied),
    "metal_kv_read_scale": (metal_depth_rows, implied_depth_scale),
    "metal_expert_product_s": (metal_moe_rows, implied_nonnegative),
}
"""The factors of :class:`app.predict.speed.SpeedFactors` fitted to this table: field ->
(the rows it is fitted on, the value a row implies). Each is the median of the values its
rows imply (the other factors at their defaults); tests/app/test_speed_published.py
checks the defaults are."""


def fit(field: str, held_out: Row | None = None) -> float:
    """Return the median over the rows of ``FITS[field]`` (but ``held_out``) of the value
    each row implies: the fit on every row, or with ``held_out`` left out."""
    chosen, value = FITS[field]
    return statistics.median(value(r, field) for r in rows() if chosen(r) and r != held_out)


def leave_one_out(field: str) -> list[tuple[Row, float, float]]:
    """Return (row, value fitted without it, its error predicted with that value) for
    every row ``field`` is fitted on."""
    import dataclasses

    from app.predict.speed import SpeedFactors

    out = []
    for row in rows():
        if FITS[field][0](row):
            value = fit(field, held_out=row)
            f = dataclasses.replace(SpeedFactors(), **{field: value})
            out.append((row, value, predict(row, f) / row.tok_per_s - 1))
    return out


def print_fits() -> None:
    """Print each fitted factor, and each of its rows predicted with it left out."""
    from app.predict.speed import SpeedFactors

    for field in FITS:
        print(f"\n{field}: default {getattr(SpeedFactors(), field):.4g}, fit {fit(field):.4g}")
        print("\n| hardware | model | quant | test | implied | fit without it | error held out |")
        print("|---|---|---|---|--:|--:|--:|")
        held = leave_one_out(field)
        for row, value, err in held:
            print(
                f"| {row.hardware} | {row.model} | {row.quant} | {row.name} | "
                f"{FITS[field][1](row, field):.3g} | {value:.3g} | {100 * err:+.0f}% |"
            )
        ok = sum(1 for r, _v, e in held if abs(e) <= r.goal)
        med = statistics.median(abs(e) for _r, _v, e in held)
        print(f"\nheld out: {ok} of {len(held)} within goal, median |error| {100 * med:.0f}%")


def held_out_prediction(row: Row) -> float:
    """Return ``row`` predicted with every factor whose fit uses it refitted without it."""
    import dataclasses

    from app.predict.speed import SpeedFactors

    changes = {
        field: fit(field, held_out=row) for field, (chosen, _v) in FITS.items() if chosen(row)
    }
    return predict(row, dataclasses.replace(SpeedFactors(), **changes))


def print_held_out() -> None:
    """Print how many rows hold their goal with the shipped factors and held out."""
    for test, goal in (("tg", DECODE_GOAL), ("pp", PREFILL_GOAL)):
        chosen = [r for r in rows() if r.test == test]
        shipped = [abs(predict(r) / r.tok_per_s - 1) for r in chosen]
        held = [abs(held_out_prediction(r) / r.tok_per_s - 1) for r in chosen]
        print(
            f"{test}: shipped factors {sum(e <= goal for e in shipped)} of {len(chosen)} within "
            f"±{100 * goal:.0f}% (median {100 * statistics.median(shipped):.1f}%); each row "
            f"held out of the fits {sum(e <= goal for e in held)} of {len(chosen)} (median "
            f"{100 * statistics.median(held):.1f}%)"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--fit", action="store_true", help="the fitted factors, leave one out")
    args = ap.parse_args()
    if args.fit:
        print_fits()
        print()
        print_held_out()
        return
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
