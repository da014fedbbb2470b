"""The compute-buffer model against llama.cpp's own reserve graph, node by node.

llama.cpp sizes its compute buffers by placing one worst-case graph with ggml-alloc
(``src/llama-context.cpp`` ``graph_reserve``). runner/graph_dump.py reads that graph out
of the engine; these tests check the two halves of app/predict/graph separately:

* the allocator: replayed on llama.cpp's own graph, app/predict/graph/alloc.py gives
  llama.cpp's ``CPU compute buffer size`` exactly (as printed, two decimals);
* the graph: the graph ggtune rebuilds (every layer, no layer cut) has llama.cpp's nodes
  in llama.cpp's order — the same op, type and shape at every position — and the
  estimate (layers cut where their blocks repeat) prints the same compute buffer.

Both real models and every model of the zoo, over the settings grid of test_agreement.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import SettingsError
from app.hardware.devices import Hardware
from app.model.arch_table import COMPUTE_CHECKED_ARCHS
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.estimate import _caches, estimate, graph_request, place_layers, resolve_context
from app.predict.graph import ggml
from app.predict.graph.alloc import reserve
from app.predict.graph.compute import build_graph, has_graph
from app.settings import Settings
from runner.graph_dump import GraphDump, dump_graphs
from tests.agreement.test_agreement import MODELS, _model_path, settings_grid
from tests.engine_host import HOST as ENGINE_HOST
from tests.engine_host import without_amx_abort
from tests.zoo import special

pytestmark = pytest.mark.engine

MIB = 1024 * 1024
HOST = Hardware.cpu_only()
ENGINE = Hardware(host=ENGINE_HOST)
"""This machine's CPU: where llama.cpp would abort with MLA in its AMX buffer."""
IO_FLAGS = ggml.FLAG_INPUT | ggml.FLAG_OUTPUT

_DUMPS: dict[str, tuple[ModelSpec, list[tuple[Settings, GraphDump]]]] = {}


def _dumps(
    name: str, smollm_path: Path, gemma_path: Path, zoo_dir: Path
) -> tuple[ModelSpec, list[tuple[Settings, GraphDump]]]:
    if name not in _DUMPS:
        path = _model_path(name, smollm_path, gemma_path, zoo_dir)
        spec = model_spec(read_model(path))
        valid = []
        for s in settings_grid():
            try:
                estimate(spec, s, HOST)
            except SettingsError:
                continue
            valid.append(without_amx_abort(spec, s, ENGINE))
        _DUMPS[name] = (spec, list(zip(valid, dump_graphs(path, valid), strict=True)))
    return _DUMPS[name]


def to_graph(dump: GraphDump) -> ggml.Graph:
    """Return llama.cpp's dumped graph as ggtune's tensors (same order, same sources)."""
    g = ggml.Graph()
    made: dict[int, ggml.Tensor] = {}

    def make(i: int) -> ggml.Tensor:
        if i in made:
            return made[i]
        r = dump.tensors[i]
        view = make(r.view_src) if r.view_src is not None else None
        t = ggml.Tensor(g, r.type, r.ne, r.nb, op=r.op, view_src=view, view_offs=r.view_offs)
        t.name = r.name
        t.flags = r.flags
        t.buf = {"": ggml.BUF_NONE, "weights": ggml.BUF_WEIGHTS}.get(r.memory, ggml.BUF_STATE)
        made[i] = t
        t.src = [t if s == i else make(s) for s in r.src]
        return t

    for i in range(len(dump.tensors)):
        make(i)
    g.nodes = [made[i] for i in dump.nodes]
    g.leafs = [made[i] for i in dump.leafs]
    return g


def _mib(n_bytes: int) -> str:
    return f"{n_bytes / MIB:.2f}"


@pytest.mark.parametrize("name", MODELS)
def test_the_allocator_gives_llama_cpps_buffer_on_llama_cpps_graph(
    name: str, smollm_path: Path, gemma_path: Path, zoo_dir: Path
) -> None:
    _, dumps = _dumps(name, smollm_path, gemma_path, zoo_dir)
    assert dumps
    for s, dump in dumps:
        assert _mib(reserve(to_graph(dump))[0]) == f"{dump.compute_mib['CPU']:.2f}", s


