"""The network traffic of an RPC split (app/predict/rpc_traffic.py), the pinned layer split and
the ggml-rpc-server command (app/export/rpc_server.py).

Each expected figure is written out message by message from the RPC protocol
(``ggml-rpc.cpp``: a command is 1 + 8 bytes of header and its payload, a reply 8 + its
payload, a serialized tensor 296 bytes); tests/runner/test_rpc_pool.py checks the same
model against every byte real rpc-servers receive.
"""

from __future__ import annotations

import itertools
import re
from pathlib import Path

import pytest

from app.errors import PlanError
from app.export.rpc_server import FLAGS, PROGRAM, bind_address, parse_endpoint, rpc_server_argv
from app.hardware.devices import Device, Hardware
from app.model.catalog import catalog_header
from app.model.spec import ModelSpec, model_spec
from app.planning.planner import layer_split
from app.predict.estimate import place_layers
from app.predict.rpc_traffic import kv_window, step_traffic
from app.predict.speed import Link
from app.settings import ALL_LAYERS, Settings

GIB = 1024**3
SET = 9 + 296 + 1 + 8  # SET_TENSOR without its data
GET = 9 + 296 + 8 + 8  # GET_TENSOR; its reply is 8 + the data
RECOMPUTE = 9 + 4
VENDORED = Path("vendor") / "llama.cpp"


@pytest.fixture(scope="module")
def llama8b() -> ModelSpec:
    return model_spec(catalog_header("llama-3.1-8b"))


@pytest.fixture(scope="module")
def gemma3() -> ModelSpec:
    return model_spec(catalog_header("gemma-3-4b"))


def _gpu(name: str, gib: int = 24) -> Device:
    return Device(name, "gpu", gib * GIB)


HOST = Device("CPU", "host", 64 * GIB)


def _inputs(n_kv: int, n_tokens: int = 1, *, fa: bool = True, v_rows: int = 1) -> int:
    """One KV cache's inputs to one device: k_idxs, v_idxs, the mask."""
    mask = n_kv * n_tokens * (2 if fa else 4)
    return SET + 8 * n_tokens + SET + 8 * n_tokens * v_rows + SET + mask


def test_two_remote_machines_local_output(llama8b: ModelSpec) -> None:
    # RPC0 (10.0.0.2) and RPC1 (10.0.0.3) then this machine's CUDA0 with the output layer
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"), _gpu("RPC1"), _gpu("CUDA0")))
    machines = {"RPC0": "10.0.0.2:50052", "RPC1": "10.0.0.3:50052"}
    s = Settings(n_ctx=8192, n_gpu_layers=ALL_LAYERS, flash_attn="on", tensor_split=(11, 11, 11))
    t = step_traffic(llama8b, s, hw, machines, depth=1000)
    hidden = 4096 * 4
    n_kv = 1024  # 1000 + 1 cells used, padded to 256
    assert kv_window(8192, 1000, 1) == n_kv
    one = RECOMPUTE + SET + 4 + _inputs(n_kv)  # its run, inp_pos, the KV inputs
    # RPC0: the embeddings in, its last hidden state fetched (a round trip)
    assert t.machines[0].machine == "10.0.0.2:50052"
    assert t.machines[0].sent_bytes == SET + hidden + one + GET
    assert t.machines[0].received_bytes == 8 + hidden
    # RPC1: RPC0's result in (through this machine: two servers never talk), fetched again
    assert t.machines[1].sent_bytes == SET + hidden + one + GET
    assert t.machines[1].received_bytes == 8 + hidden
    assert t.round_trips == 2
    assert t.messages == 2 * 7
    assert t.complete
    link = Link(1.0, 0.0005)
    assert t.seconds(link) == pytest.approx(t.total_bytes * 8 / 1e9 + 2 * 2 * 0.0005)


