"""The Verify tab's tables: the comparison of one run, the history of past runs, and a Users
run's user counts (measured beside predicted)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Final

from PySide6.QtCore import (
    Qt,
)

from app.measured.results_db import StoredRun
from app.measured.users_result import RoundSummary
from app.units import format_mib, format_when
from ui.desktop.shared.record_table import RIGHT, RecordTableModel
from ui.desktop.verify.rows import (
    SpeedRow,
    TableRow,
    memory_text,
    speed_text,
)

_HEADERS: Final = ("Component", "Estimate", "llama.cpp", "Difference", "Measured")

RSS_TIP: Final = (
    "Resident memory (RSS) counts only the pages a run touched. The compute buffers are "
    "reserved for the largest batch these settings allow and a short benchmark fills a "
    "part of them, so the anonymous and total rows stay below the estimate, which is what "
    "the settings can need (an upper bound: more than 10 % above it would be a defect). "
    "The mapped weights count once read, both ways."
)
"""Why the RSS rows differ from the estimate while the rows above agree to 0.00 MiB
(:data:`app.measured.bench_result.RSS_REL_TOLERANCE`)."""


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
        if role == Qt.ItemDataRole.ToolTipRole and not isinstance(row, SpeedRow):
            if row.component.startswith("RSS "):
                return RSS_TIP
            if col == 2 and row.engine_bytes is None:
                return "llama.cpp's log has no figure for this"
            return None
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
                format_when(run.created_at),
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


UsersRow = tuple[RoundSummary, RoundSummary | None]
"""One user count of a Users run: what was measured, and the prediction of the same round."""

_USERS_HEADERS: Final = (
    "Users",
    "tok/s each",
    "predicted",
    "First token",
    "predicted",
    "Met the SLO",
)
"""Short, so that six columns fit a 1004-pixel window: measured first, its prediction next
(the header tooltips say so)."""

USERS_HEADER_TIPS: Final = (
    "Users decoding together",
    "Each user's tok/s, measured (mean over the users; the tooltip has the slowest)",
    "Each user's tok/s, predicted by the speed model for the same round",
    "Time to first token, measured (mean over the users; the tooltip has p95)",
    "Time to first token, predicted for the same round",
    "Requests that met both limits of the SLO",
)


def users_rows(
    measured: Sequence[RoundSummary], predicted: Mapping[int, RoundSummary]
) -> tuple[UsersRow, ...]:
    """Return one row per measured user count, with its prediction, by count."""
    return tuple((m, predicted.get(m.n_users)) for m in sorted(measured, key=lambda m: m.n_users))


class UsersTableModel(RecordTableModel[UsersRow]):
    """A Users run, one row per user count: each user's tok/s and the mean time to first
    token, measured beside predicted, and the requests that met the SLO (read-only).

    The tooltip gives the worst user and the p95 figures; ``Qt.UserRole`` the raw numbers
    (tok/s, seconds, the share that met the SLO).
    """

    HEADERS = _USERS_HEADERS

    def headerData(
        self, section: int, orientation: Qt.Orientation, role: int = Qt.ItemDataRole.DisplayRole
    ) -> object:
        """Return the header text, or its tooltip (what each column holds)."""
        if (
            role == Qt.ItemDataRole.ToolTipRole
            and orientation == Qt.Orientation.Horizontal
            and 0 <= section < len(USERS_HEADER_TIPS)
        ):
            return USERS_HEADER_TIPS[section]
        return super().headerData(section, orientation, role)

    def cell(self, record: UsersRow, column: int, role: int) -> object:
        """Return the text, the raw number (UserRole), the tooltip or the alignment."""
        m, p = record
        met = round(m.goodput_share * m.n_requests)
        if role == Qt.ItemDataRole.DisplayRole:
            mark = "✓" if met == m.n_requests else "✗"
            return (
                str(m.n_users),
                f"{m.per_user_tok_per_s:.1f}",
                "—" if p is None else f"{p.per_user_tok_per_s:.1f}",
                f"{m.ttft_s:.2f} s",
                "—" if p is None else f"{p.ttft_s:.2f} s",
                f"{mark} {met} of {m.n_requests}",
            )[column]
        if role == Qt.ItemDataRole.UserRole:
            return (
                m.n_users,
                m.per_user_tok_per_s,
                None if p is None else p.per_user_tok_per_s,
                m.ttft_s,
                None if p is None else p.ttft_s,
                m.goodput_share,
            )[column]
        if role == Qt.ItemDataRole.ToolTipRole:
            s = m if column in (1, 3) else p
            if s is not None and column in (1, 2):
                return (
                    f"mean {s.per_user_tok_per_s:.1f} tok/s each, slowest user "
                    f"{s.per_user_tok_per_s_min:.1f}; p95 time per token "
                    f"{1000 * s.tpot_p95_s:.0f} ms"
                )
            if s is not None and column in (3, 4):
                return f"first token: mean {s.ttft_s:.2f} s, p95 {s.ttft_p95_s:.2f} s"
            if column == 5:
                return f"{met} of {m.n_requests} requests met {m.slo.describe()}"
            return None
        if role == Qt.ItemDataRole.TextAlignmentRole and column > 0:
            return RIGHT
        return None
