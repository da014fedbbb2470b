"""Hardware tab's Other machines and the Recommend tab's plan over them: machines are added,
switched off and removed (the same file ggtune hw --rpc-add writes), a bad one is refused in
plain words, and the Recommend tab plans across the ones that are on and gives each machine
its command."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from pytestqt.modeltest import ModelTester
from pytestqt.qtbot import QtBot

from app.planning.machines import RemoteMachine, add_machine, load_machines
from tests.ui.desktop.test_main_window import make_window
from tests.ui.desktop.test_recommend import PLAN_TIMEOUT_MS
from ui.desktop.machines.controller import MachinesController
from ui.desktop.machines.panel import MachinesBox
from ui.desktop.machines.table import MachinesTableModel
from ui.desktop.recommend.rows import GoalForm, RecommendOutcome


@pytest.fixture
def path(tmp_path: Path) -> Path:
    return tmp_path / "rpc_machines.json"


def make_box(qtbot: QtBot, path: Path) -> MachinesBox:
    box = MachinesBox(MachinesController(path=path))
    qtbot.addWidget(box)
    return box


def test_table_model(qtmodeltester: ModelTester, path: Path) -> None:
    controller = MachinesController(path=path)
    model = MachinesTableModel(controller)
    qtmodeltester.check(model)
    controller.add("192.168.1.20:50052", "rtx-3060-12g", "PC")
    model.set_rows(controller.machines)
    qtmodeltester.check(model)
    assert model.index(0, 1).data() == "PC"
    assert model.index(0, 2).data() == "192.168.1.20:50052"
    assert "RTX 3060" in model.index(0, 4).data()
    assert model.index(0, 0).data(Qt.ItemDataRole.CheckStateRole) == Qt.CheckState.Checked


def test_add_switch_off_and_remove(qtbot: QtBot, path: Path) -> None:
    box = make_box(qtbot, path)
    assert "None yet" in box.feedback.text()
    qtbot.keyClicks(box.address, "192.168.1.20:50052")
    qtbot.keyClicks(box.hardware, "rtx-3060-12g")
    qtbot.keyClicks(box.name, "gaming PC")
    qtbot.mouseClick(box.add_button, Qt.MouseButton.LeftButton)
    assert box.address.text() == ""  # cleared once added
    box.address.setText("192.168.1.21:50052")
    box.hardware.setText("32 GB")
    box.add()
    assert box.model.rowCount() == 2
    assert "its CPU and 32.0 GiB of RAM" in box.model.index(1, 4).data()
    assert "2 of 2 used in plans" in box.feedback.text()
    # the same file the command line edits
    assert [m.endpoint for m in load_machines(path)] == ["192.168.1.20:50052", "192.168.1.21:50052"]
    # off from the Use check box: kept, not planned with
    assert box.model.setData(
        box.model.index(0, 0), Qt.CheckState.Unchecked, Qt.ItemDataRole.CheckStateRole
    )
    assert not load_machines(path)[0].enabled
    assert [h.endpoint for h in box.controller.hosts()] == ["192.168.1.21:50052"]
    assert "1 of 2 used in plans" in box.feedback.text()
    box.table.selectRow(1)
    qtbot.mouseClick(box.remove_button, Qt.MouseButton.LeftButton)
    assert [m.endpoint for m in load_machines(path)] == ["192.168.1.20:50052"]


@pytest.mark.parametrize(
    ("address", "hardware", "words"),
    [
        ("192.168.1.20", "rtx-3090", "HOST:PORT"),
        ("[fe80::1]:50052", "rtx-3090", "IPv6"),
        ("10.0.0.1:50052", "", "say what"),
        ("10.0.0.1:50052", "warp-drive", "warp-drive"),
    ],
)
def test_a_bad_machine_is_refused_in_words(
    qtbot: QtBot, path: Path, address: str, hardware: str, words: str
) -> None:
    box = make_box(qtbot, path)
    box.address.setText(address)
    box.hardware.setText(hardware)
    box.add()
    assert box.feedback.text().startswith("Not added: ")
    assert words in box.feedback.text()
    assert box.address.text() == address  # nothing typed is lost
    assert not path.exists()


def test_remove_without_a_selection(qtbot: QtBot, path: Path) -> None:
    box = make_box(qtbot, path)
    box.remove_selected()
    assert box.feedback.text() == "Select a machine first."


def test_an_unreadable_file_is_shown_and_kept(qtbot: QtBot, path: Path) -> None:
    path.write_text('{"machines": "nope"}')
    box = make_box(qtbot, path)
    assert "not used" in box.feedback.text()
    assert "machines" in box.feedback.text()
    box.address.setText("10.0.0.1:50052")
    box.hardware.setText("rtx-3090")
    box.add()
    assert "left as it is" in box.feedback.text()
    assert path.read_text() == '{"machines": "nope"}'


def test_hardware_tab_lists_them_and_recommend_plans_over_them(
    qtbot: QtBot, qsettings: QSettings
) -> None:
    machines = Path(qsettings.fileName()).with_name("rpc_machines.json")
    add_machine(RemoteMachine("192.168.1.20:50052", "rtx-3060-12g", "gaming PC"), machines)
    window = make_window(qtbot, qsettings)
    qtbot.waitUntil(lambda: not window.recommender.busy, timeout=PLAN_TIMEOUT_MS)
    box = window.hardware_panel.machines_box
    assert box is not None
    assert box.model.rowCount() == 1
    panel = window.recommend_panel
    assert "1 on" in panel.use_machines.text()
    panel.set_form(GoalForm("fastest", ctx=4096, only_open_file=True))
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    outcome = done.args[0]
    assert isinstance(outcome, RecommendOutcome)
    rec = outcome.recommendation
    assert rec.best is not None
    assert rec.rpc is not None
    assert rec.best.estimate.device("RPC0").n_layers > 0  # on the 3060 of the other machine
    text = panel.machines_label.text()
    assert "192.168.1.20:50052:  ggml-rpc-server -H 192.168.1.20 -p 50052 -c" in text
    main = text.split("On this machine:\n", 1)[1].splitlines()[0]
    argv = shlex.split(main)
    assert argv[0] == "llama-server"
    assert argv[argv.index("--rpc") + 1] == "192.168.1.20:50052"
    assert "no authentication or encryption" in text  # the security note
    assert not panel.apply_button.isEnabled()  # the sliders plan this machine alone
    assert window.recommender.apply() is None
    # unticked: this machine alone, Apply again
    panel.use_machines.setChecked(False)
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS) as done:
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert done.args[0].recommendation.rpc is None
    assert not panel.machines_label.isVisible()
    assert panel.apply_button.isEnabled()
    assert json.loads(machines.read_text())["machines"][0]["name"] == "gaming PC"


def test_the_pooled_plan_saves_its_scripts(
    qtbot: QtBot, qsettings: QSettings, tmp_path: Path
) -> None:
    """Issue 14: the desktop exports the pooled plan as the CLI's --write-scripts does (one
    ggml-rpc-server script per other machine, llama-server --rpc for this one); a script
    already there is replaced only when the user says so."""
    machines = Path(qsettings.fileName()).with_name("rpc_machines.json")
    add_machine(RemoteMachine("192.168.1.20:50052", "rtx-3060-12g", "gaming PC"), machines)
    window = make_window(qtbot, qsettings)
    qtbot.waitUntil(lambda: not window.recommender.busy, timeout=PLAN_TIMEOUT_MS)
    panel = window.recommend_panel
    assert panel.scripts_button.isHidden()
    panel.set_form(GoalForm("fastest", ctx=4096, only_open_file=True))
    with qtbot.waitSignal(window.recommender.finished, timeout=PLAN_TIMEOUT_MS):
        qtbot.mouseClick(panel.run_button, Qt.MouseButton.LeftButton)
    assert not panel.scripts_button.isHidden()  # (the Recommend tab is not the one shown)
    folder = tmp_path / "scripts"
    folder.mkdir()
    panel.ask_folder = lambda _parent, _start: str(folder)
    asked: list[str] = []

    def refuse(_parent: object, _title: str, text: str) -> bool:
        asked.append(text)
        return False

    panel.confirm = refuse
    written = panel.save_scripts()
    assert sorted(p.name for p in written) == [
        "llama-server.sh",
        "rpc-server-192.168.1.20-50052.sh",
    ]
    assert not asked  # nothing was there: nothing asked
    server = (folder / "llama-server.sh").read_text()
    remote = (folder / "rpc-server-192.168.1.20-50052.sh").read_text()
    exec_line = next(line for line in server.splitlines() if line.startswith("exec "))
    argv = shlex.split(exec_line)[1:]
    assert argv[0] == "llama-server"
    assert argv[argv.index("--rpc") + 1] == "192.168.1.20:50052"
    assert "exec ggml-rpc-server -H 192.168.1.20 -p 50052 -c" in remote
    # the same commands the panel shows
    shown = panel.machines_label.text().split("On this machine:\n", 1)[1].splitlines()[0]
    assert shlex.split(shown) == argv
    assert (folder / "llama-server.sh").stat().st_mode & 0o100
    assert "Saved 2 scripts in" in panel.apply_label.text()
    # again, into the same folder: asked, refused, nothing replaced
    (folder / "llama-server.sh").write_text("mine\n")
    assert panel.save_scripts() == []
    assert asked
    assert "llama-server.sh" in asked[0]
    assert (folder / "llama-server.sh").read_text() == "mine\n"
    # said yes: replaced
    panel.confirm = lambda _parent, _title, _text: True
    assert len(panel.save_scripts()) == 2
    assert (folder / "llama-server.sh").read_text() == server
