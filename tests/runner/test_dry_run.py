"""The dry run against the real llama.cpp, in real child processes, on real models.

Expected numbers come from llama.cpp's rules (docs/sources.md §1, vendored
``src/llama-context.cpp``, ``src/llama-kv-cache.cpp``, ``src/llama-kv-cache-iswa.cpp``)
and from the GGUF files read with ``gguf`` — never from ggtune's own estimator:

* cells: ``n_ctx`` padded to 256; unified: one stream of n_ctx cells, otherwise
  ``n_seq_max`` streams of ``PAD(n_ctx / n_seq_max, 256)`` cells;
* Gemma 3 SWA layers: ``PAD(min(cells, n_swa · (unified ? n_seq_max : 1) + n_ubatch),
  256)`` cells unless ``swa_full``; 5 local : 1 global layers;
* K (and V) bytes = layers · total cells · row bytes, row = n_embd_head · n_head_kv
  elements of the cache type (f16 2 bytes, q8_0 34 bytes per 32);
* the log prints MiB with two decimals of the ``float`` value.

Both real models: Gemma 3 270M (18 layers, 1 KV head of 256, window 512, 262144
tokens), SmolLM2 135M (30 layers, 3 KV heads of 64, 49152 tokens, training ctx 8192).
"""

from __future__ import annotations

import ctypes
import dataclasses
import json
import pickle
import signal
import socket
import threading
import time
from pathlib import Path

import pytest

from app.errors import (
    EngineCancelledError,
    EngineCrashedError,
    EngineError,
    EngineLoadError,
    EngineTimeoutError,
    EngineUnsupportedError,
    ModelFileNotFoundError,
)
from app.measured.engine_report import EngineReport
from app.predict.estimate import EXTRA_WEIGHT_BUFFERS
from app.settings import Settings
from app.units import MIB
from runner.dry_run import (
    LOAD_MODE_MMAP,
    ContextJob,
    DryRun,
    DryRunRequest,
    LoadGroup,
    ModelLoad,
    dry_run,
    dry_run_child,
    dry_run_many,
)
from runner.worker import ChildChannel, EngineWorker, Event, ItemEvent, StepEvent
from tests.llama_tools import RpcServers
from tests.runner.conftest import leftover_children
from tests.zoo import write_model

pytestmark = pytest.mark.engine

# Hyperparameters from the GGUF metadata (gemma3.attention.*, llama.attention.*).
GEMMA_ROW_ELEMS = 256 * 1  # key_length x head_count_kv (value_length is the same)
GEMMA_GLOBAL_LAYERS = 3  # layers 5, 11, 17 of 18: llama.cpp's gemma3 swa pattern 6
GEMMA_SWA_LAYERS = 15
GEMMA_N_SWA = 512
GEMMA_VOCAB = 262144
SMOLLM_ROW_ELEMS = 64 * 3
SMOLLM_LAYERS = 30
SMOLLM_VOCAB = 49152
SMOLLM_CTX_TRAIN = 8192

ROUNDING = MIB // 200 + 1
"""How far the nearest bytes of a size printed to 0.01 MiB can be from the exact size."""


# --- helpers ------------------------------------------------------------------------


