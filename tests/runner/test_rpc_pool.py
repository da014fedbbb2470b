"""Pooling machines with llama.cpp's RPC backend, on loopback, against the real engine.

1. **The exported commands load the model as planned.** The planner plans a demo model
   over two remote machines (CPU-only, as ggml-rpc-server on this machine offers them); the
   ``ggml-rpc-server`` lines of the plan's scripts (:func:`app.planning.pool.pool_scripts`,
   what ``--write-scripts`` writes) start exactly as exported (program path and
   ``LLAMA_CACHE`` aside), and the plan's ``llama-server`` line, its program swapped for
   ``llama-batched-bench`` (which reads the same common flags: ``-ngl``, ``-ts``, ``--fit``,
   ``--rpc`` …), loads the model through them and decodes a few tokens. llama.cpp's own log
   (``-v``: ``layer N assigned to device …``, the model and KV buffers per device) must show
   every layer on the device the plan put it on, and the weights and KV cache of each
   remote device to the 0.01 MiB llama.cpp prints.
2. **The network figures are the bytes on the wire.** With a :class:`tests.rpc_wire.WireTap`
   between llama.cpp and each server, every steady decode step's bytes each way and round
   trips per machine equal :func:`app.predict.rpc_traffic.step_traffic` exactly: both demo
   models, flash attention on and off, all layers and a partial offload, one and two
   sequences.

Compute buffers are not checked here (tests/agreement covers them per device); the log
figures are shown when a check fails.
"""

from __future__ import annotations

import re
import shlex
import subprocess
from collections import Counter
from dataclasses import dataclass
from pathlib import Path

import pytest

from app.hardware.devices import Hardware
from app.hardware.probe import local_cpu_flags
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.planning.goals import Goal, RpcHost
from app.planning.options import quant_options
from app.planning.planner import recommend, rpc_hardware, server_argv
from app.planning.pool import pool_scripts
from app.predict.estimate import place_layers
from app.predict.rpc_traffic import step_traffic
from app.settings import ALL_LAYERS, Settings
from runner.llama_tools import LlamaTools
from tests.engine_host import ENGINE_REPACK
from tests.llama_tools import free_port, running_rpc_commands, running_rpc_servers
from tests.rpc_wire import decode_steps, tapped

pytestmark = [pytest.mark.engine, pytest.mark.slow]

GIB = 1024**3
MIB = 1024**2
BENCH_TIMEOUT_S = 240
LAYER = re.compile(r"layer\s+(\d+) assigned to device (\S+),")
BUFFER = re.compile(
    r"(load_tensors|llama_kv_cache):\s+(\S+) (model|KV) buffer size =\s+([\d.]+) MiB"
)
COMPUTE = re.compile(r"sched_reserve:\s+(\S+) compute buffer size =\s+([\d.]+) MiB")


def _spec(path: Path) -> ModelSpec:
    return model_spec(read_model(path))


def _local() -> Hardware:
    return Hardware.cpu_only(8 * GIB, cpu_flags=local_cpu_flags())


def _bench_argv(
    tools: LlamaTools, server: tuple[str, ...], *, n_prompt: int, n_gen: int, n_seq: int
) -> list[str]:
    """Return the llama-server command with llama-batched-bench in its place."""
    assert server[0] == "llama-server"
    return [
        str(tools.path("llama-batched-bench")), *server[1:],
        "-npp", str(n_prompt), "-ntg", str(n_gen), "-npl", str(n_seq), "-t", "1", "-v",
    ]  # fmt: skip


def _run(argv: list[str]) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=BENCH_TIMEOUT_S)
    log = done.stdout + done.stderr
    assert done.returncode == 0, f"{' '.join(argv)} failed ({done.returncode}):\n{log[-3000:]}"
    return log


@dataclass(frozen=True)
class EngineLog:
    """What llama.cpp's log says about placement, per device / buffer name."""

    layers: Counter[str]
    model_mib: dict[str, float]
    kv_mib: dict[str, float]
    compute_mib: dict[str, float]


