"""ggml's backend scheduler: which device runs each node, the splits and their copies.

With several devices llama.cpp hands the reserve graph to ``ggml_backend_sched``
(``ggml/src/ggml-backend.cpp``), which assigns every node to a backend, cuts the graph into
splits that run on one backend each, adds a copy of every tensor a split reads from
another backend, and only then lets ggml-alloc size one compute buffer per backend.
:func:`schedule` replays ``ggml_backend_sched_split_graph`` for the backends ggtune
models and :func:`reserve_per_device` the allocation that follows
(``ggml_backend_sched_reserve_size``):

* pass 1: a node whose memory is pre-allocated (a cache, or a view of one) runs where it
  lives; graph inputs on the CPU (the last backend); an op that reads a weight where the
  weight is (``ROPE`` and ``FLASH_ATTN_EXT`` excepted) — unless a GPU backend asks to
  take a host-weight op (``op_offload``: CUDA for batches of 32 tokens or more);
* pass 2: GPU assignments spread down, then up, then any assignment down and up;
* pass 4: sources and views inherit their consumer's or source's backend;
* pass 5: splits at every change of backend, one input copy per (tensor, backend);
* with pipeline parallelism (several devices, everything offloaded, async backends),
  ``n_copies = 4``: every split input and graph input exists four times and is never
  freed.

Backends are indexed like the estimate's devices: the GPUs (RPC servers first) 0…n-1 and
the CPU last (``llama_context``: the model's devices, then the CPU backend).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from app.predict.graph.alloc import Trace, reserve
from app.predict.graph.ggml import (
    BUF_WEIGHTS,
    FLAG_INPUT,
    FLAG_OUTPUT,
    VIEW_OPS,
    Graph,
    Tensor,
)

MAX_COPIES: Final = 4
"""``GGML_SCHED_MAX_COPIES``: input copies kept with pipeline parallelism."""


@dataclass(frozen=True, slots=True)
class Backends:
    """The scheduler's backends: ``n_gpu`` device backends, then the CPU.

    ``aligns[b]`` is the alignment of backend ``b``'s buffer type; ``offload`` says whether
    GPU backend ``b`` takes an op on a host-resident weight (``ggml_backend_offload_op``).
    """

    n_gpu: int
    aligns: tuple[int, ...]
    n_copies: int = 1
    offload: Callable[[int, Tensor], bool] | None = None
    alloc_size: tuple[Callable[[Tensor], int] | None, ...] | None = None
    """Per backend, ``ggml_backend_buft_get_alloc_size`` where it is not ``ggml_nbytes``."""

    @property
    def cpu(self) -> int:
        """Return the CPU backend's index (the last)."""
        return self.n_gpu


class Schedule:
    """The split graph: node order with copies, and a backend per node and leaf."""

    __slots__ = ("leaf_backend", "leafs", "n_splits", "node_backend", "nodes")

    def __init__(self) -> None:
        self.nodes: list[Tensor] = []
        self.node_backend: list[int] = []
        self.leafs: list[Tensor] = []
        self.leaf_backend: list[int] = []
        self.n_splits = 0


