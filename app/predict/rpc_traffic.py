"""What crosses the network per step when llama.cpp runs a model over RPC machines.

llama.cpp's RPC backend (``ggml/src/ggml-rpc/ggml-rpc.cpp``, protocol 7.0.0 in the pinned
build) speaks one TCP connection per ``rpc-server``; every command is ``| cmd (1 byte) |
size (8) | payload |`` and a reply ``| size (8) | payload |``. In one decode (or prefill)
step of a graph that is already on the servers (llama.cpp reuses it while the ubatch
shape and the KV window stay the same, ``llama-context.cpp``; ``ggml-rpc.cpp`` then sends
``GRAPH_RECOMPUTE``), the main machine, for each remote device that runs part of the model:

* copies in the split's inputs with ``SET_TENSOR`` (``ggml-backend.cpp``
  ``ggml_backend_sched_compute_splits``): the hidden state from the device before it
  (``n_embd`` F32 per token; the token embeddings are looked up on the main machine's CPU
  and sent as ``embd``; after layers kept on the main machine's CPU, the last one's
  residual add runs on the next device, so its two operands cross instead of one), the
  positions (``inp_pos``, 4 per token with M-RoPE), and per KV cache its layers use the
  cell indices (``attn_inp_k_idxs``/``v_idxs``, I64 per token; V per element when V is
  stored transposed, i.e. without flash attention) and the mask
  (``attn_inp_kq_mask``: ``n_kv × n_tokens``, F16 with flash attention, else F32); the
  device of the last repeating layer also gets ``out_ids`` (I32 per output);
* sends ``GRAPH_RECOMPUTE`` (13 bytes);
* fetches the split's result with ``GET_TENSOR`` — a round trip that waits for the compute:
  the hidden state where the next layer is on another machine, the logits (``n_vocab`` F32
  per output) where the output layer is remote.

``SET_TENSOR`` carries a serialized ``rpc_tensor`` (296 bytes), a cache flag and an offset;
``GET_TENSOR`` a ``rpc_tensor``, offset and size. Two RPC devices on *different* servers
never talk to each other: the hidden state goes through the main machine
(``ggml_backend_tensor_copy``: get, then set; the RPC buffer's ``cpy_tensor`` only works
within one server, where it is one ``COPY_TENSOR`` command without the data).

``n_kv`` is the cache window llama.cpp attends over: the used cells padded to 256, at least
256, at most the cache's cells per stream (``llama_kv_cache::get_n_kv``). The hash cache
of ``rpc-server -c`` only applies to weights (``rpc_use_hash_cache``), never to these.

Not counted per step: the full graph, serialized again whenever llama.cpp rebuilds it
(every 256 tokens of context as ``n_kv`` grows, or a new batch shape; ~13 KiB per layer,
measured in docs/benchmarks.md), and the load (every weight once, with ``-c`` only the
tensors ≤ 10 MiB on a later load). :attr:`StepTraffic.complete` is False where the model
has inputs this does not know (recurrent state, an indexer cache): the figures are then a
lower bound. tests/runner/test_rpc_pool.py checks every byte against real rpc-servers.

Example::

    t = step_traffic(spec, settings, hardware, machines, n_tokens=1, depth=4096)
    t.total_bytes, t.round_trips, t.seconds(Link(gbit_per_s=1.0, latency_s=0.0005))
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.predict.estimate import (
    CacheEstimate,
    MemoryEstimate,
    estimate,
    place_layers,
    resolve_context,
)
from app.predict.speed import Link
from app.settings import Settings

__all__ = [
    "LOCAL",
    "MachineTraffic",
    "StepTraffic",
    "kv_window",
    "load_seconds",
    "step_traffic",
]

LOCAL: Final = "this machine"

RPC_TENSOR_BYTES: Final = 296
"""``sizeof(rpc_tensor)`` (packed: id, type, buffer, ne[4], nb[4], op, op_params[16], flags,
src[10], view_src, view_offs, data, name[64], use_count)."""
CMD_HEADER_BYTES: Final = 9
"""A command's ``| cmd (1) | size (8) |``."""
REPLY_HEADER_BYTES: Final = 8
SET_TENSOR_BYTES: Final = CMD_HEADER_BYTES + RPC_TENSOR_BYTES + 1 + 8
"""``SET_TENSOR`` without its data: header, tensor, cache flag, offset."""
GET_TENSOR_BYTES: Final = CMD_HEADER_BYTES + RPC_TENSOR_BYTES + 8 + 8
"""``GET_TENSOR``: header, tensor, offset, size (the reply is header + data)."""
COPY_TENSOR_BYTES: Final = CMD_HEADER_BYTES + 2 * RPC_TENSOR_BYTES
COPY_TENSOR_REPLY_BYTES: Final = REPLY_HEADER_BYTES + 1
RECOMPUTE_BYTES: Final = CMD_HEADER_BYTES + 4
KV_PAD: Final = 256
"""``llama_kv_cache::get_n_kv`` pads the attended window to 256 cells."""

