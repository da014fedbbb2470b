"""Read the header of a GGUF file fast, and refuse hostile input with typed errors.

A GGUF file (spec: ``docs/gguf.md`` in llama.cpp; reference reader: ``ggml/src/gguf.cpp``
``gguf_init_from_reader``) starts with a header::

    magic "GGUF" | u32 version | u64 n_tensors | u64 n_kv
    n_kv        x (string key, u32 value type, value)
    n_tensors   x (string name, u32 n_dims, n_dims x i64 ne, u32 ggml type, u64 offset)
    padding to general.alignment (default 32), then the tensor data

All integers are little-endian; a string is a u64 byte length and UTF-8 bytes; an array
value is a u32 item type, a u64 count and the items.

:func:`read_header` reads that header through a 1 MiB window and parses it with
``struct.unpack_from``; it never materialises big arrays (a 262k-token vocabulary is skipped by
reading the string lengths only) and returns a :class:`LazyArray` for them instead. It needs
only ``read(n)``, ``seek()`` and ``tell()`` of its source, so an HTTP range reader plugs in.
:func:`read_model` opens a whole model, merging the shards of a split model.

Every count and length is checked against the bytes the rest of the file could hold *before*
anything is allocated or looped over, so a hostile file fails fast with a
:class:`~app.errors.GGUFError` that names the file and the byte offset; a source whose
read fails (permissions, a failing disk) raises :class:`~app.errors.UnreadableFileError`.
A header is also refused past what any real model needs (:data:`MAX_HEADER_BYTES`,
:data:`MAX_TENSORS`, :data:`MAX_METADATA_KEYS`), which bounds the time and memory one
costs: at most ~1 s of CPU and ~2 bytes of memory per header byte on top of ~48 MiB
(tests/app/test_hostile_gguf.py holds the reader to that under resource limits).

Example::

    header = read_header("gemma-3-270m-q4_k_m.gguf")
    header.get_str("general.architecture")         # "gemma3"
    header.get_int("gemma3.context_length")         # 32768
    tokens = header.get_array("tokenizer.ggml.tokens")
    with open(header.path, "rb") as f:
        first = tokens.read(f, 0, 10) if isinstance(tokens, LazyArray) else tokens[:10]
"""

from __future__ import annotations

import dataclasses
import errno
import io
import itertools
import math
import os
import re
import struct
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, BinaryIO, Final, TypeVar, cast, overload

from app.errors import (
    GGUFError,
    HeaderTooLargeError,
    InvalidMetadataError,
    InvalidTensorDataError,
    LimitExceededError,
    ModelFileNotFoundError,
    NotGGUFError,
    SplitModelError,
    TruncatedError,
    UnknownTensorTypeError,
    UnknownValueTypeError,
    UnreadableFileError,
    UnsupportedVersionError,
)
from app.model.ggml import GGML_TYPES, GGUFValueType

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "DEFAULT_ALIGNMENT",
    "Header",
    "LazyArray",
    "ModelFile",
    "TensorInfo",
    "read_header",
    "read_header_bytes",
    "read_model",
]

GGUF_MAGIC: Final = b"GGUF"
SUPPORTED_VERSIONS: Final = (2, 3)
"""v2 moved counts and lengths from u32 to u64; v3 only added big-endian files (refused)."""

DEFAULT_ALIGNMENT: Final = 32
"""Data alignment in bytes when ``general.alignment`` is absent (GGUF_DEFAULT_ALIGNMENT)."""

MAX_STRING_BYTES: Final = 1 << 30
"""Longest string in bytes gguf.cpp accepts (GGUF_MAX_STRING_LENGTH)."""

MAX_ARRAY_ITEMS: Final = 1 << 30
"""Largest array gguf.cpp accepts (GGUF_MAX_ARRAY_ELEMENTS)."""

MAX_ARRAY_DEPTH: Final = 8
"""Deepest nesting of arrays in arrays; gguf.cpp refuses any nesting, gguf-py writes it."""

MAX_TENSOR_DIMS: Final = 4
"""GGML_MAX_DIMS in ggml.h."""

MAX_TENSOR_NAME_BYTES: Final = 63
"""GGML_MAX_NAME (64) less the terminating NUL: gguf.cpp refuses longer tensor names."""

MAX_READ_ITEMS: Final = 1 << 24
"""Most items :meth:`LazyArray.read` returns at once by default (16.7M; a vocabulary is
~262k), so memory stays bounded even for an array of GGUF_MAX_ARRAY_ELEMENTS."""

WINDOW_BYTES: Final = 1 << 20
"""Bytes read from the source at a time; a skip longer than this seeks instead."""

MAX_HEADER_BYTES: Final = 64 << 20
"""Largest header read, from the magic to the end of the tensor infos: 64 MiB. Real
models' headers hold under 20 MiB (Gemma 3's 262k-token vocabulary: 6.5 MB; the big
arrays are skipped, not kept), so this bounds the time and memory a hostile file costs
without refusing any real model; gguf.cpp itself has no such bound."""

MAX_TENSORS: Final = 1 << 16
"""Most tensors in one file (65,536). The largest real models hold about 2,000
(DeepSeek-V3: 1,025 per file; unmerged Mixtral 8x22B: 1,800); each tensor info costs
~0.4 KiB of memory, so this keeps a hostile count of zero-size tensors to ~26 MiB."""

MAX_SHARDS: Final = MAX_TENSORS
"""Most shards of a split model: each shard holds at least one tensor."""

MAX_METADATA_KEYS: Final = 1 << 16
"""Most metadata keys in one file (65,536; real models have under 100)."""

MAX_INLINE_BYTES: Final = 4 << 20
"""Bytes of small arrays kept as tuples per header; arrays after that stay lazy
(:class:`LazyArray`), so a header of many small arrays cannot grow eight-fold in memory.
Real models' small arrays (per-layer counts, patterns) take a few KiB."""
_INT64_MAX: Final = (1 << 63) - 1

