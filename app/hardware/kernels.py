"""What llama.cpp's CPU kernels cost on this machine: measured rates and their cache.

:func:`runner.kernel_bench.kernel_bench` times the engine's own matrix products (per
quant type and number of tokens sharing one read of the weights) and its flash-attention
kernel (per cache type) on this CPU with a given thread count, and the cost of one graph
node; this module holds the result (:class:`KernelRates`), looks rates up for the speed
model (:mod:`app.predict.speed`), and keeps them in ``<user cache>/hardware/cpu-kernels.json``
per machine and thread count, next to the host bandwidth (:mod:`app.hardware.bandwidth`).

Units: nanoseconds per weight (one weight × all tokens of the product), nanoseconds per
attention element (one query token × one head × one cached token × one head dimension),
microseconds per graph node.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final

CACHE_VERSION: Final = 2
"""2: few-token products stream more than the CPU's last-level cache (a cache of version 1
timed 96 MiB, which a server CPU's cache holds: too fast), so version-1 timings are redone."""


@dataclass(frozen=True, slots=True)
class KernelTiming:
    """One weight type at one token count: ``ns_per_weight`` (the fastest round: other work
    on the cores only ever adds time) and each round's value; ``repacked`` whether the
    weights sat in llama.cpp's ``CPU_REPACK`` buffer (as they do in a loaded model for the
    types this CPU repacks)."""

    type_name: str
    n_tokens: int
    ns_per_weight: float
    rounds_ns: tuple[float, ...]
    repacked: bool
    n_cols: int = 2048
    """Row length of the timed matrices (``ne0``): short rows cost more per weight once
    several tokens share a product."""
    buffer: str = ""
    """The ggml buffer the weights sat in (``CPU``, ``CPU_REPACK``, ``AMX``; empty in files
    timed before it was recorded)."""


@dataclass(frozen=True, slots=True)
class AttentionTiming:
    """Flash attention over ``n_kv`` cached tokens of cache type ``kv_type`` for
    ``n_tokens`` query tokens, ``head_dim`` wide: ``ns_per_element`` per query token ×
    head × cached token × head dimension (the fastest round)."""

    kv_type: str
    head_dim: int
    n_tokens: int
    n_kv: int
    ns_per_element: float


def _interp(points: Iterable[tuple[int, float]], n: int, *, linear_tail: bool) -> float | None:
    """Interpolate ``(tokens, cost)`` in log-log; beyond the last point grow linearly
    (``linear_tail``: compute-bound) or stay flat."""
    pts = sorted(points)
    if not pts:
        return None
    if n <= pts[0][0]:
        return pts[0][1]
    for (n0, v0), (n1, v1) in itertools.pairwise(pts):
        if n <= n1:
            f = math.log(n / n0) / math.log(n1 / n0)
            return math.exp(math.log(v0) + f * (math.log(v1) - math.log(v0)))
    n_last, v_last = pts[-1]
    return v_last * n / n_last if linear_tail else v_last


