"""bench/bench_users_sweep.py's --skip: a quant name leaves out that quant only."""

from __future__ import annotations

from bench.bench_users_sweep import parse_skip, skipped


def test_skip_names_a_whole_quant_not_a_substring() -> None:
    skip = parse_skip("Q2_0@4096, Q4_K@0")
    assert skip == {("Q2_0", 4096), ("Q4_K", 0)}
    assert skipped("gemma3-270m-Q2_0.gguf", 4096, skip)
    assert skipped("smollm2-135m-Q2_0.gguf", 4096, skip)
    # a substring matched these before: TQ2_0 contains Q2_0, Q4_K_M contains Q4_K
    assert not skipped("gemma3-270m-TQ2_0.gguf", 4096, skip)
    assert not skipped("gemma3-270m-Q4_K_M.gguf", 0, skip)
    assert not skipped("gemma3-270m-Q2_0.gguf", 0, skip)  # another depth runs


def test_skip_by_file_stem_leaves_the_other_model() -> None:
    skip = parse_skip("gemma3-270m-Q2_0@4096")
    assert skipped("gemma3-270m-Q2_0.gguf", 4096, skip)
    assert not skipped("smollm2-135m-Q2_0.gguf", 4096, skip)
    assert not skipped("gemma3-270m-TQ2_0.gguf", 4096, skip)


def test_skip_ignores_entries_without_a_depth() -> None:
    assert parse_skip("") == set()
    assert parse_skip("Q2_0") == set()
