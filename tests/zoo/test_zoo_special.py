"""The special zoo models (MoE, MLA, recurrent, hybrid) load and run in the real llama.cpp.

Each model is written into ``tmp_path`` and handed to a child Python process (so that a
llama.cpp abort cannot take pytest down) that loads it, creates a context of n_ctx 4096
with n_seq_max 1 or 4, and decodes a short prompt in every sequence. The memory lines that
llama.cpp logs are then checked against sizes worked out here by hand from the
hyperparameters in tests/zoo/special.py.
"""

from __future__ import annotations

import re
import subprocess
import sys
from dataclasses import dataclass
from importlib.util import find_spec
from pathlib import Path

import gguf
import pytest

from tests.engine_host import child_env
from tests.zoo import special

N_CTX = 4096
MIB = 1024 * 1024
F16, F32 = 2, 4  # bytes per element: KV cache (default f16) and recurrent states (f32)

CHILD = r"""
import os, ctypes, math, sys
import llama_cpp as L

path, n_ctx, n_seq = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
L.llama_backend_init()
params = L.llama_model_default_params()
params.use_extra_bufts = os.environ.get("GGTUNE_TEST_REPACK", "1") == "1"  # tests/engine_host.py
model = L.llama_model_load_from_file(path.encode(), params)
assert model, "model load failed"
cp = L.llama_context_default_params()
cp.n_ctx, cp.n_seq_max, cp.n_batch, cp.n_ubatch = n_ctx, n_seq, 512, 512
cp.n_threads = cp.n_threads_batch = 2
ctx = L.llama_init_from_model(model, cp)
assert ctx, "context creation failed"
vocab = L.llama_model_get_vocab(model)
n_vocab = L.llama_vocab_n_tokens(vocab)
text = b"the quick brown fox jumps over the lazy dog"
buf = (L.llama_token * 64)()
n = L.llama_tokenize(vocab, text, len(text), buf, 64, True, False)
assert 0 < n < 64, f"tokenize returned {n}"
for seq in range(n_seq):
    batch = L.llama_batch_init(n, 0, 1)
    batch.n_tokens = n
    for i in range(n):
        batch.token[i], batch.pos[i], batch.n_seq_id[i] = buf[i], i, 1
        batch.seq_id[i][0] = seq
        batch.logits[i] = i == n - 1
    rc = L.llama_decode(ctx, batch)
    assert rc == 0, f"llama_decode returned {rc} for seq {seq}"
    logits = L.llama_get_logits_ith(ctx, n - 1)
    assert all(math.isfinite(logits[j]) for j in range(n_vocab)), "non-finite logits"
    L.llama_batch_free(batch)
L.llama_free(ctx)
L.llama_model_free(model)
print(f"ZOO-OK n_vocab={n_vocab} n_prompt={n}", flush=True)
"""


@dataclass(frozen=True)
class Kv:
    """The attention KV cache: layers in it and K/V bytes per token over those layers."""

    layers: int
    k_bytes: int  # per token, all layers
    v_bytes: int


@dataclass(frozen=True)
class Rs:
    """The recurrent state: R (conv/shift) and S (SSM/WKV) bytes per sequence."""

    n_layer: int  # llama.cpp logs the model's n_layer here, not the recurrent count
    r_bytes: int
    s_bytes: int


def kv(layers: int, n_embd_k_gqa: int, n_embd_v_gqa: int) -> Kv:
    return Kv(layers, layers * n_embd_k_gqa * F16, layers * n_embd_v_gqa * F16)


def rs(n_layer: int, n_recurrent: int, n_embd_r: int, n_embd_s: int) -> Rs:
    return Rs(n_layer, n_recurrent * n_embd_r * F32, n_recurrent * n_embd_s * F32)


def mamba2_r(d_conv: int, d_inner: int, n_group: int, d_state: int) -> int:
    """Conv state of a Mamba-2 layer: (d_conv - 1) * (d_inner + 2 * n_group * d_state)."""
    return (d_conv - 1) * (d_inner + 2 * n_group * d_state)