def test_output_on_a_remote_sends_the_logits_back(llama8b: ModelSpec) -> None:
    # a CPU-only main machine and one remote GPU holding every layer and the output
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"),))
    s = Settings(n_ctx=4096, n_gpu_layers=ALL_LAYERS, flash_attn="off")
    t = step_traffic(llama8b, s, hw, {"RPC0": "mac:50052"}, depth=0)
    (m,) = t.machines
    v_rows = 8 * 128  # V is stored transposed without flash attention: one index per element
    inputs = SET + 4 + _inputs(256, fa=False, v_rows=v_rows) + SET + 4  # + out_ids
    assert m.sent_bytes == SET + 4096 * 4 + inputs + RECOMPUTE + GET
    assert m.received_bytes == 8 + 128256 * 4  # Llama 3's vocabulary, F32
    assert m.round_trips == 1


def test_two_devices_of_one_server_copy_there(llama8b: ModelSpec) -> None:
    # one rpc-server with two GPUs: RPC0 -> RPC1 is a COPY_TENSOR on the server
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"), _gpu("RPC1"), _gpu("CUDA0")))
    both = {"RPC0": "box:50052", "RPC1": "box:50052"}
    s = Settings(n_ctx=4096, n_gpu_layers=ALL_LAYERS, flash_attn="on", tensor_split=(1, 1, 1))
    t = step_traffic(llama8b, s, hw, both, depth=0)
    (m,) = t.machines
    per_device = RECOMPUTE + SET + 4 + _inputs(256)
    copy = 9 + 2 * 296
    assert m.sent_bytes == SET + 4096 * 4 + 2 * per_device + copy + GET
    assert m.received_bytes == 9 + 8 + 4096 * 4  # the copy's status byte, the hidden state
    assert m.round_trips == 2


def test_partial_offload_and_several_users(llama8b: ModelSpec) -> None:
    # 10 layers + output on RPC0, the first 22 layers on this machine's CPU; 4 users
    # decode 4 tokens per step, one per stream of a non-unified cache
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"),))
    s = Settings(n_ctx=4 * 4096, n_gpu_layers=11, flash_attn="on", n_parallel=4)
    p = place_layers(llama8b, s, hw)
    assert p.layer_device.count(0) == 10
    assert p.output_device == 0
    t = step_traffic(llama8b, s, hw, {"RPC0": "pc:50052"}, n_tokens=4, depth=300)
    (m,) = t.machines
    n_kv = 512  # 301 cells per stream, padded
    inputs = SET + 4 * 4 + _inputs(n_kv, 4) + SET + 4 * 4
    # the last CPU layer's residual add runs on RPC0: its two operands cross, not the sum
    assert m.sent_bytes == 2 * (SET + 4096 * 4 * 4) + inputs + RECOMPUTE + GET
    assert m.received_bytes == 8 + 128256 * 4 * 4


def test_sliding_window_models_send_both_caches_inputs(gemma3: ModelSpec) -> None:
    # Gemma 3: a full and a sliding-window cache, each with its own indices and mask
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"), _gpu("CUDA0")))
    s = Settings(
        n_ctx=32768, n_gpu_layers=ALL_LAYERS, flash_attn="on", tensor_split=(1, 1), swa_full=False
    )
    t = step_traffic(gemma3, s, hw, {"RPC0": "pc:50052"}, depth=20000)
    (m,) = t.machines
    full = kv_window(32768, 20000, 1)
    assert full == 20224
    swa = 1536  # the window's cache: 1024 + 512 cells (n_swa + n_ubatch, padded), all used
    assert kv_window(swa, 20000, 1) == swa
    inputs = SET + 4 + _inputs(full) + _inputs(swa)
    assert m.sent_bytes == SET + gemma3.n_embd * 4 + inputs + RECOMPUTE + GET
    assert m.received_bytes == 8 + gemma3.n_embd * 4


def test_kv_window() -> None:
    assert kv_window(4096, 0, 1) == 256
    assert kv_window(4096, 255, 1) == 256
    assert kv_window(4096, 256, 1) == 512
    assert kv_window(300, 4000, 1) == 300  # never more than the cache holds