@pytest.mark.parametrize("name", MODELS)
def test_the_rebuilt_graph_is_llama_cpps_node_for_node(
    name: str, smollm_path: Path, gemma_path: Path, zoo_dir: Path
) -> None:
    spec, dumps = _dumps(name, smollm_path, gemma_path, zoo_dir)
    if not has_graph(spec):
        # not rebuilt yet: the estimate must not claim its compute figure (test_agreement)
        assert spec.arch not in COMPUTE_CHECKED_ARCHS
        pytest.skip(f"no graph builder for {spec.arch} yet")
    assert spec.arch in COMPUTE_CHECKED_ARCHS
    for s, dump in dumps:
        ctx = resolve_context(spec, s)
        _, _, _, n_kv = _caches(spec, s, ctx)
        req = graph_request(spec, s, ctx, n_kv, place_layers(spec, s, HOST), HOST)
        ours = build_graph(spec, req).g.nodes
        theirs = [dump.tensors[i] for i in dump.nodes]
        for k, (a, b) in enumerate(zip(ours, theirs, strict=False)):
            assert (a.op, a.type, a.ne) == (b.op, b.type, b.ne), (
                f"{s}: node {k} is {a.op} {a.ne} here, llama.cpp has {b.name} {b.op} {b.ne}"
            )
            # an output is never freed (ggml-alloc): a missing one looks exact on tiny
            # models and moves every later tensor at real size (Qwen3.5's t_h_nextn: -11.6 %
            # on the 0.8B catalog stand-in at 64k before it was flagged)
            assert a.flags & IO_FLAGS == b.flags & IO_FLAGS, (
                f"{s}: node {k} ({b.name} {b.op}) has flags {a.flags & IO_FLAGS} here, "
                f"llama.cpp {b.flags & IO_FLAGS}"
            )
        assert len(ours) == len(theirs), s
        got = estimate(spec, s, HOST).device("CPU").compute_bytes
        assert _mib(got) == f"{dump.compute_mib['CPU']:.2f}", s


def test_mla_with_a_64_wide_k_head_is_not_rotated(tmp_path: Path) -> None:
    # DeepSeek-V3 and Kimi K2 (K head kv_lora_rank 512 + RoPE 64 = 576, a multiple of 64):
    # with a quantized K cache llama_kv_cache turns attn_rot_k on, but the K-only MLA input
    # (build_attn_inp_k) makes no rotation, so the graph has no Hadamard products; the
    # estimate rotated (−3.9 % on DeepSeek-V3's catalog stand-in at 4096 q8_0, 4 streams).
    # The zoo deepseek2's K head is 80 wide; this one's is 64 (kv_lora_rank 32 + RoPE 32).
    path = tmp_path / "zoo-deepseek2-k64.gguf"
    special.VARIANTS["deepseek2-k64"](path)
    spec = model_spec(read_model(path))
    assert spec.is_mla
    assert spec.head_k_full % 64 == 0
    settings = [
        Settings(n_ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on"),
        Settings(
            n_ctx=8192, cache_type_k="q4_0", cache_type_v="q4_0", flash_attn="on", n_parallel=4
        ),
    ]
    settings = [without_amx_abort(spec, s, ENGINE) for s in settings]
    for s, dump in zip(settings, dump_graphs(path, settings), strict=True):
        assert not [i for i in dump.leafs if dump.tensors[i].name == "attn_inp_k_rot"], s
        ctx = resolve_context(spec, s)
        _, _, _, n_kv = _caches(spec, s, ctx)
        req = graph_request(spec, s, ctx, n_kv, place_layers(spec, s, HOST), HOST)
        ours = [(t.op, t.type, t.ne) for t in build_graph(spec, req).g.nodes]
        assert ours == [(t.op, t.type, t.ne) for t in (dump.tensors[i] for i in dump.nodes)], s
        got = estimate(spec, s, HOST).device("CPU").compute_bytes
        assert _mib(got) == f"{dump.compute_mib['CPU']:.2f}", s
