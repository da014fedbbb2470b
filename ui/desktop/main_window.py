"""The main window: Models on the left, Settings on the right, Memory and Verify between.

It wires the controllers together and owns what belongs to the window: menus and
shortcuts, drag-and-drop of ``.gguf`` files, the error banner, and the window state (kept
in ``QSettings`` with the recent files).
"""

from __future__ import annotations

import html
import importlib.metadata
import os
from collections.abc import Callable
from pathlib import Path
from typing import Final

from PySide6.QtCore import QByteArray, QSettings, Qt, QTimer
from PySide6.QtGui import (
    QAction,
    QCloseEvent,
    QDragEnterEvent,
    QDropEvent,
    QGuiApplication,
    QKeySequence,
    QShowEvent,
)
from PySide6.QtWidgets import (
    QAbstractButton,
    QAbstractItemView,
    QDockWidget,
    QFileDialog,
    QFrame,
    QMainWindow,
    QMessageBox,
    QPlainTextEdit,
    QScrollArea,
    QTabWidget,
    QTextEdit,
    QVBoxLayout,
    QWidget,
)

from app.hardware.devices import Hardware
from app.predict.estimate import safe_repack
from ui.desktop.compare.controller import CompareController
from ui.desktop.compare.panel import ComparePanel
from ui.desktop.explain.panel import ExplainPanel
from ui.desktop.export.controller import ExportController
from ui.desktop.export.panel import ExportPanel
from ui.desktop.hardware.panel import HardwarePanel
from ui.desktop.hub.dialog import HubDialog
from ui.desktop.hub.quant_badges import QuantBadgeController
from ui.desktop.machines.controller import MachinesController
from ui.desktop.memory.panel import MemoryPanel
from ui.desktop.models.controller import ModelController
from ui.desktop.models.entries import ModelFailure
from ui.desktop.models.panel import ModelsPanel
from ui.desktop.recommend.controller import RecommendController
from ui.desktop.recommend.panel import RecommendPanel
from ui.desktop.settings.panel import SettingsPanel
from ui.desktop.settings.remembered import RememberedSettings
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.estimate_controller import EstimateController
from ui.desktop.shared.hardware import HardwareChoice, HardwareController
from ui.desktop.shared.kernel_timing import KernelTimingController
from ui.desktop.shared.model_card import LoadedModel, card_at_quant
from ui.desktop.shared.widgets import wrap_tooltips
from ui.desktop.verify.controller import VerifyController
from ui.desktop.verify.panel import VerifyPanel

GEOMETRY_KEY: Final = "window/geometry"
STATE_KEY: Final = "window/state"
TAB_KEY: Final = "window/tab"
GGUF_SUFFIX: Final = ".gguf"
TIPS_DELAY_MS: Final = 150
READING_MESSAGE: Final = "Reading the model header…"
KERNELS_MESSAGE: Final = (
    "Timing this CPU's matrix kernels for this model (once, in the background)…"
)


def gguf_paths(event: QDragEnterEvent | QDropEvent) -> list[str]:
    """Return the local ``.gguf`` files a drag carries."""
    mime = event.mimeData()
    if not mime.hasUrls():
        return []
    paths = [u.toLocalFile() for u in mime.urls() if u.isLocalFile()]
    return [p for p in paths if p.lower().endswith(GGUF_SUFFIX)]


def about_text() -> str:
    """Return the About box: what ggtune is, its version, licence and where it lives."""
    try:
        version = importlib.metadata.version("ggtune")
    except importlib.metadata.PackageNotFoundError:
        version = "unknown (not installed as a package)"
    return (
        f"<p><b>ggtune {html.escape(version)}</b></p>"
        "<p>Will this model fit, how fast will it run, and what settings should I use? "
        "Estimates follow the llama.cpp vendored in llama-cpp-python; Verify checks them "
        "against the engine itself.</p>"
        f"<p>Licence: {html.escape(project_licence())}.</p>"
        f"<p>{project_link()}</p>"
    )


