"""Catalog models in the desktop app: listed at the end of the library tree, opened as
``catalog:NAME`` without a file, estimated exactly as the core estimates them, refused by
Verify before any child process starts, exported with a placeholder path, and re-opened
after a restart. Nothing is mocked: the shipped catalog, the real window."""

from __future__ import annotations

import shutil
from pathlib import Path

import psutil
import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtWidgets import QMessageBox
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.errors import CatalogError
from app.export.targets import TARGETS
from app.model.catalog import CATALOG_DIR, catalog_header, catalog_keys, load_entry
from app.model.spec import model_spec
from app.predict.estimate import estimate
from app.sources.library import Library, LibraryIssue
from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, TEST_HARDWARE, held_only, make_window
from ui.desktop.export.preview import placeholder_note
from ui.desktop.main_window import MainWindow
from ui.desktop.models.controller import ModelController
from ui.desktop.models.entries import CATALOG_TITLE, LAST_KEY, ModelFailure
from ui.desktop.models.panel import ModelsPanel
from ui.desktop.shared.estimate_controller import fit_settings, simulate_level
from ui.desktop.shared.model_card import CATALOG_NO_FILE, CatalogSummary, LoadedModel, load_model
from ui.desktop.verify.rows import EngineFailure

SEVENTY_B = "catalog:llama-3.1-70b"
TIMEOUT_MS = 30_000


def open_catalog(qtbot: QtBot, window: MainWindow, path: str) -> LoadedModel:
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.models.open_path(path)
    model = blocker.args[0]
    assert isinstance(model, LoadedModel)
    return model


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    window = make_window(qtbot, qsettings)
    open_catalog(qtbot, window, SEVENTY_B)
    return window


