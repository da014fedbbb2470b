"""How a catalog model is named: ``catalog:NAME``, told apart from a file without reading the
catalog (:mod:`app.model.catalog`, which re-exports these, holds the entries themselves).

A file's estimate asks only whether its name is a catalog one; keeping the answer here
keeps the catalog's generator and tables off that path (start-up, docs/benchmarks.md).
"""

from __future__ import annotations

import os
from typing import Final

CATALOG_PREFIX: Final = "catalog:"
"""Prefix of a catalog model's ``path`` (``"catalog:qwen3-8b"``)."""


def is_catalog(path: str | os.PathLike[str]) -> bool:
    """Return whether ``path`` names a catalog entry (``catalog:NAME``), not a file."""
    return os.fspath(path).startswith(CATALOG_PREFIX)


def catalog_key(path: str) -> str:
    """Return the entry name of a catalog path (``"catalog:qwen3-8b"`` → ``"qwen3-8b"``)."""
    assert is_catalog(path), f"not a catalog path: {path!r}"
    return path.removeprefix(CATALOG_PREFIX)
