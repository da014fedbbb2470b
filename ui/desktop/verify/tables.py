"""The Verify tab's tables: the comparison of one run, and the history of past runs."""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import (
    Qt,
)

from app.measured.results_db import StoredRun
from app.units import format_mib
from ui.desktop.shared.record_table import RIGHT, RecordTableModel
from ui.desktop.verify.rows import (
    SpeedRow,
    TableRow,
    memory_text,
    speed_text,
)

_HEADERS: Final = ("Component", "Estimate", "llama.cpp", "Difference", "Measured")


class ComparisonTableModel(RecordTableModel[TableRow]):
    """Rows of :class:`ComparisonRow` and :class:`SpeedRow` (read-only).

    Columns: component, estimate, llama.cpp, difference, measured; memory in MiB. The
    difference is against llama.cpp's number, or the measurement where llama.cpp has none.
    ``Qt.UserRole`` gives the raw numbers (bytes; tok/s or s).
    """

    HEADERS = _HEADERS

    def cell(self, record: TableRow, column: int, role: int) -> object:
        """Return the text, the raw number (UserRole) or the alignment of a cell."""
        row, col = record, column
        if role == Qt.ItemDataRole.DisplayRole:
            return speed_text(row, col) if isinstance(row, SpeedRow) else memory_text(row, col)
        if role == Qt.ItemDataRole.UserRole:
            if isinstance(row, SpeedRow):
                diff = row.difference_percent
                return (row.component, row.estimate, None, diff, row.measured.mean)[col]
            return (
                row.component,
                row.estimate_bytes,
                row.engine_bytes,
                row.difference_bytes,
                row.measured_bytes,
            )[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return RIGHT
        return None


_HISTORY_HEADERS: Final = ("Date", "Plan", "Context", "pp tok/s", "tg tok/s", "TTFT", "Peak RSS")


class HistoryTableModel(RecordTableModel[StoredRun]):
    """Past benchmark runs of one model (:class:`app.measured.results_db.StoredRun`), newest first.

    ``Qt.UserRole`` gives the run's id in every column.
    """

    HEADERS = _HISTORY_HEADERS

    def cell(self, record: StoredRun, column: int, role: int) -> object:
        """Return the text, the run id (UserRole) or the alignment of a cell."""
        run = record
        if role == Qt.ItemDataRole.DisplayRole:
            n_ctx = run.settings.get("n_ctx")
            cells = (
                run.created_at.replace("T", " ")[:16],
                run.mode,
                f"{n_ctx:,}" if isinstance(n_ctx, int) else "?",
                "—" if run.pp_tok_per_s is None else f"{run.pp_tok_per_s:.1f}",
                "—" if run.tg_tok_per_s is None else f"{run.tg_tok_per_s:.1f}",
                "—" if run.ttft_s is None else f"{run.ttft_s:.3f} s",
                "—" if run.peak_rss_bytes is None else format_mib(run.peak_rss_bytes),
            )
            return cells[column]
        if role == Qt.ItemDataRole.UserRole:
            return run.id
        if role == Qt.ItemDataRole.TextAlignmentRole and column > 1:
            return RIGHT
        return None