# Smallest encoding of one KV pair: u64 key length + a 1-byte key + u32 type + a u8 value; and
# of one tensor info: u64 name length + u32 n_dims + u32 type + u64 offset. Used to refuse
# counts the rest of the file cannot hold before looping over them.
_MIN_KV_BYTES: Final = 8 + 1 + 4 + 1
_MIN_TENSOR_INFO_BYTES: Final = 8 + 4 + 4 + 8

_U32: Final = struct.Struct("<I")
_U64: Final = struct.Struct("<Q")
_ARRAY_HEAD: Final = struct.Struct("<IQ")

# struct format character of each fixed-size GGUF value type (gguf.cpp GGUF_TYPE_SIZE).
_SCALAR_FORMATS: Final[dict[int, str]] = {
    GGUFValueType.UINT8: "B",
    GGUFValueType.INT8: "b",
    GGUFValueType.UINT16: "H",
    GGUFValueType.INT16: "h",
    GGUFValueType.UINT32: "I",
    GGUFValueType.INT32: "i",
    GGUFValueType.FLOAT32: "f",
    GGUFValueType.BOOL: "?",
    GGUFValueType.UINT64: "Q",
    GGUFValueType.INT64: "q",
    GGUFValueType.FLOAT64: "d",
}
_SCALAR_STRUCTS: Final[dict[int, struct.Struct]] = {
    code: struct.Struct("<" + fmt) for code, fmt in _SCALAR_FORMATS.items()
}
_STRING: Final = int(GGUFValueType.STRING)
_ARRAY: Final = int(GGUFValueType.ARRAY)

# Smallest encoding of one array item of each type, in bytes: a string is at least its u64
# length, a nested array at least its u32 item type and u64 count.
_MIN_ITEM_BYTES: Final[dict[int, int]] = {
    **{code: s.size for code, s in _SCALAR_STRUCTS.items()},
    _STRING: 8,
    _ARRAY: 12,
}

_SPLIT_NAME: Final = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5,})-of-(?P<count>\d{5,})\.gguf$")
"""Shard file name, as llama.cpp's llama_split_path writes it ("%s-%05d-of-%05d.gguf")."""

# Name, block size (elements) and block size (bytes) of each ggml type the pinned ggml knows.
_GGML_TYPES: Final[dict[int, tuple[str, int, int]]] = {
    t.id: (t.name, t.block_size, t.type_size) for t in GGML_TYPES.values()
}

_KEY_ALIGNMENT: Final = "general.alignment"
_KEY_SPLIT_NO: Final = "split.no"
_KEY_SPLIT_COUNT: Final = "split.count"
_KEY_SPLIT_TENSORS: Final = "split.tensors.count"

_T = TypeVar("_T")


def _value_type_name(code: int) -> str:
    """Name a GGUF value type code for messages ("UINT32", or the number if unknown)."""
    try:
        return GGUFValueType(code).name
    except ValueError:
        return str(code)


# --------------------------------------------------------------------------- public types


@dataclass(frozen=True, slots=True)
class TensorInfo:
    """Where one tensor lies and how big it is.

    ``shape`` is in ggml order (``ne0``, the contiguous row length, first) exactly as stored;
    ``offset`` is the absolute byte offset of its data in the shard file, ``n_bytes`` its
    exact size in bytes; ``shard`` the index of the file in a split model (0 otherwise).
    """

    name: str
    shape: tuple[int, ...]
    ggml_type: int
    type_name: str
    offset: int
    n_bytes: int
    shard: int = 0

    @property
    def n_elements(self) -> int:
        """Return the number of elements (1 for a zero-dimensional tensor)."""
        return math.prod(self.shape)


@dataclass(frozen=True, slots=True)
class LazyArray:
    """A metadata array too big to materialise while reading the header.

    ``item_type`` is the GGUF value type code of the items (``gguf.GGUFValueType``), ``count``
    the number of items, ``offset`` the absolute byte offset of the first item and
    ``byte_length`` the bytes all items take. Call :meth:`read` to get the items.
    """

    item_type: int
    count: int
    offset: int
    byte_length: int

    def read(
        self,
        source: str | os.PathLike[str] | BinaryIO,
        start: int = 0,
        stop: int | None = None,
        *,
        max_items: int = MAX_READ_ITEMS,
        max_inline_array: int = 1024,
    ) -> tuple[object, ...]:
        """Read items ``[start, stop)`` (clamped to ``[0, count]``) from ``source``.

        ``source`` is the file the header was read from (a path or a seekable binary file
        object, whose position is restored). Reading never goes past ``offset +
        byte_length``; a slice of more than ``max_items`` items raises
        LimitExceededError (read big arrays in slices); nested arrays longer than
        ``max_inline_array`` items come back as :class:`LazyArray`. Raise
        :class:`~app.errors.GGUFError` if the bytes are no longer what the header described.

        Example::

            tokens.read("model.gguf", 0, 3)  # ('<pad>', '<eos>', '<bos>')
        """
        assert max_inline_array >= 0, "max_inline_array must be >= 0"
        first = min(max(start, 0), self.count)
        last = self.count if stop is None else min(max(stop, first), self.count)
        with _open_source(source, None) as (file, name):
            if self.item_type not in _MIN_ITEM_BYTES:
                raise UnknownValueTypeError(name, self.offset, f"item type {self.item_type}")
            if last - first > max_items:
                raise LimitExceededError(
                    name,
                    self.offset,
                    f"reading {last - first} array items at once; the limit is {max_items}",
                )
            cursor = _Cursor.at(file, name, self.offset)
            # Bound the cursor to the array: a changed file cannot make us read past it.
            end = self.offset + self.byte_length
            cursor.end = end if cursor.end is None else min(cursor.end, end)
            parser = _Parser(cursor, max_inline_array)
            size = _SCALAR_STRUCTS[self.item_type].size if self.item_type in _SCALAR_STRUCTS else 0
            if size:
                cursor.skip(first * size, "array items")
                return parser.scalars(self.item_type, last - first)
            parser.skip_items(self.item_type, first, 1, "")
            return parser.items(self.item_type, last - first, 1, "")


