"""The Compare tab: every quant level of the open model (or of a Hugging Face repo) side by
side, as a table and a chart.

:class:`CompareController` works out one :class:`CompareRow` per quant (the file on disk and
the levels :func:`app.model.quant.simulate_quant` derives from it) at the settings on screen,
with the most GPU layers that fit, exactly as ``ggtune compare`` does (it reuses
:func:`ui.cli.plan.compare_rows`). The quant options are simulated once per model; the rows
are recomputed on the job pool, debounced, when the settings, the model, the hardware or
the speed factors change. :class:`CompareTableModel` and :class:`CompareChartWidget`
display them; :class:`ComparePanel` adds what to do about the selected row.

A Hugging Face repo typed into the tab (:meth:`CompareController.compare_repo`) is listed
and every quant file's header read over HTTP on the pool (:func:`app.sources.hf.list_repo`,
:func:`app.sources.hf.read_models`; nothing downloaded, headers cached on disk), then shown as one
row per file with source "hub" (:func:`app.planning.compare.repo_rows`, as ``ggtune compare REPO``
prints them), following the settings on screen like the normal rows;
:meth:`CompareController.show_model` goes back to the open model's rows. The selected hub
row can be downloaded (every shard, into the Hugging Face cache or a folder the user picks)
with progress, Cancel and resume by :class:`ui.desktop.download.DownloadController`; its
``finished(path)`` is what the main window opens.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Final, Literal

from PySide6.QtCore import (
    QAbstractTableModel,
    QItemSelection,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    QPointF,
    QRectF,
    QSize,
    Qt,
    Signal,
)
from PySide6.QtGui import (
    QBrush,
    QColor,
    QFontMetrics,
    QHideEvent,
    QMouseEvent,
    QPainter,
    QPaintEvent,
    QPalette,
    QPen,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QHeaderView,
    QLabel,
    QLineEdit,
    QProgressBar,
    QPushButton,
    QSizePolicy,
    QSplitter,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.compare import HUB_ORIGIN, CompareRow, RunnerChoice, compare_rows, repo_rows
from app.planning.options import COMPARE_QUANTS, QuantOption, quant_options
from app.planning.words import fmt_ctx
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.sources.hf import (
    DownloadProgress,
    ModelEntry,
    RemoteModel,
    RepoListing,
    free_bytes,
    hub_cache_dir,
    list_repo,
    read_models,
)
from app.sources.refs import RepoRef, parse_repo
from app.units import format_bytes, format_tps
from ui.desktop.banner import MessageBanner
from ui.desktop.download import (
    DownloadController,
    DownloadRequest,
    progress_percent,
    progress_text,
)
from ui.desktop.estimate_controller import EstimateController, EstimateState
from ui.desktop.jobs import LatestJob
from ui.desktop.model_card import describe_error
from ui.desktop.speed import SpeedController, model_file_bytes

ChartMetric = Literal["memory", "speed"]

# The Save to box's item data: the Hugging Face cache, and the item that asks for a folder
# (a chosen folder's item holds its path).
_HF_CACHE: Final = ""
_CHOOSE_FOLDER: Final = "\0choose"


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The rows for one model, settings and hardware, and where the speeds come from."""

    model_path: str
    settings: Settings
    device_names: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    speed_source: str
    repo: str | None = None

    @property
    def errors(self) -> tuple[str, ...]:
        """Return "file: why" for each row without numbers (a header not read)."""
        return tuple(f"{r.name or r.quant}: {r.error}" for r in self.rows if r.error)


def runner_choice(state: EstimateState) -> RunnerChoice:
    """Return the plan every row follows: the runner chosen and the settings pinned."""
    requested = state.requested or state.settings
    given = tuple(sorted((f, getattr(requested, f)) for f in state.pinned))
    return RunnerChoice(state.runner, given)


