"""Time this CPU's kernels for every weight type and attention kernel of the speed sweep.

Run: ``.venv/bin/python -m bench.bench_cpu_kernels --out KERNELS.json [--threads 1]
[--clock cpu] [--shapes-of FOLDER]``. Writes :class:`app.hardware.kernels.KernelRates` as
JSON: what :mod:`bench.bench_speed_model` reads with ``--kernels`` (the file of
docs/benchmarks.md, section users, is ``bench/data/cpu_kernels_1thread_*.json``).

The types are those of every quant level ``llama_model_quantize`` makes of the two demo
models (the 19 of :data:`TYPES`; TQ2_0 was missing from the first file, timed on
2026-12-01, so its files were priced by the bandwidth fallback), at 1–512 tokens
sharing a product; the types llama.cpp repacks on an AVX-512 CPU go into its
``CPU_REPACK`` buffer as in a loaded model; attention is timed for F16 and Q8_0 caches
with heads of 64 (SmolLM2) and 256 (Gemma 3), five rounds each (the median is kept). It
runs in a child process (:func:`runner.kernel_bench.kernel_bench`); about 17 minutes at
one thread on the 2-core EPYC of docs/benchmarks.md.

With ``--shapes-of FOLDER`` it also times the (type, row length) pairs the GGUF files of
FOLDER need, as the app times a model's own (:func:`app.predict.speed.kernel_needs`): a
product's cost per weight depends on its row length too, and the sweep's models have rows
of 576–2048 weights (SmolLM2's 576 and 1536, Gemma 3's 640, 1024 and 2048).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

TYPES = (
    "BF16", "F16", "F32", "IQ3_S", "IQ4_NL", "IQ4_XS", "Q1_0", "Q2_0", "Q3_K", "Q4_0",
    "Q4_1", "Q4_K", "Q5_0", "Q5_1", "Q5_K", "Q6_K", "Q8_0", "TQ1_0", "TQ2_0",
)  # fmt: skip
REPACK = ("Q4_0", "Q4_K", "IQ4_NL", "MXFP4")
ATTENTION = (("F16", 64), ("F16", 256), ("Q8_0", 64), ("Q8_0", 256))
TOKENS = (1, 2, 4, 8, 16, 64, 128, 512)


def main() -> None:
    from runner.kernel_bench import kernel_bench

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, type=Path)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clock", choices=("cpu", "wall"), default="cpu")
    ap.add_argument(
        "--repack",
        choices=("auto", "on", "off"),
        default="auto",
        help="weights in llama.cpp's AMX/CPU_REPACK buffers (auto: as ggtune plans here)",
    )
    ap.add_argument("--shapes-of", type=Path, default=None, metavar="FOLDER")
    args = ap.parse_args()
    if args.repack == "auto":
        from app.hardware.devices import Device
        from app.hardware.probe import local_cpu_flags
        from app.predict.estimate import repack_is_safe

        extra = repack_is_safe(Device("CPU", "host", None, cpu_flags=local_cpu_flags()))
    else:
        extra = args.repack == "on"
    if args.out.exists():
        sys.exit(f"{args.out} exists: give another name (nothing is overwritten)")
    shapes: list[tuple[str, int] | str] = list(TYPES)
    if args.shapes_of is not None:
        shapes += model_shapes(args.shapes_of, extra)
    rates = kernel_bench(
        shapes,
        n_tokens=TOKENS,
        n_threads=args.threads,
        repack=REPACK,
        rounds=5,
        clock=args.clock,
        attention=ATTENTION,
        attention_tokens=TOKENS,
        timeout_s=1800,
        extra_buffers=extra,
    )
    tmp = args.out.with_suffix(args.out.suffix + ".tmp")
    tmp.write_text(json.dumps(rates.to_dict(), indent=1))
    tmp.replace(args.out)
    print(
        f"{rates.seconds:.0f} s, {rates.node_us:.2f} µs per node, load {rates.loadavg}",
        file=sys.stderr,
    )


def model_shapes(folder: Path, extra_buffers: bool) -> list[tuple[str, int]]:
    """Return the (type, row length) pairs the GGUF files of ``folder`` need on this CPU with
    the default settings (not 2048 wide, which :data:`TYPES` times anyway)."""
    from app.hardware.devices import Device, Hardware
    from app.hardware.probe import local_cpu_flags
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec
    from app.predict.speed import kernel_needs
    from app.settings import Settings

    hw = Hardware(host=Device("CPU", "host", 24 * 2**30, cpu_flags=local_cpu_flags()))
    settings = Settings(repack=extra_buffers)
    found: set[tuple[str, int]] = set()
    for path in sorted(folder.glob("*.gguf")):
        try:
            spec = model_spec(read_model(path))
        except Exception as exc:  # a file the reader cannot read: say so, go on
            print(f"{path.name}: {exc}", file=sys.stderr)
            continue
        found |= kernel_needs(spec, settings, hw).shapes
    return sorted(s for s in found if s[1] != 2048 or s[0] not in TYPES)


if __name__ == "__main__":
    main()
