"""Hardware: what was detected on this machine (and what not, and why), the hardware
profiles, compositions such as "2x rtx-3090 + 64 GB DDR5", and a custom-profile editor.

Planning for a profile or a composition goes through
:meth:`~ui.desktop.shared.hardware.HardwareController.set_hardware` with ``source="profile"``; the
estimate follows. The probe (:func:`app.hardware.probe.detect`) runs on the job pool, never
on the GUI thread. Profiles are a few small TOML files (≈25 ms for all of them) and are
read on the GUI thread when the panel is built and after a custom profile is saved.

The editor's fields become a profile file in :mod:`ui.desktop.hardware.custom` (pure), the
probe's report words in :mod:`ui.desktop.hardware.words` (pure), the profiles a table in
:mod:`ui.desktop.hardware.table`; :class:`HardwarePanel` here is the widget. This is
``ggtune hw`` / ``ggtune hw --profile`` in a window.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Final

from PySide6.QtCore import QSortFilterProxyModel, Qt, Signal
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import (
    QAbstractItemView,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QHeaderView,
    QLineEdit,
    QPushButton,
    QScrollArea,
    QTableView,
    QVBoxLayout,
    QWidget,
)

from app.errors import GGTuneError, HardwareProfileError
from app.export.common import write_text_atomic
from app.hardware.devices import Hardware
from app.hardware.probe import detect
from app.hardware.profiles import (
    HardwareProfile,
    ProfileKind,
    ProfileSet,
    builtin_profiles_dir,
    compose,
    load_profiles,
    user_profiles_dir,
)
from app.hardware.report import HardwareReport
from ui.desktop.hardware.custom import CustomProfileFields, check_custom_profile
from ui.desktop.hardware.table import SEARCH_ROLE, ProfileTableModel
from ui.desktop.hardware.words import describe_report
from ui.desktop.machines.controller import MachinesController
from ui.desktop.machines.panel import MachinesBox
from ui.desktop.shared.hardware import HardwareController, describe_hardware
from ui.desktop.shared.jobs import run_job
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.widgets import ERROR_STYLE, OK_STYLE, confirm, selectable_label

KIND_TITLES: Final[dict[ProfileKind, str]] = {
    "gpu": "GPU",
    "unified": "whole machine (unified memory)",
    "host": "system RAM (CPU only)",
}


class HardwarePanel(QWidget):
    """Detected devices, profiles, composition and the custom-profile editor (GUI thread).

    ``probe`` is the detection run on the pool (default :func:`app.hardware.probe.detect`);
    ``builtin_dir``/``user_dir`` where profiles are read and custom ones written (defaults:
    ggtune's and the user config folder's). ``confirm(parent, title, text) -> bool`` asks
    before a custom profile file is replaced; tests replace it. ``machines``: the other
    machines lent over RPC, listed beside this one (:mod:`ui.desktop.machines`).
    """

    report_ready = Signal(object)
    profiles_loaded = Signal(object)

    def __init__(
        self,
        hardware: HardwareController,
        parent: QWidget | None = None,
        *,
        probe: Callable[[], HardwareReport] = detect,
        builtin_dir: Path | None = None,
        user_dir: Path | None = None,
        machines: MachinesController | None = None,
    ) -> None:
        super().__init__(parent)
        self._hardware = hardware
        self._probe = probe
        self._builtin_dir = builtin_dir or builtin_profiles_dir()
        self._user_dir = user_dir or user_profiles_dir()
        self._profiles = ProfileSet({}, {})
        self._composed: Hardware | None = None
        self._report: HardwareReport | None = None
        self._probed = False
        self.confirm: Callable[[QWidget, str, str], bool] = confirm

        outer = QVBoxLayout(self)
        outer.setContentsMargins(0, 0, 0, 0)
        scroll = QScrollArea()
        scroll.setWidgetResizable(True)
        scroll.setFrameShape(QScrollArea.Shape.NoFrame)
        body = QWidget()
        layout = QVBoxLayout(body)
        scroll.setWidget(body)
        outer.addWidget(scroll)

        self.planned_label = selectable_label()
        self.planned_label.setAccessibleName("Planning for")
        layout.addWidget(self.planned_label)
        layout.addWidget(self._build_detected())
        self.machines_box = None if machines is None else MachinesBox(machines)
        if self.machines_box is not None:
            layout.addWidget(self.machines_box)
        layout.addWidget(self._build_profiles(), 1)
        layout.addWidget(self._build_composition())
        layout.addWidget(self._build_editor())

        hardware.hardware_changed.connect(self._on_hardware_changed)
        self._on_hardware_changed(hardware.choice)
        self.reload_profiles()

    # --- building ---

    def _build_detected(self) -> QGroupBox:
        box = QGroupBox("This machine")
        layout = QVBoxLayout(box)
        self.devices_label = selectable_label("Detecting…")
        self.devices_label.setAccessibleName("Detected devices")
        self.probes_label = selectable_label()
        self.probes_label.setAccessibleName("What could not be detected")
        self.probes_label.setToolTip(
            "Each probe: ✓ found something, – nothing to find on this system, ⚠ failed (why)"
        )
        layout.addWidget(self.devices_label)
        layout.addWidget(self.probes_label)
        row = QHBoxLayout()
        self.detect_button = QPushButton("&Detect again")
        self.detect_button.setToolTip("Run the hardware probes again")
        self.detect_button.clicked.connect(self.detect)
        self.use_local_button = QPushButton("Plan for this &machine")
        self.use_local_button.clicked.connect(self._hardware.use_local)
        row.addWidget(self.detect_button)
        row.addWidget(self.use_local_button)
        row.addStretch(1)
        layout.addLayout(row)
        return box

    def _build_profiles(self) -> QGroupBox:
        box = QGroupBox("Profiles")
        layout = QVBoxLayout(box)
        self.profile_model = ProfileTableModel(self, user_dir=self._user_dir)
        self.profile_proxy = QSortFilterProxyModel(self)
        self.profile_proxy.setSourceModel(self.profile_model)
        self.profile_proxy.setFilterRole(SEARCH_ROLE)
        self.profile_proxy.setFilterCaseSensitivity(Qt.CaseSensitivity.CaseInsensitive)
        self.profile_search = QLineEdit()
        self.profile_search.setPlaceholderText("Search profiles (name or id, e.g. 3060)")
        self.profile_search.setAccessibleName("Search profiles")
        self.profile_search.setClearButtonEnabled(True)
        self.profile_search.textChanged.connect(self.profile_proxy.setFilterFixedString)
        layout.addWidget(self.profile_search)
        self.profile_table = QTableView()
        self.profile_table.setModel(self.profile_proxy)
        self.profile_table.setAccessibleName("Hardware profiles")
        self.profile_table.setSelectionBehavior(QAbstractItemView.SelectionBehavior.SelectRows)
        self.profile_table.setSelectionMode(QAbstractItemView.SelectionMode.SingleSelection)
        self.profile_table.verticalHeader().hide()
        header = self.profile_table.horizontalHeader()
        header.setSectionResizeMode(QHeaderView.ResizeMode.ResizeToContents)
        # the name column takes what the figures leave; a long name is cut with "…" and
        # its tooltip (and the Id column) give it whole, so the figures stay on screen
        header.setSectionResizeMode(0, QHeaderView.ResizeMode.Stretch)
        header.setMinimumSectionSize(60)
        self.profile_table.setWordWrap(True)
        self.profile_table.verticalHeader().setSectionResizeMode(
            QHeaderView.ResizeMode.ResizeToContents
        )
        self.profile_table.setMinimumHeight(180)
        self.profile_table.doubleClicked.connect(lambda _index: self.plan_selected_profile())
        layout.addWidget(self.profile_table, 1)
        row = QHBoxLayout()
        self.plan_profile_button = QPushButton("&Plan for this profile")
        self.plan_profile_button.setToolTip(
            "Estimate for the selected profile (a GPU profile keeps this machine's RAM)"
        )
        self.plan_profile_button.clicked.connect(self.plan_selected_profile)
        self.profiles_error = selectable_label()
        self.profiles_error.setStyleSheet(ERROR_STYLE)
        self.profiles_error.hide()
        row.addWidget(self.plan_profile_button)
        row.addStretch(1)
        layout.addLayout(row)
        layout.addWidget(self.profiles_error)
        return box

    def _build_composition(self) -> QGroupBox:
        box = QGroupBox("Combine")
        layout = QVBoxLayout(box)
        row = QHBoxLayout()
        self.composition = QLineEdit()
        self.composition.setPlaceholderText("e.g. 2x rtx-3090 + 64 GB DDR5, or this + rtx-4090")
        self.composition.setAccessibleName("Hardware composition")
        self.composition.setToolTip(
            "Profiles joined by +: '2x NAME' for several GPUs, 'NAME:48GB' for another memory "
            "size, '64 GB DDR5' for system RAM, 'this' for this machine"
        )
        self.composition.textChanged.connect(self._on_composition_text_changed)
        self.composition.returnPressed.connect(self.plan_composition)
        self.plan_composition_button = QPushButton("Plan for &this")
        self.plan_composition_button.setEnabled(False)
        self.plan_composition_button.clicked.connect(self.plan_composition)
        row.addWidget(self.composition, 1)
        row.addWidget(self.plan_composition_button)
        layout.addLayout(row)
        self.composition_feedback = selectable_label()
        self.composition_feedback.setAccessibleName("Composition check")
        layout.addWidget(self.composition_feedback)
        return box

    def _build_editor(self) -> QGroupBox:
        box = QGroupBox("Custom profile")
        form = QFormLayout(box)
        self.custom_name = QLineEdit()
        self.custom_name.setPlaceholderText("e.g. My workstation GPU")
        self.custom_kind = QComboBox()
        for kind, title in KIND_TITLES.items():
            self.custom_kind.addItem(title, kind)
        self.custom_backend = QComboBox()
        for backend in ("CUDA", "ROCm", "MTL", "Vulkan", "SYCL"):
            self.custom_backend.addItem(backend, backend)
        self.custom_kind.currentIndexChanged.connect(self._on_custom_kind_changed)

        def spin(maximum: float, decimals: int, value: float, suffix: str) -> QDoubleSpinBox:
            box = QDoubleSpinBox()
            box.setRange(0.0, maximum)
            box.setDecimals(decimals)
            box.setValue(value)
            box.setSuffix(suffix)
            return box

        self.custom_memory = spin(4096, 1, 24.0, " GiB")
        self.custom_bandwidth = spin(100_000, 1, 900.0, " GB/s")
        self.custom_usable = spin(1.0, 3, 0.95, " of the memory")
        self.custom_usable.setSingleStep(0.01)
        self.custom_usable.setToolTip("The share of the memory a model may use (0 … 1)")
        self.custom_fp16 = spin(100_000, 1, 0.0, " TFLOPS")
        self.custom_fp16.setSpecialValueText("unknown")
        self.custom_source = QLineEdit()
        self.custom_source.setPlaceholderText("where the figures come from (spec sheet, measured…)")
        form.addRow("&Name:", self.custom_name)
        form.addRow("K&ind:", self.custom_kind)
        form.addRow("&Backend:", self.custom_backend)
        form.addRow("Memory:", self.custom_memory)
        form.addRow("Bandwidth:", self.custom_bandwidth)
        form.addRow("&Usable fraction:", self.custom_usable)
        form.addRow("FP16:", self.custom_fp16)
        form.addRow("&Source:", self.custom_source)
        self.save_profile_button = QPushButton("Sav&e profile")
        self.save_profile_button.setToolTip(f"Save it to {self._user_dir}")
        self.save_profile_button.clicked.connect(self.save_custom_profile)
        form.addRow(self.save_profile_button)
        self.editor_feedback = selectable_label()
        self.editor_feedback.setAccessibleName("Custom profile check")
        form.addRow(self.editor_feedback)
        return box

    def showEvent(self, event: QShowEvent) -> None:
        """Probe this machine the first time the tab is shown."""
        super().showEvent(event)
        if not self._probed:
            self._probed = True
            self.detect()

    # --- actions ---

    def detect(self) -> None:
        """Run the hardware probes on the job pool; ``report_ready`` answers."""
        self._probed = True
        self.detect_button.setEnabled(False)
        self.devices_label.setText("Detecting…")
        run_job(
            self._probe,
            on_success=self._on_probe_done,
            on_failure=self._on_probe_failed,
            parent=self,
        )

    def refresh(self) -> None:
        """Probe again if the tab already showed a report (this CPU's kernels were just
        timed: its "cpu kernels" line would say "not timed yet" for good otherwise)."""
        if self._probed and self.detect_button.isEnabled():
            self.detect()

    def reload_profiles(self) -> None:
        """Read the built-in and custom profiles; a bad custom file is shown, not fatal."""
        self.profiles_error.hide()
        try:
            profiles = load_profiles([self._builtin_dir, self._user_dir])
        except GGTuneError as err:
            self.profiles_error.setText(f"Custom profiles not loaded: {err}")
            self.profiles_error.show()
            try:
                profiles = load_profiles([self._builtin_dir])
            except GGTuneError as builtin_err:
                self.profiles_error.setText(f"Profiles not loaded: {builtin_err}")
                profiles = ProfileSet({}, {})
        self._profiles = profiles
        self.profile_model.set_rows(tuple(profiles))
        self._on_composition_text_changed(self.composition.text())
        self.profiles_loaded.emit(profiles)

    def select_profile(self, profile_id_: str) -> bool:
        """Select the row of ``profile_id_``; return whether it exists."""
        for row, profile in enumerate(self.profile_model.rows):
            if profile.id == profile_id_:
                self.profile_search.clear()  # the row must be shown to be selected
                shown = self.profile_proxy.mapFromSource(self.profile_model.index(row, 0))
                self.profile_table.selectRow(shown.row())
                return True
        return False

    def plan_selected_profile(self) -> None:
        """Plan for the selected profile (a GPU keeps this machine's host)."""
        rows = self.profile_table.selectionModel().selectedRows()
        if not rows:
            self.profiles_error.setText("Select a profile first.")
            self.profiles_error.show()
            return
        profile = rows[0].data(Qt.ItemDataRole.UserRole)
        assert isinstance(profile, HardwareProfile), "the table holds profiles"
        try:
            hardware = self._compose(profile.id)
        except GGTuneError as err:
            self.profiles_error.setText(str(err))
            self.profiles_error.show()
            return
        self.profiles_error.hide()
        self._hardware.set_hardware(
            hardware, f"Profile {profile.name}: {describe_hardware(hardware)}", "profile"
        )

    def plan_composition(self) -> None:
        """Plan for the composition typed, if it is valid."""
        if self._composed is None:
            return
        text = self.composition.text().strip()
        self._hardware.set_hardware(
            self._composed, f"{text}: {describe_hardware(self._composed)}", "profile"
        )

    def save_custom_profile(self) -> None:
        """Validate the editor's profile and write it atomically to the user's folder."""
        fields = CustomProfileFields(
            name=self.custom_name.text(),
            kind=self.custom_kind.currentData(),
            backend="CPU"
            if self.custom_kind.currentData() == "host"
            else self.custom_backend.currentData(),
            memory_gib=self.custom_memory.value(),
            bandwidth_gb_per_s=self.custom_bandwidth.value(),
            usable_fraction=self.custom_usable.value(),
            fp16_tflops=self.custom_fp16.value(),
            source=self.custom_source.text(),
        )
        try:
            profile, text, path = check_custom_profile(fields, self._user_dir, self._profiles)
        except HardwareProfileError as err:
            self._editor_message(f"Not saved: {err.message}", error=True)
            return
        exists = path.exists()
        if exists and not self.confirm(
            self, "Replace the profile?", f"{path} already exists. Replace it?"
        ):
            self._editor_message("Not saved: the existing file was kept.", error=True)
            return
        try:
            write_text_atomic(path, text, overwrite=exists, make_parents=True)
        except (GGTuneError, OSError) as err:
            self._editor_message(f"Not saved: {describe_error(err)}", error=True)
            return
        self.reload_profiles()
        self.select_profile(profile.id)
        self._editor_message(f"Saved {path} (profile {profile.id})", error=False)

    # --- slots ---

    def _on_probe_done(self, report: HardwareReport) -> None:
        self._report = report
        devices, probes = describe_report(report)
        self.devices_label.setText(devices)
        self.probes_label.setText(probes)
        self.detect_button.setEnabled(True)
        self.report_ready.emit(report)

    def _on_probe_failed(self, error: Exception) -> None:
        self.devices_label.setText(f"Could not detect this machine: {describe_error(error)}")
        self.probes_label.clear()
        self.detect_button.setEnabled(True)

    def _on_hardware_changed(self, choice: object) -> None:
        label = getattr(choice, "label", "")
        self.planned_label.setText(f"<b>Planning for:</b> {label}")

    def _on_composition_text_changed(self, text: str) -> None:
        self._composed = None
        if not text.strip():
            self.composition_feedback.clear()
            self.plan_composition_button.setEnabled(False)
            return
        try:
            hardware = self._compose(text)
        except GGTuneError as err:
            self.composition_feedback.setText(str(err))
            self.composition_feedback.setStyleSheet(ERROR_STYLE)
            self.plan_composition_button.setEnabled(False)
            return
        self._composed = hardware
        self.composition_feedback.setText(f"✓ {describe_hardware(hardware)}")
        self.composition_feedback.setStyleSheet(OK_STYLE)
        self.plan_composition_button.setEnabled(True)

    def _on_custom_kind_changed(self, _index: int) -> None:
        self.custom_backend.setEnabled(self.custom_kind.currentData() != "host")

    # --- helpers ---

    def _compose(self, text: str) -> Hardware:
        local = self._hardware.local

        def this_machine() -> Hardware:
            if local is None:
                raise HardwareProfileError("this machine is still being detected")
            return local

        return compose(
            text,
            profiles=self._profiles,
            default_host=None if local is None else local.host,
            this_machine=this_machine,
        )

    def _editor_message(self, text: str, *, error: bool) -> None:
        self.editor_feedback.setText(text)
        self.editor_feedback.setStyleSheet(ERROR_STYLE if error else OK_STYLE)
