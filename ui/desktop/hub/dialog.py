"""Find on Hugging Face: search the hub, see which GGUF files run here, download and open.

A window of its own (File ▸ Find on Hugging Face…, Ctrl+Shift+F): a search field (Enter
searches), the repos found (most downloaded first, with likes), and for the repo selected
its GGUF files with size and a badge from ggtune's own estimate for the hardware and
settings of the main window ("fits on GPU, ~41 tok/s", "partial offload, ~8.5 tok/s",
"too large", "not verified": :mod:`app.planning.badges`). Download and open fetches the
file with the Compare tab's download (progress, cancel, resume, sha256) into the Hugging
Face cache and hands its path to ``open_model``. Everything slow runs on the job pool
(:class:`~ui.desktop.hub.controller.HubController`); every wait ends in words.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from PySide6.QtCore import QModelIndex, QPersistentModelIndex, Qt, QTimer
from PySide6.QtWidgets import (
    QAbstractItemView,
    QDialog,
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

from app.planning.words import fmt_ctx
from app.sources.hf import DownloadProgress, HubRepo
from ui.desktop.compare.download import progress_percent, progress_text
from ui.desktop.hub.controller import HubController
from ui.desktop.hub.rows import FileRow, RepoFiles
from ui.desktop.hub.tables import FilesTableModel, ReposTableModel
from ui.desktop.shared.estimate_controller import RUNNER_TITLES, EstimateController
from ui.desktop.shared.speed import SpeedController
from ui.desktop.shared.widgets import selectable_label

SELECT_DELAY_MS: Final = 300
"""How long the repo selection rests before its files are read (arrowing down the list
reads only the repo stopped on)."""


def _table(model: ReposTableModel | FilesTableModel, name: str) -> QTableView:
    view = QTableView()
    view.setObjectName(name)
    view.setModel(model)
    view.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
    view.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
    view.setTabKeyNavigation(False)  # Tab leaves the table; the arrows move inside
    view.setAlternatingRowColors(True)
    view.verticalHeader().hide()
    view.setWordWrap(False)
    header = view.horizontalHeader()
    header.setStretchLastSection(False)
    header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
    header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
    return view


class HubDialog(QDialog):
    """The Find on Hugging Face window (GUI thread); see the module doc.

    ``open_model(path)`` is called with the first file of a finished download.
    """

    def __init__(
        self,
        estimates: EstimateController,
        speed: SpeedController,
        open_model: Callable[[str], None],
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.setWindowTitle("Find on Hugging Face")
        self.setObjectName("hub_dialog")
        self._estimates = estimates
        self._open_model = open_model
        self.controller = HubController(estimates, speed, self)
        self.downloads = self.controller.downloads

        self.search_field = QLineEdit()
        self.search_field.setPlaceholderText("e.g. qwen3 8b, gemma 3 27b")
        self.search_field.setClearButtonEnabled(True)
        self.search_field.setToolTip(
            "Words of the repo's name; Enter searches the Hugging Face Hub for repos with "
            "GGUF files, most downloaded first"
        )
        self.search_field.returnPressed.connect(self.search)
        search_label = QLabel("&Search:")
        search_label.setBuddy(self.search_field)
        self.search_button = QPushButton("Search")
        self.search_button.setAutoDefault(False)
        self.search_button.clicked.connect(self.search)
        top = QHBoxLayout()
        top.addWidget(search_label)
        top.addWidget(self.search_field, 1)
        top.addWidget(self.search_button)

        self.status = selectable_label("Search the Hugging Face Hub for GGUF models.")
        self.status.setObjectName("hub_status")
        self.basis = selectable_label()
        self.basis.setObjectName("hub_basis")

        self.repos = ReposTableModel(self)
        self.repo_view = _table(self.repos, "hub_repos")
        self.repo_view.selectionModel().currentRowChanged.connect(self._on_repo_current_changed)
        repos_label = QLabel("&Repos:")
        repos_label.setBuddy(self.repo_view)
        self.files = FilesTableModel(self)
        self.file_view = _table(self.files, "hub_files")
        self.file_view.selectionModel().currentRowChanged.connect(
            lambda _now, _was: self._update_buttons()
        )
        # Enter or a double-click on a file downloads it; Enter on a repo reads it at once
        self.file_view.activated.connect(lambda _index: self.download_selected())
        self.repo_view.activated.connect(lambda _index: self._open_current_repo())
        self.files_label = QLabel("GGUF &files:")
        self.files_label.setBuddy(self.file_view)

        left = QWidget()
        left_column = QVBoxLayout(left)
        left_column.setContentsMargins(0, 0, 0, 0)
        left_column.addWidget(repos_label)
        left_column.addWidget(self.repo_view, 1)
        right = QWidget()
        right_column = QVBoxLayout(right)
        right_column.setContentsMargins(0, 0, 0, 0)
        right_column.addWidget(self.files_label)
        right_column.addWidget(self.file_view, 1)
        right_column.addWidget(self.basis)
        self.splitter = QSplitter(Qt.Orientation.Horizontal)
        self.splitter.setChildrenCollapsible(False)
        self.splitter.addWidget(left)
        self.splitter.addWidget(right)
        self.splitter.setStretchFactor(0, 2)
        self.splitter.setStretchFactor(1, 3)

        self.progress = QProgressBar()
        self.progress.setAccessibleName("Progress")
        self.progress.hide()
        self.cancel_button = QPushButton("&Cancel")
        self.cancel_button.setAutoDefault(False)
        self.cancel_button.setToolTip(
            "Stop reading the repo's files, or the download (its partial file stays and "
            "the next download resumes it)"
        )
        self.cancel_button.clicked.connect(self.cancel)
        self.download_button = QPushButton("&Download and open")
        self.download_button.setAutoDefault(False)
        self.download_button.setToolTip(
            "Download the selected file (every part of a split model) into the Hugging "
            "Face cache, check its sha256, and open it in the main window"
        )
        self.download_button.clicked.connect(self.download_selected)
        self.close_button = QPushButton("Close")
        self.close_button.setAutoDefault(False)
        self.close_button.clicked.connect(self.close)
        bottom = QHBoxLayout()
        bottom.addWidget(self.progress, 1)
        bottom.addStretch(0)
        bottom.addWidget(self.cancel_button)
        bottom.addWidget(self.download_button)
        bottom.addWidget(self.close_button)

        column = QVBoxLayout(self)
        column.addLayout(top)
        column.addWidget(self.status)
        column.addWidget(self.splitter, 1)
        column.addLayout(bottom)
        QWidget.setTabOrder(self.search_field, self.search_button)
        QWidget.setTabOrder(self.search_button, self.repo_view)
        QWidget.setTabOrder(self.repo_view, self.file_view)
        QWidget.setTabOrder(self.file_view, self.cancel_button)
        QWidget.setTabOrder(self.cancel_button, self.download_button)
        QWidget.setTabOrder(self.download_button, self.close_button)

        self._select_timer = QTimer(self)
        self._select_timer.setSingleShot(True)
        self._select_timer.setInterval(SELECT_DELAY_MS)
        self._select_timer.timeout.connect(self._open_current_repo)

        c = self.controller
        c.searching.connect(self._on_controller_searching)
        c.results_changed.connect(self._on_controller_results_changed)
        c.search_failed.connect(self._say)
        c.files_progress.connect(self._on_controller_files_progress)
        c.files_changed.connect(self._on_controller_files_changed)
        c.files_failed.connect(self._on_controller_files_failed)
        c.files_cancelled.connect(self._on_controller_files_failed)
        c.busy_changed.connect(lambda _busy: self._update_buttons())
        self.downloads.progress.connect(self._on_downloads_progress)
        self.downloads.finished.connect(self._on_downloads_finished)
        self.downloads.failed.connect(self._on_downloads_ended)
        self.downloads.cancelled.connect(self._on_downloads_ended)
        self.downloads.running_changed.connect(lambda _running: self._update_buttons())
        estimates.state_changed.connect(lambda _state: self._show_basis())
        self._show_basis()
        self._update_buttons()
        self.resize(960, 600)

    # --- actions ---

    def search(self) -> None:
        """Search for the words in the field (Enter does it too)."""
        self._select_timer.stop()
        self.controller.search(self.search_field.text())

    def cancel(self) -> None:
        """Stop the download under way, else reading the repo's files."""
        if self.downloads.running:
            self.downloads.cancel()
        else:
            self.controller.cancel()

    def selected_file(self) -> FileRow | None:
        """Return the file row selected, or None."""
        index = self.file_view.currentIndex()
        if not index.isValid():
            return None
        row = self.files.data(index, Qt.ItemDataRole.UserRole)
        return row if isinstance(row, FileRow) else None

    def download_selected(self) -> None:
        """Download the selected file and open it once it is in (and checked)."""
        row = self.selected_file()
        if row is None or self.downloads.running:
            return
        self.controller.download(row)
        self.progress.setValue(0)
        self.progress.show()
        self._say(f"Downloading {row.entry.name}…")

    # --- the controller's answers ---

    def _say(self, text: str) -> None:
        self.status.setText(text)

    def _on_controller_searching(self, words: str) -> None:
        self._say(f"Searching Hugging Face for “{words}”…")

    def _on_controller_results_changed(self, found: tuple[HubRepo, ...]) -> None:
        words = " ".join(self.search_field.text().split())
        self.repos.set_rows(found)
        self.files.set_rows(())
        self.files_label.setText("GGUF &files:")
        if not found:
            self._say(f"No repo with GGUF files matches “{words}”. Try fewer or other words.")
            return
        many = "repo" if len(found) == 1 else "repos"
        self._say(
            f"{len(found)} {many} with GGUF files match “{words}”, most downloaded first. "
            "Select one to see its files."
        )

    def _on_repo_current_changed(
        self, current: QModelIndex | QPersistentModelIndex, _previous: object
    ) -> None:
        if current.isValid():
            self._select_timer.start()

    def _open_current_repo(self) -> None:
        self._select_timer.stop()
        repo = self.repos.data(self.repo_view.currentIndex(), Qt.ItemDataRole.UserRole)
        if not isinstance(repo, HubRepo):
            return
        shown = self.controller.files
        if shown is not None and shown.repo_id == repo.repo_id and not self.controller.busy:
            return  # already shown (Enter on the repo whose files are listed)
        self.files.set_rows(())
        self.files_label.setText(f"GGUF &files in {repo.repo_id}:")
        self.controller.open_repo(repo.repo_id)

    def _on_controller_files_progress(self, text: str) -> None:
        if not self.downloads.running:
            self._say(text)

    def _on_controller_files_changed(self, files: RepoFiles) -> None:
        current = self.selected_file()
        self.files.set_rows(files.rows)
        if current is not None:  # the badges moved: keep the file selected
            names = [r.entry.name for r in files.rows]
            if current.entry.name in names:
                self.file_view.selectRow(names.index(current.entry.name))
        self._show_basis()
        if self.downloads.running:
            return
        n = len(files.rows)
        skipped = len(files.headers.listing.issues)
        left_out = f" ({skipped} left out: incomplete or unverifiable)" if skipped else ""
        if not n:
            self._say(f"{files.repo_id} has no GGUF model files{left_out}.")
            return
        unread = sum(1 for r in files.rows if r.row.error)
        note = f"; {unread} could not be read (see their badges)" if unread else ""
        what = "model" if n == 1 else "models"
        read = "its header was" if n == 1 else "their headers were"
        self._say(
            f"{n} GGUF {what} in {files.repo_id}{left_out}: only {read} read{note}. "
            "Select one and Download and open."
        )

    def _on_controller_files_failed(self, text: str) -> None:
        if not self.downloads.running:
            self._say(text)

    def _show_basis(self) -> None:
        state = self._estimates.state
        self.basis.setText(
            f"Badges for {state.hardware.label}, {fmt_ctx(state.settings.n_ctx)} of context, "
            f"as {RUNNER_TITLES[state.runner]} would run it (the main window's settings)."
        )

    # --- downloads ---

    def _on_downloads_progress(self, p: DownloadProgress) -> None:
        self.progress.setValue(progress_percent(p))
        self._say(progress_text(p))

    def _on_downloads_finished(self, path: str) -> None:
        self.progress.hide()
        self._say(f"Downloaded and checked {path}; opened in the main window.")
        self._open_model(path)

    def _on_downloads_ended(self, text: str) -> None:
        self.progress.hide()
        self._say(text)

    def _update_buttons(self) -> None:
        downloading = self.downloads.running
        self.download_button.setEnabled(self.selected_file() is not None and not downloading)
        self.cancel_button.setEnabled(downloading or self.controller.busy)
