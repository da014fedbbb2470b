"""A read-only table of records, one per row, under fixed column titles.

:class:`RecordTableModel` holds the records, answers the row and column counts and the
column titles, and checks every index; a subclass sets :attr:`RecordTableModel.HEADERS`
and says what one cell shows in :meth:`RecordTableModel.cell`. The Verify tab's comparison
and history tables and the Hardware tab's profiles are such tables.
"""

from __future__ import annotations

from typing import ClassVar, Generic, TypeVar

from PySide6.QtCore import QAbstractTableModel, QModelIndex, QObject, QPersistentModelIndex, Qt

R = TypeVar("R")

RIGHT: int = int(Qt.AlignmentFlag.AlignRight | Qt.AlignmentFlag.AlignVCenter)
"""The alignment of a number's cell."""


class RecordTableModel(QAbstractTableModel, Generic[R]):
    """Records of type ``R``, one per row, read-only (GUI thread)."""

    HEADERS: ClassVar[tuple[str, ...]] = ()

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._rows: tuple[R, ...] = ()

    @property
    def rows(self) -> tuple[R, ...]:
        """The records shown, in order."""
        return self._rows

    def set_rows(self, rows: tuple[R, ...]) -> None:
        """Show ``rows`` instead of what was shown."""
        self.beginResetModel()
        self._rows = rows
        self.endResetModel()

    def cell(self, record: R, column: int, role: int) -> object:
        """Return what ``column`` of ``record`` shows in ``role`` (None: nothing)."""
        raise NotImplementedError

    def rowCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of records."""
        return 0 if parent.isValid() else len(self._rows)

    def columnCount(self, parent: QModelIndex | QPersistentModelIndex = QModelIndex()) -> int:  # noqa: B008
        """Return the number of columns."""
        return 0 if parent.isValid() else len(self.HEADERS)

    def data(
        self,
        index: QModelIndex | QPersistentModelIndex,
        role: int = Qt.ItemDataRole.DisplayRole,
    ) -> object:
        """Return what the cell at ``index`` shows in ``role`` (None outside the table)."""
        if not index.isValid() or not 0 <= index.row() < len(self._rows):
            return None
        if not 0 <= index.column() < len(self.HEADERS):
            return None
        return self.cell(self._rows[index.row()], index.column(), role)

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
            and 0 <= section < len(self.HEADERS)
        ):
            return self.HEADERS[section]
        return None
