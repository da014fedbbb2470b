"""Hardware tab: the probe runs on the pool and says what it could not find; choosing a
profile or a composition changes the devices the estimate plans for; custom profiles are
validated before they are written, and errors are shown in plain words."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware
from app.hardware.probe import detect
from app.hardware.profiles import builtin_profiles_dir, compose, load_profiles
from app.hardware.report import HardwareReport
from app.predict.estimate import estimate
from tests.ui.desktop.test_main_window import held_only, make_window
from ui.desktop.hardware.custom import custom_profile_toml
from ui.desktop.hardware.panel import HardwarePanel
from ui.desktop.hardware.table import ProfileTableModel
from ui.desktop.shared.estimate_controller import EstimateController
from ui.desktop.shared.hardware import HardwareController
from ui.desktop.shared.model_card import LoadedModel, load_model

GIB = 1024**3


@pytest.fixture(scope="module")
def gemma(gemma_path: Path) -> LoadedModel:
    return load_model(gemma_path)


def make_panel(
    qtbot: QtBot, user_dir: Path, probe: object = detect
) -> tuple[HardwareController, HardwarePanel]:
    hardware = HardwareController()
    panel = HardwarePanel(hardware, probe=probe, user_dir=user_dir)  # type: ignore[arg-type]
    qtbot.addWidget(panel)
    return hardware, panel


def test_profile_table(qtmodeltester: ModelTester, tmp_path: Path) -> None:
    table = ProfileTableModel(user_dir=tmp_path)
    qtmodeltester.check(table)
    profiles = tuple(load_profiles([builtin_profiles_dir()]))
    table.set_rows(profiles)
    qtmodeltester.check(table)
    assert table.rowCount() == len(profiles)
    row = next(i for i, p in enumerate(profiles) if p.id == "rtx-3090")
    assert table.index(row, 2).data() == "24"
    assert table.headerData(2, Qt.Orientation.Horizontal) == "Memory\nGiB"
    assert table.index(row, 6).data() == "284.7"  # TOPS: what prefill of quants runs at
    assert table.headerData(6, Qt.Orientation.Horizontal) == "INT8\nTOPS"
    assert "whitepaper" in table.index(row, 6).data(Qt.ItemDataRole.ToolTipRole)
    mac = next(i for i, p in enumerate(profiles) if p.id == "m2-ultra")
    assert table.index(mac, 6).data() == "—"
    assert table.index(row, 1).data() == "gpu"  # built in
    assert table.index(row, 3).data(256) is profiles[row]  # UserRole
    assert table.index(row, 7).data() == "rtx-3090"  # the id Combine takes (issue 18)


def test_probe_runs_on_the_pool_and_lists_what_failed(qtbot: QtBot, tmp_path: Path) -> None:
    threads: list[threading.Thread] = []

    def probe() -> HardwareReport:
        threads.append(threading.current_thread())
        return detect()

    _hardware, panel = make_panel(qtbot, tmp_path, probe)
    with qtbot.waitSignal(panel.report_ready, timeout=10_000) as blocker:
        panel.show()  # the first show probes
    report = blocker.args[0]
    assert threads
    assert threads[0] is not threading.main_thread()
    assert panel.devices_label.text().startswith("CPU:")
    for status in report.statuses:
        assert f"{status.probe}: {status.detail}" in panel.probes_label.text()


def test_a_failed_probe_is_said_plainly(qtbot: QtBot, tmp_path: Path) -> None:
    def probe() -> HardwareReport:
        raise OSError(13, "Permission denied", "/sys/class/drm")

    _hardware, panel = make_panel(qtbot, tmp_path, probe)
    panel.detect()
    qtbot.waitUntil(lambda: panel.detect_button.isEnabled(), timeout=15_000)
    assert panel.devices_label.text() == (
        "Could not detect this machine: /sys/class/drm: Permission denied"
    )


def test_plan_for_a_profile_changes_the_estimates_devices(
    qtbot: QtBot, tmp_path: Path, gemma: LoadedModel
) -> None:
    hardware, panel = make_panel(qtbot, tmp_path)
    estimates = EstimateController(hardware.choice)
    hardware.hardware_changed.connect(estimates.set_hardware)
    estimates.set_model(gemma)
    estimates.update(n_gpu_layers=-1)
    before = estimates.state.estimate
    assert before is not None
    assert [d.name for d in before.devices] == ["CPU"]
    assert panel.select_profile("rtx-3090")
    with qtbot.waitSignal(hardware.hardware_changed, timeout=15_000):
        panel.plan_profile_button.click()
    after = estimates.state.estimate
    assert after is not None
    want = compose("rtx-3090", profiles=load_profiles([builtin_profiles_dir(), tmp_path]))
    assert hardware.choice.hardware == want
    assert hardware.choice.source == "profile"
    assert held_only(after) == estimate(gemma.spec, estimates.settings, want)
    gpu = want.gpus[0]
    assert gpu.name == "CUDA0"
    assert [d.name for d in after.devices] == ["CUDA0", "CPU"]
    assert "RTX 3090" in panel.planned_label.text()


def test_composition_is_checked_as_typed(qtbot: QtBot, tmp_path: Path) -> None:
    hardware, panel = make_panel(qtbot, tmp_path)
    panel.composition.setText("2x rtx-3090 + 64 GB DDR5")
    assert panel.plan_composition_button.isEnabled()
    assert panel.composition_feedback.text().startswith("✓ 2 × ")
    with qtbot.waitSignal(hardware.hardware_changed, timeout=15_000):
        panel.plan_composition_button.click()
    chosen = hardware.choice.hardware
    assert [g.name for g in chosen.gpus] == ["CUDA0", "CUDA1"]
    assert chosen.host.memory_bytes == 64 * GIB
    panel.composition.setText("2x rtx-9999")
    assert not panel.plan_composition_button.isEnabled()
    assert "no hardware profile 'rtx-9999'" in panel.composition_feedback.text()
    panel.composition.setText("this + rtx-4090")  # this machine is not detected here
    assert "still being detected" in panel.composition_feedback.text()


def test_custom_profile_is_validated_saved_and_listed(qtbot: QtBot, tmp_path: Path) -> None:
    user_dir = tmp_path / "profiles"
    hardware, panel = make_panel(qtbot, user_dir)
    panel.custom_name.setText("Lab GPU 48")
    panel.custom_memory.setValue(48)
    panel.custom_bandwidth.setValue(864)
    panel.custom_usable.setValue(0.9)
    panel.custom_fp16.setValue(91.1)
    panel.custom_source.setText("vendor spec sheet")
    panel.save_profile_button.click()
    path = user_dir / "lab-gpu-48.toml"
    assert panel.editor_feedback.text().startswith(f"Saved {path}")
    assert list(user_dir.iterdir()) == [path]  # written atomically: no temporary file
    saved = {p.id: p for p in panel.profile_model.rows}["lab-gpu-48"]
    assert saved.memory_gib.value == 48
    assert saved.usable_fraction.value == 0.9
    assert saved.fp16_tflops.source == "vendor spec sheet"
    assert panel.profile_model.is_custom(saved)
    custom_row = [p.id for p in panel.profile_model.rows].index("lab-gpu-48")
    assert panel.profile_model.index(custom_row, 1).data() == "gpu, custom"
    with qtbot.waitSignal(hardware.hardware_changed, timeout=15_000):
        panel.plan_profile_button.click()  # the new profile is selected
    assert hardware.choice.hardware.gpus[0].capacity_bytes == int(48 * GIB * 0.9)

    # saving again asks first; declining keeps the file
    text = path.read_text(encoding="utf-8")
    panel.custom_memory.setValue(40)
    panel.confirm = lambda _p, _t, _q: False
    panel.save_profile_button.click()
    assert "kept" in panel.editor_feedback.text()
    assert path.read_text(encoding="utf-8") == text


@pytest.mark.parametrize(
    ("name", "memory", "source", "message"),
    [
        ("Box", 0.0, "measured", "memory_gib.value must be a number > 0"),
        ("", 24.0, "measured", "give the profile a name"),
        ("Box", 24.0, "", "say where the figures come from"),
        ("RTX 3090", 24.0, "measured", "the name 'rtx-3090' is taken"),
    ],
)
def test_a_bad_custom_profile_shows_an_error(
    qtbot: QtBot, tmp_path: Path, name: str, memory: float, source: str, message: str
) -> None:
    user_dir = tmp_path / "profiles"
    _hardware, panel = make_panel(qtbot, user_dir)
    panel.custom_name.setText(name)
    panel.custom_memory.setValue(memory)
    panel.custom_source.setText(source)
    panel.save_profile_button.click()
    assert panel.editor_feedback.text().startswith("Not saved: ")
    assert message in panel.editor_feedback.text()
    assert not user_dir.exists()


def test_a_broken_custom_profile_file_is_shown_and_built_ins_stay(
    qtbot: QtBot, tmp_path: Path
) -> None:
    (tmp_path / "bad.toml").write_text("[[profile]]\nid = 'x'\n", encoding="utf-8")
    _hardware, panel = make_panel(qtbot, tmp_path)
    assert panel.profiles_error.isVisibleTo(panel)
    assert "missing name" in panel.profiles_error.text()
    assert "bad.toml" in panel.profiles_error.text()
    assert panel.select_profile("rtx-3090")


def test_custom_profile_toml_round_trips_unknown_fp16() -> None:
    from ui.desktop.hardware.custom import CustomProfileFields

    text = custom_profile_toml(
        CustomProfileFields('My "odd" box', "host", "CPU", 64, 80, 0.9, 0, "my notes")
    )
    assert 'name = "My \\"odd\\" box"' in text
    assert 'fp16_tflops = { source = "my notes" }' in text
    assert Hardware is not None


def test_profiles_are_found_by_name_or_id(qtbot: QtBot, qsettings: QSettings) -> None:
    window = make_window(qtbot, qsettings)
    panel = window.hardware_panel
    qtbot.waitUntil(lambda: len(panel.profile_model.rows) > 10, timeout=30_000)
    panel.profile_search.setText("3060")
    shown = [
        panel.profile_proxy.index(r, 0).data(256).id for r in range(panel.profile_proxy.rowCount())
    ]
    assert shown == ["rtx-3060-12g"]
    panel.profile_search.setText("GeForce RTX 4090")
    assert panel.profile_proxy.rowCount() == 1
    assert panel.select_profile("rtx-3060-12g")  # shown again to be chosen
    panel.plan_selected_profile()
    assert window.hardware.choice.label.startswith("Profile NVIDIA GeForce RTX 3060 12 GB")