MROPE_ARCHS: Final = frozenset(
    {"qwen2vl", "paddleocr", "qwen3vl", "qwen3vlmoe", "qwen35", "qwen35moe", "qwen4exp"}
)
"""Architectures with 4 positions per token (M-RoPE/IMRoPE, ``llama_model_rope_type``)."""


@dataclass(frozen=True, slots=True)
class MachineTraffic:
    """One remote machine's share of a step: bytes each way, round trips, commands."""

    machine: str
    sent_bytes: int
    """From the main machine to this one."""
    received_bytes: int
    """From this machine back to the main one."""
    round_trips: int
    messages: int

    @property
    def total_bytes(self) -> int:
        """Return the bytes both ways."""
        return self.sent_bytes + self.received_bytes


@dataclass(frozen=True, slots=True)
class StepTraffic:
    """The network traffic of one step of ``n_tokens`` tokens (see the module doc)."""

    machines: tuple[MachineTraffic, ...]
    n_tokens: int
    n_outputs: int
    complete: bool
    """False where the model has inputs not modelled here (the figures are a floor)."""

    @property
    def total_bytes(self) -> int:
        """Return every byte sent or received, all machines together."""
        return sum(m.total_bytes for m in self.machines)

    @property
    def round_trips(self) -> int:
        """Return the round trips, all machines together (they happen one after another)."""
        return sum(m.round_trips for m in self.machines)

    @property
    def messages(self) -> int:
        """Return the commands sent, all machines together."""
        return sum(m.messages for m in self.machines)

    def seconds(self, link: Link) -> float:
        """Return the step's network time on ``link``: every byte at the link's rate,
        every round trip twice its one-way latency (the devices run one after another, so
        nothing overlaps)."""
        return (
            self.total_bytes * 8 / (link.gbit_per_s * 1e9) + self.round_trips * 2 * link.latency_s
        )


@dataclass(slots=True)
class _Tally:
    sent: int = 0
    received: int = 0
    round_trips: int = 0
    messages: int = 0

    def set_tensor(self, n_bytes: int) -> None:
        self.sent += SET_TENSOR_BYTES + n_bytes
        self.messages += 1

    def get_tensor(self, n_bytes: int) -> None:
        self.sent += GET_TENSOR_BYTES
        self.received += REPLY_HEADER_BYTES + n_bytes
        self.round_trips += 1
        self.messages += 1


