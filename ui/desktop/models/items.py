"""The Models tab's Qt item models: the recent models, and the library tree.

:class:`ModelListModel` holds the recent models (the demo first); :class:`LibraryTreeModel`
the library scan by group (Ollama, LM Studio, Hugging Face, folders, the catalog), each
row searchable by the text in ``SEARCH_ROLE``.
"""

from __future__ import annotations

import os
from typing import Final

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import QStandardItem, QStandardItemModel

from app.sources.library import (
    Library,
    LibraryIssue,
)
from ui.desktop.models.entries import (
    CATALOG_TITLE,
    DEMO_ENTRY,
    LibraryItem,
    ModelEntry,
    entry_label,
    library_groups,
)
from ui.desktop.shared.model_card import (
    CatalogSummary,
)

SEARCH_ROLE: Final = Qt.ItemDataRole.UserRole + 1
"""The text the search box matches: title, path and detail."""


class ModelListModel(QAbstractListModel):
    """The demo model then recent files, newest first (read-only).

    ``Qt.UserRole`` gives the :class:`ModelEntry`, :data:`SEARCH_ROLE` the searched text;
    the tooltip is the full path.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._entries: tuple[ModelEntry, ...] = (DEMO_ENTRY,)

    @property
    def entries(self) -> tuple[ModelEntry, ...]:
        """The entries, in display order."""
        return self._entries

    def set_entries(self, entries: tuple[ModelEntry, ...]) -> None:
        """Replace every entry."""
        self.beginResetModel()
        self._entries = entries
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of entries."""
        return 0 if parent.isValid() else len(self._entries)

    def data(
        self,
        index: QModelIndex | QPersistentModelIndex,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return the title, the path (tooltip), or the entry (UserRole)."""
        if not index.isValid() or not 0 <= index.row() < len(self._entries):
            return None
        entry = self._entries[index.row()]
        if role == Qt.ItemDataRole.DisplayRole:
            return entry.title
        if role == Qt.ItemDataRole.ToolTipRole:
            return entry.path or entry.detail
        if role == Qt.ItemDataRole.UserRole:
            return entry
        if role == Qt.ItemDataRole.AccessibleDescriptionRole:
            return entry.detail
        if role == SEARCH_ROLE:
            return f"{entry.title}\n{entry.path or ''}\n{entry.detail}"
        return None


class LibraryTreeModel(QStandardItemModel):
    """The library by source, then the catalog: group rows, each with its entries
    (read-only, one column).

    ``Qt.UserRole`` gives the :class:`~app.sources.library.LibraryEntry`,
    :class:`~app.sources.library.LibraryIssue` or
    :class:`~ui.desktop.shared.model_card.CatalogSummary` of
    an entry row (None for a group), :data:`SEARCH_ROLE` the searched text. (A
    ``QStandardItemModel``: Qt owns the tree's parent links.)
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._library_groups: tuple[tuple[str, tuple[LibraryItem, ...]], ...] = ()
        self._catalog: tuple[CatalogSummary | LibraryIssue, ...] = ()

    @property
    def groups(self) -> tuple[tuple[str, tuple[LibraryItem, ...]], ...]:
        """The groups shown: (title, items); the catalog last, once loaded."""
        if not self._catalog:
            return self._library_groups
        return (*self._library_groups, (CATALOG_TITLE, self._catalog))

    def set_library(self, library: Library) -> None:
        """Show ``library`` (the catalog stays, expanded or not)."""
        old = len(self._library_groups)
        self._library_groups = library_groups(library)
        if old:
            self.removeRows(0, old)
        for row, (title, items) in enumerate(self._library_groups):
            self.insertRow(row, _group_item(title, items))

    def set_catalog(self, catalog: tuple[CatalogSummary | LibraryIssue, ...]) -> None:
        """Show ``catalog`` as the last group (an issue: why it could not be loaded)."""
        if self._catalog:
            self.removeRow(self.rowCount() - 1)
        self._catalog = catalog
        if catalog:
            self.appendRow(
                _group_item(
                    CATALOG_TITLE,
                    catalog,
                    count=sum(1 for i in catalog if isinstance(i, CatalogSummary)),
                    tooltip="Plan without downloading: popular models as published. Open one "
                    "to see what it needs at each quant level before you download it.",
                    search=f"{CATALOG_TITLE}\nplan without downloading",
                )
            )


def _group_item(
    title: str,
    items: tuple[LibraryItem, ...],
    *,
    count: int | None = None,
    tooltip: str | None = None,
    search: str | None = None,
) -> QStandardItem:
    """Return a group row titled ``title`` (``count`` entries, default all) with ``items``."""
    group = QStandardItem(f"{title} ({len(items) if count is None else count})")
    group.setData(search or title, SEARCH_ROLE)
    group.setFlags(Qt.ItemFlag.ItemIsEnabled)
    if tooltip is not None:
        group.setToolTip(tooltip)
    for item in items:
        group.appendRow(_library_item(item))
    return group


def _library_item(item: LibraryItem) -> QStandardItem:
    if isinstance(item, CatalogSummary):
        row = QStandardItem(item.name)
        row.setToolTip(
            f"{item.name}: {item.detail}\nPlanned from {item.source}; nothing is downloaded."
        )
        row.setData(item.detail, Qt.ItemDataRole.AccessibleDescriptionRole)
        row.setData(f"{item.name}\n{item.path}\n{item.architecture}\ncatalog", SEARCH_ROLE)
    elif isinstance(item, LibraryIssue):
        row = QStandardItem(f"{os.path.basename(item.path) or item.path}: {item.message}")
        row.setToolTip(f"{item.path}\n{item.message}")
        row.setData(f"{item.path}\n{item.message}", SEARCH_ROLE)
    else:
        row = QStandardItem(entry_label(item))
        row.setToolTip(item.path)
        row.setData(
            f"{item.name}\n{item.path}\n{item.architecture or ''}\n{item.model_name or ''}",
            SEARCH_ROLE,
        )
    row.setData(item, Qt.ItemDataRole.UserRole)
    row.setFlags(Qt.ItemFlag.ItemIsEnabled | Qt.ItemFlag.ItemIsSelectable)
    return row
