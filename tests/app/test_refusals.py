"""Impossible hyperparameters are refused with the key named (app/model/refusals.py).

Each case is one the review audit found shown as valid (issue 19, finding 7), written
over a tiny llama whose tensors are made for the real figures; tests/runner/
test_refusals_agree.py checks the same rules against llama.cpp's own loader.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gguf import GGUFValueType

from app.errors import InvalidMetadataError
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from tests.zoo.dense import SPECS, Override, write_spec

U32, I32, ARR = GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.ARRAY


@pytest.mark.parametrize(
    ("base", "key", "override"),
    [
        ("llama", "attention.head_count_kv", (I32, -(2**31), None)),
        ("llama", "attention.head_count_kv", (ARR, [2, 2, 2, -(2**31)], I32)),
        ("llama", "attention.head_count", (U32, 0, None)),
        ("llama", "attention.head_count", (U32, 2**31, None)),
        ("llama", "attention.head_count_kv", (U32, 16, None)),  # more KV heads than heads
        ("llama", "embedding_length", (U32, 0, None)),
        ("llama", "nextn_predict_layers", (U32, 4, None)),  # no trunk layer left
        ("llama", "block_count", (U32, 513, None)),
        ("llama", "context_length", None),
        ("llama", "rope.scaling.type", (GGUFValueType.STRING, "bogus", None)),
        ("gpt-oss", "expert_used_count", (U32, 9, None)),  # more used than the 8 experts
        ("gpt-oss", "expert_used_count", (U32, 0, None)),
        ("gpt-oss", "expert_count", (U32, 2000, None)),
    ],
    ids=lambda v: str(v)[:40],
)
def test_an_impossible_hyperparameter_is_refused_naming_its_key(
    tmp_path: Path, base: str, key: str, override: Override
) -> None:
    path = tmp_path / "m.gguf"
    write_spec(SPECS[base], path, base, overrides={f"{{arch}}.{key}": override})
    with pytest.raises(InvalidMetadataError) as caught:
        model_spec(read_model(path))
    message = str(caught.value)
    assert "\n" not in message
    named = {"nextn_predict_layers": "nextn_predict_layers"}.get(key, key)
    assert f"{SPECS[base].arch}.{named}" in message or "attention.head_count" in message, message


@pytest.mark.parametrize("base", sorted(SPECS))
def test_every_dense_zoo_model_passes_the_rules(tmp_path: Path, base: str) -> None:
    path = tmp_path / "m.gguf"
    write_spec(SPECS[base], path, base)
    model_spec(read_model(path))


def test_the_real_models_pass_the_rules(gemma_path: Path, smollm_path: Path) -> None:
    for path in (gemma_path, smollm_path):
        model_spec(read_model(path))