@dataclass(frozen=True, slots=True)
class KernelRates:
    """What :func:`runner.kernel_bench.kernel_bench` measured on one machine."""

    n_threads: int
    timings: tuple[KernelTiming, ...]
    attention: tuple[AttentionTiming, ...]
    node_us: float
    """What llama.cpp spends per graph node around the kernels (building and scheduling
    the graph, the threads meeting after each node), from decoding two tiny models."""
    buffer_types: tuple[str, ...]
    seconds: float
    decode_us: float = 0.0
    """What one ``llama_decode`` costs besides its nodes."""
    probe_nodes_per_layer: int = 0
    """Graph nodes per layer of the tiny Llama the node cost was measured on."""
    clock: str = "wall"
    """``wall`` (elapsed), or ``cpu`` (the CPU time of the threads, over their number)."""
    loadavg: tuple[float, float, float] | None = None
    measured_at: str = ""
    machine_key: str = ""
    stream_bytes: int = 0
    """Weights per graph of the few-token products (they stream from RAM as a model's do);
    0 in files written before it was recorded (96 MiB then)."""
    cache_bytes: int = 0
    """The CPU's last-level cache the timing assumed (0: unknown)."""

    def types(self) -> frozenset[str]:
        """Return the weight types measured (lower case)."""
        return frozenset(t.type_name.lower() for t in self.timings)

    def shapes(self) -> frozenset[tuple[str, int]]:
        """Return the (type, row length) pairs measured (type upper case)."""
        return frozenset((t.type_name.upper(), t.n_cols) for t in self.timings)

    def ns_per_weight(
        self, type_name: str, n_tokens: int, n_cols: int | None = None
    ) -> float | None:
        """Return ns per weight of a product with ``n_tokens`` tokens (interpolated), for rows
        of ``n_cols`` (the nearest length measured; any when None).

        Beyond the largest token count measured the cost grows in proportion (compute
        bound); ``None`` when the type was not measured.
        """
        key = type_name.lower()
        rows = [t for t in self.timings if t.type_name.lower() == key]
        if not rows:
            return None
        if n_cols is not None:
            want = max(1, n_cols)
            best = min({t.n_cols for t in rows}, key=lambda c: (abs(math.log(c / want)), c))
            rows = [t for t in rows if t.n_cols == best]
        pts = [(t.n_tokens, t.ns_per_weight) for t in rows]
        return _interp(pts, max(1, n_tokens), linear_tail=True)

    def attention_ns(self, kv_type: str, head_dim: int, n_tokens: int) -> float | None:
        """Return ns per attention element for ``n_tokens`` query tokens (interpolated in
        tokens; the nearest head size measured); ``None`` when the cache type was not."""
        key = kv_type.lower()
        rows = [a for a in self.attention if a.kv_type.lower() == key]
        if not rows:
            return None
        dim = min({a.head_dim for a in rows}, key=lambda d: (abs(math.log(d / head_dim)), d))
        pts = [(a.n_tokens, a.ns_per_element) for a in rows if a.head_dim == dim]
        return _interp(pts, max(1, n_tokens), linear_tail=False)

    def to_dict(self) -> dict[str, Any]:
        """Return JSON-ready data (:meth:`from_dict` reads it back)."""
        return asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> KernelRates:
        """Return the rates stored by :meth:`to_dict` (raises KeyError/TypeError/ValueError)."""
        load = data.get("loadavg")
        return cls(
            n_threads=int(data["n_threads"]),
            timings=tuple(
                KernelTiming(
                    str(t["type_name"]),
                    int(t["n_tokens"]),
                    float(t["ns_per_weight"]),
                    tuple(float(x) for x in t["rounds_ns"]),
                    bool(t["repacked"]),
                    int(t.get("n_cols", 2048)),
                    str(t.get("buffer", "")),
                )
                for t in data["timings"]
            ),
            attention=tuple(
                AttentionTiming(
                    str(a["kv_type"]),
                    int(a["head_dim"]),
                    int(a["n_tokens"]),
                    int(a["n_kv"]),
                    float(a["ns_per_element"]),
                )
                for a in data.get("attention", ())
            ),
            node_us=float(data["node_us"]),
            buffer_types=tuple(str(b) for b in data.get("buffer_types", ())),
            seconds=float(data.get("seconds", 0.0)),
            decode_us=float(data.get("decode_us", 0.0)),
            probe_nodes_per_layer=int(data.get("probe_nodes_per_layer", 0)),
            clock=str(data.get("clock", "wall")),
            loadavg=(float(load[0]), float(load[1]), float(load[2])) if load else None,
            measured_at=str(data.get("measured_at", "")),
            machine_key=str(data.get("machine_key", "")),
            stream_bytes=int(data.get("stream_bytes", 0)),
            cache_bytes=int(data.get("cache_bytes", 0)),
        )

    def merged(self, other: KernelRates) -> KernelRates:
        """Return these rates with ``other``'s added (``other`` wins where both measured)."""
        shapes = {(t.type_name.lower(), t.n_cols) for t in other.timings}
        kv = {(a.kv_type.lower(), a.head_dim) for a in other.attention}
        return KernelRates(
            n_threads=other.n_threads,
            timings=tuple(t for t in self.timings if (t.type_name.lower(), t.n_cols) not in shapes)
            + other.timings,
            attention=tuple(a for a in self.attention if (a.kv_type.lower(), a.head_dim) not in kv)
            + other.attention,
            node_us=other.node_us,
            buffer_types=other.buffer_types or self.buffer_types,
            seconds=self.seconds + other.seconds,
            decode_us=other.decode_us,
            probe_nodes_per_layer=other.probe_nodes_per_layer,
            clock=other.clock,
            loadavg=other.loadavg,
            measured_at=other.measured_at,
            machine_key=other.machine_key or self.machine_key,
            stream_bytes=other.stream_bytes,
            cache_bytes=other.cache_bytes,
        )


# --- the cache ----------------------------------------------------------------------


def cache_file(cache_dir: Path | None = None) -> Path:
    """Return ``<user cache dir>/hardware/cpu-kernels.json``."""
    if cache_dir is None:
        from app.paths import cache_dir as ggtune_cache_dir

        cache_dir = ggtune_cache_dir()
    return cache_dir / "hardware" / "cpu-kernels.json"


def _entry_key(machine_key: str, n_threads: int) -> str:
    return f"{machine_key}/t{n_threads}"


def _read(path: Path) -> dict[str, Any]:
    from app.errors import StateFileError
    from app.state_files import load_json

    if not path.exists():
        return {}
    try:
        data = load_json(path)
    except StateFileError:  # a damaged or hostile cache: time the kernels again
        return {}
    if not isinstance(data, dict) or data.get("version") != CACHE_VERSION:
        return {}
    machines = data.get("machines")
    return machines if isinstance(machines, dict) else {}


def cached_rates(
    machine_key: str, n_threads: int, *, cache_dir: Path | None = None
) -> KernelRates | None:
    """Return the rates cached for this machine and thread count, or ``None``."""
    entry = _read(cache_file(cache_dir)).get(_entry_key(machine_key, n_threads))
    if entry is None:
        return None
    try:
        return KernelRates.from_dict(entry)
    except (KeyError, TypeError, ValueError, IndexError):
        return None


def store_rates(rates: KernelRates, *, cache_dir: Path | None = None) -> KernelRates:
    """Merge ``rates`` into the cache (atomically) and return the merged entry.

    A cache that cannot be written is not an error: the merged rates are returned anyway.
    """
    assert rates.machine_key, "rates to cache need the machine key"
    path = cache_file(cache_dir)
    entries = _read(path)
    key = _entry_key(rates.machine_key, rates.n_threads)
    merged = rates
    old = entries.get(key)
    if old is not None:
        with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
            merged = KernelRates.from_dict(old).merged(rates)
    entries[key] = merged.to_dict()
    with contextlib.suppress(OSError):
        import tempfile  # only when rates are written: ~3 ms a read-only CLI run skips

        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".cpu-kernels-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": CACHE_VERSION, "machines": entries}, f, indent=1)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return merged
