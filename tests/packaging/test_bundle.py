"""Build the Linux bundle with PyInstaller (packaging/build.py) and launch it.

Slow: the build takes about 40 s on 2 cores here, the launches a few seconds each. It
builds into a temporary folder (PyInstaller's scratch files too), so the repository is
left as it was; ``python3 tasks.py test`` runs it, ``-m "not bundle"`` leaves it out.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import ModuleType

import pytest

from tests.packaging.conftest import ABSENT, STUBBED

ROOT = Path(__file__).resolve().parents[2]

pytestmark = [
    pytest.mark.slow,
    pytest.mark.bundle,
    pytest.mark.skipif(
        not sys.platform.startswith("linux"), reason="only the Linux bundle is built in tests"
    ),
    pytest.mark.skipif(
        importlib.util.find_spec("PyInstaller") is None
        or importlib.util.find_spec("PySide6") is None,
        reason="needs ggtune[desktop,package] (PyInstaller and PySide6)",
    ),
]


def _load_build_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ggtune_build", ROOT / "packaging" / "build.py")
    assert spec is not None, "packaging/build.py must exist"
    assert spec.loader is not None, "packaging/build.py must be loadable"
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def bundle(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Build the bundle once for this module; return its executable."""
    before = sorted(p.name for p in ROOT.iterdir())
    dist = tmp_path_factory.mktemp("dist")
    work = tmp_path_factory.mktemp("work")
    build = _load_build_module()
    started = time.monotonic()
    exe = build.build(dist, work)
    size_mib = build.folder_bytes(exe.parent) / 1024**2
    print(f"\nbundle built in {time.monotonic() - started:.0f} s, {size_mib:.0f} MiB")
    assert sorted(p.name for p in ROOT.iterdir()) == before, "the build wrote into the repo"
    assert isinstance(exe, Path)
    return exe


def _launch(exe: Path, *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, QT_QPA_PLATFORM="offscreen")
    env.pop("PYTHONPATH", None)  # the bundle must not need the source tree
    return subprocess.run(
        [str(exe), *args],
        cwd=exe.parent.parent,  # not the repository: nothing may be read from there
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def test_bundle_selftest_estimates_and_dry_runs_in_a_frozen_child(
    bundle: Path, gemma_path: Path
) -> None:
    result = _launch(bundle, "--selftest", "--model", str(gemma_path))
    print(result.stdout)
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    assert "frozen: True" in out
    assert "selftest: main window shown" in out
    assert "selftest: estimate: " in out
    assert "selftest: dry run ok: gemma3 270M" in out
    assert out.splitlines()[-1].startswith("selftest: ok in ")


def test_bundle_is_the_cli_too(bundle: Path, gemma_path: Path) -> None:
    result = _launch(bundle, "inspect", str(gemma_path), "--json")
    assert result.returncode == 0, result.stderr
    assert '"architecture": "gemma3"' in result.stdout
    # hw --profiles reads profiles/hardware from inside the bundle (app/paths.py)
    result = _launch(bundle, "hw", "--profiles")
    assert result.returncode == 0, result.stderr
    assert "RTX 4090" in result.stdout


def test_bundle_selftest_says_why_without_a_model(bundle: Path, tmp_path: Path) -> None:
    result = _launch(bundle, "--selftest", "--model", str(tmp_path / "none.gguf"))
    assert result.returncode == 1
    assert "selftest: FAILED: no model file at" in result.stdout


def test_bundle_contents(bundle: Path) -> None:
    internal = bundle.parent / "_internal"
    lib = internal / "llama_cpp" / "lib"
    assert (lib / "libllama.so").is_file()
    assert (lib / "libggml.so.0").is_file()
    for folder in ("hardware", "models", "quality"):
        assert any((internal / "profiles" / folder).iterdir()), folder
    assert (internal / "icons" / "ggtune-256.png").is_file()
    platforms = internal / "PySide6" / "Qt" / "plugins" / "platforms"
    assert {p.name for p in platforms.iterdir()} == {
        "libqoffscreen.so",
        "libqxcb.so",
        "libqwayland.so",
    }
    qt_libs = {p.name for p in (internal / "PySide6" / "Qt" / "lib").iterdir()}
    for unused in ("libQt6Qml.so.6", "libQt6Quick.so.6", "libQt6Pdf.so.6"):
        assert unused not in qt_libs


def _gui_launch(exe: Path, *args: str, **env_extra: str) -> subprocess.CompletedProcess[str]:
    """Launch the bundle as a desktop would: no Qt platform chosen, no source tree."""
    env = dict(os.environ, **env_extra)
    for name in ("QT_QPA_PLATFORM", "WAYLAND_DISPLAY", "XDG_SESSION_TYPE", "PYTHONPATH"):
        env.pop(name, None)
    if "DISPLAY" not in env_extra:
        env.pop("DISPLAY", None)
    return subprocess.run(
        [str(exe), *args],
        cwd=exe.parent.parent,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


@pytest.mark.parametrize("args", [[], ["MISSING.gguf"]], ids=["double-click", "MISSING.gguf"])
def test_bundle_says_one_line_where_qt_would_abort(
    bundle: Path, broken_libxcb_dir: Path, args: list[str]
) -> None:
    # The bundle's own launcher (packaging/launcher.py, frozen) runs the preflight. Its
    # libxcb.so.1 is made unloadable: PyInstaller copies the xcb-util libraries it finds
    # into the bundle (they win over LD_LIBRARY_PATH there), not libxcb itself.
    result = _gui_launch(bundle, *args, DISPLAY=":97", LD_LIBRARY_PATH=str(broken_libxcb_dir))
    assert result.returncode != -signal.SIGABRT, "Qt aborted: the preflight did not run"
    assert result.returncode == 2, result.stderr
    assert result.stdout == ""
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("ggtune: the desktop app cannot start: Qt's X11 plugin (xcb) needs")
    assert "libxcb.so.1" in line
    assert line.endswith("(`ggtune estimate MODEL.gguf` works without a window)")


def _link_or_copy(src: str, dst: str) -> None:
    try:
        os.link(src, dst)
    except OSError:
        shutil.copy2(src, dst)


def test_a_carried_library_needing_what_the_machine_lacks_is_one_line(
    bundle: Path, broken_lib_dir: Path, tmp_path: Path
) -> None:
    # A copy of the bundle whose own libxcb-icccm.so.4 needs a library this machine lacks
    # (the stub's ABSENT): libqxcb.so would fail to load, which is where Qt
    # aborts with the "xcb-cursor0 is needed" message of issue 12. The preflight follows
    # the carried library's NEEDED entries and names the one that is really missing.
    copy = tmp_path / "ggtune"
    shutil.copytree(bundle.parent, copy, copy_function=_link_or_copy)
    carried = copy / "_internal" / STUBBED
    assert carried.is_file(), f"PyInstaller no longer copies {STUBBED} into the bundle"
    carried.unlink()  # a hard link: the original bundle keeps its file
    shutil.copy2(broken_lib_dir / STUBBED, carried)
    result = _gui_launch(copy / bundle.name, DISPLAY=":97")
    assert result.returncode != -signal.SIGABRT, "Qt aborted: the preflight did not run"
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert line.startswith("ggtune: the desktop app cannot start: Qt's X11 plugin (xcb) needs")
    assert ABSENT in line


def test_bundle_without_a_display_says_one_line(bundle: Path) -> None:
    result = _gui_launch(bundle)
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.strip().splitlines()
    assert "no display: neither DISPLAY (X11) nor WAYLAND_DISPLAY is set" in line
