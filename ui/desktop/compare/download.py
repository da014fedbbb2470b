"""Download a quant file (all its shards) from Hugging Face without blocking the window.

:class:`DownloadController` runs :func:`app.sources.hf.download` on the job pool
(:func:`ui.desktop.shared.jobs.run_job`), forwards its
:class:`~app.sources.hf.DownloadProgress` reports
to the GUI thread through a queued signal, and ends with exactly one of ``finished(path)``,
``failed(line)`` or ``cancelled(line)``. Cancel sets the core's ``threading.Event``: the
core stops at its next chunk and keeps the partial file, so the next download of the same
file resumes it. The free disk is checked and every file's sha256 verified by the core.

A download is the one long job on the pool: while it runs it hands its pool slot back
(``QThreadPool.releaseThread``, Qt's documented way for a job that mostly waits), so the
short jobs of the other tabs never queue behind it.

The pure helpers (:func:`progress_text`, :func:`format_eta`) make the words the Compare tab
shows (the free disk comes from :func:`app.sources.hf.free_bytes`, the check the download makes).
"""

from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass
from pathlib import Path

from PySide6.QtCore import QObject, Signal, Slot

from app.errors import DownloadCancelledError
from app.sources.hf import DownloadProgress, ModelEntry, RepoListing, download
from app.units import format_bytes, format_transfer_rate
from ui.desktop.shared.jobs import job_pool, run_job
from ui.desktop.shared.model_card import describe_error


def format_eta(seconds: float | None) -> str:
    """Return a time left as "m:ss" ("h:mm:ss" from an hour on; "?" when unknown).

    >>> format_eta(42.4), format_eta(3725), format_eta(None)
    ('0:42', '1:02:05', '?')
    """
    if seconds is None:
        return "?"
    total = max(0, round(seconds))
    hours, rest = divmod(total, 3600)
    minutes, secs = divmod(rest, 60)
    return f"{hours}:{minutes:02d}:{secs:02d}" if hours else f"{minutes}:{secs:02d}"


def progress_text(p: DownloadProgress) -> str:
    """Return one status line for ``p``, a unit on every number.

    >>> progress_text(DownloadProgress("m.gguf", 0, 2, 3 * 2**29, 4 * 2**30, 45 * 2**20, 95))
    '1.5 GiB of 4.0 GiB · 45.0 MiB/s · ETA 1:35 · file 1/2'
    """
    files = f"file {p.file_index + 1}/{p.n_files}"
    amount = f"{format_bytes(p.done_bytes)} of {format_bytes(p.total_bytes)}"
    if p.stage == "checking":
        return f"Checking the partial download: {amount} · {files}"
    speed = format_transfer_rate(p.bytes_per_s)
    return f"{amount} · {speed} · ETA {format_eta(p.eta_s)} · {files}"


def progress_percent(p: DownloadProgress) -> int:
    """Return how far ``p`` is, 0–100 (100 only once every byte is in)."""
    if p.total_bytes <= 0:
        return 100
    return min(100, p.done_bytes * 100 // p.total_bytes)


@dataclass(frozen=True, slots=True)
class DownloadRequest:
    """What to download: ``entry`` of ``listing`` (all its shards) into ``to`` (a folder;
    None for the Hugging Face cache, ``hub_cache`` or :func:`app.sources.hf.hub_cache_dir`)."""

    listing: RepoListing
    entry: ModelEntry
    to: Path | None = None
    hub_cache: Path | None = None


class _ProgressRelay(QObject):
    """Lives on the GUI thread; ``report`` is emitted on the pool thread, so its
    connection to the controller's slot is queued (delivered on the GUI thread)."""

    report = Signal(object)


class DownloadController(QObject):
    """One Hugging Face download at a time (GUI thread; :meth:`cancel` from any thread).

    Signals (GUI thread): ``progress(DownloadProgress)`` about 5 times a second,
    ``finished(str)`` with the path of the model's first file, ``failed(str)`` (one line,
    no traceback: no room, checksum mismatch, offline, no access…), ``cancelled(str)``
    (one line saying the next download resumes), ``running_changed(bool)``.
    """

    progress = Signal(object)
    finished = Signal(str)
    failed = Signal(str)
    cancelled = Signal(str)
    running_changed = Signal(bool)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._request: DownloadRequest | None = None
        self._cancel = threading.Event()
        self._idle = threading.Event()
        self._idle.set()
        self._last: DownloadProgress | None = None
        self._relay = _ProgressRelay(self)
        self._relay.report.connect(self._on_relay_report)

    @property
    def running(self) -> bool:
        """Whether a download is under way (until its outcome reached the GUI thread)."""
        return self._request is not None

    @property
    def worker_done(self) -> bool:
        """Whether no download job is on the pool (it may not have reported back yet)."""
        return self._idle.is_set()

    @property
    def request(self) -> DownloadRequest | None:
        """The download under way, or None."""
        return self._request

    @property
    def last_progress(self) -> DownloadProgress | None:
        """The latest report of the download under way (or of the last one)."""
        return self._last

    def start(self, request: DownloadRequest) -> None:
        """Start downloading ``request`` on the job pool (GUI thread)."""
        assert not self.running, "one download at a time"
        self._request = request
        self._last = None
        cancel = threading.Event()
        self._cancel = cancel
        self._idle.clear()
        relay = self._relay
        idle = self._idle

        def report(p: DownloadProgress) -> None:
            # RuntimeError: the window (and the relay) went away; nobody is listening.
            with contextlib.suppress(RuntimeError):
                relay.report.emit(p)

        def job() -> str:
            pool = job_pool()
            pool.releaseThread()  # long and mostly waiting: give the slot back meanwhile
            try:
                path = download(
                    request.listing,
                    request.entry,
                    to=request.to,
                    hub_cache=request.hub_cache,
                    progress=report,
                    cancel=cancel,
                )
            finally:
                pool.reserveThread()
                idle.set()
            return str(path)

        self.running_changed.emit(True)
        run_job(job, on_success=self._on_job_done, on_failure=self._on_job_failed, parent=self)

    def cancel(self) -> None:
        """Stop the download at its next chunk; the partial file stays (any thread)."""
        self._cancel.set()

    def wait(self, timeout_ms: int = 5000) -> bool:
        """Cancel the download under way and wait for it to stop (for closing the window).

        Return whether it stopped in time; otherwise it stops on its own a moment later
        and the application's exit waits for the pool.
        """
        self.cancel()
        return self._idle.wait(timeout_ms / 1000)

    @Slot(object)
    def _on_relay_report(self, p: DownloadProgress) -> None:
        if self._request is None:
            return  # a report overtaken by the outcome
        self._last = p
        self.progress.emit(p)

    def _end(self) -> None:
        self._request = None
        self.running_changed.emit(False)

    def _on_job_done(self, path: str) -> None:
        self._end()
        self.finished.emit(path)

    def _on_job_failed(self, error: Exception) -> None:
        self._end()
        if isinstance(error, DownloadCancelledError):
            last = self._last
            where = (
                f" at {format_bytes(last.done_bytes)} of {format_bytes(last.total_bytes)}"
                if last is not None and last.stage != "checking"
                else ""
            )
            self.cancelled.emit(
                f"Download cancelled{where}; the partial file stays and the next Download "
                "resumes it."
            )
            return
        self.failed.emit(f"Could not download: {describe_error(error)}")
