"""The Find on Hugging Face dialog's controller: search, a repo's files with badges, download.

:class:`HubController` runs every network call on the job pool
(:func:`ui.desktop.shared.jobs.run_job`): the keyword search
(:func:`app.sources.hf.search_models`), then for the repo chosen its listing and its files'
headers (:func:`ui.desktop.hub.rows.read_repo_files`, with progress and cancel), and the
badges (:func:`ui.desktop.hub.rows.file_rows`) again whenever the settings, the hardware or
the speed factors change (:class:`~ui.desktop.shared.jobs.LatestJob`). Downloads go
through the Compare tab's :class:`~ui.desktop.compare.download.DownloadController` (progress,
resume, free-disk check, sha256), so they behave the same everywhere.

Every request ends in exactly one signal: an answer, a one-line failure, or cancelled; an
answer to a request that a newer one replaced is dropped.
"""

from __future__ import annotations

import contextlib
import threading
from typing import Final

from PySide6.QtCore import QObject, Signal, Slot

from app.predict.speed import SpeedFactors
from app.sources.hf import HubRepo, search_models
from ui.desktop.compare.download import DownloadController, DownloadRequest
from ui.desktop.compare.rows import RepoHeaders, runner_choice
from ui.desktop.hub.rows import FileRow, ReadCancelled, RepoFiles, file_rows, read_repo_files
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.jobs import LatestJob, run_job
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.speed import SpeedController

EMPTY_SEARCH: Final = "Type a few words to search for, e.g. qwen3 8b."


class _Relay(QObject):
    """Lives on the GUI thread; ``report`` is emitted on a pool thread, so its connection
    to the controller is queued (delivered on the GUI thread)."""

    report = Signal(object)  # (serial, what, done, total)


