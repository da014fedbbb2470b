"""Check, before Qt starts, that the desktop app can open a window; say what is missing.

Qt aborts the whole process (SIGABRT, a core dump) when its platform plugin cannot be
loaded, and its message names the wrong library ("xcb-cursor0 or libxcb-cursor0 is
needed" when libxcb-icccm4 is what is missing). So every GUI entry point (``ggtune``
without arguments or with a model, ``ggtune-desktop``, ``python -m ui.desktop``, the
bundle, ``--selftest``) calls :func:`ensure_gui` first. It picks the platform Qt will use
(``QT_QPA_PLATFORM`` if set; else X11 ``xcb`` when ``DISPLAY`` is set, Wayland when
``WAYLAND_DISPLAY`` is, in the session's order), loads that platform plugin of the
installed PySide6 with ctypes and connects to the display. When that fails and another
platform works (Wayland when X11's libraries are missing), it sets ``QT_QPA_PLATFORM`` to
it; when none works it prints **one line**, naming the libraries that cannot be loaded and
the command that installs them on this distribution, and exits with status 2.

The libraries are found by reading the ELF ``NEEDED`` entries of the plugin and of the
Qt libraries it pulls in from PySide6 (:func:`elf_needed`); each one that PySide6 does not
ship is loaded by name, as the dynamic loader will. :data:`SYSTEM_LIBRARIES` maps each of
them to its package on Debian/Ubuntu, Fedora and Arch: ``.ci/run`` installs the Debian
ones (``python3 ui/desktop/preflight.py --packages debian``, this file run as a script
with the standard library alone), README's Quick start lists all three, and
tests/packaging/test_gui_libraries.py fails naming any library of the installed plugin
that the table lacks.

Only the standard library is imported here: the module runs before Qt, and as a script
before any virtual environment exists.

Example::

    $ DISPLAY=:0 ggtune
    ggtune: the desktop app cannot start: Qt's X11 plugin (xcb) needs libxcb-icccm.so.4 and
    libxcb-keysyms.so.1, which cannot be loaded; install them with `sudo apt install
    libxcb-icccm4 libxcb-keysyms1` (`ggtune estimate MODEL.gguf` works without a window)
"""

from __future__ import annotations

import argparse
import ctypes
import importlib.util
import os
import struct
import sys
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

EXIT_NO_GUI = 2
"""The exit status when no window can be opened (as for a usage error: not a crash)."""

LINUX_LIKE = sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd"))

