"""The Find on Hugging Face dialog's two tables: the repos found, and one repo's GGUF files.

Both are read-only :class:`~ui.desktop.shared.record_table.RecordTableModel`\\ s;
``Qt.UserRole`` gives the record of a row (a :class:`~app.sources.hf.HubRepo` or a
:class:`~ui.desktop.hub.rows.FileRow`) on every column.
"""

from __future__ import annotations

from typing import ClassVar, Final

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor

from app.planning.badges import Badge
from app.sources.hf import HubRepo
from app.units import format_bytes
from ui.desktop.hub.rows import FileRow
from ui.desktop.shared.record_table import RIGHT, RecordTableModel
from ui.desktop.shared.widgets import wrap_tip

BADGE_COLORS: Final = {
    "gpu": "#1b7f3b",
    "partial": "#8a6d00",
    "ram": "#8a6d00",
    "too_large": "#b00020",
    "unverified": "#5f6368",
    "unread": "#5f6368",
}
"""Text colour per badge kind: green only for a yes on every layer; grey for no verdict."""


def badge_color(badge: Badge) -> QColor:
    """Return the colour ``badge``'s words are drawn in."""
    return QColor(BADGE_COLORS[badge.kind])


def _count(n: int | None) -> str:
    return "—" if n is None else f"{n:,}"


class ReposTableModel(RecordTableModel[HubRepo]):
    """The repos a search found, most downloaded first (GUI thread)."""

    HEADERS: ClassVar[tuple[str, ...]] = ("Repo", "Downloads", "Likes")

    def cell(self, record: HubRepo, column: int, role: int) -> object:
        """Return the repo's id (gated ones say so), downloads or likes."""
        if role == Qt.ItemDataRole.UserRole:
            return record
        if role == Qt.ItemDataRole.DisplayRole:
            if column == 0:
                return record.repo_id + (" (gated)" if record.gated else "")
            return _count(record.downloads if column == 1 else record.likes)
        if role == Qt.ItemDataRole.TextAlignmentRole and column > 0:
            return RIGHT
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == 0 and record.gated:
                return wrap_tip(
                    f"{record.repo_id} is gated: ask for access on its Hugging Face page, "
                    "then log in (HF_TOKEN or huggingface-cli login) to read it"
                )
            if column == 1:
                return "Downloads over the last 30 days, as the hub counts them"
        return None


class FilesTableModel(RecordTableModel[FileRow]):
    """One repo's GGUF models (a split model is one row) with size and badge (GUI thread)."""

    HEADERS: ClassVar[tuple[str, ...]] = ("File", "Quant", "Size", "On this hardware")

    def cell(self, record: FileRow, column: int, role: int) -> object:
        """Return the file name, its quant, its size or its badge."""
        if role == Qt.ItemDataRole.UserRole:
            return record
        if role == Qt.ItemDataRole.DisplayRole:
            if column == 0:
                name = record.entry.name
                shards = len(record.entry.files)
                return name + (f" (+{shards - 1} more parts)" if shards > 1 else "")
            if column == 1:
                return record.row.quant or "?"
            if column == 2:
                return format_bytes(record.size_bytes)
            return record.badge.text
        if role == Qt.ItemDataRole.TextAlignmentRole and column == 2:
            return RIGHT
        if role == Qt.ItemDataRole.ForegroundRole and column == 3:
            return badge_color(record.badge)
        if role == Qt.ItemDataRole.ToolTipRole and column == 3:
            return wrap_tip(record.badge.detail)
        return None