# Worked out from the hyperparameters of tests/zoo/special.py.
EXPECTED: dict[str, tuple[Kv | None, Rs | None]] = {
    # 4 layers x 2 KV heads x head_dim 32
    "qwen3moe": (kv(4, 2 * 32, 2 * 32), None),
    # 5 trunk layers x 2 KV heads x head_dim 32; the NextN layer gets no cache
    "glm4moe": (kv(5, 2 * 32, 2 * 32), None),
    "glm4moe-mtp": (kv(5, 2 * 32, 2 * 32), None),
    # MLA: K-only cache of kv_lora_rank 64 + n_rot 16 per token; V is a view of K
    "deepseek2": (kv(4, 64 + 16, 0), None),
    # R: (d_conv-1) * d_inner; S: d_state 16 * d_inner 256
    "mamba": (None, rs(4, 4, 3 * 256, 16 * 256)),
    "mamba2": (None, rs(4, 4, mamba2_r(4, 256, 2, 64), 64 * 256)),
    # "MMAMMA": 2 attention layers (2 KV heads x 16), 4 Mamba-2 layers
    "granitehybrid": (kv(2, 2 * 16, 2 * 16), rs(6, 4, mamba2_r(4, 256, 1, 64), 64 * 256)),
    # "CCACCA": 2 attention layers, 4 short-conv layers with (l_cache-1) * n_embd state
    "lfm2": (kv(2, 2 * 16, 2 * 16), rs(6, 4, 2 * 128, 0)),
    # R: token_shift_count 2 * n_embd; S: n_embd * head_size 64
    "rwkv6": (None, rs(4, 4, 2 * 128, 128 * 64)),
    "rwkv7": (None, rs(4, 4, 2 * 128, 128 * 64)),
}

KV_LINE = re.compile(
    r"llama_kv_cache: size = +(?P<total>[\d.]+) MiB \( *(?P<cells>\d+) cells, +"
    r"(?P<layers>\d+) layers, +(?P<seqs>\d+/\d+) seqs\), K \(f16\): +(?P<k>[\d.]+) MiB, "
    r"V \(f16\): +(?P<v>[\d.]+) MiB"
)
RS_LINE = re.compile(
    r"llama_memory_recurrent: size = +(?P<total>[\d.]+) MiB \( *(?P<cells>\d+) cells, +"
    r"(?P<layers>\d+) layers, +(?P<seqs>\d+) seqs +\d+ rs_seq\), R \(f32\): +(?P<r>[\d.]+) MiB, "
    r"S \(f32\): +(?P<s>[\d.]+) MiB"
)
COMPUTE_LINE = re.compile(r"CPU compute buffer size = +[\d.]+ MiB")


def mib(logged: str, n_bytes: int) -> bool:
    """Whether a size logged with two decimals is ``n_bytes``."""
    return abs(float(logged) - n_bytes / MIB) <= 0.005 + 1e-9


def run_child(path: Path, n_seq: int) -> tuple[int, str]:
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(N_CTX), str(n_seq)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(),
    )
    return proc.returncode, proc.stdout + proc.stderr


def test_every_builder_has_expectations() -> None:
    assert sorted(EXPECTED) == sorted(special.BUILDERS)


@pytest.mark.parametrize("name", sorted(special.BUILDERS))
def test_builder_writes_small_gguf(name: str, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.gguf"
    special.BUILDERS[name](path)
    assert path.stat().st_size < 4 * MIB
    reader = gguf.GGUFReader(path)
    arch = reader.get_field(gguf.Keys.General.ARCHITECTURE)
    assert arch is not None
    assert arch.contents() == name.removesuffix("-mtp")  # glm4moe-mtp: glm4moe with NextN


@pytest.mark.engine
@pytest.mark.skipif(find_spec("llama_cpp") is None, reason="llama-cpp-python is not installed")
@pytest.mark.parametrize("n_seq", [1, 4])
@pytest.mark.parametrize("name", sorted(special.BUILDERS))
def test_llama_cpp_loads_and_decodes(name: str, n_seq: int, tmp_path: Path) -> None:
    path = tmp_path / f"{name}.gguf"
    special.BUILDERS[name](path)
    rc, log = run_child(path, n_seq)
    tail = log[-3000:]
    assert rc == 0, f"child failed (rc {rc}):\n{tail}"
    assert "ZOO-OK" in log, tail
    assert COMPUTE_LINE.search(log), tail

    want_kv, want_rs = EXPECTED[name]
    kv_lines = list(KV_LINE.finditer(log))
    rs_lines = list(RS_LINE.finditer(log))
    if want_kv is None:
        assert not kv_lines, tail
    else:
        assert len(kv_lines) == 1, tail
        got = kv_lines[0]
        # n_seq_max > 1 without kv_unified: one stream of n_ctx / n_seq cells per sequence
        assert int(got["cells"]) == N_CTX // n_seq
        assert got["seqs"] == f"{n_seq}/{n_seq}"
        assert int(got["layers"]) == want_kv.layers
        assert mib(got["k"], N_CTX * want_kv.k_bytes), got[0]
        assert mib(got["v"], N_CTX * want_kv.v_bytes), got[0]
    if want_rs is None:
        assert not rs_lines, tail
    else:
        assert len(rs_lines) == 1, tail
        got = rs_lines[0]
        assert int(got["cells"]) == n_seq
        assert int(got["seqs"]) == n_seq
        assert int(got["layers"]) == want_rs.n_layer
        assert mib(got["r"], n_seq * want_rs.r_bytes), got[0]
        assert mib(got["s"], n_seq * want_rs.s_bytes), got[0]