# soname -> (Debian/Ubuntu, Fedora, Arch) package. Derived from the ELF NEEDED entries of
# PySide6 6.11's plugins/platforms/libqxcb.so, libqwayland.so, libqoffscreen.so and the
# Qt libraries they load (libQt6XcbQpa, libQt6WaylandClient, libQt6Gui, libQt6Core,
# libQt6DBus, libQt6Widgets); PySide6 ships ICU and the Qt libraries itself.
# tests/packaging/test_gui_libraries.py re-derives the list from the installed PySide6.
SYSTEM_LIBRARIES: Mapping[str, tuple[str, str, str]] = {
    # X11 and its xcb extensions (libqxcb.so, libQt6XcbQpa.so.6)
    "libxcb.so.1": ("libxcb1", "libxcb", "libxcb"),
    "libxcb-cursor.so.0": ("libxcb-cursor0", "xcb-util-cursor", "xcb-util-cursor"),
    "libxcb-icccm.so.4": ("libxcb-icccm4", "xcb-util-wm", "xcb-util-wm"),
    "libxcb-image.so.0": ("libxcb-image0", "xcb-util-image", "xcb-util-image"),
    "libxcb-keysyms.so.1": ("libxcb-keysyms1", "xcb-util-keysyms", "xcb-util-keysyms"),
    "libxcb-randr.so.0": ("libxcb-randr0", "libxcb", "libxcb"),
    "libxcb-render.so.0": ("libxcb-render0", "libxcb", "libxcb"),
    "libxcb-render-util.so.0": (
        "libxcb-render-util0",
        "xcb-util-renderutil",
        "xcb-util-renderutil",
    ),
    "libxcb-shape.so.0": ("libxcb-shape0", "libxcb", "libxcb"),
    "libxcb-shm.so.0": ("libxcb-shm0", "libxcb", "libxcb"),
    "libxcb-sync.so.1": ("libxcb-sync1", "libxcb", "libxcb"),
    "libxcb-util.so.1": ("libxcb-util1", "xcb-util", "xcb-util"),
    "libxcb-xfixes.so.0": ("libxcb-xfixes0", "libxcb", "libxcb"),
    "libxcb-xkb.so.1": ("libxcb-xkb1", "libxcb", "libxcb"),
    "libX11.so.6": ("libx11-6", "libX11", "libx11"),
    "libX11-xcb.so.1": ("libx11-xcb1", "libX11-xcb", "libx11"),
    "libxkbcommon.so.0": ("libxkbcommon0", "libxkbcommon", "libxkbcommon"),
    "libxkbcommon-x11.so.0": ("libxkbcommon-x11-0", "libxkbcommon-x11", "libxkbcommon-x11"),
    # Wayland (libqwayland.so, libQt6WaylandClient.so.6)
    "libwayland-client.so.0": ("libwayland-client0", "libwayland-client", "wayland"),
    "libwayland-cursor.so.0": ("libwayland-cursor0", "libwayland-cursor", "wayland"),
    # Qt's GUI core (libQt6Gui, libQt6Core, libQt6DBus)
    "libGL.so.1": ("libgl1", "libglvnd-glx", "libglvnd"),
    "libEGL.so.1": ("libegl1", "libglvnd-egl", "libglvnd"),
    "libfontconfig.so.1": ("libfontconfig1", "fontconfig", "fontconfig"),
    "libfreetype.so.6": ("libfreetype6", "freetype", "freetype2"),
    "libglib-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libgthread-2.0.so.0": ("libglib2.0-0", "glib2", "glib2"),
    "libdbus-1.so.3": ("libdbus-1-3", "dbus-libs", "dbus"),
    "libz.so.1": ("zlib1g", "zlib-ng-compat", "zlib"),
    "libzstd.so.1": ("libzstd1", "libzstd", "zstd"),
    # the C and C++ runtimes (on every system, listed so that nothing goes unmapped)
    "libc.so.6": ("libc6", "glibc", "glibc"),
    "libm.so.6": ("libc6", "glibc", "glibc"),
    "libpthread.so.0": ("libc6", "glibc", "glibc"),
    "libdl.so.2": ("libc6", "glibc", "glibc"),
    "librt.so.1": ("libc6", "glibc", "glibc"),
    "ld-linux-x86-64.so.2": ("libc6", "glibc", "glibc"),
    "ld-linux-aarch64.so.1": ("libc6", "glibc", "glibc"),
    "libstdc++.so.6": ("libstdc++6", "libstdc++", "gcc-libs"),
    "libgcc_s.so.1": ("libgcc-s1", "libgcc", "gcc-libs"),
}
DISTRIBUTIONS = ("debian", "fedora", "arch")
XVFB_PACKAGES = {"debian": "xvfb", "fedora": "xorg-x11-server-Xvfb", "arch": "xorg-server-xvfb"}
"""Xvfb, the X server the end-to-end test (tests/ui/test_e2e_xvfb.py) runs the app on."""

_INSTALL = {
    "debian": "apt install",
    "fedora": "dnf install",
    "arch": "pacman -S --needed",
}
_PLATFORM_TITLES = {"xcb": "X11 plugin (xcb)", "wayland": "Wayland plugin"}


# --- ELF ----------------------------------------------------------------------------------


