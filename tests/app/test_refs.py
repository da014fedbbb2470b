"""What a model name means: catalog entry, Hugging Face repo, URL or path, decided once."""

from __future__ import annotations

from pathlib import Path

import pytest

from app.errors import ModelFileNotFoundError
from app.sources.reading import load_model_spec, read_source
from app.sources.refs import is_repo, parse_model_ref


@pytest.mark.parametrize(
    ("text", "kind"),
    [
        ("catalog:qwen3-8b", "catalog"),
        ("org/m-GGUF", "repo"),
        ("org/m-GGUF:Q4_K_M", "repo"),
        ("hf.co/org/m-GGUF:IQ4_XS", "repo"),
        ("https://huggingface.co/org/m-GGUF/tree/dev", "repo"),
        ("https://huggingface.co/org/m-GGUF/resolve/main/m-Q4_K_M.gguf", "url"),
        ("https://example.com/models/m.gguf", "url"),
        ("models/m-Q4_K_M.gguf", "path"),
        ("just-a-name", "path"),
    ],
)
def test_each_kind_of_name(text: str, kind: str) -> None:
    assert parse_model_ref(text).kind == kind
    assert is_repo(text) == (kind == "repo")


def test_an_existing_path_wins_over_a_repo_of_the_same_spelling(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "m-GGUF").write_bytes(b"")
    assert parse_model_ref("org/m-GGUF").kind == "path"


def test_a_command_of_one_file_reads_org_name_as_a_path(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    assert parse_model_ref("missing/model", repos=False).kind == "path"
    with pytest.raises(ModelFileNotFoundError, match="missing/model: no such file"):
        read_source("missing/model")


def test_the_three_readable_kinds_read(gemma_path: Path) -> None:
    assert load_model_spec("catalog:qwen3-8b").path == "catalog:qwen3-8b"
    assert load_model_spec(gemma_path).arch == "gemma3"
    assert load_model_spec(str(gemma_path)).n_layer == 18
