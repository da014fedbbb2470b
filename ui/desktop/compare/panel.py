"""The Compare tab: every quant level of the open model (or of a Hugging Face repo) side by
side, as a table and a chart, and what to do about the selected row.

:class:`ComparePanel` shows the rows that
:class:`~ui.desktop.compare.controller.CompareController` works out
(:mod:`ui.desktop.compare.rows`, exactly as ``ggtune compare`` does, each quant as the
runner chosen would run it) in
:class:`~ui.desktop.compare.table.CompareTableModel` and
:class:`~ui.desktop.compare.chart.CompareChartWidget`. A Hugging Face repo typed into the
tab is listed and every quant file's header read over HTTP on the pool (nothing
downloaded, headers cached on disk), then shown as one row per file with source "hub",
following the settings on screen like the normal rows. The selected hub row can be
downloaded (every shard, into the Hugging Face cache or a folder the user picks) with
progress, Cancel and resume by :class:`ui.desktop.compare.download.DownloadController`; its
``finished(path)`` is what the main window opens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from PySide6.QtCore import (
    QItemSelection,
    Qt,
)
from PySide6.QtGui import (
    QAction,
    QHideEvent,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.planning.compare import HUB_ORIGIN, CompareRow
from app.planning.words import fmt_ctx
from app.predict.estimate import repack_type_names
from app.sources.hf import (
    DownloadProgress,
    ModelEntry,
    free_bytes,
    hub_cache_dir,
)
from app.units import format_bytes
from ui.desktop.compare.chart import CompareChartWidget
from ui.desktop.compare.controller import CompareController
from ui.desktop.compare.download import (
    DownloadController,
    DownloadRequest,
    progress_percent,
    progress_text,
)
from ui.desktop.compare.rows import (
    CompareResult,
    what_to_do,
)
from ui.desktop.compare.table import CompareTableModel
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.estimate_controller import EstimateController

# The Save to box's item data: the Hugging Face cache, and the item that asks for a folder
# (a chosen folder's item holds its path).
_HF_CACHE: Final = ""
_CHOOSE_FOLDER: Final = "\0choose"


# --- the table ---------------------------------------------------------------------------


# --- the chart ---------------------------------------------------------------------------


# --- the panel ---------------------------------------------------------------------------


class ComparePanel(QWidget):
    """The Compare tab (GUI thread): a line about the settings, a box to compare a Hugging
    Face repo instead, the table, the chart, and what to do about the selected quant.
    Subscribes to :class:`CompareController`."""

    def __init__(
        self,
        controller: CompareController,
        estimates: EstimateController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self._estimates = estimates
        layout = QVBoxLayout(self)
        self.banner = MessageBanner(name="compare_banner")
        layout.addWidget(self.banner)
        repo_row = QHBoxLayout()
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("Compare a Hugging Face repo… (org/name or a URL)")
        self.repo_edit.setAccessibleName("Hugging Face repo to compare")
        self.repo_edit.setToolTip(
            "Every quant file of the repo side by side; only the files' headers are read, "
            "nothing is downloaded"
        )
        self.repo_edit.returnPressed.connect(self._on_repo_button_clicked)
        repo_row.addWidget(self.repo_edit, 1)
        self.repo_button = QPushButton("Compare repo")
        self.repo_button.clicked.connect(self._on_repo_button_clicked)
        repo_row.addWidget(self.repo_button)
        self.back_button = QPushButton("Back to the open model")
        self.back_button.clicked.connect(controller.show_model)
        self.back_button.setVisible(controller.repo is not None)
        repo_row.addWidget(self.back_button)
        layout.addLayout(repo_row)
        top = QHBoxLayout()
        self.summary_label = QLabel("Open a model to compare its quant levels.")
        self.summary_label.setWordWrap(True)
        top.addWidget(self.summary_label, 1)
        self.busy_label = QLabel("Working…")
        self.busy_label.setVisible(False)
        top.addWidget(self.busy_label)
        top.addWidget(QLabel("Chart:"))
        self.metric_box = QComboBox()
        self.metric_box.addItem("Memory vs capacity", "memory")
        self.metric_box.addItem("Writing speed", "speed")
        self.metric_box.setAccessibleName("What the chart shows")
        self.metric_box.currentIndexChanged.connect(self._on_metric_box_changed)
        top.addWidget(self.metric_box)
        layout.addLayout(top)

        self.table_model = CompareTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Quant levels side by side")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        self.chart = CompareChartWidget()
        self.chart.row_clicked.connect(self.table.selectRow)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.chart)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout.addWidget(splitter, 1)
        self.hint_label = QLabel("Select a quant to see how to get it.")
        self.hint_label.setWordWrap(True)
        self.hint_label.setAccessibleName("What to do")
        self.hint_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        hint_row = QHBoxLayout()
        hint_row.addWidget(self.hint_label, 1)
        self.use_button = QPushButton("Use this quant")
        self.use_button.setToolTip(
            "Estimate the open model at the selected level on every tab (the Settings "
            "panel's Quantization); a double-click or the row's menu does the same"
        )
        self.use_button.setEnabled(False)
        self.use_button.clicked.connect(self.use_selected_quant)
        hint_row.addWidget(self.use_button)
        layout.addLayout(hint_row)
        layout.addWidget(self._download_row())
        self.table.doubleClicked.connect(lambda _index: self.use_selected_quant())
        self.table.setContextMenuPolicy(Qt.ContextMenuPolicy.ActionsContextMenu)
        self.use_action = QAction("Use this quant", self.table)
        self.use_action.triggered.connect(self.use_selected_quant)
        self.table.addAction(self.use_action)

        controller.result_changed.connect(self._on_controller_result_changed)
        estimates.model_changed.connect(self._on_estimates_model_changed)
        controller.failed.connect(self._on_controller_failed)
        controller.busy_changed.connect(self.busy_label.setVisible)
        controller.repo_changed.connect(self._on_controller_repo_changed)
        self.downloads.running_changed.connect(self._on_downloads_running_changed)
        self.downloads.progress.connect(self._on_downloads_progress)
        self.downloads.finished.connect(self._on_downloads_finished)
        self.downloads.failed.connect(self._on_downloads_failed)
        self.downloads.cancelled.connect(self._on_downloads_cancelled)
        if controller.result is not None:
            self._on_controller_result_changed(controller.result)

    def _download_row(self) -> QWidget:
        """Build Save to, Download, the progress bar, its status and Cancel (hub rows)."""
        self.downloads = DownloadController(self)
        self.download_box = QWidget()
        column = QVBoxLayout(self.download_box)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        column.addLayout(row)
        save_to = QLabel("Save to:")
        row.addWidget(save_to)
        self.save_to_box = QComboBox()
        self.save_to_box.addItem("Hugging Face cache", _HF_CACHE)
        self.save_to_box.addItem("Choose a folder…", _CHOOSE_FOLDER)
        self.save_to_box.setItemData(
            0,
            "Where huggingface_hub keeps its files; the library lists it",
            Qt.ItemDataRole.ToolTipRole,
        )
        self.save_to_box.setAccessibleName("Where to save the download")
        self.save_to_box.setToolTip("Where the downloaded file goes")
        self.save_to_box.activated.connect(self._on_save_to_box_activated)
        self._save_to_index = 0
        save_to.setBuddy(self.save_to_box)
        row.addWidget(self.save_to_box)
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip(
            "Download the selected quant file (every shard) from Hugging Face, check its "
            "sha256 and open it; an interrupted download resumes"
        )
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self._on_download_button_clicked)
        row.addWidget(self.download_button)
        self.download_progress = QProgressBar()
        self.download_progress.setRange(0, 100)
        self.download_progress.setValue(0)
        self.download_progress.setAccessibleName("Download progress")
        self.download_progress.hide()  # shown once a download starts
        row.addWidget(self.download_progress, 1)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download; the next Download resumes it (Esc)")
        self.cancel_button.setShortcut("Esc")
        self.cancel_button.clicked.connect(self.downloads.cancel)
        self.cancel_button.hide()  # shown while a download runs
        row.addWidget(self.cancel_button)
        row.addStretch(0)
        # Its own line, wrapped: a long status must never widen the window.
        self.download_status = QLabel()
        self.download_status.setWordWrap(True)
        self.download_status.setAccessibleName("Download status")
        self.download_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_status.hide()  # shown once a download starts
        column.addWidget(self.download_status)
        self.download_box.setVisible(self.controller.repo is not None)
        return self.download_box

    def showEvent(self, event: QShowEvent) -> None:
        """Start working rows out when the tab becomes visible."""
        super().showEvent(event)
        self.controller.set_active(True)

    def hideEvent(self, event: QHideEvent) -> None:
        """Stop working rows out while the tab is hidden."""
        super().hideEvent(event)
        self.controller.set_active(False)

    def _on_metric_box_changed(self, _index: int) -> None:
        metric = self.metric_box.currentData()
        self.chart.set_metric("speed" if metric == "speed" else "memory")

    def _on_repo_button_clicked(self) -> None:
        text = self.repo_edit.text().strip()
        if text:
            self.controller.compare_repo(text)

    def _on_controller_repo_changed(self, repo: str | None) -> None:
        self.back_button.setVisible(repo is not None)
        self.download_box.setVisible(repo is not None or self.downloads.running)
        self._update_download_button()
        self.banner.hide()
        if repo is not None:
            self.summary_label.setText(f"Reading the quant files of {repo} (headers only)…")

    def _on_controller_result_changed(self, result: CompareResult) -> None:
        self.chart.empty_text = "Working out the quants…"
        self.banner.hide()
        if result.errors:
            self.banner.show_message(
                f"Could not read {len(result.errors)} file(s) of {result.repo}: "
                + "; ".join(result.errors)
            )
        selected = self._selected_quant()
        self.table_model.set_result(result)
        self.chart.set_rows(result.rows)
        s = result.settings
        users = f", {s.n_parallel} users" if s.n_parallel > 1 else ""
        where = (
            f"{result.repo}: {len(result.rows)} quant file(s) on Hugging Face, headers read "
            "over HTTP (nothing downloaded). "
            if result.repo is not None
            else ""
        )
        self.summary_label.setText(
            f"{where}At {fmt_ctx(s.n_ctx)} of context{users}, {s.cache_type_k}/"
            f"{s.cache_type_v} KV cache, the most GPU layers that fit. "
            f"Speed: {result.speed_source}.{self._repack_note(result)}"
        )
        names = [r.quant for r in result.rows]
        if selected in names:
            self.table.selectRow(names.index(selected))
        self._show_hint()
        self._update_download_button()

    def _repack_note(self, result: CompareResult) -> str:
        """Say why the RAM column can run backwards on a CPU: llama.cpp repacks some weight
        types into a copy of their own while the mapped file keeps its pages (issue 18:
        Q4_K_M needed more RAM than Q5_K_M, with no word why)."""
        hardware = self._estimates.state.hardware.hardware
        if hardware.gpus or not result.settings.use_mmap:
            return ""
        types = sorted(repack_type_names(hardware.host))
        if not types:
            return ""
        return (
            f" On this CPU llama.cpp repacks {', '.join(types)} weights into a copy of "
            "their own while the file stays mapped, so those quants need more RAM than "
            "their size says (mmap off keeps one copy)."
        )

    def _on_estimates_model_changed(self, _model: object) -> None:
        self.chart.empty_text = "Working out the quants…"
        self.chart.update()

    def _on_controller_failed(self, message: str) -> None:
        self.banner.show_message(message)
        # nothing is being read any more: say so where "Reading…" was (it stayed for good)
        repo = self.controller.repo
        self.summary_label.setText(
            f"Nothing read from {repo}: see the message above. Try again, or go back to "
            "the open model."
            if repo is not None
            else "The quant levels could not be worked out: see the message above."
        )
        self.table_model.clear()
        self.chart.empty_text = "Nothing to show"
        self.chart.set_rows(())

    def _selected_quant(self) -> str | None:
        row = self._selected_row()
        return row.quant if row is not None else None

    def _selected_row(self) -> CompareRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.table_model.rows):
            return None
        return self.table_model.rows[rows[0].row()]

    def _on_table_selection_changed(self, _new: QItemSelection, _old: QItemSelection) -> None:
        self._show_hint()
        self._update_download_button()
        usable = self._usable_row() is not None
        self.use_button.setEnabled(usable)
        self.use_action.setEnabled(usable)

    def _usable_row(self) -> CompareRow | None:
        """The selected row when it can be estimated here: the open file's own level or one
        simulated from it (a hub file is downloaded first)."""
        row = self._selected_row()
        if row is None or row.origin == HUB_ORIGIN or row.error or self._estimates.model is None:
            return None
        return row

    def use_selected_quant(self) -> None:
        """Estimate the open model at the selected row's level (every tab follows)."""
        row = self._usable_row()
        if row is not None:
            self._estimates.set_quant(row.quant)

    def _show_hint(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        row = rows[0].row() if rows else -1
        self.chart.set_selected(row)
        model = self._estimates.model
        if row < 0 or row >= len(self.table_model.rows):
            self.hint_label.setText("Select a quant to see how to get it.")
            return
        chosen = self.table_model.rows[row]
        result = self.controller.result
        if chosen.origin == HUB_ORIGIN:
            repo = result.repo if result is not None else None
            hub = self.controller.hub_entry(chosen)
            room = f"\n{self._room_text(hub[1])}" if hub is not None else ""
            self.hint_label.setText(what_to_do(chosen, None, repo) + room)
        elif model is None:
            self.hint_label.setText("Select a quant to see how to get it.")
        else:
            self.hint_label.setText(what_to_do(chosen, model.spec))

    # --- downloading the selected hub row ---

    def download_folder(self) -> Path | None:
        """Return the folder chosen in Save to, or None for the Hugging Face cache."""
        data = self.save_to_box.currentData()
        return (
            Path(data)
            if isinstance(data, str) and data not in (_HF_CACHE, _CHOOSE_FOLDER)
            else None
        )

    def set_download_folder(self, folder: str | None) -> None:
        """Save downloads to ``folder`` (None: the Hugging Face cache) and say so in Save to."""
        if folder is None:
            index = 0
        else:
            index = 1
            if self.save_to_box.itemData(1) == _CHOOSE_FOLDER:
                self.save_to_box.insertItem(1, "", folder)
            self.save_to_box.setItemText(1, folder)
            self.save_to_box.setItemData(1, folder)
            self.save_to_box.setItemData(1, folder, Qt.ItemDataRole.ToolTipRole)
        self.save_to_box.setCurrentIndex(index)
        self._save_to_index = index
        self._show_hint()

    def _on_save_to_box_activated(self, index: int) -> None:
        if self.save_to_box.itemData(index) != _CHOOSE_FOLDER:
            self._save_to_index = index
            self._show_hint()
            return
        start = self.download_folder()
        folder = QFileDialog.getExistingDirectory(
            self, "Save the download in a folder", str(start if start is not None else Path.home())
        )
        if folder:
            self.set_download_folder(folder)
        else:  # the dialog was cancelled: keep the previous choice
            self.save_to_box.setCurrentIndex(self._save_to_index)

    def _room_text(self, entry: ModelEntry) -> str:
        """Return the download's size and the free disk where it would go (one sentence)."""
        folder = self.download_folder()
        where = f"in {folder}" if folder is not None else "in the Hugging Face cache"
        try:
            free = free_bytes(folder if folder is not None else hub_cache_dir())
        except OSError as err:
            return (
                f"It is {format_bytes(entry.size_bytes)}; the free disk {where} is unknown ({err})."
            )
        n = len(entry.files)
        files = f" in {n} files" if n > 1 else ""
        text = f"It is {format_bytes(entry.size_bytes)}{files}; {format_bytes(free)} free {where}."
        if free < entry.size_bytes:
            text += " Not enough room there, unless part of it is downloaded already."
        return text

    def _on_download_button_clicked(self) -> None:
        row = self._selected_row()
        hub = self.controller.hub_entry(row) if row is not None else None
        if hub is None or self.downloads.running:
            return
        listing, entry = hub
        self.banner.hide()
        self.downloads.start(DownloadRequest(listing, entry, self.download_folder()))

    def _update_download_button(self) -> None:
        row = self._selected_row()
        ok = row is not None and self.controller.hub_entry(row) is not None
        self.download_button.setEnabled(ok and not self.downloads.running)

    def _on_downloads_running_changed(self, running: bool) -> None:
        # Keep the keyboard on the button that matters now (read before hiding either).
        had_focus = self.download_button.hasFocus() or self.cancel_button.hasFocus()
        self.save_to_box.setEnabled(not running)
        self.cancel_button.setVisible(running)
        self.cancel_button.setEnabled(running)
        self._update_download_button()
        self.download_box.setVisible(running or self.controller.repo is not None)
        if running:
            request = self.downloads.request
            assert request is not None, "running means a request"
            self.download_progress.setValue(0)
            self.download_progress.show()
            self.download_status.show()
            self.download_status.setText(f"Starting the download of {request.entry.name}…")
            if had_focus:
                self.cancel_button.setFocus()
        elif had_focus:
            self.download_button.setFocus()

    def _on_downloads_progress(self, p: DownloadProgress) -> None:
        self.download_progress.setValue(progress_percent(p))
        self.download_status.setText(progress_text(p))

    def _on_downloads_finished(self, path: str) -> None:
        self.download_progress.setValue(100)
        self.download_status.setText(f"Downloaded and checked: {path}; opening it.")
        self.download_status.setToolTip(path)

    def _on_downloads_failed(self, message: str) -> None:
        self.download_progress.hide()
        self.download_status.setText("Download failed.")
        self.banner.show_message(message)

    def _on_downloads_cancelled(self, message: str) -> None:
        self.download_status.setText(message)
