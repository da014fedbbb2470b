"""Header stand-ins: a model's GGUF header in a sparse file of the model's full size.

llama.cpp's dry run (model params ``no_alloc`` with ``load_mode = NONE``,
runner/dry_run.py) reads the header and checks that every tensor lies inside the file,
but never reads tensor data. So a file that holds a model's header bytes (everything up
to the data offset) and is then extended with ``truncate()`` to the model's full size
gives the dry run the same KV, compute and output figures as the real file, while taking
only the header's bytes on disk (a sparse file: the OS allocates no blocks for the hole).

That makes the engine available for every model ggtune can describe:

* a local file or an Ollama blob: its own header bytes (:func:`file_prefix`);
* a Hugging Face file read header-only: the header bytes the range reads fetched
  (``app.sources.remote.read_remote_prefix``);
* a simulated quant: the source's metadata bytes as they are and the tensor infos
  rewritten with the new types and offsets (:func:`requantized_prefix`);
* a catalog entry: a header serialized from its metadata and generated tensors, with
  llama.cpp's ``no_vocab`` tokenizer (``vocab_size`` dummy tokens, src/llama-vocab.cpp)
  instead of a vocabulary the entry does not carry (:func:`catalog_prefix`).

:func:`write_standin` puts the bytes into ``<cache>/ggtune/standins/<key>.gguf``
atomically, truncates the file to the full size and checks the result: the header reads
back with the tensors inside the file, and the file is sparse. On Windows the file is
marked sparse with ``FSCTL_SET_SPARSE`` before it is extended (NTFS otherwise allocates
the whole size); a file system that cannot hold sparse files (FAT32, exFAT, HFS+) gets a
clear error instead of a file as large as the model.

Example::

    prefix, size = file_prefix("gemma-3-270m-q4_k_m.gguf")
    stand_in = write_standin(prefix, size, key="gemma-3-270m")
    stand_in.path          # .../standins/gemma-3-270m.gguf, 253 MB apparent, ~6 MB on disk
"""

from __future__ import annotations

import hashlib
import os
import re
import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO, Final, cast

from app.errors import GGUFError, StandInError
from app.model.ggml import GGUFValueType
from app.model.gguf_reader import Header, read_header, read_header_bytes

__all__ = [
    "MAX_HEADER_BYTES",
    "StandIn",
    "catalog_prefix",
    "file_prefix",
    "requantized_prefix",
    "serialize_header",
    "standin_dir",
    "write_standin",
]

GGUF_MAGIC: Final = b"GGUF"
GGUF_VERSION: Final = 3
ALIGNMENT: Final = 32
"""``GGUF_DEFAULT_ALIGNMENT``: data and every tensor start at a multiple of it."""
MAX_HEADER_BYTES: Final = 1 << 30
"""A header above 1 GiB is refused (real ones are below 100 MiB)."""

_KEY_RE: Final = re.compile(r"[^A-Za-z0-9._-]+")
_FSCTL_SET_SPARSE: Final = 0x000900C4


@dataclass(frozen=True, slots=True)
class StandIn:
    """A written stand-in: ``path`` (the first shard), sizes in bytes.

    ``file_bytes`` is the apparent size (the model's), ``header_bytes`` what was written,
    ``disk_bytes`` what the file system allocated (``st_blocks * 512``; on Windows the
    header size, the API does not tell) and ``paths`` every shard's file.
    """

    path: Path
    paths: tuple[Path, ...]
    file_bytes: int
    header_bytes: int
    disk_bytes: int


def standin_dir() -> Path:
    """Return the folder of stand-ins: ``<cache>/ggtune/standins``."""
    from app.paths import cache_dir

    return cache_dir() / "standins"


