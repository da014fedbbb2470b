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
buffer must be llama.cpp's as printed (two decimals).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import SettingsError
from app.hardware.devices import Hardware
from app.model.catalog import catalog_header, catalog_keys
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from app.sources.standins import write_model_standin
from runner.dry_run import dry_run_many
from tests.agreement.test_agreement import llama_mib, printed

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

ENGINE_ABORTS: dict[str, tuple[Settings, ...]] = {
    # llama.cpp itself aborts creating this context (ggml-impl.h:330 in sched_reserve;
    # docs/benchmarks.md, "Settings llama.cpp aborted on"): nothing to compare
    "phi-4": (MISSED_AT["deepseek-v3"],),
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
        if s in ENGINE_ABORTS.get(key, ()):
            continue
        try:
            estimate(spec, s, HOST)
        except SettingsError:
            continue  # the estimator refuses it with a reason (tests/app cover those)
        settings.append(s)
    assert settings, key
    if key in MISSED_AT:
        assert MISSED_AT[key] in settings, key  # the settings it missed at are compared
    stand_in = write_model_standin(spec, folder=tmp_path)
    reports = dry_run_many(stand_in.path, settings, timeout_s=600)
    for s, report in zip(settings, reports, strict=True):
        est = estimate(spec, s, HOST)
        assert est.compute_known, (key, s)
        (engine,) = [b for b in report.compute_buffers if b.buffer == "CPU"]
        assert llama_mib(est.device("CPU").compute_bytes) == printed(engine.mib), (key, s)