def _parse(log: str) -> EngineLog:
    layers = Counter(dev for _, dev in LAYER.findall(log))
    model: dict[str, float] = {}
    kv: dict[str, float] = {}
    for _, name, kind, mib in BUFFER.findall(log):
        figures = model if kind == "model" else kv
        figures[name] = round(figures.get(name, 0.0) + float(mib), 2)  # iSWA: two caches
    compute = {name: float(mib) for name, mib in COMPUTE.findall(log)}
    return EngineLog(layers, model, kv, compute)


def _exec_line(script: str) -> tuple[str, ...]:
    (line,) = [x for x in script.splitlines() if x.startswith("exec ")]
    return tuple(shlex.split(line)[1:])


def _mib(n_bytes: int) -> float:
    return round(n_bytes / MIB, 2)


# --- 1. the exported commands ---------------------------------------------------------------


@pytest.mark.parametrize("model", ["smollm", "gemma"])
def test_exported_commands_load_the_model_as_planned(
    model: str,
    llama_tools: LlamaTools,
    smollm_path: Path,
    gemma_path: Path,
    tmp_path: Path,
) -> None:
    path = smollm_path if model == "smollm" else gemma_path
    spec = _spec(path)
    # two "machines" on loopback, each too small for the whole model (no margin kept), so
    # the plan needs both (a machine it could leave out it would: one round trip less)
    # (Gemma: 758 MiB on one device; split, the output device alone needs 732 MiB, its
    # compute buffer holding the 262k-token vocabulary's logits as llama.cpp reserves it)
    sizes = (150, 200) if model == "smollm" else (600, 740)
    hosts = tuple(
        RpcHost(Hardware.cpu_only(mib * MIB), f"127.0.0.1:{free_port()}", label=f"{mib} MiB")
        for mib in sizes
    )
    goal = Goal("fastest", ctx=1024, rpc_hosts=hosts, margin_bytes=0)
    rec = recommend(spec, _local(), goal, options=quant_options(spec, simulate=None))
    best, rpc, hw = rec.best, rec.rpc, rec.hardware
    assert best is not None
    assert rpc is not None
    assert hw is not None
    assert best.all_on_gpu  # every layer on the two remote devices
    assert rpc.hosts == hosts
    assert all(d.n_layers > 0 for d in best.estimate.devices if d.kind == "gpu")
    # the scripts `ggtune recommend --write-scripts` writes: their exec lines are what runs
    scripts = pool_scripts(str(path), rec)
    *remote, main = (_exec_line(s.text) for s in scripts)
    for host, argv in zip(hosts, remote, strict=True):
        assert argv == ("ggml-rpc-server", "-H", "127.0.0.1", "-p", str(host.port), "-c")
    assert tuple(remote) == rpc.remote_commands
    server = main
    assert server == server_argv(str(path), rec)
    assert server[server.index("--rpc") + 1] == ",".join(h.endpoint for h in hosts)
    cache = tmp_path / "llama-cache"
    with running_rpc_commands(
        remote,
        llama_tools.path("ggml-rpc-server"),
        log_dir=tmp_path,
        env={"LLAMA_CACHE": str(cache)},
    ) as servers:
        log = _run(_bench_argv(llama_tools, server, n_prompt=8, n_gen=4, n_seq=1))
        outputs = [s.output() for s in servers]
    for host, out in zip(hosts, outputs, strict=True):
        assert f"endpoint       : {host.endpoint}" in out
        assert f"local cache    : {cache / 'rpc'}" in out  # -c took effect
    engine = _parse(log)
    detail = f"plan {best.settings}\nengine {engine}"
    # every layer (the output layer counts as layer n_layer) where the plan put it
    planned = Counter({d.name: d.n_layers for d in best.estimate.devices})
    output = place_layers(spec, best.settings, hw).output_device
    planned[hw.devices[output].name] += 1
    assert engine.layers == +planned, detail
    # the weights and KV cache of each remote device, to the MiB llama.cpp prints
    for host, dev_name in zip(hosts, ("RPC0", "RPC1"), strict=True):
        dev = best.estimate.device(dev_name)
        buffer = f"RPC0[{host.endpoint}]"  # one device per server: index 0 on its server
        assert engine.model_mib[buffer] == _mib(dev.weights_bytes), detail
        assert engine.kv_mib[buffer] == pytest.approx(_mib(dev.kv_bytes), abs=0.011), detail
    # this machine keeps the token embeddings (mapped from the file)
    host_dev = best.estimate.device("CPU")
    assert engine.model_mib["CPU_Mapped"] == _mib(host_dev.weights_bytes), detail