def _pad(n: int, alignment: int = ALIGNMENT) -> int:
    return -(-n // alignment) * alignment


# --------------------------------------------------------------------------- serializing


def _string(text: str) -> bytes:
    raw = text.encode("utf-8")
    return struct.pack("<Q", len(raw)) + raw


def _scalar_type(value: object) -> GGUFValueType:
    if isinstance(value, bool):
        return GGUFValueType.BOOL
    if isinstance(value, int):
        return GGUFValueType.UINT32 if 0 <= value < 1 << 32 else GGUFValueType.INT64
    if isinstance(value, float):
        return GGUFValueType.FLOAT32
    if isinstance(value, str):
        return GGUFValueType.STRING
    raise StandInError(f"cannot write a metadata value of type {type(value).__name__}")


_PACK: Final[dict[GGUFValueType, str]] = {
    GGUFValueType.BOOL: "<?",
    GGUFValueType.UINT32: "<I",
    GGUFValueType.INT32: "<i",
    GGUFValueType.INT64: "<q",
    GGUFValueType.FLOAT32: "<f",
}


def _value(value_type: GGUFValueType, value: object) -> bytes:
    if value_type == GGUFValueType.STRING:
        return _string(cast(str, value))
    return struct.pack(_PACK[value_type], value)


def _kv(key: str, value: object) -> bytes:
    """One metadata pair as ``convert_hf_to_gguf.py`` types it (gguf-py ``GGUFWriter``):
    counts u32, floats f32, integer arrays i32 (llama.cpp reads them as u32 too)."""
    out = _string(key)
    if isinstance(value, tuple | list):
        items = list(value)
        if not items:
            raise StandInError(f"metadata {key}: empty array")
        item_type = _scalar_type(items[0])
        if item_type in (GGUFValueType.UINT32, GGUFValueType.INT64):
            item_type = GGUFValueType.INT32
        out += struct.pack("<I", GGUFValueType.ARRAY) + struct.pack("<IQ", item_type, len(items))
        return out + b"".join(_value(item_type, v) for v in items)
    value_type = _scalar_type(value)
    return out + struct.pack("<I", value_type) + _value(value_type, value)


TensorRow = tuple[str, Sequence[int], int, int]
"""(name, shape in ggml order ne0 first, ggml type id, bytes)."""


def _tensor_infos(tensors: Sequence[TensorRow]) -> tuple[bytes, int]:
    """Return the tensor-info section and the data size (each tensor aligned, gguf.cpp)."""
    out = bytearray()
    offset = 0
    for name, shape, ggml_type, n_bytes in tensors:
        out += _string(name) + struct.pack("<I", len(shape))
        out += b"".join(struct.pack("<Q", d) for d in shape)
        out += struct.pack("<IQ", ggml_type, offset)
        offset = _pad(offset + n_bytes)
    return bytes(out), offset


def serialize_header(metadata: Mapping[str, object], tensors: Sequence[TensorRow]) -> bytes:
    """Return a GGUF v3 header (up to the data offset) for ``metadata`` and ``tensors``."""
    kv = b"".join(_kv(k, v) for k, v in metadata.items())
    infos, _ = _tensor_infos(tensors)
    head = GGUF_MAGIC + struct.pack("<IQQ", GGUF_VERSION, len(tensors), len(metadata))
    raw = head + kv + infos
    return raw + b"\0" * (_pad(len(raw)) - len(raw))


def _data_bytes(tensors: Sequence[TensorRow]) -> int:
    return _tensor_infos(tensors)[1]


# --------------------------------------------------------------------------- prefixes


def file_prefix(path: str | os.PathLike[str]) -> tuple[bytes, int]:
    """Return (the header bytes up to the data offset, the file size) of a GGUF file."""
    header = read_header(path)
    size = header.file_size if header.file_size is not None else os.path.getsize(path)
    if header.data_offset > MAX_HEADER_BYTES:
        raise StandInError(f"{os.fspath(path)}: header of {header.data_offset} bytes is too large")
    with open(path, "rb") as f:
        return f.read(header.data_offset), size


def requantized_prefix(
    prefix: bytes,
    header: Header,
    tensors: Sequence[TensorRow],
    *,
    file_type: int | None = None,
) -> tuple[bytes, int]:
    """Return a stand-in header for ``header``'s model with other tensor types and sizes.

    The metadata bytes (``prefix[:header.metadata_end]``) are kept as they are, with
    ``general.file_type`` set to ``file_type`` in place when both are there; the tensor
    infos are rewritten for ``tensors`` (same names and shapes, new types, new offsets).
    Returns (bytes up to the data offset, full file size).
    """
    if header.metadata_end <= 0 or len(prefix) < header.metadata_end:
        raise StandInError(f"{header.path}: the header bytes do not reach the tensor infos")
    if len(tensors) != len(header.tensors):
        raise StandInError(f"{header.path}: {len(tensors)} tensors for {len(header.tensors)}")
    meta = bytearray(prefix[: header.metadata_end])
    if file_type is not None:
        key = _string("general.file_type") + struct.pack("<I", GGUFValueType.UINT32)
        at = meta.find(key)
        if at >= 0:
            struct.pack_into("<I", meta, at + len(key), file_type)
    infos, data = _tensor_infos(tensors)
    raw = bytes(meta) + infos
    align = header.alignment
    raw += b"\0" * (_pad(len(raw), align) - len(raw))
    return raw, len(raw) + data


def catalog_prefix(
    metadata: Mapping[str, object], tensors: Sequence[TensorRow]
) -> tuple[bytes, int]:
    """Return a stand-in header for a model described by metadata alone (a catalog entry).

    The entry has no vocabulary: ``tokenizer.ggml.model = "no_vocab"`` makes llama.cpp add
    ``{arch}.vocab_size`` dummy tokens (src/llama-vocab.cpp, ``llama_vocab::impl::load``),
    which is all its memory use depends on (embeddings, logits, output buffer).
    """
    arch = metadata.get("general.architecture")
    if not isinstance(arch, str) or f"{arch}.vocab_size" not in metadata:
        raise StandInError("a catalog stand-in needs general.architecture and {arch}.vocab_size")
    md = {k: v for k, v in metadata.items() if not k.startswith("tokenizer.")}
    md.setdefault("general.quantization_version", 2)
    md["tokenizer.ggml.model"] = "no_vocab"
    raw = serialize_header(md, tensors)
    return raw, len(raw) + _data_bytes(tensors)


# --------------------------------------------------------------------------- writing


def _safe_key(key: str) -> str:
    clean = _KEY_RE.sub("-", key).strip("-.")[:80] or "model"
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()[:12]
    return f"{clean}-{digest}"


def _mark_sparse(f: BinaryIO) -> None:
    """Mark an open file sparse on Windows (``FSCTL_SET_SPARSE``); elsewhere a no-op.

    Linux and macOS (APFS) file systems leave a hole where a file is extended with
    ``truncate``; NTFS only does so for files marked sparse (``DeviceIoControl``,
    winioctl.h), else it allocates the whole size.
    """
    if os.name != "nt":
        return
    import ctypes
    import importlib
    from ctypes import wintypes

    msvcrt = importlib.import_module("msvcrt")
    handle = msvcrt.get_osfhandle(f.fileno())
    returned = wintypes.DWORD(0)
    kernel32 = getattr(ctypes, "WinDLL")("kernel32", use_last_error=True)  # noqa: B009
    ok = kernel32.DeviceIoControl(
        wintypes.HANDLE(handle),
        wintypes.DWORD(_FSCTL_SET_SPARSE),
        None,
        0,
        None,
        0,
        ctypes.byref(returned),
        None,
    )
    if not ok:
        code = getattr(ctypes, "get_last_error")()  # noqa: B009
        raise StandInError(
            f"this file system cannot hold sparse files (FSCTL_SET_SPARSE failed, error "
            f"{code}); choose a cache folder on NTFS (set XDG_CACHE_HOME)"
        )


def _disk_bytes(path: Path, header_bytes: int) -> int:
    st = path.stat()
    blocks = getattr(st, "st_blocks", None)
    return header_bytes if blocks is None else int(blocks) * 512


def write_standin(
    prefix: bytes,
    file_bytes: int,
    *,
    key: str,
    folder: Path | None = None,
    shard_prefixes: Sequence[tuple[bytes, int]] = (),
) -> StandIn:
    """Write a stand-in for a model whose header bytes are ``prefix``; return it.

    ``file_bytes`` is the model file's full size; ``key`` names the model (a path, URL or
    ``catalog:`` key; hashed into the file name). For a split model ``prefix`` is shard 1
    and ``shard_prefixes`` the other shards' (bytes, size), in order; the files are named
    ``<name>-00001-of-0000N.gguf`` so llama.cpp finds the siblings. An existing stand-in
    of the same key is replaced (atomically). Raises :class:`StandInError` when the bytes
    are not a GGUF header that fits ``file_bytes``, or the file would not be sparse.
    """
    folder = folder or standin_dir()
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise StandInError(f"cannot create {folder}: {err.strerror or err}") from err
    parts = [(prefix, file_bytes), *shard_prefixes]
    base = _safe_key(key)
    n = len(parts)
    names = (
        [f"{base}.gguf"] if n == 1 else [f"{base}-{i + 1:05d}-of-{n:05d}.gguf" for i in range(n)]
    )
    paths: list[Path] = []
    disk = header_total = 0
    for name, (data, size) in zip(names, parts, strict=True):
        path = folder / name
        _check_prefix(data, size, key)
        tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
        try:
            with open(tmp, "wb") as f:
                _mark_sparse(f)
                f.write(data)
                f.truncate(size)
            used = _disk_bytes(tmp, len(data))
            # a hole must not have been filled: allow the header plus a few blocks
            if used > len(data) + (1 << 20) and used > size // 2:
                raise StandInError(
                    f"the file system at {folder} does not keep sparse files (a {size}-byte "
                    f"stand-in took {used} bytes); set XDG_CACHE_HOME to a folder on "
                    "ext4, APFS, btrfs, XFS or NTFS"
                )
            os.replace(tmp, path)
        except OSError as err:
            raise StandInError(f"cannot write {path}: {err.strerror or err}") from err
        finally:
            tmp.unlink(missing_ok=True)
        paths.append(path)
        disk += used
        header_total += len(data)
    return StandIn(
        path=paths[0],
        paths=tuple(paths),
        file_bytes=sum(size for _, size in parts),
        header_bytes=header_total,
        disk_bytes=disk,
    )


def _check_prefix(data: bytes, size: int, key: str) -> None:
    """Check that ``data`` is a whole GGUF header whose tensors lie within ``size`` bytes."""
    if not data.startswith(GGUF_MAGIC):
        raise StandInError(f"{key}: the header bytes do not start with GGUF")
    try:
        header = read_header_bytes(data, size, key)
    except GGUFError as err:
        raise StandInError(f"{key}: not a whole GGUF header ({err.detail})") from err
    if header.data_offset != len(data):
        raise StandInError(
            f"{key}: {len(data)} header bytes, but the data starts at {header.data_offset}"
        )
    end = max((t.offset + t.n_bytes for t in header.tensors), default=header.data_offset)
    if end > size:
        raise StandInError(f"{key}: tensors end at byte {end}, past the file size {size}")
