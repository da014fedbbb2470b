"""Tests of app.model.gguf_reader: real models, gguf-py round trips, split models, hostile bytes.

References are gguf-py's own GGUFWriter (to write files) and GGUFReader (to read them back
independently); hand-built bytes (``build_gguf``) cover what no well-behaved writer emits.
"""

from __future__ import annotations

import io
import os
import pickle
import re
import struct
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from gguf import GGMLQuantizationType, GGUFReader, GGUFValueType, GGUFWriter

from app.errors import (
    GGUFError,
    InvalidMetadataError,
    InvalidTensorDataError,
    LimitExceededError,
    ModelFileNotFoundError,
    NotGGUFError,
    SplitModelError,
    TruncatedError,
    UnknownTensorTypeError,
    UnknownValueTypeError,
    UnsupportedVersionError,
)
from app.model.gguf_reader import Header, LazyArray, TensorInfo, read_header, read_model

VT = GGUFValueType
QT = GGMLQuantizationType

# --------------------------------------------------------------------------- byte builder

_SCALAR_FORMATS = {
    VT.UINT8: "B",
    VT.INT8: "b",
    VT.UINT16: "H",
    VT.INT16: "h",
    VT.UINT32: "I",
    VT.INT32: "i",
    VT.FLOAT32: "f",
    VT.BOOL: "?",
    VT.UINT64: "Q",
    VT.INT64: "q",
    VT.FLOAT64: "d",
}


@dataclass(frozen=True)
class Str:
    """A string for build_gguf whose stored length may lie."""

    raw: bytes
    length: int


@dataclass(frozen=True)
class Arr:
    """An array value for build_gguf; ``count`` overrides the stored item count."""

    item_type: int
    items: Sequence[Any] = ()
    count: int | None = None


def enc_str(value: str | bytes | Str) -> bytes:
    """Encode a GGUF string (u64 length + bytes); a Str stores its own length."""
    if isinstance(value, Str):
        return struct.pack("<Q", value.length) + value.raw
    raw = value.encode() if isinstance(value, str) else value
    return struct.pack("<Q", len(raw)) + raw


def enc_value(value_type: int, value: Any) -> bytes:
    """Encode a metadata value of ``value_type`` (without the type code); None: no bytes."""
    if value is None:
        return b""
    if value_type in _SCALAR_FORMATS:
        return struct.pack("<" + _SCALAR_FORMATS[VT(value_type)], value)
    if value_type == VT.STRING:
        return enc_str(value)
    assert isinstance(value, Arr), "an ARRAY value must be an Arr"
    count = len(value.items) if value.count is None else value.count
    head = struct.pack("<IQ", value.item_type, count)
    return head + b"".join(enc_value(value.item_type, item) for item in value.items)


def build_gguf(
    kvs: Sequence[tuple[str | bytes | Str, int, Any]] = (),
    tensors: Sequence[tuple[str | bytes | Str, Sequence[int], int, int]] = (),
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    alignment: int = 32,
    data_bytes: int | None = None,
) -> bytes:
    """Build GGUF bytes: ``kvs`` as (key, type, value), ``tensors`` as (name, shape ne0
    first, ggml type, relative offset); ``data_bytes`` of zeros follow the padded header
    (default: 4096)."""
    out = bytearray(magic)
    n_tensors = len(tensors) if n_tensors is None else n_tensors
    n_kv = len(kvs) if n_kv is None else n_kv
    out += struct.pack("<IQQ", version, n_tensors, n_kv)
    for key, value_type, value in kvs:
        out += enc_str(key) + struct.pack("<I", value_type) + enc_value(value_type, value)
    for name, shape, ggml_type, offset in tensors:
        out += enc_str(name) + struct.pack("<I", len(shape))
        out += struct.pack(f"<{len(shape)}q", *shape)
        out += struct.pack("<IQ", ggml_type, offset)
    out += bytes(-len(out) % alignment)
    out += bytes(4096 if data_bytes is None else data_bytes)
    return bytes(out)


@contextmanager
def raises_detail(kind: type[GGUFError], pattern: str) -> Iterator[pytest.ExceptionInfo[GGUFError]]:
    """Expect ``kind`` whose reader detail (``err.detail``, not the user's line) matches."""
    with pytest.raises(kind) as info:
        yield info
    assert re.search(pattern, info.value.detail), info.value.detail


def parse(data: bytes, **kwargs: Any) -> Header:
    """Read a header from bytes in memory."""
    return read_header(io.BytesIO(data), name="mem.gguf", **kwargs)


# --------------------------------------------------------------------------- real models


def _reference_fields(reader: GGUFReader) -> dict[str, Any]:
    """Return GGUFReader's metadata as plain Python values (arrays as lists)."""
    return {k: f.contents() for k, f in reader.fields.items() if not k.startswith("GGUF.")}


def _materialise(value: object, source: Path) -> object:
    """Return ``value`` with LazyArrays read, arrays as lists (GGUFReader's shape)."""
    if isinstance(value, LazyArray):
        return list(value.read(source))
    if isinstance(value, tuple):
        return list(value)
    return value


