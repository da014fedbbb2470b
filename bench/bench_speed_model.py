"""Judge the speed model against the load-test sweep: uncalibrated and calibrated errors.

Run: ``.venv/bin/python -m bench.bench_speed_model --sweep /tmp/sweep.jsonl
--kernels /tmp/kernels.json [--clock cpu|wall] [--markdown]``. The sweep and kernels of
docs/benchmarks.md (section "users") are kept in ``bench/data/`` (``.xz`` is read as is).

``--sweep`` holds the runs of :mod:`bench.bench_users_sweep` (every quant level of both
demo models, depths 0/1024/4096, 1/2/4/8 users); ``--kernels`` the CPU kernel rates of
:func:`runner.kernel_bench.kernel_bench` measured on the same machine, thread count and
clock. For each run the measured figures are

* **decode**: each user's tok/s with N users decoding together, from the median step of
  the round (one token for each of N users, no prompt in the batch);
* **TTFT**: the first step of a round: the N users' 64-token prompts after ``depth``
  cached tokens, prefilled in one batch, until their first tokens;
* **prefill**: the depth fill's batches (up to 2048 tokens each).

``--clock cpu`` takes the engine's CPU time per step (1 thread: what the step costs without
waiting for a core another process holds), ``wall`` the elapsed time.

The prediction is :func:`app.predict.speed.decode_step_s` / :func:`prefill_s` with the
host's kernels — **uncalibrated**: the kernel rates only, no run of any model;
**calibrated (leave one file out)**: the kernel, attention and node scales, the
per-weight-type and per-attention-kernel scales fitted by
:func:`app.predict.speed.calibrate` to every other file's runs of this machine, the file
itself held out; **calibrated (leave one model
out)**: fitted to the other model's runs only.
"""

from __future__ import annotations

import argparse
import itertools
import json
import lzma
import math
import statistics
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from app.hardware.devices import Device, Hardware
from app.hardware.kernels import KernelRates
from app.measured.users_result import measurements_from_users_record
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.speed import SpeedFactors, SpeedMeasurement, calibrate, predict_measurement


@dataclass(frozen=True)
class Point:
    """One measured figure and what it was measured on."""

    file: str
    model: str
    quant: str
    what: str  # decode | ttft | prefill
    depth: int
    n_users: int
    measured: float  # tok/s (decode, prefill) or seconds (ttft)
    measurement: SpeedMeasurement
    loadavg: float


def read_text(path: Path) -> str:
    """Return a text file's contents, decompressed where it ends in ``.xz`` (bench/data)."""
    if path.suffix == ".xz":
        return lzma.decompress(path.read_bytes()).decode()
    return path.read_text()


def read_records(paths: Sequence[Path]) -> list[dict[str, Any]]:
    """Return the runs of the sweep files ``paths``, one JSON object per line; exit with
    a message naming the file and line where one is missing or not a run."""
    out = []
    for path in paths:
        try:
            text = read_text(path)
        except (OSError, lzma.LZMAError) as exc:
            sys.exit(f"{path}: cannot read the sweep: {exc}")
        for no, line in enumerate(text.splitlines(), 1):
            try:
                record = json.loads(line)
            except json.JSONDecodeError as exc:
                sys.exit(f"{path}:{no}: not a sweep run (cut short or edited?): {exc}")
            if not isinstance(record, dict) or not {"file", "n_threads"} <= record.keys():
                sys.exit(f"{path}:{no}: not a sweep run: it has no file or n_threads")
            out.append(record)
    return out


def points_of(
    record: dict[str, Any], spec: ModelSpec, hw: Hardware, clock: str, *, rounds: bool = False
) -> list[Point]:
    """Return the measured points of one sweep run (see the module doc): with repetitions,
    one point per figure, the median of its rounds (the lower middle one for an even
    count); ``rounds``: every round's point instead."""
    file = record["file"]
    model, _, quant = file.removesuffix(".gguf").rpartition("-")
    load = (record.get("loadavg_before") or [math.nan])[0]
    n_prompt = int(record["plan"]["n_prompt"])
    out: list[Point] = []
    for m in measurements_from_users_record(
        record, spec, hw, model_key=file, clock="cpu" if clock == "cpu" else "wall"
    ):
        if m.kind == "tg":
            out.append(
                Point(file, model, quant, "decode", m.depth, m.n_users, m.tok_per_s, m, load)
            )
        elif m.n_tokens == n_prompt:
            ttft = m.n_tokens / m.tok_per_s
            out.append(Point(file, model, quant, "ttft", m.depth, m.n_users, ttft, m, load))
        else:
            out.append(Point(file, model, quant, "prefill", m.depth, 1, m.tok_per_s, m, load))
    return out if rounds else median_rounds(out)


