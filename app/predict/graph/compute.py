"""Compute buffers per device from llama.cpp's own reserve graph, rebuilt and placed.

:func:`compute_buffers` is what the estimate calls: it builds the worst-case graph
``llama_context::sched_reserve`` reserves (:mod:`.models`), lets the scheduler split it over
the devices (:mod:`.sched`) and ggml-alloc size each backend's buffer (:mod:`.alloc`).
It returns one size per device — the GPUs in order, then the host — or None when ggtune
has no graph for the architecture (the estimate then falls back to its stage model and
says the figure is approximate).

What differs between backends (``ggml/src/ggml-*/``): the buffer alignment (CUDA/HIP 128
bytes, CPU, RPC-on-CPU and Metal 32), whether the backend takes over large ops on weights
left in host memory (``offload_op``: CUDA/HIP for batches of 32 tokens or more), and
whether it can run a pipeline (async compute and events; CUDA, HIP and RPC can), which with
several devices and a full offload makes the scheduler keep four copies of every split
input (``GGML_SCHED_MAX_COPIES``).
"""

from __future__ import annotations

import array
import bisect
import dataclasses
import threading
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from app.model.ggml import GGML_TYPE_IDS
from app.model.spec import ModelSpec
from app.predict.graph import ggml
from app.predict.graph.alloc import Trace
from app.predict.graph.ggml import Tensor
from app.predict.graph.llm import GraphParams, LlmGraph, WeightSource
from app.predict.graph.models import BUILDERS, LAYER_VARIANTS
from app.predict.graph.sched import MAX_COPIES, Backends, reserve_per_device
from app.settings import CACHE_TYPES

CPU_ALIGN: Final = 32
"""``TENSOR_ALIGNMENT`` (ggml-cpu): the CPU buffer type's alignment."""

OFFLOAD_MIN_BATCH: Final = 32
"""CUDA's ``op_offload_min_batch_size`` default (``GGML_OP_OFFLOAD_MIN_BATCH``)."""

CACHE_TYPE_IDS: Final[dict[str, int]] = {c: GGML_TYPE_IDS[c] for c in CACHE_TYPES}


MATRIX_ROW_PADDING: Final = 512
"""ggml-cuda ``common.cuh``: quantized rows are padded to this many elements."""