@pytest.mark.parametrize(
    ("gpus", "ngl", "split"),
    [
        (3, ALL_LAYERS, ()),
        (3, ALL_LAYERS, (3.0, 1.0, 2.0)),
        (2, 20, (0.7, 0.3)),
        (4, ALL_LAYERS, (24.0, 24.0, 12.0, 8.0)),
        (2, 33, (1.0, 0.0)),
    ],
)
def test_layer_split_reproduces_the_placement(
    llama8b: ModelSpec, gpus: int, ngl: int, split: tuple[float, ...]
) -> None:
    sizes = [24, 12, 16, 8][:gpus]
    hw = Hardware(host=HOST, gpus=tuple(_gpu(f"RPC{i}", g) for i, g in enumerate(sizes)))
    s = Settings(n_ctx=4096, n_gpu_layers=ngl, tensor_split=split)
    counts = layer_split(llama8b, s, hw)
    assert all(c == int(c) for c in counts)
    pinned = s.replace(tensor_split=counts)
    assert place_layers(llama8b, pinned, hw) == place_layers(llama8b, s, hw)


def test_layer_split_every_count_over_two_devices(llama8b: ModelSpec) -> None:
    # any split of the 33 offloaded layers (32 + output) over two devices survives -ts
    hw = Hardware(host=HOST, gpus=(_gpu("RPC0"), _gpu("CUDA0")))
    for a, ngl in itertools.product(range(34), (ALL_LAYERS, 20)):
        s = Settings(n_ctx=4096, n_gpu_layers=ngl, tensor_split=(float(a), float(33 - a)))
        if a == 0:
            s = s.replace(tensor_split=(0.0, 1.0))
        pinned = s.replace(tensor_split=layer_split(llama8b, s, hw))
        assert place_layers(llama8b, pinned, hw) == place_layers(llama8b, s, hw)


# --- the ggml-rpc-server command ---------------------------------------------------------


def test_rpc_server_argv() -> None:
    assert rpc_server_argv("192.168.1.20:50052") == (
        "ggml-rpc-server", "-H", "192.168.1.20", "-p", "50052", "-c",
    )  # fmt: skip
    assert rpc_server_argv("macmini.local:50053", cache=False) == (
        "ggml-rpc-server", "-H", "0.0.0.0", "-p", "50053",
    )  # fmt: skip
    argv = rpc_server_argv("10.0.0.9:50052", threads=8, devices=("CUDA0", "CPU"), program="x")
    assert argv == ("x", "-H", "10.0.0.9", "-p", "50052", "-t", "8", "-d", "CUDA0,CPU", "-c")
    assert bind_address("127.0.0.1:1") == "127.0.0.1"
    with pytest.raises(PlanError):
        rpc_server_argv("a:1", threads=0)


@pytest.mark.parametrize(
    ("text", "why"),
    [
        ("host", "HOST:PORT"),
        (":50052", "HOST:PORT"),
        ("host:", "HOST:PORT"),
        ("host:0", "1 to 65535"),
        ("host:65536", "1 to 65535"),
        ("host:5x", "1 to 65535"),
        ("[::1]:50052", "IPv6"),
        ("fe80::1:50052", "IPv6"),
        ("a b:50052", "not a host"),
        ("a,b:50052", "not a host"),
    ],
)
def test_bad_endpoints_say_why(text: str, why: str) -> None:
    with pytest.raises(PlanError, match=why):
        parse_endpoint(text)


def test_flags_exist_in_the_pinned_rpc_server(llama_cpp_source: Path) -> None:
    tools = llama_cpp_source / VENDORED / "tools/rpc"
    source = (tools / "rpc-server.cpp").read_text()
    for flag in FLAGS:
        assert f'arg == "{flag}"' in source, flag
    assert "--mem" not in source  # no memory limit in this build
    cmake = (tools / "CMakeLists.txt").read_text()
    assert re.search(rf"set\(TARGET {PROGRAM}\)", cmake)
    # -H must be an IPv4 address: the server binds with inet_addr
    transport = (llama_cpp_source / VENDORED / "ggml/src/ggml-rpc/transport.cpp").read_text()
    assert "inet_addr(host)" in transport
