"""The Models panel: the demo model and recently opened files, the library, search,
Open file…, and the card of the open model.

:class:`~ui.desktop.models.controller.ModelController` owns which model is open and the
recent files (kept in ``QSettings``); it reads headers on the job pool and answers with
``model_loaded`` or ``model_failed``. A failed open leaves the previous model open.
:class:`~ui.desktop.models.items.ModelListModel` is the list (a ``QAbstractListModel``
over :class:`~ui.desktop.models.entries.ModelEntry` tuples); the panel filters it with a
``QSortFilterProxyModel``.

The library (:func:`app.sources.library.scan_library`: Ollama, LM Studio, the Hugging Face
cache, added folders, the demo models) is scanned on the job pool when the app starts and
on Rescan; :class:`~ui.desktop.models.items.LibraryTreeModel` groups its entries by source
and lists what the scan skipped (broken manifests, files that are not GGUF) under
"Skipped", never failing for them. Choosing an entry opens it like a file. ``ggtune
library`` is its CLI twin.

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
from pathlib import Path

from PySide6.QtCore import (
    QEvent,
    QModelIndex,
    QObject,
    QSortFilterProxyModel,
    Qt,
)
from PySide6.QtGui import QKeyEvent, QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
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

from app.model.catalog import catalog_key, is_catalog
from app.sources.library import (
    Library,
    LibraryEntry,
)
from ui.desktop.models.controller import ModelController
from ui.desktop.models.entries import (
    ModelEntry,
)
from ui.desktop.models.items import SEARCH_ROLE
from ui.desktop.shared.model_card import (
    CatalogSummary,
    LoadedModel,
    ModelCard,
)


def _ask_folder(parent: QWidget) -> str | None:
    # from the home folder, never the current directory (issue 18)
    folder = QFileDialog.getExistingDirectory(parent, "Add a folder of models", str(Path.home()))
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
        search_label = QLabel("Find:")
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
        self.model_list.setTextElideMode(Qt.TextElideMode.ElideRight)  # '…1B' read as 1B
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
        self.search.returnPressed.connect(self.open_first_match)
        self.search.installEventFilter(self)  # Down goes to the matches
        self.library_tree = QTreeView()
        self.library_tree.setModel(self.library_proxy)
        self.library_tree.setHeaderHidden(True)
        self.library_tree.setAccessibleName("Library")
        self.library_tree.setUniformRowHeights(True)
        self.library_tree.setTextElideMode(Qt.TextElideMode.ElideRight)
        self.library_tree.setToolTip(
            "Models already on this machine (Ollama, LM Studio, the Hugging Face cache, "
            "folders you added), then ggtune's catalog of popular models to plan before "
            "downloading"
        )
        self.library_tree.activated.connect(self._on_library_activated)
        self.library_tree.clicked.connect(self._on_library_activated)
        library_layout.addWidget(self.library_tree, 1)
        library_row = QHBoxLayout()
        self.rescan_button = QPushButton("Rescan")
        self.rescan_button.setToolTip("Look for models again")
        self.rescan_button.clicked.connect(controller.scan_library)
        self.add_folder_button = QPushButton("Add folder…")
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

        self.open_button = QPushButton("Open file…")
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

    def first_match(self) -> tuple[QAbstractItemView, QModelIndex] | None:
        """Return the first model the filter shows (recent first, then the library), with
        the view that shows it; None when nothing matches."""
        if self.proxy.rowCount():
            return self.model_list, self.proxy.index(0, 0)
        pending = [self.library_proxy.index(r, 0) for r in range(self.library_proxy.rowCount())]
        while pending:
            index = pending.pop(0)
            children = self.library_proxy.rowCount(index)
            if children:
                pending[:0] = [self.library_proxy.index(r, 0, index) for r in range(children)]
            elif index.flags() & Qt.ItemFlag.ItemIsSelectable:
                return self.library_tree, index
        return None

    def open_first_match(self) -> None:
        """Open the first model the filter shows (Enter in the filter)."""
        match = self.first_match()
        if match is None:
            return
        view, index = match
        if view is self.model_list:
            self._on_list_activated(index)
        else:
            self.open_library_index(index)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Down in the filter moves to the first match, to walk them with the arrows."""
        if (
            watched is self.search
            and event.type() == QEvent.Type.KeyPress
            and isinstance(event, QKeyEvent)
            and event.key() == Qt.Key.Key_Down
        ):
            match = self.first_match()
            if match is not None:
                view, index = match
                view.setCurrentIndex(index)
                view.setFocus(Qt.FocusReason.OtherFocusReason)
                return True
        return super().eventFilter(watched, event)

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
        self.show_card(model.card, model.path)
        self._select(model)

    def show_card(self, card: ModelCard, path: str) -> None:
        """Show ``card`` (the open model's, or the one at the quant level chosen)."""
        self.card_title.setText(card.title)
        self.card_title.setToolTip(path)
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
