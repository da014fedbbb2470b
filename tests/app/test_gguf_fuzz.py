"""Fuzz app.model.gguf_reader: hostile bytes raise GGUFError subclasses only, and never hang.

Two generators, deterministic (derandomized, no example database): 10,000 byte-level
mutations of a small valid GGUF, and 3,000 headers built field by field with hostile counts,
lengths, type codes, shapes and offsets (each costs hypothesis ~60 draws, so fewer of them
keep the pair near a minute on a 2-core machine). A header that parses must be internally
sound, and its lazy arrays must read back.
"""

from __future__ import annotations

import io
import signal
import struct
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from gguf import GGML_QUANT_SIZES, GGUFValueType
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from app.errors import GGUFError, InvalidMetadataError
from app.model.gguf_reader import LazyArray, read_header
from tests.app.test_gguf_reader import Arr, Str, build_gguf

VT = GGUFValueType

FUZZ = settings(
    max_examples=10_000,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
HANG_SECONDS = 10


class HangError(AssertionError):
    """read_header took longer than HANG_SECONDS on one input."""


@contextmanager
def no_hang() -> Iterator[None]:
    """Fail the example if the body runs longer than HANG_SECONDS (POSIX only)."""
    if not hasattr(signal, "setitimer"):
        yield
        return

    def _on_alarm(signum: int, frame: object) -> None:
        raise HangError(f"no result after {HANG_SECONDS} s")

    previous = signal.signal(signal.SIGALRM, _on_alarm)
    signal.setitimer(signal.ITIMER_REAL, HANG_SECONDS)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def check(data: bytes, max_inline: int) -> None:
    """Read ``data``; only GGUFError may escape, and a parsed header must be sound."""
    with no_hang():
        try:
            header = read_header(io.BytesIO(data), name="fuzz", max_inline_array=max_inline)
        except GGUFError:
            return
        assert header.data_offset % header.alignment == 0
        assert header.data_offset <= len(data) or not header.tensors
        end = 0
        for tensor in sorted(header.tensors, key=lambda t: t.offset):
            assert tensor.offset >= header.data_offset
            assert (tensor.offset - header.data_offset) % header.alignment == 0
            assert tensor.offset + tensor.n_bytes <= len(data)
            if tensor.n_bytes:
                assert tensor.offset >= end, "overlapping tensors were accepted"
                end = tensor.offset + tensor.n_bytes
        for value in header.metadata.values():
            if isinstance(value, LazyArray):
                try:
                    items = value.read(io.BytesIO(data), max_inline_array=max_inline)
                except InvalidMetadataError as err:
                    # Skipped strings are not decoded while reading the header.
                    if "UTF-8" not in str(err):
                        raise
                else:
                    assert len(items) == value.count


# --------------------------------------------------------------------------- mutations

BASE = build_gguf(
    [
        ("general.architecture", VT.STRING, "llama"),
        ("u8", VT.UINT8, 7),
        ("i16", VT.INT16, -3),
        ("u32", VT.UINT32, 9),
        ("f32", VT.FLOAT32, 0.5),
        ("b", VT.BOOL, True),
        ("u64", VT.UINT64, 2**40),
        ("i64", VT.INT64, -5),
        ("f64", VT.FLOAT64, 2.5),
        ("general.alignment", VT.UINT32, 32),
        ("tokens", VT.ARRAY, Arr(VT.STRING, ["a", "bc", "", "déf", "g"])),
        ("scores", VT.ARRAY, Arr(VT.FLOAT32, [0.0, 1.0, 2.0, 3.0, 4.0])),
        ("nested", VT.ARRAY, Arr(VT.ARRAY, [Arr(VT.INT32, [1, 2]), Arr(VT.STRING, ["x"])])),
    ],
    [
        ("tok.weight", (32, 2), 0, 0),  # F32, 256 bytes
        ("blk.0.q", (64,), 2, 256),  # Q4_0, 36 bytes
        ("blk.0.k", (256, 1), 12, 320),  # Q4_K, 144 bytes
    ],
    data_bytes=512,
)
INTERESTING_U64 = [
    *(0, 1, 2, 3, 4, 5, 8, 12, 13, 31, 32, 33, 63, 64, 255, 2**16),
    *(2**30, 2**30 + 1, 2**31, 2**32 - 1, 2**32, 2**60, 2**63 - 1, 2**63, 2**64 - 1),
]


@st.composite
def mutated(draw: st.DrawFn) -> bytes:
    """Return BASE with 1 to 6 mutations: bytes, u32/u64 fields, cuts, inserts, deletes.

    The magic and version are left alone (the unit tests cover them), so that the mutations
    reach the fields behind them.
    """
    data = bytearray(BASE)
    for _ in range(draw(st.integers(1, 6))):
        kind = draw(st.sampled_from(["byte", "u32", "u64", "cut", "insert", "delete"]))
        pos = draw(st.integers(8, max(len(data) - 1, 8)))
        if kind == "byte" and pos < len(data):
            data[pos] = draw(st.integers(0, 255))
        elif kind == "u32":
            value = draw(st.sampled_from(INTERESTING_U64).map(lambda v: v % 2**32))
            data[pos : pos + 4] = struct.pack("<I", value)
        elif kind == "u64":
            data[pos : pos + 8] = struct.pack("<Q", draw(st.sampled_from(INTERESTING_U64)))
        elif kind == "cut":
            del data[pos:]
        elif kind == "insert":
            data[pos:pos] = draw(st.binary(min_size=1, max_size=16))
        else:
            del data[pos : pos + draw(st.integers(1, 16))]
    return bytes(data)


@pytest.mark.slow
@FUZZ
@given(data=mutated(), max_inline=st.sampled_from([0, 2, 1024]))
def test_mutated_gguf_raises_only_gguf_errors(data: bytes, max_inline: int) -> None:
    check(data, max_inline)


# --------------------------------------------------------------------------- structures

_SCALAR_VALUES: dict[int, st.SearchStrategy[Any]] = {
    VT.UINT8: st.integers(0, 2**8 - 1),
    VT.INT8: st.integers(-(2**7), 2**7 - 1),
    VT.UINT16: st.integers(0, 2**16 - 1),
    VT.INT16: st.integers(-(2**15), 2**15 - 1),
    VT.UINT32: st.integers(0, 2**32 - 1),
    VT.INT32: st.integers(-(2**31), 2**31 - 1),
    VT.FLOAT32: st.floats(width=32),
    VT.BOOL: st.booleans(),
    VT.UINT64: st.integers(0, 2**64 - 1),
    VT.INT64: st.integers(-(2**63), 2**63 - 1),
    VT.FLOAT64: st.floats(),
}
# Mostly the true count (None), sometimes a hostile one.
count_overrides = st.sampled_from([None] * 24 + INTERESTING_U64)
strings = st.one_of(
    st.text(max_size=12),
    st.binary(max_size=12),  # often not UTF-8
    st.builds(Str, st.binary(max_size=4), st.sampled_from(INTERESTING_U64)),  # lying length
)
value_types = st.sampled_from([*VT, VT.ARRAY, VT.STRING, 13, 2**31, 2**32 - 1])


@st.composite
def values(draw: st.DrawFn, value_type: int, depth: int = 0) -> Any:
    """Return a value for build_gguf's enc_value of ``value_type`` (None: no bytes)."""
    if value_type in _SCALAR_VALUES:
        return draw(_SCALAR_VALUES[value_type])
    if value_type == VT.STRING:
        return draw(strings)
    if value_type != VT.ARRAY:
        return None  # an unknown type code, followed directly by the next field
    item_type = draw(value_types)
    n_items = draw(st.integers(0, 4 if depth < 3 else 0))
    items = [draw(values(item_type, depth + 1)) for _ in range(n_items)]
    if item_type not in _SCALAR_VALUES and item_type not in (VT.STRING, VT.ARRAY):
        items = []
    count = draw(count_overrides)
    return Arr(item_type, items, count)


@st.composite
def kv_pairs(draw: st.DrawFn) -> tuple[Any, int, Any]:
    key = draw(st.one_of(st.sampled_from(["general.alignment", "k", "k2"]), strings))
    value_type = draw(value_types)
    return key, value_type, draw(values(value_type))


# Mostly plausible tensors (known types, rows of whole blocks, aligned offsets inside the
# 4 KiB of data), so that some headers parse and the data checks are reached.
ggml_types = st.sampled_from([int(t) for t in GGML_QUANT_SIZES] + [4, 5, 42, 2**31, 2**32 - 1])
dims = st.sampled_from([0, 1, 2, 3, 256, 512, 2, 1, 1, 33, -1, 2**31, 2**62, 2**63 - 1])
offsets = st.sampled_from([0, 0, 32, 64, 256, 512, 1024, 2048, 4064, 16, 4096, 2**63 - 32])
tensor_infos = st.tuples(
    st.one_of(st.sampled_from(["a", "b", "c", "x" * 64]), strings),
    st.lists(dims, max_size=5),
    ggml_types,
    offsets,
)


@st.composite
def hostile_headers(draw: st.DrawFn) -> bytes:
    """Return a GGUF built field by field, with hostile values mixed in."""
    return build_gguf(
        draw(st.lists(kv_pairs(), max_size=4)),
        draw(st.lists(tensor_infos, max_size=3)),
        version=draw(st.sampled_from([3] * 12 + [2] * 4 + [0, 1, 4, 3 << 24, 2**32 - 1])),
        n_tensors=draw(count_overrides),
        n_kv=draw(count_overrides),
        alignment=draw(st.sampled_from([1, 32])),
        data_bytes=draw(st.sampled_from([0, 31, 4096])),
    )


@pytest.mark.slow
@settings(FUZZ, max_examples=3_000)
@given(data=hostile_headers(), max_inline=st.sampled_from([0, 1024]))
def test_hostile_headers_raise_only_gguf_errors(data: bytes, max_inline: int) -> None:
    check(data, max_inline)
