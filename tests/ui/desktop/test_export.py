"""Export tab on the real Gemma demo model: the preview is exactly what ``app.export``
writes for the controller's settings (with facts read from the file, as the CLI reads
them), follows every settings change, shows refusals, and saves atomically, asking before
it replaces a file."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtGui import QGuiApplication
from PySide6.QtWidgets import QWidget
from pytestqt.qtbot import QtBot

import ui.desktop.export.panel as export_panel
from app.export.common import model_facts
from app.export.llama_cpp_python import export_llama_cpp_python
from app.export.llama_server import export_llama_server
from app.export.lmstudio import export_lmstudio
from app.export.ollama import export_ollama
from app.hardware.devices import Hardware
from app.planning.runner_plan import fitting_comments
from ui.desktop.export.controller import ExportController
from ui.desktop.export.panel import ExportPanel
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.hardware import HardwareChoice
from ui.desktop.shared.model_card import LoadedModel, load_model

GIB = 1024**3
CHOICE = HardwareChoice(Hardware.cpu_only(32 * GIB), "Test machine", "profile")


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> LoadedModel:
    return load_model(gemma_path)


def expected_text(path: str, state: EstimateState, target: str, system: str, home: Path) -> str:
    """The exporters' output for the state's settings, with the comments on the runner's
    own fitting that the state's plan gives (what the CLI's export writes too)."""
    facts = model_facts(path)
    settings = state.settings
    plan = state.plan
    assert plan is not None
    auto = plan.runner == "ollama" and "n_gpu_layers" not in plan.pinned
    fitting = fitting_comments(plan, pinned_in_export=not auto)
    if target == "ollama":
        out = export_ollama(path, settings, facts=facts, num_gpu_auto=auto, fitting=fitting)
        return out.render(system)  # type: ignore[arg-type]
    if target == "lmstudio":
        lms = export_lmstudio(path, settings, facts=facts, lmstudio_home=home, fitting=fitting)
        return lms.render()
    if target == "llama-server":
        return export_llama_server(
            path, settings, windows=system == "windows", fitting=fitting
        ).text
    return export_llama_cpp_python(path, settings).text


def expected_modelfile(path: str, state: EstimateState) -> str:
    """The Modelfile the export writes for the state's plan (fitting comments included)."""
    plan = state.plan
    assert plan is not None
    fitting = fitting_comments(plan, pinned_in_export=True)
    out = export_ollama(path, state.settings, facts=model_facts(path), fitting=fitting)
    return out.modelfile


def make_panel(
    qtbot: QtBot, gemma: LoadedModel, home: Path
) -> tuple[EstimateController, ExportController, ExportPanel]:
    estimates = EstimateController(CHOICE)
    estimates.set_model(gemma)
    controller = ExportController(estimates, lmstudio_home=home)
    panel = ExportPanel(controller)
    qtbot.addWidget(panel)
    return estimates, controller, panel


@pytest.mark.parametrize("system", ["linux", "macos", "windows"])
def test_preview_is_the_exporters_output_for_every_runner(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path, system: str
) -> None:
    estimates, controller, panel = make_panel(qtbot, gemma, tmp_path)
    panel.system_combo.setCurrentIndex(panel.system_combo.findData(system))
    assert controller.system == system
    for target in ("ollama", "lmstudio", "llama-server", "llama-cpp-python"):
        panel.target_combo.setCurrentIndex(panel.target_combo.findData(target))
        assert controller.target == target
        want = expected_text(gemma.path, estimates.state, target, system, tmp_path)
        assert panel.preview.toPlainText() == want
        assert panel.preview.isReadOnly()
        assert panel.save_button.isEnabled()
        assert panel.lmstudio_button.isVisibleTo(panel) == (target == "lmstudio")


def test_preview_follows_every_settings_change(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path
) -> None:
    estimates, controller, panel = make_panel(qtbot, gemma, tmp_path)
    controller.set_target("llama-server")
    for n_ctx in (4096, 8192, 1024):
        with qtbot.waitSignal(controller.preview_changed, timeout=15_000):
            estimates.update(n_ctx=n_ctx, cache_type_k="q8_0", flash_attn="on")
        text = panel.preview.toPlainText()
        assert f" -c {n_ctx} " in text
        assert "-ctk q8_0" in text
        assert text == expected_text(gemma.path, estimates.state, "llama-server", "linux", tmp_path)
    estimates.set_runner("ollama")  # the target follows the runner preset
    assert controller.target == "ollama"
    assert panel.target_combo.currentData() == "ollama"


def test_ollama_refusal_is_shown_as_a_banner_line(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path
) -> None:
    estimates, controller, panel = make_panel(qtbot, gemma, tmp_path)
    controller.set_target("ollama")
    estimates.update(cache_type_k="q8_0", cache_type_v="f16", flash_attn="on")
    preview = controller.preview
    assert preview is not None
    assert preview.error is not None
    assert "one KV cache type" in preview.error
    assert "Ollama cannot run these settings" in panel.notes_label.text()
    assert panel.preview.toPlainText() == ""
    assert not panel.save_button.isEnabled()
    assert not panel.copy_button.isEnabled()
    estimates.update(cache_type_v="q8_0")  # one type again: Ollama can run it
    assert panel.save_button.isEnabled()
    assert "OLLAMA_KV_CACHE_TYPE" in panel.preview.toPlainText()


