"""The system libraries Qt's platform plugins need, derived from the installed PySide6.

ui/desktop/preflight.py's SYSTEM_LIBRARIES maps every shared library that PySide6's
``libqxcb.so`` (X11), ``libqwayland.so`` and ``libqoffscreen.so`` load, directly or through
the Qt libraries PySide6 ships (libQt6XcbQpa, libQt6Gui, …), to its package on
Debian/Ubuntu, Fedora and Arch. ``.ci/run`` installs the Debian ones and README's Quick
start lists all three. These tests read the ELF NEEDED entries (and ``ldd``) of the
installed files, so a PySide6 upgrade that adds a library fails here, naming it, instead of
aborting a user's app.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest

from ui.desktop import preflight

ROOT = Path(__file__).resolve().parents[2]
PLATFORMS = ("xcb", "wayland", "offscreen")

pytestmark = pytest.mark.skipif(not preflight.LINUX_LIKE, reason="ELF platform plugins")


@pytest.fixture(scope="module")
def qt() -> preflight.QtTree:
    pytest.importorskip("PySide6", reason="the desktop app needs PySide6 (ggtune[desktop])")
    tree = preflight.find_qt()
    assert tree is not None, "PySide6 is installed but its Qt plugins were not found"
    return tree


@pytest.mark.parametrize("platform", PLATFORMS)
def test_every_library_of_the_plugin_is_mapped_to_packages(
    qt: preflight.QtTree, platform: str
) -> None:
    shipped, system = preflight.qt_closure(qt, qt.plugin(platform))
    if platform == "xcb":
        assert "libQt6XcbQpa.so.6" in shipped
        assert {"libxcb-icccm.so.4", "libxcb-keysyms.so.1", "libxcb-cursor.so.0"} <= set(system)
    unmapped = [soname for soname in system if soname not in preflight.SYSTEM_LIBRARIES]
    assert not unmapped, (
        f"PySide6's {platform} plugin needs {', '.join(unmapped)}, which "
        "ui/desktop/preflight.py SYSTEM_LIBRARIES does not map to a package: add its "
        "Debian, Fedora and Arch packages there and to README's Quick start"
    )


@pytest.mark.parametrize("target", ["plugins/platforms/libqxcb.so", "lib/libQt6XcbQpa.so.6"])
def test_ldd_resolves_every_library_of_the_plugin(qt: preflight.QtTree, target: str) -> None:
    """After the set-up's packages (.ci/run) nothing the plugin loads is "not found"."""
    ldd = shutil.which("ldd")
    if ldd is None:
        pytest.skip("ldd is not installed")
    path = qt.plugins.parent / target
    out = subprocess.run([ldd, str(path)], capture_output=True, text=True, check=True).stdout
    assert "libQt6Gui.so.6" in out
    missing = list(dict.fromkeys(re.findall(r"^\s*(\S+) => not found", out, re.MULTILINE)))
    packages = preflight.packages_for(missing, "debian")
    assert not missing, (
        f"ldd {target}: {', '.join(missing)} not found; .ci/run installs "
        f"{' '.join(packages) or 'no package for them'} (`bash .ci/run --packages-only`)"
    )


def test_the_elf_reader_agrees_with_readelf(qt: preflight.QtTree) -> None:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("readelf (binutils) is not installed")
    for path in (qt.plugin("xcb"), qt.plugins.parent / "lib" / "libQt6Gui.so.6"):
        out = subprocess.run(
            [readelf, "-d", str(path)], capture_output=True, text=True, check=True
        ).stdout
        assert preflight.elf_needed(path) == re.findall(r"\(NEEDED\).*\[(.+)\]", out)


def test_ci_installs_the_derived_debian_packages_and_xvfb() -> None:
    script = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert "python3 ui/desktop/preflight.py --packages debian --missing)" in script
    assert "qt_missing+=(xvfb)" in script
    listed = subprocess.run(
        ["python3", str(ROOT / "ui" / "desktop" / "preflight.py"), "--packages", "debian"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    assert {"libxcb-icccm4", "libxcb-keysyms1", "libxcb-cursor0"} <= set(listed)
    assert listed == preflight.packages_for(preflight.SYSTEM_LIBRARIES, "debian")


@pytest.mark.parametrize("distro", preflight.DISTRIBUTIONS)
def test_readme_quick_start_lists_every_package(distro: str) -> None:
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    quick = readme[readme.index("## Quick start") : readme.index("## Desktop app")]
    wanted = preflight.packages_for(preflight.SYSTEM_LIBRARIES, distro)
    wanted.append(preflight.XVFB_PACKAGES[distro])
    core = {"libc6", "glibc", "libstdc++6", "libstdc++", "gcc-libs", "libgcc-s1", "libgcc"}
    absent = [
        p
        for p in wanted
        if p not in core and not re.search(rf"(?<![\w-]){re.escape(p)}(?![\w-])", quick)
    ]
    assert not absent, f"README's Quick start does not list {distro} packages {absent}"
