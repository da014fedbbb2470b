"""A shape-only ggml: the tensors, ops and graph order llama.cpp builds, without data.

llama.cpp reserves its compute buffers by building the graph of one worst-case micro-batch
and letting ggml-alloc place every intermediate tensor (``src/llama-context.cpp``
``graph_reserve``). To predict those buffers exactly, ggtune builds the same graph: this
module mirrors what the vendored ``ggml/src/ggml.c`` does for each op that matters for
memory (result type, shape, strides, whether the result is a view of another tensor) and
how ``ggml_build_forward_expand`` orders nodes (a depth-first visit of the sources, left to
right, each tensor once; ``ggml_visit_parents_graph``). Nothing is computed.

Tensors are plain slotted objects; ops are module functions named after their ggml
counterparts (``mul_mat``, ``rope_ext``, ``view_4d`` …) taking a :class:`Graph` first.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from app.model.ggml import GGML_TYPES

# ggml_type ids of the types activations, inputs and caches use (ggml/include/ggml.h)
F32: Final = 0
F16: Final = 1
Q4_0: Final = 2
Q8_0: Final = 8
I32: Final = 26
I64: Final = 27

FLAG_INPUT: Final = 1
FLAG_OUTPUT: Final = 2

# where a tensor's memory lives when it is not ggml-alloc's to place
BUF_NONE: Final = 0  # a compute tensor (or a view of one)
BUF_WEIGHTS: Final = 1  # a model weight (GGML_BACKEND_BUFFER_USAGE_WEIGHTS)
BUF_STATE: Final = 2  # a KV cache or recurrent state tensor (pre-allocated, not weights)

VIEW_OPS: Final = frozenset({"VIEW", "RESHAPE", "PERMUTE", "TRANSPOSE"})
"""``ggml_is_view_op`` (ggml-backend.cpp): the scheduler skips these when assigning."""


_TRAITS: Final[dict[int, tuple[int, int]]] = {
    t.id: (t.block_size, t.type_size) for t in GGML_TYPES.values()
}


def type_traits(ggml_type: int) -> tuple[int, int]:
    """Return (block size, bytes per block) of ``ggml_type`` (unknown types count as 1, 1)."""
    return _TRAITS.get(ggml_type, (1, 1))


def is_quantized(ggml_type: int) -> bool:
    """Return ``ggml_is_quantized``."""
    return type_traits(ggml_type)[0] > 1


def row_size(ggml_type: int, n: int) -> int:
    """Return ``ggml_row_size``: bytes of ``n`` elements of ``ggml_type``."""
    blck, size = type_traits(ggml_type)
    return size * n // blck


class Tensor:
    """One ggml tensor: type, ``ne`` (elements per dim), ``nb`` (strides), op and sources.

    ``view_src`` is the root tensor a view shares memory with (never itself a view), as
    ``ggml_new_tensor_impl`` resolves it. ``buf`` says whether the memory is external
    (weights, caches) and ``dev`` which device holds it (-1 = the host).
    """

    __slots__ = (
        "buf",
        "dev",
        "flags",
        "id",
        "name",
        "nb",
        "ne",
        "op",
        "src",
        "type",
        "view_offs",
        "view_src",
    )

    id: int
    type: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    op: str
    src: list[Tensor]
    view_src: Tensor | None
    view_offs: int
    flags: int
    name: str
    buf: int
    dev: int

    def __init__(
        self,
        graph: Graph,
        ggml_type: int,
        ne: tuple[int, int, int, int],
        nb: tuple[int, int, int, int] | None = None,
        op: str = "NONE",
        src: Sequence[Tensor | None] = (),
        view_src: Tensor | None = None,
        view_offs: int = 0,
        name: str = "",
    ) -> None:
        if view_src is not None and view_src.view_src is not None:
            view_offs += view_src.view_offs
            view_src = view_src.view_src
        graph._next += 1
        self.id = graph._next
        self.type = ggml_type
        self.ne = ne
        if nb is None:
            blck, size = _TRAITS.get(ggml_type, (1, 1))
            nb1 = size * (ne[0] // blck)
            nb2 = nb1 * ne[1]
            nb = (size, nb1, nb2, nb2 * ne[2])
        self.nb = nb
        self.op = op
        self.src = [s for s in src if s is not None] if src else []
        self.view_src = view_src
        self.view_offs = view_offs
        self.flags = 0
        self.name = name
        self.buf = BUF_NONE
        self.dev = -1

    def __repr__(self) -> str:
        return f"Tensor({self.name!r}, {self.op}, {self.ne})"

    @property
    def nbytes(self) -> int:
        """Return ``ggml_nbytes``."""
        ne, nb = self.ne, self.nb
        if ne[0] <= 0 or ne[1] <= 0 or ne[2] <= 0 or ne[3] <= 0:
            return 0
        blck, size = _TRAITS.get(self.type, (1, 1))
        rest = (ne[1] - 1) * nb[1] + (ne[2] - 1) * nb[2] + (ne[3] - 1) * nb[3]
        if blck == 1:
            return size + (ne[0] - 1) * nb[0] + rest
        return ne[0] * nb[0] // blck + rest

    @property
    def is_view(self) -> bool:
        """Return whether the tensor shares another tensor's memory."""
        return self.view_src is not None

    def nelements(self) -> int:
        """Return the number of elements."""
        ne = self.ne
        return ne[0] * ne[1] * ne[2] * ne[3]

    def is_contiguous(self) -> bool:
        """Return ``ggml_is_contiguous``."""
        return self.nb == contiguous_nb(self.type, self.ne)