# --- 2. the bytes on the wire -----------------------------------------------------------------


@dataclass(frozen=True)
class WireCase:
    id: str
    model: str
    flash_attn: str
    n_gpu_layers: int
    n_seq: int


WIRE_CASES = (
    WireCase("smollm-fa", "smollm", "on", ALL_LAYERS, 1),
    WireCase("smollm-nofa", "smollm", "off", ALL_LAYERS, 1),
    WireCase("smollm-partial", "smollm", "on", 12, 1),
    WireCase("smollm-2seq", "smollm", "on", ALL_LAYERS, 2),
    WireCase("gemma-fa", "gemma", "on", ALL_LAYERS, 1),
    WireCase("gemma-nofa-partial", "gemma", "off", 10, 1),
)


@pytest.mark.parametrize("case", WIRE_CASES, ids=lambda c: c.id)
def test_step_traffic_is_the_bytes_on_the_wire(
    case: WireCase, llama_tools: LlamaTools, smollm_path: Path, gemma_path: Path, tmp_path: Path
) -> None:
    path = smollm_path if case.model == "smollm" else gemma_path
    spec = _spec(path)
    n_prompt, n_gen = 8, 10
    with (
        running_rpc_servers(llama_tools.path("ggml-rpc-server"), 2, log_dir=tmp_path) as servers,
        tapped([s.port for s in servers]) as taps,
    ):
        hosts = tuple(RpcHost(Hardware.cpu_only(4 * GIB), t.endpoint) for t in taps)
        hw, machines = rpc_hardware(_local(), hosts)
        settings = Settings(
            n_ctx=1024 * case.n_seq,
            n_gpu_layers=case.n_gpu_layers,
            flash_attn=case.flash_attn,  # type: ignore[arg-type]
            n_parallel=case.n_seq,
            kv_unified=False,
            swa_full=False,
            tensor_split=(2.0, 1.0),
            repack=ENGINE_REPACK,
        )
        server = server_argv_for(str(path), settings, hosts)
        _run(_bench_argv(llama_tools, server, n_prompt=n_prompt, n_gen=n_gen, n_seq=case.n_seq))
        recorded = [t.messages for t in taps]
    want = step_traffic(spec, settings, hw, machines, n_tokens=case.n_seq, depth=n_prompt)
    assert want.complete
    by_machine = {m.machine: m for m in want.machines}
    for tap, messages in zip(taps, recorded, strict=True):
        steps = decode_steps(messages)
        assert len(steps) >= n_gen - 3, f"only {len(steps)} steady steps on {tap.endpoint}"
        m = by_machine[tap.endpoint]
        for step in steps:
            got = (step.sent_bytes, step.received_bytes, step.round_trips, step.messages)
            assert got == (m.sent_bytes, m.received_bytes, m.round_trips, m.messages), (
                f"{tap.endpoint}: wire {got}, model {m}; messages {step.tensors}"
            )


def server_argv_for(model: str, settings: Settings, hosts: tuple[RpcHost, ...]) -> tuple[str, ...]:
    """The llama-server command for ``settings`` over ``hosts`` (what an export writes)."""
    from app.export.llama_server import llama_server_argv

    argv = llama_server_argv(model, settings)
    return (*argv, "--rpc", ",".join(h.endpoint for h in hosts))
