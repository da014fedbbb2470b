"""llama.cpp's dry run on header stand-ins: the same as on the real files, for any source.

* both real demo models and every zoo model: the dry run of the stand-in (header bytes +
  a hole up to the file size) reports exactly what the dry run of the real file reports;
* every catalog entry: its stand-in loads, and llama.cpp's weights, KV caches and recurrent
  state equal the analytic estimate (weights to the byte, caches as printed);
* a simulated quant: its stand-in's dry run equals the dry run of the file llama.cpp's
  quantizer really makes;
* a Hugging Face file read header-only (the fake hub): the same as the real file.
"""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pytest

from app.hardware.devices import Hardware
from app.measured.engine_report import EngineReport
from app.model.catalog import catalog_header, catalog_keys
from app.model.gguf_reader import read_model
from app.model.quant import simulate_quant
from app.model.spec import model_spec
from app.model.standin import file_prefix, write_standin
from app.predict.estimate import estimate
from app.settings import Settings
from runner.dry_run import dry_run_many
from runner.engine_check import engine_check
from runner.quantize import quantize
from tests.engine_host import HOST as ENGINE_HOST
from tests.engine_host import without_amx_abort
from tests.fake_hub import FakeHub
from tests.zoo import ZOO, write_model

pytestmark = pytest.mark.engine

MIB = 1024 * 1024
SETTINGS = (
    Settings(n_ctx=4096, flash_attn="on", swa_full=False),
    Settings(n_ctx=8192, flash_attn="off", n_parallel=2, kv_unified=True),
)
_COMPARED = (
    "model_size_bytes",
    "model_n_params",
    "n_layer",
    "n_ctx",
    "n_ctx_seq",
    "n_ubatch",
    "kv_unified",
    "flash_attn",
    "kv_caches",
    "recurrent_caches",
    "compute_buffers",
    "output_buffers",
    "rs_buffers",
)


def figures(report: EngineReport) -> dict[str, object]:
    """Everything a dry run reports about memory (not the path, the log or the timing)."""
    assert set(_COMPARED) <= {f.name for f in fields(report)}
    return {name: getattr(report, name) for name in _COMPARED}


def llama_mib(n_bytes: int) -> str:
    return f"{float(np.float32(n_bytes) / np.float32(MIB)):.2f}"


def _path(name: str, smollm_path: Path, gemma_path: Path, zoo_dir: Path) -> Path:
    return {"smollm": smollm_path, "gemma": gemma_path}.get(name) or write_model(name, zoo_dir)


@pytest.mark.parametrize("name", ["smollm", "gemma", *ZOO])
def test_standin_dry_run_equals_the_real_files(
    name: str, smollm_path: Path, gemma_path: Path, zoo_dir: Path, tmp_path: Path
) -> None:
    path = _path(name, smollm_path, gemma_path, zoo_dir)
    spec = model_spec(read_model(path))
    settings = [
        without_amx_abort(spec, s, Hardware(host=ENGINE_HOST))
        for s in SETTINGS
        if not (name == "t5" and s.n_parallel > 1)
    ]
    prefix, size = file_prefix(path)
    stand_in = write_standin(prefix, size, key=str(path), folder=tmp_path)
    assert stand_in.disk_bytes < len(prefix) + MIB < size or size < 8 * MIB
    real = dry_run_many(path, settings)
    copy = dry_run_many(stand_in.path, settings)
    for a, b in zip(real, copy, strict=True):
        assert figures(a) == figures(b)


@pytest.mark.parametrize("key", catalog_keys())
def test_catalog_standin_dry_run_equals_the_estimate(key: str, tmp_path: Path) -> None:
    spec = model_spec(catalog_header(key))
    settings = without_amx_abort(
        spec, Settings(n_ctx=4096, flash_attn="on", swa_full=False), Hardware(host=ENGINE_HOST)
    )
    result = engine_check(spec, [settings], timeout_s=300)
    assert result.target.stand_in is not None
    report = result.reports[0]
    est = estimate(spec, settings, Hardware.cpu_only())
    assert report.model_size_bytes == spec.weights_bytes
    assert report.model_n_params == spec.n_params
    ours = [c for c in est.caches if c.kind != "recurrent"]
    assert [(c.cells, c.n_layers) for c in ours] == [(c.cells, c.layers) for c in report.kv_caches]
    for mine, theirs in zip(ours, report.kv_caches, strict=True):
        assert llama_mib(mine.k_bytes) == f"{theirs.k_mib:.2f}", key
        assert llama_mib(mine.v_bytes) == f"{theirs.v_mib:.2f}", key
    # hybrid entries (Qwen3.5's gated delta net): the recurrent state too, R and S
    states = [c for c in est.caches if c.kind == "recurrent"]
    assert len(states) == len(report.recurrent_caches), key
    for mine, rs in zip(states, report.recurrent_caches, strict=True):
        assert mine.cells == rs.cells, key  # (llama.cpp's "layers" counts every layer)
        assert llama_mib(mine.k_bytes) == f"{rs.r_mib:.2f}", key
        assert llama_mib(mine.v_bytes) == f"{rs.s_mib:.2f}", key
    host = est.device("CPU")
    assert llama_mib(host.output_bytes) == f"{report.output_buffers[0].mib:.2f}"


@pytest.mark.slow
def test_simulated_quant_standin_equals_the_quantized_file(
    smollm_path: Path, tmp_path: Path
) -> None:
    spec = model_spec(read_model(smollm_path))
    simulated = simulate_quant(spec, "Q8_0").spec
    real_path = tmp_path / "smollm-q8_0.gguf"
    quantize(smollm_path, real_path, "Q8_0", timeout_s=600)
    result = engine_check(simulated, SETTINGS)
    assert result.target.stand_in is not None
    real = dry_run_many(real_path, SETTINGS)
    for a, b in zip(real, result.reports, strict=True):
        assert figures(a) == figures(b)


def test_hugging_face_file_read_header_only(hub: FakeHub, gemma_path: Path) -> None:
    from app.sources.hf import read_url_model

    url = f"{hub.endpoint}/files/gemma.gguf"
    spec = model_spec(read_url_model(url))
    assert spec.path == url
    result = engine_check(spec, SETTINGS[:1])
    assert result.target.stand_in is not None
    real = dry_run_many(gemma_path, SETTINGS[:1])
    assert figures(real[0]) == figures(result.reports[0])
    # the header came over the network once; nothing past the header was fetched
    assert hub.sent("/files/gemma.gguf") < 16 * MIB
