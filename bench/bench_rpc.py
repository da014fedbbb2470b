"""The network cost per token of a split over machines (llama.cpp RPC), measured on loopback.

Run: ``.venv/bin/python -m bench.bench_rpc [--steps N]`` (after ``python3 tasks.py run``
built llama.cpp's tools and fetched the demo models). Prints markdown for
docs/benchmarks.md. Per demo model, over two ``ggml-rpc-server`` processes on 127.0.0.1
(layers split 2:1, every layer offloaded, flash attention on; the main machine keeps only
the token embeddings):

1. **The bytes.** ``llama-batched-bench`` decodes through a :class:`tests.rpc_wire.WireTap`
   in front of each server; one steady decode step per server is kept, with its bytes each
   way and round trips, beside :func:`app.predict.rpc_traffic.step_traffic` (the tests
   check they are equal; they are printed again here).
2. **The loopback link**, measured with :class:`tests.rpc_wire.RpcClient` against a real
   server: the round trip of a 4-byte ``GET_TENSOR`` (median of 2,000; the one-way latency
   is half of it) and the rate of a 1 MiB ``SET_TENSOR`` and a 1 MiB ``GET_TENSOR``
   (median of 500, one round trip taken off; a step's largest message, the logits, is
   of that size).
3. **The floor.** Each server's recorded step is replayed ``--steps`` times with the same
   messages and payload sizes (``GRAPH_RECOMPUTE`` left out: no graph is loaded, so the
   server computes nothing and a ``GET_TENSOR`` answers at once): the seconds per token
   the protocol costs on loopback with nothing computed. Beside it the model's time,
   :meth:`~app.predict.rpc_traffic.StepTraffic.seconds` on the measured loopback link,
   and on ordinary links (the user's ``--link-gbps``/``--link-latency-ms``).

The replay client is Python; llama.cpp's own dispatcher sends from C++ in a thread of its
own, so the floor here errs high by Python's per-message cost (a few µs each).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import tempfile
import time
from datetime import date
from pathlib import Path

from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.planning.goals import RpcHost
from app.planning.planner import rpc_hardware
from app.predict.rpc_traffic import StepTraffic, step_traffic
from app.predict.speed import Link
from app.settings import ALL_LAYERS, Settings
from app.sources.demo_models import ensure_demo_models
from runner.llama_tools import find_tools
from tests.llama_tools import running_rpc_servers
from tests.rpc_wire import Message, RpcClient, WireTap, replay, step_messages
from tests.runner.test_rpc_pool import server_argv_for

LINKS = (
    ("10 GbE, 0.05 ms", Link(10.0, 0.00005)),
    ("1 GbE, 0.5 ms (default)", Link(1.0, 0.0005)),
    ("Wi-Fi 300 Mbit/s, 2 ms", Link(0.3, 0.002)),
)
BUFFER_BYTES = 80 << 20


def _record(
    bench: Path, server_exe: Path, model: Path, settings: Settings
) -> tuple[list[list[Message]], StepTraffic]:
    """Return one steady step's messages per server and the model's traffic."""
    spec = model_spec(read_model(model))
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_rpc_servers(server_exe, 2, log_dir=Path(tmp)) as servers,
        WireTap(servers[0].port) as tap0,
        WireTap(servers[1].port) as tap1,
    ):
        taps = (tap0, tap1)
        hosts = tuple(RpcHost(Hardware.cpu_only(4 << 30), t.endpoint) for t in taps)
        hw, machines = rpc_hardware(Hardware.cpu_only(8 << 30), hosts)
        argv = [str(bench), *server_argv_for(str(model), settings, hosts)[1:]]
        argv += ["-npp", "8", "-ntg", "12", "-npl", "1", "-t", "1"]
        subprocess.run(argv, check=True, capture_output=True, timeout=300)
        steps = [step_messages(t.messages)[-1] for t in taps]
    traffic = step_traffic(spec, settings, hw, machines, depth=8)
    return steps, traffic


def _loopback(port: int) -> Link:
    client = RpcClient(port, BUFFER_BYTES)
    try:
        for _ in range(200):
            client.get_tensor(4)
        rtts = []
        for _ in range(2000):
            t0 = time.perf_counter()
            client.get_tensor(4)
            rtts.append(time.perf_counter() - t0)
        rtt = min(rtts)  # the floor: this machine at its least busy
        block = bytes(1 << 20)
        rates = []
        for _ in range(500):  # 1 MiB each way, the size of the largest messages of a step
            t0 = time.perf_counter()
            client.set_tensor(block)
            client.get_tensor(len(block))
            spent = time.perf_counter() - t0 - rtt
            rates.append(2 * len(block) * 8 / max(1e-9, spent) / 1e9)
        return Link(gbit_per_s=max(rates), latency_s=rtt / 2)
    finally:
        client.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=500, help="replayed tokens per model")
    args = parser.parse_args()
    tools = find_tools()
    bench, server_exe = tools.path("llama-batched-bench"), tools.path("ggml-rpc-server")
    demo = ensure_demo_models()
    settings = Settings(
        n_ctx=1024, n_gpu_layers=ALL_LAYERS, flash_attn="on", n_parallel=1,
        kv_unified=False, swa_full=False, tensor_split=(2.0, 1.0),
    )  # fmt: skip
    with (
        tempfile.TemporaryDirectory() as tmp,
        running_rpc_servers(server_exe, 2, log_dir=Path(tmp)) as servers,
    ):
        link = _loopback(servers[0].port)
        clients = [RpcClient(s.port, BUFFER_BYTES) for s in servers]
        rows: list[tuple[str, list[list[Message]], StepTraffic, list[float]]] = []
        models = (("SmolLM2-135M Q4_1", demo.smollm), ("Gemma 3 270M Q4_K_M", demo.gemma))
        try:
            for name, path in models:
                steps, traffic = _record(bench, server_exe, path, settings)
                times = [
                    sum(replay(c, s) for c, s in zip(clients, steps, strict=True))
                    for _ in range(args.steps)
                ]
                rows.append((name, steps, traffic, times))
        finally:
            for c in clients:
                c.close()
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"RPC network per token, {platform.machine()}, {os.cpu_count()} cores, load average "
          f"{load:.1f}, {date.today().isoformat()}; loopback at its best: "
          f"{link.gbit_per_s:.1f} Gbit/s, {link.latency_s * 1e6:.0f} µs one way")  # fmt: skip
    print()
    head = ["model", "server", "wire sent/back per token", "model sent/back", "round trips"]
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, steps, traffic, _ in rows:
        for i, (step, m) in enumerate(zip(steps, traffic.machines, strict=True)):
            sent = sum(x.n_bytes for x in step if x.to_server)
            back = sum(x.n_bytes for x in step if not x.to_server)
            trips = sum(1 for x in step if not x.to_server)
            print(f"| {name} | RPC{i} | {sent:,} / {back:,} B | {m.sent_bytes:,} / "
                  f"{m.received_bytes:,} B | {trips} / {m.round_trips} |")  # fmt: skip
    print()
    head = ["model", "replayed on loopback: min / median / p90", "model, loopback at best",
            *(f"model, {n}" for n, _ in LINKS)]  # fmt: skip
    print("| " + " | ".join(head) + " |")
    print("|" + "---|" * len(head))
    for name, _, traffic, times in rows:
        q = statistics.quantiles(times, n=10)
        spread = (
            f"{min(times) * 1e6:.0f} / {statistics.median(times) * 1e6:.0f} / {q[-1] * 1e6:.0f} µs"
        )
        cells = [spread, f"{traffic.seconds(link) * 1e6:.0f} µs"]
        cells += [f"{traffic.seconds(lk) * 1e3:.2f} ms" for _, lk in LINKS]
        print(f"| {name} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main()