def test_the_library_tree_ends_with_every_catalog_entry(
    qtbot: QtBot, qtmodeltester: ModelTester, qsettings: QSettings, tmp_path: Path
) -> None:
    skipped = Library((), (LibraryIssue(str(tmp_path / "broken.gguf"), "not a GGUF file"),))
    controller = ModelController(
        qsettings, library_scan=lambda: skipped, library_config=tmp_path / "library.json"
    )
    panel = ModelsPanel(controller, lambda: None)
    qtbot.addWidget(panel)
    model = controller.library_model
    assert model.rowCount() == 0
    with qtbot.waitSignal(controller.catalog_changed, timeout=TIMEOUT_MS):
        panel.show()  # the catalog is read when the panel is first shown
    assert model.rowCount() == 1
    with qtbot.waitSignal(controller.library_changed, timeout=TIMEOUT_MS):
        controller.scan_library()
    qtmodeltester.check(model)
    titles = [model.index(r, 0).data() for r in range(model.rowCount())]
    keys = catalog_keys()
    assert len(keys) >= 18  # the catalog grows (issue 13 added entries)
    assert titles == ["Skipped (1)", f"{CATALOG_TITLE} ({len(keys)})"]
    group = model.index(model.rowCount() - 1, 0)
    rows = [model.index(r, 0, group) for r in range(model.rowCount(group))]
    entries = [row.data(Qt.ItemDataRole.UserRole) for row in rows]
    assert all(isinstance(e, CatalogSummary) for e in entries)
    assert [e.key for e in entries] == list(keys)
    assert [e.path for e in entries] == [f"catalog:{k}" for k in keys]
    by_key = {e.key: (e, row) for e, row in zip(entries, rows, strict=True)}
    seventy, row = by_key["llama-3.1-70b"]
    spec = model_spec(catalog_header("llama-3.1-70b"))
    assert row.data() == load_entry("llama-3.1-70b").name == "Llama-3.1-70B"
    assert seventy.n_params == spec.n_params
    assert seventy.n_ctx_train == spec.n_ctx_train == 131_072
    assert "70.6 B parameters, 131,072-token context" in row.data(Qt.ItemDataRole.ToolTipRole)
    deepseek, _ = by_key["deepseek-v3"]
    assert deepseek.n_active_params < deepseek.n_params  # a mixture of experts says so
    assert "active" in deepseek.detail
    # a rescan keeps the catalog at the end
    with qtbot.waitSignal(controller.library_changed, timeout=TIMEOUT_MS):
        controller.scan_library()
    assert model.index(model.rowCount() - 1, 0).data() == f"{CATALOG_TITLE} ({len(keys)})"
    # the search box finds catalog entries like any other
    panel.search.setText("70b")
    proxy = panel.library_proxy
    assert proxy.rowCount() == 1
    found = proxy.index(0, 0)
    assert found.data() == f"{CATALOG_TITLE} ({len(keys)})"
    assert [proxy.index(r, 0, found).data() for r in range(proxy.rowCount(found))] == [
        "Llama-3.1-70B"
    ]
    # choosing the entry opens it like a file
    with qtbot.waitSignal(controller.model_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        panel.open_library_index(proxy.index(0, 0, found))
    assert blocker.args[0].path == SEVENTY_B
    assert controller.recent == (SEVENTY_B,)
    assert controller.list_model.entries[1].title == "Llama-3.1-70B (catalog)"


@pytest.mark.parametrize("name", ["llama-3.1-70b", "deepseek-v3", "gpt-oss-20b"])
def test_a_catalog_model_is_estimated_as_the_core_estimates_it(
    qtbot: QtBot, qsettings: QSettings, name: str
) -> None:
    window = make_window(qtbot, qsettings)
    model = open_catalog(qtbot, window, f"catalog:{name}")
    spec = model_spec(catalog_header(name))
    assert model.path == f"catalog:{name}"
    assert model.is_catalog
    assert not model.is_demo
    assert model.spec == spec
    state = window.estimates.state
    assert state.model == model
    assert state.quant is None
    assert state.settings == fit_settings(spec, state.settings)  # within the model's limits
    assert held_only(state.estimate) == estimate(spec, state.settings, TEST_HARDWARE)
    assert window.memory_panel.verdict_label.text() == state.verdict.headline
    assert window.models.recent[0] == f"catalog:{name}"
    # a simulated quant level of it, as in the Settings panel
    window.estimates.set_quant("Q4_K_M")
    state = window.estimates.state
    assert state.quant == "Q4_K_M"
    assert state.spec is not None
    assert state.spec == simulate_level(spec, "Q4_K_M").spec
    assert held_only(state.estimate) == estimate(state.spec, state.settings, TEST_HARDWARE)


def test_the_card_says_it_is_a_catalog_spec_with_the_files_facts(window: MainWindow) -> None:
    model = window.models.current
    assert model is not None
    card = model.card
    facts = dict(card.facts)
    assert facts["File"] == "none: planned from ggtune's catalog"
    assert facts["Parameters"].startswith("70.554 B")
    assert facts["Layers"].startswith("80:")
    assert facts["Training context"] == "131,072 tokens"
    assert facts["KV per token"].startswith("f16 320.0 KiB")  # 80 layers x 8 x 128 x 2 x 2 B
    source = load_entry("llama-3.1-70b").source
    assert card.notes[0].startswith(f"From ggtune's catalog (source: {source}): planned from")
    assert "no file on disk" in card.notes[0]
    panel = window.models_panel
    assert panel.card_title.text() == "Llama-3.1-70B"
    shown = [
        panel.card_form.itemAt(i).widget().text()
        for i in range(panel.card_form.count())
        if panel.card_form.itemAt(i).widget() is not None
    ]
    assert f"Note: {card.notes[0]}" in shown
    assert window.windowTitle() == "Llama-3.1-70B — ggtune"


def test_an_unknown_name_fails_in_one_line_and_keeps_the_model_open(
    qtbot: QtBot, window: MainWindow
) -> None:
    before = window.estimates.model
    with qtbot.waitSignal(window.models.model_failed, timeout=TIMEOUT_MS) as blocker:
        window.models.open_path("catalog:no-such-model")
    failure = blocker.args[0]
    assert isinstance(failure, ModelFailure)
    assert failure.path == "catalog:no-such-model"
    assert "no catalog model 'no-such-model'" in failure.message
    assert "\n" not in failure.message
    assert window.models.current is before
    assert window.estimates.model is before
    assert window.banner.isVisible()
    assert window.banner.label.text().endswith("Still showing Llama-3.1-70B.")
    assert "catalog:no-such-model" not in window.models.recent
    with pytest.raises(CatalogError, match=r"^no catalog model 'no-such-model' \("):
        load_model("catalog:no-such-model")


def test_verify_is_disabled_and_says_why(qtbot: QtBot, window: MainWindow) -> None:
    panel = window.verify_panel
    window.tabs.setCurrentWidget(panel)
    for button in (panel.run_button, panel.bench_button):
        assert not button.isEnabled()
        assert button.toolTip() == CATALOG_NO_FILE
    assert panel.status.text() == CATALOG_NO_FILE
    assert panel.history_model.rowCount() == 0
    assert panel.history_label.text() == (
        "Past benchmarks of this model: none (a catalog model has no file)."
    )
    assert not panel.banner.isVisible()  # no file: no history to read, no error either
    # opening a file while the tab is shown turns them on again, and a catalog model off
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_demo()
    assert panel.run_button.isEnabled()
    assert panel.bench_button.isEnabled()
    assert panel.status.text() == "Not run yet."
    assert panel.run_button.toolTip() != CATALOG_NO_FILE
    open_catalog(qtbot, window, "catalog:qwen3-8b")
    assert not panel.run_button.isEnabled()
    assert panel.status.text() == CATALOG_NO_FILE


def test_verify_refuses_a_catalog_model_before_any_child_starts(
    qtbot: QtBot, window: MainWindow
) -> None:
    controller = window.verify
    model = window.estimates.model
    assert model is not None
    me = psutil.Process()
    children = {p.pid for p in me.children(recursive=True)}
    started: list[bool] = []
    controller.running_changed.connect(started.append)
    for kind in ("dry_run", "benchmark"):
        controller.request_kind(kind)
        with qtbot.waitSignal(controller.failed, timeout=TIMEOUT_MS) as blocker:
            controller.start(model, window.estimates.settings, TEST_HARDWARE)
        failure = blocker.args[0]
        assert isinstance(failure, EngineFailure)
        assert failure.cause == CATALOG_NO_FILE
        assert failure.kind == kind
        assert failure.no_file
        assert not controller.running
        assert controller.dry_run_thread is None
    # F5 from the window: the same line on the Verify tab, and no "llama.cpp failed" dialog
    with qtbot.waitSignal(controller.failed, timeout=TIMEOUT_MS):
        window.start_dry_run()
    assert window.tabs.currentWidget() is window.verify_panel
    assert window.verify_panel.status.text() == CATALOG_NO_FILE
    assert not window.verify_panel.findChildren(QMessageBox)
    assert started == []
    assert {p.pid for p in me.children(recursive=True)} <= children


def test_export_shows_the_settings_with_a_placeholder_path(
    qtbot: QtBot, window: MainWindow
) -> None:
    window.tabs.setCurrentWidget(window.export_panel)
    for target in TARGETS:
        window.exports.set_target(target)
        preview = window.exports.preview
        assert preview is not None
        assert preview.error is None, preview.error
        placeholder = "/path/to/Llama-3.1-70B-F16.gguf"
        assert placeholder in preview.text
        assert "ggtune-export-" not in preview.text + preview.file_text  # no stand-in leaks
        assert preview.notes[0] == placeholder_note("Llama-3.1-70B", placeholder)
        assert window.export_panel.notes_label.text().startswith(
            f"• {placeholder} is a placeholder"
        )
    window.exports.set_target("ollama")
    window.estimates.set_quant("Q4_K_M")
    preview = window.exports.preview
    assert preview is not None
    assert "\nFROM /path/to/Llama-3.1-70B-Q4_K_M.gguf\n" in preview.file_text
    # what llama-server (the runner chosen) runs: its own fit shrank the unset context
    assert f"num_ctx {window.estimates.state.settings.n_ctx // 4}" in preview.file_text
    assert window.export_panel.save_button.isEnabled()
    assert not window.export_panel.banner.isVisible()


def test_explain_says_there_is_no_file(qtbot: QtBot, window: MainWindow) -> None:
    window.tabs.setCurrentWidget(window.explain_panel)
    qtbot.waitUntil(lambda: not window.explain_panel.dirty, timeout=TIMEOUT_MS)
    weights = window.explain_panel.section("weights")
    assert weights is not None
    text = " ".join(weights.paragraphs)
    assert "Llama-3.1-70B comes from ggtune's catalog: there is no file yet" in text
    assert "This file" not in text
    assert "instead of about" not in text  # F16 is not quantized: nothing to compare
    window.estimates.set_quant("Q4_K_M")
    window.explain_panel.refresh()
    weights = window.explain_panel.section("weights")
    assert weights is not None
    text = " ".join(weights.paragraphs)
    assert "quantized to Q4_K_M, the level picked in Settings" in text
    assert "Planned as Q4_K_M" in text
    assert "the file" not in text  # there is none: "A file at this level would be …"
    assert "A file at this level would be" in text


def test_the_catalog_model_reopens_after_a_restart(
    qtbot: QtBot, qsettings: QSettings, window: MainWindow
) -> None:
    window.close()
    assert qsettings.value(LAST_KEY) == SEVENTY_B
    again = MainWindow(qsettings, detect_hardware=False)
    qtbot.addWidget(again)
    assert again.models.recent[0] == SEVENTY_B
    with qtbot.waitSignal(again.models.model_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        again.models.open_last_or_demo()
    model = blocker.args[0]
    assert model.path == SEVENTY_B
    assert model.is_catalog
    assert again.models.list_model.entries[1].title == "Llama-3.1-70B (catalog)"


def test_a_catalog_entry_gone_since_last_time_falls_back_to_the_demo(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    qsettings.setValue(LAST_KEY, "catalog:removed-since")
    window = MainWindow(qsettings, detect_hardware=False)
    qtbot.addWidget(window)
    failures: list[ModelFailure] = []
    window.models.model_failed.connect(failures.append)
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.models.open_last_or_demo()
    assert blocker.args[0].is_demo
    assert failures == []
    assert not window.banner.isVisible()


def test_a_broken_catalog_is_shown_in_the_tree_not_raised(
    qtbot: QtBot, qtmodeltester: ModelTester, qsettings: QSettings, tmp_path: Path
) -> None:
    catalog = tmp_path / "catalog"
    catalog.mkdir()
    shutil.copy(CATALOG_DIR / "qwen3-8b.json", catalog)
    (catalog / "broken.json").write_text("{not json", encoding="utf-8")
    controller = ModelController(
        qsettings,
        library_scan=lambda: Library(()),
        library_config=tmp_path / "library.json",
        catalog_dir=catalog,
    )
    panel = ModelsPanel(controller, lambda: None)
    qtbot.addWidget(panel)
    with qtbot.waitSignal(controller.catalog_changed, timeout=TIMEOUT_MS) as blocker:
        panel.show()
    assert blocker.args == [()]
    model = controller.library_model
    qtmodeltester.check(model)
    group = model.index(0, 0)
    assert group.data() == f"{CATALOG_TITLE} (0)"
    issue = model.index(0, 0, group).data(Qt.ItemDataRole.UserRole)
    assert isinstance(issue, LibraryIssue)
    assert "broken.json: not valid JSON" in issue.message
    # its one good entry still opens by name, from the same folder
    with qtbot.waitSignal(controller.model_loaded, timeout=LOAD_TIMEOUT_MS) as loaded:
        controller.open_path("catalog:qwen3-8b")
    assert loaded.args[0].spec == model_spec(catalog_header("qwen3-8b"))
