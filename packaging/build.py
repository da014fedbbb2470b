"""Build ggtune's one-folder app for this operating system with PyInstaller.

    .venv/bin/python packaging/build.py            # or: python3 tasks.py bundle
    .venv/bin/python packaging/build.py --dist /tmp/out --work /tmp/build

Run it with the Python of the set-up's ``.venv`` (after ``python3 tasks.py run`` or
``test``) with the ``package`` extra installed (``pip install -e .[package]``): the bundle
carries that environment's llama-cpp-python, so it has the backend tasks.py built (CPU,
CUDA or Metal). Writes ``<dist>/ggtune/`` (macOS: also ``<dist>/ggtune.app``) and prints
the executable, the size and the build time. ``--work`` holds PyInstaller's scratch files
(default: a temporary folder, removed afterwards), so nothing is left in the repository
but ``dist/`` (git-ignored) unless ``--dist`` points elsewhere.
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SPEC = ROOT / "packaging" / "ggtune.spec"
MIB = 1024**2


def folder_bytes(folder: Path) -> int:
    """Return the bytes of the files under ``folder`` (links not followed)."""
    total = 0
    for path in folder.rglob("*"):
        if path.is_file() and not path.is_symlink():
            total += path.stat().st_size
    return total


def executable(dist: Path) -> Path:
    """Return the bundle's executable under ``dist``."""
    name = "ggtune.exe" if sys.platform == "win32" else "ggtune"
    return dist / "ggtune" / name


def build(dist: Path, work: Path | None = None) -> Path:
    """Run PyInstaller on the spec into ``dist``; return the executable.

    Raises ``RuntimeError`` with the reason when PyInstaller is missing or fails.
    """
    try:
        import PyInstaller  # noqa: F401
    except ImportError as err:
        raise RuntimeError(
            f"PyInstaller is not installed in {sys.prefix}; install the package extra: "
            f"{sys.executable} -m pip install -e '.[package]'"
        ) from err
    with tempfile.TemporaryDirectory(prefix="ggtune-pyinstaller-") as scratch:
        workpath = work if work is not None else Path(scratch)
        command = [
            sys.executable,
            "-m",
            "PyInstaller",
            "--noconfirm",
            "--clean",
            "--log-level=WARN",
            f"--distpath={dist}",
            f"--workpath={workpath}",
            str(SPEC),
        ]
        # PyInstaller imports the app's packages to collect them; run from the root.
        env = dict(os.environ, PYTHONDONTWRITEBYTECODE="1")
        code = subprocess.run(command, cwd=ROOT, env=env, check=False).returncode
    if code != 0:
        raise RuntimeError(f"PyInstaller failed (exit {code}); see its output above")
    exe = executable(dist)
    if not exe.is_file():
        raise RuntimeError(f"PyInstaller finished but {exe} is missing")
    return exe


def main(argv: list[str] | None = None) -> int:
    """Build the bundle; print where it is, its size and the time taken."""
    parser = argparse.ArgumentParser(description="Build ggtune's app bundle for this OS.")
    parser.add_argument("--dist", type=Path, default=ROOT / "dist", help="output folder")
    parser.add_argument("--work", type=Path, default=None, help="PyInstaller's scratch folder")
    args = parser.parse_args(argv)
    dist = args.dist.resolve()
    if (dist / "ggtune").exists():
        shutil.rmtree(dist / "ggtune")
    started = time.monotonic()
    try:
        exe = build(dist, args.work)
    except RuntimeError as err:
        print(f"build: {err}", file=sys.stderr)
        return 1
    elapsed = time.monotonic() - started
    size = folder_bytes(exe.parent)
    print(f"built {exe}")
    print(f"size: {size / MIB:.0f} MiB in {exe.parent}")
    if sys.platform == "darwin" and (dist / "ggtune.app").is_dir():
        print(f"app bundle: {dist / 'ggtune.app'}")
    print(f"time: {elapsed:.0f} s ({os.cpu_count()} CPU cores)")
    print(f"check it: {exe} --selftest")
    return 0


if __name__ == "__main__":
    sys.exit(main())
