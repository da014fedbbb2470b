"""The benchmark on the real llama.cpp, in real child processes, on the real demo models.

Token counts are tiny (the figures must be sane, not precise: docs/benchmarks.md has the
real quick and thorough numbers). Failures are provoked for real: a truncated copy of a
model (tensor data past the end of the file), a file deleted before the child opens it,
a model file truncated under the running engine (SIGBUS on the mapped weights), an abort
signal, and a cancel; after each the parent runs a good benchmark again.
"""

from __future__ import annotations

import os
import shutil
import signal
import threading
import time
from pathlib import Path

import psutil
import pytest

from app.errors import (
    EngineCancelledError,
    EngineCrashedError,
    EngineLoadError,
    ModelFileNotFoundError,
)
from app.hardware.devices import Hardware
from app.hardware.probe import local_cpu_flags
from app.measured.bench_result import (
    BenchPlan,
    BenchProgress,
    BenchResult,
    BenchStep,
    Loaded,
    LoadProgress,
    compare_memory,
)
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.units import MIB
from runner.benchmark import Benchmark, benchmark
from tests.engine_host import ENGINE_REPACK
from tests.llama_tools import RpcServers

pytestmark = pytest.mark.engine

TINY = BenchPlan("custom", n_prompt=32, n_gen=8, depth=64, n_chat_prompt=16, repetitions=2)
SETTINGS = Settings(n_ctx=512, flash_attn="auto", swa_full=False, repack=ENGINE_REPACK)
LONG = BenchPlan("custom", n_prompt=32, n_gen=500, depth=0, n_chat_prompt=16, repetitions=1)
"""A decode test long enough (seconds) to be interrupted in the middle."""


_RUNS: dict[str, tuple[BenchResult, list[BenchProgress]]] = {}


def _run(name: str, path: Path) -> tuple[BenchResult, list[BenchProgress]]:
    if name not in _RUNS:
        events: list[BenchProgress] = []
        result = benchmark(path, SETTINGS, TINY, on_progress=events.append, timeout_s=120)
        _RUNS[name] = (result, events)
    return _RUNS[name]


@pytest.fixture(params=["smollm", "gemma"])
def run(
    request: pytest.FixtureRequest, smollm_path: Path, gemma_path: Path
) -> tuple[Path, BenchResult, list[BenchProgress]]:
    path = smollm_path if request.param == "smollm" else gemma_path
    return (path, *_run(request.param, path))


def test_figures_are_sane(run: tuple[Path, BenchResult, list[BenchProgress]]) -> None:
    path, result, _ = run
    assert {(s.kind, s.depth) for s in result.speeds} == {
        ("pp", 0),
        ("tg", 0),
        ("pp", 64),
        ("tg", 64),
    }
    for s in result.speeds:
        assert len(s.seconds) == TINY.repetitions
        assert s.tok_per_s.mean > 0, s
        assert s.n_tokens == (32 if s.kind == "pp" else 8)
    assert result.ttft.n_prompt == 16
    assert min(result.ttft.seconds) > 0
    assert result.load_s > 0
    assert result.backend == "CPU"
    assert result.offloaded_layers == (0, result.engine.n_layer + 1)
    assert result.n_threads >= 1
    assert result.engine.n_ctx == 512
    assert result.engine.mode == "alloc"
    assert result.model_path == os.fspath(path)
    assert result.machine.physical_cores >= 1
    mem = result.memory
    assert mem.peak_rss_bytes >= mem.loaded.rss_bytes >= mem.before_load.rss_bytes > 0
    # the mapped weights were read: file-backed RSS grew by at least half of them
    mapped = result.engine.model_buffer_bytes["CPU_Mapped"]
    assert mem.peak_rss_file_bytes is not None
    assert mem.before_load.rss_file_bytes is not None
    assert mem.peak_rss_file_bytes - mem.before_load.rss_file_bytes >= mapped // 2
    assert mem.gpus == ()
    assert mem.gpu_note  # says why VRAM was not measured


def test_buffers_and_rss_agree_with_the_estimate(
    run: tuple[Path, BenchResult, list[BenchProgress]],
) -> None:
    path, result, _ = run
    est = estimate(
        model_spec(read_model(path)), SETTINGS, Hardware.cpu_only(cpu_flags=local_cpu_flags())
    )
    gaps = compare_memory(est, result)
    components = {g.component for g in gaps}
    assert {"weights", "KV cache", "compute", "output", "RSS total (peak − baseline)"} <= components
    assert "RSS file-backed (mapped weights)" in components
    misses = [g for g in gaps if not g.within_tolerance]
    assert not misses, misses
    weights = next(g for g in gaps if g.component == "weights")
    assert abs(weights.difference_bytes) <= 0.005 * MIB  # llama.cpp prints 0.01 MiB
    assert result.engine.model_size_bytes == model_spec(read_model(path)).weights_bytes


def test_progress_arrives_in_order(run: tuple[Path, BenchResult, list[BenchProgress]]) -> None:
    _, result, events = run
    kinds = [type(e) for e in events]
    first_loaded = kinds.index(Loaded)
    assert all(k is LoadProgress for k in kinds[:first_loaded])
    assert all(k is BenchStep for k in kinds[first_loaded + 1 :])
    fractions = [e.fraction for e in events if isinstance(e, LoadProgress)]
    assert fractions == sorted(fractions)
    assert fractions[-1] == 1.0
    loaded = events[first_loaded]
    assert isinstance(loaded, Loaded)
    assert loaded.report == result.engine
    steps = [e for e in events if isinstance(e, BenchStep)]
    assert [s.index for s in steps] == list(range(1, steps[0].total + 1))
    assert steps[0].label == "warming up"


