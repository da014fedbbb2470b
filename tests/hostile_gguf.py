"""Hostile GGUF headers for the parsing-cost tests, written straight as bytes.

Each builder writes a file whose header is as costly as ggtune's limits allow (or claims
more than they allow): the most tensors, the most keys, the most small arrays, the most
strings, the longest string. Zeros written with ``truncate`` keep the big ones sparse.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from pathlib import Path

STRING = 8
ARRAY = 9
UINT8 = 0
FLOAT32 = 6

HEADER = struct.Struct("<4sIQQ")


def _s(raw: bytes) -> bytes:
    return struct.pack("<Q", len(raw)) + raw


def _kv_string(key: bytes, value: bytes) -> bytes:
    return _s(key) + struct.pack("<I", STRING) + _s(value)


def _start(n_tensors: int, n_kv: int) -> bytes:
    return HEADER.pack(b"GGUF", 3, n_tensors, n_kv)


def zero_size_tensors(path: Path, n: int) -> None:
    """``n`` tensors of shape (0,): no data, all of the cost in the infos."""
    out = bytearray(_start(n, 1) + _kv_string(b"general.architecture", b"llama"))
    for i in range(n):
        out += _s(b"t%d" % i) + struct.pack("<Iq", 1, 0) + struct.pack("<IQ", 0, 0)
    out += bytes(-len(out) % 32)
    path.write_bytes(out)


def small_arrays(path: Path, n: int, item_type: int = FLOAT32, items: int = 1024) -> None:
    """``n`` keys, each an array of ``items`` items: each small enough to be a tuple."""
    size = 1 if item_type == UINT8 else 4
    out = bytearray(_start(0, n))
    body = bytes(items * size)
    for i in range(n):
        out += _s(b"k%07d" % i) + struct.pack("<IIQ", ARRAY, item_type, items) + body
    path.write_bytes(out)


def empty_strings(path: Path, n: int) -> None:
    """One array of ``n`` empty strings (sparse: every length is a zero)."""
    key = b"tokenizer.ggml.tokens"
    head = _start(0, 1) + _s(key) + struct.pack("<IIQ", ARRAY, STRING, n)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + 8 * n)


def tiny_string_arrays(path: Path, n: int) -> None:
    """``n`` keys, each an array of 1000 one-byte strings: tuples of many str objects."""
    out = bytearray(_start(0, n))
    body = b"".join(_s(b"a") for _ in range(1000))
    for i in range(n):
        out += _s(b"k%07d" % i) + struct.pack("<IIQ", ARRAY, STRING, 1000) + body
    path.write_bytes(out)


def long_string(path: Path, n_bytes: int) -> None:
    """One string value of ``n_bytes`` bytes (a chat template gone wild)."""
    head = _start(0, 1) + _s(b"tokenizer.chat_template") + struct.pack("<IQ", STRING, n_bytes)
    with path.open("wb") as f:
        f.write(head)
        f.write(b"x" * n_bytes)


Builder = Callable[[Path], None]

WORST: dict[str, Builder] = {
    "65536 zero-size tensors": lambda p: zero_size_tensors(p, 1 << 16),
    "65536 float arrays (past 64 MiB)": lambda p: small_arrays(p, 1 << 16),
    "65536 byte arrays": lambda p: small_arrays(p, 1 << 16, UINT8, 1000),
    "8M empty strings (64 MiB)": lambda p: empty_strings(p, (64 << 20) // 8 - 16),
    "7000 arrays of 1000 one-byte strings": lambda p: tiny_string_arrays(p, 7000),
    "a 60 MiB string": lambda p: long_string(p, 60 << 20),
}
"""Headers as costly as the limits allow, by name."""

AUDIT: dict[str, Builder] = {
    "2M zero-size tensors (78 MiB)": lambda p: zero_size_tensors(p, 2_000_000),
    "100 MiB of small arrays": lambda p: small_arrays(p, 100_000, UINT8, 1024),
    "2^30 empty strings (8 GiB, sparse)": lambda p: empty_strings(p, 1 << 30),
}
"""The review audit's three costly headers (issue 19, finding 10)."""
