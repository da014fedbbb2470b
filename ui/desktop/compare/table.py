"""The Compare tab's table: one row per quant level, as ``ggtune compare`` prints it."""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import (
    QAbstractTableModel,
    QModelIndex,
    QObject,
    QPersistentModelIndex,
    Qt,
)
from PySide6.QtGui import (
    QColor,
)
from PySide6.QtWidgets import (
    QLabel,
)

from app.planning.compare import HUB_ORIGIN, CompareRow
from app.units import format_bytes, format_tps
from ui.desktop.compare.chart import runs
from ui.desktop.compare.rows import (
    CompareResult,
)

_FIXED_BEFORE: Final = ("Quant", "Source", "File", "Bits/weight", "Fits", "Writing tok/s")
"""The answer first (does it fit, how fast): after the memory per device, the writing speed
sat past the right edge at 1280×800 and 1.5× (a horizontal scroll away)."""


_FIXED_AFTER: Final = ("Reading tok/s", "Quality loss (KLD)")


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

    def clear(self) -> None:
        """Show no rows (nothing came: the panel says why)."""
        self.beginResetModel()
        self._rows = ()
        self.endResetModel()

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
        if kind in ("Writing tok/s", "Reading tok/s") and not runs(row):
            return "—", None  # it cannot load, so it has no speed
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
        if kind in ("Writing tok/s", "Reading tok/s") and not runs(row):
            return f"{row.quant} does not fit these settings here, so it has no speed"
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
