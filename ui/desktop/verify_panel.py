"""Verify: run llama.cpp's own dry run for the settings on screen and compare, per component.

:class:`DryRunThread` runs :class:`runner.dry_run.DryRun` in a ``QThread`` (the thread
only waits: llama.cpp itself runs in runner's child process, so a crash or an out-of-memory
kill there leaves the app up). :class:`VerifyController` owns the run and emits dataclasses;
:class:`ComparisonTableModel` shows estimate vs engine vs difference; an engine failure opens
a dialog with its cause and llama.cpp's last log lines.

The estimate compared is for *this machine* (where the engine runs), whatever hardware the
memory view plans for.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
    QThread,
    Signal,
    Slot,
)
from PySide6.QtWidgets import (
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QMessageBox,
    QProgressBar,
    QPushButton,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.engine_report import EngineReport
from app.errors import EngineCancelledError, EngineError, GGTuneError
from app.estimate import MemoryEstimate, estimate
from app.hardware import Hardware
from app.settings import Settings
from app.spec import ModelSpec
from runner.dry_run import DryRun
from runner.worker import Event, StepEvent
from ui.desktop.jobs import run_job
from ui.desktop.model_card import LoadedModel, describe_error
from ui.desktop.scales import format_mib, format_signed_mib

DRY_RUN_TIMEOUT_S: Final = 120.0


# --- pure: the comparison -----------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ComparisonRow:
    """One component: ggtune's estimate and llama.cpp's number, bytes (None: not reported)."""

    component: str
    estimate_bytes: int
    engine_bytes: int | None

    @property
    def difference_bytes(self) -> int | None:
        """Return estimate minus engine, bytes."""
        return None if self.engine_bytes is None else self.estimate_bytes - self.engine_bytes

    @property
    def difference_percent(self) -> float | None:
        """Return the difference as a percentage of the engine's number."""
        diff = self.difference_bytes
        if diff is None or not self.engine_bytes:
            return None
        return 100.0 * diff / self.engine_bytes


@dataclass(frozen=True, slots=True)
class VerifyResult:
    """A finished dry run: the rows, and what was run, in words."""

    rows: tuple[ComparisonRow, ...]
    summary: str
    report: EngineReport


@dataclass(frozen=True, slots=True)
class EngineFailure:
    """A dry run that failed: ``cause`` (one line) and llama.cpp's last log lines."""

    cause: str
    log_tail: tuple[str, ...]


def comparison_rows(
    spec: ModelSpec, est: MemoryEstimate, report: EngineReport
) -> tuple[ComparisonRow, ...]:
    """Return estimate vs engine for weights, KV, recurrent, compute, output and the total.

    Sums over all devices on both sides (the dry run does not split weights per device).
    """

    def total(field: str) -> int:
        return sum(int(getattr(d, field)) for d in est.devices)

    rows = [
        ComparisonRow("Weights", spec.weights_bytes, report.model_size_bytes),
        ComparisonRow("KV cache", total("kv_bytes"), report.kv_bytes),
        ComparisonRow("Recurrent state", total("recurrent_bytes"), report.recurrent_bytes),
        ComparisonRow(
            "Compute buffers", total("compute_bytes"), sum(report.compute_buffer_bytes.values())
        ),
        ComparisonRow("Output buffer", total("output_bytes"), report.output_bytes),
    ]
    rows.append(
        ComparisonRow(
            "Total",
            sum(r.estimate_bytes for r in rows),
            sum(r.engine_bytes or 0 for r in rows),
        )
    )
    return tuple(rows)


def summarize(report: EngineReport) -> str:
    """Return what the engine ran, in one line."""
    fa = "on" if report.flash_attn else "off"
    return (
        f"{report.model_desc} · {report.n_ctx:,} cells ({report.n_seq_max} sequence(s)), "
        f"flash attention {fa} · {report.engine_version}"
    )


# --- the table ----------------------------------------------------------------------------

_HEADERS: Final = ("Component", "Estimate", "llama.cpp", "Difference")


