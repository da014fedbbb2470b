"""The quant agreement table: the simulation beside llama.cpp's quantizer, every file type.

Run: ``.venv/bin/python -m bench.bench_quant > /tmp/quant.md`` (about 15 minutes on two
cores: the IQ types are slow to make). ``--models smollm,gemma,zoo`` picks the models,
``--no-imatrix`` skips the second run, with an importance matrix of ones, of the types
that need one (very slow on the real models).

Every model is quantized with ``llama_model_quantize`` (allow_requantize, 2 threads) to
every file type of app.model.quant.FILE_TYPES; the file is read back and each tensor's type and
size compared with app.model.quant.simulate_quant. Prints markdown for docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path

from app.model.quant import QuantFailure
from app.sources.demo_models import ensure_demo_models
from tests.runner.quant_check import Agreement, run_matrix
from tests.zoo import ZOO, write_model

MIB = 1024 * 1024


def outcome(a: Agreement) -> str:
    """Describe what llama.cpp did, and whether the simulation said so."""
    sim = a.simulated
    if a.error is not None:
        predicted = isinstance(sim, QuantFailure) or sim.needs_imatrix
        why = "needs imatrix" if "imatrix" in a.error else "no fallback type"
        return f"refused ({why}){'' if predicted else ' — NOT PREDICTED'}"
    if a.mismatches:
        return f"{len(a.mismatches)} tensors differ"
    return "same types and sizes" + (" (types from log)" if a.sizes_from == "log" else "")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", default="smollm,gemma,zoo")
    parser.add_argument("--no-imatrix", action="store_true")
    args = parser.parse_args()
    chosen = set(args.models.split(","))
    demo = ensure_demo_models()
    work = Path(tempfile.mkdtemp(prefix="ggtune-quant-"))
    models: dict[str, tuple[Path, bool]] = {}
    if "smollm" in chosen:
        models["SmolLM2-135M Q4_1"] = (demo.smollm, not args.no_imatrix)
    if "gemma" in chosen:
        models["Gemma-3 270M Q4_K_M"] = (demo.gemma, not args.no_imatrix)
    if "zoo" in chosen:
        for name in ZOO:
            models[f"zoo {name}"] = (write_model(name, work), True)
    print(
        f"machine: {platform.machine()}, {platform.processor() or '?'}; "
        f"{time.strftime('%Y-%m-%d')}",
        file=sys.stderr,
    )
    summary: list[str] = []
    for label, (path, with_imatrix) in models.items():
        start = time.perf_counter()
        results = run_matrix(path, work, with_imatrix=with_imatrix)
        wall = time.perf_counter() - start
        agree = sum(a.agrees for a in results)
        made = [a for a in results if a.error is None]
        worst = max((abs(a.file_error) for a in made), default=0.0)
        summary.append(
            f"| {label} | {agree}/{len(results)} | {len(made)} | {worst * 100:.4f}% | {wall:.0f} |"
        )
        print(f"\n#### {label}\n")
        print("| file type | imatrix | simulated MiB | llama.cpp MiB | bpw | result | s |")
        print("|---|---|---:|---:|---:|---|---:|")
        for a in results:
            sim = a.simulated
            sim_mib = f"{sim.file_bytes / MIB:.2f}" if not isinstance(sim, QuantFailure) else "—"
            bpw = f"{sim.bits_per_weight:.2f}" if not isinstance(sim, QuantFailure) else "—"
            got = f"{a.file_bytes / MIB:.2f}" if a.file_bytes is not None else "—"
            print(
                f"| {a.file_type.name} | {a.imatrix} | {sim_mib} | {got} | {bpw} | "
                f"{outcome(a)} | {a.seconds:.1f} |"
            )
            for m in a.mismatches[:5]:
                print(f"|  | | | | | {m} | |")
        sys.stdout.flush()
    print("\n#### Summary\n")
    print("| model | runs as predicted | files made | worst file size error | s |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(summary))


if __name__ == "__main__":
    main()