class HubController(QObject):
    """Search the hub and read a repo's files with badges (GUI thread).

    Signals: ``searching(str)`` (the words), ``results_changed(tuple[HubRepo, ...])``,
    ``search_failed(str)``; ``files_progress(str)`` (one status line),
    ``files_changed(RepoFiles)`` (also when the badges follow new settings),
    ``files_failed(str)``, ``files_cancelled(str)``; ``busy_changed(bool)``.
    """

    searching = Signal(str)
    results_changed = Signal(object)
    search_failed = Signal(str)
    files_progress = Signal(str)
    files_changed = Signal(object)
    files_failed = Signal(str)
    files_cancelled = Signal(str)
    busy_changed = Signal(bool)

    DELAY_MS: Final = 200

    def __init__(
        self,
        estimates: EstimateController,
        speed: SpeedController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._speed = speed
        self._search_serial = 0
        self._files_serial = 0
        self._searching = False
        self._reading = False
        self._cancel = threading.Event()
        self._headers: RepoHeaders | None = None
        self._files: RepoFiles | None = None
        self._results: tuple[HubRepo, ...] = ()
        self._relay = _Relay(self)
        self._relay.report.connect(self._on_relay_report)
        self._badges = LatestJob(self.DELAY_MS, self._on_badges_done, self._on_badges_failed, self)
        self.downloads = DownloadController(self)
        estimates.state_changed.connect(lambda _s: self._refresh_badges())
        speed.factors_changed.connect(lambda _f: self._refresh_badges())

    # --- reading ---

    @property
    def busy(self) -> bool:
        """Whether a search or a repo's headers are being read."""
        return self._searching or self._reading

    @property
    def results(self) -> tuple[HubRepo, ...]:
        """The repos the last search found."""
        return self._results

    @property
    def files(self) -> RepoFiles | None:
        """The repo shown with its files and badges, or None."""
        return self._files

    # --- searching ---

    def search(self, words: str) -> None:
        """Search the hub for repos with GGUF files matching ``words`` (on the pool)."""
        text = " ".join(words.split())
        self._search_serial += 1
        self._drop_files()  # the files shown belong to the old results
        if not text:
            self._set_searching(False)
            self.search_failed.emit(EMPTY_SEARCH)
            return
        serial = self._search_serial
        self._set_searching(True)
        self.searching.emit(text)
        run_job(
            lambda: search_models(text),
            on_success=lambda found: self._on_search_done(serial, found),
            on_failure=lambda error: self._on_search_failed(serial, error),
            parent=self,
        )

    def _on_search_done(self, serial: int, found: tuple[HubRepo, ...]) -> None:
        if serial != self._search_serial:
            return
        self._set_searching(False)
        self._results = found
        self.results_changed.emit(found)

    def _on_search_failed(self, serial: int, error: Exception) -> None:
        if serial != self._search_serial:
            return
        self._set_searching(False)
        self.search_failed.emit(f"Could not search Hugging Face: {describe_error(error)}")

    # --- a repo's files ---

    def open_repo(self, repo_id: str) -> None:
        """List ``repo_id``'s GGUF files and read their headers (on the pool), then badge
        them at the settings in force; a repo being read is dropped for this one."""
        self._drop_files()
        cancel = threading.Event()
        self._cancel = cancel
        serial = self._files_serial
        self._set_reading(True)
        state = self._estimates.state
        factors = self._speed.factors
        relay = self._relay

        def report(what: str, done: int, total: int) -> None:
            with contextlib.suppress(RuntimeError):  # the dialog went away meanwhile
                relay.report.emit((serial, what, done, total))

        def job() -> RepoFiles:
            headers = read_repo_files(repo_id, report, cancel)
            return _badged(headers, state, factors)

        run_job(
            job,
            on_success=lambda files: self._on_files_done(serial, files),
            on_failure=lambda error: self._on_files_failed(serial, repo_id, error),
            parent=self,
        )

    def _drop_files(self) -> None:
        """Forget the repo shown or being read; a late answer for it is dropped."""
        self._cancel.set()
        self._files_serial += 1
        self._headers = None
        self._files = None
        self._badges.cancel()
        self._set_reading(False)

    def cancel(self) -> None:
        """Drop the search under way and stop reading the repo's headers (the next batch
        is not started); GUI thread."""
        if self._searching:
            self._search_serial += 1
            self._set_searching(False)
            self.search_failed.emit("Search cancelled.")
        if not self._reading:
            return
        self._cancel.set()
        self._files_serial += 1
        self._set_reading(False)
        self.files_cancelled.emit("Cancelled: the repo's files were not read.")

    @Slot(object)
    def _on_relay_report(self, report: tuple[int, str, int, int]) -> None:
        serial, what, done, total = report
        if serial != self._files_serial:
            return
        self.files_progress.emit(f"{what}… {done} of {total}" if total else f"{what}…")

    def _on_files_done(self, serial: int, files: RepoFiles) -> None:
        if serial != self._files_serial:
            return
        self._set_reading(False)
        self._headers = files.headers
        self._show(files)
        state = self._estimates.state
        if (state.settings, state.hardware.hardware) != (files.settings, files.hardware):
            self._refresh_badges()  # the settings moved while the headers were read

    def _on_files_failed(self, serial: int, repo_id: str, error: Exception) -> None:
        if serial != self._files_serial:
            return
        self._set_reading(False)
        if isinstance(error, ReadCancelled):
            return
        self.files_failed.emit(f"Could not read {repo_id}: {describe_error(error)}")

    # --- badges follow the settings ---

    def _refresh_badges(self) -> None:
        headers = self._headers
        if headers is None:
            return
        state = self._estimates.state
        factors = self._speed.factors
        self._badges.request(lambda: _badged(headers, state, factors))

    def _on_badges_done(self, files: RepoFiles) -> None:
        if self._headers is not files.headers:
            return  # another repo was opened meanwhile
        self._show(files)

    def _on_badges_failed(self, error: Exception) -> None:
        self.files_failed.emit(f"Could not estimate the files: {describe_error(error)}")

    def _show(self, files: RepoFiles) -> None:
        self._files = files
        self.files_changed.emit(files)

    # --- downloading ---

    def download(self, row: FileRow) -> None:
        """Download ``row``'s model (all shards) into the Hugging Face cache (GUI thread);
        ``downloads.finished(path)`` says where it is."""
        files = self._files
        assert files is not None, "a file row comes from the files shown"
        self.downloads.start(DownloadRequest(files.headers.listing, row.entry))

    # --- plumbing ---

    def _set_searching(self, on: bool) -> None:
        was = self.busy
        self._searching = on
        if self.busy != was:
            self.busy_changed.emit(self.busy)

    def _set_reading(self, on: bool) -> None:
        was = self.busy
        self._reading = on
        if self.busy != was:
            self.busy_changed.emit(self.busy)


def _badged(headers: RepoHeaders, state: EstimateState, factors: SpeedFactors) -> RepoFiles:
    """Return the files of ``headers`` badged at ``state`` (pool thread)."""
    return file_rows(
        headers,
        state.settings,
        state.hardware.hardware,
        state.hardware.label,
        factors,
        runner_choice(state),
    )