class ComparisonTableModel(QAbstractTableModel):
    """Rows of :class:`ComparisonRow`: estimate, engine and difference in MiB (read-only).

    ``Qt.UserRole`` gives raw bytes for the numeric columns.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: tuple[ComparisonRow, ...] = ()

    @property
    def rows(self) -> tuple[ComparisonRow, ...]:
        """The rows shown."""
        return self._rows

    def set_rows(self, rows: tuple[ComparisonRow, ...]) -> None:
        """Show ``rows``."""
        self.beginResetModel()
        self._rows = rows
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of components."""
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return 4: component, estimate, llama.cpp, difference."""
        return 0 if parent.isValid() else len(_HEADERS)

    def data(
        self,
        index: QModelIndex | QPersistentModelIndex,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return the text, the raw bytes (UserRole) or the alignment of a cell."""
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        row = self._rows[index.row()]
        col = index.column()
        if role == Qt.ItemDataRole.DisplayRole:
            if col == 0:
                return row.component
            if col == 1:
                return format_mib(row.estimate_bytes)
            if col == 2:
                return "not reported" if row.engine_bytes is None else format_mib(row.engine_bytes)
            diff = row.difference_bytes
            if diff is None:
                return ""
            pct = row.difference_percent
            return format_signed_mib(diff) + ("" if pct is None else f" ({pct:+.2f} %)")
        if role == Qt.ItemDataRole.UserRole:
            return (row.component, row.estimate_bytes, row.engine_bytes, row.difference_bytes)[col]
        if role == Qt.ItemDataRole.TextAlignmentRole and col > 0:
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        return None

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return the column titles."""
        if (
            role == Qt.ItemDataRole.DisplayRole
            and orientation == Qt.Orientation.Horizontal
            and 0 <= section < len(_HEADERS)
        ):
            return _HEADERS[section]
        return None


# --- the run ------------------------------------------------------------------------------


class DryRunThread(QThread):
    """Wait for one dry run (worker thread); the engine runs in runner's child process.

    Emits ``step(str)`` as the child reports steps, then exactly one of
    ``succeeded(EngineReport)`` or ``failed(GGTuneError)``. :meth:`cancel` is safe from any
    thread.
    """

    step = Signal(str)
    succeeded = Signal(object)
    failed = Signal(object)

    def __init__(self, dry_run: DryRun, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._dry_run = dry_run

    @property
    def pid(self) -> int | None:
        """The engine child's process id while it runs."""
        return self._dry_run.pid

    def cancel(self) -> None:
        """Kill the child; :meth:`run` then fails with EngineCancelledError."""
        self._dry_run.cancel()

    def run(self) -> None:
        """Run the dry run and report (worker thread)."""
        try:
            reports = self._dry_run.run()
        except GGTuneError as err:
            self.failed.emit(err)
        except Exception as err:  # never let an unexpected error die silently in a thread
            self.failed.emit(EngineError(f"the dry run failed unexpectedly: {describe_error(err)}"))
        else:
            self.succeeded.emit(reports[0])


def _make_dry_run(path: str, settings: Settings, on_event: object) -> DryRun:
    assert callable(on_event), "on_event must be callable"
    return DryRun(path, [settings], timeout_s=DRY_RUN_TIMEOUT_S, on_event=on_event)


class VerifyController(QObject):
    """Run one dry run at a time and say how it went (GUI thread).

    Signals: ``running_changed(bool)``, ``step(str)``, ``finished(VerifyResult)``,
    ``failed(EngineFailure)``, ``cancelled()``.
    """

    running_changed = Signal(bool)
    step = Signal(str)
    finished = Signal(object)
    failed = Signal(object)
    cancelled = Signal()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._thread: DryRunThread | None = None
        self._context: tuple[LoadedModel, MemoryEstimate] | None = None
        self._cancelling = False

    @property
    def running(self) -> bool:
        """Whether a dry run is under way."""
        return self._thread is not None

    @property
    def dry_run_thread(self) -> DryRunThread | None:
        """The thread of the run under way (tests read its child's pid)."""
        return self._thread

    def start(self, model: LoadedModel, settings: Settings, hardware: Hardware) -> None:
        """Dry-run ``model`` with ``settings``; compare with the estimate for ``hardware``.

        ``hardware`` should be this machine: the engine runs here.
        """
        assert self._thread is None, "one dry run at a time"
        try:
            est = estimate(model.spec, settings, hardware)
            dry_run = _make_dry_run(model.path, settings, self._on_engine_event)
        except GGTuneError as err:
            self.failed.emit(EngineFailure(describe_error(err), ()))
            return
        self._context = (model, est)
        self._cancelling = False
        thread = DryRunThread(dry_run, self)
        thread.step.connect(self.step)
        thread.succeeded.connect(self._on_thread_succeeded)
        thread.failed.connect(self._on_thread_failed)
        self._thread = thread
        self.running_changed.emit(True)
        thread.start()

    def cancel(self) -> None:
        """Stop the run under way (the child is killed off the GUI thread)."""
        thread = self._thread
        if thread is None or self._cancelling:
            return
        self._cancelling = True
        self.step.emit("cancelling…")
        run_job(thread.cancel, on_success=lambda _r: None, on_failure=lambda _e: None, parent=self)

    def wait(self, timeout_ms: int = 5000) -> bool:
        """Cancel and wait for the run under way to end (for closing the window)."""
        thread = self._thread
        if thread is None:
            return True
        thread.cancel()
        return bool(thread.wait(timeout_ms))

    def _on_engine_event(self, event: Event) -> None:
        """Forward step labels (worker thread: a signal crosses to the GUI thread)."""
        thread = self._thread
        if isinstance(event, StepEvent) and thread is not None:
            thread.step.emit(event.label)

    def _end(self) -> None:
        thread = self._thread
        assert thread is not None, "a run must be under way"
        thread.wait()
        thread.deleteLater()
        self._thread = None
        self.running_changed.emit(False)

    @Slot(object)
    def _on_thread_succeeded(self, report: EngineReport) -> None:
        self._end()
        assert self._context is not None, "start() sets the context"
        model, est = self._context
        rows = comparison_rows(model.spec, est, report)
        self.finished.emit(VerifyResult(rows, summarize(report), report))

    @Slot(object)
    def _on_thread_failed(self, error: GGTuneError) -> None:
        self._end()
        if isinstance(error, EngineCancelledError):
            self.cancelled.emit()
            return
        tail = error.log_tail if isinstance(error, EngineError) else ()
        self.failed.emit(EngineFailure(describe_error(error), tuple(tail)))


