"""Every item model of the desktop app passes pytest-qt's ``qtmodeltester`` (Qt's own
QAbstractItemModelTester), empty and filled, and says what the core computed."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, QSortFilterProxyModel, Qt
from pytestqt.modeltest import ModelTester

from app.hardware.devices import Hardware
from app.predict.estimate import estimate
from app.settings import Settings
from ui.desktop.memory.components import COMPONENTS
from ui.desktop.memory.table import MemoryTableModel
from ui.desktop.models.entries import DEMO_ENTRY, entry_for
from ui.desktop.models.items import SEARCH_ROLE, ModelListModel
from ui.desktop.shared.model_card import LoadedModel, load_model
from ui.desktop.verify.rows import ComparisonRow
from ui.desktop.verify.tables import ComparisonTableModel

GIB = 1024**3
MIB = 1024**2


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> LoadedModel:
    return load_model(gemma_path)


def test_model_list(qtmodeltester: ModelTester, qsettings: QSettings) -> None:
    model = ModelListModel()
    qtmodeltester.check(model)
    model.set_entries((DEMO_ENTRY, entry_for("/models/a.gguf"), entry_for("/models/b.gguf")))
    qtmodeltester.check(model)
    assert model.index(1, 0).data() == "a.gguf"
    assert model.index(1, 0).data(Qt.ItemDataRole.ToolTipRole) == "/models/a.gguf"
    assert model.index(0, 0).data(Qt.ItemDataRole.UserRole) == DEMO_ENTRY
    proxy = QSortFilterProxyModel()
    proxy.setSourceModel(model)
    proxy.setFilterRole(SEARCH_ROLE)
    proxy.setFilterFixedString("b.gguf")
    qtmodeltester.check(proxy)
    assert proxy.rowCount() == 1


def test_memory_table_one_and_two_devices(qtmodeltester: ModelTester, gemma: LoadedModel) -> None:
    table = MemoryTableModel()
    qtmodeltester.check(table)
    cpu = estimate(gemma.spec, Settings(n_ctx=8192), Hardware.cpu_only(16 * GIB))
    table.set_estimate(cpu)
    qtmodeltester.check(table)
    assert (table.rowCount(), table.columnCount()) == (len(COMPONENTS) + 3, 1)
    for row, component in enumerate(COMPONENTS):
        expected = getattr(cpu.devices[0], component.field)
        assert table.index(row, 0).data(Qt.ItemDataRole.UserRole) == expected
    assert table.headerData(0, Qt.Orientation.Horizontal) == "System RAM (CPU)"
    gpu = estimate(
        gemma.spec,
        Settings(n_ctx=8192, n_gpu_layers=-1),
        Hardware.with_gpus([GIB // 2], 16 * GIB),
    )
    table.set_estimate(gpu)
    qtmodeltester.check(table)
    assert table.columnCount() == 2
    free_row = table.rowCount() - 1
    over = gpu.devices[0].headroom_bytes
    assert over is not None
    assert over < 0
    assert table.index(free_row, 0).data().endswith("MiB over")


def test_comparison_table(qtmodeltester: ModelTester) -> None:
    table = ComparisonTableModel()
    qtmodeltester.check(table)
    table.set_rows(
        (
            ComparisonRow("Weights", 100 * MIB, 100 * MIB),
            ComparisonRow("KV cache", 64 * MIB, 63 * MIB + MIB // 2),
            ComparisonRow("Recurrent state", 0, None),
        )
    )
    qtmodeltester.check(table)
    assert table.index(1, 3).data() == "+0.50 MiB (+0.79\u00a0%)"
    assert table.index(2, 2).data() == "—"
    assert table.index(2, 2).data(Qt.ItemDataRole.ToolTipRole) == (
        "llama.cpp's log has no figure for this"
    )
    assert table.index(0, 3).data() == "0.00 MiB"  # no "(+0.00 %)" beside it
    from ui.desktop.verify.rows import _signed

    assert (_signed(-47.2, 0), _signed(-0.2, 0), _signed(0.79, 2)) == ("−47", "0", "+0.79")
    assert table.index(0, 3).data(Qt.ItemDataRole.UserRole) == 0
    # within llama.cpp's two printed decimals: no difference, whatever its percentage
    table.set_rows((ComparisonRow("Output buffer", 400_000, 405_000),))
    assert table.index(0, 3).data() == "0.00 MiB"
