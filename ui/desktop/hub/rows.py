"""What the Find on Hugging Face dialog shows, pure: no Qt (it is worked out on the job pool).

:func:`read_repo_files` lists a repo's GGUF files and reads their headers over HTTP
(header only: a few KiB to a few MiB each, :func:`app.sources.hf.read_models`), in small
batches so that it can say how far it is and stop between batches when cancelled;
:func:`file_rows` gives each file its Compare row at the settings and hardware in force
(:func:`ui.desktop.compare.rows.repo_table`, as the Compare tab makes it for a repo) and
its badge (:func:`app.planning.badges.badge`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

from app.errors import RateLimitedError, RemoteAuthError, RemoteUnavailableError
from app.hardware.devices import Hardware
from app.planning.badges import Badge, badge
from app.planning.compare import CompareRow, RunnerChoice
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.sources.hf import ModelEntry, RemoteModel, list_repo, read_models
from ui.desktop.compare.rows import RepoHeaders, repo_table

HEADER_BATCH: Final = 4
"""Headers read at once (in parallel) between two progress reports."""

Progress = Callable[[str, int, int], None]
"""``progress(what, done, total)``, called on the pool thread."""


class ReadCancelled(Exception):
    """The user cancelled reading a repo's headers (raised between two batches)."""


@dataclass(frozen=True, slots=True)
class FileRow:
    """One GGUF model of the repo (all its shards): its ``entry``, its Compare ``row``
    at the settings and its ``badge``."""

    entry: ModelEntry
    row: CompareRow
    badge: Badge

    @property
    def size_bytes(self) -> int:
        """Return the bytes of all its files."""
        return self.entry.size_bytes


@dataclass(frozen=True, slots=True)
class RepoFiles:
    """A repo's files with their badges at ``settings`` on ``hardware`` (named
    ``hardware_label`` on screen)."""

    headers: RepoHeaders
    rows: tuple[FileRow, ...]
    settings: Settings
    hardware: Hardware
    hardware_label: str

    @property
    def repo_id(self) -> str:
        """Return the repo's id ("org/name")."""
        return self.headers.listing.repo_id


def read_repo_files(
    repo_id: str, progress: Progress, cancel: threading.Event | None = None
) -> RepoHeaders:
    """List ``repo_id`` and read every GGUF model's header (pool thread).

    ``progress`` hears "Listing the files" then "Reading the file headers" with how many
    of how many are done; ``cancel`` set stops before the next batch with
    :class:`ReadCancelled`. Raise :class:`~app.errors.RemoteError` subclasses for the
    listing (offline, no such repo, no access); a header that cannot be read carries its
    error (and an offline one, every file's).
    """
    progress("Listing the files", 0, 0)
    listing = list_repo(repo_id)
    entries = list(listing.models)
    models: list[RemoteModel] = []
    for start in range(0, len(entries), HEADER_BATCH):
        if cancel is not None and cancel.is_set():
            raise ReadCancelled(repo_id)
        progress("Reading the file headers", start, len(entries))
        batch = entries[start : start + HEADER_BATCH]
        read = read_models(listing, batch)
        models.extend(read)
        error = read[0].error
        if isinstance(error, RemoteUnavailableError | RateLimitedError | RemoteAuthError):
            # offline or no access: every other file would fail the same way
            models.extend(RemoteModel(e, None, error) for e in entries[len(models) :])
            break
    progress("Reading the file headers", len(entries), len(entries))
    return RepoHeaders(repo_id, listing, tuple(models))


def file_rows(
    headers: RepoHeaders,
    settings: Settings,
    hardware: Hardware,
    hardware_label: str,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> RepoFiles:
    """Return each file of ``headers`` with its Compare row and badge at ``settings``."""
    result = repo_table(headers, settings, hardware, factors, runner)
    by_name = {m.entry.name: m.entry for m in headers.models}
    rows = tuple(FileRow(by_name[r.name], r, badge(r)) for r in result.rows)
    return RepoFiles(headers, rows, settings, hardware, hardware_label)
