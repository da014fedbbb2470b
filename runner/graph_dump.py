"""llama.cpp's own reserve graph, read out of the engine in a child process.

The compute buffers llama.cpp reserves come from one worst-case graph
(``llama_context::graph_reserve``). ggtune rebuilds that graph in Python
(app/predict/graph); this module reads the real one so the two can be compared node by
node. ``llama_graph_reserve`` (``src/llama-ext.h``, exported from libllama without C
linkage, so it is looked up by its mangled name) rebuilds the graph of a context; its
nodes and leafs are walked through ``ggml_graph_node`` and the ``ggml_cgraph`` /
``ggml_tensor`` layouts of ``ggml/src/ggml-impl.h`` and ``ggml/include/ggml.h`` (at the
pinned commit; a test checks a known graph, so a layout change fails loudly).

Each tensor comes back as a :class:`TensorRecord` (type, shape, strides, op, flags,
sources and view source as indexes, and whether its memory is a weight or a cache);
:class:`GraphDump` holds them with the node and leaf order and the compute buffer sizes
llama.cpp logged for the context. This is a development and test tool: the estimate
itself never runs the engine.

Example::

    dumps = dump_graphs("model.gguf", [Settings(n_ctx=4096)])
    dumps[0].compute_mib     # {"CPU": 98.25}
    len(dumps[0].nodes)      # 936
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.errors import EngineError, EngineLoadError, ModelFileNotFoundError
from app.settings import Settings
from runner.dry_run import LOAD_MODE_NONE, context_params, open_engine
from runner.worker import ChildChannel, ChildFailure, EngineWorker, ItemEvent, LogEvent, StepEvent

GRAPH_RESERVE_SYMBOL: Final = "_Z19llama_graph_reserveP13llama_contextjjj"
"""``llama_graph_reserve(llama_context *, uint32_t, uint32_t, uint32_t)``, Itanium ABI."""

GGML_MAX_SRC: Final = 10
BUFFER_USAGE_WEIGHTS: Final = 1
"""``GGML_BACKEND_BUFFER_USAGE_WEIGHTS`` (``ggml/include/ggml-backend.h``)."""

_COMPUTE_RE: Final = re.compile(r"sched_reserve:\s*(\S+) compute buffer size =\s*([\d.]+) MiB")


@dataclass(frozen=True, slots=True)
class TensorRecord:
    """One tensor of the graph; ``src`` and ``view_src`` index :attr:`GraphDump.tensors`.

    ``memory`` is ``""`` for a compute tensor, ``"weights"`` for a model weight and
    ``"state"`` for any other pre-allocated tensor (a cache); ``buffer`` names the buffer.
    """

    name: str
    op: str
    type: int
    ne: tuple[int, int, int, int]
    nb: tuple[int, int, int, int]
    flags: int
    src: tuple[int, ...]
    view_src: int | None
    view_offs: int
    nbytes: int
    memory: str
    buffer: str


@dataclass(frozen=True, slots=True)
class GraphDump:
    """The reserve graph of one context: tensors, node order, leaf order, buffer sizes."""

    settings: Settings
    n_tokens: int
    n_seqs: int
    n_outputs: int
    tensors: tuple[TensorRecord, ...]
    nodes: tuple[int, ...]
    leafs: tuple[int, ...]
    compute_mib: dict[str, float]


@dataclass(frozen=True, slots=True)
class DumpRequest:
    model_path: str
    settings: tuple[Settings, ...]
    n_gpu_layers: int
    use_extra_bufts: bool = True


class _Tensor(ctypes.Structure):
    pass


# ggml/include/ggml.h, struct ggml_tensor (GGML_MAX_DIMS 4, GGML_MAX_OP_PARAMS 64,
# GGML_MAX_SRC 10, GGML_MAX_NAME 64)
_Tensor._fields_ = [
    ("type", ctypes.c_int),
    ("buffer", ctypes.c_void_p),
    ("ne", ctypes.c_int64 * 4),
    ("nb", ctypes.c_size_t * 4),
    ("op", ctypes.c_int),
    ("op_params", ctypes.c_int32 * 16),
    ("flags", ctypes.c_int32),
    ("src", ctypes.POINTER(_Tensor) * GGML_MAX_SRC),
    ("view_src", ctypes.POINTER(_Tensor)),
    ("view_offs", ctypes.c_size_t),
    ("data", ctypes.c_void_p),
    ("name", ctypes.c_char * 64),
    ("extra", ctypes.c_void_p),
    ("padding", ctypes.c_char * 8),
]


class _Graph(ctypes.Structure):
    # ggml/src/ggml-impl.h, struct ggml_cgraph (the fields up to leafs)
    _fields_ = [
        ("size", ctypes.c_int),
        ("n_nodes", ctypes.c_int),
        ("n_leafs", ctypes.c_int),
        ("nodes", ctypes.POINTER(ctypes.POINTER(_Tensor))),
        ("grads", ctypes.c_void_p),
        ("grad_accs", ctypes.c_void_p),
        ("leafs", ctypes.POINTER(ctypes.POINTER(_Tensor))),
    ]


def _functions(bindings: Any) -> tuple[Any, ...]:
    lib = bindings._lib
    try:
        reserve = getattr(lib, GRAPH_RESERVE_SYMBOL)
    except AttributeError:
        raise ChildFailure(
            "this libllama has no llama_graph_reserve (llama.cpp changed?)",
            error=EngineError,
        ) from None
    reserve.restype = ctypes.c_void_p
    reserve.argtypes = [ctypes.c_void_p, ctypes.c_uint32, ctypes.c_uint32, ctypes.c_uint32]
    op_name = lib.ggml_op_name
    op_name.restype = ctypes.c_char_p
    op_name.argtypes = [ctypes.c_int]
    nbytes = lib.ggml_nbytes
    nbytes.restype = ctypes.c_size_t
    nbytes.argtypes = [ctypes.POINTER(_Tensor)]
    usage = lib.ggml_backend_buffer_get_usage
    usage.restype = ctypes.c_int
    usage.argtypes = [ctypes.c_void_p]
    buf_name = lib.ggml_backend_buffer_name
    buf_name.restype = ctypes.c_char_p
    buf_name.argtypes = [ctypes.c_void_p]
    return reserve, op_name, nbytes, usage, buf_name


def _walk(graph_ptr: int, fns: tuple[Any, ...]) -> tuple[list[TensorRecord], list[int], list[int]]:
    _, op_name, nbytes, usage, buf_name = fns
    graph = _Graph.from_address(graph_ptr)
    index: dict[int, int] = {}
    records: list[TensorRecord | None] = []

    def visit(ptr: Any) -> int:
        address = ctypes.addressof(ptr.contents)
        found = index.get(address)
        if found is not None:
            return found
        t = ptr.contents
        i = len(records)
        index[address] = i
        records.append(None)
        view = visit(t.view_src) if t.view_src else None
        src = tuple(visit(t.src[k]) for k in range(GGML_MAX_SRC) if t.src[k])
        memory = ""
        buffer = ""
        if t.buffer:
            buffer = (buf_name(t.buffer) or b"").decode("utf-8", "replace")
            memory = "weights" if usage(t.buffer) == BUFFER_USAGE_WEIGHTS else "state"
        records[i] = TensorRecord(
            name=t.name.decode("utf-8", "replace"),
            op=(op_name(t.op) or b"").decode(),
            type=t.type,
            ne=(t.ne[0], t.ne[1], t.ne[2], t.ne[3]),
            nb=(t.nb[0], t.nb[1], t.nb[2], t.nb[3]),
            flags=t.flags,
            src=src,
            view_src=view,
            view_offs=t.view_offs,
            nbytes=nbytes(ptr),
            memory=memory,
            buffer=buffer,
        )
        return i

    nodes = [visit(graph.nodes[i]) for i in range(graph.n_nodes)]
    leafs = [visit(graph.leafs[i]) for i in range(graph.n_leafs)]
    return [r for r in records if r is not None], nodes, leafs


def dump_child(request: DumpRequest, channel: ChildChannel) -> None:
    """In the child: one model load, one context and one reserve graph per settings."""
    engine = open_engine(channel)
    bindings, forwarder = engine.bindings, engine.forwarder
    fns = _functions(bindings)
    params = bindings.llama_model_default_params()
    params.n_gpu_layers = request.n_gpu_layers
    params.load_mode = LOAD_MODE_NONE
    params.no_alloc = True
    params.use_extra_bufts = request.use_extra_bufts
    channel.step("loading the model")
    model = bindings.llama_model_load_from_file(request.model_path.encode(), params)
    forwarder.flush()
    if not model:
        raise ChildFailure("llama.cpp could not load the model", error=EngineLoadError)
    try:
        for settings in request.settings:
            channel.step(f"reserving the graph for {settings}")
            forwarder.errors.clear()
            ctx = bindings.llama_init_from_model(model, context_params(bindings, settings))
            forwarder.flush()
            if not ctx:
                raise ChildFailure("llama.cpp could not create the context", error=EngineLoadError)
            try:
                n_tokens = min(bindings.llama_n_ctx(ctx), bindings.llama_n_ubatch(ctx))
                n_seqs = bindings.llama_n_seq_max(ctx)
                n_outputs = min(n_tokens, bindings.llama_n_batch(ctx))
                graph = fns[0](ctx, n_tokens, n_seqs, n_outputs)
                if not graph:
                    raise ChildFailure("llama_graph_reserve returned no graph", error=EngineError)
                records, nodes, leafs = _walk(graph, fns)
            finally:
                bindings.llama_free(ctx)
                forwarder.flush()
            channel.send(
                GraphDump(
                    settings=settings,
                    n_tokens=n_tokens,
                    n_seqs=n_seqs,
                    n_outputs=n_outputs,
                    tensors=tuple(records),
                    nodes=tuple(nodes),
                    leafs=tuple(leafs),
                    compute_mib={},  # filled in by the parent from this step's log
                )
            )
    finally:
        bindings.llama_model_free(model)
        forwarder.flush()


def dump_graphs(
    model_path: str | os.PathLike[str],
    settings_list: Sequence[Settings],
    *,
    n_gpu_layers: int = 0,
    timeout_s: float = 300.0,
) -> list[GraphDump]:
    """Return llama.cpp's reserve graph for each settings (CPU only; one child process, one
    model load: the settings share ``repack``)."""
    if not os.path.isfile(model_path):
        raise ModelFileNotFoundError("no such model file", path=model_path)
    repack = {s.repack for s in settings_list}
    assert len(repack) <= 1, "one model load: every settings must share repack"
    request = DumpRequest(
        os.fspath(model_path), tuple(settings_list), n_gpu_layers, all(repack) if repack else True
    )
    run = EngineWorker(dump_child, request, timeout_s=timeout_s).run()
    dumps: list[GraphDump] = []
    compute: dict[str, float] = {}
    for event in run.events:
        if isinstance(event, StepEvent):
            compute = {}
        elif isinstance(event, LogEvent):
            m = _COMPUTE_RE.search(event.text)
            if m:
                compute[m.group(1)] = float(m.group(2))
        elif isinstance(event, ItemEvent) and isinstance(event.item, GraphDump):
            dumps.append(dataclasses.replace(event.item, compute_mib=dict(compute)))
    if len(dumps) != len(settings_list):
        raise EngineError(
            f"the engine dumped {len(dumps)} graphs for {len(settings_list)} settings"
        )
    return dumps
