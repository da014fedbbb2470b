"""Measure this machine's host memory bandwidth the way ``ggtune hw`` does, several times.

Run ``python -m bench.bench_hardware`` (or ``python bench/bench_hardware.py``) from the
repository root; ``--repeats N`` sets how many fresh measurements are taken (default 5).
Each is :func:`app.hardware.bandwidth.measure_host_bandwidth` (≤ 2 s: a multi-threaded numpy
copy of a 256 MiB array, bytes read + written per second, best round) and is neither read
from nor written to the cache. Prints the markdown for docs/benchmarks.md's hardware section.
"""

from __future__ import annotations

import argparse
import platform
import statistics
import sys
import time
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `app` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from app.hardware.bandwidth import measure_host_bandwidth
from app.hardware.host import probe_host


def main(argv: list[str] | None = None) -> int:
    """Print the hardware section; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5, help="fresh measurements to take")
    args = parser.parse_args(argv)
    host = probe_host()
    rows = []
    for _ in range(args.repeats):
        start = time.perf_counter()
        gb_per_s, nbytes, rounds, threads = measure_host_bandwidth()
        rows.append((gb_per_s, time.perf_counter() - start, rounds, threads, nbytes))
    speeds = [r[0] for r in rows]
    ram = (host.ram_total_bytes or 0) / 1024**3
    print(
        f"Host memory bandwidth, {time.strftime('%Y-%m-%d')}: {host.cpu_model or 'unknown CPU'}, "
        f"{host.physical_cores} cores / {host.logical_cores} threads, {ram:.1f} GiB RAM, "
        f"{platform.system()} {platform.machine()}. `python -m bench.bench_hardware "
        f"--repeats {args.repeats}`: each run is one `ggtune hw` measurement (numpy copy of "
        f"{rows[0][4] // 2**20} MiB over {rows[0][3]} threads, read + written bytes, best round)."
    )
    print()
    print("| run | GB/s | wall s | rounds |")
    print("|----:|-----:|-------:|-------:|")
    for i, (gb, wall, rounds, _threads, _n) in enumerate(rows, start=1):
        print(f"| {i} | {gb:.1f} | {wall:.2f} | {rounds} |")
    print()
    print(
        f"median {statistics.median(speeds):.1f} GB/s, range {min(speeds):.1f}–"
        f"{max(speeds):.1f} GB/s; the longest run took {max(r[1] for r in rows):.2f} s."
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
