"""Qt in these tests runs offscreen, like tests/ui/desktop (CI has no display).

``broken_lib_dir``: a folder to put first on LD_LIBRARY_PATH, whose ``libxcb-icccm.so.4``
is a real shared object (compiled here) that cannot load, because the library it needs is
gone: the dynamic loader picks it and fails, as on a machine without libxcb-icccm4.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

import pytest

STUBBED = "libxcb-icccm.so.4"
ABSENT = "libggtune-absent.so.1"
"""The library each stub needs, which is never there."""

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")


def make_broken_lib(work: Path, soname: str) -> Path:
    """Return a folder under ``work`` holding ``soname``: real ELF, whose dependency is gone."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("no C compiler to build the stub library (the set-up needs one anyway)")
    source = work / "empty.c"
    source.write_text("int ggtune_stub;\n", encoding="utf-8")
    absent = work / ABSENT
    build = [cc, "-shared", "-fPIC", "-o"]
    subprocess.run([*build, absent, source, f"-Wl,-soname,{ABSENT}"], check=True)
    stub_dir = work / "lib"
    stub_dir.mkdir()
    link = [source, f"-Wl,-soname,{soname}", "-Wl,--no-as-needed", absent]
    subprocess.run([*build, stub_dir / soname, *link], check=True)
    absent.unlink()  # the stub's own dependency is gone: loading the stub fails
    return stub_dir


@pytest.fixture(scope="module")
def broken_lib_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return a folder whose libxcb-icccm.so.4 is a real shared object that cannot load."""
    return make_broken_lib(tmp_path_factory.mktemp("stub"), STUBBED)


@pytest.fixture(scope="module")
def broken_libxcb_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same for libxcb.so.1, which the bundle does not carry (it carries xcb-icccm)."""
    return make_broken_lib(tmp_path_factory.mktemp("stub-xcb"), "libxcb.so.1")
