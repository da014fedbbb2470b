"""The compute buffer model (app/predict/graph, the rebuilt reserve graph) against the engine.

Golden figures: the ``CPU compute buffer size`` llama.cpp logged (llama-cpp-python 0.3.36,
CPU build) for the tiny zoo models of tests/zoo, one per (model, settings) row. The zoo
builders are deterministic, so the files here are byte-identical to the ones measured.
Every family's peak stage is exercised: dense FFN (separate and fused QKV, sandwich norms,
parallel blocks), MoE, MLA, the KQ matrix, Mamba, Mamba-2, hybrids and RWKV 6/7.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.hardware.devices import Hardware
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from tests.zoo import dense, special

MIB = 1024 * 1024
AVX2 = Hardware.cpu_only(cpu_flags=("avx2",))
BUILDERS = {**dense.BUILDERS, **special.BUILDERS}


@pytest.fixture(scope="module")
def zoo_specs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, ModelSpec]:
    folder: Path = tmp_path_factory.mktemp("compute_zoo")
    specs = {}
    for name, build in BUILDERS.items():
        path = folder / f"{name}.gguf"
        build(path)
        specs[name] = model_spec(read_model(path))
    return specs


@pytest.mark.parametrize(
    ("name", "n_ctx", "flash_attn", "n_ubatch", "n_parallel", "swa_full", "engine_mib"),
    [
        ("llama", 512, "on", 512, 1, True, "3.76"),
        ("llama", 4096, "off", 512, 1, True, "73.38"),
        ("llama", 4096, "on", 256, 1, False, "3.63"),
        ("llama", 32768, "on", 512, 4, True, "11.26"),
        ("deci", 512, "on", 512, 1, True, "3.51"),
        ("deci", 4096, "off", 512, 1, True, "73.51"),
        ("deci", 4096, "on", 256, 1, False, "3.51"),
        ("deci", 32768, "on", 512, 4, True, "11.01"),
        ("qwen2", 512, "on", 512, 1, True, "3.76"),
        ("qwen2", 4096, "off", 512, 1, True, "73.38"),
        ("qwen2", 4096, "on", 256, 1, False, "3.63"),
        ("qwen2", 32768, "on", 512, 4, True, "11.26"),
        ("qwen3", 512, "on", 512, 1, True, "3.76"),
        ("qwen3", 4096, "off", 512, 1, True, "74.01"),
        ("qwen3", 4096, "on", 256, 1, False, "3.63"),
        ("qwen3", 32768, "on", 512, 4, True, "11.26"),
        ("phi3", 512, "on", 512, 1, True, "2.76"),
        ("phi3", 4096, "off", 512, 1, True, "41.01"),
        ("phi3", 4096, "on", 256, 1, False, "3.13"),
        ("phi3", 32768, "on", 512, 4, True, "10.26"),
        ("gemma2", 512, "on", 512, 1, True, "3.40"),
        ("gemma2", 4096, "off", 512, 1, True, "50.26"),
        ("gemma2", 4096, "on", 256, 1, False, "3.57"),
        ("gemma2", 32768, "on", 512, 4, True, "18.40"),
        ("gemma3", 512, "on", 512, 1, True, "3.27"),
        ("gemma3", 4096, "off", 512, 1, True, "50.26"),
        ("gemma3", 4096, "on", 256, 1, False, "3.51"),
        ("gemma3", 32768, "on", 512, 4, True, "18.27"),
        ("cohere2", 512, "on", 512, 1, True, "2.52"),
        ("cohere2", 4096, "off", 512, 1, True, "81.51"),
        ("cohere2", 4096, "on", 256, 1, False, "3.01"),
        ("cohere2", 32768, "on", 512, 4, True, "17.52"),
        ("gpt-oss", 512, "on", 512, 1, True, "2.77"),
        ("gpt-oss", 4096, "off", 512, 1, True, "82.26"),
        ("gpt-oss", 4096, "on", 256, 1, False, "3.14"),
        ("gpt-oss", 32768, "on", 512, 4, True, "17.77"),
        ("qwen3moe", 512, "on", 512, 1, True, "2.26"),
        ("qwen3moe", 4096, "off", 512, 1, True, "74.01"),
        ("qwen3moe", 4096, "on", 256, 1, False, "2.88"),
        ("qwen3moe", 32768, "on", 512, 4, True, "9.76"),
        ("deepseek2", 512, "on", 512, 1, True, "2.88"),
        ("deepseek2", 4096, "off", 512, 1, True, "42.38"),
        ("deepseek2", 4096, "on", 256, 1, False, "3.19"),
        ("deepseek2", 32768, "on", 512, 4, True, "10.38"),
        ("mamba", 512, "on", 512, 1, True, "3.28"),
        ("mamba", 4096, "off", 512, 1, True, "3.28"),
        ("mamba", 4096, "on", 256, 1, False, "1.65"),
        ("mamba", 32768, "on", 512, 4, True, "3.34"),
        ("mamba2", 512, "on", 512, 1, True, "4.78"),
        ("mamba2", 4096, "off", 512, 1, True, "4.78"),
        ("mamba2", 4096, "on", 256, 1, False, "2.40"),
        ("mamba2", 32768, "on", 512, 4, True, "5.09"),
        ("granitehybrid", 512, "on", 512, 1, True, "5.11"),
        ("granitehybrid", 4096, "off", 512, 1, True, "73.38"),
        ("granitehybrid", 4096, "on", 256, 1, False, "4.34"),
        ("granitehybrid", 32768, "on", 512, 4, True, "12.06"),
        ("lfm2", 512, "on", 512, 1, True, "2.76"),
        ("lfm2", 4096, "off", 512, 1, True, "73.38"),
        ("lfm2", 4096, "on", 256, 1, False, "3.13"),
        ("lfm2", 32768, "on", 512, 4, True, "10.27"),
        ("rwkv6", 512, "on", 512, 1, True, "3.63"),
        ("rwkv6", 4096, "off", 512, 1, True, "3.63"),
        ("rwkv6", 4096, "on", 256, 1, False, "1.85"),
        ("rwkv6", 32768, "on", 512, 4, True, "3.82"),
        ("rwkv7", 512, "on", 512, 1, True, "4.88"),
        ("rwkv7", 4096, "off", 512, 1, True, "4.88"),
        ("rwkv7", 4096, "on", 256, 1, False, "2.47"),
        ("rwkv7", 32768, "on", 512, 4, True, "5.07"),
    ],
)
def test_compute_buffer_as_llama_cpp_prints_it(
    zoo_specs: dict[str, ModelSpec],
    name: str,
    n_ctx: int,
    flash_attn: str,
    n_ubatch: int,
    n_parallel: int,
    swa_full: bool,
    engine_mib: str,
) -> None:
    settings = Settings(
        n_ctx=n_ctx,
        flash_attn=flash_attn,  # type: ignore[arg-type]
        n_ubatch=n_ubatch,
        n_parallel=n_parallel,
        swa_full=swa_full,
    )
    got = estimate(zoo_specs[name], settings, AVX2).device("CPU").compute_bytes
    # llama.cpp prints MiB with two decimals: the rebuilt graph gives that figure exactly
    assert f"{got / MIB:.2f}" == engine_mib