def test_missing_model_is_refused_before_any_child(tmp_path: Path) -> None:
    with pytest.raises(ModelFileNotFoundError):
        benchmark(tmp_path / "nope.gguf", SETTINGS, TINY)


def _good_run(path: Path) -> None:
    result = benchmark(path, SETTINGS, TINY, timeout_s=120)
    assert result.speed("tg") is not None


def test_corrupt_tensor_data_is_a_load_error_and_the_next_run_works(
    smollm_path: Path, tmp_path: Path
) -> None:
    bad = tmp_path / "truncated.gguf"
    with open(smollm_path, "rb") as src, open(bad, "wb") as dst:
        dst.write(src.read(os.path.getsize(smollm_path) * 2 // 3))  # header whole, data cut
    with pytest.raises(EngineLoadError) as info:
        benchmark(bad, SETTINGS, TINY, timeout_s=120)
    assert "could not load the model" in info.value.cause
    assert "loading the model" in info.value.cause
    assert any("data is not within the file bounds" in line for line in info.value.log_tail), (
        info.value.log_tail
    )
    _good_run(smollm_path)


def test_file_deleted_before_the_child_opens_it(smollm_path: Path, tmp_path: Path) -> None:
    copy = tmp_path / "copy.gguf"
    shutil.copy(smollm_path, copy)
    run = Benchmark(copy, SETTINGS, TINY, timeout_s=120)  # checks the file exists
    copy.unlink()
    with pytest.raises(EngineLoadError) as info:
        run.run()
    assert "could not load the model" in info.value.cause


def test_file_deleted_mid_run_still_finishes(smollm_path: Path, tmp_path: Path) -> None:
    # POSIX: an unlinked file lives on while mapped, so the engine keeps its weights
    copy = tmp_path / "copy.gguf"
    shutil.copy(smollm_path, copy)

    def on_progress(event: BenchProgress) -> None:
        if isinstance(event, Loaded) and copy.exists():
            copy.unlink()

    result = benchmark(copy, SETTINGS, TINY, on_progress=on_progress, timeout_s=120)
    assert not copy.exists()
    assert result.speed("tg") is not None


def _interrupt_mid_decode(path: Path, action: object) -> Benchmark:
    started = threading.Event()

    def on_progress(event: BenchProgress) -> None:
        if isinstance(event, BenchStep) and event.label.startswith("tg") and not started.is_set():
            started.set()
            time.sleep(0.3)  # well inside the long decode test
            assert callable(action)
            action()

    return Benchmark(path, SETTINGS, LONG, on_progress=on_progress, timeout_s=120)


def test_model_truncated_under_the_engine_is_a_crash_and_the_next_run_works(
    smollm_path: Path, tmp_path: Path
) -> None:
    # SmolLM's Q4_1 weights are read from the mapped file (not repacked): cutting the file
    # makes the next read of a weight page fault (SIGBUS) inside llama.cpp.
    copy = tmp_path / "copy.gguf"
    shutil.copy(smollm_path, copy)
    run = _interrupt_mid_decode(copy, lambda: os.truncate(copy, 4096))
    with pytest.raises(EngineCrashedError) as info:
        run.run()
    assert info.value.signal == signal.SIGBUS
    assert "mapped model file" in info.value.cause
    assert "tg500" in info.value.cause  # the step it died in
    _good_run(smollm_path)


def test_engine_abort_is_a_crash_with_the_signal(smollm_path: Path) -> None:
    def abort() -> None:
        assert run.pid is not None
        os.kill(run.pid, signal.SIGABRT)  # what GGML_ABORT and a failed GGML_ASSERT end in

    run = _interrupt_mid_decode(smollm_path, abort)
    with pytest.raises(EngineCrashedError) as info:
        run.run()
    assert info.value.signal == signal.SIGABRT
    assert "llama.cpp aborted (SIGABRT)" in info.value.cause
    assert info.value.exit_code is None
    assert info.value.log_tail  # llama.cpp's last log lines come along


def test_cancel_ends_the_child_within_a_second(smollm_path: Path) -> None:
    seen: dict[str, float] = {}

    def cancel() -> None:
        assert run.pid is not None
        seen["pid"] = run.pid
        seen["at"] = time.monotonic()
        threading.Thread(target=run.cancel).start()  # as a GUI thread would

    run = _interrupt_mid_decode(smollm_path, cancel)
    with pytest.raises(EngineCancelledError):
        run.run()
    assert time.monotonic() - seen["at"] < 1.0
    assert not psutil.pid_exists(int(seen["pid"]))  # gone and reaped: no zombie


def test_a_benchmark_runs_over_rpc_devices(rpc_servers: RpcServers, smollm_path: Path) -> None:
    plan = BenchPlan("quick", n_prompt=64, n_gen=4, depth=0, n_chat_prompt=16, repetitions=1)
    settings = Settings(
        n_ctx=512, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1), repack=ENGINE_REPACK
    )
    with rpc_servers(2) as servers:
        result = benchmark(smollm_path, settings, plan, rpc_servers=[s.endpoint for s in servers])
    assert result.offloaded_layers == (31, 31)
    assert [d.name for d in result.engine.devices][1:] == ["RPC0", "RPC1"]
    assert sum(b.buffer.startswith("RPC") for b in result.engine.model_buffers) == 2
    assert result.speeds
    assert all(f.tok_per_s.mean > 0 for f in result.speeds)
