"""A CPU with AMX: llama.cpp's AMX buffer in the plan, and repacking off by default there.

The pinned llama.cpp's AMX kernels segfault on some AMX CPUs (llama.cpp issue #20824;
docs/engine.md, "AMX"), so ggtune's llama-server plans say ``--no-repack`` on such a CPU
unless the user turns repacking on; runners that cannot turn it off keep it and say so.
The byte figures of the AMX buffer are in tests/app/test_estimate.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.export.llama_server import llama_server_argv
from app.export.ollama import export_ollama
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.runner_plan import plan_runner
from app.predict.estimate import estimate, repack_is_safe
from app.predict.speed import kernel_needs
from app.settings import Settings

AMX = Hardware.cpu_only(
    16 * 2**30, cpu_flags=("avx", "avx2", "avx512f", "avx512bw", "avx512_vnni", "amx_int8")
)
AVX512 = Hardware.cpu_only(16 * 2**30, cpu_flags=("avx", "avx2", "avx512f", "avx512bw"))


def test_repacking_is_off_by_default_only_on_an_amx_cpu(smollm: ModelSpec) -> None:
    assert not repack_is_safe(AMX.host)
    assert repack_is_safe(AVX512.host)
    plan = plan_runner(smollm, "llama-server", AMX)
    assert not plan.settings.repack
    assert any("--no-repack" in n and "#20824" in n for n in plan.notes)
    assert plan.estimate.device("CPU").other_bytes == 0  # the weights as in the file
    assert "--no-repack" in llama_server_argv("m.gguf", plan.settings)
    # the user's choice wins, and then the estimate warns and counts the AMX copy
    mine = plan_runner(smollm, "llama-server", AMX, given={"repack": True})
    assert mine.settings.repack
    assert not any("--no-repack:" in n for n in mine.notes)
    assert mine.estimate.device("CPU").other_bytes > 0
    assert any("AMX" in n and "#20824" in n for n in mine.estimate.notes)
    # elsewhere nothing changes
    other = plan_runner(smollm, "llama-server", AVX512)
    assert other.settings.repack
    assert "--no-repack" not in llama_server_argv("m.gguf", other.settings)


def test_runners_without_the_option_keep_repacking_and_say_so(
    smollm: ModelSpec, smollm_path: Path
) -> None:
    plan = plan_runner(smollm, "ollama", AMX)
    assert plan.settings.repack  # Ollama cannot turn it off
    assert any("#20824" in n for n in plan.estimate.notes)
    text = export_ollama(smollm_path, Settings(n_ctx=2048, repack=False))
    assert any("--no-repack" in n for n in text.notes)


def test_no_repack_times_every_kernel_in_the_plain_buffer(smollm: ModelSpec) -> None:
    on = kernel_needs(smollm, Settings(n_ctx=2048), AVX512)
    off = kernel_needs(smollm, Settings(n_ctx=2048, repack=False), AVX512)
    assert on.extra_buffers
    assert not off.extra_buffers
    assert off.shapes == on.shapes
    assert not off.repack


@pytest.mark.parametrize("mmap", [True, False])
def test_no_repack_has_no_converted_copy(gemma: ModelSpec, mmap: bool) -> None:
    s = Settings(n_ctx=2048, use_mmap=mmap)
    for hw in (AMX, AVX512):
        assert estimate(gemma, s, hw).device("CPU").other_bytes > 0
        off = estimate(gemma, s.replace(repack=False), hw).device("CPU")
        assert off.other_bytes == 0
        assert off.weights_bytes == gemma.weights_bytes  # every weight in the CPU buffer
