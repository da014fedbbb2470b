"""What hostile GGUF headers cost read_header: CPU time and peak memory, one child each.

Run ``python -m bench.bench_hostile_headers`` from the repository root. Each header of
tests/hostile_gguf.py (``WORST``: as costly as the reader's limits allow; ``AUDIT``: the
review audit's three) and the two real models is read in a fresh child process, which
reports its CPU seconds and the growth of its peak RSS (VmHWM, Linux) over the imports.
Prints a markdown table: header, header bytes read (at most ``MAX_HEADER_BYTES``),
outcome, CPU s, peak MiB, and the cost per header byte. The budget that
tests/app/test_hostile_gguf.py enforces under rlimits is 48 MiB + 2 bytes and 1 s + 50 ns
of CPU per header byte.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

if __package__ in (None, ""):  # run as a script: make `app` and `tests` importable
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.hostile_gguf import AUDIT, WORST

ROOT = Path(__file__).resolve().parent.parent
MODELS_DIR = Path.home() / ".cache" / "ggtune" / "models"
REAL = ("gemma-3-270m-q4_k_m.gguf", "SmolLM2-135M-Instruct.Q4_1.gguf")

_CHILD = r"""
import json, os, resource, sys
from app.errors import GGTuneError
from app.model.gguf_reader import MAX_HEADER_BYTES, read_header

def hwm_kib():  # VmHWM starts afresh at exec; ru_maxrss would carry the parent's peak
    for line in open("/proc/self/status"):
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0

path = sys.argv[1]
before = resource.getrusage(resource.RUSAGE_SELF)
t0 = before.ru_utime + before.ru_stime
peak0 = hwm_kib()
header_bytes = min(os.path.getsize(path), MAX_HEADER_BYTES)
try:
    h = read_header(path)
    outcome = f"read ({len(h.tensors):,} tensors, {len(h.metadata):,} keys)"
    header_bytes = h.data_offset
except GGTuneError as err:
    outcome = type(err).__name__
after = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({
    "outcome": outcome,
    "cpu_s": after.ru_utime + after.ru_stime - t0,
    "peak_growth_kib": hwm_kib() - peak0,
    "header_bytes": header_bytes,
}))
"""


def measure(path: Path, timeout_s: float) -> dict[str, object]:
    """Read ``path`` in a child; return what it measured (or the timeout)."""
    try:
        proc = subprocess.run(
            [sys.executable, "-c", _CHILD, str(path)],
            cwd=ROOT,
            capture_output=True,
            text=True,
            timeout=timeout_s,
            check=True,
        )
    except subprocess.TimeoutExpired:
        return {"outcome": f"still running after {timeout_s:g} s"}
    result: dict[str, object] = json.loads(proc.stdout)
    return result


def main(argv: list[str] | None = None) -> int:
    """Print the table; return the exit status."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per header")
    args = parser.parse_args(argv)
    print("| header | header bytes | outcome | CPU s | peak +MiB | ns/byte | bytes/byte |")
    print("|---|---:|---|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        cases: list[tuple[str, Path]] = []
        for name, build in {**WORST, **AUDIT}.items():
            path = Path(tmp) / (name.replace(" ", "_").replace("/", "_") + ".gguf")
            build(path)
            cases.append((name, path))
        cases += [(f"real: {n}", MODELS_DIR / n) for n in REAL if (MODELS_DIR / n).is_file()]
        for name, path in cases:
            r = measure(path, args.timeout)
            if "cpu_s" not in r:
                print(f"| {name} | | {r['outcome']} | | | | |")
                continue
            n = int(str(r["header_bytes"])) or 1
            cpu = float(str(r["cpu_s"]))
            mib = int(str(r["peak_growth_kib"])) / 1024
            print(
                f"| {name} | {n:,} | {r['outcome']} | {cpu:.2f} | {mib:.0f} | "
                f"{cpu * 1e9 / n:.0f} | {mib * 2**20 / n:.2f} |"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main())
