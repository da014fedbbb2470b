"""Verify's Users view: a Users run in words, as a plot and as a table (GUI thread).

:class:`UsersView` shows a :class:`~ui.desktop.verify.users_run.UsersOutcome`: the answer
in words, measured and predicted ("4 users get ≥ 10 tok/s and first token ≤ 2 s; the 5th
does not"), under the SLO it was judged by and where the prediction comes from
(calibrated on this machine's runs or not); each user's tok/s and first token against
the user count (:class:`~ui.desktop.verify.users_plot.UsersPlotWidget`, the SLO's lines
drawn); and the same numbers side by side per user count
(:class:`~ui.desktop.verify.tables.UsersTableModel`).
"""

from __future__ import annotations

import html
from typing import Final

from PySide6.QtCore import Qt
from PySide6.QtWidgets import (
    QAbstractItemView,
    QFrame,
    QHeaderView,
    QLabel,
    QScrollArea,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.measured.results_db import StoredUsersRun
from app.measured.users_result import RoundSummary, Slo
from app.units import format_when
from ui.desktop.shared.speed import USERS_SLO, basis_text
from ui.desktop.verify.tables import UsersTableModel, users_rows
from ui.desktop.verify.users_plot import UsersPlotWidget, plot_points, predicted_curve
from ui.desktop.verify.users_run import UsersOutcome

NO_RUN: Final = (
    "No Users run yet. <b>Users</b> serves 1, 2, 4 … users at once on llama.cpp "
    "(continuous batching, up to the parallel slots on screen, at least 4) and says how many "
    "get their answers within the SLO, measured beside what the speed model predicts."
)


def answer_html(outcome: UsersOutcome) -> str:
    """Return the view's answer: measured, predicted, and what both were judged by."""
    r = outcome.result
    basis = basis_text(outcome.prediction_source)
    return (
        f"<b>Measured:</b> {html.escape(outcome.answer)}<br>"
        f"<b>Predicted:</b> {html.escape(outcome.predicted_answer)}<br>"
        f"<small>SLO: {html.escape(outcome.slo.describe())} · predicted by the speed model, "
        f"{html.escape(basis)} · {html.escape(r.model_name)}, {r.plan.n_prompt}-token "
        f"prompts, {r.plan.n_gen} tokens each, users arriving "
        f"{html.escape(r.plan.arrivals.describe())}, {r.n_threads} threads</small>"
    )


def stored_rounds(run: StoredUsersRun) -> tuple[Slo, tuple[RoundSummary, ...]] | None:
    """Return a stored Users run's SLO and rounds (None where the record cannot be read:
    another version's, or damaged)."""
    try:
        slo_data = run.result["slo"]
        slo = Slo(ttft_s=float(slo_data["ttft_s"]), min_tok_per_s=float(slo_data["min_tok_per_s"]))
        rows = tuple(
            RoundSummary(**{**u, "slo": slo})
            for u in run.result.get("users", ())
            if isinstance(u, dict)
        )
    except (KeyError, TypeError, ValueError):
        return None
    return (slo, rows) if rows else None


def stored_html(run: StoredUsersRun, slo: Slo) -> str:
    """Return the answer of a stored run: measured only (the prediction needs a new run)."""
    r = run.result
    plan = r.get("plan") if isinstance(r.get("plan"), dict) else {}
    assert isinstance(plan, dict)
    what = (
        f"{plan.get('n_prompt', '?')}-token prompts, {plan.get('n_gen', '?')} tokens each"
        if plan
        else "its plan unknown"
    )
    return (
        f"<b>Measured {html.escape(format_when(run.created_at))}:</b> "
        f"{html.escape(str(r.get('answer', '')))}<br>"
        f"<small>SLO: {html.escape(slo.describe())} · "
        f"{html.escape(str(r.get('model_name', run.model_file)))}, {html.escape(what)}, "
        f"{r.get('n_threads', '?')} threads. Press <b>Users</b> to measure again with the "
        "prediction beside it.</small>"
    )


class UsersView(QWidget):
    """The Users run's answer, plot and table; empty (with what the run does) until
    :meth:`set_outcome`.

    They scroll together: in a 700-pixel window the Verify tab leaves them ~250 pixels,
    less than the plot and the table need, and squeezed, Qt drew the table over the plot.
    The table is as tall as its rows (no scroll bar of its own).
    """

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setObjectName("users_view")
        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        self.scroll_area = QScrollArea()
        self.scroll_area.setObjectName("users_scroll")
        self.scroll_area.setWidgetResizable(True)
        self.scroll_area.setFrameShape(QFrame.Shape.NoFrame)
        self.scroll_area.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        outer.addWidget(self.scroll_area)
        content = QWidget()
        self.scroll_area.setWidget(content)
        layout = QVBoxLayout(content)
        self.answer = QLabel(NO_RUN + f"<br><small>SLO: {USERS_SLO.describe()}</small>")
        self.answer.setObjectName("users_answer")
        self.answer.setWordWrap(True)
        self.answer.setTextFormat(Qt.TextFormat.RichText)
        self.answer.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.answer.setAccessibleName("Users run: the answer")
        layout.addWidget(self.answer)
        self.plot = UsersPlotWidget()
        layout.addWidget(self.plot)
        self.table_model = UsersTableModel(self)
        self.table = QTableView()
        self.table.setObjectName("users_table")
        self.table.setModel(self.table_model)
        self.table.setAccessibleName(
            "Users run: tok/s each and first token, measured and predicted"
        )
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setAlternatingRowColors(True)
        self.table.setVerticalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAlwaysOff)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.NoSelection)
        layout.addWidget(self.table)
        layout.addStretch(1)
        self._fit_table()
        self._outcome: UsersOutcome | None = None
        self._stored: StoredUsersRun | None = None

    @property
    def outcome(self) -> UsersOutcome | None:
        """The run shown (None before the first)."""
        return self._outcome

    @property
    def slo(self) -> Slo:
        """The SLO the run shown was judged by (the default one before a run)."""
        if self._outcome is not None:
            return self._outcome.slo
        rounds = stored_rounds(self._stored) if self._stored is not None else None
        return rounds[0] if rounds is not None else USERS_SLO

    @property
    def stored(self) -> StoredUsersRun | None:
        """The stored run shown while no run of this session is (None: none)."""
        return self._stored

    def show_stored(self, run: StoredUsersRun | None) -> None:
        """Show the newest stored Users run of the model (measured only), or the empty view;
        a record that cannot be read shows as none."""
        self._outcome = None
        rounds = stored_rounds(run) if run is not None else None
        if run is None or rounds is None:
            self._stored = None
            self.plot.set_data((), USERS_SLO)
            self.table_model.set_rows(())
            self._fit_table()
            self.answer.setText(NO_RUN + f"<br><small>SLO: {USERS_SLO.describe()}</small>")
            return
        self._stored = run
        slo, measured = rounds
        self.plot.set_data(plot_points(measured, {}), slo)
        self.table_model.set_rows(users_rows(measured, {}))
        self._fit_table()
        self.answer.setText(stored_html(run, slo))

    def set_outcome(self, outcome: UsersOutcome) -> None:
        """Show a finished Users run."""
        self._outcome = outcome
        self._stored = None
        points = plot_points(outcome.measured, outcome.predicted)
        self.plot.set_data(points, outcome.slo, predicted_curve(outcome.predicted))
        self.table_model.set_rows(users_rows(outcome.measured, outcome.predicted))
        self._fit_table()
        self.answer.setText(answer_html(outcome))

    def _fit_table(self) -> None:
        """Make the table exactly as tall as its header and rows."""
        rows = self.table_model.rowCount()
        row_h = self.table.verticalHeader().defaultSectionSize()
        header_h = self.table.horizontalHeader().sizeHint().height()
        self.table.setFixedHeight(header_h + rows * row_h + 2 * self.table.frameWidth())
