"""Write an export to disk atomically, never over a user's file unless asked.

Every exporter in :mod:`app.export` is a pure function from (model, settings) to text;
this module is the only one that touches the disk. :func:`write_text_atomic` writes the
text to a temporary file in the target's folder, flushes it to the disk, and only then
moves it into place, so the target is always either the old file, the complete new file,
or absent: a full disk (``ENOSPC``), a file-size limit or a crash leaves no partial file.

Without ``overwrite`` the final step is :func:`os.link`, which fails atomically when the
target exists (no check-then-write race); with it, :func:`os.replace`. ``backup`` keeps a
copy of the file being replaced beside it (``name.YYYYmmdd-HHMMSS.bak``).

Example::

    path = write_text_atomic(Path("Modelfile"), text)                  # refuses if it exists
    path = write_text_atomic(Path("Modelfile"), text, overwrite=True)  # replaces it
"""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
import stat
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from app.errors import ExportError

if TYPE_CHECKING:
    from app.model.spec import ModelSpec

SystemName = Literal["linux", "macos", "windows"]
"""The operating systems an export writes instructions for."""

__all__ = [
    "ExportText",
    "ModelFacts",
    "SystemName",
    "backup_path",
    "facts_from_spec",
    "model_facts",
    "powershell_join",
    "powershell_quote",
    "write_text_atomic",
]


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """What the exporters need to know about a local model (read from its GGUF header).

    ``n_layer_all`` counts the repeating layers as llama.cpp does (``hparams.n_layer_all``,
    NextN/MTP layers included); offloading all of them plus the output layer takes
    ``n_layer_all + 1`` GPU layers. ``n_ctx_train`` is the training context in tokens.
    """

    path: str
    name: str | None
    n_layer_all: int
    n_ctx_train: int
    n_swa: int = 0
    n_expert: int = 0


def model_facts(path: str | os.PathLike[str]) -> ModelFacts:
    """Read the facts the exporters need from the model at ``path`` (headers only)."""
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec

    return facts_from_spec(model_spec(read_model(path)))


def facts_from_spec(spec: ModelSpec) -> ModelFacts:
    """Return the exporters' facts of a model already read (its path made absolute)."""
    return ModelFacts(
        path=os.path.abspath(spec.path),
        name=spec.name,
        n_layer_all=spec.n_layer_all,
        n_ctx_train=spec.n_ctx_train,
        n_swa=spec.n_swa,
        n_expert=spec.n_expert,
    )


# PowerShell treats these as single quotes too (tokenizer CharExtensions.IsSingleQuote).
_PS_SINGLE_QUOTES = "'\u2018\u2019\u201a\u201b"
_PS_SAFE = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_-./:=+\\")


def powershell_quote(arg: str) -> str:
    """Return ``arg`` as one PowerShell token that reaches a native program unchanged.

    Plain words stay bare; anything else goes in single quotes (no expansion of ``$``,
    backticks, ``@`` or ``,``), with every single-quote character doubled. An empty
    argument becomes ``''``. Embedded double quotes reach native programs intact only in
    PowerShell 7.3 and later (``$PSNativeCommandArgumentPassing``).
    """
    if arg and all(c in _PS_SAFE for c in arg) and not arg.startswith("--%"):
        return arg
    out = "".join(c + c if c in _PS_SINGLE_QUOTES else c for c in arg)
    return f"'{out}'"


def powershell_join(argv: tuple[str, ...] | list[str]) -> str:
    """Return ``argv`` as a PowerShell command line (``&`` first when the program is quoted)."""
    parts = [powershell_quote(a) for a in argv]
    if parts and parts[0] != argv[0]:
        return "& " + " ".join(parts)
    return " ".join(parts)


@dataclass(frozen=True, slots=True)
class ExportText:
    """One exported artefact: its ``text``, a suggested file name, and notes for a person.

    ``notes`` say what the runner cannot express or does differently from the settings
    (one plain sentence each); an empty tuple means the export is exact.
    """

    text: str
    filename: str
    notes: tuple[str, ...] = ()


def backup_path(path: Path, *, now: float | None = None) -> Path:
    """Return a free backup name beside ``path``: ``name.YYYYmmdd-HHMMSS[.N].bak``."""
    stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(now))
    candidate = path.with_name(f"{path.name}.{stamp}.bak")
    n = 1
    while candidate.exists():
        candidate = path.with_name(f"{path.name}.{stamp}.{n}.bak")
        n += 1
    return candidate


