"""Issue 18, the keyboard pass: on every screen (the menu bar, both docks and one tab) each
Alt+letter names one control, Tab reaches every control and leaves every one (no table or
text box keeps it), and the menus reach every tab and every run.

The real window, the demo model; the keys are sent to the widget that has the focus, as a
user's keyboard sends them.
"""

from __future__ import annotations

import re
from collections import defaultdict

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QSettings, Qt
from PySide6.QtGui import QAction
from PySide6.QtWidgets import (
    QAbstractButton,
    QApplication,
    QGroupBox,
    QLabel,
    QMenu,
    QRadioButton,
    QWidget,
)
from pytestqt.qtbot import QtBot

from tests.test_docs_self_contained import OUTSIDE
from tests.ui.desktop.test_main_window import make_window
from ui.desktop.main_window import TIPS_DELAY_MS, MainWindow
from ui.desktop.shared.widgets import TIP_WIDTH_CHARS

MNEMONIC = re.compile(r"(?<!&)&([^&\s])")


def mnemonic(text: str) -> str | None:
    """Return the Alt+ letter of ``text`` ("&Open" → "o"), or None."""
    found = MNEMONIC.search(text.replace("&&", ""))
    return found.group(1).lower() if found else None


def screen_mnemonics(window: MainWindow) -> dict[str, list[str]]:
    """Return each Alt+ letter on screen now with what carries it."""
    found: defaultdict[str, list[str]] = defaultdict(list)
    for action in window.menuBar().actions():
        if (key := mnemonic(action.text())) is not None:
            found[key].append(f"menu {action.text()}")
    for i in range(window.tabs.count()):
        if (key := mnemonic(window.tabs.tabText(i))) is not None:
            found[key].append(f"tab {window.tabs.tabText(i)}")
    for widget in window.findChildren(QWidget):
        if not widget.isVisibleTo(window):
            continue
        text = None
        if isinstance(widget, QAbstractButton) or (
            isinstance(widget, QLabel) and widget.buddy() is not None
        ):
            text = widget.text()
        elif isinstance(widget, QGroupBox):
            text = widget.title()
        if text and (key := mnemonic(text)) is not None:
            found[key].append(f"{type(widget).__name__} {text!r}")
    return dict(found)


def tab_stops(window: MainWindow) -> list[tuple[QWidget, ...]]:
    """Return the stops on screen now that Tab should reach: each control, and each group
    of radio buttons as one stop (Tab enters the group, the arrows move inside it)."""
    stops: list[tuple[QWidget, ...]] = []
    grouped: set[int] = set()
    for widget in window.findChildren(QWidget):
        if not (
            widget.isVisible()
            and widget.isEnabled()
            and widget.focusPolicy() & Qt.FocusPolicy.TabFocus
            and widget.focusProxy() is None
            and widget.window() is window
        ):
            continue
        if isinstance(widget, QRadioButton) and widget.group() is not None:
            group = widget.group()
            if id(group) in grouped:
                continue
            grouped.add(id(group))
            stops.append(tuple(b for b in group.buttons() if b.isVisible() and b.isEnabled()))
        else:
            stops.append((widget,))
    return stops


def describe(widget: QWidget) -> str:
    """Name ``widget`` for a failure message."""
    text = widget.text() if isinstance(widget, QAbstractButton | QLabel) else ""
    return f"{type(widget).__name__} {widget.objectName()} {text!r}".strip()


def walk_tab(qtbot: QtBot, window: MainWindow, presses: int) -> list[QWidget]:
    """Press Tab ``presses`` times on the focused widget; return the widgets focused."""
    seen: list[QWidget] = []
    for _ in range(presses):
        focused = QApplication.focusWidget()
        assert focused is not None, "the focus left the window"
        qtbot.keyClick(focused, Qt.Key.Key_Tab)
        now = QApplication.focusWidget()
        assert now is not None
        seen.append(now)
    return seen


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    w = make_window(qtbot, qsettings)
    w.resize(1280, 800)
    w.activateWindow()
    qtbot.waitUntil(w.isActiveWindow, timeout=5_000)
    return w


def test_no_two_controls_share_an_alt_letter_on_any_screen(window: MainWindow) -> None:
    clashes = {}
    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        QApplication.processEvents()
        dup = {k: v for k, v in screen_mnemonics(window).items() if len(v) > 1}
        if dup:
            clashes[window.tabs.tabText(i)] = dup
    assert clashes == {}


def test_no_two_items_of_a_menu_share_a_letter(window: MainWindow) -> None:
    for top in window.menuBar().actions():
        menu = top.menu()
        assert isinstance(menu, QMenu)
        letters = [mnemonic(a.text()) for a in menu.actions() if not a.isSeparator()]
        named = [k for k in letters if k is not None]
        assert len(named) == len(set(named)), f"{top.text()}: {letters}"


