"""ggml-alloc's graph allocator, as it sizes compute buffers (``ggml/src/ggml-alloc.c``).

:func:`reserve` replays ``ggml_gallocr_alloc_graph_impl`` over a :class:`~.ggml.Graph`:
graph inputs first (in leaf order), then every node in execution order, each freed as soon
as its last consumer ran; a node may take over a parent's memory in place (``ADD``,
``MUL``, ``ROPE``, ``SOFT_MAX`` … when the parent has no other consumer and the same
layout), and new tensors go into the best-fitting free block (``ggml_dyn_tallocr_alloc``)
or the end of the buffer. A buffer's size is the highest offset ever reached. One
allocator per buffer id; the scheduler gives each backend its own.

Checked against llama.cpp: replayed on the graphs llama.cpp itself reserves (dumped
through ``llama_graph_reserve``), this gives every CPU compute buffer of the agreement grid
to the byte (tests/agreement/test_compute_graph.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Final

from app.predict.graph.ggml import FLAG_INPUT, FLAG_OUTPUT, Graph, Tensor

INPLACE_OPS: Final = frozenset(
    {
        "FILL",
        "SCALE",
        "DIAG_MASK_ZERO",
        "DIAG_MASK_INF",
        "ADD",
        "ADD_ID",
        "ADD1",
        "SUB",
        "MUL",
        "DIV",
        "SQR",
        "SQRT",
        "LOG",
        "UNARY",
        "ROPE",
        "ROPE_BACK",
        "SILU_BACK",
        "RMS_NORM",
        "RMS_NORM_BACK",
        "CLAMP",
        "SOFT_MAX",
        "SOFT_MAX_BACK",
    }
)
"""``ggml_op_can_inplace``."""

_HUGE: Final = 1 << 62


class Trace:
    """What a reservation decided, to tell when another one takes the same path.

    ``decisions``: the outcome of every comparison of sizes or offsets the allocator made
    (best fit, merges, in-place layouts, the high-water mark); ``sizes``: every tensor
    size it asked for, in order. Two reservations of the same graph at two cache sizes
    with equal decisions, whose sizes all grow linearly with the cache, took the same path
    at every cache size between them (each decision compares two linear functions of the
    cache size, equal in sign at both ends), so their buffers are the straight line
    between the two (compute.py uses this for the context slider and the planner).
    """

    __slots__ = ("decisions", "sizes")

    def __init__(self) -> None:
        self.decisions: list[object] = []
        self.sizes: list[int] = []


class DynAllocator:
    """``ggml_dyn_tallocr`` with one chunk: free blocks sorted by offset, best fit."""

    __slots__ = ("align", "blocks", "max_size", "trace")

    def __init__(self, align: int, trace: list[object] | None = None) -> None:
        self.align = align
        self.blocks: list[list[int]] = [[0, _HUGE]]
        self.max_size = 0
        self.trace = trace

    def alloc(self, size: int) -> int:
        """Return the offset of ``size`` bytes (aligned), best fit before the last block."""
        a = self.align
        size = (size + a - 1) // a * a
        blocks = self.blocks
        best = -1
        best_size = _HUGE * 2
        tr = self.trace
        if tr is None:
            for i in range(len(blocks) - 1):
                s = blocks[i][1]
                if size <= s <= best_size:
                    best = i
                    best_size = s
        else:
            fits = []
            for i in range(len(blocks) - 1):
                s = blocks[i][1]
                if size <= s:
                    if s <= best_size:
                        best = i
                        best_size = s
                        fits.append(2)
                    else:
                        fits.append(1)
                else:
                    fits.append(0)
            tr.append(tuple(fits))
        if best < 0:
            best = len(blocks) - 1
        block = blocks[best]
        offset = block[0]
        block[0] += size
        block[1] -= size
        if block[1] == 0:
            del blocks[best]
        grows = offset + size > self.max_size
        if grows:
            self.max_size = offset + size
        if tr is not None:
            tr.append((block[1] == 0, grows))
        return offset

    def free(self, offset: int, size: int) -> None:
        """Return a block, merging it with its neighbours (``ggml_dyn_tallocr_free_bytes``)."""
        a = self.align
        size = (size + a - 1) // a * a
        blocks = self.blocks
        tr = self.trace
        for i, block in enumerate(blocks):
            if block[0] + block[1] == offset:
                block[1] += size
                merge = i < len(blocks) - 1 and block[0] + block[1] == blocks[i + 1][0]
                if merge:
                    block[1] += blocks[i + 1][1]
                    del blocks[i + 1]
                if tr is not None:
                    tr.append(("after", i, merge))
                return
            if offset + size == block[0]:
                block[0] = offset
                block[1] += size
                merge = i > 0 and blocks[i - 1][0] + blocks[i - 1][1] == block[0]
                if merge:
                    blocks[i - 1][1] += block[1]
                    del blocks[i]
                if tr is not None:
                    tr.append(("before", i, merge))
                return
        j = 0
        while j < len(blocks) and blocks[j][0] < offset:
            j += 1
        blocks.insert(j, [offset, size])
        if tr is not None:
            tr.append(("insert", j))


def _layout_differs(p: Tensor, t: Tensor) -> object:
    """Return where two layouts first differ and which is larger (None: the same)."""
    if p.type != t.type:
        return ("type",)
    for k in range(4):
        if p.ne[k] != t.ne[k]:
            return ("ne", k, p.ne[k] > t.ne[k])
    for k in range(4):
        if p.nb[k] != t.nb[k]:
            return ("nb", k, p.nb[k] > t.nb[k])
    return None


def reserve(
    graph: Graph,
    nodes: Sequence[Tensor] | None = None,
    leafs: Sequence[Tensor] | None = None,
    node_buffer: Sequence[int] | None = None,
    leaf_buffer: Sequence[int] | None = None,
    aligns: Sequence[int] = (32,),
    checkpoints: dict[int, object] | None = None,
    states: dict[object, object] | None = None,
    alloc_size: Sequence[Callable[[Tensor], int] | None] | None = None,
    trace: Trace | None = None,
) -> list[int]:
    """Return the size of each buffer after placing ``graph`` (``ggml_gallocr_reserve_n``).

    ``nodes``/``leafs`` default to the graph's own; ``node_buffer``/``leaf_buffer`` give the
    buffer id of each (default 0), ``aligns`` the alignment of each buffer. A tensor takes
    ``ggml_nbytes`` unless ``alloc_size[buffer]`` says otherwise
    (``ggml_backend_buft_get_alloc_size``: CUDA pads quantized rows and adds the f16 copies
    flash attention makes of a quantized cache). ``checkpoints`` maps tensor ids to
    labels: after each such node the allocators' state (free blocks, high-water marks, the
    live tensors' places) goes into ``states``. ``trace`` records the decisions (:class:`Trace`).
    """
    nodes = graph.nodes if nodes is None else nodes
    leafs = graph.leafs if leafs is None else leafs
    decisions = trace.decisions if trace is not None else None
    asked = trace.sizes if trace is not None else None
    allocs = [DynAllocator(a, decisions) for a in aligns]
    n = graph.n_tensors
    children = [0] * n
    views = [0] * n
    owner = [0] * n
    addr = [0] * n
    own = [False] * n
    sizes = [-1] * n
    inplace_ops = INPLACE_OPS
    size_fns = list(alloc_size) if alloc_size is not None else [None] * len(aligns)

    def size_of(t: Tensor, buffer: int = -1) -> int:
        s = sizes[t.id]
        if s < 0:
            fn = size_fns[owner[t.id] if buffer < 0 else buffer]
            s = sizes[t.id] = t.nbytes if fn is None else fn(t)
            if asked is not None:
                asked.append(s)
        return s

    def allocate(t: Tensor, buffer: int) -> None:
        # callers checked: not external, not already placed, not a view
        tid = t.id
        own[tid] = True
        if t.op in inplace_ops:
            for p in t.src:
                pid = p.id
                if not own[pid] or children[pid] != 1 or views[pid] != 0:
                    continue
                root = p.view_src
                if p.flags & FLAG_OUTPUT or (root is not None and root.flags & FLAG_OUTPUT):
                    continue
                if p.ne != t.ne or p.nb != t.nb or p.type != t.type:
                    if decisions is not None:
                        decisions.append(_layout_differs(p, t))
                    continue
                if decisions is not None:
                    decisions.append(None)
                if root is not None:
                    rid = root.id
                    # during a reserve no tensor has data, so view and root always agree
                    if views[rid] == 1 and children[rid] == 0:
                        owner[tid] = owner[pid]
                        addr[tid] = addr[rid]
                        own[pid] = False
                        own[rid] = False
                        owner_b = owner[rid]
                        _free_extra(allocs[owner_b], addr[rid], size_of(root), size_of(t, owner_b))
                        return
                else:
                    owner[tid] = owner[pid]
                    addr[tid] = addr[pid]
                    own[pid] = False
                    _free_extra(allocs[owner[pid]], addr[pid], size_of(p), size_of(t, owner[pid]))
                    return
        owner[tid] = buffer
        addr[tid] = allocs[buffer].alloc(size_of(t, buffer))

    def free(t: Tensor) -> None:
        if t.flags & FLAG_OUTPUT:
            return
        tid = t.id
        allocs[owner[tid]].free(addr[tid], size_of(t))
        own[tid] = False

    for k, leaf in enumerate(leafs):
        if not (leaf.buf or own[leaf.id] or leaf.view_src is not None):
            allocate(leaf, leaf_buffer[k] if leaf_buffer is not None else 0)
    for k, node in enumerate(nodes):
        b = node_buffer[k] if node_buffer is not None else 0
        root = node.view_src
        if root is not None and node.op != "NONE":
            views[root.id] += 1
        if node.flags & FLAG_INPUT and not (node.buf or own[node.id] or root is not None):
            allocate(node, b)
        for s in node.src:
            children[s.id] += 1
            if s.flags & FLAG_INPUT and not (s.buf or own[s.id] or s.view_src is not None):
                allocate(s, b)
    tensors: dict[int, Tensor] = {}
    if checkpoints:
        for t in (*leafs, *nodes):
            tensors[t.id] = t
            for s in t.src:
                tensors[s.id] = s

    def snapshot() -> object:
        live = sorted((owner[tid], addr[tid], size_of(t)) for tid, t in tensors.items() if own[tid])
        return (
            tuple((tuple(map(tuple, a.blocks)), a.max_size) for a in allocs),
            tuple(live),
        )

    for k, node in enumerate(nodes):
        b = node_buffer[k] if node_buffer is not None else 0
        src = node.src
        for p in src:
            if not (p.buf or own[p.id] or p.view_src is not None):
                allocate(p, b)
        if not (node.buf or own[node.id] or node.view_src is not None):
            allocate(node, b)
        for p in src:
            pid = p.id
            c = children[pid] - 1
            children[pid] = c
            if c == 0 and views[pid] == 0:
                root = p.view_src
                if root is not None:
                    rid = root.id
                    views[rid] -= 1
                    if views[rid] == 0 and children[rid] == 0 and own[rid]:
                        free(root)
                elif own[pid]:
                    free(p)
        if checkpoints and node.id in checkpoints:
            assert states is not None
            states[checkpoints[node.id]] = snapshot()
    return [a.max_size for a in allocs]


def _free_extra(alloc: DynAllocator, offset: int, parent_size: int, node_size: int) -> None:
    """``ggml_gallocr_free_extra_space``: give back what an in-place result does not use."""
    a = alloc.align
    parent_size = (parent_size + a - 1) // a * a
    node_size = (node_size + a - 1) // a * a
    extra = parent_size > node_size
    if alloc.trace is not None:
        alloc.trace.append(("extra", extra))
    if extra:
        alloc.free(offset + node_size, parent_size - node_size)