# --- the panel ----------------------------------------------------------------------------


class VerifyPanel(QWidget):
    """The Verify tab: Dry run, progress, Cancel, and the comparison table (GUI thread).

    ``request_run`` is called with no arguments when the user asks for a run; the main
    window answers by calling :meth:`VerifyController.start` with the state on screen.
    """

    def __init__(
        self, controller: VerifyController, request_run: object, parent: QWidget | None = None
    ) -> None:
        super().__init__(parent)
        assert callable(request_run), "request_run must be callable"
        self._controller = controller
        layout = QVBoxLayout(self)
        intro = QLabel(
            "Ask llama.cpp itself what these settings cost on this machine. The engine "
            "reads the model without loading its weights (a dry run, as llama-server's "
            "--fit does) in a separate process; it takes a few seconds."
        )
        intro.setWordWrap(True)
        layout.addWidget(intro)
        row = QHBoxLayout()
        self.run_button = QPushButton("&Dry run on llama.cpp")
        self.run_button.setToolTip("Run llama.cpp's dry run with the settings on screen (F5)")
        self.run_button.clicked.connect(request_run)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the dry run (Esc)")
        self.cancel_button.setShortcut("Esc")
        self.cancel_button.setEnabled(False)
        self.cancel_button.clicked.connect(controller.cancel)
        self.progress = QProgressBar()
        self.progress.setRange(0, 1)
        self.progress.setValue(0)
        self.progress.setTextVisible(False)
        self.progress.setAccessibleName("Dry run progress")
        self.progress.hide()  # shown, busy, while a run is under way
        row.addWidget(self.run_button)
        row.addWidget(self.cancel_button)
        row.addWidget(self.progress, 1)
        row.addStretch(0)
        layout.addLayout(row)
        self.status = QLabel("Not run yet.")
        self.status.setWordWrap(True)
        self.status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.status)
        self.table_model = ComparisonTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Estimate compared with llama.cpp")
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.Stretch)
        self.table.setAlternatingRowColors(True)
        layout.addWidget(self.table, 1)
        note = QLabel(
            "llama.cpp prints sizes in MiB with two decimals, so its numbers are known to "
            "±0.005 MiB; weights are exact."
        )
        note.setWordWrap(True)
        note.setEnabled(False)
        layout.addWidget(note)

        controller.running_changed.connect(self._on_controller_running_changed)
        controller.step.connect(self._on_controller_step)
        controller.finished.connect(self._on_controller_finished)
        controller.failed.connect(self._on_controller_failed)
        controller.cancelled.connect(self._on_controller_cancelled)

    def _on_controller_running_changed(self, running: bool) -> None:
        self.run_button.setEnabled(not running)
        self.cancel_button.setEnabled(running)
        self.progress.setRange(0, 0 if running else 1)
        self.progress.setValue(0)
        self.progress.setVisible(running)
        if running:
            self.status.setText("Starting llama.cpp…")
            self.cancel_button.setFocus()
        else:
            self.run_button.setFocus()

    def _on_controller_step(self, label: str) -> None:
        self.status.setText(label[:1].upper() + label[1:] + "…")

    def _on_controller_finished(self, result: VerifyResult) -> None:
        self.table_model.set_rows(result.rows)
        self.status.setText(f"Done: {result.summary}")

    def _on_controller_cancelled(self) -> None:
        self.status.setText("Cancelled; llama.cpp was stopped.")

    def _on_controller_failed(self, failure: EngineFailure) -> None:
        self.status.setText(f"Failed: {failure.cause}")
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
