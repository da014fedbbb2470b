"""Time read_header against gguf.GGUFReader on the real test models.

Run ``python -m bench.bench_header`` (or ``python bench/bench_header.py``) from the
repository root; ``--runs N`` sets how many times read_header runs per model (the median is
reported), ``--skip-gguf-reader`` leaves out the slow reference (about 22 s on Gemma 3 270M).
Prints a markdown table: model, header bytes (where the tensor data starts), tensors,
read_header's median in ms, GGUFReader's single run in s.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `app` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.model.gguf_reader import read_header

MODELS_DIR = Path.home() / ".cache" / "ggtune" / "models"
MODELS = ("gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")


def time_read_header(path: Path, runs: int) -> tuple[float, float]:
    """Return (median, fastest) wall time of read_header(path) over ``runs`` runs, in ms."""
    read_header(path)  # warm the OS page cache first: we time parsing, not the disk
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        read_header(path)
        times.append((time.perf_counter() - start) * 1e3)
    return statistics.median(times), min(times)


def time_gguf_reader(path: Path) -> float:
    """Return the wall time of one gguf.GGUFReader(path), in s."""
    from gguf import GGUFReader  # only the benchmark needs it

    start = time.perf_counter()
    GGUFReader(path)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    """Print the benchmark table; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=21, help="read_header runs per model")
    parser.add_argument("--models-dir", type=Path, default=MODELS_DIR)
    parser.add_argument("--skip-gguf-reader", action="store_true")
    args = parser.parse_args(argv)

    rows = []
    for name in MODELS:
        path = args.models_dir / name
        if not path.is_file():
            print(f"missing {path}", file=sys.stderr)
            continue
        header = read_header(path)
        median_ms, best_ms = time_read_header(path, args.runs)
        reference = "-" if args.skip_gguf_reader else f"{time_gguf_reader(path):.2f}"
        rows.append(
            f"| {name} | {header.data_offset:,} | {len(header.tensors)} "
            f"| {median_ms:.1f} (best {best_ms:.1f}) | {reference} |"
        )
    print(f"read_header: median of {args.runs} runs after one warm-up; GGUFReader: one run\n")
    print("| model | header bytes | tensors | ggtune ms | GGUFReader s |")
    print("|---|---:|---:|---:|---:|")
    print("\n".join(rows))
    return 0 if rows else 1


if __name__ == "__main__":
    sys.exit(main())
