"""Parse real llama.cpp logs (captured from the pinned llama-cpp-python) into numbers.

The files under ``data/`` are ``EngineReport.log`` of real runs, with per-tensor and
per-node DEBUG lines left out to keep them small:

* ``gemma3-270m-{no_alloc,alloc}-ctx4096.log``: Gemma 3 270M, n_ctx 4096, swa_full off,
  flash attention auto, one sequence;
* ``smollm2-135m-no_alloc-np4-fa_off.log``: SmolLM2 135M, n_ctx 2048, 4 sequences, not
  unified, flash attention off;
* ``zoo-granitehybrid-no_alloc-np2.log``: the zoo's granitehybrid (attention + Mamba2
  layers), n_ctx 1024, 2 sequences.

The expected numbers come from llama.cpp's rules (docs/sources.md §1), not from the parser:
e.g. Gemma 3's SWA cache holds PAD(512 window + 512 ubatch, 256) = 1024 cells.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from app.measured.engine_report import BufferSize, mib_to_bytes
from app.units import MIB
from runner.engine_log import (
    LogFacts,
    LogLineJoiner,
    parse_buffer_line,
    parse_kv_cache_line,
    parse_log,
    parse_recurrent_line,
)

DATA = Path(__file__).parent / "data"


def _facts(name: str) -> LogFacts:
    return parse_log((DATA / name).read_text().splitlines())


def test_gemma_no_alloc_log() -> None:
    facts = _facts("gemma3-270m-no_alloc-ctx4096.log")
    # no_alloc: dummy buffers for weights and KV print 0.00 MiB (src/llama-model.cpp,
    # src/llama-kv-cache.cpp), the load mode is "none" so there is no CPU_Mapped buffer.
    assert facts.model_buffers == (BufferSize("CPU", 0.0, 0), BufferSize("CPU_REPACK", 0.0, 0))
    assert facts.kv_buffers == (BufferSize("CPU", 0.0, 0), BufferSize("CPU", 0.0, 0))
    # ... but the caches' own size lines carry the numbers: 3 global layers of 4096 cells
    # and 15 SWA layers of 1024 cells, one KV head of 256 in f16 (512 bytes a row).
    base, swa = facts.kv_caches
    assert (base.role, base.cells, base.layers, base.seqs, base.streams) == (
        "non-SWA",
        4096,
        3,
        1,
        1,
    )
    assert (swa.role, swa.cells, swa.layers, swa.swa) == ("SWA", 1024, 15, True)
    assert base.k_bytes == base.v_bytes == 4096 * 3 * 512
    assert swa.k_bytes == swa.v_bytes == 1024 * 15 * 512
    assert (base.type_k, base.type_v) == ("f16", "f16")
    # The compute buffer is printed even though nothing was allocated (the expected size).
    assert facts.compute_buffers == (BufferSize("CPU", 514.5, mib_to_bytes(514.5)),)
    # Output buffer: 4 bytes x 262144 logits x 1 sequence = exactly 1 MiB.
    assert facts.output_buffers == (BufferSize("CPU", 1.0, 4 * 262144),)
    assert (facts.n_ctx, facts.n_ctx_seq, facts.n_seq_max) == (4096, 4096, 1)
    assert (facts.n_batch, facts.n_ubatch) == (2048, 512)
    assert facts.flash_attn_requested == "auto"
    assert facts.flash_attn is True  # "resolve_fused_ops: Flash Attention enabled"
    assert facts.kv_unified is False
    assert facts.recurrent_caches == ()
    assert facts.rs_buffers == ()
    assert facts.offloaded_layers is None  # CPU-only build: no offload lines


def test_gemma_alloc_log() -> None:
    facts = _facts("gemma3-270m-alloc-ctx4096.log")
    # A real load maps the file and repacks some Q4_K weights for the CPU kernels.
    assert [b.buffer for b in facts.model_buffers] == ["CPU_Mapped", "CPU_REPACK"]
    assert facts.model_buffers[0].mib == 235.16
    assert facts.model_buffers[1].mib == 12.66
    # Real KV buffers, one per cache, equal to K+V of each cache.
    assert [b.bytes for b in facts.kv_buffers] == [c.k_bytes + c.v_bytes for c in facts.kv_caches]
    assert facts.compute_buffers == (BufferSize("CPU", 514.5, mib_to_bytes(514.5)),)
    assert facts.flash_attn is True


def test_smollm_parallel_log() -> None:
    facts = _facts("smollm2-135m-no_alloc-np4-fa_off.log")
    # 4 sequences, not unified: 4 streams of PAD(2048 / 4, 256) = 512 cells; 30 layers,
    # 3 KV heads x 64 in f16 = 384 bytes a row.
    (cache,) = facts.kv_caches
    assert (cache.role, cache.cells, cache.streams, cache.seqs, cache.layers) == ("", 512, 4, 4, 30)
    assert cache.total_cells == 2048
    assert cache.k_bytes == 512 * 4 * 30 * 384
    assert (facts.n_ctx, facts.n_ctx_seq, facts.n_seq_max) == (2048, 512, 4)
    assert facts.flash_attn_requested == "disabled"
    assert facts.flash_attn is False
    # 4 bytes x 49152 logits x 4 sequences.
    assert facts.output_buffers == (BufferSize("CPU", 0.75, 4 * 49152 * 4),)


def test_hybrid_log_has_kv_and_recurrent_state() -> None:
    facts = _facts("zoo-granitehybrid-no_alloc-np2.log")
    (cache,) = facts.kv_caches
    assert (cache.cells, cache.layers, cache.streams) == (512, 2, 2)
    (state,) = facts.recurrent_caches
    # One state cell per sequence (max(1, n_seq_max)) on the 6 Mamba2 layers, F32.
    assert (state.cells, state.layers, state.seqs, state.rs_seq) == (2, 6, 2, 0)
    assert (state.type_r, state.type_s) == ("f32", "f32")
    assert (state.r_mib, state.s_mib, state.p_mib, state.size_mib) == (0.04, 0.5, 0.0, 0.54)
    # RS buffers are really allocated even in no_alloc mode.
    assert facts.rs_buffers == (BufferSize("CPU", 0.54, mib_to_bytes(0.54)),)


@pytest.mark.parametrize(
    ("line", "kind", "buffer", "mib"),
    [
        ("load_tensors:        CUDA0 model buffer size =  2346.12 MiB", "model", "CUDA0", 2346.12),
        (
            "load_tensors:    CUDA_Host model buffer size =   262.50 MiB",
            "model",
            "CUDA_Host",
            262.5,
        ),
        (
            "llama_context:  CUDA_Host  output buffer size =     0.58 MiB",
            "output",
            "CUDA_Host",
            0.58,
        ),
        ("llama_kv_cache:      CUDA1 KV buffer size =   128.00 MiB", "KV", "CUDA1", 128.0),
        (
            "sched_reserve:      CUDA0 compute buffer size =   300.01 MiB",
            "compute",
            "CUDA0",
            300.01,
        ),
        ("llama_memory_recurrent:        CPU RS buffer size =     0.15 MiB", "RS", "CPU", 0.15),
    ],
)
def test_buffer_lines(line: str, kind: str, buffer: str, mib: float) -> None:
    assert parse_buffer_line(line) == (kind, BufferSize(buffer, mib, round(mib * MIB)))


@pytest.mark.parametrize(
    "line",
    [
        # The destructor's check (DEBUG / WARN) prints "is" / "of", not "=": not a size.
        "~llama_context:        CPU compute buffer size is 514.5020 MiB, matches expectation "
        "of 514.5020 MiB",
        "~llama_context:      CUDA0 compute buffer size of 10.0000 MiB, does not match "
        "expectation of 9.0000 MiB",
        "llama_adapter_lora_init_impl:        CPU LoRA buffer size =     4.00 MiB",
        "print_info: file size   = 235.16 MiB (7.36 BPW) ",
    ],
)
def test_other_lines_are_not_buffers(line: str) -> None:
    assert parse_buffer_line(line) is None


def test_kv_cache_line_with_quantized_types() -> None:
    line = (
        "llama_kv_cache: size =    6.38 MiB (  4096 cells,   3 layers,  1/1 seqs), "
        "K (q8_0):    3.19 MiB, V (q8_0):    3.19 MiB"
    )
    cache = parse_kv_cache_line(line, "non-SWA")
    assert cache is not None
    assert (cache.type_k, cache.type_v, cache.k_mib, cache.size_mib) == ("q8_0", "q8_0", 3.19, 6.38)
    assert parse_recurrent_line(line) is None


def test_roles_attach_to_the_next_cache_only() -> None:
    lines = [
        "llama_kv_cache_iswa: creating non-SWA KV cache, size = 4096 cells",
        "llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), "
        "K (f16):    6.00 MiB, V (f16):    6.00 MiB",
        "llama_kv_cache: size =   12.00 MiB (  4096 cells,   3 layers,  1/1 seqs), "
        "K (f16):    6.00 MiB, V (f16):    6.00 MiB",
        "llama_kv_cache_iswa: creating     SWA KV cache, size = 1024 cells",
        "llama_kv_cache: size =   15.00 MiB (  1024 cells,  15 layers,  1/1 seqs), "
        "K (f16):    7.50 MiB, V (f16):    7.50 MiB",
    ]
    assert [c.role for c in parse_log(lines).kv_caches] == ["non-SWA", "", "SWA"]


@pytest.mark.parametrize(
    ("lines", "expected"),
    [
        (["llama_context: flash_attn            = enabled"], True),
        (["llama_context: flash_attn            = disabled"], False),
        (
            [
                "llama_context: flash_attn            = auto",
                "resolve_fused_ops: Flash Attention not supported, set to disabled",
            ],
            False,
        ),
        (["llama_context: flash_attn            = auto"], None),  # the probe never ran
    ],
)
def test_flash_attention_resolution(lines: list[str], expected: bool | None) -> None:
    assert parse_log(lines).flash_attn is expected


def test_offloaded_layers() -> None:
    facts = parse_log(["load_tensors: offloaded 19/31 layers to GPU"])
    assert facts.offloaded_layers == (19, 31)


def test_joiner_joins_fragments_and_keeps_levels() -> None:
    lines: list[tuple[int, str]] = []
    joiner = LogLineJoiner(lambda level, line: lines.append((level, line)))
    messages = [
        (2, b"load_tensors: loading"),
        (5, b" model tensors\n"),  # CONT finishes the line
        (1, b"repack: a\nrepack: b\n"),  # two lines in one message
        (5, b"."),  # progress dots continue the DEBUG message ...
        (5, b"."),
        (4, b"llama_model_load: error loading model: bad\n"),  # ... until a new message
        (2, b"no newline at the end"),
    ]
    for level, text in messages:
        joiner.on_log(level, text, None)
    joiner.flush()
    assert lines == [
        (2, "load_tensors: loading model tensors"),
        (1, "repack: a"),
        (1, "repack: b"),
        (1, ".."),
        (4, "llama_model_load: error loading model: bad"),
        (2, "no newline at the end"),
    ]
    assert joiner.errors == ["llama_model_load: error loading model: bad"]


def test_joiner_never_raises() -> None:
    def broken(level: int, line: str) -> None:
        raise RuntimeError("sink is gone")

    joiner = LogLineJoiner(broken)
    joiner.on_log(2, b"line\n", None)  # must not raise into C
    joiner.on_log(2, None, None)
    joiner.on_log(2, b"\xff\xfe invalid utf-8", None)


def test_mib_to_bytes_rounds_to_nearest() -> None:
    assert mib_to_bytes(235.16) == 246583132  # 235.16 x 2**20 = 246583132.16
    assert mib_to_bytes(0.0) == 0
    assert mib_to_bytes(1.0) == MIB
