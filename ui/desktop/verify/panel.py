"""The Verify tab: llama.cpp's own dry run, benchmark and Users run for the settings on
screen, compared with the estimate, and the model's benchmark history.

:class:`VerifyPanel` drives :class:`~ui.desktop.verify.controller.VerifyController`
(which runs :mod:`ui.desktop.verify.threads` and :mod:`ui.desktop.verify.users_run` and
makes :mod:`ui.desktop.verify.rows`) and shows the estimate vs engine vs difference (and
the *Measured* column of a benchmark) in
:class:`~ui.desktop.verify.tables.ComparisonTableModel`, a Users run in
:class:`~ui.desktop.verify.users_view.UsersView` (its own tab beside the comparison), the
history in :class:`~ui.desktop.verify.tables.HistoryTableModel`. The progress bar follows
llama.cpp's load progress, then the benchmark's steps or the Users run's rounds; Cancel
stops either; an engine failure opens a dialog with its cause and llama.cpp's last log
lines, a benchmark or Users error shows as a banner; the app stays up.

The estimate compared is for *this machine* (where the engine runs), whatever hardware the
memory view plans for. A catalog model (``catalog:NAME``, planned from its published
config) has no file to run: the controller refuses it with
:data:`~ui.desktop.shared.model_card.CATALOG_NO_FILE` before any child process starts, and the
panel disables the buttons and says so.
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import (
    Qt,
)
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QApplication,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QSplitter,
    QTableView,
    QTabWidget,
    QVBoxLayout,
    QWidget,
)

from app.measured.results_db import StoredRun, StoredUsersRun
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.model_card import CATALOG_NO_FILE, LoadedModel
from ui.desktop.verify.controller import VerifyController
from ui.desktop.verify.rows import (
    HISTORY_LIMIT,
    BenchmarkOutcome,
    EngineFailure,
    VerifyResult,
    saved_text,
)
from ui.desktop.verify.tables import ComparisonTableModel, HistoryTableModel
from ui.desktop.verify.users_run import UsersOutcome
from ui.desktop.verify.users_view import UsersView

RUN_TIP: Final = "Run llama.cpp's dry run with the settings on screen (F5)"
BENCH_TIP: Final = (
    "Load the model on llama.cpp with the settings on screen and measure its memory, "
    "prompt and generation speed and time to first token; the run is stored"
)
USERS_TIP: Final = (
    "Serve 1, 2, 4 … users together on llama.cpp (continuous batching, up to the parallel "
    "slots on screen, at least 4): each user's tok/s and time to first token, measured "
    "beside predicted, and how many meet the SLO; the run is stored"
)
NOT_RUN: Final = "Not run yet."


class VerifyPanel(QWidget):
    """The Verify tab: Dry run and Benchmark, progress, Cancel, the comparison table and the
    history of past benchmarks of the model (GUI thread).

    ``request_run`` is called with no arguments when the user asks for a run; the main
    window answers by calling :meth:`VerifyController.start` with the state on screen (the
    Benchmark button first asks the controller for a benchmark, so the same request serves).

    :meth:`set_model` says which model is open (the main window connects its
    ``estimates.model_changed`` to it). A catalog model disables both runs.
    """

    def __init__(
        self, controller: VerifyController, request_run: object, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        assert callable(request_run), "request_run must be callable"
        self._controller = controller
        self._request_run = request_run
        self._no_file = False
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Ask llama.cpp itself what these settings cost on this machine. A dry run reads "
            "the model without loading its weights (as llama-server's --fit does), in a few "
            "seconds; a quick benchmark loads it and measures memory and speed; Users serves "
            "1, 2, 4 … users at once and says how many get their answers in time. Each runs in "
            "a separate process."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row = QHBoxLayout()
        self.run_button = QPushButton("&Dry run on llama.cpp")
        self.run_button.setToolTip(RUN_TIP)
        self.run_button.clicked.connect(self._on_run_clicked)
        self.bench_button = QPushButton("&Benchmark (quick)")
        self.bench_button.setToolTip(BENCH_TIP)
        self.bench_button.clicked.connect(self._on_bench_clicked)
        self.users_button = QPushButton("&Users")
        self.users_button.setToolTip(USERS_TIP)
        self.users_button.clicked.connect(self._on_users_clicked)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the run (Esc)")
        self.cancel_button.setShortcut("Esc")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(controller.cancel)
        self._started_by = self.run_button
        """The button of the run under way (or the last one): the focus goes back to it."""
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setTextVisible(False)
        self.progress.setAccessibleName("Run progress")
        self.progress.hide()  # shown while a run is under way
        row.addWidget(self.run_button)
        row.addWidget(self.bench_button)
        row.addWidget(self.users_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress, 1)
        row.addStretch(0)
        layout.addLayout(row)
        self.banner = MessageBanner(name="verify_banner")
        layout.addWidget(self.banner)
        self.status = QLabel(NOT_RUN)
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.users_view = UsersView()
        self.table_model = ComparisonTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Estimate compared with llama.cpp and the measurement")
        self.table.verticalHeader().hide()
        # the sizes whole on one line ("235.16 MiB" wrapped at 1004 px); the component's
        # name and the difference share the room left, wrapping (rows grow) where they must
        header = self.table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setSectionResizeMode(3, QHeaderView.ResizeMode.Stretch)
        self.table.verticalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.setAlternatingRowColors(True)
        self.history_model = HistoryTableModel(self)
        self.history = QTableView()
        self.history.setModel(self.history_model)
        self.history.setAccessibleName("Past benchmarks of this model")
        self.history.verticalHeader().hide()
        # the date in words ("1 Dec 2026, 17:49 UTC") and the sizes whole, at 1004 px too
        history_header = self.history.horizontalHeader()
        history_header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        history_header.setSectionResizeMode(1, QHeaderView.ResizeMode.Stretch)
        self.history.setAlternatingRowColors(True)
        self.history.setSelectionBehavior(QTableView.SelectionBehavior.SelectRows)
        history_box = QWidget()
        history_layout = QVBoxLayout(history_box)
        history_layout.setContentsMargins(0, 0, 0, 0)
        self.history_label = QLabel("Past benchmarks of this model: none yet.")
        history_layout.addWidget(self.history_label)
        history_layout.addWidget(self.history, 1)
        self.results = QTabWidget()
        self.results.setObjectName("verify_results")
        self.results.setDocumentMode(True)
        self.results.addTab(self.table, "Estimate vs llama.cpp")
        self.results.addTab(self.users_view, "Users")
        self.results.setTabToolTip(1, USERS_TIP)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.setChildrenCollapsible(False)
        splitter.addWidget(self.results)
        splitter.addWidget(history_box)
        splitter.setStretchFactor(0, 4)  # the results first: at 700 pixels tall the Users
        splitter.setStretchFactor(1, 1)  # tab needs the room, the history a few rows
        self.history.setMinimumHeight(4 * self.history.verticalHeader().defaultSectionSize())
        splitter.setSizes([4000, 1000])  # 4:1 from the start (scaled to the room there is)
        layout.addWidget(splitter, 1)
        note = QLabel(
            "llama.cpp prints MiB to two decimals (±0.005 MiB); weights are exact. Measured: "
            "the benchmark's speeds (mean ± sd) and the process's resident memory above its "
            "level before loading, only the pages the run touched: below the estimate."
        )
        note.setWordWrap(True)
        note.setEnabled(False)
        layout.addWidget(note)

        controller.running_changed.connect(self._on_controller_running_changed)
        controller.step.connect(self._on_controller_step)
        controller.progress.connect(self._on_controller_progress)
        controller.finished.connect(self._on_controller_finished)
        controller.benchmark_finished.connect(self._on_controller_benchmark_finished)
        controller.users_finished.connect(self._on_controller_users_finished)
        controller.failed.connect(self._on_controller_failed)
        controller.cancelled.connect(self._on_controller_cancelled)
        controller.history_changed.connect(self._on_controller_history_changed)
        controller.users_history_changed.connect(self._on_controller_users_history_changed)
        controller.history_failed.connect(self.banner.show_message)

    def _on_run_clicked(self) -> None:
        self._controller.request_kind("dry_run")
        self._call_request_run()

    def _on_bench_clicked(self) -> None:
        self._controller.request_kind("benchmark")
        self._call_request_run()
        self._controller.request_kind("dry_run")  # nothing started (no model): forget it

    def _on_users_clicked(self) -> None:
        self._controller.request_kind("users")
        self._call_request_run()
        self._controller.request_kind("dry_run")  # nothing started (no model): forget it

    def _call_request_run(self) -> None:
        request = self._request_run
        assert callable(request), "checked in __init__"
        request()

    def showEvent(self, event: QShowEvent) -> None:
        """Show the history of the model on screen (read on the job pool)."""
        super().showEvent(event)
        estimates = getattr(self.window(), "estimates", None)
        model = getattr(estimates, "model", None)
        if isinstance(model, LoadedModel):
            self.set_model(model)

    def set_model(self, model: LoadedModel | None) -> None:
        """Say which model is open; while shown, read its history (on the job pool).

        A catalog model has no file: nothing can run, and it has no history.
        """
        no_file = model is not None and model.is_catalog
        if no_file != self._no_file:
            self._no_file = no_file
            tip = CATALOG_NO_FILE if no_file else None
            self.run_button.setToolTip(tip or RUN_TIP)
            self.bench_button.setToolTip(tip or BENCH_TIP)
            self.users_button.setToolTip(tip or USERS_TIP)
            if no_file:
                self.banner.hide()
                self.table_model.set_rows(())  # the last run was of another model
                self.status.setText(CATALOG_NO_FILE)
            elif self.status.text() == CATALOG_NO_FILE:
                self.status.setText(NOT_RUN)
            self._update_buttons()
        if model is not None and self.isVisible():
            self._controller.refresh_history(model.path)

    def _update_buttons(self) -> None:
        running = self._controller.running
        self.run_button.setEnabled(not running and not self._no_file)
        self.bench_button.setEnabled(not running and not self._no_file)
        self.users_button.setEnabled(not running and not self._no_file)
        self.cancel_button.setEnabled(running)

    def _run_button(self, kind: str | None) -> QPushButton:
        """Return the button that starts a ``kind`` run."""
        if kind == "benchmark":
            return self.bench_button
        return self.users_button if kind == "users" else self.run_button

    def _on_controller_running_changed(self, running: bool) -> None:
        focus = QApplication.focusWidget()
        if running:
            self._started_by = self._run_button(self._controller.kind)
            if focus is None or focus in (self.run_button, self.bench_button, self.users_button):
                # The button pressed is disabled now; left to Qt, the focus would move on to
                # Cancel, and a second Space (or a held key's repeat) would stop the run at
                # once. It goes to the results the run fills; Esc (or a click) cancels.
                self.results.setFocus(Qt.FocusReason.OtherFocusReason)
        self._update_buttons()
        bench = self._controller.kind in ("benchmark", "users")
        self.progress.setRange(0, 100 if bench else (0 if running else 1))
        self.progress.setValue(0)
        self.progress.setTextVisible(bench)
        self.progress.setVisible(running)
        if running:
            self.banner.hide()
            if self._controller.kind == "users":  # the run's own tab, from the start
                self.results.setCurrentWidget(self.users_view)
            self.status.setText("Starting llama.cpp…")
        elif focus is None or focus is self.cancel_button or self.results.isAncestorOf(focus):
            # back to the button the run began from, unless the user moved on meanwhile
            self._started_by.setFocus(Qt.FocusReason.OtherFocusReason)

    def _on_controller_step(self, label: str) -> None:
        self.status.setText(label[:1].upper() + label[1:] + "…")

    def _on_controller_progress(self, percent: int, label: str) -> None:
        self.progress.setValue(percent)
        self.status.setText(label[:1].upper() + label[1:] + ("" if percent >= 100 else "…"))

    def _on_controller_finished(self, result: VerifyResult) -> None:
        self.table_model.set_rows(result.rows)
        self.results.setCurrentWidget(self.table)
        self.status.setText(f"Done: {result.summary}")

    def _on_controller_benchmark_finished(self, outcome: BenchmarkOutcome) -> None:
        self.table_model.set_rows(outcome.rows)
        self.results.setCurrentWidget(self.table)
        stored = saved_text(outcome.history_runs, "benchmark")
        self.status.setText(f"Done: {outcome.summary}{stored}")
        if outcome.store_error:
            self.banner.show_message(f"Benchmark done, but {outcome.store_error}.")

    def _on_controller_users_finished(self, outcome: UsersOutcome) -> None:
        self.users_view.set_outcome(outcome)
        self.results.setCurrentWidget(self.users_view)
        r = outcome.result
        stored = saved_text(outcome.history_runs, "Users run")
        self.status.setText(
            f"Done: {len(r.rounds)} rounds of {r.plan.n_prompt}-token prompts and "
            f"{r.plan.n_gen} tokens each, users arriving {r.plan.arrivals.describe()}, "
            f"{r.n_threads} threads{stored}"
        )
        if outcome.store_error:
            self.banner.show_message(f"Users run done, but {outcome.store_error}.")

    def _on_controller_users_history_changed(
        self, answer: tuple[str, StoredUsersRun | None]
    ) -> None:
        """Show the model's newest stored Users run, unless this session's run of the same
        model is on screen (it has the prediction beside it)."""
        path, run = answer
        outcome = self.users_view.outcome
        if outcome is not None and outcome.result.model_path == path:
            return
        self.users_view.show_stored(run)

    def _on_controller_history_changed(self, runs: tuple[StoredRun, ...]) -> None:
        self.history_model.set_rows(runs)
        n = len(runs)
        if n:
            count = f"the newest {n}" if n >= HISTORY_LIMIT else f"{n}, newest first"
            text = f"Past benchmarks of this model on any machine ({count}):"
        elif self._no_file:
            text = "Past benchmarks of this model: none (a catalog model has no file)."
        else:
            text = "Past benchmarks of this model: none yet."
        self.history_label.setText(text)

    def _on_controller_cancelled(self) -> None:
        self.status.setText("Cancelled; llama.cpp was stopped.")

    def _on_controller_failed(self, failure: EngineFailure) -> None:
        if failure.no_file:  # nothing was run: say why, no dialog
            self.status.setText(failure.cause)
            return
        self.status.setText(f"Failed: {failure.cause}")
        if failure.kind in ("benchmark", "users"):
            last = f" (llama.cpp said: {failure.log_tail[-1].strip()})" if failure.log_tail else ""
            run = "benchmark" if failure.kind == "benchmark" else "Users run"
            self.banner.show_message(f"The {run} failed: {failure.cause}{last}")
            return
        box = QMessageBox(self)
        box.setIcon(QMessageBox.Icon.Warning)
        box.setWindowTitle("Dry run failed")
        box.setText("llama.cpp could not run these settings.")
        box.setInformativeText(failure.cause)
        if failure.log_tail:
            box.setDetailedText("\n".join(failure.log_tail))
        box.setStandardButtons(QMessageBox.StandardButton.Ok)
        box.setObjectName("engine_failure_dialog")
        box.open()
