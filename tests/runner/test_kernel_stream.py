"""How much weight the kernel timing streams per graph, by token count and cache size: the
few-token products must read their weights from RAM as a loaded model's do (a graph that
the last-level cache holds warms up across rounds and times the cache instead)."""

from __future__ import annotations

from runner.kernel_bench import (
    COMPUTE_BATCH,
    LARGE_BATCH,
    MAX_STREAM_BYTES,
    STREAM_BYTES,
    matrices_for,
    stream_plan,
)

KIB = 2**10
MIB = 2**20
GIB = 2**30


def test_a_desktop_cache_keeps_the_96_mib_stream() -> None:
    assert stream_plan(8 * MIB, 20 * GIB) == STREAM_BYTES  # 4 × 8 MiB < 96 MiB
    assert stream_plan(None, None) == STREAM_BYTES  # unknown cache: what was always timed


def test_a_server_cache_is_streamed_four_times_over_within_the_caps() -> None:
    assert stream_plan(105 * MIB, 20 * GIB) == 420 * MIB
    assert stream_plan(480 * MIB, 20 * GIB) == MAX_STREAM_BYTES  # 1.5 GiB at most
    assert stream_plan(480 * MIB, 2 * GIB) == 512 * MIB  # a quarter of the free memory
    assert stream_plan(480 * MIB, 100 * MIB) == STREAM_BYTES  # never below the old floor


def test_matrices_per_graph_by_token_count() -> None:
    item = 2 * MIB  # one 4 M-weight Q4 matrix is about that
    n_stream = 48  # 96 MiB of them
    for n in (1, 8, LARGE_BATCH - 1):
        assert matrices_for(n, n_stream, item, 8 * MIB) == n_stream
    # 32…255 tokens: twice the last-level cache, at least two matrices
    assert matrices_for(64, n_stream, item, 8 * MIB) == 8
    assert matrices_for(LARGE_BATCH, n_stream, item, 512 * KIB) == 2
    assert matrices_for(128, n_stream, item, 480 * MIB) == n_stream  # capped by what exists
    assert matrices_for(64, n_stream, item, 0) == 2  # unknown cache: one or two, as before
    # compute-bound from 256 tokens on
    assert matrices_for(COMPUTE_BATCH, n_stream, item, 480 * MIB) == 2
    assert matrices_for(512, 1, item, 8 * MIB) == 1
