"""Hostile GGUF files: what a header may cost, shard counts from a name, unreadable files.

The parsing-cost tests run the reader in a child process under resource limits (an
address-space limit and a CPU-time limit set after the imports), not under a wall clock:
a header may cost at most :data:`MEM_PER_BYTE` bytes of memory and :data:`CPU_PER_BYTE`
seconds of CPU per header byte, on top of :data:`MEM_BASE` and :data:`CPU_BASE`. Headers
are the most costly the reader's limits allow (tests/hostile_gguf.py ``WORST``) and the
review audit's three (``AUDIT``: 2M zero-size tensors, 100 MiB of small arrays, 2^30
empty strings in a sparse 8 GiB file), which took 15 s / 868 MiB, 2.4 s / 822 MiB and
more than 40 s before the limits.
"""

from __future__ import annotations

import json
import os
import struct
import subprocess
import sys
from pathlib import Path

import pytest

from app.errors import LimitExceededError, SplitModelError, UnreadableFileError
from app.model.gguf_reader import MAX_HEADER_BYTES, read_header, read_model
from tests.hostile_gguf import AUDIT, WORST

ROOT = Path(__file__).resolve().parents[2]

MEM_BASE = 48 << 20
MEM_PER_BYTE = 2.0
CPU_BASE = 1.0
CPU_PER_BYTE = 50e-9

_CHILD = r"""
import json, math, os, resource, sys, time
from app.errors import GGTuneError
from app.model.gguf_reader import MAX_HEADER_BYTES, read_header
from app.model.spec import model_spec

path, mem_base, mem_per_byte, cpu_base, cpu_per_byte = sys.argv[1:6]
header_bytes = min(os.path.getsize(path), MAX_HEADER_BYTES)
pages = int(open("/proc/self/statm").read().split()[0])
vm_now = pages * os.sysconf("SC_PAGE_SIZE")
mem = int(mem_base) + int(float(mem_per_byte) * header_bytes)
def limit(kind, value):
    hard = resource.getrlimit(kind)[1]
    soft = value if hard == resource.RLIM_INFINITY else min(value, hard)
    resource.setrlimit(kind, (soft, hard))

limit(resource.RLIMIT_AS, vm_now + mem)
used = resource.getrusage(resource.RUSAGE_SELF)
cpu = used.ru_utime + used.ru_stime + float(cpu_base) + float(cpu_per_byte) * header_bytes
limit(resource.RLIMIT_CPU, math.ceil(cpu))
try:
    header = read_header(path)
    model_spec(header)
    outcome = "read"
except GGTuneError as err:
    outcome = str(err)
print(json.dumps({"outcome": outcome, "header_bytes": header_bytes}))
"""


def run_limited(path: Path) -> dict[str, object]:
    """Read ``path``'s header in a child under the budget; return what it printed."""
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            _CHILD,
            str(path),
            str(MEM_BASE),
            str(MEM_PER_BYTE),
            str(CPU_BASE),
            str(CPU_PER_BYTE),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (
        f"over budget (exit {proc.returncode}; -24 is SIGXCPU, MemoryError is memory): "
        f"{proc.stderr[-600:]}"
    )
    result: dict[str, object] = json.loads(proc.stdout)
    return result


@pytest.fixture(scope="module")
def hostile_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("hostile-gguf")


@pytest.mark.skipif(sys.platform != "linux", reason="reads /proc/self/statm, sets rlimits")
@pytest.mark.parametrize("name", [*WORST, *AUDIT])
def test_a_header_costs_at_most_its_budget_per_byte(hostile_dir: Path, name: str) -> None:
    path = hostile_dir / (name.replace(" ", "_").replace("/", "_") + ".gguf")
    if not path.exists():
        {**WORST, **AUDIT}[name](path)
    result = run_limited(path)
    assert "\n" not in str(result["outcome"])


def test_a_header_past_the_limit_names_the_limit(tmp_path: Path) -> None:
    path = tmp_path / "strings.gguf"
    AUDIT["2^30 empty strings (8 GiB, sparse)"](path)
    with pytest.raises(LimitExceededError) as caught:
        read_header(path)
    assert f"larger than {MAX_HEADER_BYTES >> 20} MiB" in caught.value.detail
    assert "byte" not in str(caught.value)


def test_real_models_stay_well_inside_the_limits(gemma_path: Path, smollm_path: Path) -> None:
    for path in (gemma_path, smollm_path):
        header = read_header(path)
        assert header.data_offset < MAX_HEADER_BYTES // 8


# --------------------------------------------------------------------------- finding 4


def _shard(path: Path, no: int, count: int) -> None:
    """Write a tiny GGUF that says it is shard ``no`` (0-based) of ``count``."""

    def kv(key: bytes, vtype: int, value: bytes) -> bytes:
        return struct.pack("<Q", len(key)) + key + struct.pack("<I", vtype) + value

    body = kv(b"general.architecture", 8, struct.pack("<Q", 5) + b"llama")
    body += kv(b"split.no", 2, struct.pack("<H", no))
    body += kv(b"split.count", 2, struct.pack("<H", min(count, 65535)))
    if count > 65535:
        body = kv(b"general.architecture", 8, struct.pack("<Q", 5) + b"llama")
        body += kv(b"split.no", 4, struct.pack("<I", no))
        body += kv(b"split.count", 4, struct.pack("<I", count))
    data = b"GGUF" + struct.pack("<IQQ", 3, 0, 3) + body
    path.write_bytes(data + bytes(-len(data) % 32))


@pytest.mark.parametrize("count", [1_000_000_000, 1_000_000])
def test_a_huge_shard_count_is_refused_before_any_sibling_is_named(
    tmp_path: Path, count: int
) -> None:
    path = tmp_path / f"x-00001-of-{count:05d}.gguf"
    _shard(path, 0, count)
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            "import resource, sys\n"
            "for kind, value in ((resource.RLIMIT_AS, 2 << 30), (resource.RLIMIT_CPU, 20)):\n"
            "    hard = resource.getrlimit(kind)[1]\n"
            "    resource.setrlimit(kind, (min(value, hard) if hard > 0 else value, hard))\n"
            "from app.errors import SplitModelError\n"
            "from app.model.gguf_reader import read_model\n"
            "try:\n    read_model(sys.argv[1])\nexcept SplitModelError as err:\n    print(err)\n",
            str(path),
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-500:]
    assert f"{count} shards" in proc.stdout


def test_missing_shards_are_named_five_at_most(tmp_path: Path) -> None:
    path = tmp_path / "m-00001-of-00009.gguf"
    _shard(path, 0, 9)
    with pytest.raises(SplitModelError, match="missing 8 of 9 shards") as caught:
        read_model(path)
    assert "and 3 more" in str(caught.value)


# --------------------------------------------------------------------------- finding 11


def test_a_file_that_cannot_be_read_is_one_line() -> None:
    if not os.path.exists("/proc/self/mem"):
        pytest.skip("needs a file whose read fails (/proc/self/mem)")
    with pytest.raises(UnreadableFileError) as caught:
        read_header("/proc/self/mem")
    assert "\n" not in str(caught.value)
    assert "cannot read" in str(caught.value)


def test_a_file_without_read_permission_is_one_line(tmp_path: Path) -> None:
    if os.geteuid() == 0:
        pytest.skip("root reads any file")
    path = tmp_path / "m.gguf"
    path.write_bytes(b"GGUF")
    path.chmod(0)
    with pytest.raises(UnreadableFileError, match="permission"):
        read_model(path)