class _Missing:
    """Marker type of "no default given" for the typed accessors."""


_MISSING: Final = _Missing()


@dataclass(frozen=True, slots=True)
class Header:
    """What :func:`read_header` found in one GGUF file.

    ``path`` names the file (or the file object), ``version`` is the GGUF version, the data
    section starts at byte ``data_offset`` (a multiple of ``alignment`` bytes from the start
    of the GGUF), ``file_size`` is in bytes (``None`` if the source could not tell).
    ``metadata`` maps each key to an ``int``, ``float``, ``bool``, ``str``, a ``tuple`` of
    those (arrays up to ``max_inline_array`` items, nested arrays as nested tuples), or a
    :class:`LazyArray`.
    """

    path: str
    version: int
    alignment: int
    data_offset: int
    file_size: int | None
    metadata: Mapping[str, object]
    tensors: tuple[TensorInfo, ...]
    metadata_end: int = 0
    """Where the tensor infos start, in bytes from the start of the GGUF (the header,
    counts and metadata come before): a stand-in with other tensor types keeps the bytes
    before it (app/model/standin.py)."""
    value_types: Mapping[str, tuple[int, int]] = dataclasses.field(default_factory=dict)
    """Each key's GGUF value type code and, for an array, its item type (-1 otherwise).
    llama.cpp reads a scalar key as one exact type and refuses any other
    (src/llama-model-loader.cpp, ``GGUFMeta::GKV::get_kv``), so the spec checks them."""

    def get(self, key: str, default: object = None) -> object:
        """Return the value of ``key``, or ``default`` when it is absent."""
        return self.metadata.get(key, default)

    @overload
    def get_int(self, key: str) -> int: ...
    @overload
    def get_int(self, key: str, default: _T) -> int | _T: ...
    def get_int(self, key: str, default: object = _MISSING) -> object:
        """Return integer ``key``; raise InvalidMetadataError if missing (no default) or not one."""
        value = self._lookup(key, default)
        if value is default:
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return value
        raise self._wrong_type(key, value, "an integer")

    @overload
    def get_float(self, key: str) -> float: ...
    @overload
    def get_float(self, key: str, default: _T) -> float | _T: ...
    def get_float(self, key: str, default: object = _MISSING) -> object:
        """Return number ``key`` as a float (integers are accepted).

        Raise InvalidMetadataError if it is missing (and no default is given) or not a number.
        """
        value = self._lookup(key, default)
        if value is default:
            return value
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
        raise self._wrong_type(key, value, "a number")

    @overload
    def get_bool(self, key: str) -> bool: ...
    @overload
    def get_bool(self, key: str, default: _T) -> bool | _T: ...
    def get_bool(self, key: str, default: object = _MISSING) -> object:
        """Return bool ``key``; raise InvalidMetadataError if missing (no default) or not one."""
        value = self._lookup(key, default)
        if value is default or isinstance(value, bool):
            return value
        raise self._wrong_type(key, value, "a bool")

    @overload
    def get_str(self, key: str) -> str: ...
    @overload
    def get_str(self, key: str, default: _T) -> str | _T: ...
    def get_str(self, key: str, default: object = _MISSING) -> object:
        """Return string ``key``; raise InvalidMetadataError if missing (no default) or not one."""
        value = self._lookup(key, default)
        if value is default or isinstance(value, str):
            return value
        raise self._wrong_type(key, value, "a string")

    @overload
    def get_array(self, key: str) -> tuple[object, ...] | LazyArray: ...
    @overload
    def get_array(self, key: str, default: _T) -> tuple[object, ...] | LazyArray | _T: ...
    def get_array(self, key: str, default: object = _MISSING) -> object:
        """Return array ``key``: a tuple, or a LazyArray when it is big.

        Raise InvalidMetadataError if it is missing (and no default is given) or not an array.
        """
        value = self._lookup(key, default)
        if value is default or isinstance(value, tuple | LazyArray):
            return value
        raise self._wrong_type(key, value, "an array")

    def _lookup(self, key: str, default: object) -> object:
        """Return the value of ``key``, ``default`` if absent, or raise if no default."""
        if key in self.metadata:
            return self.metadata[key]
        if isinstance(default, _Missing):
            raise InvalidMetadataError(self.path, None, f"metadata key {key!r} is missing")
        return default

    def _wrong_type(self, key: str, value: object, wanted: str) -> InvalidMetadataError:
        """Build the error for a value of the wrong type."""
        return InvalidMetadataError(
            self.path, None, f"metadata key {key!r} should be {wanted}, not {type(value).__name__}"
        )


@dataclass(frozen=True, slots=True)
class ModelFile:
    """A whole model: one GGUF file, or all shards of a split model.

    ``path`` is the first shard's path; ``metadata`` comes from shard 0 (the only one that
    carries the model's keys); ``tensors`` lists the tensors of all shards in shard order,
    each with its ``shard`` index; ``total_bytes`` is their data size in bytes.
    """

    path: str
    shards: tuple[Header, ...]
    metadata: Mapping[str, object]
    tensors: tuple[TensorInfo, ...]
    total_bytes: int

    @property
    def header(self) -> Header:
        """Return shard 0's header (its typed accessors read the model's metadata)."""
        return self.shards[0]

    @property
    def value_types(self) -> Mapping[str, tuple[int, int]]:
        """Return shard 0's value types (see :attr:`Header.value_types`)."""
        return self.shards[0].value_types


# --------------------------------------------------------------------------- reading