def contiguous_nb(ggml_type: int, ne: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Return the strides of a contiguous tensor (``ggml_new_tensor_impl``)."""
    blck, size = type_traits(ggml_type)
    nb0 = size
    nb1 = nb0 * (ne[0] // blck)
    nb2 = nb1 * ne[1]
    return (nb0, nb1, nb2, nb2 * ne[2])


def _ne(*dims: int) -> tuple[int, int, int, int]:
    d = (*dims, 1, 1, 1, 1)
    return (d[0], d[1], d[2], d[3])


class Graph:
    """A ggml context plus the graph: tensors get ids; :meth:`expand` orders nodes."""

    __slots__ = ("_next", "_visited", "leafs", "nodes")

    def __init__(self) -> None:
        self._next = 0
        self._visited: set[int] = set()
        self.nodes: list[Tensor] = []
        self.leafs: list[Tensor] = []

    def next_id(self) -> int:
        """Return a fresh tensor id."""
        self._next += 1
        return self._next

    @property
    def n_tensors(self) -> int:
        """Return how many tensor ids were handed out."""
        return self._next + 1

    def expand(self, tensor: Tensor) -> None:
        """``ggml_build_forward_expand``: add ``tensor`` and its unvisited ancestors."""
        visited = self._visited
        if tensor.id in visited:
            return
        # iterative depth-first visit, sources left to right, node after its sources
        leafs, nodes = self.leafs, self.nodes
        stack: list[tuple[Tensor, int]] = [(tensor, 0)]
        visited.add(tensor.id)
        while stack:
            node, i = stack.pop()
            src = node.src
            n = len(src)
            while i < n:
                s = src[i]
                i += 1
                if s.id not in visited:
                    visited.add(s.id)
                    stack.append((node, i))
                    node, i, src, n = s, 0, s.src, len(s.src)
            if node.op == "NONE":
                leafs.append(node)
            else:
                nodes.append(node)

    def leaf(
        self, ggml_type: int, ne: tuple[int, int, int, int], name: str, buf: int, dev: int
    ) -> Tensor:
        """Return an external tensor (a weight or a cache) on device ``dev``."""
        t = Tensor(self, ggml_type, ne, name=name)
        t.buf = buf
        t.dev = dev
        return t

    def input(self, ggml_type: int, *dims: int, name: str) -> Tensor:
        """Return a new graph input (``ggml_set_input``), placed by ggml-alloc first."""
        t = Tensor(self, ggml_type, _ne(*dims), name=name)
        t.flags |= FLAG_INPUT
        return t


# --- tensor constructors ----------------------------------------------------------------


def new_tensor(
    g: Graph, ggml_type: int, *dims: int, op: str = "NONE", src: Sequence[Tensor | None] = ()
) -> Tensor:
    """``ggml_new_tensor_Nd`` with an op and sources."""
    return Tensor(g, ggml_type, _ne(*dims), op=op, src=src)


def dup(g: Graph, a: Tensor, op: str, *src: Tensor | None, inplace: bool = False) -> Tensor:
    """The result of an element-wise op on ``a``: ``ggml_dup_tensor`` or, in place, a view."""
    if inplace:
        return Tensor(g, a.type, a.ne, a.nb, op=op, src=src, view_src=a)
    return Tensor(g, a.type, a.ne, op=op, src=src)


def view_tensor(g: Graph, a: Tensor, op: str, *src: Tensor | None) -> Tensor:
    """``ggml_view_tensor``: same shape and strides, sharing ``a``'s memory."""
    return Tensor(g, a.type, a.ne, a.nb, op=op, src=src, view_src=a)


# --- views -----------------------------------------------------------------------------


def reshape(g: Graph, a: Tensor, *dims: int) -> Tensor:
    """``ggml_reshape_Nd`` (``a`` must be contiguous)."""
    ne = _ne(*dims)
    assert ne[0] * ne[1] * ne[2] * ne[3] == a.nelements(), f"reshape {a.ne} -> {ne}"
    return Tensor(g, a.type, ne, op="RESHAPE", src=(a,), view_src=a)


def view(g: Graph, a: Tensor, ne: Sequence[int], nb: Sequence[int], offset: int) -> Tensor:
    """``ggml_view_Nd``: ``nb`` holds nb1.. for the given dims (the rest follow on)."""
    dims = _ne(*ne)
    _, size = type_traits(a.type)
    strides = [size, *nb]
    while len(strides) < 4:
        strides.append(strides[-1] * dims[len(strides) - 1])
    return Tensor(
        g,
        a.type,
        dims,
        (strides[0], strides[1], strides[2], strides[3]),
        op="VIEW",
        src=(a,),
        view_src=a,
        view_offs=offset,
    )


def view_1d(g: Graph, a: Tensor, ne0: int, offset: int) -> Tensor:
    """``ggml_view_1d``."""
    return view(g, a, (ne0,), (), offset)


def view_2d(g: Graph, a: Tensor, ne0: int, ne1: int, nb1: int, offset: int) -> Tensor:
    """``ggml_view_2d``."""
    return view(g, a, (ne0, ne1), (nb1,), offset)


def view_3d(
    g: Graph, a: Tensor, ne0: int, ne1: int, ne2: int, nb1: int, nb2: int, offset: int
) -> Tensor:
    """``ggml_view_3d``."""
    return view(g, a, (ne0, ne1, ne2), (nb1, nb2), offset)


def view_4d(
    g: Graph,
    a: Tensor,
    ne: tuple[int, int, int, int],
    nb1: int,
    nb2: int,
    nb3: int,
    offset: int,
) -> Tensor:
    """``ggml_view_4d``."""
    return view(g, a, ne, (nb1, nb2, nb3), offset)


def permute(g: Graph, a: Tensor, ax0: int, ax1: int, ax2: int, ax3: int) -> Tensor:
    """``ggml_permute``: dim i of ``a`` becomes dim ``ax_i`` of the result."""
    ne = [0, 0, 0, 0]
    nb = [0, 0, 0, 0]
    for i, ax in enumerate((ax0, ax1, ax2, ax3)):
        ne[ax] = a.ne[i]
        nb[ax] = a.nb[i]
    return Tensor(
        g,
        a.type,
        (ne[0], ne[1], ne[2], ne[3]),
        (nb[0], nb[1], nb[2], nb[3]),
        op="PERMUTE",
        src=(a,),
        view_src=a,
    )


def transpose(g: Graph, a: Tensor) -> Tensor:
    """``ggml_transpose``."""
    ne, nb = a.ne, a.nb
    return Tensor(
        g,
        a.type,
        (ne[1], ne[0], ne[2], ne[3]),
        (nb[1], nb[0], nb[2], nb[3]),
        op="TRANSPOSE",
        src=(a,),
        view_src=a,
    )


# --- ops -----------------------------------------------------------------------------


def cont(g: Graph, a: Tensor, *dims: int) -> Tensor:
    """``ggml_cont`` / ``ggml_cont_Nd``: a contiguous copy (optionally reshaped)."""
    return Tensor(g, a.type, _ne(*dims) if dims else a.ne, op="CONT", src=(a,))


def cpy(g: Graph, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_cpy``: copy ``a`` into ``b``; the result is a view of ``b``."""
    return view_tensor(g, b, "CPY", a, b)


def cast(g: Graph, a: Tensor, ggml_type: int) -> Tensor:
    """``ggml_cast``: a new tensor of ``ggml_type``; it lists itself as its second source."""
    t = Tensor(g, ggml_type, a.ne, op="CPY", src=(a,))
    t.src.append(t)
    return t


def get_rows(g: Graph, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_get_rows``: f32 (i32 for i32 ``a``) ``[a.ne0, b.ne0, b.ne1, b.ne2]``."""
    t = I32 if a.type == I32 else F32
    return new_tensor(g, t, a.ne[0], b.ne[0], b.ne[1], b.ne[2], op="GET_ROWS", src=(a, b))


def set_rows(g: Graph, a: Tensor, b: Tensor, c: Tensor) -> Tensor:
    """``ggml_set_rows``: write rows ``b`` into ``a`` at ``c``; a view of ``a``."""
    return view_tensor(g, a, "SET_ROWS", b, c, a)


def mul_mat(g: Graph, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_mul_mat``: f32 ``[a.ne1, b.ne1, b.ne2, b.ne3]``."""
    return new_tensor(g, F32, a.ne[1], b.ne[1], b.ne[2], b.ne[3], op="MUL_MAT", src=(a, b))


def mul_mat_id(g: Graph, a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """``ggml_mul_mat_id``: f32 ``[as.ne1, ids.ne0, b.ne2]``."""
    return new_tensor(g, F32, a.ne[1], ids.ne[0], b.ne[2], 1, op="MUL_MAT_ID", src=(a, b, ids))


def binary(g: Graph, op: str, a: Tensor, b: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_add`` / ``ggml_mul`` / ``ggml_sub`` / ``ggml_div``: shaped like ``a``."""
    return dup(g, a, op, a, b, inplace=inplace)


def add(g: Graph, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_add``."""
    return dup(g, a, "ADD", a, b)


def mul(g: Graph, a: Tensor, b: Tensor) -> Tensor:
    """``ggml_mul``."""
    return dup(g, a, "MUL", a, b)


def unary(g: Graph, a: Tensor, op: str = "UNARY", inplace: bool = False) -> Tensor:
    """Element-wise ops with one source (``ggml_silu``, ``ggml_scale``, ``ggml_rms_norm`` …)."""
    return dup(g, a, op, a, inplace=inplace)


def clamp(g: Graph, a: Tensor) -> Tensor:
    """``ggml_clamp``."""
    return dup(g, a, "CLAMP", a)


def rope(g: Graph, a: Tensor, pos: Tensor, factors: Tensor | None = None) -> Tensor:
    """``ggml_rope_ext``."""
    return dup(g, a, "ROPE", a, pos, factors)


def soft_max(
    g: Graph, a: Tensor, mask: Tensor | None = None, sinks: Tensor | None = None
) -> Tensor:
    """``ggml_soft_max_ext`` (+ ``ggml_soft_max_add_sinks``)."""
    return dup(g, a, "SOFT_MAX", a, mask, sinks)


def glu(g: Graph, a: Tensor, b: Tensor | None) -> Tensor:
    """``ggml_swiglu_split`` and friends; without ``b`` the halves of ``a`` are used."""
    ne = a.ne if b is not None else (a.ne[0] // 2, a.ne[1], a.ne[2], a.ne[3])
    return Tensor(g, a.type, ne, op="GLU", src=(a, b))


def flash_attn_ext(
    g: Graph, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, sinks: Tensor | None
) -> Tensor:
    """``ggml_flash_attn_ext``: f32 ``[v.ne0, q.ne2, q.ne1, q.ne3]``."""
    src: list[Tensor | None] = [q, k, v, mask, sinks]
    return new_tensor(g, F32, v.ne[0], q.ne[2], q.ne[1], q.ne[3], op="FLASH_ATTN_EXT", src=src)


def concat(g: Graph, a: Tensor, b: Tensor, dim: int) -> Tensor:
    """``ggml_concat`` along ``dim``."""
    ne = list(a.ne)
    ne[dim] = a.ne[dim] + b.ne[dim]
    return new_tensor(g, a.type, *ne, op="CONCAT", src=(a, b))


def argsort_top_k(g: Graph, a: Tensor, k: int) -> Tensor:
    """``ggml_argsort_top_k``: an i32 argsort of ``a`` viewed to its first ``k`` columns."""
    s = Tensor(g, I32, a.ne, op="ARGSORT", src=(a,))
    return view_4d(g, s, (k, s.ne[1], s.ne[2], s.ne[3]), s.nb[1], s.nb[2], s.nb[3], 0)


def sum_rows(g: Graph, a: Tensor) -> Tensor:
    """``ggml_sum_rows``: ``[1, ne1, ne2, ne3]``."""
    return new_tensor(g, a.type, 1, a.ne[1], a.ne[2], a.ne[3], op="SUM_ROWS", src=(a,))


def pad(g: Graph, a: Tensor, p0: int, p1: int = 0, p2: int = 0, p3: int = 0) -> Tensor:
    """``ggml_pad``."""
    ne = a.ne
    return new_tensor(g, a.type, ne[0] + p0, ne[1] + p1, ne[2] + p2, ne[3] + p3, op="PAD", src=(a,))


def repeat_4d(g: Graph, a: Tensor, *dims: int) -> Tensor:
    """``ggml_repeat_4d``."""
    return new_tensor(g, a.type, *dims, op="REPEAT", src=(a,))


def add_id(g: Graph, a: Tensor, b: Tensor, ids: Tensor) -> Tensor:
    """``ggml_add_id``."""
    return dup(g, a, "ADD_ID", a, b, ids)


def fill(g: Graph, a: Tensor, inplace: bool = False) -> Tensor:
    """``ggml_fill``."""
    return dup(g, a, "FILL", a, inplace=inplace)


def ssm_conv(g: Graph, sx: Tensor, c: Tensor) -> Tensor:
    """``ggml_ssm_conv``: f32 ``[d_inner, n_t, n_s]`` with ``n_t = sx.ne0 - d_conv + 1``."""
    n_t = sx.ne[0] - c.ne[0] + 1
    return new_tensor(g, F32, c.ne[1], n_t, sx.ne[2], op="SSM_CONV", src=(sx, c))


def ssm_scan(
    g: Graph,
    s: Tensor,
    x: Tensor,
    dt: Tensor,
    a: Tensor,
    b: Tensor,
    c: Tensor,
    ids: Tensor,
    k: int = 1,
) -> Tensor:
    """``ggml_ssm_scan``: y and the new states, one f32 vector."""
    n = x.nelements() + k * s.ne[0] * s.ne[1] * s.ne[2] * ids.ne[0]
    return new_tensor(g, F32, n, op="SSM_SCAN", src=(s, x, dt, a, b, c, ids))


def repeat(g: Graph, a: Tensor, like: Tensor) -> Tensor:
    """``ggml_repeat``: ``a`` tiled to ``like``'s shape (``like`` is not a source)."""
    return Tensor(g, a.type, like.ne, op="REPEAT", src=(a,))


def rwkv_wkv(
    g: Graph, op: str, src: Sequence[Tensor], s: int, h: int, n_tokens: int, n_seqs: int
) -> Tensor:
    """``ggml_rwkv_wkv6`` / ``ggml_rwkv_wkv7``: f32 ``[S*H, n_tokens + S*n_seqs]``."""
    return new_tensor(g, F32, s * h, n_tokens + s * n_seqs, op=op, src=src)
