"""The ggtune command line, as a user types it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from ui.cli.main import run

MIB = 1024 * 1024
STABLE_DEVICE_KEYS = {
    "name",
    "kind",
    "weights_bytes",
    "kv_bytes",
    "recurrent_bytes",
    "compute_bytes",
    "output_bytes",
    "other_bytes",
    "total_bytes",
    "capacity_bytes",
}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, object]:
    assert run(list(argv)) == 0
    return json.loads(capsys.readouterr().out)  # type: ignore[no-any-return]


def test_inspect_describes_the_model(gemma_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["inspect", str(gemma_path)]) == 0
    out = capsys.readouterr().out
    assert "gemma3" in out
    assert "15 sliding window, 3 full attention" in out
    assert "Q4_K" in out
    data = run_json(capsys, "inspect", str(gemma_path), "--json")
    assert data["architecture"] == "gemma3"
    assert data["parameters"] == 268_098_176
    assert data["context_length"] == 32768
    # f16 K+V per token over the 18 layers: 18 * 2 * 256 * 2 bytes
    assert data["kv_bytes_per_token"] == {"f16": 18432, "q8_0": 9792, "q4_0": 5184}


def test_estimate_json_has_the_stable_keys(
    smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(
        capsys,
        "estimate",
        str(smollm_path),
        "-c",
        "8192",
        "-np",
        "4",
        "--no-kv-unified",
        "-fa",
        "off",
        "--json",
    )
    devices = data["devices"]
    assert isinstance(devices, list)
    (host,) = devices
    assert set(host) >= STABLE_DEVICE_KEYS
    assert host["kind"] == "host"
    # llama.cpp: 4 streams of 2048 cells, 180.00 MiB
    assert data["kv_cells"] == {"kv": 2048}
    assert host["kv_bytes"] == 180 * MIB
    assert host["total_bytes"] == sum(
        host[k]
        for k in (
            "weights_bytes",
            "kv_bytes",
            "recurrent_bytes",
            "compute_bytes",
            "output_bytes",
            "other_bytes",
        )
    )


def test_runner_defaults_fill_unset_flags(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    server = run_json(capsys, "estimate", str(gemma_path), "--runner", "llama-server", "--json")
    lcp = run_json(capsys, "estimate", str(gemma_path), "--runner", "llama-cpp-python", "--json")
    assert server["context"]["n_ctx"] == 32768  # -c 0: the training context
    assert server["settings"]["kv_unified"] is True
    assert server["settings"]["swa_full"] is False
    assert lcp["context"]["n_ctx"] == 512
    assert lcp["settings"]["swa_full"] is True
    # Ollama's num_ctx is per slot: -c 4096 -np 2 means 8192 cells for the engine
    ollama = run_json(
        capsys,
        "estimate",
        str(gemma_path),
        "--runner",
        "ollama",
        "-c",
        "4096",
        "-np",
        "2",
        "--json",
    )
    assert ollama["context"]["n_ctx"] == 8192


def test_gpu_plan_splits_devices(smollm_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys,
        "estimate",
        str(smollm_path),
        "-ngl",
        "16",
        "--gpu-mem",
        "4",
        "4",
        "-ts",
        "1,1",
        "--json",
    )
    names = [d["name"] for d in data["devices"]]  # type: ignore[index]
    assert names == ["CUDA0", "CUDA1", "CPU"]
    layers = [d["n_layers"] for d in data["devices"]]  # type: ignore[index]
    assert sum(layers) == 30
    assert layers[2] == 15  # ngl 16 = the output layer + the last 15 layers


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["estimate", "/no/such/model.gguf"], "no such file"),
        (["estimate", "{model}", "-fa", "maybe"], "invalid choice"),
        (["estimate", "{model}", "-ctv", "q8_0", "-fa", "off"], "flash attention"),
        (["estimate", "{model}", "-c", "-5"], "context size"),
        (["inspect", "{notgguf}"], "GGUF"),
    ],
)
def test_errors_are_one_line_and_exit_2(
    argv: list[str],
    message: str,
    smollm_path: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    notgguf = tmp_path / "notes.txt"
    notgguf.write_text("hello, not a model")
    argv = [a.format(model=smollm_path, notgguf=notgguf) for a in argv]
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_console_script_never_shows_a_traceback(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF\x03\x00\x00\x00" + b"\xff" * 40)
    proc = subprocess.run(
        [sys.executable, "-m", "ui.cli", "estimate", str(bad)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert str(bad) in proc.stderr


@pytest.mark.engine
def test_verify_prints_estimate_beside_engine(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["estimate", str(gemma_path), "-c", "4096", "--verify"]) == 0
    out = capsys.readouterr().out
    assert "estimate vs llama.cpp" in out
    kv_row = next(line for line in out.splitlines() if line.startswith("KV cache"))
    assert "+0.00%" in kv_row
    data = run_json(capsys, "estimate", str(gemma_path), "-c", "4096", "--verify", "--json")
    engine = data["engine"]
    assert engine["model_size_bytes"] == 246_587_904  # type: ignore[index]