def read_header(
    source: str | os.PathLike[str] | BinaryIO,
    *,
    name: str | None = None,
    max_inline_array: int = 1024,
) -> Header:
    """Read the GGUF header of ``source`` (a path or a seekable binary file object).

    A file object is read from its current position (where the GGUF starts, as in
    gguf.cpp's ``gguf_init_from_file_ptr``), using only ``read``, ``seek`` and ``tell``; its
    position is restored afterwards. ``name`` names it in errors (default: its ``name``
    attribute). Arrays of more than ``max_inline_array`` items are returned as
    :class:`LazyArray`. Raise :class:`~app.errors.GGUFError` (subclasses) for any problem
    with the content, :class:`~app.errors.ModelFileNotFoundError` for a missing path.
    """
    assert max_inline_array >= 0, "max_inline_array must be >= 0"
    display = name or (os.fspath(source) if isinstance(source, str | os.PathLike) else "<stream>")
    try:
        with _open_source(source, name) as (file, display_name):
            display = display_name
            cursor = _Cursor.here(file, display_name)
            return _Parser(cursor, max_inline_array).header()
    except OSError as err:
        raise _unreadable(display, err) from err


def _unreadable(path: str, err: OSError) -> UnreadableFileError:
    """Return the one-line error for a source whose read failed."""
    if err.errno in (errno.EACCES, errno.EPERM):
        why = "permission denied"
    elif err.errno == errno.EISDIR:
        why = "it is a folder"
    else:
        why = err.strerror or type(err).__name__
    return UnreadableFileError(path, None, f"cannot read the file: {why}")


class _PrefixFile(io.RawIOBase):
    """The first bytes of a file of ``size`` bytes: all the header reader needs of it."""

    def __init__(self, data: bytes, size: int, name: str) -> None:
        super().__init__()
        self._data = data
        self._size = size
        self._pos = 0
        self.name = name

    def readable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def tell(self) -> int:
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        base = {os.SEEK_SET: 0, os.SEEK_CUR: self._pos, os.SEEK_END: self._size}[whence]
        self._pos = base + offset
        return self._pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        view = memoryview(buffer).cast("B")
        data = self._data[self._pos : self._pos + len(view)]
        view[: len(data)] = data
        self._pos += len(data)
        return len(data)


def read_header_bytes(data: bytes, size: int, name: str) -> Header:
    """Read a GGUF header from ``data``, the first bytes of a file of ``size`` bytes.

    ``name`` names the file in errors; raise :class:`~app.errors.GGUFError` (subclasses)
    when the bytes are not a whole header.
    """
    return read_header(cast(BinaryIO, _PrefixFile(data, size, name)), name=name)


def read_model(path: str | os.PathLike[str]) -> ModelFile:
    """Open the model at ``path``: one GGUF file, or any shard of a split model.

    A split model (``name-00001-of-00003.gguf`` with ``split.no``/``split.count`` keys) is
    opened as one model from any of its shards; the siblings are found by name in the same
    folder. Raise :class:`~app.errors.SplitModelError` when shards are missing (naming them)
    or do not belong together, :class:`~app.errors.ModelFileNotFoundError` for a missing path.
    """
    path_str = os.fspath(path)
    _check_file(path_str)
    given = read_header(path_str)
    n_split = given.get_int(_KEY_SPLIT_COUNT, 0)
    if n_split <= 1:
        return _merge(path_str, (given,))

    if n_split > MAX_SHARDS:
        raise SplitModelError(
            f"{path_str}: split.count says {n_split} shards, more than any model has "
            f"(at most {MAX_SHARDS}); the file is damaged"
        )
    split_no = given.get_int(_KEY_SPLIT_NO)
    if not 0 <= split_no < n_split:
        raise SplitModelError(f"{path_str}: split.no {split_no} is outside 0..{n_split - 1}")
    folder, file_name = os.path.split(path_str)
    match = _SPLIT_NAME.match(file_name)
    # The sibling names derive from the given name (llama.cpp's llama_split_prefix), so it
    # must be the name this shard was written under.
    if match is None or int(match["no"]) != split_no + 1 or int(match["count"]) != n_split:
        raise SplitModelError(
            f"{path_str}: shard {split_no + 1} of {n_split} must be named "
            f"'<name>-{split_no + 1:05d}-of-{n_split:05d}.gguf' to find its siblings"
        )
    paths = [
        os.path.join(folder, f"{match['prefix']}-{i + 1:05d}-of-{n_split:05d}.gguf")
        for i in range(n_split)
    ]
    # One listing of the folder, not one stat per shard: a damaged count stays cheap.
    try:
        present = {e.name for e in os.scandir(folder or ".") if e.is_file()}
    except OSError:
        present = set()
    missing = [os.path.basename(p) for p in paths if os.path.basename(p) not in present]
    if missing:
        shown = ", ".join(missing[:5]) + (
            f" and {len(missing) - 5} more" if len(missing) > 5 else ""
        )
        raise SplitModelError(
            f"{path_str}: split model is missing {len(missing)} of {n_split} shards: {shown}"
        )
    shards = tuple(given if i == split_no else read_header(p) for i, p in enumerate(paths))
    for i, shard in enumerate(shards):
        shard_count = shard.get_int(_KEY_SPLIT_COUNT, None)
        if shard_count != n_split:
            raise SplitModelError(
                f"{shard.path}: split.count is {shard_count}, but {path_str} says {n_split}"
            )
        shard_no = shard.get_int(_KEY_SPLIT_NO, None)
        if shard_no != i:
            raise SplitModelError(
                f"{shard.path}: split.no is {shard_no}, expected {i} (duplicate or misnamed shard)"
            )
    expected = shards[0].get_int(_KEY_SPLIT_TENSORS, None)
    found = sum(len(s.tensors) for s in shards)
    if expected != found:
        raise SplitModelError(
            f"{paths[0]}: split.tensors.count is {expected}, but the {n_split} shards hold "
            f"{found} tensors"
        )
    return _merge(paths[0], shards)