def test_copy_puts_the_preview_on_the_clipboard(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path
) -> None:
    _estimates, _controller, panel = make_panel(qtbot, gemma, tmp_path)
    panel.copy_button.click()
    assert QGuiApplication.clipboard().text() == panel.preview.toPlainText()


def test_save_writes_atomically_and_asks_before_overwriting(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    estimates, controller, panel = make_panel(qtbot, gemma, tmp_path)
    controller.set_target("ollama")
    target = tmp_path / "out" / "Modelfile"
    target.parent.mkdir()
    asked: list[str] = []
    answers: list[bool] = []
    writes: list[dict[str, object]] = []
    real_write = export_panel.write_text_atomic

    def spy_write(path: str, text: str, **kwargs: bool) -> Path:
        writes.append(dict(kwargs))
        return real_write(path, text, **kwargs)

    suggestions: list[str] = []

    def ask(_parent: QWidget, suggested: str) -> str:
        suggestions.append(suggested)
        return str(target)

    def confirm(_parent: QWidget, _title: str, text: str) -> bool:
        asked.append(text)
        return answers.pop(0)

    monkeypatch.setattr(export_panel, "write_text_atomic", spy_write)
    panel.ask_save_path = ask
    panel.confirm = confirm

    first = expected_modelfile(gemma.path, estimates.state)
    with qtbot.waitSignal(panel.saved, timeout=15_000):
        panel.save_button.click()
    assert target.read_text(encoding="utf-8") == first
    assert asked == []  # a new file: nothing to ask
    assert writes == [{"overwrite": False}]

    estimates.update(n_ctx=2048)
    answers.append(False)
    panel.save_button.click()
    assert len(asked) == 1
    assert str(target) in asked[0]
    assert target.read_text(encoding="utf-8") == first  # kept
    assert len(writes) == 1

    answers.append(True)
    with qtbot.waitSignal(panel.saved, timeout=15_000):
        panel.save_button.click()
    second = expected_modelfile(gemma.path, estimates.state)
    assert target.read_text(encoding="utf-8") == second
    assert "engine context 2048 tokens" in second
    assert writes[-1] == {"overwrite": True}
    assert os.listdir(target.parent) == ["Modelfile"]  # no temporary file left behind
    # the first dialog starts in the home folder, the next in the folder saved to last
    assert suggestions[0] == str(Path.home() / "Modelfile")
    assert suggestions[1:] == [str(target.parent / "Modelfile")] * 2


def test_save_into_a_missing_folder_shows_the_cause(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path
) -> None:
    _estimates, _controller, panel = make_panel(qtbot, gemma, tmp_path)
    panel.ask_save_path = lambda _p, _s: str(tmp_path / "nowhere" / "x.sh")
    panel.save_button.click()
    assert panel.banner.isVisibleTo(panel)
    assert "Not saved" in panel.banner.label.text()
    assert "does not exist" in panel.banner.label.text()
    assert "Traceback" not in panel.banner.label.text()


def test_write_to_lmstudio_config_confirms_and_keeps_a_backup(
    qtbot: QtBot, gemma: LoadedModel, tmp_path: Path
) -> None:
    home = tmp_path / "lmstudio"
    model = home / "models" / "google" / "gemma-3-270m" / "gemma-3-270m-q4_k_m.gguf"
    model.parent.mkdir(parents=True)
    try:
        os.link(gemma.path, model)
    except OSError:
        model.symlink_to(gemma.path)
    linked = load_model(model)
    estimates = EstimateController(CHOICE)
    estimates.set_model(linked)
    controller = ExportController(estimates, lmstudio_home=home)
    panel = ExportPanel(controller)
    qtbot.addWidget(panel)
    controller.set_target("lmstudio")
    preview = controller.preview
    assert preview is not None
    assert preview.lmstudio is not None
    config = preview.lmstudio.config_path
    assert config is not None
    assert panel.lmstudio_button.isEnabled()

    questions: list[str] = []
    panel.confirm = lambda _p, _t, text: questions.append(text) is not None and False
    panel.lmstudio_button.click()
    assert len(questions) == 1
    assert not config.exists()  # declined: nothing written

    panel.confirm = lambda _p, _t, _text: True
    with qtbot.waitSignal(panel.saved, timeout=15_000):
        panel.lmstudio_button.click()
    assert config.read_text(encoding="utf-8") == preview.lmstudio.config_json
    estimates.update(n_ctx=4096)
    with qtbot.waitSignal(panel.saved, timeout=15_000):
        panel.lmstudio_button.click()
    backups = list(config.parent.glob(config.name + ".*.bak"))
    assert len(backups) == 1
    assert '"value": 4096' in config.read_text(encoding="utf-8")


def test_a_saved_script_is_executable(qtbot: QtBot, gemma: LoadedModel, tmp_path: Path) -> None:
    """Issue 18: a saved llama-server.sh was not executable."""
    import os
    import stat

    _estimates, controller, panel = make_panel(qtbot, gemma, tmp_path)
    controller.set_target("llama-server")
    target = tmp_path / "out" / "llama-server.sh"
    target.parent.mkdir()
    panel.ask_save_path = lambda _p, _s: str(target)
    panel.save_button.click()
    assert target.read_text().startswith("#!")
    assert os.access(target, os.X_OK)
    assert target.stat().st_mode & stat.S_IXUSR