def project_link() -> str:
    """Return a link to the project: its URL from the package metadata, else the docs
    folder beside the code (a release without either says so)."""
    try:
        meta = importlib.metadata.metadata("ggtune")
        urls = [u.split(",", 1)[-1].strip() for u in meta.get_all("Project-URL") or []]
        urls += meta.get_all("Home-page") or []
    except importlib.metadata.PackageNotFoundError:
        urls = []
    if urls:
        return f"<a href='{html.escape(urls[0])}'>{html.escape(urls[0])}</a>"
    docs = Path(__file__).resolve().parents[2] / "docs"
    if docs.is_dir():
        return f"Documentation: <a href='{docs.as_uri()}'>{html.escape(str(docs))}</a>"
    return "No project link in this build."


def project_licence() -> str:
    """Return the licence the package declares (its metadata), or say it is unknown."""
    try:
        meta = importlib.metadata.metadata("ggtune")
    except importlib.metadata.PackageNotFoundError:
        return "see the LICENSE file"
    found = meta.get_all("License-Expression") or meta.get_all("License") or []
    return str(found[0]) if found else "see the LICENSE file"


def tab_leaves_every_control(root: QWidget) -> None:
    """Let Tab leave every table and text box under ``root`` (Qt's default keeps it
    inside: a table moves between its cells, a text box types a tab); arrows still move."""
    for view in root.findChildren(QAbstractItemView):
        view.setTabKeyNavigation(False)
    for text in root.findChildren(QTextEdit):
        text.setTabChangesFocus(True)
    for plain in root.findChildren(QPlainTextEdit):
        plain.setTabChangesFocus(True)


