"""No header llama.cpp refuses gets a verdict from ggtune: a property test on the engine.

Hypothesis draws hostile hyperparameters (a negative INT32 head count, zero or huge head
counts, KV heads above the heads, a zero embedding, no trunk layers, more experts used
than there are, counts stored as the wrong GGUF type, arrays of the wrong length, a
missing required key, an unknown RoPE scaling) and writes them over a tiny model whose
tensors are made for the real ones (tests/zoo/dense.py). Each file then goes both ways:
ggtune's :func:`~app.model.spec.model_spec` and :func:`~app.predict.estimate.estimate`,
and llama.cpp's own dry run in a child process. Whenever llama.cpp refuses the file,
ggtune must have refused it too (an error naming a key), never said "fits"; and whenever
llama.cpp loads it, ggtune must not refuse it. About 1 s of engine time per example.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import pytest
from gguf import GGUFValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.errors import EngineError, GGTuneError
from app.hardware.devices import Device, Hardware
from app.model.gguf_reader import read_model
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.settings import Settings
from runner.dry_run import dry_run
from tests.zoo.dense import SPECS, Override, write_spec

pytestmark = [pytest.mark.engine, pytest.mark.slow]

U32, I32, U64, F32, STR, ARR = (
    GGUFValueType.UINT32,
    GGUFValueType.INT32,
    GGUFValueType.UINT64,
    GGUFValueType.FLOAT32,
    GGUFValueType.STRING,
    GGUFValueType.ARRAY,
)

BASES = ("llama", "qwen2", "gpt-oss")


def u32(v: int) -> Override:
    return (U32, v, None)


def arr(item: GGUFValueType, values: list[int]) -> Override:
    return (ARR, values, item)


# For each key: hostile values, and one or two that are fine (so some files load).
HOSTILE: dict[str, list[Override]] = {
    "{arch}.attention.head_count_kv": [
        (I32, -(2**31), None),
        (I32, 2, None),
        u32(0),
        u32(1),
        u32(16),
        u32(2**31),
        arr(I32, [2, 2, 2, -1]),
        arr(U32, [2, 2, 2]),
        arr(U32, [2, 2, 2, 2]),
        u32(2),
    ],
    "{arch}.attention.head_count": [u32(0), u32(4), u32(2**31), (U64, 8, None), u32(8)],
    "{arch}.embedding_length": [u32(0), u32(64), (I32, 128, None), u32(128)],
    "{arch}.block_count": [u32(0), u32(3), u32(513), (U64, 4, None), u32(4)],
    "{arch}.nextn_predict_layers": [u32(4), u32(5), u32(0)],
    "{arch}.context_length": [None, u32(0), u32(2**31), (I32, -1, None), u32(4096)],
    "{arch}.feed_forward_length": [u32(0), u32(100), (F32, 384.0, None)],
    "{arch}.rope.dimension_count": [u32(8), (I32, 16, None)],
    "{arch}.rope.scaling.type": [(STR, "bogus", None), (STR, "linear", None)],
    "{arch}.expert_count": [u32(0), u32(1), u32(2000), u32(8)],
    "{arch}.expert_used_count": [u32(0), u32(9), u32(1), u32(2)],
}


@dataclass(frozen=True)
class Verdicts:
    ggtune: str  # "fits", "no verdict" or the error
    engine: str  # "loads" or the engine's error


HARDWARE = Hardware(host=Device("CPU", "host", 64 * 2**30, 64 * 2**30))


def verdicts(path: Path) -> Verdicts:
    try:
        spec = model_spec(read_model(path))
        est = estimate(spec, Settings(n_ctx=512), HARDWARE)
        ours = "fits" if est.fits else "no verdict"
    except GGTuneError as err:
        ours = f"refused: {err}"
    try:
        dry_run(str(path), Settings(n_ctx=512), timeout_s=60)
        theirs = "loads"
    except EngineError as err:
        theirs = f"refused: {err}"
    return Verdicts(ours, theirs)


@st.composite
def hostile_models(draw: st.DrawFn) -> tuple[str, dict[str, Override]]:
    base = draw(st.sampled_from(BASES))
    keys = draw(st.lists(st.sampled_from(sorted(HOSTILE)), min_size=1, max_size=2, unique=True))
    return base, {k: draw(st.sampled_from(HOSTILE[k])) for k in keys}


@settings(
    max_examples=40,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture],
)
@given(case=hostile_models())
def test_ggtune_gives_no_verdict_on_what_llama_cpp_refuses(
    tmp_path: Path, case: tuple[str, dict[str, Override]]
) -> None:
    base, overrides = case
    path = tmp_path / f"{base}-{abs(hash(repr(overrides)))}.gguf"
    write_spec(SPECS[base], path, base, overrides=overrides)
    v = verdicts(path)
    shown = {k.format(arch=SPECS[base].arch): o for k, o in overrides.items()}
    if v.engine != "loads":
        assert v.ggtune.startswith("refused"), (
            f"{base} {shown}: llama.cpp {v.engine}, ggtune {v.ggtune}"
        )
    else:
        assert not v.ggtune.startswith("refused"), (
            f"{base} {shown}: llama.cpp loads it, ggtune {v.ggtune}"
        )


@pytest.mark.parametrize("base", BASES)
def test_the_unchanged_models_load_and_fit(tmp_path: Path, base: str) -> None:
    path = tmp_path / f"{base}.gguf"
    write_spec(SPECS[base], path, base)
    assert verdicts(path) == Verdicts("fits", "loads")
