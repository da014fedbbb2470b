"""Header stand-ins (app/model/standin.py): bytes, sizes, sparseness and refusals.

The dry runs on stand-ins (identical to the real files', equal to the analytic estimate
for catalog models) are in tests/runner/test_standin_dry_run.py.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

from app.errors import StandInError
from app.model.catalog import catalog_header
from app.model.gguf_reader import read_header, read_model
from app.model.quant import simulate_quant
from app.model.spec import model_spec
from app.model.standin import (
    catalog_prefix,
    file_prefix,
    requantized_prefix,
    serialize_header,
    write_standin,
)
from app.sources.standins import engine_target, write_model_standin
from tests.zoo import write_model

MIB = 1024 * 1024


def test_a_real_models_standin_has_its_header_and_size(smollm_path: Path, tmp_path: Path) -> None:
    prefix, size = file_prefix(smollm_path)
    assert size == smollm_path.stat().st_size
    stand_in = write_standin(prefix, size, key=str(smollm_path), folder=tmp_path)
    assert stand_in.path.stat().st_size == size
    assert stand_in.path.read_bytes()[: len(prefix)] == prefix
    assert stand_in.header_bytes == len(prefix) == read_header(smollm_path).data_offset
    # sparse: the hole after the header takes no blocks (ext4, btrfs, XFS, APFS, NTFS)
    assert stand_in.disk_bytes < len(prefix) + MIB
    real, copy = read_model(smollm_path), read_model(stand_in.path)
    assert [(t.name, t.offset, t.n_bytes) for t in real.tensors] == [
        (t.name, t.offset, t.n_bytes) for t in copy.tensors
    ]


def test_writing_again_replaces_the_standin_atomically(smollm_path: Path, tmp_path: Path) -> None:
    prefix, size = file_prefix(smollm_path)
    first = write_standin(prefix, size, key="same", folder=tmp_path)
    second = write_standin(prefix, size, key="same", folder=tmp_path)
    assert first.path == second.path
    assert sorted(p.name for p in tmp_path.iterdir()) == [first.path.name]  # no .tmp left


def test_bytes_that_are_not_a_header_are_refused(tmp_path: Path) -> None:
    with pytest.raises(StandInError, match="do not start with GGUF"):
        write_standin(b"PK\x03\x04 not a model", 1000, key="zip", folder=tmp_path)
    header = serialize_header({"general.architecture": "llama"}, [("a.weight", (64,), 0, 256)])
    with pytest.raises(StandInError, match="runs past the end of the file"):
        write_standin(header, len(header) + 100, key="short", folder=tmp_path)
    with pytest.raises(StandInError, match="not a whole GGUF header"):
        write_standin(header[:20], 10_000, key="cut", folder=tmp_path)
    assert not list(tmp_path.glob("*.gguf"))


def test_serialized_header_reads_back_with_types_and_offsets() -> None:
    md = {
        "general.architecture": "llama",
        "llama.block_count": 2,
        "llama.rope.freq_base": 10000.0,
        "llama.attention.head_count_kv": (2, 0),
        "general.name": "x",
        "flag": True,
    }
    rows = [("a.weight", (64, 3), 1, 64 * 3 * 2), ("b.weight", (64,), 0, 256)]
    data = serialize_header(md, rows)
    assert len(data) % 32 == 0
    header = read_header_from(data, len(data) + 1024)
    assert header.metadata["llama.attention.head_count_kv"] == (2, 0)
    assert header.metadata["llama.rope.freq_base"] == 10000.0
    assert [(t.name, t.offset - header.data_offset) for t in header.tensors] == [
        ("a.weight", 0),
        ("b.weight", 384),  # 384 bytes, already a multiple of 32
    ]


def read_header_from(data: bytes, size: int):  # type: ignore[no-untyped-def]
    from app.model.gguf_reader import read_header_bytes

    return read_header_bytes(data, size, "test")


def test_catalog_standin_uses_the_no_vocab_tokenizer() -> None:
    header = catalog_header("qwen3-8b")
    rows = [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in header.tensors]
    data, size = catalog_prefix(header.metadata, rows)
    back = read_header_from(data, size)
    assert back.metadata["tokenizer.ggml.model"] == "no_vocab"
    assert back.metadata["qwen3.vocab_size"] == 151936
    assert size == len(data) + sum(-(-t.n_bytes // 32) * 32 for t in header.tensors)
    assert model_spec(back).weights_bytes == model_spec(header).weights_bytes


def test_simulated_quant_standin_keeps_metadata_and_rewrites_tensors(
    smollm_path: Path, tmp_path: Path
) -> None:
    spec = model_spec(read_model(smollm_path))
    quant = simulate_quant(spec, "Q8_0").spec
    prefix, _ = file_prefix(smollm_path)
    header = read_header(smollm_path)
    rows = [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in quant.tensors]
    data, size = requantized_prefix(prefix, header, rows, file_type=quant.file_type)
    kept, old = data[: header.metadata_end], prefix[: header.metadata_end]
    assert len(kept) == len(old)
    assert sum(a != b for a, b in zip(kept, old, strict=True)) == 1  # general.file_type 3 -> 7
    back = read_header_from(data, size)
    assert back.metadata["general.file_type"] == quant.file_type
    assert model_spec(back).weights_bytes == quant.weights_bytes
    stand_in = write_model_standin(quant, folder=tmp_path)
    assert model_spec(read_model(stand_in.path)).weights_bytes == quant.weights_bytes


def test_engine_target_is_the_file_itself_unless_it_differs(
    smollm_path: Path, tmp_path: Path
) -> None:
    spec = model_spec(read_model(smollm_path))
    assert engine_target(spec, folder=tmp_path).stand_in is None
    quant = simulate_quant(spec, "Q4_0").spec
    target = engine_target(quant, folder=tmp_path)
    assert target.stand_in is not None
    assert target.path.parent == tmp_path
    catalog = engine_target(model_spec(catalog_header("llama-3.1-8b")), folder=tmp_path)
    assert catalog.stand_in is not None
    assert catalog.stand_in.file_bytes > 14 * 1024**3  # F16 8B, on disk only the header
    assert catalog.stand_in.disk_bytes < 4 * MIB


def test_split_model_gets_one_standin_per_shard(split_shards: list[Path], tmp_path: Path) -> None:
    spec = model_spec(read_model(split_shards[0]))
    stand_in = write_model_standin(spec, folder=tmp_path)
    assert len(stand_in.paths) == len(split_shards)
    assert [p.name[-19:] for p in stand_in.paths] == [s.name[-19:] for s in split_shards]
    assert model_spec(read_model(stand_in.path)).weights_bytes == spec.weights_bytes


def test_zoo_model_without_gguf_py_names_still_writes(zoo_dir: Path, tmp_path: Path) -> None:
    path = write_model("deepseek32", zoo_dir)
    prefix, size = file_prefix(path)
    stand_in = write_standin(prefix, size, key="zoo", folder=tmp_path)
    assert os.path.getsize(stand_in.path) == size
    assert struct.unpack_from("<I", stand_in.path.read_bytes(), 4)[0] == 3  # GGUF v3
