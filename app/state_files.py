"""Read the small files ggtune and the runners keep, without trusting them.

ggtune reads files it did not write and cannot vouch for: Ollama's manifests, LM Studio's
home pointer, its own ``library.json`` and caches (which a user, a sync tool or a broken
disk may have changed), the user's hardware profiles. Any of them may be a FIFO (opening
it blocks forever), a link to ``/dev/zero`` (reading it never ends), huge, not UTF-8, or
JSON nested a million levels deep (``json.loads`` raises RecursionError). The functions
here refuse each of those with one :class:`~app.errors.StateFileError` line naming the
file, so a scan can skip it and say why:

- the file is opened non-blocking and must be a regular file (checked on the open file,
  so a swap between check and open changes nothing);
- at most ``max_bytes`` are read;
- text must be UTF-8; JSON and TOML may nest at most :data:`MAX_DEPTH` levels.

Example::

    data = load_json(Path("~/.ollama/models/manifests/.../latest").expanduser())
    text = read_text(pointer, max_bytes=4096)
"""

from __future__ import annotations

import json
import os
import re
import stat
from typing import Final

from app.errors import StateFileError

__all__ = ["MAX_DEPTH", "MAX_STATE_BYTES", "load_json", "load_toml", "read_bytes", "read_text"]

MAX_STATE_BYTES: Final = 16 << 20
"""Default largest file read (16 MiB; a manifest is ~1 KiB, the header cache of a
thousand models ~0.5 MiB)."""

MAX_DEPTH: Final = 64
"""Deepest nesting of arrays and objects accepted (the files read here nest 4 at most)."""

_STRINGS: Final = re.compile(r'"(?:[^"\\]|\\.)*"|\'[^\']*\'')
_BRACKETS: Final = re.compile(r"[\[\]{}]")


def read_bytes(path: str | os.PathLike[str], *, max_bytes: int = MAX_STATE_BYTES) -> bytes:
    """Return the bytes of the regular file at ``path`` (at most ``max_bytes``).

    Raise :class:`~app.errors.StateFileError` when it is missing or unreadable, not a
    regular file (a FIFO, a device, a folder, a socket) or larger than ``max_bytes``;
    a FIFO is never waited on.
    """
    flags = os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_BINARY", 0)
    try:
        fd = os.open(path, flags)
    except FileNotFoundError:
        raise StateFileError("no such file", path=path) from None
    except OSError as err:
        raise StateFileError(f"cannot read it: {err.strerror or err}", path=path) from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StateFileError(
                "not a regular file (a pipe, device or folder); skipped", path=path
            )
        if st.st_size > max_bytes:
            raise StateFileError(f"larger than {max_bytes >> 10} KiB; skipped", path=path)
        parts: list[bytes] = []
        got = 0
        while got <= max_bytes:
            chunk = os.read(fd, min(1 << 20, max_bytes + 1 - got))
            if not chunk:
                break
            parts.append(chunk)
            got += len(chunk)
        if got > max_bytes:  # grew while being read
            raise StateFileError(f"larger than {max_bytes >> 10} KiB; skipped", path=path)
        return b"".join(parts)
    except OSError as err:
        raise StateFileError(f"cannot read it: {err.strerror or err}", path=path) from None
    finally:
        os.close(fd)


def read_text(path: str | os.PathLike[str], *, max_bytes: int = MAX_STATE_BYTES) -> str:
    """Return the UTF-8 text of the regular file at ``path`` (see :func:`read_bytes`)."""
    raw = read_bytes(path, max_bytes=max_bytes)
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        raise StateFileError("not UTF-8 text", path=path) from None


def _check_depth(path: str | os.PathLike[str], text: str, max_depth: int) -> None:
    """Raise StateFileError when brackets outside strings nest deeper than ``max_depth``."""
    depth = 0
    for m in _BRACKETS.finditer(_STRINGS.sub('""', text)):
        if m.group() in "[{":
            depth += 1
            if depth > max_depth:
                raise StateFileError(f"nested deeper than {max_depth} levels; skipped", path=path)
        else:
            depth -= 1


def load_json(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = MAX_STATE_BYTES,
    max_depth: int = MAX_DEPTH,
) -> object:
    """Return the JSON value in the file at ``path``; raise StateFileError if it is not one."""
    text = read_text(path, max_bytes=max_bytes)
    _check_depth(path, text, max_depth)
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as err:
        raise StateFileError(f"not valid JSON ({_short(err)})", path=path) from None


def load_toml(
    path: str | os.PathLike[str],
    *,
    max_bytes: int = MAX_STATE_BYTES,
    max_depth: int = MAX_DEPTH,
) -> dict[str, object]:
    """Return the TOML document in the file at ``path``; raise StateFileError if it is not."""
    import tomllib  # here: most runs read no TOML, and its parser is ~2 ms of start-up

    text = read_text(path, max_bytes=max_bytes)
    _check_depth(path, text, max_depth)
    try:
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, RecursionError) as err:
        raise StateFileError(f"not valid TOML ({_short(err)})", path=path) from None


def _short(err: BaseException) -> str:
    text = " ".join(str(err).split()) or type(err).__name__
    return text if len(text) <= 120 else text[:117] + "..."