def cuda_alloc_size(t: Tensor) -> int:
    """``ggml_backend_cuda_buffer_type_get_alloc_size`` (ggml-cuda.cu, fattn.cu).

    Quantized tensors (weights copied for a split) get their last row padded to 512
    elements. Flash attention converts a K or V that is not f16 into f16 copies placed
    after its result (``ggml_cuda_flash_attn_ext_get_f16_extra_data``); that holds for the
    MMA and tile kernels, which a batch of 32 tokens or more gets on a recent GPU (the
    vector kernel of one-token batches converts f32 only). The kernel choice itself
    (``ggml_cuda_get_best_fattn_kernel``) is not modelled: bench/gpu_check.py measures it.
    """
    size = t.nbytes
    if t.op == "FLASH_ATTN_EXT" and len(t.src) >= 3:
        q, k, v = t.src[0], t.src[1], t.src[2]
        if q.ne[1] >= OFFLOAD_MIN_BATCH:
            end = size
            if k.type != ggml.F16:
                end = -(-end // 128) * 128 + k.nelements() * 2
            v_is_k = v.view_src is not None and (
                v.view_src is k or (v.view_src is k.view_src and v.view_offs == k.view_offs)
            )
            if v.type != ggml.F16 and not v_is_k:
                end = -(-end // 128) * 128 + v.nelements() * 2
            size = end
    if ggml.is_quantized(t.type) and t.ne[0] % MATRIX_ROW_PADDING:
        size += ggml.row_size(t.type, MATRIX_ROW_PADDING - t.ne[0] % MATRIX_ROW_PADDING)
    return size


@dataclass(frozen=True, slots=True)
class BackendTraits:
    """What the scheduler and allocator need to know about one GPU backend."""

    align: int
    offload_ops: bool
    pipeline: bool
    alloc_size: Callable[[Tensor], int] | None = None


_CUDA: Final = BackendTraits(align=128, offload_ops=True, pipeline=True, alloc_size=cuda_alloc_size)
_TRAITS: Final[dict[str, BackendTraits]] = {
    # ggml-cuda.cu: get_alignment 128, offload_op (batch >= 32), async + events
    "CUDA": _CUDA,
    "ROCm": _CUDA,
    "HIP": _CUDA,
    # ggml-rpc.cpp: the server's alignment (a CPU server: 32), offload_op NULL, async +
    # events in ggml_backend_rpc_device_get_props
    "RPC": BackendTraits(align=CPU_ALIGN, offload_ops=False, pipeline=True),
    # ggml-metal: 32-byte alignment, no op offload, one device
    "MTL": BackendTraits(align=CPU_ALIGN, offload_ops=False, pipeline=False),
    "Metal": BackendTraits(align=CPU_ALIGN, offload_ops=False, pipeline=False),
}


def backend_traits(device_name: str) -> BackendTraits:
    """Return the traits of the backend behind ``device_name`` (CUDA's when unknown)."""
    for prefix, traits in _TRAITS.items():
        if device_name.startswith(prefix):
            return traits
    return _CUDA


def has_graph(spec: ModelSpec) -> bool:
    """Return whether ggtune rebuilds this architecture's compute graph."""
    return spec.arch in BUILDERS


def _weights(spec: ModelSpec) -> tuple[WeightSource, dict[str, object]]:
    """Return the spec's weights by name and the builders' hparams (kept per spec)."""
    cached = _SOURCES.get(id(spec))
    if cached is not None and cached[0] is spec:
        return cached[1], cached[2]
    w = WeightSource({t.name: (t.shape, t.ggml_type, t.layer, t.role) for t in spec.tensors})
    hp: dict[str, object] = dict(spec.graph_hparams)
    hp["__n_embd_v_gqa_max"] = spec.n_embd_v_gqa_max()
    if len(_SOURCES) > 32:
        _SOURCES.clear()
    _SOURCES[id(spec)] = (spec, w, hp)
    return w, hp


_SOURCES: dict[int, tuple[ModelSpec, WeightSource, dict[str, object]]] = {}


@dataclass(frozen=True, slots=True)
class GraphRequest:
    """Everything besides the model that decides the compute buffers (hashable)."""

    n_tokens: int
    n_outputs: int
    n_seqs: int
    kv_unified: bool
    flash_attn: bool
    type_k: str
    type_v: str
    caches: tuple[tuple[str, int], ...]
    layer_device: tuple[int, ...]
    output_device: int
    n_gpu_layers: int
    n_cpu_moe: int
    offload_kqv: bool
    gpu_names: tuple[str, ...]
    overrides: tuple[tuple[str, int], ...] = ()
    """(tensor, device) for every tensor a ``-ot`` pattern moves."""
    has_overrides: bool = False
    """Tensor overrides were given (``-ot``, or ``--n-cpu-moe``): no pipeline parallelism."""
    pins: bool = True
    """Keep the scheduler's user pins (a real load); False: as llama.cpp's ``no_alloc``
    dry run sizes the buffers (``ggml_backend_sched_reserve_size`` resets the scheduler
    first, which forgets them), what llama-fit-params and ``--fit`` decide with."""


def build_graph(
    spec: ModelSpec, req: GraphRequest, layers: Sequence[int] | None = None
) -> LlmGraph:
    """Build the reserve graph of ``spec`` for ``req`` (no placement by the scheduler yet).

    ``layers``: the repeating layers to build (default: all of them, in order).
    """
    params = GraphParams(
        n_tokens=req.n_tokens,
        n_seqs=req.n_seqs,
        n_outputs=req.n_outputs,
        kv_unified=req.kv_unified,
        flash_attn=req.flash_attn,
        type_k=CACHE_TYPE_IDS[req.type_k],
        type_v=CACHE_TYPE_IDS[req.type_v],
        caches=dict(req.caches),
        n_rs=max(1, req.n_seqs),
        layer_device=req.layer_device,
        output_device=req.output_device,
        n_cpu_moe=req.n_cpu_moe,
        offload_kqv=req.offload_kqv,
        overrides=dict(req.overrides) if req.overrides else None,
    )
    w, hp = _weights(spec)
    lg = LlmGraph(w, params, hp)
    lg.layers = list(range(spec.n_layer)) if layers is None else list(layers)
    BUILDERS[spec.arch](lg, spec)
    return lg


def _offload(n_gpu: int, traits: tuple[BackendTraits, ...]) -> object:
    def offload(b: int, t: Tensor) -> bool:
        if b >= n_gpu or not traits[b].offload_ops:
            return False
        # ggml-cuda.cu get_op_batch_size
        if t.op == "GET_ROWS":
            batch = 0
        elif t.op == "MUL_MAT":
            batch = t.ne[1]
        elif t.op in ("MUL_MAT_ID", "ROPE"):
            batch = t.ne[2]
        else:
            batch = t.ne[1] * t.ne[2] * t.ne[3]
        return batch >= OFFLOAD_MIN_BATCH

    return offload


LOCK: Final = threading.RLock()
"""Held while the caches below are read or changed: the desktop estimates on the GUI
thread and on its job pool at once (the Compare tab), and a line's points or the
planned reservations changed under a reader gave it another request's buffers."""


def compute_buffers(spec: ModelSpec, req: GraphRequest) -> tuple[int, ...] | None:
    """Return llama.cpp's compute buffer per device (GPUs, then the host), or None.

    Thread-safe (:data:`LOCK`); see :func:`_compute_buffers`.
    """
    with LOCK:
        return _compute_buffers(spec, req)


def _compute_buffers(spec: ModelSpec, req: GraphRequest) -> tuple[int, ...] | None:
    """Return llama.cpp's compute buffer per device (GPUs, then the host), or None.

    Mirrors ``llama_context::sched_reserve`` (``src/llama-context.cpp``): the scheduler gets
    one backend per GPU device of the model and the CPU last; pipeline parallelism is on
    with several devices, every layer and the output offloaded, layer split, KV offload
    and no tensor overrides (``--n-cpu-moe`` is one), when every device can.

    Requests that differ only in the size of the main KV cache (a context slider, the
    planner's search for the longest context) lie on lines: between two reserved cache
    sizes whose reservations took the same path (:class:`~.alloc.Trace`, the same graph
    with every dimension fixed or proportional to the cache), the buffers are the straight
    line between them, exactly; anything else is reserved.
    """
    if spec.arch not in BUILDERS:
        return None
    if req.pins and not _pins_matter(req):
        # the reservation reads the pins only then: a real load and fit's dry run of a
        # partial offload share their reservations and lines
        req = dataclasses.replace(req, pins=False)
    key, n = _line_of(spec, req)
    if key is None:
        return _exact(spec, req, False)[0]
    line = _LINES.get(key)
    if line is None:
        line = _Line()
        if len(_LINES) >= _LINES_SIZE:
            _LINES.pop(next(iter(_LINES)))
        _LINES[key] = line
    pts = line.points
    i = bisect.bisect_left([p.n for p in pts], n)
    if i < len(pts) and pts[i].n == n:
        return pts[i].sizes
    below = next((p for p in reversed(pts[:i]) if p.path is not None), None)
    above = next((p for p in pts[i:] if p.path is not None), None)
    if below is not None and above is not None:
        sizes = line.between(below, above, n)
        if sizes is not None:
            return sizes
        line.misses += 1
    # the first two looks at a line are plain reservations (most lines get no more); from
    # the third on they record their path, and the line's far end in the direction the
    # requests move is reserved too, so that the next ones fall between. A line whose
    # reservations took different paths twice (the allocator's choices change with the
    # cache size: a partial offload's) is left to plain reservations.
    up = n > line.last
    line.last = n
    traced = len(pts) >= 2 and line.misses < _MISSES_PER_LINE and not _partial(req)
    sizes, point = _exact(spec, req, traced)
    line.add(point if point is not None else _Point(sizes=sizes), n)
    if traced and len(pts) < _POINTS_PER_LINE:
        end = None
        if up and above is None and spec.n_ctx_train > n:
            end = -(-spec.n_ctx_train // _CELL) * _CELL
        elif not up and below is None and n > _CELL:
            end = _CELL
        if end is not None and all(p.n != end for p in pts):
            far = dataclasses.replace(req, caches=_with_kv(req.caches, end))
            far_point = _exact(spec, far, True)[1]
            assert far_point is not None
            line.add(far_point, end)
    return sizes


def _partial(req: GraphRequest) -> bool:
    """Return whether some layers run on a GPU and some on the host: the allocator's
    choices then change with nearly every cache size (host weights copied for the GPU's
    matmuls sit between the activations), so lines are not traced (measured on Llama 3.1
    70B: no two of nine traced points took the same path)."""
    dev = req.layer_device
    return bool(req.gpu_names) and any(d < 0 for d in dev) and any(d >= 0 for d in dev)


def _pins_matter(req: GraphRequest) -> bool:
    """Return whether the scheduler's pins can change the reservation (see :func:`_reserve`:
    the KQV results kept on the host, and ``graph_get_cb``'s with a full offload or a small
    batch; none without a GPU)."""
    full_offload = req.n_gpu_layers > len(req.layer_device)
    return bool(req.gpu_names) and (
        not req.offload_kqv or full_offload or req.n_tokens < OFFLOAD_MIN_BATCH
    )


_CELL: Final = 256
"""Caches grow in steps of 256 cells (``llama_kv_cache`` pads its size)."""

_STEP_ALIGN: Final = 512
"""Each 256-cell step must grow every tensor by a multiple of this (every alignment and
CUDA's row padding divide it), so that rounding never bends a line."""

_LINES_SIZE: Final = 256
_POINTS_PER_LINE: Final = 10
_MISSES_PER_LINE: Final = 2


@dataclasses.dataclass(slots=True)
class _Point:
    """One exact reservation, with what it decided (compactly: hashes where only equality
    matters)."""

    sizes: tuple[int, ...]
    path: int | None = None
    """Hash of the plan, the pins, the op offloads, the allocator's decisions and the
    graph's wiring (ops, types, flags, sources); None: a plain reservation."""
    wiring: int = 0
    """Hash of the graph's wiring (see :func:`_numbers`)."""
    asked: array.array[int] | None = None
    numbers: array.array[int] | None = None
    """The graph's shapes; kept by a line's first traced point only."""
    quantized_ne0: tuple[int, ...] = ()
    n: int = 0
    fits_first: bool = True
    """Whether every number is fixed or proportional to the cache against the first point."""
    moving: tuple[int, ...] = ()
    """The numbers that moved with the cache (from the first point)."""


class _Line:
    """The exact reservations of one request at several main-cache sizes."""

    __slots__ = ("last", "linear", "misses", "points")

    def __init__(self) -> None:
        self.points: list[_Point] = []
        self.last = 0
        self.misses = 0
        self.linear: dict[tuple[int, int], bool] = {}

    def add(self, point: _Point, n: int) -> None:
        """Insert a reservation made at cache size ``n``."""
        point = dataclasses.replace(point, n=n)
        ref = next((p for p in self.points if p.numbers is not None), None)
        if ref is not None and point.numbers is not None:
            # the first traced point keeps its numbers: the others are described against it
            point.fits_first, point.moving = _moving(ref, point)
            point.numbers = None
        bisect.insort(self.points, point, key=lambda p: p.n)

    def between(self, a: _Point, b: _Point, n: int) -> tuple[int, ...] | None:
        """Return the buffers at ``n`` from the segment a-b, or None when it is no line."""
        linear = self.linear.get((a.n, b.n))
        if linear is None:
            linear = self.linear[(a.n, b.n)] = _linear(a, b)
        if not linear:
            return None
        dn = b.n - a.n
        out = []
        for x, y in zip(a.sizes, b.sizes, strict=True):
            num = (y - x) * (n - a.n)
            if num % dn:
                return None
            out.append(x + num // dn)
        return tuple(out)


_LINES: dict[Hashable, _Line] = {}


def _moving(ref: _Point, p: _Point) -> tuple[bool, tuple[int, ...]]:
    """Compare ``p``'s graph with the reference point's: the same wiring, every number the
    same or proportional to the cache size (quantized rows keep their length); return
    whether it is so, and which numbers moved."""
    a, b = ref.numbers, p.numbers
    assert a is not None
    assert b is not None
    if ref.wiring != p.wiring or len(a) != len(b):
        return False, ()
    na, nb = ref.n, p.n
    quantized = set(ref.quantized_ne0)
    moving = []
    for k, (u, v) in enumerate(zip(a, b, strict=True)):
        if u == v:
            continue
        if u * nb != v * na or k in quantized:
            return False, ()
        moving.append(k)
    return True, tuple(moving)


def _linear(a: _Point, b: _Point) -> bool:
    """Return whether the reservations a and b took the same path (see compute_buffers)."""
    assert a.asked is not None
    assert b.asked is not None
    if a.path != b.path or len(a.asked) != len(b.asked) or not (a.fits_first and b.fits_first):
        return False
    if a.numbers is None and b.numbers is None and a.moving != b.moving:
        return False  # each is a line with the first point, but not the same one
    dn = b.n - a.n
    for x, y in zip(a.asked, b.asked, strict=True):
        if x != y:
            step, rest = divmod((y - x) * _CELL, dn)
            if rest or step % _STEP_ALIGN:
                return False
    return True


def _numbers(g: ggml.Graph) -> tuple[int, array.array[int], tuple[int, ...]]:
    """Return the graph's wiring (a hash of ops, types, flags, places and sources), its
    numbers (every tensor's shape; strides and offsets follow from the ops) and where
    quantized rows' lengths are."""
    wiring = []
    numbers = array.array("q")
    quantized = []
    for t in (*g.leafs, *g.nodes):
        root = t.view_src
        wiring.append(
            (
                t.op,
                t.type,
                t.flags,
                t.buf,
                t.dev,
                -1 if root is None else root.id,
                tuple(s.id for s in t.src),
            )
        )
        if ggml.is_quantized(t.type):
            quantized.append(len(numbers))
        numbers.extend(t.ne)
    return hash(tuple(wiring)), numbers, tuple(quantized)


def _line_of(spec: ModelSpec, req: GraphRequest) -> tuple[Hashable | None, int]:
    """Return the request without its main cache size, and that size (None: no line).

    Another cache as large as the main one (a full-size sliding-window cache) moves with it.
    """
    caches = dict(req.caches)
    n = caches.pop("kv", 0)
    if n <= 0 or n % _CELL:
        return None, 0
    rest = tuple(sorted((k, "kv" if v == n else v) for k, v in caches.items()))
    return (_spec_key(spec, req), dataclasses.replace(req, caches=rest)), n  # type: ignore[arg-type]


def _spec_key(spec: ModelSpec, req: GraphRequest) -> Hashable:
    """Return what of the model decides this request's buffers: its fingerprint, and the
    weight types of what a GPU copies from the host (none without op offload)."""
    if not any(backend_traits(n).offload_ops for n in req.gpu_names):
        return _fingerprint(spec, False)
    typed = _layer_signatures(spec, True)
    host = tuple(typed[il] for il in _host_weight_layers(spec, req))
    return (_fingerprint(spec, req.output_device < 0), host)


def _host_weight_layers(spec: ModelSpec, req: GraphRequest) -> list[int]:
    """Return the layers with weights in host memory (on the CPU, experts kept there,
    tensors moved by ``-ot``), whose types a GPU's op offload copies."""
    moved: set[int] = set()
    if req.overrides:
        names = {n for n, _ in req.overrides}
        moved = {t.layer for t in spec.tensors if t.layer is not None and t.name in names}
    dev = req.layer_device
    return [il for il in range(spec.n_layer) if dev[il] < 0 or il < req.n_cpu_moe or il in moved]


def _with_kv(caches: tuple[tuple[str, int], ...], n: int) -> tuple[tuple[str, int], ...]:
    old = dict(caches)["kv"]
    return caches_of({k: n if v == old else v for k, v in caches})


def _exact(
    spec: ModelSpec, req: GraphRequest, traced: bool
) -> tuple[tuple[int, ...], _Point | None]:
    """Reserve the request (layers cut where their blocks repeat, checked)."""
    traits = tuple(backend_traits(n) for n in req.gpu_names)
    signatures = _layer_signatures(spec)
    if any(t.offload_ops for t in traits):
        # a GPU that takes over ops on host weights copies them into its compute buffer,
        # as large as their type makes them: host layers are equal only with equal types
        typed = _layer_signatures(spec, True)
        host = set(_host_weight_layers(spec, req))
        signatures = tuple(
            typed[il] if il in host else signatures[il] for il in range(len(signatures))
        )
    places = layer_places(spec, req)
    # runs whose check failed before start with the block length that passed then (more
    # layers built: still exact, the checks decide; saves the failed reservation)
    learn = (_fingerprint(spec, False), req.n_tokens, req.n_seqs, req.flash_attn)
    widen: dict[int, int] = {}
    for il in range(len(signatures)):
        w = _WIDEN.get((learn, signatures[il], places[il]))
        if w is not None:
            widen[il] = w
    while True:
        plan = plan_layers(signatures, places, widen)
        # the planned graph decides the buffers: requests that plan the same layers (the
        # same shapes on the same devices, e.g. -ngl 12 and -ngl 20 of a 32-layer model,
        # both runs cut to four layers) share one reservation
        key = _plan_key(spec, req, plan, signatures)
        hit = _PLANNED.get(key)
        if hit is not None and (hit[3] is not None or not traced):
            sizes, failed_at, point = hit[1], hit[2], hit[3]
        else:
            sizes, failed, point = _reserve(spec, req, plan, traced)
            # failed runs by position in the plan (another request's runs start elsewhere)
            pos = {il: i for i, il in enumerate(plan.layers)}
            failed_at = [pos[r] if r >= 0 else -1 - pos[-1 - r] for r in failed]
            if len(_PLANNED) >= _PLANNED_SIZE:
                _PLANNED.pop(next(iter(_PLANNED)))
            _PLANNED[key] = (None, sizes, failed_at, point)
        failed = [plan.layers[i] if i >= 0 else -1 - plan.layers[-1 - i] for i in failed_at]
        if sizes is not None:
            if point is not None:
                # the plan is this request's: its layers may sit elsewhere than those of
                # the request that reserved the same planned graph
                point = dataclasses.replace(
                    point, path=hash((point.path, plan.layers, plan.checks))
                )
            return sizes, point
        for run in failed:
            first = run if run >= 0 else -1 - run
            if run < 0:  # no output mark to check against: build the whole run
                widen[first] = spec.n_layer
            else:
                # the allocator may cycle (two layouts taking turns): compare states a
                # longer block apart
                widen[first] = 2 * widen.get(first, 1)
            if len(_WIDEN) >= _WIDEN_SIZE:
                _WIDEN.pop(next(iter(_WIDEN)))
            _WIDEN[(learn, signatures[first], places[first])] = widen[first]


def _plan_key(
    spec: ModelSpec, req: GraphRequest, plan: LayerPlan, signatures: Sequence[Hashable]
) -> Hashable:
    """Return everything the planned graph and its reservation depend on.

    The layers enter by position in the plan (their signature and where they run), not by
    index; a run's checks by the positions of the layers they compare. Layer 0 places the
    token-embedding norm, shared-KV layers read a source layer's cache (gemma3n, gemma4):
    those devices are in the key too.
    """
    pos = {il: i for i, il in enumerate(plan.layers)}
    dev = req.layer_device
    places = layer_places(spec, req)
    layers = tuple((signatures[il], places[il]) for il in plan.layers)
    checks = tuple((pos[run], pos[a], pos[b]) for run, a, b in plan.checks)
    shared = tuple(dev) if spec.arch in ("gemma3n", "gemma4") else ()
    # a GPU taking over ops on host weights copies the output weight when it is on the host
    host_types = req.output_device < 0 and any(backend_traits(n).offload_ops for n in req.gpu_names)
    return (
        _fingerprint(spec, host_types),
        req.n_tokens,
        req.n_outputs,
        req.n_seqs,
        req.kv_unified,
        req.flash_attn,
        req.type_k,
        req.type_v,
        req.caches,
        req.output_device,
        req.n_gpu_layers > spec.n_layer_all,
        req.n_cpu_moe > 0,
        req.offload_kqv,
        req.gpu_names,
        req.has_overrides,
        req.pins,
        # tensors moved outside the layers (the output weight …) move the graph too
        tuple((n, d) for n, d in req.overrides if ".blk." not in f".{n}"),
        layers,
        checks,
        shared,
    )


def _fingerprint(spec: ModelSpec, with_types: bool) -> int:
    """Return what the graph builders read from the model, without the weights' types
    (which decide no compute buffer unless host weights are copied; the planned layers'
    signatures carry their types then): quantizations of one model share reservations."""
    key = (id(spec), with_types)
    cached = _FINGERPRINTS.get(key)
    if cached is not None and cached[0] is spec:
        return cached[1]
    fields = tuple(
        getattr(spec, f.name)
        for f in dataclasses.fields(spec)
        if f.name not in ("path", "name", "tensors", "file_type", "notes", "kv_status")
    )
    tensors = tuple(
        (t.name, t.shape, t.layer, t.role, t.ggml_type if with_types and t.layer is None else 0)
        for t in spec.tensors
    )
    value = hash((fields, tensors))
    if len(_FINGERPRINTS) > 64:
        _FINGERPRINTS.clear()
    _FINGERPRINTS[key] = (spec, value)
    return value


_FINGERPRINTS: dict[tuple[int, bool], tuple[ModelSpec, int]] = {}


_PLANNED: dict[Hashable, tuple[None, tuple[int, ...] | None, list[int], _Point | None]] = {}
_PLANNED_SIZE: Final = 256

_WIDEN: dict[Hashable, int] = {}
"""(model, batch, run's first layer signature and place): the block length that passed."""
_WIDEN_SIZE: Final = 1024


KEEP_BLOCKS: Final = 4
"""Blocks of a run of equal layers built before the rest is cut (verified, else doubled)."""

KEEP_BLOCKS_LONG: Final = 3
"""The same for blocks of several layers (a period of a sliding-window pattern)."""

_MAX_PERIOD: Final = 8


@dataclass(frozen=True, slots=True)
class LayerPlan:
    """Which layers to build, and the checks that make leaving the others out exact.

    ``checks`` holds pairs of layers (a, b): the allocator's state after layer a must equal
    its state after layer b, the next block of the same run. Then every left-out block of
    that run would have left the state as it found it (each block is the same program of
    allocations and frees), and the graph without them reserves the same buffers.
    """

    layers: tuple[int, ...]
    checks: tuple[tuple[int, int, int], ...]
    """(run, a, b): the run's first layer, and the two layers whose states must agree."""

    @property
    def complete(self) -> bool:
        """Return whether no layer is left out."""
        return not self.checks


def _layer_signatures(spec: ModelSpec, with_types: bool = False) -> tuple[Hashable, ...]:
    """Return what makes each layer's graph what it is: heads, kind, tensor shapes, the
    builder's own per-layer variant (``LAYER_VARIANTS``) and, ``with_types``, the tensor
    types (which matter once a backend copies host weights into its compute buffer)."""
    key = (id(spec), with_types)
    cached = _SIGNATURES.get(key)
    if cached is not None and cached[0] is spec:
        return cached[1]
    per_layer: list[list[tuple[object, ...]]] = [[] for _ in range(spec.n_layer_all)]
    for t in spec.tensors:
        if t.layer is not None and t.layer < spec.n_layer_all:
            name = t.name.split(".", 2)[2] if t.name.startswith("blk.") else t.name
            if with_types:
                per_layer[t.layer].append((name, t.shape, t.ggml_type))
            else:
                per_layer[t.layer].append((name, t.shape))
    variant = LAYER_VARIANTS.get(spec.arch)
    sigs = tuple(
        (
            spec.n_head[il],
            spec.n_head_kv[il],
            spec.n_ff[il],
            spec.is_swa[il],
            spec.is_recurrent[il],
            tuple(sorted(per_layer[il])),
            variant(spec, il) if variant is not None else None,
        )
        for il in range(spec.n_layer)
    )
    if len(_SIGNATURES) > 32:
        _SIGNATURES.clear()
    _SIGNATURES[key] = (spec, sigs)
    return sigs


_SIGNATURES: dict[tuple[int, bool], tuple[ModelSpec, tuple[Hashable, ...]]] = {}


def layer_places(spec: ModelSpec, req: GraphRequest) -> tuple[Hashable, ...]:
    """Return where each layer's work runs: its device, and whether its experts stay on
    the host (``--n-cpu-moe``)."""
    moved: dict[int, list[tuple[str, int]]] = {}
    if req.overrides:
        layer_of = {t.name: t.layer for t in spec.tensors}
        for name, dev in req.overrides:
            il = layer_of.get(name)
            if il is not None:
                moved.setdefault(il, []).append((name.split(".", 2)[-1], dev))
    return tuple(
        (req.layer_device[il], il < req.n_cpu_moe, tuple(moved.get(il, ())))
        for il in range(spec.n_layer)
    )


def plan_layers(
    signatures: Sequence[Hashable], devices: Sequence[Hashable], widen: Mapping[int, int]
) -> LayerPlan:
    """Cut runs of equal layer blocks to their first blocks (``KEEP_BLOCKS``, one less for
    blocks of several layers). ``widen[first layer of a run]`` multiplies the run's block
    length after a failed check.

    A block is one period of the layers' pattern (gemma3: 5 sliding-window layers and a
    global one); layers are equal when their shapes and their device agree. The last layer
    is always built (it gathers the output rows).
    """
    n = len(signatures)
    x = [(signatures[i], devices[i] if i < len(devices) else -1) for i in range(n)]
    layers: list[int] = []
    checks: list[tuple[int, int, int]] = []
    i = 0
    end = n - 1  # the last layer stays
    while i < end:
        # the period whose run of repeats reaches furthest (the shortest on a tie)
        period = 0
        reach = i
        for p in range(1, _MAX_PERIOD + 1):
            if i + 2 * p > end or x[i : i + p] != x[i + p : i + 2 * p]:
                continue
            j = i + p
            while j < end and x[j] == x[j - p]:
                j += 1
            j = i + (j - i) // p * p
            if j > reach:
                period, reach = p, j
        if not period:
            layers.append(i)
            i += 1
            continue
        # one-layer blocks settle after a block more than longer ones (measured)
        n_keep = KEEP_BLOCKS if period == 1 else KEEP_BLOCKS_LONG
        period *= widen.get(i, 1)
        blocks = (reach - i) // period
        if blocks <= n_keep:
            layers.extend(range(i, reach))
            i = reach
            continue
        # whole blocks only: the layers after them are planned anew (and built)
        layers.extend(range(i, i + n_keep * period))
        a = i + (n_keep - 2) * period - 1  # end of block n_keep-3
        checks.append((i, a, a + period))  # ... and of block n_keep-2
        i += blocks * period
    layers.append(n - 1)
    return LayerPlan(tuple(layers), tuple(checks))


def _reserve(
    spec: ModelSpec, req: GraphRequest, plan: LayerPlan, traced: bool = False
) -> tuple[tuple[int, ...] | None, list[int], _Point | None]:
    """Reserve the planned graph; (None, runs) when checks fail (build more of those).

    A run that cannot be checked (a layer without an output mark) comes back as
    ``-1 - run``.
    """
    lg = build_graph(spec, req, plan.layers)
    checkpoints: dict[int, object] = {}
    unmarked = []
    for run, a, b in plan.checks:
        out_a = lg.layer_outputs.get(a)
        out_b = lg.layer_outputs.get(b)
        if out_a is None or out_b is None:
            unmarked.append(run)  # a layer without an output mark: cannot be checked
            continue
        checkpoints[out_a.id] = a
        checkpoints[out_b.id] = b
    if unmarked:
        return None, [-1 - r for r in unmarked], None
    n_gpu = len(req.gpu_names)
    traits = tuple(backend_traits(n) for n in req.gpu_names)
    cpu = n_gpu
    pinned: dict[int, int] = {}
    full_offload = req.n_gpu_layers > spec.n_layer_all
    if n_gpu:

        def backend_of(dev: int) -> int:
            return cpu if dev < 0 else dev

        for tid, dev in lg.pinned.items() if req.pins else ():
            pinned[tid] = backend_of(dev)
        # graph_get_cb: "norm" and "l_last" run on their layer's device with a full
        # offload or a batch under 32 tokens
        if req.pins and (full_offload or req.n_tokens < 32):
            for tid, il in lg.layer_of_norm.items():
                if il < len(req.layer_device):
                    pinned[tid] = backend_of(req.layer_device[il])
    pipeline = (
        n_gpu > 1
        and full_offload
        and req.offload_kqv
        and req.n_cpu_moe == 0
        and not req.has_overrides
        and all(t.pipeline for t in traits)
    )
    offload = _offload(n_gpu, traits) if any(t.offload_ops for t in traits) else None
    offloads: list[bool] = []
    if offload is not None and traced:
        inner = offload

        def offload(b: int, t: Tensor) -> bool:
            yes = inner(b, t)  # type: ignore[operator]
            offloads.append(yes)
            return yes  # type: ignore[no-any-return]

    backends = Backends(
        n_gpu=n_gpu,
        aligns=(*(t.align for t in traits), CPU_ALIGN),
        n_copies=MAX_COPIES if pipeline else 1,
        offload=offload,  # type: ignore[arg-type]
        alloc_size=(*(t.alloc_size for t in traits), None),
    )
    states: dict[object, object] = {}
    trace = Trace() if traced else None
    sizes = tuple(reserve_per_device(lg.g, backends, pinned, checkpoints, states, trace))
    failed = [run for run, a, b in plan.checks if a not in states or states[a] != states[b]]
    if failed:
        return None, failed, None
    point = None
    if trace is not None:
        wiring, numbers, quantized = _numbers(lg.g)
        decided = (tuple(sorted(pinned.items())), tuple(offloads), tuple(trace.decisions))
        point = _Point(
            sizes=sizes,
            path=hash((wiring, decided)),
            wiring=wiring,
            asked=array.array("q", trace.sizes),
            numbers=numbers,
            quantized_ne0=quantized,
        )
    return sizes, [], point


_PRIMES: Final = (2, 3, 5, 11, 17, 37, 67, 131, 257, 521, 1031, 2053, 4099, 8209, 16411, 32771,
    65537, 131101, 262147, 524309, 1048583, 2097169, 4194319, 8388617, 16777259, 33554467,
    67108879, 134217757, 268435459, 536870923, 1073741827, 2147483659)  # fmt: skip
"""``ggml_hash_size`` (ggml/src/ggml.c): the next primes after powers of two."""

_NODES_PER_TOKEN_40: Final = frozenset({"qwen35", "qwen35moe"})
"""Architectures with a graph builder that ``llama_context::graph_max_nodes`` gives
``max(40 n_tokens, 32 n_tensors)`` (the recurrent and hybrid families it lists)."""


def hash_size(min_size: int) -> int:
    """Return ``ggml_hash_size``: the smallest prime of ggml's table >= ``min_size``."""
    i = bisect.bisect_left(_PRIMES, min_size)
    return _PRIMES[i] if i < len(_PRIMES) else min_size | 1


def graph_max_nodes(spec: ModelSpec, n_tokens: int, n_tensors: int) -> int:
    """Return ``llama_context::graph_max_nodes`` (src/llama-context.cpp) for an
    architecture with a graph builder; ``n_tensors`` is ``llama_model::n_tensors`` (the
    tensors llama.cpp created: the file's, with no LoRA adapter)."""
    if spec.arch in _NODES_PER_TOKEN_40:
        return max(40 * n_tokens, 32 * n_tensors)
    return max(1024, 8 * n_tensors)


def _shape_key(spec: ModelSpec, req: GraphRequest, what: str) -> tuple[object, ...]:
    # the count depends neither on the cache sizes nor on where the layers run (the
    # scheduler splits the same graph over the devices)
    shape = dataclasses.replace(
        req,
        caches=tuple((n, 0) for n, _ in req.caches),
        layer_device=(),
        output_device=-1,
        n_gpu_layers=0,
        gpu_names=(),
        pins=False,
    )
    return (id(spec), what, shape)


def _count(spec: ModelSpec, req: GraphRequest, layers: Sequence[int] | None = None) -> int:
    g = build_graph(spec, req, layers).g
    return len(g.nodes) + len(g.leafs)


def _memo_count(spec: ModelSpec, key: tuple[object, ...], count: Callable[[], int]) -> int:
    with LOCK:
        hit = _GRAPH_TENSORS.get(key)
        if hit is not None and hit[0] is spec:
            return hit[1]
        n = count()
        if len(_GRAPH_TENSORS) >= 256:
            _GRAPH_TENSORS.pop(next(iter(_GRAPH_TENSORS)))
        _GRAPH_TENSORS[key] = (spec, n)
        return n


def graph_tensors(spec: ModelSpec, req: GraphRequest) -> int:
    """Return the nodes plus leafs of the whole reserve graph (every layer built).

    ``ggml_backend_sched_split_graph`` puts each of them in the scheduler's hash set, which
    ``ggml_backend_sched_new`` sizes for ``graph_max_nodes`` tensors
    (``ggml_hash_set_new(graph_size)``): with more, ``ggml_hash_insert`` finds no free slot
    and llama.cpp aborts (``ggml-impl.h``, "fatal error") while creating the context. Kept
    per model and graph shape (:func:`_shape_key`).
    """
    return _memo_count(spec, _shape_key(spec, req, "exact"), lambda: _count(spec, req))


def graph_tensors_bound(spec: ModelSpec, req: GraphRequest) -> int:
    """Return an upper bound of :func:`graph_tensors` from a few layers (5–6x cheaper).

    The graph of one layer of each kind (and the last layer, which picks the output rows)
    is counted, and each layer of a kind is counted as what taking its first layer out of
    that graph removes: its own tensors and any input only it used, so the bound is at
    least the true count (0–6 % over on the zoo and the catalog, never under:
    tests/app/test_compute_graph.py). Models with few repeated layers are counted whole.
    """

    def bound() -> int:
        sigs = _layer_signatures(spec)
        n = spec.n_layer
        first: dict[Hashable, int] = {}
        for il, sig in enumerate(sigs):
            first.setdefault(sig, il)
        some = sorted({*first.values(), n - 1})
        if 2 * len(some) > n:
            return graph_tensors(spec, req)
        built = _count(spec, req, some)
        per = {
            sig: built - _count(spec, req, [il for il in some if il != r])
            for sig, r in first.items()
            if r != n - 1
        }
        return built + sum(per[sigs[il]] for il in range(n) if il not in some)

    return _memo_count(spec, _shape_key(spec, req, "bound"), bound)


_GRAPH_TENSORS: dict[tuple[object, ...], tuple[ModelSpec, int]] = {}


def clear_caches() -> None:
    """Forget every reservation, line and learned block length (benchmarks of a cold
    estimate, tests that count reservations)."""
    with LOCK:
        _LINES.clear()
        _PLANNED.clear()
        _WIDEN.clear()
        _GRAPH_TENSORS.clear()


def caches_of(n_kv: Mapping[str, int]) -> tuple[tuple[str, int], ...]:
    """Return the cache sizes as a hashable tuple (base cache first)."""
    return tuple(sorted(n_kv.items(), key=lambda kv: kv[0] != "kv"))


__all__ = [
    "GraphRequest",
    "build_graph",
    "caches_of",
    "clear_caches",
    "compute_buffers",
    "ggml",
    "graph_max_nodes",
    "graph_tensors",
    "graph_tensors_bound",
    "has_graph",
    "hash_size",
]
