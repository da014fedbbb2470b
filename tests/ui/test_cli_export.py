"""``ggtune export`` and ``ggtune library`` through ui.cli.main.run, as a user types them."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

from app.export.ollama import settings_from_modelfile
from ui.cli.main import run


@pytest.fixture
def isolated_home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, gemma_path: Path) -> Path:
    """A home with no runner stores, config and cache under tmp, no Ollama server."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("GGTUNE_MODELS_DIR", str(gemma_path.parent))
    monkeypatch.setenv("OLLAMA_HOST", "127.0.0.1:9")  # discard port: nothing answers
    monkeypatch.delenv("OLLAMA_MODELS", raising=False)
    monkeypatch.delenv("HF_HOME", raising=False)
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    return home


def test_export_llama_server_prints_a_command(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["export", str(gemma_path), "--to", "llama-server", "-c", "8192", "-np", "2"])
    assert code == 0
    line = capsys.readouterr().out.splitlines()[-1]
    argv = shlex.split(line)
    assert argv[:4] == ["exec", "llama-server", "-m", str(gemma_path.resolve())]
    assert argv[argv.index("-c") + 1] == "8192"
    assert argv[argv.index("-np") + 1] == "2"
    assert "--no-kv-unified" in argv  # an explicit -np turns llama-server's unified cache off


def test_export_ollama_writes_a_modelfile_once(
    gemma_path: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "Modelfile"
    args = ["export", str(gemma_path), "--to", "ollama", "--runner", "ollama", "-c", "4096"]
    args += ["-np", "2", "-ctk", "q8_0", "-ctv", "q8_0", "--stop", "<end_of_turn>", "-o", str(out)]
    assert run(args) == 0
    imported = settings_from_modelfile(out.read_text(), num_parallel=2, kv_cache_type="q8_0")
    assert imported.settings.n_ctx == 4096 * 2  # --runner ollama: -c is per slot
    assert imported.stop == ("<end_of_turn>",)
    assert "OLLAMA_NUM_PARALLEL" in capsys.readouterr().err
    assert run(args) == 2  # exists: refused
    assert "already exists" in capsys.readouterr().err
    assert run([*args, "--overwrite"]) == 0


def test_export_refuses_what_ollama_cannot_run(
    gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = run(["export", str(gemma_path), "--to", "ollama", "-ctk", "q8_0", "-ctv", "f16"])
    assert code == 2
    assert "one KV cache type" in capsys.readouterr().err


def test_library_json_lists_the_demo_models(
    isolated_home: Path, gemma_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(["library", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    names = [m["name"] for m in data["models"]]
    assert gemma_path.name in names
    assert data["ollama"]["running"] is False


def test_library_add_folder(
    isolated_home: Path, tmp_path: Path, smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "mine"
    folder.mkdir()
    (folder / "copy.gguf").symlink_to(smollm_path)
    assert run(["library", "--add", str(folder)]) == 0
    out = capsys.readouterr().out
    assert "folder" in out
    assert str(folder / "copy.gguf") in out
    assert "Ollama: not running" in out
    # an entry's name works as the model of an export
    assert run(["export", str(folder / "copy.gguf"), "--to", "llama-cpp-python"]) == 0
