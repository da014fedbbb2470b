"""Where ggtune's data files are, from a source checkout or a frozen bundle.

The shipped data (``profiles/``: hardware profiles, quant quality tables, the model
catalog) sits next to ``app/`` in the repository. In a bundle built by PyInstaller
(``packaging/ggtune.spec``) the code runs from an archive and the data is unpacked under
``sys._MEIPASS`` (``dist/ggtune/_internal/`` for a one-folder app), so the location is
asked for here rather than worked out from ``__file__`` in each module.

Example::

    data_dir() / "models"      # the catalog's folder
    icons_dir() / "ggtune-256.png"
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

__all__ = ["bundle_root", "cache_dir", "data_dir", "icons_dir", "is_frozen"]

_SOURCE_ROOT = Path(__file__).resolve().parent.parent


def is_frozen() -> bool:
    """Whether this is a frozen bundle (PyInstaller sets ``sys.frozen``)."""
    return bool(getattr(sys, "frozen", False))


def bundle_root() -> Path:
    """Return the folder the data is read from: the bundle's, or the repository root."""
    meipass = getattr(sys, "_MEIPASS", None)
    if is_frozen() and isinstance(meipass, str):
        return Path(meipass)
    return _SOURCE_ROOT


def data_dir() -> Path:
    """Return the ``profiles/`` folder (hardware, quality and models subfolders)."""
    return bundle_root() / "profiles"


def icons_dir() -> Path:
    """Return the folder of the application icon PNGs (``packaging/icons/`` in the source).

    The folder may be missing (an installed wheel ships no icons); callers go without.
    """
    if is_frozen():
        return bundle_root() / "icons"
    return _SOURCE_ROOT / "packaging" / "icons"


def cache_dir() -> Path:
    """Return ggtune's per-user cache folder (created by nobody here).

    Linux ``$XDG_CACHE_HOME/ggtune`` (default ``~/.cache/ggtune``), macOS
    ``~/Library/Caches/ggtune``, Windows ``%LOCALAPPDATA%\\ggtune\\Cache``. tasks.py keeps its
    llama-cpp-python wheelhouse under the same folder and computes it the same way.
    """
    try:
        import platformdirs
    except ImportError:  # only the set-up's first moments can lack it
        return _fallback_cache_dir()
    return Path(platformdirs.user_cache_dir("ggtune", appauthor=False))


def _fallback_cache_dir() -> Path:
    if sys.platform == "win32":
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "ggtune" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "ggtune"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return Path(xdg or Path.home() / ".cache") / "ggtune"