def schedule(graph: Graph, be: Backends, pinned: dict[int, int]) -> Schedule:
    """Assign backends and split ``graph`` (``ggml_backend_sched_split_graph``).

    ``pinned`` maps tensor ids to backends set by ``ggml_backend_sched_set_tensor_backend``.
    """
    cpu = be.cpu
    n_ids = graph.n_tensors
    backend = [-1] * n_ids
    for tid, b in pinned.items():
        backend[tid] = b
    offload = be.offload
    skip_weight_rule = ("ROPE", "FLASH_ATTN_EXT")

    def from_cur(t: Tensor) -> int:
        if t.buf:
            return cpu if t.dev < 0 else t.dev
        root = t.view_src
        if root is not None and root.buf:
            return cpu if root.dev < 0 else root.dev
        if t.flags & FLAG_INPUT:
            return cpu
        if t.op not in skip_weight_rule:
            for s in t.src:
                if s.buf == BUF_WEIGHTS:
                    home = cpu if s.dev < 0 else s.dev
                    if home == cpu and offload is not None:
                        for b in range(cpu):
                            if offload(b, t):
                                return b
                    return home
        return -1

    # pass 1: pre-allocated tensors, inputs, ops on weights
    for leaf in graph.leafs:
        if backend[leaf.id] == -1:
            backend[leaf.id] = from_cur(leaf)
    nodes = graph.nodes
    for node in nodes:
        if backend[node.id] == -1:
            backend[node.id] = from_cur(node)

    # pass 2: expand GPU assignments down and up, then any assignment down and up
    compute_nodes = [n for n in nodes if n.op not in VIEW_OPS]

    def expand(order: Sequence[Tensor], gpu_only: bool) -> None:
        cur = -1
        for node in order:
            b = backend[node.id]
            if b != -1:
                cur = -1 if (gpu_only and b == cpu) else b
            elif cur != -1:
                backend[node.id] = cur

    if be.n_gpu:
        expand(compute_nodes, True)
        expand(compute_nodes[::-1], True)
    expand(compute_nodes, False)
    expand(compute_nodes[::-1], False)

    # pass 3 only upgrades between backends sharing a buffer type (BLAS/CPU) and places
    # nodes no backend expanded to; every backend modelled here supports every op.

    # pass 4: sources from their consumer, views from their source
    for node in nodes:
        nid = node.id
        root = node.view_src
        if root is not None and backend[nid] == -1:
            backend[nid] = backend[root.id]
        for s in node.src:
            if backend[s.id] == -1:
                backend[s.id] = backend[s.view_src.id] if s.view_src is not None else backend[nid]
        if backend[nid] == -1:
            backend[nid] = 0

    # pass 5: splits and the copies of their inputs
    def supported(t: Tensor, b: int) -> bool:
        # a backend reads only its own buffer type (the CPU: host memory); a tensor not yet
        # in a buffer counts as in its backend's (ggml_backend_sched_buffer_supported)
        if t.buf:
            return (cpu if t.dev < 0 else t.dev) == b
        root = t.view_src
        if root is not None and root.buf:
            return (cpu if root.dev < 0 else root.dev) == b
        tb = backend[t.id]
        if tb == -1 and root is not None:
            tb = backend[root.id]
        return tb == b

    def set_backend(t: Tensor, b: int) -> None:
        while len(backend) <= t.id:
            backend.append(-1)
        backend[t.id] = b

    n_copies = be.n_copies
    copies: dict[tuple[int, int], list[Tensor]] = {}
    splits: list[tuple[int, int, list[Tensor]]] = []  # (backend, i_start, inputs)
    sched = Schedule()
    i = 0
    while i < len(nodes) and nodes[i].op in VIEW_OPS:
        i += 1
    if i == len(nodes):
        sched.nodes = list(nodes)
        sched.node_backend = [backend[n.id] for n in nodes]
        sched.leafs = list(graph.leafs)
        sched.leaf_backend = [cpu if backend[t.id] == -1 else backend[t.id] for t in graph.leafs]
        return sched
    cur_b = backend[nodes[i].id]
    splits.append((cur_b, 0, []))
    new_src: dict[int, list[Tensor]] = {}
    for k in range(i, len(nodes)):
        node = nodes[k]
        if node.op in VIEW_OPS:
            continue
        nb = backend[node.id]
        need_new = False
        if nb == cur_b and splits[-1][2]:
            for s in node.src:
                if s.buf == BUF_WEIGHTS and backend[s.id] != cur_b and not supported(s, cur_b):
                    need_new = True
                    break
        if nb != cur_b or need_new:
            splits.append((nb, k, []))
            cur_b = nb
        srcs = node.src
        replaced: list[Tensor] | None = None
        for j, s in enumerate(srcs):
            sb = backend[s.id]
            if sb != cur_b and not supported(s, cur_b):
                key = (s.id, cur_b)
                made = copies.get(key)
                if made is None:
                    made = []
                    for c in range(n_copies):
                        cp = Tensor(graph, s.type, s.ne, s.nb, name=f"B{cur_b}#{s.name}#{c}")
                        if n_copies > 1:
                            cp.flags |= FLAG_INPUT | FLAG_OUTPUT
                        made.append(cp)
                        set_backend(cp, cur_b)
                    copies[key] = made
                    splits[-1][2].append(s)
                if replaced is None:
                    replaced = list(srcs)
                replaced[j] = made[0]
        if replaced is not None:
            new_src[node.id] = replaced
    sched.n_splits = len(splits)

    # pass 6: with copies, every graph input exists n_copies times
    graph_inputs: list[Tensor] = []
    input_copies: dict[int, list[Tensor]] = {}
    if n_copies > 1:
        for leaf in graph.leafs:
            if not leaf.flags & FLAG_INPUT:
                continue
            lb = backend[leaf.id]
            if leaf.id not in input_copies:
                made = []
                for c in range(n_copies):
                    if c == 0:
                        cp = leaf
                    else:
                        cp = Tensor(graph, leaf.type, leaf.ne, leaf.nb, name=f"{leaf.name}#{c}")
                        set_backend(cp, lb)
                    cp.flags |= FLAG_INPUT | FLAG_OUTPUT
                    made.append(cp)
                input_copies[leaf.id] = made
            graph_inputs.append(leaf)

    # the graph copy: per split, each input's dependency and copy, then its nodes
    for n_split, (sb, start, inputs) in enumerate(splits):
        end = splits[n_split + 1][1] if n_split + 1 < len(splits) else len(nodes)
        for inp in inputs:
            dep = Tensor(graph, inp.type, inp.ne, inp.nb, src=(inp,), view_src=inp)
            set_backend(dep, backend[inp.id])
            sched.nodes.append(dep)
            sched.node_backend.append(backend[inp.id])
            sched.nodes.append(copies[(inp.id, sb)][0])
            sched.node_backend.append(sb)
        for k in range(start, end):
            node = nodes[k]
            sched.nodes.append(node)
            sched.node_backend.append(backend[node.id])
    if n_copies > 1:
        for inp in graph_inputs:
            for cp in input_copies[inp.id]:
                sched.leafs.append(cp)
                sched.leaf_backend.append(backend[inp.id])
        for sb, _, inputs in splits:
            for inp in inputs:
                for cp in copies[(inp.id, sb)]:
                    sched.leafs.append(cp)
                    sched.leaf_backend.append(sb)
    for leaf in graph.leafs:
        sched.leafs.append(leaf)
        lb = backend[leaf.id]
        sched.leaf_backend.append(cpu if lb == -1 else lb)

    # the split graph reads the copies (pass 5 rewrote node->src in place)
    for node in sched.nodes:
        replaced_src = new_src.get(node.id)
        if replaced_src is not None:
            node.src = replaced_src
    return sched


def reserve_per_device(
    graph: Graph,
    be: Backends,
    pinned: dict[int, int],
    checkpoints: dict[int, object] | None = None,
    states: dict[object, object] | None = None,
    trace: Trace | None = None,
) -> list[int]:
    """Return the compute buffer of every backend (GPUs in order, then the CPU).

    ``checkpoints``/``states``/``trace``: see :func:`~.alloc.reserve`.
    """
    if be.n_gpu == 0:
        return reserve(graph, aligns=be.aligns, checkpoints=checkpoints, states=states, trace=trace)
    sizes = be.alloc_size
    s = schedule(graph, be, pinned)
    return reserve(
        graph,
        nodes=s.nodes,
        leafs=s.leafs,
        node_buffer=s.node_backend,
        leaf_buffer=s.leaf_backend,
        aligns=be.aligns,
        checkpoints=checkpoints,
        states=states,
        alloc_size=sizes,
        trace=trace,
    )