class MainWindow(QMainWindow):
    """ggtune's main window (GUI thread).

    ``settings`` keeps recent files and the window state; tests pass a file of their own.
    ``detect_hardware`` False skips probing this machine (tests plan for fixed hardware).
    ``machines_file``: where the other machines lent over RPC are kept (default the user
    config folder's ``rpc_machines.json``).
    """

    def __init__(
        self,
        settings: QSettings,
        *,
        detect_hardware: bool = True,
        machines_file: Path | None = None,
        time_kernels: bool = True,
    ) -> None:
        super().__init__()
        self._settings = settings
        self._widen_docks = False  # set when no layout was saved
        self.hub_dialog: HubDialog | None = None  # made by show_hub
        self.setWindowTitle("ggtune")
        self.setAcceptDrops(True)
        self.setDockNestingEnabled(False)

        self.hardware = HardwareController(self)
        self.machines = MachinesController(self, path=machines_file)
        self.models = ModelController(settings, self)
        self.estimates = EstimateController(self.hardware.choice, self)
        self.verify = VerifyController(self)
        self.remembered = RememberedSettings(settings, self.estimates, self.hardware, self)
        self.hardware.hardware_changed.connect(self.estimates.set_hardware)
        self.hardware.detection_failed.connect(self._on_problem)
        self.models.model_failed.connect(self._on_models_model_failed)
        self.models.busy_changed.connect(self._on_models_busy_changed)

        central = QWidget()
        column = QVBoxLayout(central)
        column.setContentsMargins(6, 6, 6, 6)
        self.banner = MessageBanner()
        column.addWidget(self.banner)
        self.tabs = QTabWidget()
        self.tabs.setDocumentMode(True)
        self.memory_panel = MemoryPanel(self.estimates)
        self.verify_panel = VerifyPanel(self.verify, self.start_dry_run)
        self.estimates.model_changed.connect(self.verify_panel.set_model)
        self.tabs.addTab(self.memory_panel, "Memory")
        self.tabs.addTab(self.verify_panel, "Verify")
        speed = self.memory_panel.speed
        self.verify.speed_factors = lambda: speed.factors  # one figure on every tab
        # a stored run moves the calibration and the measured users line at once
        self.verify.benchmark_finished.connect(lambda _outcome: speed.reload())
        self.verify.users_finished.connect(lambda _outcome: speed.reload())
        # the first time a model needs CPU kernels this machine never timed, time them
        # in the background (never beside a Verify run); every tab moves to that figure
        self.kernel_timing: KernelTimingController | None = None
        if time_kernels:
            self.kernel_timing = KernelTimingController(self.estimates, self.hardware, self)
            self.kernel_timing.timing.connect(speed.set_timing_kernels)
            self.kernel_timing.timing.connect(self._on_kernel_timing)
            self.kernel_timing.failed.connect(self._on_problem)
            self.verify.running_changed.connect(self.kernel_timing.set_paused)
        self.compare = CompareController(self.estimates, speed, self)
        self.compare_panel = ComparePanel(self.compare, self.estimates)
        self.compare_panel.downloads.finished.connect(self._on_compare_download_finished)
        self.recommender = RecommendController(self.estimates, speed, self, machines=self.machines)
        self.recommend_panel = RecommendPanel(self.recommender)
        self.tabs.addTab(self.compare_panel, "Compare")
        self.tabs.addTab(self.recommend_panel, "Recommend")
        tip = self.tabs.setTabToolTip
        tip(self.tabs.indexOf(self.compare_panel), "Every quant level side by side (Ctrl+3)")
        tip(self.tabs.indexOf(self.recommend_panel), "Settings for what matters to you (Ctrl+4)")
        self.exports = ExportController(self.estimates, self)
        self.export_panel = ExportPanel(self.exports)
        self.hardware_panel = HardwarePanel(self.hardware, machines=self.machines)
        self.tabs.addTab(self.export_panel, "Export")
        self.explain_panel = ExplainPanel(self.estimates, lambda: speed.factors)
        self.tabs.addTab(self.explain_panel, "Explain")
        tip(self.tabs.indexOf(self.explain_panel), "How this model uses memory, in plain words")
        self.tabs.addTab(self.hardware_panel, "Hardware")
        if self.kernel_timing is not None:
            self.kernel_timing.timed.connect(lambda _rates: self.hardware_panel.refresh())
        # every tab's title in sight at any window size: the docks give way. Left to Qt,
        # the tab bar's minimum is its scroll arrows, and at 1004×700 on X11 it scrolled
        # and hid Hardware behind them (the pages' own minimum is narrower than the titles)
        self.tabs.setMinimumWidth(self.tabs.tabBar().sizeHint().width() + 8)
        self.tabs.setTabToolTip(0, "Where the memory goes, per device (Ctrl+1)")
        self.tabs.setTabToolTip(1, "Check the estimate against llama.cpp (Ctrl+2)")
        column.addWidget(self.tabs, 1)
        self.setCentralWidget(central)

        self.models_panel = ModelsPanel(self.models, self.open_file_dialog)
        # after the panel's own slot: a quant level set again on opening shows on its card
        self.models.model_loaded.connect(self._on_models_model_loaded)
        self.estimates.quant_changed.connect(self._on_estimates_quant_changed)
        self.models_dock = self._dock("Models", "models_dock", self.models_panel)
        self.addDockWidget(Qt.DockWidgetArea.LeftDockWidgetArea, self.models_dock)
        self.settings_panel = SettingsPanel(self.estimates, self.hardware)
        self.quant_badges = QuantBadgeController(self.estimates, speed, self)
        self.quant_badges.badges_changed.connect(self.settings_panel.set_quant_badges)
        self.quant_badges.watch(self.settings_panel.quant_combo)
        scroll = QScrollArea()
        scroll.setWidget(self.settings_panel)
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QFrame.Shape.NoFrame)
        scroll.setHorizontalScrollBarPolicy(Qt.ScrollBarPolicy.ScrollBarAsNeeded)
        scroll.setMinimumWidth(300)
        self.settings_dock = self._dock("Settings", "settings_dock", scroll)
        self.addDockWidget(Qt.DockWidgetArea.RightDockWidgetArea, self.settings_dock)
        self.resizeDocks(
            [self.models_dock, self.settings_dock], [240, 330], Qt.Orientation.Horizontal
        )

        self._build_menus()
        tab_leaves_every_control(self)
        # tooltips set on the way (a new estimate, a speed line) wrap once things rest
        self._tips = QTimer(self)
        self._tips.setSingleShot(True)
        self._tips.setInterval(TIPS_DELAY_MS)
        self._tips.timeout.connect(lambda: wrap_tooltips(self))
        self._tips.start()
        self.tabs.currentChanged.connect(lambda _i: self._tips.start())
        self.estimates.state_changed.connect(lambda _s: self._tips.start())
        self.memory_panel.speed.speed_changed.connect(lambda _s: self._tips.start())
        self.statusBar().showMessage("Starting…")
        self.hardware.hardware_changed.connect(self._on_hardware_changed)
        self._restore_window()
        self.remembered.restore_hardware()
        if detect_hardware:
            self.hardware.detect()

    # --- building ---

    def _dock(self, title: str, name: str, widget: QWidget) -> QDockWidget:
        dock = QDockWidget(title, self)
        dock.setObjectName(name)
        dock.setWidget(widget)
        dock.setFeatures(
            QDockWidget.DockWidgetFeature.DockWidgetClosable
            | QDockWidget.DockWidgetFeature.DockWidgetMovable
        )
        return dock

    def _action(
        self,
        text: str,
        shortcut: QKeySequence | QKeySequence.StandardKey | str | None,
        slot: object,
    ) -> QAction:
        action = QAction(text, self)
        if shortcut is not None:
            action.setShortcut(QKeySequence(shortcut))
        action.triggered.connect(slot)
        self.addAction(action)
        return action

    def _build_menus(self) -> None:
        bar = self.menuBar()
        file_menu = bar.addMenu("&File")
        self.open_action = self._action(
            "&Open model…", QKeySequence.StandardKey.Open, self.open_file_dialog
        )
        file_menu.addAction(self.open_action)
        file_menu.addAction(self._action("Open the &demo model", None, self.models.open_demo))
        self.hub_action = self._action("Find on &Hugging Face…", "Ctrl+Shift+F", self.show_hub)
        file_menu.addAction(self.hub_action)
        file_menu.addSeparator()
        file_menu.addAction(self._action("&Quit", QKeySequence.StandardKey.Quit, self.close))

        view_menu = bar.addMenu("&View")
        self.memory_action = self._action("&Memory", "Ctrl+1", lambda: self.tabs.setCurrentIndex(0))
        self.verify_action = self._action("&Verify", "Ctrl+2", lambda: self.tabs.setCurrentIndex(1))
        view_menu.addAction(self.memory_action)
        view_menu.addAction(self.verify_action)
        self.compare_action = self._action(
            "&Compare", "Ctrl+3", lambda: self.tabs.setCurrentWidget(self.compare_panel)
        )
        self.recommend_action = self._action(
            "&Recommend", "Ctrl+4", lambda: self.tabs.setCurrentWidget(self.recommend_panel)
        )
        view_menu.addAction(self.compare_action)
        view_menu.addAction(self.recommend_action)
        for text, key, panel in (
            ("&Export", "Ctrl+5", self.export_panel),
            ("E&xplain", "Ctrl+6", self.explain_panel),
            ("&Hardware", "Ctrl+7", self.hardware_panel),
        ):
            view_menu.addAction(self._action(text, key, self._show_tab(panel)))
        view_menu.addSeparator()
        for dock in (self.models_dock, self.settings_dock):
            view_menu.addAction(dock.toggleViewAction())
        self.find_action = self._action(
            "&Find model", QKeySequence.StandardKey.Find, self._focus_search
        )
        view_menu.addAction(self.find_action)

        run_menu = bar.addMenu("&Run")
        self.dry_run_action = self._action("&Dry run on llama.cpp", "F5", self.start_dry_run)
        run_menu.addAction(self.dry_run_action)
        verify = self.verify_panel
        self.bench_action = self._action(
            "&Benchmark (quick)", "F6", self._click(verify.bench_button)
        )
        self.users_action = self._action("&Users", "F7", self._click(verify.users_button))
        run_menu.addAction(self.bench_action)
        run_menu.addAction(self.users_action)

        help_menu = bar.addMenu("&Help")
        help_menu.addAction(self._action("&About ggtune", None, self._about))

    def _show_tab(self, panel: QWidget) -> Callable[[], None]:
        return lambda: self.tabs.setCurrentWidget(panel)

    def _click(self, button: QAbstractButton) -> Callable[[], None]:
        """Return a slot that shows Verify and presses ``button`` (when it is on)."""

        def press() -> None:
            self.tabs.setCurrentWidget(self.verify_panel)
            if button.isEnabled():
                button.click()

        return press

    # --- actions ---

    def open_file_dialog(self) -> None:
        """Ask for a .gguf file and open it."""
        # the last model's folder, else the home folder (never the current directory)
        start = os.path.dirname(self.models.recent[0]) if self.models.recent else ""
        if not start or not os.path.isdir(start):
            start = str(Path.home())
        path, _ = QFileDialog.getOpenFileName(
            self, "Open a model", start, "GGUF models (*.gguf);;All files (*)"
        )
        if path:
            self.models.open_path(path)

    def show_hub(self) -> None:
        """Show the Find on Hugging Face window (made on first use), its search focused."""
        if self.hub_dialog is None:
            self.hub_dialog = HubDialog(
                self.estimates, self.memory_panel.speed, self._on_hub_downloaded, self
            )
            # over the window, a little smaller than it (at most 1100 × 700)
            self.hub_dialog.resize(
                min(1100, max(640, self.width() - 60)), min(700, max(420, self.height() - 60))
            )
        self.hub_dialog.show()
        if QGuiApplication.platformName() != "offscreen":  # it has no stacking to change
            self.hub_dialog.raise_()
        self.hub_dialog.activateWindow()
        self.hub_dialog.search_field.setFocus()

    def _on_hub_downloaded(self, path: str) -> None:
        self.models.open_path(path)
        self.models.scan_library()  # the Hugging Face cache is one of the library's stores

    def start_dry_run(self) -> None:
        """Dry-run the open model with the settings on screen, on this machine."""
        model = self.estimates.model
        if model is None or self.verify.running:
            return
        self.tabs.setCurrentWidget(self.verify_panel)
        local = self.hardware.local or Hardware.cpu_only()
        # this machine's AMX kernels may crash the engine (app.predict.estimate)
        settings = safe_repack(self.estimates.settings, local.host, self.estimates.pinned)
        self.verify.start(model, settings, local)

    def _focus_search(self) -> None:
        self.models_dock.show()
        self.models_panel.search.setFocus(Qt.FocusReason.ShortcutFocusReason)
        self.models_panel.search.selectAll()

    def _about(self) -> None:
        box = QMessageBox(QMessageBox.Icon.Information, "About ggtune", about_text(), parent=self)
        box.setTextFormat(Qt.TextFormat.RichText)
        box.setTextInteractionFlags(Qt.TextInteractionFlag.TextBrowserInteraction)
        box.exec()

    # --- slots ---

    def _on_models_model_loaded(self, model: LoadedModel) -> None:
        self.banner.hide()
        self.estimates.set_model(model)
        self.remembered.restore(model)
        if model.is_demo:
            name = "the demo model"
        elif model.is_catalog:
            name = f"{model.card.title} from the catalog (plan only: no file to run)"
        else:
            name = os.path.basename(model.path)
        self.setWindowTitle(f"{model.card.title} — ggtune")
        self.statusBar().showMessage(f"Opened {name}", 4000)
        self.dry_run_action.setEnabled(not model.is_catalog)

    def _on_estimates_quant_changed(self, quant: str | None) -> None:
        model, spec = self.estimates.model, self.estimates.spec
        if model is not None and spec is not None:
            self.models_panel.show_card(card_at_quant(model, spec, quant), model.path)

    def _on_models_model_failed(self, failure: ModelFailure) -> None:
        kept = self.models.current
        keep = f" Still showing {kept.card.title}." if kept is not None else ""
        self.banner.show_message(
            f"Could not open {os.path.basename(failure.path)}: {failure.message}.{keep}",
            failure.detail,
        )

    def _on_compare_download_finished(self, path: str) -> None:
        self.models.open_path(path)
        folder = self.compare_panel.download_folder()
        if folder is None:
            self.models.scan_library()  # the Hugging Face cache is one of the library's stores
        else:  # a folder the user chose joins the library, as Add folder… does
            self.models.add_library_folder(str(folder))

    def _on_models_busy_changed(self, busy: bool) -> None:
        if busy:
            self.statusBar().showMessage(READING_MESSAGE)
        elif self.statusBar().currentMessage() == READING_MESSAGE:
            self.statusBar().clearMessage()  # a failed open left it there for good

    def _on_hardware_changed(self, choice: HardwareChoice) -> None:
        self.statusBar().showMessage(choice.label)
        if not choice.label.endswith("(detecting…)"):
            self.banner.hide()  # a later success: the error above is old news

    def _on_kernel_timing(self, busy: bool) -> None:
        if busy:
            self.statusBar().showMessage(KERNELS_MESSAGE)
        elif self.statusBar().currentMessage() == KERNELS_MESSAGE:
            self.statusBar().showMessage(self.hardware.choice.label)

    def _on_problem(self, text: str) -> None:
        self.banner.show_message(text)

    # --- drag and drop ---

    def dragEnterEvent(self, event: QDragEnterEvent) -> None:
        """Accept drags that carry a .gguf file."""
        if gguf_paths(event):
            event.acceptProposedAction()
        else:
            event.ignore()

    def dropEvent(self, event: QDropEvent) -> None:
        """Open the first .gguf file dropped."""
        paths = gguf_paths(event)
        if paths:
            event.acceptProposedAction()
            self.models.open_path(paths[0])
        else:
            event.ignore()

    # --- window state ---

    def _restore_window(self) -> None:
        geometry = self._settings.value(GEOMETRY_KEY)
        if isinstance(geometry, QByteArray) and not geometry.isEmpty():
            self.restoreGeometry(geometry)
        else:
            self.resize(1280, 820)
            self._widen_docks = True
        state = self._settings.value(STATE_KEY)
        if isinstance(state, QByteArray) and not state.isEmpty():
            self.restoreState(state)
        tab = self._settings.value(TAB_KEY, 0)
        self.tabs.setCurrentIndex(
            int(tab) if isinstance(tab, int | str) and str(tab).isdigit() else 0
        )

    def showEvent(self, event: QShowEvent) -> None:
        """On the first show without a saved layout, give the docks a share of the width
        (they kept 240 and 330 px at every size)."""
        super().showEvent(event)
        if self._widen_docks:
            self._widen_docks = False
            width = self.width()
            self.resizeDocks(
                [self.models_dock, self.settings_dock],
                [max(240, width // 6), max(330, width // 4)],
                Qt.Orientation.Horizontal,
            )

    def save_window(self) -> None:
        """Remember geometry, docks and the current tab."""
        self._settings.setValue(GEOMETRY_KEY, self.saveGeometry())
        self._settings.setValue(STATE_KEY, self.saveState())
        self._settings.setValue(TAB_KEY, self.tabs.currentIndex())
        self._settings.sync()

    def closeEvent(self, event: QCloseEvent) -> None:
        """Save the window state and stop a dry run or a download under way."""
        self.save_window()
        if self.kernel_timing is not None:
            self.kernel_timing.stop()
        self.verify.wait()
        self.compare_panel.downloads.wait()
        if self.hub_dialog is not None:
            self.hub_dialog.downloads.wait()
        super().closeEvent(event)

    def start(self) -> None:
        """Open the last model, or the demo model, once the event loop runs."""
        QTimer.singleShot(0, self.models.open_last_or_demo)
        QTimer.singleShot(0, self.models.scan_library)
