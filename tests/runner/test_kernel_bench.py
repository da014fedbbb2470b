"""llama.cpp's own CPU kernels timed in a child process: matrix products per type, row
length and token count (repacked where llama.cpp repacks), flash attention per cache type,
and the cost of a graph node from decoding two tiny models; cached per machine."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from app.errors import EngineCancelledError
from app.hardware.bandwidth import machine_key
from app.hardware.host import last_level_cache_bytes, probe_host
from app.hardware.kernels import cached_rates
from app.predict.speed import KernelNeeds
from runner.kernel_bench import (
    MAX_STREAM_BYTES,
    STREAM_BYTES,
    ensure_rates,
    kernel_bench,
    write_probe_model,
)
from tests.engine_host import ENGINE_REPACK

pytestmark = pytest.mark.engine


def test_products_attention_and_nodes_are_timed() -> None:
    rates = kernel_bench(
        [("Q8_0", 640), ("Q4_0", 2048)],
        n_tokens=(1, 8),
        n_threads=1,
        repack=("Q4_0",),
        attention=[("F16", 64)],
        attention_tokens=(1, 8),
        rounds=2,
        clock="cpu",
        extra_buffers=ENGINE_REPACK,  # no AMX buffer where its products crash (engine_host)
    )
    assert rates.shapes() == {("Q8_0", 640), ("Q4_0", 2048)}
    by = {(t.type_name, t.n_cols, t.n_tokens): t for t in rates.timings}
    # in CPU_REPACK, as a loaded model's would be (no extra buffer with repacking off)
    assert by["Q4_0", 2048, 1].repacked == ENGINE_REPACK
    assert by["Q4_0", 2048, 1].buffer == ("CPU_REPACK" if ENGINE_REPACK else "CPU")
    assert not by["Q8_0", 640, 1].repacked
    for t in rates.timings:
        assert t.ns_per_weight > 0
        assert len(t.rounds_ns) == 2
        assert t.ns_per_weight == min(t.rounds_ns)
    # eight tokens sharing a product cost more than one (per weight, all tokens counted)
    for key in (("Q8_0", 640), ("Q4_0", 2048)):
        assert by[(*key, 8)].ns_per_weight > by[(*key, 1)].ns_per_weight
    assert [a.n_tokens for a in rates.attention] == [1, 8]
    assert all(a.ns_per_element > 0 for a in rates.attention)
    assert rates.node_us > 0
    assert rates.probe_nodes_per_layer == 31  # the tiny Llama's graph: 31 nodes a layer
    assert rates.clock == "cpu"
    assert "CPU_REPACK" in rates.buffer_types
    # the few-token graphs streamed past this CPU's last-level cache, and say so
    cache = last_level_cache_bytes() or 0
    assert rates.cache_bytes == cache
    assert STREAM_BYTES <= rates.stream_bytes <= MAX_STREAM_BYTES
    assert rates.stream_bytes >= min(4 * cache, MAX_STREAM_BYTES // 2)


def test_the_probe_model_is_a_llama_llama_cpp_loads(tmp_path: Path) -> None:
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec

    path = tmp_path / "probe.gguf"
    write_probe_model(str(path), 3)
    spec = model_spec(read_model(path))
    assert (spec.arch, spec.n_layer, spec.n_embd) == ("llama", 3, 64)


def test_ensure_rates_times_what_is_missing_once_and_caches_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    needs = KernelNeeds(
        frozenset({("Q8_0", 576)}), frozenset({("F16", 64)}), frozenset(), ENGINE_REPACK
    )
    first = ensure_rates(needs, n_threads=1)
    assert first.shapes() == {("Q8_0", 576)}
    key = machine_key(probe_host())
    assert cached_rates(key, 1) == first
    assert ensure_rates(needs, n_threads=1) == first  # all there: no child at all
    more = KernelNeeds(
        frozenset({("Q8_0", 576), ("F16", 576)}), needs.attention, frozenset(), ENGINE_REPACK
    )
    merged = ensure_rates(more, n_threads=1)
    assert merged.shapes() == {("Q8_0", 576), ("F16", 576)}
    assert cached_rates(key, 1) == merged


def test_a_kernel_timing_can_be_cancelled(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    stops: list[object] = []
    needs = KernelNeeds(
        frozenset((t, c) for t in ("F32", "F16", "Q8_0") for c in (576, 1024, 2048)),
        frozenset(),
        frozenset(),
        ENGINE_REPACK,
    )

    def cancel_soon() -> None:
        for _ in range(200):
            if stops:
                threading.Event().wait(1.0)
                stop = stops[0]
                assert callable(stop)
                stop()
                return
            threading.Event().wait(0.05)

    thread = threading.Thread(target=cancel_soon)
    thread.start()
    with pytest.raises(EngineCancelledError):
        ensure_rates(needs, n_threads=1, on_cancel_ready=stops.append)
    thread.join()
    assert cached_rates(machine_key(probe_host()), 1) is None  # nothing half-stored