def pad(n: int, to: int = 256) -> int:
    """GGML_PAD."""
    return -(-n // to) * to


def row_bytes(cache_type: str, elems: int) -> int:
    """Bytes of one row of ``elems`` elements (gguf.GGML_QUANT_SIZES)."""
    block, size = {"f16": (1, 2), "f32": (1, 4), "q8_0": (32, 34), "q4_0": (32, 18)}[cache_type]
    return elems // block * size


def printed_mib(n_bytes: int) -> float:
    """The MiB value llama.cpp prints with ``%.2f`` (of a float)."""
    return float(f"{float(ctypes.c_float(n_bytes / MIB).value):.2f}")


# Child targets must be top-level functions of an importable module (spawn).


def sleep_target(seconds: float, channel: ChildChannel) -> None:
    channel.step("sleeping")
    channel.log(2, "about to sleep")
    time.sleep(seconds)


def segfault_target(_request: None, channel: ChildChannel) -> None:
    channel.log(2, "about to read address 0")
    ctypes.string_at(0)


def raise_target(_request: None, channel: ChildChannel) -> None:
    channel.log(2, "about to fail")
    raise ValueError("bad request")


def items_target(n: int, channel: ChildChannel) -> None:
    for i in range(n):
        channel.step(f"item {i}")
        channel.send(i)


# --- Gemma 3 270M: iSWA, flash attention, quantized cache -------------------------

GEMMA_CASES = {
    "swa_small_fa_on": Settings(n_ctx=4096, swa_full=False, flash_attn="on"),
    "swa_full_fa_off": Settings(n_ctx=4096, swa_full=True, flash_attn="off"),
    "q8_0_fa_on": Settings(
        n_ctx=4096, swa_full=False, flash_attn="on", cache_type_k="q8_0", cache_type_v="q8_0"
    ),
    "q8_0_v_fa_auto": Settings(n_ctx=4096, swa_full=False, cache_type_v="q8_0"),
    "np2_split": Settings(n_ctx=3000, swa_full=False, n_parallel=2, kv_unified=False),
    "np2_unified": Settings(n_ctx=3000, swa_full=False, n_parallel=2, kv_unified=True),
    "ubatch_256": Settings(n_ctx=8192, swa_full=False, n_ubatch=256, flash_attn="off"),
}


@pytest.fixture(scope="module")
def gemma_reports(gemma_path: Path) -> dict[str, EngineReport]:
    reports = dry_run_many(gemma_path, list(GEMMA_CASES.values()))
    return dict(zip(GEMMA_CASES, reports, strict=True))


def expected_gemma_cells(s: Settings) -> tuple[int, int, int]:
    """Return (cells per stream of the global cache, of the SWA cache, streams)."""
    n_ctx = pad(s.n_ctx)
    streams = 1 if s.kv_unified else s.n_parallel
    cells = n_ctx if s.kv_unified else pad(n_ctx // s.n_parallel)
    window = GEMMA_N_SWA * (s.n_parallel if s.kv_unified else 1) + s.n_ubatch
    swa_cells = cells if s.swa_full else pad(min(cells, window))
    return cells, swa_cells, streams


@pytest.mark.parametrize("case", GEMMA_CASES)
def test_gemma_kv_caches_follow_llama_cpp_rules(
    case: str, gemma_reports: dict[str, EngineReport]
) -> None:
    s = GEMMA_CASES[case]
    report = gemma_reports[case]
    cells, swa_cells, streams = expected_gemma_cells(s)
    base, swa = report.kv_caches
    assert (base.role, base.layers, base.cells, base.streams) == (
        "non-SWA",
        GEMMA_GLOBAL_LAYERS,
        cells,
        streams,
    )
    assert (swa.role, swa.layers, swa.cells, swa.streams) == (
        "SWA",
        GEMMA_SWA_LAYERS,
        swa_cells,
        streams,
    )
    for cache in (base, swa):
        assert (cache.type_k, cache.type_v, cache.seqs) == (
            s.cache_type_k,
            s.cache_type_v,
            s.n_parallel,
        )
        k = cache.layers * cache.total_cells * row_bytes(s.cache_type_k, GEMMA_ROW_ELEMS)
        v = cache.layers * cache.total_cells * row_bytes(s.cache_type_v, GEMMA_ROW_ELEMS)
        assert cache.k_mib == printed_mib(k)
        assert cache.v_mib == printed_mib(v)
        assert abs(cache.k_bytes - k) <= ROUNDING
    assert report.n_ctx == cells * streams
    assert report.n_ctx_seq == cells
    assert report.n_seq_max == s.n_parallel
    assert report.kv_unified is s.kv_unified


def test_gemma_flash_attention_resolution(gemma_reports: dict[str, EngineReport]) -> None:
    resolved = {case: (r.flash_attn_requested, r.flash_attn) for case, r in gemma_reports.items()}
    assert resolved["swa_small_fa_on"] == ("enabled", True)
    assert resolved["swa_full_fa_off"] == ("disabled", False)
    # A quantized V cache turns "auto" into "enabled" before the context is built.
    assert resolved["q8_0_v_fa_auto"] == ("enabled", True)
    # "auto" is resolved by llama.cpp's probe; the CPU backend supports it.
    assert resolved["np2_split"] == ("auto", True)


def test_gemma_no_alloc_buffers(gemma_reports: dict[str, EngineReport]) -> None:
    report = gemma_reports["swa_small_fa_on"]
    assert report.mode == "no_alloc"
    # Dummy buffers: the weights and KV lines print 0.00 MiB in no_alloc mode.
    assert set(report.model_buffer_bytes.values()) == {0}
    assert report.kv_buffer_bytes == {"CPU": 0}
    # The compute buffer is the size graph_reserve computed; always logged.
    assert report.compute_buffer_bytes["CPU"] > 100 * MIB
    assert report.compute_bytes_on("CPU") == report.compute_buffer_bytes["CPU"]
    assert report.compute_bytes_on("CUDA0") == 0
    # Output buffer: 4 bytes per logit x n_vocab x n_seq_max.
    for r in gemma_reports.values():
        (out,) = r.output_buffers
        assert out.mib == printed_mib(4 * GEMMA_VOCAB * r.n_seq_max)
        assert r.output_bytes == out.bytes


def test_report_to_dict_is_json(gemma_reports: dict[str, EngineReport]) -> None:
    report = gemma_reports["np2_split"]
    data = json.loads(json.dumps(report.to_dict()))
    assert "log" not in data
    assert data["kv_caches"][0]["cells"] == report.kv_caches[0].cells
    assert data["settings"]["n_parallel"] == 2
    assert data["kv_bytes"] == report.kv_bytes
    assert data["compute_buffer_bytes"] == report.compute_buffer_bytes
    assert report.to_dict(include_log=True)["log"] == list(report.log)


def test_gemma_smaller_ubatch_needs_less_compute(gemma_reports: dict[str, EngineReport]) -> None:
    # Without flash attention the KQ matrix (cells x n_ubatch x heads) dominates.
    small = gemma_reports["ubatch_256"].compute_buffer_bytes["CPU"]
    full = gemma_reports["swa_full_fa_off"].compute_buffer_bytes["CPU"]
    assert small < full


# Sum of the tensors' bytes and elements of the (checksummed) files, computed once with
# gguf.GGUFReader (which takes ~25 s on Gemma's 262k-token vocabulary, too slow here).
GEMMA_WEIGHT_BYTES, GEMMA_PARAMS = 246_587_904, 268_098_176
SMOLLM_WEIGHT_BYTES, SMOLLM_PARAMS = 96_576_768, 134_515_008


def test_weights_are_exact(gemma_path: Path, smollm_path: Path) -> None:
    expected = [
        (gemma_path, GEMMA_WEIGHT_BYTES, GEMMA_PARAMS, 18),
        (smollm_path, SMOLLM_WEIGHT_BYTES, SMOLLM_PARAMS, SMOLLM_LAYERS),
    ]
    for path, n_bytes, n_params, n_layer in expected:
        report = dry_run(path, Settings())
        assert report.model_size_bytes == n_bytes
        assert report.model_n_params == n_params
        assert report.n_layer == n_layer
        assert report.devices
        assert report.devices[0].type == "cpu"
        assert report.devices[0].total_bytes > 0
        assert "CPU" in report.system_info
        assert report.engine_version == "llama-cpp-python 0.3.36"


# --- SmolLM2 135M: parallel sequences, unified or not ------------------------------

SMOLLM_CASES = {
    "np4_split": (Settings(n_ctx=2048, n_parallel=4, kv_unified=False), 512, 4),
    "np4_unified": (Settings(n_ctx=2048, n_parallel=4, kv_unified=True), 2048, 1),
    # PAD(1000) = 1024 cells; 3 streams of PAD(1024 / 3, 256) = 512 (n_ctx becomes 1536).
    "np3_rounding": (Settings(n_ctx=1000, n_parallel=3), 512, 3),
    "train_ctx": (Settings(n_ctx=0), SMOLLM_CTX_TRAIN, 1),
}


@pytest.fixture(scope="module")
def smollm_reports(smollm_path: Path) -> dict[str, EngineReport]:
    reports = dry_run_many(smollm_path, [s for s, _, _ in SMOLLM_CASES.values()])
    return dict(zip(SMOLLM_CASES, reports, strict=True))


@pytest.mark.parametrize("case", SMOLLM_CASES)
def test_smollm_streams(case: str, smollm_reports: dict[str, EngineReport]) -> None:
    s, cells, streams = SMOLLM_CASES[case]
    report = smollm_reports[case]
    (cache,) = report.kv_caches
    assert (cache.role, cache.cells, cache.streams, cache.layers) == (
        "",
        cells,
        streams,
        SMOLLM_LAYERS,
    )
    assert (report.n_ctx, report.n_ctx_seq, report.n_seq_max) == (
        cells * streams,
        cells,
        s.n_parallel,
    )
    k = SMOLLM_LAYERS * cells * streams * row_bytes("f16", SMOLLM_ROW_ELEMS)
    assert cache.k_mib == cache.v_mib == printed_mib(k)
    assert report.kv_bytes == cache.k_bytes + cache.v_bytes
    assert report.n_ctx_train == SMOLLM_CTX_TRAIN
    (out,) = report.output_buffers
    assert out.mib == printed_mib(4 * SMOLLM_VOCAB * s.n_parallel)


# --- alloc mode -----------------------------------------------------------------------


def test_alloc_mode_gemma(gemma_path: Path, gemma_reports: dict[str, EngineReport]) -> None:
    s = GEMMA_CASES["swa_small_fa_on"]
    report = dry_run(gemma_path, s, mode="alloc")
    dry = gemma_reports["swa_small_fa_on"]
    assert report.mode == "alloc"
    # The mmapped range holds every weight (plus alignment padding between tensors).
    mapped = report.model_buffer_bytes["CPU_Mapped"]
    assert -ROUNDING <= mapped - report.model_size_bytes < 64 * 1024
    # The CPU backend repacks some Q4_K weights into an extra buffer (AMX on a CPU with it).
    assert sum(report.model_buffer_bytes.get(b, 0) for b in EXTRA_WEIGHT_BUFFERS) > 0
    # Real KV buffers, one per cache, each as large as its K+V.
    assert [b.mib for b in report.kv_buffers] == [c.size_mib for c in report.kv_caches]
    # The dry run predicted the caches and the compute buffer that alloc really got.
    assert report.kv_caches == dry.kv_caches
    assert report.compute_buffers == dry.compute_buffers
    assert report.output_buffers == dry.output_buffers


def test_alloc_mode_smollm_without_mmap(smollm_path: Path) -> None:
    settings = [
        Settings(n_ctx=2048, n_parallel=4, use_mmap=False, repack=False),  # one buffer each
        Settings(n_ctx=2048, n_parallel=4, kv_unified=True, use_mmap=True, repack=False),
    ]
    events: list[Event] = []
    no_mmap, mmap = DryRun(smollm_path, settings, mode="alloc", on_event=events.append).run()
    loads = [e for e in events if isinstance(e, StepEvent) and e.label.startswith("loading")]
    assert len(loads) == 2  # use_mmap is a model param in alloc mode: two loads
    assert set(no_mmap.model_buffer_bytes) == {"CPU"}  # read into memory
    assert set(mmap.model_buffer_bytes) == {"CPU_Mapped"}
    for report in (no_mmap, mmap):
        (weights,) = report.model_buffer_bytes.values()
        assert -ROUNDING <= weights - report.model_size_bytes < 64 * 1024
        (cache,) = report.kv_caches
        assert report.kv_buffer_bytes["CPU"] == cache.k_bytes + cache.v_bytes


# --- dry_run_many -----------------------------------------------------------------------


def _comparable(report: EngineReport) -> EngineReport:
    # Timings in the log and the free memory of the devices differ between runs.
    return dataclasses.replace(report, log=(), devices=())


def test_many_equals_single_runs(gemma_path: Path, gemma_reports: dict[str, EngineReport]) -> None:
    for case in ("swa_full_fa_off", "np2_unified"):
        single = dry_run(gemma_path, GEMMA_CASES[case])
        assert _comparable(single) == _comparable(gemma_reports[case])
        # Same log apart from timings: the load, then this context alone.
        assert len(single.log) == len(gemma_reports[case].log)
        assert sum("llama_context: n_ctx " in line for line in single.log) == 1


def test_many_groups_model_loads(smollm_path: Path) -> None:
    settings = [
        Settings(n_ctx=512, n_gpu_layers=0),
        Settings(n_ctx=1024, n_gpu_layers=-1),
        Settings(n_ctx=2048, n_gpu_layers=0, use_mmap=False),  # same load in no_alloc
        Settings(n_ctx=4096, n_gpu_layers=-1),
    ]
    events: list[Event] = []
    reports = DryRun(smollm_path, settings, on_event=events.append).run()
    steps = [e.label for e in events if isinstance(e, StepEvent)]
    assert [label.split(" ")[0] for label in steps] == [
        "loading",
        "creating",
        "creating",
        "loading",
        "creating",
        "creating",
    ]
    assert [r.settings for r in reports] == settings  # back in the caller's order
    assert [r.n_ctx for r in reports] == [512, 1024, 2048, 4096]
    assert dry_run_many(smollm_path, []) == []


def test_n_cpu_moe_keeps_expert_weights_on_the_cpu(zoo_dir: Path) -> None:
    path = write_model("qwen3moe", zoo_dir)
    report = dry_run(path, Settings(n_ctx=512, n_cpu_moe=2))
    overridden = sorted(
        line.split()[1] for line in report.log if "buffer type overridden to CPU" in line
    )
    # As llama-server's --n-cpu-moe 2: the expert tensors of layers 0 and 1, no others.
    assert overridden == sorted(
        f"blk.{il}.ffn_{kind}_exps.weight" for il in (0, 1) for kind in ("gate", "up", "down")
    )
    plain = dry_run(path, Settings(n_ctx=512))
    assert not any("overridden" in line for line in plain.log)


def test_recurrent_state_is_reported(zoo_dir: Path) -> None:
    report = dry_run(write_model("mamba", zoo_dir), Settings(n_ctx=512, n_parallel=3))
    assert report.kv_caches == ()
    (state,) = report.recurrent_caches
    assert (state.cells, state.seqs) == (3, 3)  # one state slot per sequence
    assert report.rs_buffer_bytes["CPU"] > 0  # allocated even in no_alloc mode
    assert report.recurrent_bytes == state.size_bytes
    assert report.kv_bytes == 0


# --- failures ---------------------------------------------------------------------------


def test_real_abort_in_llama_cpp(smollm_path: Path) -> None:
    # mmap + no_alloc trips GGML_ASSERT(!ml.no_alloc) in src/llama-model.cpp.
    request = DryRunRequest(
        model_path=str(smollm_path),
        mode="no_alloc",
        groups=(
            LoadGroup(
                ModelLoad(n_gpu_layers=0, tensor_split=(), load_mode=LOAD_MODE_MMAP, no_alloc=True),
                (ContextJob(0, Settings()),),
            ),
        ),
    )
    with pytest.raises(EngineCrashedError) as info:
        EngineWorker(dry_run_child, request, timeout_s=60).run()
    err = info.value
    assert err.signal == signal.SIGABRT
    assert err.exit_code is None
    assert "llama.cpp aborted (SIGABRT)" in str(err)
    assert "GGML_ASSERT(!ml.no_alloc)" in str(err)
    assert "while loading the model" in str(err)
    # llama.cpp's own lines up to the abort, then the assert from stderr.
    assert any("load_tensors: loading model tensors" in line for line in err.log_tail)
    assert "GGML_ASSERT(!ml.no_alloc) failed" in err.log_tail[-1]
    assert len(err.log_tail) <= 60
    assert leftover_children() == []  # reaped, and the parent is still here


def test_truncated_model_is_a_load_error(smollm_path: Path, tmp_path: Path) -> None:
    truncated = tmp_path / "truncated.gguf"
    with open(smollm_path, "rb") as f:
        truncated.write_bytes(f.read(50_000_000))
    with pytest.raises(EngineLoadError) as info:
        dry_run(truncated, Settings())
    err = info.value
    assert "could not load the model" in str(err)
    assert "not within the file bounds" in str(err)
    assert any("error loading model" in line for line in err.log_tail)
    assert err.exit_code is None
    assert err.signal is None
    assert leftover_children() == []


def test_refused_context_names_the_settings(smollm_path: Path) -> None:
    settings = [Settings(), Settings(cache_type_v="q8_0", flash_attn="off")]
    with pytest.raises(EngineLoadError) as info:
        dry_run_many(smollm_path, settings)
    assert "quantized V cache requires flash_attn" in str(info.value)
    assert "settings #1" in str(info.value)


def test_settings_checked_before_spawning(smollm_path: Path, tmp_path: Path) -> None:
    with pytest.raises(ModelFileNotFoundError):
        dry_run(tmp_path / "missing.gguf", Settings())
    with pytest.raises(EngineUnsupportedError, match="tensor split"):
        dry_run(smollm_path, Settings(tensor_split=(1.0,) * 17))


def test_segfault_is_a_crash() -> None:
    with pytest.raises(EngineCrashedError) as info:
        EngineWorker(segfault_target, None, timeout_s=60).run()
    assert info.value.signal == signal.SIGSEGV
    assert "SIGSEGV" in str(info.value)
    assert "about to read address 0" in info.value.log_tail


def test_python_error_in_the_child() -> None:
    with pytest.raises(EngineError) as info:
        EngineWorker(raise_target, None, timeout_s=60).run()
    assert type(info.value) is EngineError
    assert "ValueError: bad request" in str(info.value)
    assert any("Traceback" in line for line in info.value.log_tail)


def test_timeout_kills_the_child() -> None:
    # 5 s, not 1 s: on a loaded 2-core CI machine spawning the child alone took over 1 s,
    # and the timeout then fired "while starting the engine" instead.
    start = time.monotonic()
    with pytest.raises(EngineTimeoutError, match="while sleeping"):
        EngineWorker(sleep_target, 60.0, timeout_s=5.0).run()
    assert time.monotonic() - start < 30


def test_cancel_from_another_thread_is_quick() -> None:
    started = threading.Event()
    cancel_took: list[float] = []

    def on_event(event: Event) -> None:
        if isinstance(event, StepEvent):
            started.set()

    worker = EngineWorker(sleep_target, 60.0, timeout_s=120, on_event=on_event)

    def cancel_when_started() -> None:
        started.wait(30)
        t0 = time.monotonic()
        worker.cancel()
        cancel_took.append(time.monotonic() - t0)

    thread = threading.Thread(target=cancel_when_started)
    thread.start()
    with pytest.raises(EngineCancelledError, match="while sleeping"):
        worker.run()
    thread.join()
    assert cancel_took[0] < 1.0


def test_a_cancel_while_the_child_spawns_stops_it_and_raises_nothing_there() -> None:
    # A GUI pausing a background run may cancel while start() is still spawning the child
    # (tests/ui/desktop/test_kernel_timing.py hit it: AttributeError from terminate() in
    # the Qt event loop). Cancel over and over from the moment run() begins.
    for _ in range(3):
        worker = EngineWorker(sleep_target, 60.0, timeout_s=120)
        errors: list[BaseException] = []
        stop = threading.Event()

        def hammer(
            w: EngineWorker[float] = worker,
            stop: threading.Event = stop,
            errors: list[BaseException] = errors,
        ) -> None:
            while not stop.is_set():
                try:
                    w.cancel()
                except BaseException as exc:  # what the GUI thread would have raised
                    errors.append(exc)
                    return

        thread = threading.Thread(target=hammer)
        thread.start()
        t0 = time.monotonic()
        try:
            with pytest.raises(EngineCancelledError):
                worker.run()
        finally:
            stop.set()
            thread.join()
        assert errors == []
        assert time.monotonic() - t0 < 30
    assert leftover_children() == []


def test_cancel_a_real_dry_run(gemma_path: Path) -> None:
    started = threading.Event()

    def on_event(event: Event) -> None:
        if isinstance(event, StepEvent) and event.label.startswith("creating"):
            started.set()

    many = [Settings(n_ctx=32768, n_parallel=p) for p in range(1, 40)]
    run = DryRun(gemma_path, many, mode="alloc", on_event=on_event)

    def cancel_when_started() -> None:
        started.wait(60)
        run.cancel()

    thread = threading.Thread(target=cancel_when_started)
    thread.start()
    with pytest.raises(EngineCancelledError, match="cancelled while creating the context"):
        run.run()
    thread.join()


def test_items_arrive_in_order() -> None:
    result = EngineWorker(items_target, 3, timeout_s=60).run()
    assert [e.item for e in result.events if isinstance(e, ItemEvent)] == [0, 1, 2]


def test_engine_error_survives_pickling() -> None:
    err = EngineCrashedError("llama.cpp aborted (SIGABRT)", log_tail=("a", "b"), signal=6)
    copy = pickle.loads(pickle.dumps(err))
    assert type(copy) is EngineCrashedError
    assert (copy.cause, copy.log_tail, copy.exit_code, copy.signal) == (
        err.cause,
        ("a", "b"),
        None,
        6,
    )
    assert str(copy) == "llama.cpp aborted (SIGABRT)"


# --- RPC devices (issue 14) -----------------------------------------------------------


def test_rpc_servers_are_devices_that_take_layers(
    rpc_servers: RpcServers, gemma_path: Path
) -> None:
    settings = Settings(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1))
    with rpc_servers(2) as servers:
        report = dry_run(gemma_path, settings, rpc_servers=[s.endpoint for s in servers])
    names = [d.name for d in report.devices]
    assert names[1:] == ["RPC0", "RPC1"], names
    endpoints = {d.description for d in report.devices if d.name.startswith("RPC")}
    assert endpoints == {s.endpoint for s in servers}
    assert report.offloaded_layers == (19, 19)
    # one compute buffer per server (named by the server's own device) and the host's
    rpc = [b for b in report.compute_buffers if b.buffer.startswith("RPC")]
    assert len(rpc) == 2, report.compute_buffers
    assert report.compute_bytes_on("CPU") > 0


def test_an_rpc_server_that_does_not_answer_is_named(smollm_path: Path) -> None:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # closed again: nothing listens there
    with pytest.raises(EngineLoadError, match=f"RPC server 127.0.0.1:{port} does not answer"):
        dry_run(smollm_path, Settings(n_gpu_layers=-1), rpc_servers=[f"127.0.0.1:{port}"])


@pytest.mark.parametrize("endpoint", ["localhost", "127.0.0.1:", "127.0.0.1:99999", ":80"])
def test_a_malformed_rpc_endpoint_is_refused_before_any_child(
    smollm_path: Path, endpoint: str
) -> None:
    with pytest.raises(EngineUnsupportedError, match="is not HOST:PORT"):
        dry_run(smollm_path, Settings(), rpc_servers=[endpoint])