def _merge(path: str, shards: tuple[Header, ...]) -> ModelFile:
    """Build a ModelFile from its shards' headers, numbering each tensor's shard."""
    tensors: list[TensorInfo] = []
    seen: dict[str, int] = {}
    for i, shard in enumerate(shards):
        for tensor in shard.tensors:
            if tensor.name in seen:
                raise SplitModelError(
                    f"{shard.path}: tensor {tensor.name!r} is also in shard {seen[tensor.name]}"
                )
            seen[tensor.name] = i
            tensors.append(tensor if i == 0 else dataclasses.replace(tensor, shard=i))
    return ModelFile(
        path=path,
        shards=shards,
        metadata=shards[0].metadata,
        tensors=tuple(tensors),
        total_bytes=sum(t.n_bytes for t in tensors),
    )


def _check_file(path: str) -> None:
    """Raise ModelFileNotFoundError unless ``path`` is an existing regular file."""
    if not os.path.exists(path):
        raise ModelFileNotFoundError("no such file", path=path)
    if not os.path.isfile(path):
        raise ModelFileNotFoundError("not a regular file", path=path)


@contextmanager
def _open_source(
    source: str | os.PathLike[str] | BinaryIO, name: str | None
) -> Iterator[tuple[BinaryIO, str]]:
    """Yield ``(file, display name)``; open (and close) a path, restore a file's position."""
    if isinstance(source, str | os.PathLike):
        path = os.fspath(source)
        _check_file(path)
        try:
            # Unbuffered: _Cursor keeps its own 1 MiB window, a second buffer only copies.
            file = open(path, "rb", buffering=0)  # noqa: SIM115 - closed below
        except FileNotFoundError as err:  # removed since _check_file
            raise ModelFileNotFoundError("no such file", path=path) from err
        with file:
            yield file, name if name is not None else path
        return
    file_name = getattr(source, "name", None)
    display = name if name is not None else file_name if isinstance(file_name, str) else "<stream>"
    try:
        position: int | None = source.tell()
    except OSError:
        position = None
    try:
        yield source, display
    finally:
        if position is not None:
            source.seek(position)