def kv_window(cells: int, depth: int, n_tokens_per_stream: int) -> int:
    """Return ``n_kv``: the cells llama.cpp attends over with ``depth`` tokens in a stream
    and ``n_tokens_per_stream`` new ones (padded to 256, at least 256, at most ``cells``)."""
    used = depth + n_tokens_per_stream
    padded = max(KV_PAD, -(-used // KV_PAD) * KV_PAD)
    return min(cells, padded)


def step_traffic(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    machines: Mapping[str, str],
    *,
    n_tokens: int = 1,
    n_outputs: int | None = None,
    depth: int = 0,
    memory: MemoryEstimate | None = None,
) -> StepTraffic:
    """Return the network traffic of one step of ``n_tokens`` tokens at ``depth`` tokens
    of context per stream, ``n_outputs`` of them with logits (default all).

    ``machines`` maps each device name of ``hardware`` to its machine (a ``host:port``,
    or :data:`LOCAL` for this one; a missing name is local). The layers are placed as the
    estimate places them (:func:`app.predict.estimate.place_layers`). Several users
    decode ``n_tokens = n_users`` tokens per step, one per stream when the KV cache is not
    unified. ``memory``: the estimate of these settings on ``hardware`` when the caller
    has it (its caches give the cells per stream), else it is computed.
    """
    outputs = n_tokens if n_outputs is None else n_outputs
    ctx = resolve_context(spec, settings)
    placement = place_layers(spec, settings, hardware)
    names = [g.name for g in hardware.gpus]

    def device(i: int) -> str:
        return hardware.host.name if i < 0 else names[i]

    def machine(dev: str) -> str:
        return machines.get(dev, LOCAL)

    n_layer = spec.n_layer
    layer_dev = [device(i) for i in placement.layer_device[:n_layer]]
    out_dev = device(placement.output_device)
    tallies: dict[str, _Tally] = {}

    def tally(dev: str) -> _Tally:
        return tallies.setdefault(machine(dev), _Tally())

    # the hidden state's path: the embeddings (main CPU), each layer, the output layer
    hidden = spec.n_embd * 4
    stages = [(hardware.host.name, n_tokens), *((d, n_tokens) for d in layer_dev)]
    stages.append((out_dev, outputs))  # out_ids picks the output rows in the last layer
    for i, ((a, _), (b, rows)) in enumerate(itertools.pairwise(stages)):
        if a == b:
            continue
        ma, mb = machine(a), machine(b)
        # after a layer on this machine's CPU, its residual add (no weights) runs on the
        # next device: both operands cross, not the sum (ggml_backend_sched_split_graph
        # expands GPU backends up into weightless ops, never the CPU down)
        n_tensors = 2 if a == hardware.host.name and i > 0 else 1
        if ma == mb and ma != LOCAL:  # two devices of one rpc-server: COPY_TENSOR there
            t = tally(a)
            t.sent += COPY_TENSOR_BYTES
            t.received += COPY_TENSOR_REPLY_BYTES
            t.round_trips += 1
            t.messages += 1
            continue
        for _ in range(n_tensors):
            if ma != LOCAL:
                tally(a).get_tensor(hidden * rows)
            if mb != LOCAL:
                tally(b).set_tensor(hidden * rows)

    # each remote device's graph inputs (copied from the main machine's CPU) and its run
    n_stream = ctx.n_stream
    per_stream = max(1, -(-n_tokens // n_stream))
    mask_elem = 2 if ctx.flash_attn else 4
    est = memory if memory is not None else estimate(spec, settings, hardware)
    caches: dict[str, CacheEstimate] = {c.kind: c for c in est.caches}
    kv_layers = spec.kv_layers or (True,) * n_layer
    complete = not any(spec.is_recurrent[:n_layer]) and not any(spec.idx_layers)
    n_pos = 4 if spec.arch in MROPE_ARCHS else 1
    for dev in dict.fromkeys([*layer_dev, out_dev]):
        if machine(dev) == LOCAL:
            continue
        t = tally(dev)
        mine = [il for il in range(n_layer) if layer_dev[il] == dev]
        if mine:
            t.set_tensor(4 * n_pos * n_tokens)  # inp_pos
        kinds = dict.fromkeys("kv_swa" if spec.is_swa[il] else "kv" for il in mine if kv_layers[il])
        for kind in kinds:
            cache = caches.get(kind)
            if cache is None:
                complete = False
                continue
            v_rows = 1 if ctx.flash_attn else spec.n_embd_v_gqa_max()
            t.set_tensor(8 * n_tokens)  # attn_inp_k_idxs
            t.set_tensor(8 * n_tokens * v_rows)  # attn_inp_v_idxs
            n_kv = kv_window(cache.cells, depth, per_stream)
            t.set_tensor(n_kv * n_tokens * mask_elem)  # attn_inp_kq_mask
        if n_layer - 1 in mine:
            t.set_tensor(4 * outputs)  # out_ids
        t.sent += RECOMPUTE_BYTES
        t.messages += 1
    if machine(out_dev) != LOCAL:
        tally(out_dev).get_tensor(spec.n_vocab * 4 * outputs)  # the logits

    order = list(dict.fromkeys(machines[n] for n in names if n in machines))
    out = tuple(
        MachineTraffic(m, x.sent, x.received, x.round_trips, x.messages)
        for m in order
        if m != LOCAL and (x := tallies.get(m)) is not None
    )
    return StepTraffic(out, n_tokens, outputs, complete)


def load_seconds(n_bytes: int, gbit_per_s: float) -> float:
    """Return the seconds to send ``n_bytes`` of weights at ``gbit_per_s`` (the load)."""
    return n_bytes * 8 / (gbit_per_s * 1e9)