def _round_groups(points: Sequence[Point]) -> list[list[Point]]:
    """Return ``points`` (one run's) grouped by figure: (what, depth, users, tokens)."""
    groups: dict[tuple[str, int, int, int], list[Point]] = {}
    for p in points:
        key = (p.what, p.depth, p.n_users, p.measurement.n_tokens)
        groups.setdefault(key, []).append(p)
    return list(groups.values())


def _median_point(group: Sequence[Point]) -> Point:
    """Return the point of ``group`` whose measurement is the median
    (``statistics.median_low``: the lower middle one for an even count)."""
    middle = statistics.median_low(p.measured for p in group)
    return next(p for p in group if p.measured == middle)


def median_rounds(points: Sequence[Point]) -> list[Point]:
    """Return one point per (figure, depth, users, tokens) of ``points``: the median
    measurement of its repetitions, in first-seen order."""
    return [_median_point(group) for group in _round_groups(points)]


def round_spread(points: Sequence[Point]) -> dict[str, list[float]]:
    """Return per figure (decode, ttft) how far each other round of one run's
    repetitions lies from the run's median round (signed, other / median − 1).

    What a prediction that knew each figure's median exactly would still show against a
    single round: the noise floor of one round on this machine, in the errors' units."""
    out: dict[str, list[float]] = {}
    for group in _round_groups(points):
        if len(group) < 2:
            continue
        chosen = _median_point(group)
        out.setdefault(chosen.what, []).extend(
            p.measured / chosen.measured - 1.0 for p in group if p is not chosen
        )
    return out


def predicted(p: Point, factors: SpeedFactors) -> float:
    """Return the prediction for ``p`` in its unit (tok/s, or seconds for TTFT)."""
    tps = predict_measurement(p.measurement, factors)
    return p.measurement.n_tokens / tps if p.what == "ttft" else tps


def error(p: Point, value: float) -> float:
    """Signed relative error of a prediction against the measurement."""
    return value / p.measured - 1.0