@pytest.mark.parametrize("tab", range(7))
def test_tab_reaches_every_control_and_leaves_every_one(
    qtbot: QtBot, window: MainWindow, tab: int
) -> None:
    """From the tab bar, Tab walks every control on screen and comes back: none keeps it."""
    assert window.tabs.count() == 7
    window.tabs.setCurrentIndex(tab)
    bar = window.tabs.tabBar()
    bar.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.waitUntil(lambda: QApplication.focusWidget() is bar, timeout=5_000)
    stops = tab_stops(window)
    assert len(stops) > 5
    seen = walk_tab(qtbot, window, 2 * len(stops) + 10)
    assert bar in seen, f"Tab never came back to the tab bar on {window.tabs.tabText(tab)}"
    missed = [describe(stop[0]) for stop in stops if not any(w in seen for w in stop)]
    assert missed == []


def test_every_tab_has_a_shortcut_and_every_run_a_menu_item(
    qtbot: QtBot, window: MainWindow
) -> None:
    shortcuts = {a.shortcut().toString(): a for a in window.actions() if not a.shortcut().isEmpty()}
    for i in range(window.tabs.count()):
        action = shortcuts[f"Ctrl+{i + 1}"]
        window.tabs.setCurrentIndex((i + 1) % window.tabs.count())
        action.trigger()
        assert window.tabs.currentIndex() == i
    run_menu = next(a.menu() for a in window.menuBar().actions() if a.text() == "&Run")
    assert isinstance(run_menu, QMenu)
    items = [a.text().replace("&", "") for a in run_menu.actions()]
    panel = window.verify_panel
    for button in (panel.run_button, panel.bench_button, panel.users_button):
        assert button.text().replace("&", "") in items
    window.tabs.setCurrentIndex(0)
    bench = next(a for a in run_menu.actions() if a.text() == "&Benchmark (quick)")
    assert isinstance(bench, QAction)
    assert bench.shortcut().toString() == "F6"


def test_the_settings_hardware_box_shows_the_profile_planned_for(
    qtbot: QtBot, window: MainWindow
) -> None:
    """A profile chosen on the Hardware tab is what the Settings box shows (its GPUs and
    RAM, its name), never a greyed 24 GiB of its own; This machine and back returns to it."""
    from app.hardware.devices import Hardware, planned_hardware

    GIB = 1024**3
    panel = window.settings_panel
    rtx = planned_hardware(Hardware.cpu_only(32 * GIB), gpu_bytes=[11 * GIB])
    window.hardware.set_hardware(rtx, "Profile RTX 3060 12 GB", "profile")
    assert panel.profile.isChecked()
    assert panel.profile.isEnabled()
    assert not panel.planned.isChecked()
    assert not panel.this_machine.isChecked()
    assert panel.profile_label.text() == "Profile RTX 3060 12 GB"
    assert (panel.gpu_count.value(), panel.gpu_gib.value(), panel.ram_gib.value()) == (1, 11, 32)
    assert not panel.gpu_gib.isEnabled()
    window.hardware.local_detected.emit(Hardware.cpu_only(8 * GIB))  # this machine, probed
    assert panel.ram_gib.value() == 32  # the profile's RAM stays shown
    panel.planned.click()
    assert window.hardware.choice.source == "planned"
    assert panel.gpu_gib.isEnabled()
    assert [g.capacity_bytes for g in window.hardware.choice.hardware.gpus] == [11 * GIB]
    panel.profile.click()
    assert window.hardware.choice.label == "Profile RTX 3060 12 GB"
    assert window.hardware.choice.hardware == rtx


def test_long_tooltips_wrap_and_cite_nothing_the_user_lacks(
    qtbot: QtBot, window: MainWindow
) -> None:
    """Qt shows a plain tooltip as one line (some were ~1,900 px, clipped at both screen
    edges): every long one is rich text, which wraps; none cites a file outside the repository
    (tests/test_docs_self_contained.py holds the same for code and docs)."""

    def all_wrapped() -> None:
        for widget in window.findChildren(QWidget):
            tip = widget.toolTip()
            assert not OUTSIDE.search(tip), f"{describe(widget)} cites {OUTSIDE.search(tip)}"
            if len(tip) > TIP_WIDTH_CHARS:
                assert tip.startswith("<qt>"), f"{describe(widget)}: {tip[:60]}…"

    for i in range(window.tabs.count()):
        window.tabs.setCurrentIndex(i)
        qtbot.wait(TIPS_DELAY_MS)
        # they wrap once things rest (a new estimate or speed line re-arms the timer)
        qtbot.waitUntil(all_wrapped, timeout=10_000)