@pytest.fixture(scope="module")
def smollm_reference(smollm_path: Path) -> GGUFReader:
    """Return gguf-py's own reading of SmolLM2 (about 3 s, so once per module)."""
    return GGUFReader(smollm_path)


def test_smollm_matches_gguf_reader(smollm_path: Path, smollm_reference: GGUFReader) -> None:
    header = read_header(smollm_path)
    ref = smollm_reference

    assert header.path == str(smollm_path)
    assert header.version == 3
    assert header.file_size == smollm_path.stat().st_size
    expected = _reference_fields(ref)
    assert list(header.metadata) == list(expected)
    for key, want in expected.items():
        got = _materialise(header.metadata[key], smollm_path)
        assert got == want, key  # floats too: both sides widen the same float32
    assert isinstance(header.metadata["tokenizer.ggml.tokens"], LazyArray)
    assert isinstance(header.metadata["tokenizer.ggml.merges"], LazyArray)

    assert len(header.tensors) == len(ref.tensors) == 272
    for ours, theirs in zip(header.tensors, ref.tensors, strict=True):
        assert ours.name == theirs.name
        assert ours.shape == tuple(int(d) for d in theirs.shape)
        assert ours.ggml_type == theirs.tensor_type
        assert ours.type_name == theirs.tensor_type.name
        assert ours.offset == theirs.data_offset
        assert ours.n_bytes == theirs.n_bytes
        assert ours.n_elements == theirs.n_elements
    assert header.data_offset == min(t.offset for t in header.tensors)


