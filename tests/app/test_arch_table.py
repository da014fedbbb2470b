"""Every architecture of the pinned llama.cpp is classified, as its own source says.

The names come from ``LLM_ARCH_NAMES`` in the vendored ``src/llama-arch.cpp`` (the sdist the
``llama_cpp_source`` fixture fetches), so a pin bump that adds an architecture fails here,
naming it. The families are cross-checked with the switch statements they come from:
``llm_arch_is_recurrent`` / ``llm_arch_is_hybrid`` (llama-arch.cpp) and the ``nullptr``
branch of ``llama_model::create_memory`` (llama-model.cpp).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from app.model.arch_table import ARCH_RULES, COMPUTE_CHECKED_ARCHS, UNCHECKED_ARCHS

pytestmark = pytest.mark.engine


def _arch_names(root: Path) -> dict[str, str]:
    """Return ``LLM_ARCH_*`` enum name -> architecture name, from ``LLM_ARCH_NAMES``."""
    src = (root / "vendor/llama.cpp/src/llama-arch.cpp").read_text()
    table = src.split("LLM_ARCH_NAMES", 1)[1].split("};", 1)[0]
    return dict(re.findall(r"\{\s*LLM_ARCH_(\w+),\s*\"([^\"]+)\"\s*\}", table))


def _switch_cases(src: str, function: str) -> set[str]:
    """Return the ``case LLM_ARCH_X:`` labels of ``function``'s body up to its ``return true``."""
    body = src.split(f"bool {function}(", 1)[1].split("return true;", 1)[0]
    return set(re.findall(r"case LLM_ARCH_(\w+):", body))


def test_every_architecture_of_the_pinned_llama_cpp_is_classified(
    llama_cpp_source: Path,
) -> None:
    names = set(_arch_names(llama_cpp_source).values())
    assert len(names) >= 154
    missing = sorted(names - set(ARCH_RULES))
    assert not missing, f"not classified in app/model/arch_table.py: {', '.join(missing)}"
    gone = sorted(set(ARCH_RULES) - names)
    assert not gone, f"classified but no longer in LLM_ARCH_NAMES: {', '.join(gone)}"


def test_recurrent_and_hybrid_families_match_llm_arch_is(llama_cpp_source: Path) -> None:
    enum = _arch_names(llama_cpp_source)
    src = (llama_cpp_source / "vendor/llama.cpp/src/llama-arch.cpp").read_text()
    recurrent = {enum[e] for e in _switch_cases(src, "llm_arch_is_recurrent")}
    hybrid = {enum[e] for e in _switch_cases(src, "llm_arch_is_hybrid")}
    assert recurrent == {n for n, r in ARCH_RULES.items() if r.family == "recurrent"}
    ours = {n for n, r in ARCH_RULES.items() if r.family in ("hybrid", "hybrid_idx", "dsv4")}
    assert hybrid == ours


def test_no_memory_family_matches_create_memory(llama_cpp_source: Path) -> None:
    enum = _arch_names(llama_cpp_source)
    src = (llama_cpp_source / "vendor/llama.cpp/src/llama-model.cpp").read_text()
    body = src.split("llama_model::create_memory(", 1)[1].split("res = nullptr;", 1)[0]
    no_memory = {enum[e] for e in re.findall(r"case LLM_ARCH_(\w+):", body)}
    assert no_memory == {n for n, r in ARCH_RULES.items() if r.family == "none"}


def test_sparse_attention_caches_match_create_memory(llama_cpp_source: Path) -> None:
    """The archs create_memory gives a DSA / MSA / DSV4 / hybrid-idx cache are ours too."""
    enum = _arch_names(llama_cpp_source)
    src = (llama_cpp_source / "vendor/llama.cpp/src/llama-model.cpp").read_text()
    body = src.split("llama_model::create_memory(", 1)[1].split("default:", 1)[0]
    built: dict[str, set[str]] = {}
    for block in re.split(r"\}\s*break;", body):
        cases = {enum[e] for e in re.findall(r"case LLM_ARCH_(\w+):", block)}
        for cls in re.findall(r"new (llama_\w+)\(", block):
            for name in cases:
                built.setdefault(name, set()).add(cls)
    family_of = {
        "llama_kv_cache_dsa": {"dsa"},
        "llama_kv_cache_msa": {"msa"},
        "llama_kv_cache_dsv4": {"dsv4"},
        "llama_kv_cache_dsa_iswa": {"dsa_iswa"},
        "llama_memory_hybrid_idx": {"hybrid_idx"},
    }
    checked = 0
    for name, classes in built.items():
        for cls in classes & set(family_of):
            assert ARCH_RULES[name].family in family_of[cls], (name, cls)
            checked += 1
    assert checked >= 6, built  # deepseek32, glm-dsa, minimax-m3, glm5-next, dots3note, ...


def test_bookkeeping_sets_name_real_architectures() -> None:
    assert set(ARCH_RULES) >= UNCHECKED_ARCHS
    assert set(ARCH_RULES) >= COMPUTE_CHECKED_ARCHS
    for name, rule in ARCH_RULES.items():
        assert rule.source.startswith("src/"), name
        if rule.family in ("hybrid", "recurrent"):
            assert rule.recurrent is not None, name