def write_text_atomic(
    path: str | os.PathLike[str],
    text: str,
    *,
    overwrite: bool = False,
    backup: bool = False,
    make_parents: bool = False,
) -> Path:
    """Write ``text`` (UTF-8, newlines as given) to ``path`` atomically and return the path.

    Raise :class:`~app.errors.ExportError` when ``path`` exists and ``overwrite`` is false,
    when the folder is missing (unless ``make_parents``) or not writable, and when the disk
    is full; no temporary or partial file is left behind in any case. ``backup`` (with
    ``overwrite``) first copies an existing file to :func:`backup_path`.
    """
    target = Path(path).expanduser()
    data = text.encode("utf-8")
    folder = target.parent
    if make_parents:
        try:
            folder.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise ExportError(f"{folder}: cannot create the folder: {_reason(err)}") from err
    try:
        folder_ok = folder.is_dir()
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as err:  # a name too long, a loop of links, no permission
        raise ExportError(f"{_short(target)}: cannot write it: {_reason(err)}") from err
    if not folder_ok:
        raise ExportError(f"{target}: the folder {folder} does not exist")
    if st is not None and stat.S_ISDIR(st.st_mode):
        raise ExportError(f"{target}: is a folder, not a file")
    if st is not None and not stat.S_ISREG(st.st_mode):
        # A device (/dev/null), a pipe or a socket: replacing it would break the system.
        raise ExportError(f"{target}: is not a regular file (a device, pipe or socket); refused")
    if st is not None and not overwrite:
        raise ExportError(f"{target}: already exists (ask to overwrite it)")

    try:
        fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=folder)
    except OSError as err:
        raise ExportError(f"{_short(target)}: cannot write in {folder}: {_reason(err)}") from err
    tmp = Path(tmp_name)
    try:
        try:
            # mkstemp creates 0600; give the file the permissions a plain open() would.
            if os.name != "nt":
                os.fchmod(fd, 0o666 & ~_UMASK)
            _write_all(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if overwrite:
            if backup and target.is_file():
                _copy_no_overwrite(target, backup_path(target))
            os.replace(tmp, target)
        else:
            _link_no_overwrite(tmp, target)
        _fsync_folder(folder)
    except ExportError:
        _remove_quietly(tmp)
        raise
    except OSError as err:
        _remove_quietly(tmp)
        raise ExportError(f"{target}: could not write the file: {_reason(err)}") from err
    except BaseException:
        _remove_quietly(tmp)
        raise
    return target


def _copy_no_overwrite(source: Path, target: Path) -> None:
    """Copy ``source`` to ``target`` whole or not at all (a full disk leaves no stub)."""
    fd, tmp_name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    os.close(fd)
    tmp = Path(tmp_name)
    try:
        shutil.copy2(source, tmp)
        with tmp.open("rb+") as f:
            os.fsync(f.fileno())
        _link_no_overwrite(tmp, target)
    except BaseException:
        _remove_quietly(tmp)
        raise


def _short(path: Path, keep: int = 80) -> str:
    """Return ``path`` shortened in the middle for a one-line message."""
    text = str(path)
    return text if len(text) <= keep else f"{text[: keep // 2]}…{text[-keep // 2 :]}"


def _write_all(fd: int, data: bytes) -> None:
    """Write every byte of ``data`` to ``fd`` (os.write may write less than asked)."""
    view = memoryview(data)
    while view:
        written = os.write(fd, view)
        view = view[written:]


def _link_no_overwrite(tmp: Path, target: Path) -> None:
    """Move ``tmp`` to ``target`` unless ``target`` exists, atomically where links work."""
    try:
        os.link(tmp, target)
    except FileExistsError as err:
        raise ExportError(f"{target}: already exists (ask to overwrite it)") from err
    except OSError as err:
        if err.errno not in (errno.EPERM, errno.ENOTSUP, errno.EOPNOTSUPP, errno.EXDEV):
            raise
        # No hard links here (some network and FAT file systems): the best left is a check
        # followed by a rename, racy only against another writer of the same name.
        if target.exists():
            raise ExportError(f"{target}: already exists (ask to overwrite it)") from err
        os.replace(tmp, target)
        return
    tmp.unlink()


def _fsync_folder(folder: Path) -> None:
    """Make the rename durable; not possible (nor needed) on Windows."""
    if os.name == "nt":
        return
    with contextlib.suppress(OSError):
        dir_fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)


def _read_umask() -> int:
    # os.umask can only be read by setting it; do it once, at import, not per write.
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


_UMASK = _read_umask()


def _remove_quietly(path: Path) -> None:
    with contextlib.suppress(OSError):
        path.unlink()


def _reason(err: OSError) -> str:
    if err.errno == errno.ENOSPC:
        return "the disk is full (no space left on the device); nothing was written"
    if err.errno == errno.EFBIG:
        return "the file is larger than this process may write (file size limit)"
    if err.errno in (errno.EACCES, errno.EPERM):
        return "permission denied"
    if err.errno == errno.EROFS:
        return "the file system is read-only"
    if err.errno == errno.ENAMETOOLONG:
        return "the file name is too long for this disk"
    return err.strerror or str(err)