class _Cursor:
    """A read position in a source, backed by a window of up to ~1 MiB of its bytes.

    ``window[pos]`` is the byte at absolute offset ``window_start + pos``; the source's own
    position is always ``window_start + len(window)``. ``end`` is the absolute end of the
    readable bytes (the file size), ``None`` if the source cannot tell.
    """

    __slots__ = ("end", "file", "limit", "name", "pos", "seekable", "window", "window_start")

    def __init__(self, file: BinaryIO, name: str, start: int, end: int | None) -> None:
        self.file = file
        self.name = name
        self.window = b""
        self.window_start = start
        self.pos = 0
        self.end = end
        self.seekable = end is not None
        self.limit: int | None = None
        """Absolute offset the header may not reach past (``MAX_HEADER_BYTES``), or None."""

    def over_limit(self, offset: int, what: str) -> HeaderTooLargeError:
        """Return the error for a header that would run past :attr:`limit`."""
        return HeaderTooLargeError(
            self.name,
            offset,
            f"{what} would make the header larger than {MAX_HEADER_BYTES >> 20} MiB; real "
            "models' headers are under 20 MiB, so this is not a model file ggtune can use",
        )

    @classmethod
    def here(cls, file: BinaryIO, name: str) -> _Cursor:
        """Return a cursor at the file's current position, learning the file size."""
        try:
            start = file.tell()
            end = file.seek(0, os.SEEK_END)
            end = file.tell() if end is None else end
            file.seek(start)
        except OSError:
            # Not seekable (a pipe): read sequentially and let truncation show up on read.
            return cls(file, name, 0, None)
        return cls(file, name, start, end)

    @classmethod
    def at(cls, file: BinaryIO, name: str, offset: int) -> _Cursor:
        """Return a cursor at absolute ``offset`` of a seekable file."""
        cursor = cls.here(file, name)
        if cursor.end is None:
            raise GGUFError(name, offset, "the source cannot seek, so the array cannot be read")
        file.seek(offset)
        cursor.window_start = offset
        return cursor

    @property
    def offset(self) -> int:
        """Return the absolute byte offset of the read position."""
        return self.window_start + self.pos

    def check_room(
        self, count: int, item_bytes: int, limit: int, offset: int, what: str, key: str = ""
    ) -> None:
        """Raise LimitExceededError unless ``count`` items of at least ``item_bytes`` bytes each
        fit both ``limit`` and the rest of the file (checked before any allocation).

        ``what`` (and ``key``, the metadata key) name the count in the message.
        """
        left = None if self.end is None else self.end - self.window_start - self.pos
        if count <= limit and (left is None or count * item_bytes <= left):
            if self.limit is None or count * item_bytes <= self.limit - self.offset:
                return
            label = f"{what} of {key!r}" if key else what
            raise self.over_limit(offset, f"{label} {count}")
        label = f"{what} of {key!r}" if key else what
        if count > limit:
            message = f"{label} {count} is more than the limit of {limit}"
        else:
            left = self.end - self.offset if self.end is not None else 0
            message = (
                f"{label} {count} (x {item_bytes} bytes) is more than the {left} bytes "
                "left in the file"
            )
        raise LimitExceededError(self.name, offset, message)

    def fill(self, n: int, what: str) -> None:
        """Make ``n`` bytes available at ``pos``, reading at least a window's worth."""
        if self.pos + n <= len(self.window):
            return
        offset = self.offset
        if self.limit is not None and offset + n > self.limit:
            raise self.over_limit(offset, what)
        keep = self.window[self.pos :]
        want = max(n - len(keep), WINDOW_BYTES)
        read_end = self.window_start + len(self.window)
        if self.end is not None:
            want = min(want, max(self.end - read_end, 0))
        parts = [keep]
        got = 0
        while got < want:
            data = self.file.read(want - got)
            if not data:
                break
            parts.append(data)
            got += len(data)
        self.window = b"".join(parts)
        self.window_start = offset
        self.pos = 0
        if len(self.window) < n:
            raise TruncatedError(
                self.name,
                offset,
                f"file ends at byte {offset + len(self.window)} inside {what} ({n} bytes needed)",
            )

    def skip(self, n: int, what: str) -> None:
        """Move ``n`` bytes ahead; seek rather than read when that jumps past the window."""
        if self.pos + n <= len(self.window):
            self.pos += n
            return
        target = self.offset + n
        if self.limit is not None and target > self.limit:
            raise self.over_limit(self.offset, what)
        if self.end is not None and target > self.end:
            raise TruncatedError(
                self.name, self.offset, f"file ends at byte {self.end} inside {what}"
            )
        if not self.seekable or target - (self.window_start + len(self.window)) < WINDOW_BYTES:
            while n > len(self.window) - self.pos:  # read through: cheap, and keeps streaming
                n -= len(self.window) - self.pos
                self.pos = len(self.window)
                self.fill(min(n, WINDOW_BYTES), what)
            self.pos += n
            return
        self.file.seek(target)
        self.window = b""
        self.window_start = target
        self.pos = 0

    def u32(self, what: str) -> int:
        """Read a little-endian u32."""
        if self.pos + 4 > len(self.window):
            self.fill(4, what)
        (value,) = _U32.unpack_from(self.window, self.pos)
        self.pos += 4
        return int(value)

    def u64(self, what: str) -> int:
        """Read a little-endian u64."""
        if self.pos + 8 > len(self.window):
            self.fill(8, what)
        (value,) = _U64.unpack_from(self.window, self.pos)
        self.pos += 8
        return int(value)

    def string(self, what: str, error: type[GGUFError]) -> str:
        """Read a GGUF string (u64 length + UTF-8); raise ``error`` if it is not UTF-8."""
        offset = self.offset
        n = self.u64(what)
        self.check_room(n, 1, MAX_STRING_BYTES, offset, f"length of {what}")
        if self.pos + n > len(self.window):
            self.fill(n, what)
        raw = self.window[self.pos : self.pos + n]
        self.pos += n
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as err:
            raise error(
                self.name, offset + 8 + err.start, f"{what} is not valid UTF-8: {err.reason}"
            ) from None

    def strings(self, count: int, what: str, error: type[GGUFError]) -> tuple[str, ...]:
        """Read ``count`` GGUF strings; like :meth:`string`, with a fast loop over the window."""
        unpack = _U64.unpack_from
        out: list[str] = []
        append = out.append
        while len(out) < count:
            window = self.window
            pos = self.pos
            limit = len(window) - 8
            try:
                # Same shape as skip_strings: strings wholly inside the window are decoded
                # here; the one crossing its end goes through string().
                for _ in range(count - len(out)):
                    if pos > limit:
                        break
                    end = pos + 8 + unpack(window, pos)[0]
                    if end > len(window):
                        break
                    append(window[pos + 8 : end].decode("utf-8"))
                    pos = end
            except UnicodeDecodeError as err:
                raise error(
                    self.name,
                    self.window_start + pos + 8 + err.start,
                    f"{what} is not valid UTF-8: {err.reason}",
                ) from None
            self.pos = pos
            if len(out) < count:
                append(self.string(what, error))
        return tuple(out)

    def skip_strings(self, count: int) -> None:
        """Skip ``count`` GGUF strings, reading only their lengths (no str objects)."""
        unpack = _U64.unpack_from
        left = count
        while left:
            window = self.window
            pos = self.pos
            limit = len(window) - 8
            if pos <= limit:
                # Hot loop (262k tokens in Gemma 3's vocabulary): stop at the first string
                # whose end, plus the next length, would leave the window; the slow path
                # below then checks that one against the file and refills.
                for done in range(left):
                    next_pos = pos + 8 + unpack(window, pos)[0]
                    if next_pos > limit:
                        left -= done
                        break
                    pos = next_pos
                else:
                    self.pos = pos
                    return
                self.pos = pos
            offset = self.offset
            n = self.u64("the length of an array item")
            self.check_room(n, 1, MAX_STRING_BYTES, offset, "length of an array item")
            self.skip(n, "an array item")
            left -= 1


