"""What each runner will run, on the command line: ``estimate`` shows the runner's plan and
the whole footprint, ``export`` follows the runner it writes for (issue 15)."""

from __future__ import annotations

import json
import shlex
import shutil
from pathlib import Path

import pytest

from app.model.gguf_reader import read_model
from ui.cli.main import run

GIB = 1024**3
MIB = 1024**2
FOOTPRINT = ("prompt_cache_bytes", "checkpoint_bytes", "projector_bytes", "draft_bytes")


def _json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert run(["estimate", *argv, "--json"]) == 0
    data: dict[str, object] = json.loads(capsys.readouterr().out)
    return data


def test_estimate_json_has_the_footprint_per_device(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, str(gemma_path), "--gpu-mem", "4", "--ram", "16")
    devices = data["devices"]
    assert isinstance(devices, list)
    for d in devices:
        assert all(isinstance(d[k], int) for k in FOOTPRINT)
    host = devices[-1]
    # llama-server: --cache-ram 8192 MiB on the host; Gemma 3's sliding window needs
    # checkpoints (32 per slot, 4 slots)
    assert host["prompt_cache_bytes"] == 8192 * MIB
    assert host["checkpoint_bytes"] > 0
    assert host["growth_bytes"] == host["prompt_cache_bytes"] + host["checkpoint_bytes"]
    runner = data["runner"]
    assert isinstance(runner, dict)
    assert runner["name"] == "llama-server"
    assert runner["summary"].startswith("llama-server would put all 18 layers + output on CUDA0")


def test_cache_ram_and_checkpoints_are_settings(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, str(gemma_path), "--ram", "16", "-cram", "1024", "-ctxcp", "0")
    host = data["devices"][-1]  # type: ignore[index]
    assert host["prompt_cache_bytes"] == 1024 * MIB
    assert host["checkpoint_bytes"] == 0


def test_a_projector_beside_the_model_is_budgeted(
    gemma_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # any GGUF named mmproj-*.gguf next to the model is read as its projector; a real
    # projector is written by tests/runner/test_projector.py, here the header suffices
    model = tmp_path / "gemma.gguf"
    model.symlink_to(gemma_path)
    projector = tmp_path / "mmproj-gemma.gguf"
    from tests.runner.tiny_projector import write_tiny_projector

    n_embd = read_model(gemma_path).metadata["gemma3.embedding_length"]
    assert isinstance(n_embd, int)
    write_tiny_projector(projector, n_embd_text=n_embd)
    data = _json(capsys, str(model), "--gpu-mem", "4", "--ram", "16")
    gpu = data["devices"][0]  # type: ignore[index]
    assert gpu["projector_bytes"] > 0
    assert data["runner"]["projector"]["source"] == "next to the model"  # type: ignore[index]
    none = _json(capsys, str(model), "--gpu-mem", "4", "--ram", "16", "--no-mmproj")
    assert none["devices"][0]["projector_bytes"] == 0  # type: ignore[index]
    cpu = _json(capsys, str(model), "--gpu-mem", "4", "--ram", "16", "--no-mmproj-offload")
    assert cpu["devices"][0]["projector_bytes"] == 0  # type: ignore[index]
    assert cpu["devices"][-1]["projector_bytes"] == gpu["projector_bytes"]  # type: ignore[index]


def test_a_draft_model_is_budgeted_on_the_gpu(
    gemma_path: Path, smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = _json(capsys, str(gemma_path), "--gpu-mem", "8", "--ram", "16", "-md", str(smollm_path))
    assert data["devices"][0]["draft_bytes"] > 90 * MIB  # type: ignore[index]


def test_estimate_prints_the_plan_and_the_growth(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["estimate", str(gemma_path), "--gpu-mem", "0.6", "--ram", "4"]) == 0
    out = capsys.readouterr().out
    assert "llama-server would" in out
    assert "--fit shrinks the context from 32768 (the training context) to 4096" in out
    assert "+prompt cache" in out
    assert "grows with use: the prompt cache up to 8.0 GiB (--cache-ram)" in out


def test_export_to_ollama_uses_ollamas_preset(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The review's case: `export --to ollama -c 4096` wrote num_ctx 1024 and
    OLLAMA_NUM_PARALLEL 4 (llama-server's preset); Ollama's own is one slot."""
    assert run(["export", str(gemma_path), "--to", "ollama", "-c", "4096", "--gpu-mem", "8"]) == 0
    out = capsys.readouterr().out
    assert "PARAMETER num_ctx 4096" in out
    assert 'Environment="OLLAMA_NUM_PARALLEL=1"' in out
    assert "PARAMETER num_gpu" not in out  # left to llama-server's fit, as Ollama does
    assert "# Ollama would put all 18 layers + output on CUDA0 and keep 4096 context" in out
    # --runner picks another preset on purpose
    assert (
        run(
            [
                "export",
                str(gemma_path),
                "--to",
                "ollama",
                "-c",
                "4096",
                "--runner",
                "llama-server",
                "--gpu-mem",
                "8",
            ]
        )
        == 0
    )
    assert "OLLAMA_NUM_PARALLEL=4" in capsys.readouterr().out


def test_export_to_llama_server_pins_what_its_fit_would_pick(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["export", str(gemma_path), "--to", "llama-server", "--gpu-mem", "0.6"]) == 0
    out = capsys.readouterr().out
    assert "# llama-server's own fit would pick -c 4096 -ngl 0 here; pinned" in out
    argv = shlex.split(out.splitlines()[-1])
    assert argv[argv.index("-c") + 1] == "4096"
    assert argv[argv.index("-ngl") + 1] == "0"
    assert argv[argv.index("--fit") + 1] == "off"


def test_export_writes_only_flags_the_pinned_llama_server_knows(
    gemma_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from app.export.llama_server import FLAGS

    model = tmp_path / "gemma.gguf"
    shutil.copyfile(gemma_path, model)
    args = ["export", str(model), "--to", "llama-server", "-cram", "2048", "-ctxcp", "4"]
    assert run(args) == 0
    argv = shlex.split(capsys.readouterr().out.splitlines()[-1])[1:]
    flags = [a for a in argv if a.startswith("-") and not a.lstrip("-").isdigit()]
    assert set(flags) <= set(FLAGS)
    assert argv[argv.index("-cram") + 1] == "2048"
    assert argv[argv.index("-ctxcp") + 1] == "4"