def test_gemma_header_is_read_with_its_vocabulary_left_lazy(gemma_path: Path) -> None:
    # Golden numbers from gguf.GGUFReader (22 s on this file, so not rerun here).
    header = read_header(gemma_path)
    assert header.version == 3
    assert len(header.metadata) == 33
    assert len(header.tensors) == 236
    assert header.data_offset == 6_525_120
    assert header.get_str("general.architecture") == "gemma3"
    assert header.get_int("gemma3.context_length") == 32768
    assert header.get_int("gemma3.block_count") == 18
    assert header.get_int("gemma3.attention.sliding_window") == 512
    assert header.get_float("gemma3.rope.freq_base") == 1e6
    tokens = header.get_array("tokenizer.ggml.tokens")
    assert isinstance(tokens, LazyArray)
    assert (tokens.item_type, tokens.count) == (VT.STRING, 262_144)
    assert tokens.read(gemma_path, 0, 4) == ("<pad>", "<eos>", "<bos>", "<unk>")
    scores = header.get_array("tokenizer.ggml.scores")
    assert isinstance(scores, LazyArray)
    assert scores.byte_length == 4 * 262_144
    embd = next(t for t in header.tensors if t.name == "token_embd.weight")
    assert (embd.shape, embd.type_name, embd.n_bytes) == ((640, 262_144), "Q8_0", 178_257_920)
    # The tensors tile the data section: each starts where the previous one ends, padded.
    ends = 0
    for tensor in sorted(header.tensors, key=lambda t: t.offset):
        assert tensor.offset == header.data_offset + ends
        ends += -(-tensor.n_bytes // header.alignment) * header.alignment
    assert header.data_offset + ends == header.file_size == gemma_path.stat().st_size


def test_real_models_open_as_one_shard_models(gemma_path: Path, smollm_path: Path) -> None:
    for path in (gemma_path, smollm_path):
        model = read_model(path)
        assert model.path == str(path)
        assert len(model.shards) == 1
        assert model.metadata is model.header.metadata
        assert model.tensors == model.shards[0].tensors
        assert model.total_bytes == sum(t.n_bytes for t in model.tensors)


# --------------------------------------------------------------------------- round trips

SCALARS: dict[str, tuple[VT, Any]] = {
    "t.u8": (VT.UINT8, 255),
    "t.i8": (VT.INT8, -128),
    "t.u16": (VT.UINT16, 65535),
    "t.i16": (VT.INT16, -32768),
    "t.u32": (VT.UINT32, 2**32 - 1),
    "t.i32": (VT.INT32, -(2**31)),
    "t.f32": (VT.FLOAT32, -2.25),
    "t.bool": (VT.BOOL, True),
    "t.str": (VT.STRING, "héllo ✓ 🦙"),
    "t.u64": (VT.UINT64, 2**64 - 1),
    "t.i64": (VT.INT64, -(2**63)),
    "t.f64": (VT.FLOAT64, 0.1),
}
ARRAYS: dict[str, tuple[VT, list[Any]]] = {
    "a.u8": (VT.UINT8, [0, 1, 255]),
    "a.i8": (VT.INT8, [-1, 2]),
    "a.u16": (VT.UINT16, [7]),
    "a.i16": (VT.INT16, [-7, 7]),
    "a.u32": (VT.UINT32, [1, 2, 3]),
    "a.i32": (VT.INT32, [-3]),
    "a.f32": (VT.FLOAT32, [0.5, -1.0]),
    "a.bool": (VT.BOOL, [True, False, True]),
    "a.str": (VT.STRING, ["", "ä", "two words"]),
    "a.u64": (VT.UINT64, [2**64 - 1]),
    "a.i64": (VT.INT64, [-(2**63), 5]),
    "a.f64": (VT.FLOAT64, [1e300, -0.0]),
    "big.u16": (VT.UINT16, list(range(2000))),
    "big.f32": (VT.FLOAT32, [i / 4 for i in range(1500)]),
    "big.str": (VT.STRING, [f"tok{i}" * (i % 7) for i in range(3000)]),
}
NESTED: dict[str, list[Any]] = {
    "n.int": [[1, 2], [3]],
    "n.str": [["a", "b"], ["c"]],
    "n.deep": [[[1.5]], [[2.5, 3.5]]],
    "n.big": [[i, i + 1] for i in range(1100)],
}


def _as_tuple(value: Any) -> Any:
    """Turn nested lists into nested tuples (how the reader returns arrays)."""
    return tuple(_as_tuple(v) for v in value) if isinstance(value, list) else value


def _write_every_type(path: Path, *, big: bool = True) -> None:
    """Write a GGUF with every value type, nested arrays, four tensors and (if ``big``)
    arrays of more than 1024 items."""
    writer = GGUFWriter(path, "llama")
    for key, (value_type, value) in SCALARS.items():
        writer.add_key_value(key, value, value_type)
    for key, (item_type, items) in ARRAYS.items():
        if big or len(items) <= 1024:
            writer.add_key_value(key, items, VT.ARRAY, sub_type=item_type)
    for key, items in NESTED.items():
        if big or len(items) <= 1024:
            writer.add_array(key, items)
    writer.add_tensor("f32", np.arange(64, dtype=np.float32).reshape(2, 32))
    writer.add_tensor("f16.3d", np.ones((2, 3, 4), dtype=np.float16))
    writer.add_tensor("i8.vec", np.ones(5, dtype=np.int8))
    # 4 rows of two Q4_0 blocks (18 bytes each): shape (ne0=64, ne1=4).
    writer.add_tensor("q4", np.zeros((4, 36), dtype=np.uint8), raw_dtype=QT.Q4_0)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()


@pytest.fixture(scope="module")
def every_type_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("gguf") / "every-type.gguf"
    _write_every_type(path)
    return path


def test_every_value_type_round_trips(every_type_file: Path) -> None:
    header = read_header(every_type_file)
    meta = header.metadata
    assert meta["general.architecture"] == "llama"
    for key, (_, value) in SCALARS.items():
        assert meta[key] == value, key
        assert type(meta[key]) is type(value), key
    assert meta["t.f64"] == 0.1
    for key, (item_type, items) in ARRAYS.items():
        value = meta[key]
        if len(items) > 1024:
            assert isinstance(value, LazyArray), key
            assert (value.item_type, value.count) == (item_type, len(items))
            assert value.read(every_type_file) == tuple(items), key
        else:
            assert value == tuple(items), key
    for key, items in NESTED.items():
        if len(items) > 1024:
            lazy = meta[key]
            assert isinstance(lazy, LazyArray)
            assert (lazy.item_type, lazy.count) == (VT.ARRAY, len(items))
            assert lazy.read(every_type_file) == _as_tuple(items)
            assert lazy.read(every_type_file, 1098, 5000) == ((1098, 1099), (1099, 1100))
        else:
            assert meta[key] == _as_tuple(items), key


def test_every_value_type_matches_gguf_reader(every_type_file: Path) -> None:
    header = read_header(every_type_file, max_inline_array=0)  # everything lazy
    ref = GGUFReader(every_type_file)
    expected = _reference_fields(ref)
    assert list(header.metadata) == list(expected)
    for key, want in expected.items():
        if key.startswith("n."):
            continue  # GGUFReader.contents() cannot read nested arrays
        got = _materialise(header.metadata[key], every_type_file)
        assert got == want, key
    for ours, theirs in zip(header.tensors, ref.tensors, strict=True):
        assert (ours.name, ours.shape, ours.ggml_type) == (
            theirs.name,
            tuple(int(d) for d in theirs.shape),
            theirs.tensor_type,
        )
        assert (ours.offset, ours.n_bytes) == (theirs.data_offset, theirs.n_bytes)


def test_tensor_infos_of_a_written_file(every_type_file: Path) -> None:
    header = read_header(every_type_file)
    by_name = {t.name: t for t in header.tensors}
    assert by_name["f32"] == TensorInfo("f32", (32, 2), QT.F32, "F32", header.data_offset, 256)
    assert by_name["f16.3d"].shape == (4, 3, 2)
    assert by_name["f16.3d"].n_bytes == 48
    assert by_name["i8.vec"].n_elements == 5
    q4 = by_name["q4"]
    assert (q4.shape, q4.type_name, q4.n_bytes, q4.n_elements) == ((64, 4), "Q4_0", 144, 256)
    assert all(t.offset % header.alignment == 0 for t in header.tensors)
    assert header.alignment == 32
    assert header.data_offset % 32 == 0


def test_lazy_array_read_slices_and_clamps(every_type_file: Path) -> None:
    header = read_header(every_type_file, max_inline_array=1)
    strings = header.get_array("big.str")
    assert isinstance(strings, LazyArray)
    items = ARRAYS["big.str"][1]
    assert strings.read(every_type_file, 10, 13) == tuple(items[10:13])
    assert strings.read(every_type_file, 2990) == tuple(items[2990:])
    assert strings.read(every_type_file, -5, 2) == tuple(items[:2])
    assert strings.read(every_type_file, 2999, 10**9) == (items[-1],)
    assert strings.read(every_type_file, 50, 10) == ()
    assert strings.read(every_type_file, 0, 10, max_items=10) == tuple(items[:10])
    with raises_detail(LimitExceededError, "limit is 10"):
        strings.read(every_type_file, max_items=10)
    floats = header.get_array("a.f64")
    assert isinstance(floats, LazyArray)
    with every_type_file.open("rb") as f:
        f.seek(7)
        assert floats.read(f, 1) == (-0.0,)
        assert f.tell() == 7, "the file position is restored"
    nested = header.get_array("n.deep")
    assert isinstance(nested, LazyArray)
    # Inner arrays obey max_inline_array too.
    inner = nested.read(every_type_file, max_inline_array=0)
    assert all(isinstance(v, LazyArray) for v in inner)


def test_lazy_array_read_refuses_a_changed_file(tmp_path: Path) -> None:
    kvs = [("s", VT.ARRAY, Arr(VT.STRING, ["abc"] * 3))]
    path = tmp_path / "m.gguf"
    path.write_bytes(build_gguf(kvs))
    lazy = read_header(path, max_inline_array=0).get_array("s")
    assert isinstance(lazy, LazyArray)
    # Now the second string claims to be long: the read must stop at the array's extent.
    data = bytearray(path.read_bytes())
    struct.pack_into("<Q", data, lazy.offset + 11, 10**6)
    path.write_bytes(bytes(data))
    with pytest.raises((TruncatedError, LimitExceededError)):
        lazy.read(path)
    data[lazy.offset + 8] = 0xFF  # not UTF-8
    path.write_bytes(bytes(data))
    with pytest.raises(InvalidMetadataError, match="UTF-8"):
        lazy.read(path, 0, 1)


def test_custom_alignment(tmp_path: Path) -> None:
    path = tmp_path / "aligned.gguf"
    writer = GGUFWriter(path, "llama")
    writer.add_custom_alignment(256)
    writer.add_tensor("a", np.ones(3, dtype=np.float32))
    writer.add_tensor("b", np.ones(3, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    header = read_header(path)
    assert header.alignment == 256
    assert header.data_offset % 256 == 0
    assert [t.offset - header.data_offset for t in header.tensors] == [0, 256]


def test_file_objects_paths_and_names(every_type_file: Path) -> None:
    from_path = read_header(every_type_file)
    from_str = read_header(str(every_type_file))
    with every_type_file.open("rb") as f:
        from_file = read_header(f)
        assert f.tell() == 0
    data = every_type_file.read_bytes()
    from_bytes = read_header(io.BytesIO(data))
    assert from_path == from_str
    assert from_file == from_path
    assert from_bytes.path == "<stream>"
    assert from_bytes.metadata == from_path.metadata
    assert from_bytes.tensors == from_path.tensors
    assert read_header(io.BytesIO(data), name="x.gguf").path == "x.gguf"


def test_gguf_embedded_at_an_offset_is_read_from_the_current_position(
    every_type_file: Path,
) -> None:
    # As gguf_init_from_file_ptr: offsets are absolute, alignment relative to the GGUF start.
    plain = read_header(every_type_file)
    stream = io.BytesIO(b"\0" * 100 + every_type_file.read_bytes())
    stream.seek(100)
    header = read_header(stream)
    assert stream.tell() == 100
    assert header.data_offset == plain.data_offset + 100
    assert [t.offset for t in header.tensors] == [t.offset + 100 for t in plain.tensors]
    lazy = header.get_array("big.u16")
    assert isinstance(lazy, LazyArray)
    assert lazy.read(stream, 0, 3) == (0, 1, 2)


class _TrickleReader:
    """A seekable source returning at most 7 bytes per read (like a slow socket)."""

    def __init__(self, data: bytes) -> None:
        self.data = data
        self.position = 0

    def read(self, n: int = -1) -> bytes:
        n = min(n, 7) if n >= 0 else 7
        chunk = self.data[self.position : self.position + n]
        self.position += len(chunk)
        return chunk

    def seek(self, offset: int, whence: int = 0) -> int:
        base = {0: 0, 1: self.position, 2: len(self.data)}[whence]
        self.position = base + offset
        return self.position

    def tell(self) -> int:
        return self.position


class _PipeReader(_TrickleReader):
    """A source that cannot seek or tell (a pipe)."""

    def seek(self, offset: int, whence: int = 0) -> int:
        raise io.UnsupportedOperation("seek")

    def tell(self) -> int:
        raise io.UnsupportedOperation("tell")


def test_short_reads_and_unseekable_sources(every_type_file: Path) -> None:
    data = every_type_file.read_bytes()
    expected = read_header(every_type_file)
    trickled = read_header(_TrickleReader(data), name="t")  # type: ignore[arg-type]
    assert trickled.metadata == expected.metadata
    assert trickled.tensors == expected.tensors
    piped = read_header(_PipeReader(data), name="p", max_inline_array=0)  # type: ignore[arg-type]
    assert piped.file_size is None
    assert piped.tensors == expected.tensors
    with pytest.raises(TruncatedError):
        read_header(_PipeReader(data[:500]), name="p")  # type: ignore[arg-type]


def test_header_and_lazy_array_pickle(every_type_file: Path) -> None:
    # Headers cross process boundaries (runner/ uses spawn).
    header = read_header(every_type_file)
    assert pickle.loads(pickle.dumps(header)) == header


# --------------------------------------------------------------------------- accessors


def test_typed_accessors() -> None:
    header = parse(
        build_gguf(
            [
                ("i", VT.INT32, -4),
                ("u", VT.UINT64, 7),
                ("f", VT.FLOAT32, 0.5),
                ("b", VT.BOOL, False),
                ("s", VT.STRING, "x"),
                ("a", VT.ARRAY, Arr(VT.UINT8, [1, 2])),
            ]
        )
    )
    assert header.get("i") == -4
    assert header.get("missing") is None
    assert header.get("missing", 3) == 3
    assert header.get_int("i") == -4
    assert header.get_int("u") == 7
    assert header.get_int("missing", None) is None
    assert header.get_float("f") == 0.5
    assert header.get_float("u") == 7.0
    assert header.get_bool("b") is False
    assert header.get_str("s") == "x"
    assert header.get_array("a") == (1, 2)
    for getter, key in [
        (header.get_int, "b"),  # a bool is not an integer here
        (header.get_int, "f"),
        (header.get_float, "s"),
        (header.get_bool, "i"),
        (header.get_str, "a"),
        (header.get_array, "s"),
        (header.get_int, "missing"),
    ]:
        with pytest.raises(InvalidMetadataError, match=repr(key)):
            getter(key)


# --------------------------------------------------------------------------- hostile bytes

KEY = "k"
AFTER_KEY = 24 + 8 + len(KEY)  # the value type code of the first KV pair


def test_not_gguf_and_versions() -> None:
    with raises_detail(NotGGUFError, "not b'GGUF'") as err:
        parse(b"PK\x03\x04" + bytes(100))
    assert err.value.offset == 0
    assert err.value.path == "mem.gguf"
    with pytest.raises(NotGGUFError):
        parse(b"GX")
    with pytest.raises(TruncatedError):
        parse(b"GG")
    with pytest.raises(UnsupportedVersionError, match="v1") as err:
        parse(build_gguf(version=1))
    assert err.value.offset == 4
    with pytest.raises(UnsupportedVersionError, match="big-endian"):
        parse(build_gguf(version=3 << 24))
    for version in (0, 4):
        with pytest.raises(UnsupportedVersionError):
            parse(build_gguf(version=version))
    assert parse(build_gguf(version=2)).version == 2


@pytest.mark.parametrize(
    ("n_tensors", "n_kv"), [(2**60, 0), (0, 2**60), (2**64 - 1, 2**64 - 1), (300, 0)]
)
def test_counts_beyond_the_file_fail_before_looping(n_tensors: int, n_kv: int) -> None:
    with raises_detail(LimitExceededError, "count"):
        parse(build_gguf(n_tensors=n_tensors, n_kv=n_kv, data_bytes=0))


def test_huge_array_and_string_lengths_fail_instantly() -> None:
    kvs = [(KEY, VT.ARRAY, Arr(VT.UINT8, count=2**60))]
    with pytest.raises(LimitExceededError) as err:
        parse(build_gguf(kvs))
    assert err.value.offset == AFTER_KEY + 4 + 4  # the count field
    for item_type in (VT.STRING, VT.ARRAY, VT.FLOAT64):
        kvs = [(KEY, VT.ARRAY, Arr(item_type, count=2**64 - 1))]
        with pytest.raises(LimitExceededError):
            parse(build_gguf(kvs))
    # Counts the file could hold but gguf.cpp would not (GGUF_MAX_ARRAY_ELEMENTS).
    kvs = [(KEY, VT.ARRAY, Arr(VT.UINT8, count=2**30 + 1))]
    with raises_detail(LimitExceededError, "limit"):
        read_header(_PipeReader(build_gguf(kvs)), name="p")  # type: ignore[arg-type]
    # A string length: as a key, a value, an array item, a tensor name.
    huge = struct.pack("<Q", 2**62)
    with pytest.raises(LimitExceededError) as err:
        parse(build_gguf(n_kv=1, data_bytes=0)[:24] + huge + bytes(64))
    assert err.value.offset == 24
    data = build_gguf([(KEY, VT.STRING, "abc")])
    with pytest.raises(LimitExceededError):
        parse(data[: AFTER_KEY + 4] + huge + data[AFTER_KEY + 12 :])
    kvs = [(KEY, VT.ARRAY, Arr(VT.STRING, ["a"] * 2000))]
    data = bytearray(build_gguf(kvs))
    struct.pack_into("<Q", data, AFTER_KEY + 16 + 1500 * 9, 2**40)
    with pytest.raises(LimitExceededError) as err:
        parse(bytes(data))
    assert err.value.offset == AFTER_KEY + 16 + 1500 * 9


def test_unknown_value_types() -> None:
    with raises_detail(UnknownValueTypeError, "13") as err:
        parse(build_gguf([(KEY, 13, None)]))
    assert err.value.offset == AFTER_KEY
    with pytest.raises(UnknownValueTypeError):
        parse(build_gguf([(KEY, VT.ARRAY, Arr(2**32 - 1, count=1))]))
    nested = Arr(VT.ARRAY, [Arr(VT.UINT8, [1]), Arr(99, count=0)])
    with pytest.raises(UnknownValueTypeError):
        parse(build_gguf([(KEY, VT.ARRAY, nested)]))
    with pytest.raises(UnknownValueTypeError):
        parse(build_gguf([(KEY, VT.ARRAY, nested)]), max_inline_array=0)


def test_nesting_depth_is_bounded() -> None:
    value = Arr(VT.UINT8, [1])
    for _ in range(8):
        value = Arr(VT.ARRAY, [value])
    for max_inline in (0, 1024):
        with raises_detail(LimitExceededError, "nested"):
            parse(build_gguf([(KEY, VT.ARRAY, value)]), max_inline_array=max_inline)
    ok = parse(build_gguf([(KEY, VT.ARRAY, value.items[0])]))
    assert ok.metadata[KEY] == ((((((((1,),),),),),),),)


def test_bad_keys_and_strings() -> None:
    with pytest.raises(InvalidMetadataError, match="empty"):
        parse(build_gguf([("", VT.UINT8, 1)]))
    with pytest.raises(InvalidMetadataError, match="duplicate") as err:
        parse(build_gguf([("a", VT.UINT8, 1), ("a", VT.UINT8, 2)]))
    assert err.value.offset == 24 + 8 + 1 + 4 + 1
    with pytest.raises(InvalidMetadataError, match="UTF-8") as err:
        parse(build_gguf([(b"ab\xff", VT.UINT8, 1)]))
    assert err.value.offset == 24 + 8 + 2
    for value in (Arr(VT.STRING, ["ok", b"\xc3"]), Arr(VT.STRING, ["ok", b"\xed\xa0\x80"] * 500)):
        with pytest.raises(InvalidMetadataError, match="UTF-8"):
            parse(build_gguf([(KEY, VT.ARRAY, value)]))
    with pytest.raises(InvalidMetadataError, match="UTF-8"):
        parse(build_gguf([(KEY, VT.STRING, b"\x80")]))
    with raises_detail(InvalidTensorDataError, "UTF-8"):
        parse(build_gguf(tensors=[(b"\xfe", (32,), QT.F32, 0)]))


@pytest.mark.parametrize(
    ("value_type", "value", "message"),
    [
        (VT.UINT64, 32, "UINT32"),
        (VT.UINT32, 0, "power of 2"),
        (VT.UINT32, 48, "power of 2"),
        (VT.STRING, "32", "UINT32"),
    ],
)
def test_bad_alignment(value_type: int, value: Any, message: str) -> None:
    with pytest.raises(InvalidMetadataError, match=message) as err:
        parse(build_gguf([("general.alignment", value_type, value)]))
    assert err.value.offset == 24  # the key


def _tensor_error(
    tensors: Sequence[tuple[str | bytes, Sequence[int], int, int]], **kwargs: Any
) -> GGUFError:
    """Return the error reading a GGUF with these tensors raises."""
    with pytest.raises(GGUFError) as err:
        parse(build_gguf(tensors=tensors, **kwargs))
    return err.value


def test_bad_tensor_infos() -> None:
    def check(error: GGUFError, kind: type[GGUFError], text: str) -> None:
        assert type(error) is kind, error
        assert text in error.detail

    f32 = QT.F32
    check(_tensor_error([("a", (1, 1, 1, 1, 1), f32, 0)]), InvalidTensorDataError, "5 dim")
    check(_tensor_error([("a", (-1, 1), f32, 0)]), InvalidTensorDataError, "negative")
    big = 2**62
    check(_tensor_error([("a", (big, big), f32, 0)]), InvalidTensorDataError, "overflow")
    check(_tensor_error([("a", (4,), 4, 0)]), UnknownTensorTypeError, "type 4")
    check(_tensor_error([("a", (4,), 2**32 - 1, 0)]), UnknownTensorTypeError, "unknown")
    check(_tensor_error([("a", (48,), QT.Q4_0, 0)]), InvalidTensorDataError, "block size 32")
    check(_tensor_error([("a", (), QT.Q4_K, 0)]), InvalidTensorDataError, "block size 256")
    check(_tensor_error([("x" * 64, (4,), f32, 0)]), InvalidTensorDataError, "longer than 63")
    dup = [("a", (4,), f32, 0), ("a", (4,), f32, 32)]
    check(_tensor_error(dup), InvalidTensorDataError, "duplicate tensor name")
    error = _tensor_error([("a", (4,), f32, 16)])
    check(error, InvalidTensorDataError, "not a multiple of the alignment 32")
    assert error.offset == 24 + 8 + 1 + 4 + 8 + 4
    overlap = [("a", (64,), f32, 0), ("b", (8,), f32, 224), ("c", (4,), f32, 96)]
    check(_tensor_error(overlap), InvalidTensorDataError, "'c' data overlaps tensor 'a'")
    beyond = [("a", (1024,), f32, 0)]
    check(_tensor_error(beyond, data_bytes=4095), InvalidTensorDataError, "past the end")
    unpadded = _tensor_error([("a", (4,), f32, 0)], data_bytes=0, alignment=1)
    check(unpadded, TruncatedError, "padding")


def test_valid_edge_tensors() -> None:
    # Zero-dimensional (one element), empty tensors (share offsets freely), an empty name.
    header = parse(
        build_gguf(
            tensors=[
                ("scalar", (), QT.F32, 0),
                ("empty", (0, 5), QT.Q8_0, 0),
                ("", (32,), QT.F32, 32),
                ("x" * 63, (2,), QT.I8, 2**12 - 32),
            ],
        )
    )
    scalar, empty, unnamed, long = header.tensors
    assert (scalar.shape, scalar.n_elements, scalar.n_bytes) == ((), 1, 4)
    assert (empty.n_elements, empty.n_bytes) == (0, 0)
    assert unnamed.name == ""
    assert long.offset + long.n_bytes <= (header.file_size or 0)


def test_errors_name_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "bad.gguf"
    path.write_bytes(build_gguf([(KEY, VT.ARRAY, Arr(VT.UINT8, count=2**60))]))
    with pytest.raises(LimitExceededError) as err:
        read_header(path)
    assert err.value.path == str(path)
    assert err.value.offset == AFTER_KEY + 8
    assert str(err.value).startswith(f"{path}: ")
    assert err.value.detail.startswith(f"at byte {AFTER_KEY + 8}: ")


# --------------------------------------------------------------------------- truncation


def _assert_truncations_fail(data: bytes, cuts: range) -> int:
    """Read ``data[:cut]`` for each cut; each must raise TruncatedError or
    LimitExceededError. Return the number of cuts tried."""
    n = 0
    for cut in cuts:
        with pytest.raises((TruncatedError, LimitExceededError)):
            read_header(io.BytesIO(data[:cut]), max_inline_array=4)
        n += 1
    return n


def test_real_header_truncated_at_every_offset(smollm_path: Path) -> None:
    header = read_header(smollm_path)
    with smollm_path.open("rb") as f:
        data = f.read(header.data_offset)
    merges = header.get_array("tokenizer.ggml.merges")
    assert isinstance(merges, LazyArray)
    infos = merges.offset + merges.byte_length  # the last KV pair; tensor infos follow
    # Every offset of the first 8 KiB (all KV pairs before the vocabulary, and its first
    # tokens), then strides through the 1.7 MB of vocabulary and merges and through the
    # tensor infos, and the last bytes: each read there skips 98k strings, so doing every
    # offset would take hours.
    dense = 8 * 1024
    n = _assert_truncations_fail(data, range(dense))
    n += _assert_truncations_fail(data, range(dense, infos, 32_771))
    n += _assert_truncations_fail(data, range(infos, len(data), 211))
    n += _assert_truncations_fail(data, range(len(data) - 8, len(data)))
    assert n > dense + 100
    # The whole header without the tensor data: the header parses, the data is missing.
    with raises_detail(InvalidTensorDataError, "past the end"):
        read_header(io.BytesIO(data))


def test_small_file_truncated_at_every_offset(tmp_path: Path) -> None:
    path = tmp_path / "small.gguf"
    _write_every_type(path, big=False)
    data = path.read_bytes()
    header = read_header(path)
    data_end = max(t.offset + t.n_bytes for t in header.tensors)
    assert data_end < len(data), "gguf-py pads after the last tensor"
    for cut in range(len(data)):
        # Alternate between materialising every array and leaving all of them lazy.
        max_inline = 1024 if cut % 2 else 0
        stream = io.BytesIO(data[:cut])
        if cut < header.data_offset:  # inside the header or the padding after it
            with pytest.raises((TruncatedError, LimitExceededError)):
                read_header(stream, max_inline_array=max_inline)
        elif cut < data_end:
            with raises_detail(InvalidTensorDataError, "past the end"):
                read_header(stream, max_inline_array=max_inline)
        else:
            assert read_header(stream, max_inline_array=max_inline).tensors == header.tensors


# --------------------------------------------------------------------------- split models


def _write_split(folder: Path, n_tensors: int = 5) -> list[Path]:
    """Write a 3-shard model with gguf-py's own splitting writer."""
    writer = GGUFWriter(folder / "model.gguf", "llama", split_max_tensors=2)
    writer.add_block_count(3)
    for i in range(n_tensors):
        writer.add_tensor(f"t{i}", np.full(8 + i, i, dtype=np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    paths = sorted(folder.glob("model-*-of-00003.gguf"))
    assert [p.name for p in paths] == [f"model-0000{i}-of-00003.gguf" for i in (1, 2, 3)]
    return paths


def test_split_model_opens_from_any_shard(tmp_path: Path) -> None:
    paths = _write_split(tmp_path)
    models = [read_model(p) for p in paths]
    model = models[0]
    assert all(m == model for m in models)
    assert model.path == str(paths[0])
    assert len(model.shards) == 3
    assert model.metadata["llama.block_count"] == 3
    assert model.metadata["split.tensors.count"] == 5
    assert [(t.name, t.shard) for t in model.tensors] == [
        ("t0", 0),
        ("t1", 0),
        ("t2", 1),
        ("t3", 1),
        ("t4", 2),
    ]
    assert model.total_bytes == 4 * sum(8 + i for i in range(5))
    t4 = model.tensors[-1]
    assert t4.offset == model.shards[2].data_offset


def test_split_model_with_a_missing_shard(tmp_path: Path) -> None:
    paths = _write_split(tmp_path)
    paths[1].unlink()
    paths[2].unlink()
    with pytest.raises(SplitModelError, match=r"model-00002-of-00003\.gguf") as err:
        read_model(paths[0])
    assert "model-00003-of-00003.gguf" in str(err.value)
    with pytest.raises(SplitModelError, match=r"model-00002-of-00003\.gguf"):
        read_model(tmp_path / "model-00001-of-00003.gguf")


def _shard(no: int, count: int, tensors_count: int, names: Sequence[str]) -> bytes:
    kvs = [
        ("split.no", VT.UINT16, no),
        ("split.count", VT.UINT16, count),
        ("split.tensors.count", VT.INT32, tensors_count),
    ]
    return build_gguf(kvs, [(n, (8,), QT.F32, 32 * i) for i, n in enumerate(names)])


@pytest.mark.parametrize(
    ("shards", "message"),
    [
        ([(0, 3, 3, "a"), (1, 4, 3, "b"), (2, 3, 3, "c")], "split.count is 4"),
        ([(0, 3, 3, "a"), (1, 3, 3, "b"), (1, 3, 3, "c")], "split.no is 1, expected 2"),
        ([(0, 3, 4, "a"), (1, 3, 4, "b"), (2, 3, 4, "c")], "split.tensors.count is 4"),
        ([(0, 3, 3, "a"), (1, 3, 3, "b"), (2, 3, 3, "a")], "'a' is also in shard 0"),
    ],
)
def test_mismatched_shards(
    tmp_path: Path, shards: list[tuple[int, int, int, str]], message: str
) -> None:
    for i, (no, count, tensors_count, name) in enumerate(shards):
        path = tmp_path / f"m-{i + 1:05d}-of-00003.gguf"
        path.write_bytes(_shard(no, count, tensors_count, [name]))
    with pytest.raises(SplitModelError, match=message):
        read_model(tmp_path / "m-00001-of-00003.gguf")


def test_shard_with_a_foreign_name(tmp_path: Path) -> None:
    path = tmp_path / "renamed.gguf"
    path.write_bytes(_shard(0, 3, 3, ["a"]))
    with pytest.raises(SplitModelError, match="must be named"):
        read_model(path)
    wrong_no = tmp_path / "m-00002-of-00003.gguf"
    wrong_no.write_bytes(_shard(0, 3, 3, ["a"]))
    with pytest.raises(SplitModelError, match="must be named"):
        read_model(wrong_no)


def test_missing_paths(tmp_path: Path) -> None:
    for reader in (read_model, read_header):
        with pytest.raises(ModelFileNotFoundError, match="no such file"):
            reader(tmp_path / "nope.gguf")
        with pytest.raises(ModelFileNotFoundError, match="not a regular file"):
            reader(tmp_path)


def test_single_file_named_like_a_shard(tmp_path: Path) -> None:
    # Without split keys a shard-like name is just a name (as in llama.cpp).
    path = tmp_path / "x-00001-of-00002.gguf"
    path.write_bytes(build_gguf(tensors=[("a", (8,), QT.F32, 0)]))
    model = read_model(os.fspath(path))
    assert len(model.shards) == 1
    assert model.total_bytes == 32