def summary(errors: Sequence[float]) -> str:
    """Median |error|, the spread (p10/p90 of the signed error) and the share within 25 %."""
    if not errors:
        return "no points"
    absolute = sorted(abs(e) for e in errors)
    signed = sorted(errors)

    def pct(xs: Sequence[float], q: float) -> float:
        k = (len(xs) - 1) * q
        lo = math.floor(k)
        hi = min(lo + 1, len(xs) - 1)
        return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)

    within = sum(1 for e in absolute if e <= 0.25) / len(absolute)
    within10 = sum(1 for e in absolute if e <= 0.10) / len(absolute)
    return (
        f"median |error| {100 * statistics.median(absolute):.1f}%, p90 |error| "
        f"{100 * pct(absolute, 0.9):.1f}%, signed p10…p90 {100 * pct(signed, 0.1):+.0f}%…"
        f"{100 * pct(signed, 0.9):+.0f}%, within 10%: {100 * within10:.0f}%, within 25%: "
        f"{100 * within:.0f}% ({len(errors)} points)"
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sweep", required=True, type=Path, nargs="+", help="one or more sweeps")
    ap.add_argument("--kernels", required=True, type=Path)
    ap.add_argument("--quants", type=Path, default=None)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument("--calibrate", action="store_true", help="also the calibrated errors")
    ap.add_argument("--rows", action="store_true", help="print every point")
    ap.add_argument("--markdown", action="store_true", help="the tables of docs/benchmarks.md")
    args = ap.parse_args()
    from bench.bench_users_sweep import quants_dir

    folder = args.quants or quants_dir()
    rates = KernelRates.from_dict(json.loads(read_text(args.kernels)))
    from app.hardware.probe import local_cpu_flags

    host = Device("CPU", "host", 24 * 2**30, cpu_flags=local_cpu_flags(), kernels=rates)
    hw = Hardware(host=host)
    specs: dict[str, ModelSpec] = {}
    points: list[Point] = []
    spread: dict[str, list[float]] = {}
    for record in read_records(args.sweep):
        if int(record["n_threads"]) != rates.n_threads:
            continue
        f = record["file"]
        if f not in specs:
            try:
                specs[f] = model_spec(read_model(folder / f))
            except Exception as exc:  # a file the reader cannot read: say so, go on
                print(f"{f}: {exc}", file=sys.stderr)
                continue
        every = points_of(record, specs[f], hw, args.clock, rounds=True)
        points += median_rounds(every)
        for what, values in round_spread(every).items():
            spread.setdefault(what, []).extend(values)
    base = SpeedFactors()
    regimes: dict[str, dict[int, float]] = {"uncalibrated": {}}
    for i, p in enumerate(points):
        regimes["uncalibrated"][i] = error(p, predicted(p, base))
    print(f"{len(points)} points from {len(specs)} files; kernels: {rates.n_threads} thread(s), "
          f"clock {rates.clock}, measured {rates.measured_at}", file=sys.stderr)  # fmt: skip
    if args.calibrate:
        lofo: dict[int, float] = {}
        for f in sorted(specs):
            fit = calibrate([p.measurement for p in points if p.file != f])
            for i, p in enumerate(points):
                if p.file == f:
                    lofo[i] = error(p, predicted(p, fit))
        regimes["calibrated, leave one file out"] = lofo
        lomo: dict[int, float] = {}
        for model in sorted({p.model for p in points}):
            fit = calibrate([p.measurement for p in points if p.model != model])
            kernels = ", ".join(f"{k} ×{v:.2f}" for k, v in fit.host_attention_scales)
            print(f"fitted without {model}: kernel ×{fit.host_kernel_scale:.2f}, attention "
                  f"×{fit.host_attention_scale:.2f} ({kernels}), nodes "
                  f"×{fit.host_node_scale:.2f}", file=sys.stderr)  # fmt: skip
            for i, p in enumerate(points):
                if p.model == model:
                    lomo[i] = error(p, predicted(p, fit))
        regimes["calibrated, leave one model out"] = lomo
    for what in ("decode", "ttft"):
        if spread.get(what):
            a = [abs(e) for e in spread[what]]
            print(f"noise floor, {what}: one round against its run's median round: median "
                  f"{100 * statistics.median(a):.1f}%, p75 {100 * _pct(a, 0.75):.1f}%, "
                  f"p90 {100 * _pct(a, 0.9):.1f}% ({len(a)} rounds)", file=sys.stderr)  # fmt: skip
    if args.rows:
        for i, p in enumerate(points):
            errs = ", ".join(f"{k}: {100 * v[i]:+.0f}%" for k, v in regimes.items())
            print(f"{p.file} {p.what} d{p.depth} n{p.n_users}: measured {p.measured:.3g} ({errs})")
    if args.markdown:
        print_markdown(points, regimes)
    else:
        for name, errs in regimes.items():
            for what in ("decode", "ttft", "prefill"):
                e = [errs[i] for i, p in enumerate(points) if p.what == what]
                print(f"{name} {what}: {summary(e)}")


def _pct(xs: Sequence[float], q: float) -> float:
    xs = sorted(xs)
    k = (len(xs) - 1) * q
    lo = math.floor(k)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (k - lo)


def _row(errs: Sequence[float]) -> str:
    a = [abs(e) for e in errs]
    if not a:
        return "| – | – | – | – | – | – |"
    w10 = sum(1 for x in a if x <= 0.10) / len(a)
    w25 = sum(1 for x in a if x <= 0.25) / len(a)
    return (
        f"| {100 * statistics.median(a):.1f}% | {100 * _pct(a, 0.75):.1f}% | "
        f"{100 * _pct(a, 0.9):.1f}% | {100 * max(a):.0f}% | {100 * w10:.0f}% | {100 * w25:.0f}% |"
    )


BINS = (-0.5, -0.25, -0.1, -0.05, 0.0, 0.05, 0.1, 0.25, 0.5)


def _histogram(errs: Sequence[float]) -> str:
    edges = (-math.inf, *BINS, math.inf)
    counts = [sum(1 for e in errs if lo <= e < hi) for lo, hi in itertools.pairwise(edges)]
    return " | ".join(str(c) for c in counts)


def print_markdown(points: Sequence[Point], regimes: dict[str, dict[int, float]]) -> None:
    """Print the distributions as the tables of docs/benchmarks.md."""
    whats = (("decode", "decode tok/s each"), ("ttft", "time to first token"),
             ("prefill", "prefill tok/s (depth fill)"))  # fmt: skip
    print(r"| figure | predictions | points | median \|error\| | p75 | p90 | worst | "
          "within 10% | within 25% |")  # fmt: skip
    print("|---|---|--:|--:|--:|--:|--:|--:|--:|")
    for what, title in whats:
        for name, errs in regimes.items():
            e = [errs[i] for i, p in enumerate(points) if p.what == what]
            print(f"| {title} | {name} | {len(e)} {_row(e)}")
    print()
    labels = ["< -50%", "-50…-25%", "-25…-10%", "-10…-5%", "-5…0%", "0…5%", "5…10%",
              "10…25%", "25…50%", "> 50%"]  # fmt: skip
    print("Signed error (predicted / measured − 1), points per bin:\n")
    print("| figure | predictions | " + " | ".join(labels) + " |")
    print("|---|---|" + "--:|" * len(labels))
    for what, title in whats:
        for name, errs in regimes.items():
            e = [errs[i] for i, p in enumerate(points) if p.what == what]
            print(f"| {title} | {name} | {_histogram(e)} |")
    print()
    names = list(regimes)
    for key, label in (("n_users", "users"), ("depth", "depth")):
        print(f"Median |error| by {label}:\n")
        print(f"| {label} | points | " + " | ".join(f"decode: {n}" for n in names) + " | "
              + " | ".join(f"TTFT: {n}" for n in names) + " |")  # fmt: skip
        print("|--:|--:|" + "--:|" * (2 * len(names)))
        values = sorted({_group(p, key) for p in points})
        for v in values:
            cells = []
            for what in ("decode", "ttft"):
                for errs in regimes.values():
                    e = [abs(errs[i]) for i, p in enumerate(points)
                         if p.what == what and _group(p, key) == v]  # fmt: skip
                    cells.append(f"{100 * statistics.median(e):.1f}%" if e else "–")
            n = sum(1 for p in points if p.what == "decode" and _group(p, key) == v)
            print(f"| {v} | {n} | " + " | ".join(cells) + " |")
        print()
    print("Per file (median signed error of its decode / TTFT points):\n")
    print("| model | quant | " + " | ".join(f"decode: {n}" for n in names) + " | "
          + " | ".join(f"TTFT: {n}" for n in names) + " |")  # fmt: skip
    print("|---|---|" + "--:|" * (2 * len(names)))
    for f in sorted({p.file for p in points}):
        first = next(p for p in points if p.file == f)
        cells = []
        for what in ("decode", "ttft"):
            for errs in regimes.values():
                e = [errs[i] for i, p in enumerate(points) if p.file == f and p.what == what]
                med = statistics.median(e) if e else math.nan
                cells.append(f"{100 * med:+.0f}%")
        print(f"| {first.model} | {first.quant} | " + " | ".join(cells) + " |")


def _group(p: Point, key: str) -> int:
    if key == "n_users":
        return p.n_users
    return p.measurement.depth if p.what != "decode" else _depth_bucket(p.measurement.depth)


def _depth_bucket(depth: int) -> int:
    """The sweep's depth a decode point belongs to (its steps sit a little deeper)."""
    for bucket, below in ((0, 512), (1024, 1536), (2048, 3072)):
        if depth < below:
            return bucket
    return 4096


if __name__ == "__main__":
    main()