class _Parser:
    """Parse GGUF structures from a cursor; arrays above ``max_inline`` items stay lazy."""

    __slots__ = ("cursor", "inline_left", "item_type", "max_inline")

    def __init__(self, cursor: _Cursor, max_inline: int) -> None:
        self.cursor = cursor
        self.max_inline = max_inline
        self.inline_left = MAX_INLINE_BYTES
        """File bytes of small arrays that may still become tuples (MAX_INLINE_BYTES)."""
        self.item_type = -1
        """Item type of the last top-level array read."""

    def header(self) -> Header:
        """Parse a whole GGUF header (mirrors gguf.cpp gguf_init_from_reader)."""
        cur = self.cursor
        name = cur.name
        base = cur.offset
        cur.limit = base + MAX_HEADER_BYTES
        self.magic()
        version = cur.u32("version")
        if version not in SUPPORTED_VERSIONS:
            hint = ""
            if version & 0xFFFF == 0:
                hint = " (a big-endian file? only little-endian GGUF is supported)"
            elif version == 1:
                hint = " (GGUF v1 is no longer supported by llama.cpp)"
            raise UnsupportedVersionError(
                name, base + 4, f"GGUF version {version} is not supported{hint}"
            )
        count_offset = cur.offset
        n_tensors = cur.u64("tensor count")
        n_kv = cur.u64("metadata count")
        cur.check_room(n_kv, _MIN_KV_BYTES, MAX_METADATA_KEYS, count_offset + 8, "metadata count")
        cur.check_room(n_tensors, _MIN_TENSOR_INFO_BYTES, MAX_TENSORS, count_offset, "tensor count")
        need = n_tensors * _MIN_TENSOR_INFO_BYTES + n_kv * _MIN_KV_BYTES
        if cur.end is not None and need > cur.end - cur.offset:
            raise LimitExceededError(
                name,
                count_offset,
                f"tensor count {n_tensors} and metadata count {n_kv} need at least {need} "
                f"bytes, but {cur.end - cur.offset} are left in the file",
            )

        metadata: dict[str, object] = {}
        value_types: dict[str, tuple[int, int]] = {}
        alignment_type = alignment_offset = -1
        for _ in range(n_kv):
            key_offset = cur.offset
            key = cur.string("metadata key", InvalidMetadataError)
            if not key:
                raise InvalidMetadataError(name, key_offset, "empty metadata key")
            if key in metadata:
                raise InvalidMetadataError(name, key_offset, f"duplicate metadata key {key!r}")
            value_type = cur.u32("a metadata value type")
            metadata[key] = self.value(value_type, cur.offset - 4, key)
            value_types[key] = (value_type, self.item_type if value_type == _ARRAY else -1)
            if key == _KEY_ALIGNMENT:
                alignment_type, alignment_offset = value_type, key_offset

        alignment = DEFAULT_ALIGNMENT
        if alignment_type != -1:
            value = metadata[_KEY_ALIGNMENT]
            # gguf.cpp insists on exactly u32 and a power of two.
            if alignment_type != GGUFValueType.UINT32 or not isinstance(value, int):
                raise InvalidMetadataError(
                    name,
                    alignment_offset,
                    f"{_KEY_ALIGNMENT} must be UINT32, not {_value_type_name(alignment_type)}",
                )
            if value <= 0 or value & (value - 1):
                raise InvalidMetadataError(
                    name, alignment_offset, f"{_KEY_ALIGNMENT} {value} is not a power of 2"
                )
            alignment = value

        metadata_end = cur.offset - base
        seen_names: set[str] = set()
        raw_tensors = [self.tensor_info(seen_names) for _ in range(n_tensors)]
        header_end = cur.offset
        data_offset = base + -(-(header_end - base) // alignment) * alignment
        if n_tensors and cur.end is not None and data_offset > cur.end:
            raise TruncatedError(
                name,
                header_end,
                f"file ends at byte {cur.end} inside the padding before the data "
                f"(data starts at {data_offset})",
            )
        tensors = tuple(
            TensorInfo(t_name, shape, ggml_type, type_name, data_offset + rel, n_bytes)
            for t_name, shape, ggml_type, type_name, rel, n_bytes, _ in raw_tensors
        )
        self.check_tensor_data(raw_tensors, tensors, alignment)
        return Header(
            path=name,
            version=version,
            alignment=alignment,
            data_offset=data_offset,
            file_size=cur.end,
            metadata=metadata,
            tensors=tensors,
            metadata_end=metadata_end,
            value_types=value_types,
        )

    def magic(self) -> None:
        """Check the 4-byte magic."""
        cur = self.cursor
        offset = cur.offset
        try:
            cur.fill(4, "magic")
        except TruncatedError:
            head = cur.window[cur.pos :]
            if not GGUF_MAGIC.startswith(head):
                raise NotGGUFError(
                    cur.name, offset, f"starts with {head!r}, not {GGUF_MAGIC!r}"
                ) from None
            raise
        head = cur.window[cur.pos : cur.pos + 4]
        if head != GGUF_MAGIC:
            raise NotGGUFError(cur.name, offset, f"starts with {head!r}, not {GGUF_MAGIC!r}")
        cur.pos += 4

    def value(self, value_type: int, type_offset: int, key: str) -> object:
        """Read one metadata value of ``value_type`` (the type code sits at ``type_offset``)."""
        cur = self.cursor
        scalar = _SCALAR_STRUCTS.get(value_type)
        if scalar is not None:
            if cur.pos + scalar.size > len(cur.window):
                cur.fill(scalar.size, "a metadata value")
            (value,) = scalar.unpack_from(cur.window, cur.pos)
            cur.pos += scalar.size
            return value
        if value_type == _STRING:
            return cur.string("a metadata value", InvalidMetadataError)
        if value_type == _ARRAY:
            return self.array(key, 1)
        raise UnknownValueTypeError(
            cur.name, type_offset, f"metadata key {key!r} has unknown value type {value_type}"
        )

    def array_head(self, key: str, depth: int) -> tuple[int, int]:
        """Read an array's item type and count; check both (and the depth) before use."""
        cur = self.cursor
        offset = cur.offset
        if depth > MAX_ARRAY_DEPTH:
            raise LimitExceededError(
                cur.name, offset, f"array {key!r} is nested deeper than {MAX_ARRAY_DEPTH}"
            )
        if cur.pos + 12 > len(cur.window):
            cur.fill(12, "an array header")
        item_type, count = _ARRAY_HEAD.unpack_from(cur.window, cur.pos)
        cur.pos += 12
        item_bytes = _MIN_ITEM_BYTES.get(item_type)
        if item_bytes is None:
            raise UnknownValueTypeError(
                cur.name, offset, f"array {key!r} has unknown item type {item_type}"
            )
        cur.check_room(count, item_bytes, MAX_ARRAY_ITEMS, offset + 4, "item count", key)
        return item_type, count

    def array(self, key: str, depth: int) -> tuple[object, ...] | LazyArray:
        """Read an array value: a tuple, or a LazyArray above ``max_inline`` items."""
        cur = self.cursor
        item_type, count = self.array_head(key, depth)
        if depth == 1:
            self.item_type = item_type
        start = cur.offset
        if count <= self.max_inline and self.inline_left > 0:
            items = self.items(item_type, count, depth, key)
            self.inline_left -= cur.offset - start
            return items
        self.skip_items(item_type, count, depth, key)
        return LazyArray(item_type, count, start, cur.offset - start)

    def items(self, item_type: int, count: int, depth: int, key: str) -> tuple[object, ...]:
        """Read ``count`` items of ``item_type`` of an array at ``depth`` (count checked)."""
        if item_type in _SCALAR_STRUCTS:
            return self.scalars(item_type, count)
        if item_type == _STRING:
            return self.cursor.strings(count, "an array item", InvalidMetadataError)
        return tuple(self.array(key, depth + 1) for _ in range(count))

    def scalars(self, item_type: int, count: int) -> tuple[object, ...]:
        """Read ``count`` fixed-size items of ``item_type`` in one unpack."""
        cur = self.cursor
        n_bytes = count * _SCALAR_STRUCTS[item_type].size
        cur.check_room(n_bytes, 1, _INT64_MAX, cur.offset, "array bytes")
        if cur.pos + n_bytes > len(cur.window):
            cur.fill(n_bytes, "array items")
        values = struct.unpack_from(f"<{count}{_SCALAR_FORMATS[item_type]}", cur.window, cur.pos)
        cur.pos += n_bytes
        return values

    def skip_items(self, item_type: int, count: int, depth: int, key: str) -> None:
        """Skip ``count`` items of ``item_type`` of an array at ``depth``, checking nested
        arrays' types and counts as if they were read."""
        cur = self.cursor
        scalar = _SCALAR_STRUCTS.get(item_type)
        if scalar is not None:
            cur.skip(count * scalar.size, "array items")
        elif item_type == _STRING:
            cur.skip_strings(count)
        else:
            for _ in range(count):
                inner_type, inner_count = self.array_head(key, depth + 1)
                self.skip_items(inner_type, inner_count, depth + 1, key)

    def tensor_info(self, seen: set[str]) -> tuple[str, tuple[int, ...], int, str, int, int, int]:
        """Read one tensor info; return (name, shape, type, type name, relative offset,
        n_bytes, offset of the info in the file)."""
        cur = self.cursor
        name = cur.name
        info_offset = cur.offset
        t_name = cur.string("tensor name", InvalidTensorDataError)
        if len(t_name.encode()) > MAX_TENSOR_NAME_BYTES:
            raise InvalidTensorDataError(
                name,
                info_offset,
                f"tensor name {t_name[:80]!r} is longer than {MAX_TENSOR_NAME_BYTES} bytes",
            )
        if t_name in seen:
            raise InvalidTensorDataError(name, info_offset, f"duplicate tensor name {t_name!r}")
        seen.add(t_name)
        n_dims = cur.u32("a tensor's dimension count")
        if n_dims > MAX_TENSOR_DIMS:
            raise InvalidTensorDataError(
                name, cur.offset - 4, f"tensor {t_name!r} has {n_dims} dimensions (max 4)"
            )
        dims_offset = cur.offset
        if cur.pos + 8 * n_dims > len(cur.window):
            cur.fill(8 * n_dims, "a tensor's shape")
        shape: tuple[int, ...] = struct.unpack_from(f"<{n_dims}q", cur.window, cur.pos)
        cur.pos += 8 * n_dims
        if any(ne < 0 for ne in shape):
            raise InvalidTensorDataError(
                name, dims_offset, f"tensor {t_name!r} has a negative dimension: {shape}"
            )
        n_elements = math.prod(shape)
        if n_elements > _INT64_MAX:
            raise InvalidTensorDataError(
                name, dims_offset, f"tensor {t_name!r} shape {shape} overflows int64 elements"
            )
        type_offset = cur.offset
        ggml_type = cur.u32("a tensor's ggml type")
        known = _GGML_TYPES.get(ggml_type)
        if known is None:
            raise UnknownTensorTypeError(
                name, type_offset, f"tensor {t_name!r} has unknown ggml type {ggml_type}"
            )
        type_name, block, type_size = known
        ne0 = shape[0] if shape else 1
        if ne0 % block:
            raise InvalidTensorDataError(
                name,
                dims_offset,
                f"tensor {t_name!r}: row of {ne0} elements is not a multiple of the "
                f"{type_name} block size {block}",
            )
        # ggml_nbytes of a contiguous tensor: (ne0 / block) blocks per row, times the rows.
        n_bytes = ne0 // block * type_size * math.prod(shape[1:])
        relative = cur.u64("a tensor's data offset")
        return t_name, shape, ggml_type, type_name, relative, n_bytes, cur.offset - 8

    def check_tensor_data(
        self,
        raw: list[tuple[str, tuple[int, ...], int, str, int, int, int]],
        tensors: tuple[TensorInfo, ...],
        alignment: int,
    ) -> None:
        """Check each tensor's data is aligned, inside the file and not overlapping."""
        cur = self.cursor
        for (_, _, _, _, relative, _, field_offset), tensor in zip(raw, tensors, strict=True):
            if relative % alignment:
                raise InvalidTensorDataError(
                    cur.name,
                    field_offset,
                    f"tensor {tensor.name!r} data offset {relative} is not a multiple of the "
                    f"alignment {alignment}",
                )
            if cur.end is not None and tensor.offset + tensor.n_bytes > cur.end:
                raise InvalidTensorDataError(
                    cur.name,
                    field_offset,
                    f"tensor {tensor.name!r} data (bytes {tensor.offset}..."
                    f"{tensor.offset + tensor.n_bytes}) runs past the end of the file "
                    f"({cur.end} bytes)",
                )
        # Sorting by offset makes every overlap show up between neighbours; empty tensors
        # occupy no bytes and overlap nothing.
        placed = sorted((t for t in tensors if t.n_bytes), key=lambda t: t.offset)
        for before, after in itertools.pairwise(placed):
            if before.offset + before.n_bytes > after.offset:
                raise InvalidTensorDataError(
                    cur.name,
                    after.offset,
                    f"tensor {after.name!r} data overlaps tensor {before.name!r}",
                )
