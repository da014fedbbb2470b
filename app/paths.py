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

import sys
from pathlib import Path

__all__ = ["bundle_root", "data_dir", "icons_dir", "is_frozen"]

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
