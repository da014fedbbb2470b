"""Compute buffers of the catalog's header stand-ins at real size, against llama.cpp.

The zoo (tests/agreement/test_compute_graph.py) checks the rebuilt reserve graph node for
node on tiny models; some mistakes only move the buffer at real size. Two were found on
the catalog stand-ins (docs/benchmarks.md, "Catalog stand-ins beside the estimate"):

* Qwen3.5 (qwen35, qwen35moe): ``t_h_nextn`` was not flagged as a graph output, so the
  estimate let ggml-alloc reuse its memory (−11.6 % on Qwen3.5 0.8B at 64k, 4 unified
  streams; −2.0 … −3.1 % on the MoE entries);
* DeepSeek-V3 and Kimi K2 (deepseek2 with MLA): the estimate rotated Q and K with a
  Hadamard matrix for a quantized K cache, which llama.cpp's K-only MLA input never does
  (−3.9 % at 4096 q8_0, 4 streams; −3.5 % at 128k q8_0).

Each entry that missed is dry-run at the settings it missed at (and the others'); every
other catalog entry runs the same settings in the slow suite. The estimate's CPU compute
buffer must be llama.cpp's as printed (two decimals), except for an architecture marked
in ``KNOWN_COMPUTE_ERRORS`` (app/model/arch_table.py): its entries must miss and say so
(no verdict without the engine), so the mark goes when the model is fixed.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import EngineCrashedError, SettingsError
from app.hardware.devices import Hardware
from app.measured.engine_checked import with_engine_figures
from app.model.arch_table import KNOWN_COMPUTE_ERRORS
from app.model.catalog import catalog_header, catalog_keys
from app.model.spec import model_spec
from app.predict import estimate as estimate_module
from app.predict.estimate import EXTRA_MODEL_TENSORS, estimate
from app.predict.graph.compute import graph_max_nodes
from app.settings import Settings
from app.sources.standins import write_model_standin
from runner.dry_run import dry_run_many
from runner.engine_check import engine_check
from tests.agreement.test_agreement import llama_mib, printed
from tests.engine_host import HOST as ENGINE_HOST
from tests.engine_host import without_amx_abort

pytestmark = pytest.mark.engine

HOST = Hardware.cpu_only()

MISSED_AT: dict[str, Settings] = {
    # entry: the settings of its worst miss before the fix (docs/benchmarks.md)
    "qwen3.5-0.8b": Settings(
        n_ctx=65536, flash_attn="on", n_parallel=4, kv_unified=True, swa_full=False
    ),
    "qwen3.5-35b-a3b": Settings(n_ctx=16384, flash_attn="off", n_parallel=4, n_ubatch=256),
    "deepseek-v3": Settings(
        n_ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on", n_parallel=4
    ),
    "kimi-k2-instruct-0905": Settings(
        n_ctx=131072, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on"
    ),
}


def _cases() -> list[object]:
    return [
        pytest.param(key, marks=() if key in MISSED_AT else pytest.mark.slow)
        for key in catalog_keys()
    ]


@pytest.mark.parametrize("key", _cases())
def test_catalog_standin_compute_buffer_is_llama_cpps(key: str, tmp_path: Path) -> None:
    spec = model_spec(catalog_header(key))
    settings = []
    for s in MISSED_AT.values():
        try:
            estimate(spec, s, HOST)
        except SettingsError:
            continue  # refused with a reason (phi-4 at 4096 q8_0 4 streams: llama.cpp aborts)
        # MLA's weights in an AMX buffer abort the engine (test_agreement checks it)
        settings.append(without_amx_abort(spec, s, Hardware(host=ENGINE_HOST)))
    assert settings, key
    if key in MISSED_AT:  # the settings it missed at are compared
        assert MISSED_AT[key] in [x.replace(repack=True) for x in settings], key
    stand_in = write_model_standin(spec, folder=tmp_path)
    reports = dry_run_many(stand_in.path, settings, timeout_s=600)
    misses = []
    for s, report in zip(settings, reports, strict=True):
        est = estimate(spec, s, HOST)
        # the scheduler's table the refusal of an oversized graph is sized from
        n_tokens = min(est.context.n_ctx, est.context.n_ubatch)
        logged = [line for line in report.log if "sched_reserve: max_nodes = " in line]
        assert logged, (key, s)
        max_nodes = int(logged[-1].rsplit("=", 1)[1])
        # llama_model::n_tensors: the file's tensors, and a duplicate llama.cpp creates in
        # another buffer context (Gemma 4: one more); the refusal allows for
        # EXTRA_MODEL_TENSORS, so its table is never smaller than llama.cpp's
        n_file = len(spec.tensors)
        least = graph_max_nodes(spec, n_tokens, n_file)
        most = graph_max_nodes(spec, n_tokens, n_file + EXTRA_MODEL_TENSORS)
        assert least <= max_nodes <= most, (key, s, max_nodes)
        (engine,) = [b for b in report.compute_buffers if b.buffer == "CPU"]
        ours = llama_mib(est.device("CPU").compute_bytes)
        if spec.arch in KNOWN_COMPUTE_ERRORS:
            # marked (app/model/arch_table.py): no verdict until the engine's figure
            assert not est.compute_known, (key, s)
            misses += [(s, ours, printed(engine.mib))] if ours != printed(engine.mib) else []
        else:
            assert est.compute_known, (key, s)
            assert ours == printed(engine.mib), (key, s)
    if spec.arch in KNOWN_COMPUTE_ERRORS:
        assert misses, f"{key} no longer misses: remove {spec.arch}'s KNOWN_COMPUTE_ERRORS mark"


def test_a_marked_family_gets_llama_cpps_compute_figure(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # what the desktop's background check and `ggtune estimate --verify` do for a model
    # whose compute is not known right: the stand-in's dry run supplies the figure
    monkeypatch.setattr(
        estimate_module, "KNOWN_COMPUTE_ERRORS", {"qwen35": "-11.6 % (docs/benchmarks.md)"}
    )
    spec = model_spec(catalog_header("qwen3.5-0.8b"))
    s = MISSED_AT["qwen3.5-0.8b"]
    est = estimate(spec, s, HOST)
    assert not est.exact
    result = engine_check(spec, [s], timeout_s=300)
    assert result.target.stand_in is not None
    checked = with_engine_figures(est, result.reports[0])
    assert checked.engine_checked == ("compute", "output")  # KV stays the estimate's (exact)
    assert checked.exact
    (engine,) = [b for b in result.reports[0].compute_buffers if b.buffer == "CPU"]
    assert llama_mib(checked.device("CPU").compute_bytes) == printed(engine.mib)


def test_the_estimate_refuses_what_llama_cpp_aborts_on(tmp_path: Path) -> None:
    # phi-4, 4096 q8_0 K/V, flash attention: the Hadamard rotation and two or more KV
    # streams make a 2,058-tensor reserve graph; its scheduler's table has 2,053 slots
    # (8 x 243 model tensors = 1,944 max nodes, ggml_hash_size), ggml_hash_insert aborts
    spec = model_spec(catalog_header("phi-4"))
    stand_in = write_model_standin(spec, folder=tmp_path)
    q8 = Settings(n_ctx=4096, cache_type_k="q8_0", cache_type_v="q8_0", flash_attn="on")
    ok = [q8, q8.replace(n_parallel=4, kv_unified=True), q8.replace(cache_type_k="f16",
        cache_type_v="f16", n_parallel=4)]  # fmt: skip
    for s in ok:
        estimate(spec, s, HOST)
    dry_run_many(stand_in.path, ok, timeout_s=300)  # llama.cpp creates these contexts
    for n_parallel in (2, 4):
        s = q8.replace(n_parallel=n_parallel)
        with pytest.raises(SettingsError, match=r"llama\.cpp aborts creating this context"):
            estimate(spec, s, HOST)
        with pytest.raises(EngineCrashedError, match="SIGABRT"):
            dry_run_many(stand_in.path, [s], timeout_s=300)
