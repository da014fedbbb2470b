"""The Quantization dropdown's badges (issue 18, Finding a model) on the real demo model.

Each level's words after its title are the badge the core gives that level's Compare row
at the window's settings, hardware and runner (app.planning.badges over
app.planning.compare.option_row), worked out off the GUI thread; they follow the hardware,
the open file's item gets its size, and the item texts (what the box shows closed) stay
the titles. They are worked out only while the list is open (a slider drag must not pay
for 35 estimates nobody looks at), and cleared at once when the state changes.
"""

from __future__ import annotations

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings
from PySide6.QtWidgets import QStyleOptionViewItem
from pytestqt.qtbot import QtBot

from app.hardware.devices import Hardware
from app.planning.badges import badge
from app.planning.compare import option_row
from app.units import GIB, format_bytes
from tests.ui.desktop.test_main_window import make_window
from tests.ui.desktop.test_quant_selector import wait_for_levels
from ui.desktop.compare.rows import runner_choice
from ui.desktop.hub.quant_badges import OWN, SUFFIX_ROLE, level_options
from ui.desktop.main_window import MainWindow
from ui.desktop.settings.panel import FILE_QUANT
from ui.desktop.shared.speed import model_file_bytes

TIMEOUT_MS = 60_000


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    wait_for_levels(qtbot, w)
    return w


def core_badges(window: MainWindow) -> dict[str, str]:
    """Each level's badge words as the core gives them for the window's state now."""
    state = window.estimates.state
    assert state.model is not None
    options = level_options(
        state.model.spec, window.estimates.quant_choices(), window.estimates.simulated_specs()
    )
    factors = window.memory_panel.speed.factors
    runner = runner_choice(state)
    out = {}
    for i, o in enumerate(options):
        row = option_row(o, options, state.settings, state.hardware.hardware, factors, runner)
        out[FILE_QUANT if i == 0 else o.name] = badge(row).text
    return out


def shown_badges(window: MainWindow) -> dict[str, str]:
    """Each dropdown item's badge words (after the last " — "), by its data."""
    combo = window.settings_panel.quant_combo
    out = {}
    for i in range(combo.count()):
        suffix = combo.itemData(i, SUFFIX_ROLE)
        out[combo.itemData(i)] = suffix.rsplit(" — ", 1)[-1] if suffix else ""
    return out


def settled(window: MainWindow) -> bool:
    return not window.quant_badges.busy and bool(window.quant_badges.badges)


# the real popup, on the offscreen platform: it cannot raise it or grab the keyboard
@pytest.mark.qt_log_ignore(
    "^This plugin does not support (raise|grabbing the keyboard|propagateSizeHints)"
)
def test_every_level_shows_the_cores_badge_and_follows_the_hardware(
    qtbot: QtBot, window: MainWindow
) -> None:
    combo = window.settings_panel.quant_combo
    qtbot.wait(500)
    assert not window.quant_badges.badges  # the list is closed: nothing worked out
    combo.showPopup()
    qtbot.waitUntil(lambda: settled(window), timeout=TIMEOUT_MS)
    expected = core_badges(window)
    assert shown_badges(window) == expected
    # the test machine has no GPU: fitting levels say so, with a speed
    assert expected[FILE_QUANT].startswith("fits in RAM, ~")
    own = window.estimates.model
    assert own is not None
    size = format_bytes(model_file_bytes(own.spec) or own.spec.weights_bytes)
    assert combo.itemData(0, SUFFIX_ROLE) == f", {size} — {expected[FILE_QUANT]}"
    assert combo.itemText(0) == "Q4_K_M — this file"  # the closed box keeps its title
    assert window.quant_badges.badges[OWN].size_bytes == os_size(own.spec.path)
    # the popup draws title and badge
    option = QStyleOptionViewItem()
    combo.itemDelegate().initStyleOption(option, combo.model().index(1, 0))
    assert option.text == combo.itemText(1) + combo.itemData(1, SUFFIX_ROLE)
    assert combo.view().window().width() >= combo.popup_width()  # opens wide enough
    screen = combo.screen().availableGeometry()
    assert screen.contains(combo.view().window().geometry())  # and on the screen

    before = shown_badges(window)
    window.hardware.set_hardware(Hardware.with_gpus([4 * GIB], 32 * GIB), "Planned", "planned")
    qtbot.waitUntil(lambda: shown_badges(window) != before, timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: settled(window), timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: shown_badges(window) == core_badges(window), timeout=TIMEOUT_MS)
    assert shown_badges(window)[FILE_QUANT].startswith("fits on GPU, ~")
    # too small for anything: no level gets a speed or a yes
    window.hardware.set_hardware(Hardware.with_gpus([GIB // 16], GIB // 16), "Tiny", "planned")
    qtbot.waitUntil(lambda: shown_badges(window)[FILE_QUANT] == "too large", timeout=TIMEOUT_MS)
    qtbot.waitUntil(lambda: shown_badges(window) == core_badges(window), timeout=TIMEOUT_MS)
    combo.hidePopup()
    # closed, a change clears them at once and nothing is worked out for it
    window.hardware.set_hardware(Hardware.with_gpus([4 * GIB], 32 * GIB), "Planned", "planned")
    assert not window.quant_badges.badges
    assert set(shown_badges(window).values()) == {""}
    qtbot.wait(500)
    assert not window.quant_badges.busy
    assert not window.quant_badges.badges


def os_size(path: str) -> int:
    import os

    return os.path.getsize(path)
