"""One registry of export targets, for ``ggtune export`` and the desktop's Export tab."""

from __future__ import annotations

import argparse
from pathlib import Path

from app.export.common import facts_from_spec, model_facts
from app.export.targets import TARGETS, ExportOptions, export_for
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.settings import Settings
from ui.cli.main import build_parser

FILENAMES = {
    "ollama": "Modelfile",
    "lmstudio": "gemma-3-270m-q4_k_m.gguf.json",
    "llama-server": "llama-server.sh",
    "llama-cpp-python": "load_model.py",
}


def test_every_target_exports_the_demo_model(gemma_path: Path, tmp_path: Path) -> None:
    facts = model_facts(gemma_path)
    assert facts == facts_from_spec(model_spec(read_model(gemma_path)))
    for target in TARGETS:
        out = export_for(
            target,
            str(gemma_path),
            Settings(n_ctx=4096),
            facts=facts,
            system="linux",
            options=ExportOptions(lmstudio_home=tmp_path / "no-lmstudio"),
        )
        assert out.target == target
        assert out.filename == FILENAMES[target], target
        assert out.text
        assert out.file_text
        assert (out.ollama is not None) == (target == "ollama")
        assert (out.lmstudio is not None) == (target == "lmstudio")


def test_options_reach_the_runners_that_take_them(gemma_path: Path, smollm_path: Path) -> None:
    facts = model_facts(gemma_path)
    draft = ExportOptions(draft=str(smollm_path), threads=3)
    server = export_for(
        "llama-server", str(gemma_path), Settings(), facts=facts, system="windows", options=draft
    )
    assert server.filename == "llama-server.ps1"
    assert "-md" in server.text
    assert "-t 3" in server.text or "--threads 3" in server.text
    ollama = export_for(
        "ollama", str(gemma_path), Settings(), facts=facts, system="linux", options=draft
    )
    assert "DRAFT" in ollama.file_text
    assert "num_thread 3" in ollama.file_text


def test_the_cli_offers_the_registrys_targets() -> None:
    parser = build_parser(["export"])
    (sub,) = (a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    (to,) = (a for a in sub.choices["export"]._actions if a.dest == "to")
    assert tuple(to.choices or ()) == TARGETS