def elf_needed(path: Path) -> list[str]:
    """Return the ``DT_NEEDED`` entries (sonames) of the ELF shared object at ``path``.

    Reads the dynamic section through the section headers, as ``readelf -d`` does, and only
    those bytes (libicudata alone is 30 MiB); raises ``ValueError`` for a file that is not
    ELF or has no dynamic section.
    """
    with path.open("rb") as handle:

        def read(offset: int, size: int) -> bytes:
            handle.seek(offset)
            data = handle.read(size)
            if len(data) != size:
                raise ValueError(f"{path} is truncated")
            return data

        ident = read(0, 64)
        if ident[:4] != b"\x7fELF":
            raise ValueError(f"{path} is not an ELF file")
        is64 = ident[4] == 2
        end = "<" if ident[5] == 1 else ">"
        if is64:
            (shoff,) = struct.unpack_from(end + "Q", ident, 0x28)
            shentsize, shnum = struct.unpack_from(end + "HH", ident, 0x3A)
            section, dyn_entry = end + "IIQQQQIIQQ", end + "qQ"
        else:
            (shoff,) = struct.unpack_from(end + "I", ident, 0x20)
            shentsize, shnum = struct.unpack_from(end + "HH", ident, 0x2E)
            section, dyn_entry = end + "IIIIIIIIII", end + "iI"
        table = read(shoff, shentsize * shnum)
        headers = [struct.unpack_from(section, table, i * shentsize) for i in range(shnum)]
        for header in headers:
            if header[1] != 6:  # SHT_DYNAMIC
                continue
            dynamic = read(header[4], header[5])
            strtab = headers[header[6]]
            strings = read(strtab[4], strtab[5])
            needed = []
            for tag, value in struct.iter_unpack(dyn_entry, dynamic):
                if tag == 0:  # DT_NULL
                    break
                if tag == 1:  # DT_NEEDED
                    needed.append(strings[value : strings.index(b"\0", value)].decode())
            return needed
    raise ValueError(f"{path} has no dynamic section")


# --- where PySide6 is ---------------------------------------------------------------------


@dataclass(frozen=True)
class QtTree:
    """The Qt of the installed (or bundled) PySide6: its libraries and plugins."""

    lib_dirs: tuple[Path, ...]
    plugins: Path

    def plugin(self, platform: str) -> Path:
        return self.plugins / "platforms" / f"libq{platform}.so"

    def bundled(self, soname: str) -> Path | None:
        """Return the file of ``soname`` when PySide6 (or the bundle) ships it."""
        for folder in self.lib_dirs:
            candidate = folder / soname
            if candidate.is_file():
                return candidate
        return None


def find_qt() -> QtTree | None:
    """Return PySide6's Qt folders (without importing PySide6), or None if it is absent."""
    try:
        spec = importlib.util.find_spec("PySide6")
    except (ImportError, ValueError):
        spec = None
    roots = [Path(p) for p in (spec.submodule_search_locations or [])] if spec else []
    meipass = getattr(sys, "_MEIPASS", None)
    if getattr(sys, "frozen", False) and isinstance(meipass, str):
        roots.append(Path(meipass) / "PySide6")
    for root in roots:
        qt = root / "Qt"
        if (qt / "plugins" / "platforms").is_dir():
            lib_dirs = [qt / "lib"]
            if isinstance(meipass, str):
                lib_dirs.append(Path(meipass))  # PyInstaller puts some libraries at the top
            return QtTree(tuple(d for d in lib_dirs if d.is_dir()), qt / "plugins")
    return None


def qt_closure(qt: QtTree, start: Path) -> tuple[list[str], list[str]]:
    """Return (Qt libraries PySide6 ships, other libraries) that ``start`` needs, in order.

    Follows NEEDED through the libraries PySide6 ships (libQt6XcbQpa → libQt6Gui → …); the
    others are the system's.
    """
    bundled: list[str] = []
    system: list[str] = []
    todo = [start]
    seen: set[str] = set()
    while todo:
        for soname in elf_needed(todo.pop(0)):
            if soname in seen:
                continue
            seen.add(soname)
            shipped = qt.bundled(soname)
            if shipped is not None:
                bundled.append(soname)
                todo.append(shipped)
            else:
                system.append(soname)
    return bundled, system


# --- the check ----------------------------------------------------------------------------


def _loads(target: str) -> str | None:
    """Load ``target`` (a soname or a path) with the dynamic loader; return its error."""
    try:
        ctypes.CDLL(target, mode=os.RTLD_LAZY | getattr(os, "RTLD_LOCAL", 0))
    except OSError as err:
        return str(err)
    return None


