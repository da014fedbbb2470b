"""The host's memory bandwidth: measured once (≤ 2 s, a multi-threaded numpy copy), cached.

The cache holds one measurement per machine (:func:`machine_key`) in ggtune's cache folder;
a damaged cache entry is measured again.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import platform
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

from app.errors import StateFileError
from app.hardware.report import (
    BANDWIDTH_ARRAY_BYTES,
    BANDWIDTH_SECONDS,
    BandwidthMeasurement,
    HostInfo,
)
from app.state_files import load_json
from app.units import MIB


def measure_host_bandwidth(
    *,
    seconds: float = BANDWIDTH_SECONDS,
    array_bytes: int | None = None,
    threads: int | None = None,
) -> tuple[float, int, int, int]:
    """Return (GB/s, array bytes, rounds, threads): the best round of copying a large array.

    Each round copies ``array_bytes`` with ``np.copyto`` split over ``threads`` threads
    (numpy releases the GIL for plain copies), counting bytes read + written, like STREAM's
    "copy". Rounds repeat until ``seconds`` after the start, allocation included (at least
    two rounds). The array shrinks on machines with little free memory (≤ 1/8 of what is
    available, ≥ 16 MiB).
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import psutil

    deadline = time.perf_counter() + seconds

    if array_bytes is None:
        available = int(psutil.virtual_memory().available)
        array_bytes = max(16 * MIB, min(BANDWIDTH_ARRAY_BYTES, available // 8))
    threads = threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    n = array_bytes // 8
    src = np.ones(n, dtype=np.float64)  # ones, not empty: every page is touched now
    dst = np.zeros(n, dtype=np.float64)
    dst[:] = 2.0
    bounds = [(n * k // threads, n * (k + 1) // threads) for k in range(threads)]

    def copy_slice(b: tuple[int, int]) -> None:
        np.copyto(dst[b[0] : b[1]], src[b[0] : b[1]])

    best = 0.0
    rounds = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ggtune-bw") as pool:
        while rounds < 2 or time.perf_counter() < deadline:
            start = time.perf_counter()
            list(pool.map(copy_slice, bounds))
            elapsed = time.perf_counter() - start
            rounds += 1
            if elapsed > 0:
                best = max(best, 2 * n * 8 / elapsed / 1e9)
            if rounds >= 200:
                break
    return best, n * 8, rounds, threads


def machine_key(host: HostInfo | None) -> str:
    """Return a short key naming this machine for the cache (host name, CPU, RAM)."""
    parts = [platform.node(), platform.machine()]
    if host is not None:
        parts += [host.cpu_model or "", str(host.ram_total_bytes or "")]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _bandwidth_cache_file(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        from app.paths import cache_dir as ggtune_cache_dir

        cache_dir = ggtune_cache_dir()
    return cache_dir / "hardware" / "host-bandwidth.json"


def _cached_bandwidth(entry: object) -> BandwidthMeasurement | None:
    """Return a cache entry as a measurement, or None when any field is not what
    :func:`host_bandwidth` writes (null, a string, a list, 1e308 GB/s): measure again."""
    if not isinstance(entry, dict):
        return None
    gb = entry.get("gb_per_s")
    array_bytes, runs, threads = (entry.get(k) for k in ("array_bytes", "runs", "threads"))
    measured_at, machine = entry.get("measured_at"), entry.get("machine_key")
    if (
        isinstance(gb, bool)
        or not isinstance(gb, int | float)
        or not 0 < gb < 100_000  # GB/s: HBM3e is ~5,000
        or not _positive_int(array_bytes)
        or not _positive_int(runs)
        or not _positive_int(threads)
        or not isinstance(measured_at, str)
        or not isinstance(machine, str)
    ):
        return None
    assert isinstance(array_bytes, int), "checked by _positive_int"
    assert isinstance(runs, int), "checked by _positive_int"
    assert isinstance(threads, int), "checked by _positive_int"
    return BandwidthMeasurement(
        float(gb), array_bytes, runs, threads, measured_at, machine, cached=True
    )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def host_bandwidth(
    host: HostInfo | None,
    *,
    cache_dir: Path | None = None,
    measure: bool = True,
    refresh: bool = False,
) -> BandwidthMeasurement | None:
    """Return this machine's host memory bandwidth: cached, or measured now and cached.

    The cache is ``<user cache dir>/hardware/host-bandwidth.json``, one entry per machine
    (:func:`machine_key`). ``measure=False`` only reads the cache (``None`` when empty);
    ``refresh=True`` measures again. A cache that cannot be written is not an error.
    """
    path = _bandwidth_cache_file(cache_dir)
    key = machine_key(host)
    entries: dict[str, Any] = {}
    if os.path.lexists(path):
        try:
            data = load_json(path, max_bytes=1 << 20)
        except StateFileError:
            data = None  # measured again and written over: it is ggtune's own cache
        if isinstance(data, dict) and isinstance(data.get("machines"), dict):
            entries = data["machines"]
    entry = entries.get(key)
    if entry is not None and not refresh:
        cached = _cached_bandwidth(entry)
        if cached is not None:
            return cached
    if not measure:
        return None
    gb_per_s, nbytes, rounds, threads = measure_host_bandwidth()
    result = BandwidthMeasurement(
        gb_per_s=round(gb_per_s, 2),
        array_bytes=nbytes,
        runs=rounds,
        threads=threads,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        machine_key=key,
    )
    entries[key] = asdict(result)
    with contextlib.suppress(OSError):
        import tempfile  # only when a measurement is written: ~3 ms a CLI run skips

        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".host-bandwidth-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "machines": entries}, f, indent=2)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return result
