"""The Memory tab runs llama.cpp's dry run in the background where the estimate guesses.

A zoo Gemma 4 whose compute buffer counts as not modelled (the ``unmodelled`` fixture:
every architecture has its graph now) gets no verdict from the estimate; the
panel says it is checking, the check runs on its stand-in-free file after the settings
rest, and the verdict then comes from llama.cpp's figures and says so. A catalog entry of
an architecture whose compute is not modelled (Llama 4) is checked through its header
stand-in. The demo model (exact) starts no check at all. Sliders never wait for a check.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings
from pytestqt.qtbot import QtBot

from app.predict import estimate as estimate_module
from tests.ui.desktop.test_main_window import make_window
from tests.zoo import write_model
from ui.desktop.main_window import MainWindow
from ui.desktop.memory.engine_check import EngineChecked
from ui.desktop.shared.model_card import load_model

CHECK_TIMEOUT_MS = 120_000


@pytest.fixture
def unmodelled(monkeypatch: pytest.MonkeyPatch) -> None:
    """Count Gemma 4, Qwen 3.5 and Llama 4's compute buffers as not modelled.

    Every architecture of the zoo and the catalog now has its reserve graph rebuilt
    (app/predict/graph, checked against llama.cpp in tests/agreement), so none is left
    whose compute the estimate guesses; these tests take three of them off the checked
    list to drive the background check as it runs for such a model.
    """
    checked = estimate_module.COMPUTE_CHECKED_ARCHS - {"gemma4", "qwen35", "llama4"}
    monkeypatch.setattr(estimate_module, "COMPUTE_CHECKED_ARCHS", checked)


def _open(window: MainWindow, path: Path | str) -> None:
    window.estimates.set_model(load_model(path))


def test_exact_estimate_starts_no_check(qtbot: QtBot, qsettings: QSettings) -> None:
    window = make_window(qtbot, qsettings)  # the demo model: KV and compute checked
    state = window.estimates.state
    assert state.estimate is not None
    assert state.estimate.exact
    assert not window.memory_panel.engine.busy
    assert window.memory_panel.engine_label.text() == ""


@pytest.mark.usefixtures("unmodelled")
def test_unchecked_architecture_gets_the_engines_figures(
    qtbot: QtBot, qsettings: QSettings, zoo_dir: Path
) -> None:
    window = make_window(qtbot, qsettings, open_demo=False)
    panel = window.memory_panel
    with qtbot.waitSignal(panel.engine.checking, timeout=5_000) as started:
        _open(window, write_model("gemma4", zoo_dir))
    assert started.args == [True]
    state = window.estimates.state
    assert state.estimate is not None
    assert not state.estimate.exact
    assert state.verdict is not None
    assert state.verdict.level == "unverified"
    assert panel.verdict_label.text().startswith("Not verified: the compute buffer")
    assert "checking with llama.cpp" in panel.engine_label.text()

    def done(result: object) -> bool:
        return isinstance(result, EngineChecked)

    with qtbot.waitSignal(panel.engine.checked, timeout=CHECK_TIMEOUT_MS, check_params_cb=done):
        pass
    checked = panel.engine.result
    assert checked is not None
    assert checked.estimate.exact
    assert "compute" in checked.estimate.engine_checked
    assert checked.verdict.level == "fits"
    assert panel.verdict_label.text() == checked.verdict.headline
    assert panel.engine_label.text().startswith("Engine-checked: compute buffer")
    assert "the model file" in panel.engine_label.text()
    # the analytic estimate on screen is unchanged; only the verdict has llama.cpp's figures
    assert window.estimates.state.estimate is state.estimate


@pytest.mark.usefixtures("unmodelled")
def test_settings_that_change_during_the_wait_start_one_check(
    qtbot: QtBot, qsettings: QSettings, zoo_dir: Path
) -> None:
    window = make_window(qtbot, qsettings, open_demo=False)
    panel = window.memory_panel
    _open(window, write_model("qwen35", zoo_dir))
    for n_ctx in (4096, 8192, 16384, 8192):
        window.estimates.update(n_ctx=n_ctx)
    assert panel.engine.busy

    def done(result: object) -> bool:
        return isinstance(result, EngineChecked)

    with qtbot.waitSignal(panel.engine.checked, timeout=CHECK_TIMEOUT_MS, check_params_cb=done):
        pass
    checked = panel.engine.result
    assert checked is not None
    assert len(checked.result.reports) == 1
    assert checked.result.reports[0].settings == window.estimates.state.settings
    assert checked.result.reports[0].n_ctx == 8192


@pytest.mark.usefixtures("unmodelled")
def test_catalog_model_is_checked_on_its_stand_in(
    qtbot: QtBot, qsettings: QSettings, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    window = make_window(qtbot, qsettings, open_demo=False)
    panel = window.memory_panel
    _open(window, "catalog:llama-4-scout-17b-16e")

    def done(result: object) -> bool:
        return isinstance(result, EngineChecked)

    with qtbot.waitSignal(panel.engine.checked, timeout=CHECK_TIMEOUT_MS, check_params_cb=done):
        pass
    checked = panel.engine.result
    assert checked is not None
    assert checked.result.target.stand_in is not None
    assert checked.result.target.path.is_relative_to(tmp_path / "cache")
    assert "a header stand-in" in panel.engine_label.text()