def _display_error(platform: str) -> str | None:
    """Connect to the X server or Wayland compositor the environment names; return why not."""
    if platform == "xcb":
        xcb = ctypes.CDLL("libxcb.so.1")
        xcb.xcb_connect.restype = ctypes.c_void_p
        xcb.xcb_connect.argtypes = [ctypes.c_char_p, ctypes.c_void_p]
        xcb.xcb_connection_has_error.argtypes = [ctypes.c_void_p]
        xcb.xcb_disconnect.argtypes = [ctypes.c_void_p]
        connection = xcb.xcb_connect(None, None)
        failed = xcb.xcb_connection_has_error(connection) if connection else 1
        if connection:
            xcb.xcb_disconnect(connection)
        display = os.environ.get("DISPLAY", "")
        return f"cannot connect to the X server at DISPLAY={display}" if failed else None
    if platform == "wayland":
        wayland = ctypes.CDLL("libwayland-client.so.0")
        wayland.wl_display_connect.restype = ctypes.c_void_p
        wayland.wl_display_connect.argtypes = [ctypes.c_char_p]
        wayland.wl_display_disconnect.argtypes = [ctypes.c_void_p]
        handle = wayland.wl_display_connect(None)
        if not handle:
            name = os.environ.get("WAYLAND_DISPLAY", "")
            return f"cannot connect to the Wayland compositor WAYLAND_DISPLAY={name}"
        wayland.wl_display_disconnect(handle)
    return None


@dataclass
class PlatformCheck:
    """What stops Qt's ``platform`` plugin: libraries that do not load, or the display."""

    platform: str
    missing: list[str] = field(default_factory=list)
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return not self.missing and self.problem is None


def check_platform(qt: QtTree, platform: str, *, connect: bool = True) -> PlatformCheck:
    """Load ``platform``'s plugin and the libraries it needs; optionally connect to the display."""
    result = PlatformCheck(platform)
    plugin = qt.plugin(platform)
    if not plugin.is_file():
        result.problem = f"PySide6 has no {platform} platform plugin ({plugin})"
        return result
    try:
        _, system = qt_closure(qt, plugin)
    except (OSError, ValueError) as err:
        result.problem = f"cannot read {plugin}: {err}"
        return result
    result.missing = [soname for soname in system if _loads(soname) is not None]
    if result.missing:
        return result
    error = _loads(str(plugin))
    if error is not None:
        result.problem = f"Qt's {platform} plugin cannot be loaded: {error}"
    elif connect:
        result.problem = _display_error(platform)
    return result


# --- the distribution and its install command ---------------------------------------------


def os_release(path: Path = Path("/etc/os-release")) -> dict[str, str]:
    """Return /etc/os-release as a dict (empty when unreadable)."""
    values: dict[str, str] = {}
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return values
    for line in text.splitlines():
        key, sep, value = line.partition("=")
        if sep:
            values[key.strip()] = value.strip().strip("\"'")
    return values


def distribution(release: Mapping[str, str] | None = None) -> str | None:
    """Return ``debian``, ``fedora`` or ``arch`` for this system's family, or None."""
    info = os_release() if release is None else release
    ids = [info.get("ID", ""), *info.get("ID_LIKE", "").split()]
    for name in ids:
        if name in ("debian", "ubuntu", "linuxmint", "pop", "raspbian"):
            return "debian"
        if name in ("fedora", "rhel", "centos", "rocky", "almalinux"):
            return "fedora"
        if name in ("arch", "manjaro", "endeavouros"):
            return "arch"
    return None


def packages_for(sonames: Iterable[str], distro: str) -> list[str]:
    """Return the packages (no repeats, in order) that provide ``sonames`` on ``distro``."""
    column = DISTRIBUTIONS.index(distro)
    found: list[str] = []
    for soname in sonames:
        row = SYSTEM_LIBRARIES.get(soname)
        if row is not None and row[column] not in found:
            found.append(row[column])
    return found


def install_command(sonames: Sequence[str], release: Mapping[str, str] | None = None) -> str:
    """Return the command that installs ``sonames`` here, or what to look for."""
    distro = distribution(release)
    packages = packages_for(sonames, distro) if distro else []
    if not distro or not packages:
        return f"install the packages that provide {', '.join(sonames)}"
    sudo = "" if hasattr(os, "geteuid") and os.geteuid() == 0 else "sudo "
    them = "it" if len(sonames) == 1 else "them"
    return f"install {them} with `{sudo}{_INSTALL[distro]} {' '.join(packages)}`"


# --- the entry points' call ---------------------------------------------------------------


def _names(items: Sequence[str]) -> str:
    return items[0] if len(items) == 1 else f"{', '.join(items[:-1])} and {items[-1]}"


def has_display(env: Mapping[str, str] | None = None) -> bool:
    """Whether a window system is named (X11 or Wayland; always on macOS and Windows)."""
    if not LINUX_LIKE:
        return True
    environ = os.environ if env is None else env
    return bool(environ.get("DISPLAY") or environ.get("WAYLAND_DISPLAY"))