def compare_table(
    spec: ModelSpec,
    options: tuple[QuantOption, ...],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> CompareResult:
    """Return the rows of ``ggtune compare`` at ``settings`` as dataclasses (pure); with
    ``runner`` each quant as that runner would run it (the Memory view's plan)."""
    rows = compare_rows(spec, options, settings, hardware, factors, runner)
    return CompareResult(
        model_path=spec.path,
        settings=settings,
        device_names=tuple(d.name for d in hardware.devices),
        rows=tuple(rows),
        speed_source=factors.source,
    )


@dataclass(frozen=True, slots=True)
class RepoHeaders:
    """A repo listed and its quant files' headers read (pool): what hub rows come from."""

    text: str
    listing: RepoListing
    models: tuple[RemoteModel, ...]


def read_repo(text: str) -> RepoHeaders:
    """List the repo ``text`` names and read every quant file's header over HTTP (pool).

    Raise :class:`~app.errors.RemoteError` subclasses (no such repo, offline, no access);
    a file whose header cannot be read carries its error instead.
    """
    ref: RepoRef = parse_repo(text)
    listing = list_repo(ref)
    entries = [listing.find(ref.selector)] if ref.selector else list(listing.models)
    return RepoHeaders(text, listing, tuple(read_models(listing, entries)))


def repo_table(
    headers: RepoHeaders,
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> CompareResult:
    """Return one hub row per quant file of ``headers`` at ``settings`` (pure)."""
    rows = repo_rows(headers.listing, headers.models, settings, hardware, factors, runner)
    return CompareResult(
        model_path=f"{headers.listing.endpoint}/{headers.listing.repo_id}",
        settings=settings,
        device_names=tuple(d.name for d in hardware.devices),
        rows=tuple(rows),
        speed_source=factors.source,
        repo=headers.listing.repo_id,
    )


def compare_options(spec: ModelSpec) -> tuple[QuantOption, ...]:
    """Return the file's own quant and every simulated level (reads the file size; pool)."""
    return quant_options(spec, names=COMPARE_QUANTS, file_bytes=model_file_bytes(spec))


def what_to_do(row: CompareRow, spec: ModelSpec | None, repo: str | None = None) -> str:
    """Return, in plain words, how to get the quant of ``row`` (the selected row's hint)."""
    if row.origin == HUB_ORIGIN:
        where = repo or "the repo"
        if row.error:
            return f"{row.name or row.quant} of {where}: its header could not be read: {row.error}"
        return (
            f"{row.quant} is {row.name} in {where}; only its header was read. Download it "
            f"with the Download button below, or with: ggtune hf {where} --download {row.name}"
        )
    if row.on_disk:
        return f"{row.quant} is the file you have open: nothing to download."
    base = (spec.name if spec is not None else None) or "the model"
    imatrix = " --imatrix imatrix.dat" if row.needs_imatrix else ""
    note = (
        " It needs an importance matrix (llama-imatrix) to keep its quality."
        if row.needs_imatrix
        else ""
    )
    return (
        f"{row.quant} is simulated: its numbers come from llama.cpp's quantization rules, "
        f"not from a file. Download a {row.quant} GGUF of {base} (e.g. from Hugging Face), "
        f"or make one from the F16/BF16 file with "
        f"llama-quantize{imatrix} MODEL-F16.gguf MODEL-{row.quant}.gguf {row.quant}.{note}"
    )


class CompareController(QObject):
    """Quant levels side by side for the main screen's state (GUI thread).

    Signals: ``result_changed(CompareResult)``, ``failed(str)`` (one line, no traceback),
    ``busy_changed(bool)``, ``repo_changed(object)`` (the repo text compared, or None for
    the open model). Work runs on the job pool, ``DELAY_MS`` after the last change.
    """

    result_changed = Signal(object)
    failed = Signal(str)
    busy_changed = Signal(bool)
    repo_changed = Signal(object)

    DELAY_MS: Final = 150

    def __init__(
        self,
        estimates: EstimateController,
        speed: SpeedController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._speed = speed
        self._options: tuple[str, tuple[QuantOption, ...]] | None = None
        self._result: CompareResult | None = None
        self._key: tuple[object, ...] | None = None
        self._active = False
        self._repo: str | None = None
        self._headers: RepoHeaders | None = None
        self._job = LatestJob(self.DELAY_MS, self._on_job_done, self._on_job_failed, self)
        self._job.busy_changed.connect(self.busy_changed)
        estimates.state_changed.connect(self._on_estimates_state_changed)
        speed.factors_changed.connect(lambda _f: self.refresh())
        self.refresh()

    @property
    def result(self) -> CompareResult | None:
        """The rows shown now (None before the first model)."""
        return self._result

    @property
    def busy(self) -> bool:
        """Whether new rows are being worked out."""
        return self._job.busy

    @property
    def repo(self) -> str | None:
        """The repo being compared (as typed), or None for the open model's quants."""
        return self._repo

    def hub_entry(self, row: CompareRow) -> tuple[RepoListing, ModelEntry] | None:
        """Return the listing and model entry behind the hub row ``row`` (all its shards),
        or None when ``row`` is not a hub row of the repo shown or its header was not read.
        """
        headers = self._headers
        if row.origin != HUB_ORIGIN or row.error or headers is None:
            return None
        result = self._result
        if result is None or result.repo != headers.listing.repo_id or headers.text != self._repo:
            return None
        for m in headers.models:
            if m.entry.name == row.name:
                return headers.listing, m.entry
        return None

    def compare_repo(self, text: str) -> None:
        """Compare every quant file of the Hugging Face repo ``text`` (GUI thread).

        The listing and headers are read on the pool (once per repo; then only the rows
        follow the settings); a repo that cannot be read is reported by ``failed``.
        """
        text = text.strip()
        try:
            parse_repo(text)
        except GGTuneError as err:
            self.failed.emit(f"Could not read the repo: {describe_error(err)}")
            return
        if text != self._repo:
            self._repo = text
            self.repo_changed.emit(text)
        self._key = None
        self.refresh(now=self._active)

    def show_model(self) -> None:
        """Go back to the open model's quants (GUI thread)."""
        if self._repo is None:
            return
        self._repo = None
        self._key = None
        self._job.cancel()
        self.repo_changed.emit(None)
        self.refresh(now=self._active)

    def refresh(self, *, now: bool = False) -> None:
        """Work the rows out again for the state in force (debounced unless ``now``)."""
        self._on_estimates_state_changed(self._estimates.state, now=now)

    def set_active(self, active: bool) -> None:
        """Work rows out only while the Compare tab is shown (GUI thread).

        Compare runs the estimator and the speed model for every quant level; doing that in
        the background while the tab is hidden costs every slider tick GIL time for nothing.
        """
        self._active = active
        if active:
            self.refresh()

    def _on_estimates_state_changed(self, state: EstimateState, *, now: bool = False) -> None:
        if not (self._active or now):
            return
        if self._repo is not None:
            self._request_repo(state, now=now)
            return
        if state.model is None:
            return
        spec = state.model.spec
        settings = state.settings
        hardware = state.hardware.hardware
        factors = self._speed.factors
        runner = runner_choice(state)
        key = (state.model.path, settings, hardware, factors, runner)
        if key == self._key and not now:
            return
        self._key = key
        cached = self._options
        known = cached[1] if cached is not None and cached[0] == spec.path else None

        def job() -> tuple[tuple[QuantOption, ...], CompareResult]:
            options = known if known is not None else compare_options(spec)
            return options, compare_table(spec, options, settings, hardware, factors, runner)

        first = (
            self._result is None
            or self._result.repo is not None
            or self._result.model_path != spec.path
        )
        self._job.request(job, now=now or first)

    def _request_repo(self, state: EstimateState, *, now: bool) -> None:
        text = self._repo
        assert text is not None, "only in repo mode"
        settings = state.settings
        hardware = state.hardware.hardware
        factors = self._speed.factors
        runner = runner_choice(state)
        key = ("repo", text, settings, hardware, factors, runner)
        if key == self._key and not now:
            return
        self._key = key
        cached = self._headers
        known = cached if cached is not None and cached.text == text else None

        def job() -> tuple[RepoHeaders, CompareResult]:
            headers = known if known is not None else read_repo(text)
            return headers, repo_table(headers, settings, hardware, factors, runner)

        first = known is None or self._result is None or self._result.repo is None
        self._job.request(job, now=now or first)

    def _on_job_done(
        self, outcome: tuple[tuple[QuantOption, ...] | RepoHeaders, CompareResult]
    ) -> None:
        extra, result = outcome
        if isinstance(extra, RepoHeaders):
            if extra.text != self._repo:
                return  # the user went back (or on) meanwhile
            self._headers = extra
        else:
            if self._repo is not None:
                return
            self._options = (result.model_path, extra)
        self._result = result
        self.result_changed.emit(result)

    def _on_job_failed(self, error: Exception) -> None:
        self._key = None  # try again on the next change
        if self._repo is not None:
            self.failed.emit(f"Could not read the repo {self._repo}: {describe_error(error)}")
            return
        self.failed.emit(f"Could not compare the quants: {describe_error(error)}")


# --- the table ---------------------------------------------------------------------------

_FIXED_BEFORE: Final = ("Quant", "Source", "File", "Bits/weight")
_FIXED_AFTER: Final = ("Fits", "Writing tok/s", "Reading tok/s", "Quality loss (KLD)")


class CompareTableModel(QAbstractTableModel):
    """One row per quant: size, bits/weight, memory per device, fits, speed, quality loss.

    Read-only. ``Qt.UserRole`` gives the raw value (bytes, tok/s, KLD) of a cell and the
    whole :class:`CompareRow` on column 0.
    """

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: tuple[CompareRow, ...] = ()
        self._devices: tuple[str, ...] = ()

    @property
    def rows(self) -> tuple[CompareRow, ...]:
        """The rows shown."""
        return self._rows

    def set_result(self, result: CompareResult) -> None:
        """Show ``result``; keep the view's selection when only the numbers changed."""
        same_shape = result.device_names == self._devices and tuple(
            r.quant for r in result.rows
        ) == tuple(r.quant for r in self._rows)
        if same_shape and self._rows:
            self._rows = result.rows
            self.dataChanged.emit(
                self.index(0, 0), self.index(self.rowCount() - 1, self.columnCount() - 1)
            )
            return
        self.beginResetModel()
        self._rows = result.rows
        self._devices = result.device_names
        self.endResetModel()

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of quants."""
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the fixed columns and one per device."""
        if parent.isValid():
            return 0
        return len(_FIXED_BEFORE) + len(self._devices) + len(_FIXED_AFTER)

    def _column(self, column: int) -> tuple[str, int]:
        """Return (kind, device index) of ``column``."""
        if column < len(_FIXED_BEFORE):
            return _FIXED_BEFORE[column], -1
        column -= len(_FIXED_BEFORE)
        if column < len(self._devices):
            return "device", column
        return _FIXED_AFTER[column - len(self._devices)], -1

    def _value(self, row: CompareRow, kind: str, device: int) -> tuple[str, object]:
        """Return (text, raw value) of one cell."""
        if kind == "Quant":
            return row.quant, row
        if kind == "Source":
            if row.error:
                return f"{row.origin} (not read)", row.origin
            return row.origin + (" (imatrix)" if row.needs_imatrix else ""), row.origin
        if kind == "File":
            return format_bytes(row.file_bytes), row.file_bytes
        if row.error:
            return "?", None
        if kind == "Bits/weight":
            return f"{row.bits_per_weight:.2f}", row.bits_per_weight
        if kind == "device":
            _name, used, cap = row.devices[device] if device < len(row.devices) else ("", 0, None)
            if cap is None:
                return format_bytes(used), used
            return f"{format_bytes(used)} of {format_bytes(cap)}", used
        if kind == "Fits":
            return row.fits_text, row.fits
        if kind == "Writing tok/s":
            return format_tps(row.decode_tok_per_s), row.decode_tok_per_s
        if kind == "Reading tok/s":
            return format_tps(row.prefill_tok_per_s), row.prefill_tok_per_s
        return row.quality_text, row.kld if row.kld is not None else row.kld_nearest

    def data(
        self,
        index: QModelIndex | QPersistentModelIndex,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return text, raw values (UserRole), alignment, a tooltip, or bold for the file."""
        if not index.isValid():
            return None
        row = self._rows[index.row()]
        kind, device = self._column(index.column())
        if role == Qt.ItemDataRole.DisplayRole:
            return self._value(row, kind, device)[0]
        if role == Qt.ItemDataRole.UserRole:
            return self._value(row, kind, device)[1]
        if role == Qt.ItemDataRole.TextAlignmentRole:
            if kind in ("Quant", "Source"):
                return int(Qt.AlignmentFlag.AlignLeft | Qt.AlignmentFlag.AlignVCenter)
            return int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
        if role == Qt.ItemDataRole.FontRole and row.on_disk:
            font = QLabel().font()
            font.setBold(True)
            return font
        if role == Qt.ItemDataRole.ForegroundRole and kind == "Fits" and row.fits is False:
            return QColor("#c62828")
        if role == Qt.ItemDataRole.ToolTipRole:
            return self._tooltip(row, kind)
        return None

    def _tooltip(self, row: CompareRow, kind: str) -> str | None:
        if row.error and kind in ("Quant", "Source"):
            return f"{row.name}: its header could not be read: {row.error}"
        if kind == "Source" and row.origin == HUB_ORIGIN:
            return f"{row.name} on Hugging Face: its header read over HTTP, not downloaded"
        if kind == "Source":
            return (
                "The file you have open"
                if row.on_disk
                else "Worked out from llama.cpp's quantization rules; no such file yet"
            )
        if kind == "Quality loss (KLD)":
            if row.kld is None:
                return "Not measured: the KLD of the nearest measured bits/weight"
            ppl = f", +{row.delta_ppl:.3f} perplexity" if row.delta_ppl is not None else ""
            return (
                f"How far its answers drift from the full-precision model (KL divergence"
                f"{ppl}), measured on {row.quality_measured_on or 'another model'}; lower is better"
            )
        if kind == "Writing tok/s":
            return "Predicted tokens per second while writing the answer, one user"
        if kind == "Reading tok/s":
            return "Predicted tokens per second while reading a 512-token prompt"
        if kind == "Fits":
            return "Whether it fits with the most GPU layers that do (1 GiB kept free)"
        return None

    def headerData(
        self,
        section: int,
        orientation: Qt.Orientation,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return column titles (devices by name) and no row titles."""
        if role != Qt.ItemDataRole.DisplayRole or orientation != Qt.Orientation.Horizontal:
            return None
        if not 0 <= section < self.columnCount():
            return None
        kind, device = self._column(section)
        if kind == "device":
            name = self._devices[device]
            return "RAM" if name.upper() in ("CPU", "HOST") else name
        return kind


# --- the chart ---------------------------------------------------------------------------

_BAR_H: Final = 16
_GAP: Final = 6
_PAD: Final = 8
_FIT_COLOR: Final = "#4e79a7"
_PARTIAL_COLOR: Final = "#f28e2b"
_OVER_COLOR: Final = "#e15759"


class CompareChartWidget(QWidget):
    """Paint one horizontal bar per quant (GUI thread): memory against the capacity of all
    devices together, or predicted writing speed. Clicking a bar emits ``row_clicked(int)``.
    """

    row_clicked = Signal(int)

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._rows: tuple[CompareRow, ...] = ()
        self._metric: ChartMetric = "memory"
        self._selected = -1
        self.paint_count = 0
        self.setSizePolicy(QSizePolicy.Policy.Expanding, QSizePolicy.Policy.Expanding)
        self.setAccessibleName("Quants compared, as a chart")
        self.setMinimumHeight(120)

    @property
    def chart_metric(self) -> ChartMetric:
        """What the bars show."""
        return self._metric

    def set_rows(self, rows: tuple[CompareRow, ...]) -> None:
        """Show ``rows``."""
        self._rows = rows
        self.setAccessibleDescription(
            "; ".join(
                f"{r.quant}: {format_bytes(r.total_bytes)}, {format_tps(r.decode_tok_per_s)} tok/s"
                for r in rows
            )
        )
        self.updateGeometry()
        self.update()

    def set_metric(self, metric: ChartMetric) -> None:
        """Show memory or speed."""
        self._metric = metric
        self.update()

    def set_selected(self, row: int) -> None:
        """Outline bar ``row`` (-1: none)."""
        self._selected = row
        self.update()

    def sizeHint(self) -> QSize:
        """Return room for every bar."""
        return QSize(480, 2 * _PAD + max(1, len(self._rows)) * (_BAR_H + _GAP) + 36)

    def _label_width(self, fm: QFontMetrics) -> int:
        return max((fm.horizontalAdvance(r.quant) for r in self._rows), default=40) + 12

    def _row_at(self, y: float) -> int:
        row = int((y - _PAD) // (_BAR_H + _GAP))
        return row if 0 <= row < len(self._rows) else -1

    def mousePressEvent(self, event: QMouseEvent) -> None:
        """Select the quant under the mouse."""
        row = self._row_at(event.position().y())
        if row >= 0:
            self.row_clicked.emit(row)
        super().mousePressEvent(event)

    def _capacity(self) -> int | None:
        first = next((r for r in self._rows if r.devices), None)
        caps = [d[2] for d in first.devices] if first is not None else []
        if not caps or any(c is None for c in caps):
            return None
        return sum(c for c in caps if c is not None)

    def paintEvent(self, event: QPaintEvent) -> None:
        """Paint the bars, the capacity line and the values."""
        self.paint_count += 1
        painter = QPainter(self)
        painter.setRenderHint(QPainter.RenderHint.Antialiasing)
        pal = self.palette()
        text = pal.color(QPalette.ColorRole.WindowText)
        fm = QFontMetrics(self.font())
        if not self._rows:
            painter.setPen(text)
            painter.drawText(self.rect(), Qt.AlignmentFlag.AlignCenter, "Working out the quants…")
            return
        label_w = self._label_width(fm)
        value_w = fm.horizontalAdvance("00.0 GiB of 00.0 GiB") + 8
        left = _PAD + label_w
        width = max(20.0, self.width() - left - value_w - _PAD)
        cap = self._capacity()
        if self._metric == "memory":
            top_value = float(max([r.total_bytes for r in self._rows] + [cap or 0, 1]))
        else:
            top_value = max([r.decode_tok_per_s for r in self._rows] + [1e-9])
        for i, row in enumerate(self._rows):
            y = _PAD + i * (_BAR_H + _GAP)
            value = row.total_bytes if self._metric == "memory" else row.decode_tok_per_s
            w = width * value / top_value
            font = painter.font()
            font.setBold(row.on_disk)
            painter.setFont(font)
            painter.setPen(text)
            painter.drawText(
                QRectF(_PAD, y, label_w - 6, _BAR_H),
                int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter),
                row.quant,
            )
            if row.fits is False:
                color = QColor(_OVER_COLOR)
            elif row.has_gpu and (row.gpu_layers < row.n_layers or row.n_cpu_moe):
                color = QColor(_PARTIAL_COLOR)
            else:
                color = QColor(_FIT_COLOR)
            simulated = row.origin == "simulated"
            if simulated:
                color.setAlpha(170)
            painter.setPen(Qt.PenStyle.NoPen)
            painter.setBrush(color)
            bar = QRectF(left, y, max(1.0, w), _BAR_H)
            painter.drawRect(bar)
            if simulated:
                painter.setBrush(QBrush(QColor(255, 255, 255, 150), Qt.BrushStyle.BDiagPattern))
                painter.drawRect(bar)
            if i == self._selected:
                painter.setPen(QPen(pal.color(QPalette.ColorRole.Highlight), 2))
                painter.setBrush(Qt.BrushStyle.NoBrush)
                painter.drawRect(bar.adjusted(-1, -1, 1, 1))
            if row.error:
                label = "header not read"
            elif self._metric == "memory":
                label = format_bytes(row.total_bytes)
            else:
                label = f"{format_tps(row.decode_tok_per_s)} tok/s"
            painter.setPen(text)
            painter.drawText(QPointF(left + w + 6, y + _BAR_H - 4), label)
        font = painter.font()
        font.setBold(False)
        painter.setFont(font)
        bottom = _PAD + len(self._rows) * (_BAR_H + _GAP)
        if self._metric == "memory" and cap is not None:
            x = left + width * cap / top_value
            painter.setPen(QPen(text, 2))
            painter.drawLine(QPointF(x, _PAD - 3), QPointF(x, bottom - _GAP + 3))
            painter.drawText(QPointF(x + 4, bottom + 12), f"capacity {format_bytes(cap)}")
        legend = (
            "solid: a file (yours, or on the hub) · hatched: simulated · orange: part on the CPU · "
            "red: does not fit"
        )
        painter.setPen(pal.color(QPalette.ColorRole.PlaceholderText))
        room = int(self.width() - 2 * _PAD)
        painter.drawText(
            QPointF(_PAD, bottom + 30), fm.elidedText(legend, Qt.TextElideMode.ElideRight, room)
        )


# --- the panel ---------------------------------------------------------------------------


class ComparePanel(QWidget):
    """The Compare tab (GUI thread): a line about the settings, a box to compare a Hugging
    Face repo instead, the table, the chart, and what to do about the selected quant.
    Subscribes to :class:`CompareController`."""

    def __init__(
        self,
        controller: CompareController,
        estimates: EstimateController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self.controller = controller
        self._estimates = estimates
        layout = QVBoxLayout(self)
        self.banner = MessageBanner(name="compare_banner")
        layout.addWidget(self.banner)
        repo_row = QHBoxLayout()
        self.repo_edit = QLineEdit()
        self.repo_edit.setPlaceholderText("Compare a Hugging Face repo… (org/name or a URL)")
        self.repo_edit.setAccessibleName("Hugging Face repo to compare")
        self.repo_edit.setToolTip(
            "Every quant file of the repo side by side; only the files' headers are read, "
            "nothing is downloaded"
        )
        self.repo_edit.returnPressed.connect(self._on_repo_button_clicked)
        repo_row.addWidget(self.repo_edit, 1)
        self.repo_button = QPushButton("Compare repo")
        self.repo_button.clicked.connect(self._on_repo_button_clicked)
        repo_row.addWidget(self.repo_button)
        self.back_button = QPushButton("Back to the open model")
        self.back_button.clicked.connect(controller.show_model)
        self.back_button.setVisible(controller.repo is not None)
        repo_row.addWidget(self.back_button)
        layout.addLayout(repo_row)
        top = QHBoxLayout()
        self.summary_label = QLabel("Open a model to compare its quant levels.")
        self.summary_label.setWordWrap(True)
        top.addWidget(self.summary_label, 1)
        self.busy_label = QLabel("Working…")
        self.busy_label.setVisible(False)
        top.addWidget(self.busy_label)
        top.addWidget(QLabel("Chart:"))
        self.metric_box = QComboBox()
        self.metric_box.addItem("Memory vs capacity", "memory")
        self.metric_box.addItem("Writing speed", "speed")
        self.metric_box.setAccessibleName("What the chart shows")
        self.metric_box.currentIndexChanged.connect(self._on_metric_box_changed)
        top.addWidget(self.metric_box)
        layout.addLayout(top)

        self.table_model = CompareTableModel(self)
        self.table = QTableView()
        self.table.setModel(self.table_model)
        self.table.setAccessibleName("Quant levels side by side")
        self.table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.table.setAlternatingRowColors(True)
        self.table.verticalHeader().hide()
        self.table.horizontalHeader().setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        self.table.horizontalHeader().setStretchLastSection(True)
        self.table.selectionModel().selectionChanged.connect(self._on_table_selection_changed)
        self.chart = CompareChartWidget()
        self.chart.row_clicked.connect(self.table.selectRow)
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(self.table)
        splitter.addWidget(self.chart)
        splitter.setStretchFactor(0, 3)
        splitter.setStretchFactor(1, 2)
        layout.addWidget(splitter, 1)
        self.hint_label = QLabel("Select a quant to see how to get it.")
        self.hint_label.setWordWrap(True)
        self.hint_label.setAccessibleName("What to do")
        self.hint_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        layout.addWidget(self.hint_label)
        layout.addWidget(self._download_row())

        controller.result_changed.connect(self._on_controller_result_changed)
        controller.failed.connect(self._on_controller_failed)
        controller.busy_changed.connect(self.busy_label.setVisible)
        controller.repo_changed.connect(self._on_controller_repo_changed)
        self.downloads.running_changed.connect(self._on_downloads_running_changed)
        self.downloads.progress.connect(self._on_downloads_progress)
        self.downloads.finished.connect(self._on_downloads_finished)
        self.downloads.failed.connect(self._on_downloads_failed)
        self.downloads.cancelled.connect(self._on_downloads_cancelled)
        if controller.result is not None:
            self._on_controller_result_changed(controller.result)

    def _download_row(self) -> QWidget:
        """Build Save to, Download, the progress bar, its status and Cancel (hub rows)."""
        self.downloads = DownloadController(self)
        self.download_box = QWidget()
        column = QVBoxLayout(self.download_box)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        column.addLayout(row)
        save_to = QLabel("Save to:")
        row.addWidget(save_to)
        self.save_to_box = QComboBox()
        self.save_to_box.addItem("Hugging Face cache", _HF_CACHE)
        self.save_to_box.addItem("Choose a folder…", _CHOOSE_FOLDER)
        self.save_to_box.setItemData(
            0,
            "Where huggingface_hub keeps its files; the library lists it",
            Qt.ItemDataRole.ToolTipRole,
        )
        self.save_to_box.setAccessibleName("Where to save the download")
        self.save_to_box.setToolTip("Where the downloaded file goes")
        self.save_to_box.activated.connect(self._on_save_to_box_activated)
        self._save_to_index = 0
        save_to.setBuddy(self.save_to_box)
        row.addWidget(self.save_to_box)
        self.download_button = QPushButton("Download")
        self.download_button.setToolTip(
            "Download the selected quant file (every shard) from Hugging Face, check its "
            "sha256 and open it; an interrupted download resumes"
        )
        self.download_button.setEnabled(False)
        self.download_button.clicked.connect(self._on_download_button_clicked)
        row.addWidget(self.download_button)
        self.download_progress = QProgressBar()
        self.download_progress.setRange(0, 100)
        self.download_progress.setValue(0)
        self.download_progress.setAccessibleName("Download progress")
        self.download_progress.hide()  # shown once a download starts
        row.addWidget(self.download_progress, 1)
        self.cancel_button = QPushButton("Cancel")
        self.cancel_button.setToolTip("Stop the download; the next Download resumes it (Esc)")
        self.cancel_button.setShortcut("Esc")
        self.cancel_button.clicked.connect(self.downloads.cancel)
        self.cancel_button.hide()  # shown while a download runs
        row.addWidget(self.cancel_button)
        row.addStretch(0)
        # Its own line, wrapped: a long status must never widen the window.
        self.download_status = QLabel()
        self.download_status.setWordWrap(True)
        self.download_status.setAccessibleName("Download status")
        self.download_status.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.download_status.hide()  # shown once a download starts
        column.addWidget(self.download_status)
        self.download_box.setVisible(self.controller.repo is not None)
        return self.download_box

    def showEvent(self, event: QShowEvent) -> None:
        """Start working rows out when the tab becomes visible."""
        super().showEvent(event)
        self.controller.set_active(True)

    def hideEvent(self, event: QHideEvent) -> None:
        """Stop working rows out while the tab is hidden."""
        super().hideEvent(event)
        self.controller.set_active(False)

    def _on_metric_box_changed(self, _index: int) -> None:
        metric = self.metric_box.currentData()
        self.chart.set_metric("speed" if metric == "speed" else "memory")

    def _on_repo_button_clicked(self) -> None:
        text = self.repo_edit.text().strip()
        if text:
            self.controller.compare_repo(text)

    def _on_controller_repo_changed(self, repo: str | None) -> None:
        self.back_button.setVisible(repo is not None)
        self.download_box.setVisible(repo is not None or self.downloads.running)
        self._update_download_button()
        self.banner.hide()
        if repo is not None:
            self.summary_label.setText(f"Reading the quant files of {repo} (headers only)…")

    def _on_controller_result_changed(self, result: CompareResult) -> None:
        self.banner.hide()
        if result.errors:
            self.banner.show_message(
                f"Could not read {len(result.errors)} file(s) of {result.repo}: "
                + "; ".join(result.errors)
            )
        selected = self._selected_quant()
        self.table_model.set_result(result)
        self.chart.set_rows(result.rows)
        s = result.settings
        users = f", {s.n_parallel} users" if s.n_parallel > 1 else ""
        where = (
            f"{result.repo}: {len(result.rows)} quant file(s) on Hugging Face, headers read "
            "over HTTP (nothing downloaded). "
            if result.repo is not None
            else ""
        )
        self.summary_label.setText(
            f"{where}At {fmt_ctx(s.n_ctx)} of context{users}, {s.cache_type_k}/"
            f"{s.cache_type_v} KV cache, the most GPU layers that fit. "
            f"Speed: {result.speed_source}."
        )
        names = [r.quant for r in result.rows]
        if selected in names:
            self.table.selectRow(names.index(selected))
        self._show_hint()
        self._update_download_button()

    def _on_controller_failed(self, message: str) -> None:
        self.banner.show_message(message)

    def _selected_quant(self) -> str | None:
        row = self._selected_row()
        return row.quant if row is not None else None

    def _selected_row(self) -> CompareRow | None:
        rows = self.table.selectionModel().selectedRows()
        if not rows or rows[0].row() >= len(self.table_model.rows):
            return None
        return self.table_model.rows[rows[0].row()]

    def _on_table_selection_changed(self, _new: QItemSelection, _old: QItemSelection) -> None:
        self._show_hint()
        self._update_download_button()

    def _show_hint(self) -> None:
        rows = self.table.selectionModel().selectedRows()
        row = rows[0].row() if rows else -1
        self.chart.set_selected(row)
        model = self._estimates.model
        if row < 0 or row >= len(self.table_model.rows):
            self.hint_label.setText("Select a quant to see how to get it.")
            return
        chosen = self.table_model.rows[row]
        result = self.controller.result
        if chosen.origin == HUB_ORIGIN:
            repo = result.repo if result is not None else None
            hub = self.controller.hub_entry(chosen)
            room = f"\n{self._room_text(hub[1])}" if hub is not None else ""
            self.hint_label.setText(what_to_do(chosen, None, repo) + room)
        elif model is None:
            self.hint_label.setText("Select a quant to see how to get it.")
        else:
            self.hint_label.setText(what_to_do(chosen, model.spec))

    # --- downloading the selected hub row ---

    def download_folder(self) -> Path | None:
        """Return the folder chosen in Save to, or None for the Hugging Face cache."""
        data = self.save_to_box.currentData()
        return (
            Path(data)
            if isinstance(data, str) and data not in (_HF_CACHE, _CHOOSE_FOLDER)
            else None
        )

    def set_download_folder(self, folder: str | None) -> None:
        """Save downloads to ``folder`` (None: the Hugging Face cache) and say so in Save to."""
        if folder is None:
            index = 0
        else:
            index = 1
            if self.save_to_box.itemData(1) == _CHOOSE_FOLDER:
                self.save_to_box.insertItem(1, "", folder)
            self.save_to_box.setItemText(1, folder)
            self.save_to_box.setItemData(1, folder)
            self.save_to_box.setItemData(1, folder, Qt.ItemDataRole.ToolTipRole)
        self.save_to_box.setCurrentIndex(index)
        self._save_to_index = index
        self._show_hint()

    def _on_save_to_box_activated(self, index: int) -> None:
        if self.save_to_box.itemData(index) != _CHOOSE_FOLDER:
            self._save_to_index = index
            self._show_hint()
            return
        start = self.download_folder()
        folder = QFileDialog.getExistingDirectory(
            self, "Save the download in a folder", str(start) if start is not None else ""
        )
        if folder:
            self.set_download_folder(folder)
        else:  # the dialog was cancelled: keep the previous choice
            self.save_to_box.setCurrentIndex(self._save_to_index)

    def _room_text(self, entry: ModelEntry) -> str:
        """Return the download's size and the free disk where it would go (one sentence)."""
        folder = self.download_folder()
        where = f"in {folder}" if folder is not None else "in the Hugging Face cache"
        try:
            free = free_bytes(folder if folder is not None else hub_cache_dir())
        except OSError as err:
            return (
                f"It is {format_bytes(entry.size_bytes)}; the free disk {where} is unknown ({err})."
            )
        n = len(entry.files)
        files = f" in {n} files" if n > 1 else ""
        text = f"It is {format_bytes(entry.size_bytes)}{files}; {format_bytes(free)} free {where}."
        if free < entry.size_bytes:
            text += " Not enough room there, unless part of it is downloaded already."
        return text

    def _on_download_button_clicked(self) -> None:
        row = self._selected_row()
        hub = self.controller.hub_entry(row) if row is not None else None
        if hub is None or self.downloads.running:
            return
        listing, entry = hub
        self.banner.hide()
        self.downloads.start(DownloadRequest(listing, entry, self.download_folder()))

    def _update_download_button(self) -> None:
        row = self._selected_row()
        ok = row is not None and self.controller.hub_entry(row) is not None
        self.download_button.setEnabled(ok and not self.downloads.running)

    def _on_downloads_running_changed(self, running: bool) -> None:
        # Keep the keyboard on the button that matters now (read before hiding either).
        had_focus = self.download_button.hasFocus() or self.cancel_button.hasFocus()
        self.save_to_box.setEnabled(not running)
        self.cancel_button.setVisible(running)
        self.cancel_button.setEnabled(running)
        self._update_download_button()
        self.download_box.setVisible(running or self.controller.repo is not None)
        if running:
            request = self.downloads.request
            assert request is not None, "running means a request"
            self.download_progress.setValue(0)
            self.download_progress.show()
            self.download_status.show()
            self.download_status.setText(f"Starting the download of {request.entry.name}…")
            if had_focus:
                self.cancel_button.setFocus()
        elif had_focus:
            self.download_button.setFocus()

    def _on_downloads_progress(self, p: DownloadProgress) -> None:
        self.download_progress.setValue(progress_percent(p))
        self.download_status.setText(progress_text(p))

    def _on_downloads_finished(self, path: str) -> None:
        self.download_progress.setValue(100)
        self.download_status.setText(f"Downloaded and checked: {path}; opening it.")
        self.download_status.setToolTip(path)

    def _on_downloads_failed(self, message: str) -> None:
        self.download_progress.hide()
        self.download_status.setText("Download failed.")
        self.banner.show_message(message)

    def _on_downloads_cancelled(self, message: str) -> None:
        self.download_status.setText(message)
