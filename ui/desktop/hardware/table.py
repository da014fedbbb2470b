"""The Hardware tab's table of hardware profiles: :class:`ProfileTableModel`, one profile a
row (read-only).
"""

from __future__ import annotations

from pathlib import Path
from typing import Final

from PySide6.QtCore import QObject, Qt

from app.hardware.profiles import HardwareProfile
from ui.desktop.shared.record_table import RIGHT, RecordTableModel

PROFILE_COLUMNS: Final = (
    "Name",
    "Kind",
    "Memory\nGiB",
    "Bandwidth\nGB/s",
    "Usable",
    "FP16\nTFLOPS",
    "INT8\nTOPS",
    "Id\n(for Combine)",
)
"""Two lines each where a unit goes under its figure's name, so the figures fit beside a
profile's name at 1280 px; a profile of the user's own says "custom" after its kind."""
NO_INT8_TIP: Final = (
    "No INT8 figure: prompts run at the FP16 rate. An NVIDIA GPU's is its tensor cores' "
    "dense INT8 rate, what llama.cpp's MMQ kernels multiply quantized weights at."
)
SEARCH_ROLE: Final = int(Qt.ItemDataRole.UserRole) + 1
"""The words a search matches: the name, the id and its aliases."""


def _figure_text(value: float | None) -> str:
    return "?" if value is None else f"{value:g}"


class ProfileTableModel(RecordTableModel[HardwareProfile]):
    """The hardware profiles, one per row (read-only); ``UserRole`` gives the profile."""

    HEADERS = PROFILE_COLUMNS

    def __init__(self, parent: QObject | None = None, *, user_dir: Path | None = None) -> None:
        super().__init__(parent)
        self._user_dir = user_dir

    def is_custom(self, profile: HardwareProfile) -> bool:
        """Whether ``profile`` comes from the user's folder rather than ggtune's."""
        return self._user_dir is not None and Path(profile.path).parent == self._user_dir

    def cell(self, record: HardwareProfile, column: int, role: int) -> object:
        """Return a cell's text, the profile (UserRole) or the figure's source (tooltip)."""
        p = record
        if role == Qt.ItemDataRole.UserRole:
            return p
        if role == SEARCH_ROLE:
            return " ".join((p.name, p.id, *p.aliases))
        figures = (None, None, p.memory_gib, p.bandwidth_gb_per_s, p.usable_fraction)
        int8 = p.int8_tops
        if role == Qt.ItemDataRole.DisplayRole:
            texts = (
                p.name,
                f"{p.kind}, custom" if self.is_custom(p) else p.kind,
                _figure_text(p.memory_gib.value),
                _figure_text(p.bandwidth_gb_per_s.value),
                f"{(p.usable_fraction.value or 0) * 100:.0f} %",
                _figure_text(p.fp16_tflops.value),
                _figure_text(int8.value) if int8 else "—",
                p.id,
            )
            return texts[column]
        if role == Qt.ItemDataRole.ToolTipRole:
            if column == 0:
                return f"{p.id}: {p.notes or p.name}"
            if column == 5:
                return p.fp16_tflops.source
            if column == 6:
                if int8 is None:
                    return NO_INT8_TIP
                return int8.source
            if column == 1:
                return p.path
            figure = figures[column] if column < len(figures) else None
            return None if figure is None else figure.source
        if role == Qt.ItemDataRole.TextAlignmentRole and 2 <= column <= 6:
            return RIGHT
        return None