def candidates(env: Mapping[str, str]) -> list[str]:
    """Return the platforms to try, in Qt's order for this session."""
    forced = env.get("QT_QPA_PLATFORM", "").strip()
    if forced:
        return [name.split(":", 1)[0] for name in forced.split(";") if name]
    order = ["xcb", "wayland"]
    if env.get("XDG_SESSION_TYPE") == "wayland":
        order.reverse()
    return [p for p in order if env.get("DISPLAY" if p == "xcb" else "WAYLAND_DISPLAY")]


def diagnose(
    env: Mapping[str, str] | None = None, qt: QtTree | None = None
) -> tuple[str | None, str | None]:
    """Return (the platform to use, None) or (None, the one line that says why none works)."""
    environ = os.environ if env is None else env
    if not LINUX_LIKE:
        return None, None  # macOS and Windows always have their one platform
    tree = qt if qt is not None else find_qt()
    if tree is None:
        return None, "PySide6 is not installed (pip install 'ggtune[desktop]')"
    tried = candidates(environ)
    if not tried:
        return None, (
            "no display: neither DISPLAY (X11) nor WAYLAND_DISPLAY is set; start ggtune from "
            "your desktop session, or use the command line (`ggtune estimate MODEL.gguf`)"
        )
    checks = []
    for platform in tried:
        if not tree.plugin(platform).is_file() and platform not in _PLATFORM_TITLES:
            return platform, None  # a plugin of the user's own choice: let Qt judge it
        check = check_platform(tree, platform, connect=platform in _PLATFORM_TITLES)
        if check.ok:
            return platform, None
        checks.append(check)
    return None, _explain(checks)


def _explain(checks: Sequence[PlatformCheck]) -> str:
    first = checks[0]
    title = _PLATFORM_TITLES.get(first.platform, f"{first.platform} platform plugin")
    if first.missing:
        line = (
            f"Qt's {title} needs {_names(first.missing)}, which cannot be loaded; "
            f"{install_command(first.missing)}"
        )
    else:
        line = f"Qt's {title}: {first.problem}"
    for other in checks[1:]:
        why = _names(other.missing) + " missing" if other.missing else other.problem
        line += f"; {_PLATFORM_TITLES.get(other.platform, other.platform)}: {why}"
    return line + " (`ggtune estimate MODEL.gguf` works without a window)"


def ensure_gui(env: dict[str, str] | None = None) -> None:
    """Make sure Qt can open a window; else print one line to stderr and exit 2.

    On success with a platform other than the one Qt would take first, sets
    ``QT_QPA_PLATFORM`` to it (Wayland when X11's libraries are missing). Call it before
    the first PySide6 import.
    """
    environ = os.environ if env is None else env
    platform, problem = diagnose(environ)
    if problem is not None:
        print(f"ggtune: the desktop app cannot start: {problem}", file=sys.stderr, flush=True)
        raise SystemExit(EXIT_NO_GUI)
    if platform is not None and not environ.get("QT_QPA_PLATFORM"):
        environ["QT_QPA_PLATFORM"] = platform


def main(argv: Sequence[str] | None = None) -> int:
    """``python3 ui/desktop/preflight.py``: check here, or list packages for the set-up."""
    parser = argparse.ArgumentParser(
        prog="preflight.py", description="Can the desktop app open a window here?"
    )
    parser.add_argument(
        "--packages",
        choices=DISTRIBUTIONS,
        help="print the system packages the desktop app (and its X11 test) needs, one a line",
    )
    parser.add_argument(
        "--missing",
        action="store_true",
        help="with --packages: only those whose libraries do not load here",
    )
    args = parser.parse_args(argv)
    if args.packages:
        sonames = [
            s
            for s in SYSTEM_LIBRARIES
            # the loader itself is never missing (and the other architecture's never loads)
            if not args.missing or (not s.startswith("ld-linux") and _loads(s) is not None)
        ]
        for name in packages_for(sonames, args.packages):
            print(name)
        return 0
    platform, problem = diagnose()
    if problem is not None:
        print(f"ggtune: the desktop app cannot start: {problem}", file=sys.stderr)
        return EXIT_NO_GUI
    print(f"ok: Qt platform {platform or 'native'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
