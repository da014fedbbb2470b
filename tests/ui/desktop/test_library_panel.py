"""The library in the Models panel: scanned on the pool from a store laid out as Ollama
lays it out (the real Gemma demo model as the blob), grouped by source, issues listed
without failing, Add folder… and Rescan, and choosing an entry opens it like a file."""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.sources.library import (
    HeaderCache,
    Library,
    LibraryEntry,
    LibraryRoots,
    scan_library,
    user_folders,
)
from ui.desktop.models.controller import ModelController
from ui.desktop.models.panel import ModelsPanel

MODEL_MEDIA = "application/vnd.ollama.image.model"
SCAN_TIMEOUT_MS = 30_000


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src)


def _manifest(path: Path, digest: str, size: int) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    layer = {"mediaType": MODEL_MEDIA, "digest": f"sha256:{digest}", "size": size}
    path.write_text(json.dumps({"schemaVersion": 2, "layers": [layer]}), encoding="utf-8")


@pytest.fixture(scope="module")
def gemma_digest(gemma_path: Path) -> str:
    return hashlib.sha256(gemma_path.read_bytes()).hexdigest()


@pytest.fixture
def store(tmp_path: Path, gemma_path: Path, gemma_digest: str) -> Path:
    models = tmp_path / "ollama"
    _link(gemma_path, models / "blobs" / f"sha256-{gemma_digest}")
    manifests = models / "manifests" / "registry.ollama.ai" / "library"
    _manifest(manifests / "gemma3" / "270m", gemma_digest, gemma_path.stat().st_size)
    broken = manifests / "broken" / "latest"
    broken.parent.mkdir(parents=True)
    broken.write_text("{not json", encoding="utf-8")
    return models


def make_panel(
    qtbot: QtBot, qsettings: QSettings, store: Path, tmp_path: Path
) -> tuple[ModelController, ModelsPanel]:
    config = tmp_path / "library.json"

    def scan() -> Library:
        roots = LibraryRoots(ollama_models=store, folders=user_folders(config))
        return scan_library(roots, cache=HeaderCache(None))

    controller = ModelController(qsettings, library_scan=scan, library_config=config)
    panel = ModelsPanel(controller, lambda: None)
    qtbot.addWidget(panel)
    return controller, panel


def test_scan_groups_by_source_and_lists_issues(
    qtbot: QtBot,
    qtmodeltester: ModelTester,
    qsettings: QSettings,
    store: Path,
    tmp_path: Path,
) -> None:
    controller, panel = make_panel(qtbot, qsettings, store, tmp_path)
    qtmodeltester.check(controller.library_model)
    with qtbot.waitSignal(controller.library_changed, timeout=SCAN_TIMEOUT_MS) as blocker:
        panel.rescan_button.click()
    library = blocker.args[0]
    assert controller.library == library
    model = controller.library_model
    qtmodeltester.check(model)
    qtmodeltester.check(panel.library_proxy)
    titles = [model.index(r, 0).data() for r in range(model.rowCount())]
    assert titles == ["Ollama (1)", "Skipped (1)"]
    ollama = model.index(0, 0)
    entry = model.index(0, 0, ollama).data(Qt.ItemDataRole.UserRole)
    assert isinstance(entry, LibraryEntry)
    assert model.index(0, 0, ollama).data() == "gemma3:270m"
    assert entry.path.startswith(str(store / "blobs"))
    skipped = model.index(1, 0).data(Qt.ItemDataRole.UserRole)
    assert skipped is None  # a group heading
    issue = model.index(0, 0, model.index(1, 0)).data(Qt.ItemDataRole.UserRole)
    assert "broken" in issue.path
    assert panel.library_status.text() == "1 model, 1 skipped (see Skipped)"
    panel.search.setText("270m")
    assert panel.library_proxy.rowCount() == 1


def test_choosing_an_entry_opens_it_like_a_file(
    qtbot: QtBot, qsettings: QSettings, store: Path, tmp_path: Path
) -> None:
    controller, panel = make_panel(qtbot, qsettings, store, tmp_path)
    with qtbot.waitSignal(controller.library_changed, timeout=SCAN_TIMEOUT_MS):
        controller.scan_library()
    proxy = panel.library_proxy
    index = proxy.index(0, 0, proxy.index(0, 0))
    with qtbot.waitSignal(controller.model_loaded, timeout=SCAN_TIMEOUT_MS) as blocker:
        panel.open_library_index(index)
    loaded = blocker.args[0]
    entry = index.data(Qt.ItemDataRole.UserRole)
    assert loaded.path == os.path.abspath(entry.path)
    assert loaded.spec.arch == "gemma3"
    assert controller.recent[0] == loaded.path
    # an issue row is not a model: nothing happens
    issue = proxy.index(0, 0, proxy.index(1, 0))
    panel.open_library_index(issue)
    assert not controller.busy


def test_add_folder_then_rescan(
    qtbot: QtBot, qsettings: QSettings, store: Path, tmp_path: Path, smollm_path: Path
) -> None:
    controller, panel = make_panel(qtbot, qsettings, store, tmp_path)
    folder = tmp_path / "mine"
    _link(smollm_path, folder / smollm_path.name)
    panel.ask_folder = lambda _parent: str(folder)
    with qtbot.waitSignal(controller.library_changed, timeout=SCAN_TIMEOUT_MS) as blocker:
        panel.add_folder_button.click()
    library = blocker.args[0]
    assert [e.source for e in library.entries] == ["ollama", "folder"]
    model = controller.library_model
    assert [model.index(r, 0).data() for r in range(model.rowCount())] == [
        "Ollama (1)",
        "Added folders (1)",
        "Skipped (1)",
    ]
    assert user_folders(tmp_path / "library.json") == (folder.resolve(),)


def test_a_failed_add_is_shown(
    qtbot: QtBot, qsettings: QSettings, store: Path, tmp_path: Path
) -> None:
    controller, panel = make_panel(qtbot, qsettings, store, tmp_path)
    panel.ask_folder = lambda _parent: str(tmp_path / "missing")
    with qtbot.waitSignal(controller.library_failed, timeout=SCAN_TIMEOUT_MS):
        panel.add_folder_button.click()
    assert panel.library_status.text().startswith("Library not scanned: ")
    assert "not a folder" in panel.library_status.text()
    assert panel.rescan_button.isEnabled()
