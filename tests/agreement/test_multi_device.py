"""Per-device memory against llama.cpp on real multi-device placements (RPC on loopback).

Two or three ggml-rpc-servers on 127.0.0.1 are GPU-class devices to llama.cpp (RPC0,
RPC1, …: layers, caches and compute buffers are placed on them by the same rules as on
CUDA, and pipeline parallelism turns on with a full offload). For each model and settings
the runner really loads the model over them (``mode="alloc"``: the dry run's ``no_alloc``
prints no per-device model or cache buffer, and reserves its compute buffers without the
scheduler pins the real allocation uses, see docs/benchmarks.md) and every buffer is
compared with the estimate for hardware with the same devices:

* weights (``use_mmap`` off, so the host buffer holds exactly the host's tensors), KV
  cache and recurrent state on every device: equal as llama.cpp prints them (MiB, two
  decimals);
* compute buffers on every device, the host's included, the host's repacked weights
  (``CPU_REPACK``) and the output buffer: equal as printed.

Tensor splits are given explicitly (llama.cpp's default splits by the free memory each
server reports at load time, which moves between two reads on a shared machine).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.hardware.devices import Device, Hardware
from app.hardware.probe import local_cpu_flags
from app.measured.engine_report import EngineReport
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import EXTRA_WEIGHT_BUFFERS, estimate
from app.settings import Settings
from runner.dry_run import dry_run_many
from tests.agreement.test_agreement import _model_path, llama_mib
from tests.llama_tools import RpcServers

pytestmark = pytest.mark.engine

MIB = 1024 * 1024

S = Settings
GRIDS: dict[str, dict[int, list[Settings]]] = {
    # both real models: all layers, a partial offload, none; FA on/off; slots
    "gemma": {
        2: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1)),
            S(n_ctx=8192, n_gpu_layers=10, flash_attn="off", n_parallel=2, tensor_split=(3, 1)),
            S(n_ctx=4096, n_gpu_layers=0, flash_attn="on", swa_full=False),
        ],
        3: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 2, 1))],
    },
    "smollm": {
        1: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on")],
        2: [
            S(n_ctx=4096, n_gpu_layers=20, flash_attn="on", tensor_split=(1, 1)),
            S(n_ctx=8192, n_gpu_layers=-1, flash_attn="off", n_parallel=4, tensor_split=(1, 2)),
        ],
    },
    # SWA, MoE with --n-cpu-moe, MLA, hybrids, recurrent: two and three devices
    "gemma3": {
        2: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", swa_full=False, tensor_split=(1, 1)),
            S(n_ctx=8192, n_gpu_layers=4, flash_attn="off", n_parallel=4, tensor_split=(3, 1)),
        ],
        3: [
            S(
                n_ctx=8192,
                n_gpu_layers=-1,
                flash_attn="on",
                n_parallel=4,
                kv_unified=True,
                tensor_split=(1, 2, 1),
            )
        ],
    },
    "qwen3moe": {
        2: [
            S(n_ctx=2048, n_gpu_layers=-1, flash_attn="off", n_cpu_moe=2, tensor_split=(1, 1)),
            S(n_ctx=4096, n_gpu_layers=3, flash_attn="on", n_parallel=2, tensor_split=(1, 1)),
        ],
    },
    "gpt-oss": {
        3: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1, 1)),
            S(n_ctx=2048, n_gpu_layers=-1, flash_attn="off", n_cpu_moe=1, tensor_split=(1, 1, 1)),
        ],
    },
    "deepseek2": {
        2: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1)),
            S(n_ctx=2048, n_gpu_layers=-1, flash_attn="off", n_cpu_moe=2, tensor_split=(1, 2)),
        ],
    },
    "granitehybrid": {
        2: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", n_parallel=2, tensor_split=(1, 1))],
        3: [S(n_ctx=4096, n_gpu_layers=4, flash_attn="off", tensor_split=(1, 1, 1))],
    },
    "lfm2": {
        3: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1, 1))],
    },
    "mamba2": {
        2: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", n_parallel=3, tensor_split=(1, 1))],
    },
    "rwkv7": {
        2: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1))],
    },
    "llama": {
        2: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="off", offload_kqv=False, tensor_split=(1, 1))
        ],
    },
    # the families of tests/zoo/modern.py: chunked attention, shared KV, delta-net hybrids,
    # sparse attention, an encoder-decoder
    "llama4": {
        2: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", swa_full=False, tensor_split=(1, 1))],
    },
    "gemma4": {
        2: [S(n_ctx=4096, n_gpu_layers=4, flash_attn="off", n_parallel=2, tensor_split=(1, 1))],
    },
    "gemma3n": {
        3: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1, 1))],
    },
    "qwen35moe": {
        2: [
            S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", n_cpu_moe=2, tensor_split=(1, 1)),
            S(n_ctx=4096, n_gpu_layers=5, flash_attn="off", n_parallel=2, tensor_split=(1, 1)),
        ],
    },
    "deepseek32": {
        2: [S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1))],
    },
    "t5": {
        2: [S(n_ctx=2048, n_gpu_layers=-1, flash_attn="off", tensor_split=(1, 1))],
    },
}


def _cases() -> Iterator[tuple[str, int]]:
    for name, by_count in GRIDS.items():
        for n in by_count:
            yield name, n


def device_buffers(report: EngineReport) -> dict[tuple[str, str], int]:
    """Return bytes per (kind, device): RPC buffers are named ``RPC0[host:port]`` by the
    server's own device, so the endpoint says which of llama.cpp's devices it is."""
    by_endpoint = {d.description: d.name for d in report.devices}

    def device(buffer: str) -> str:
        m = re.fullmatch(r"RPC\d+\[(.*)\]", buffer)
        if m:
            return by_endpoint[m.group(1)]
        return "CPU" if buffer.startswith("CPU") else buffer

    out: dict[tuple[str, str], int] = {}
    for group, buffers in (
        ("weights", report.model_buffers),
        ("kv", report.kv_buffers),
        ("rs", report.rs_buffers),
        ("compute", report.compute_buffers),
        ("output", report.output_buffers),
    ):
        for b in buffers:
            kind = group
            name = device(b.buffer)
            if kind == "weights" and b.buffer in EXTRA_WEIGHT_BUFFERS:
                kind, name = "repack", "CPU"  # the estimate's other_bytes on the host
            key = (kind, name)
            out[key] = out.get(key, 0) + b.bytes
    return out


def hardware_of(report: EngineReport, n: int) -> Hardware:
    """The devices llama.cpp saw: the RPC servers in order, then this machine."""
    gpus = tuple(
        Device(d.name, "gpu", d.total_bytes, d.free_bytes)
        for d in report.devices
        if d.name.startswith("RPC")
    )
    assert len(gpus) == n, report.devices
    return Hardware(host=Device("CPU", "host", cpu_flags=local_cpu_flags()), gpus=gpus)


@pytest.mark.parametrize(("name", "n_servers"), list(_cases()))
def test_every_device_holds_what_the_estimate_says(
    name: str,
    n_servers: int,
    rpc_servers: RpcServers,
    smollm_path: Path,
    gemma_path: Path,
    zoo_dir: Path,
) -> None:
    path = _model_path(name, smollm_path, gemma_path, zoo_dir)
    spec = model_spec(read_model(path))
    settings = [s.replace(use_mmap=False) for s in GRIDS[name][n_servers]]
    with rpc_servers(n_servers) as servers:
        reports = dry_run_many(
            path,
            settings,
            mode="alloc",
            rpc_servers=[s.endpoint for s in servers],
            timeout_s=600,
        )
    misses = []
    for s, report in zip(settings, reports, strict=True):
        est = estimate(spec, s, hardware_of(report, n_servers))
        engine = device_buffers(report)
        for dev in est.devices:
            ours = {
                "weights": dev.weights_bytes,
                "kv": dev.kv_bytes,
                "rs": dev.recurrent_bytes,
                "compute": dev.compute_bytes,
                "repack": dev.other_bytes,
                "output": dev.output_bytes,
            }
            for kind, n_bytes in ours.items():
                theirs = engine.get((kind, dev.name), 0)
                if llama_mib(n_bytes) != llama_mib(theirs):
                    misses.append(
                        f"{s}: {dev.name} {kind} estimate {n_bytes / MIB:.2f} MiB, "
                        f"llama.cpp {theirs / MIB:.2f} MiB"
                    )
    assert not misses, "\n".join(misses)


DRY_RUN_CASES = [
    # where the pins matter: a full offload (norms on their layers' devices), no KV offload
    ("gemma", 2, S(n_ctx=4096, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 1))),
    ("smollm", 2, S(n_ctx=8192, n_gpu_layers=-1, flash_attn="off", n_parallel=4)),
    ("gemma3", 3, S(n_ctx=8192, n_gpu_layers=-1, flash_attn="on", tensor_split=(1, 2, 1))),
    ("qwen3moe", 2, S(n_ctx=2048, n_gpu_layers=-1, flash_attn="off", n_cpu_moe=2)),
    ("llama", 2, S(n_ctx=4096, n_gpu_layers=-1, flash_attn="off", offload_kqv=False)),
]


@pytest.mark.parametrize(
    ("name", "n_servers", "settings"), DRY_RUN_CASES, ids=[f"{c[0]}-{c[1]}" for c in DRY_RUN_CASES]
)
def test_the_dry_run_reserves_what_the_estimate_of_a_dry_run_says(
    name: str,
    n_servers: int,
    settings: Settings,
    rpc_servers: RpcServers,
    smollm_path: Path,
    gemma_path: Path,
    zoo_dir: Path,
) -> None:
    # llama.cpp's no_alloc dry run (what llama-fit-params and --fit measure) reserves the
    # compute buffers without the scheduler's pins; estimate(as_dry_run=True) models that
    path = _model_path(name, smollm_path, gemma_path, zoo_dir)
    spec = model_spec(read_model(path))
    with rpc_servers(n_servers) as servers:
        (report,) = dry_run_many(
            path, [settings], mode="no_alloc", rpc_servers=[s.endpoint for s in servers]
        )
    est = estimate(spec, settings, hardware_of(report, n_servers), as_dry_run=True)
    engine = device_buffers(report)
    for dev in est.devices:
        theirs = engine.get(("compute", dev.name), 0)
        assert llama_mib(dev.compute_bytes) == llama_mib(theirs), (
            f"{dev.name}: estimate {dev.compute_bytes / MIB:.2f} MiB, dry run {theirs / MIB:.2f}"
        )
