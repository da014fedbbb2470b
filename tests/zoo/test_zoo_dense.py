"""The dense zoo models load in the real llama.cpp, get a context and decode a few tokens.

Each model runs in a child process (a crash in llama.cpp fails one test instead of
killing pytest). The ``llama_kv_cache: size = …`` lines llama.cpp logs are checked
against the model's spec: cells and layers per cache, and the K and V sizes.
"""

from __future__ import annotations

import importlib.util
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from gguf import Keys

from tests.engine_host import child_env
from tests.zoo import dense, write_model

pytestmark = [
    pytest.mark.engine,
    pytest.mark.skipif(importlib.util.find_spec("llama_cpp") is None, reason="needs llama_cpp"),
]

N_CTX = 4096
N_UBATCH = 512  # Llama() default
MIB = 1024 * 1024

CHILD = """
import json, os, sys
import numpy as np, llama_cpp
path, n_ctx, kwargs = sys.argv[1], int(sys.argv[2]), json.loads(sys.argv[3])
if os.environ.get("GGTUNE_TEST_REPACK", "1") != "1":  # Llama() has no use_extra_bufts keyword
    defaults = llama_cpp.llama_cpp.llama_model_default_params
    def no_repack():
        p = defaults()
        p.use_extra_bufts = False
        return p
    llama_cpp.llama_cpp.llama_model_default_params = no_repack
llm = llama_cpp.Llama(model_path=path, n_ctx=n_ctx, n_threads=2, verbose=True, **kwargs)
tokens = llm.tokenize(b"the model cache window", add_bos=True)
llm.eval(tokens)
logits = np.ctypeslib.as_array(llama_cpp.llama_get_logits_ith(llm.ctx, -1), shape=(llm.n_vocab(),))
print("ZOO_DECODED", len(tokens), bool(np.isfinite(logits).all()), file=sys.stderr)
"""

KV_LINE = re.compile(
    r"llama_kv_cache: size = +[\d.]+ MiB \( *(\d+) cells, +(\d+) layers,.*"
    r"K \(f16\): +([\d.]+) MiB, V \(f16\): +([\d.]+) MiB"
)

# Layers on the sliding window, by llama.cpp's default pattern for the architecture
# (gemma2 and gpt-oss 2, cohere2 4, gemma3 6). phi3 has a sliding_window key, but
# llama.cpp disables SWA for phi3.
SWA_LAYERS = {
    "gemma2": {0, 2},
    "gemma3": {0, 1, 2, 3, 4},
    "cohere2": {0, 1, 2, 4, 5, 6},
    "gpt-oss": {0, 2},
}

CONFIGS = {
    # Llama() defaults: flash attention off (V transposed), full-size SWA cache.
    "defaults": {},
    "fa-swa": {"flash_attn": True, "swa_full": False},
}


def expected_caches(name: str, config: dict[str, bool]) -> list[tuple[int, int, float, float]]:
    """(cells, layers, K MiB, V MiB) of each cache, non-SWA first, as llama.cpp sizes them."""
    spec = dense.SPECS[name]
    widths = [spec.per_layer(spec.n_head_kv, il) * spec.head_size() for il in range(spec.n_layer)]
    swa = SWA_LAYERS.get(name, set())
    window = spec.kv.get(Keys.Attention.SLIDING_WINDOW, 0)
    assert isinstance(window, int)
    swa_cells = N_CTX
    if not config.get("swa_full", True):
        swa_cells = -(-min(N_CTX, window + N_UBATCH) // 256) * 256
    # Without flash attention V is stored transposed, and llama.cpp pads every layer's
    # V to the widest one when the widths differ.
    v_widths = widths if config.get("flash_attn") else [max(widths)] * len(widths)
    caches = []
    for layers, cells in (
        ([il for il in range(spec.n_layer) if il not in swa], N_CTX),
        (sorted(swa), swa_cells),
    ):
        if layers:
            k = cells * sum(widths[il] for il in layers) * 2 / MIB
            v = cells * sum(v_widths[il] for il in layers) * 2 / MIB
            caches.append((cells, len(layers), k, v))
    return caches


@pytest.fixture(scope="module")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("zoo-dense")


def test_every_spec_has_a_builder() -> None:
    assert set(dense.BUILDERS) == set(dense.SPECS)
    assert set(SWA_LAYERS) <= set(dense.SPECS)


@pytest.mark.parametrize("name", sorted(dense.BUILDERS))
def test_model_is_small(name: str, zoo_dir: Path) -> None:
    assert write_model(name, zoo_dir).stat().st_size < 2 * MIB


@pytest.mark.parametrize("config", sorted(CONFIGS))
@pytest.mark.parametrize("name", sorted(dense.BUILDERS))
def test_llama_cpp_loads_and_decodes(name: str, config: str, zoo_dir: Path) -> None:
    path = write_model(name, zoo_dir)
    kwargs = CONFIGS[config]
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(path), str(N_CTX), json.dumps(kwargs)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env=child_env(),
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-4000:]
    assert "ZOO_DECODED" in log, log[-4000:]
    assert log.split("ZOO_DECODED", 1)[1].split()[1] == "True", "non-finite logits"

    got = [
        (int(cells), int(layers), float(k), float(v))
        for cells, layers, k, v in KV_LINE.findall(log)
    ]
    want = expected_caches(name, kwargs)
    assert [(c, n) for c, n, _, _ in got] == [(c, n) for c, n, _, _ in want], log[-4000:]
    for (_, _, k, v), (_, _, k_want, v_want) in zip(got, want, strict=True):
        assert k == pytest.approx(k_want, abs=0.006)
        assert v == pytest.approx(v_want, abs=0.006)
