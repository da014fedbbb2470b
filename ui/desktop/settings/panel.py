"""The Settings panel: every knob of the run, and the hardware to plan for.

Widgets only: each control writes through :meth:`EstimateController.update` (or the
:class:`HardwareController`), and the panel re-reads the settings from
``settings_changed`` with its signals blocked, so a runner preset or a new model moves the
controls without echoing back. Ranges follow the open model (its training context and
layer count); controls that do not apply (MoE on a dense model, GPU layers without a GPU)
are disabled, with a tooltip saying why. The Quantization combo offers the open file's
own quant level and every level :mod:`app.model.quant` can simulate from it
(:meth:`EstimateController.set_quant`).
"""

from __future__ import annotations

from collections.abc import Mapping

from PySide6.QtCore import Qt
from PySide6.QtGui import QColor
from PySide6.QtWidgets import (
    QButtonGroup,
    QCheckBox,
    QComboBox,
    QDoubleSpinBox,
    QFormLayout,
    QGroupBox,
    QHBoxLayout,
    QLabel,
    QPushButton,
    QRadioButton,
    QSlider,
    QSpinBox,
    QVBoxLayout,
    QWidget,
)

from app.hardware.devices import Hardware
from app.model.facts import gpu_layers_text
from app.model.spec import ModelSpec
from app.planning.runner_plan import DEFAULT_CACHE_RAM_MIB, DEFAULT_CTX_CHECKPOINTS
from app.predict.speed import DEFAULT_GPU_BANDWIDTH_GB_PER_S
from app.settings import ALL_LAYERS, CACHE_TYPES, FLASH_ATTN_MODES, RUNNERS, Settings
from app.units import GIB, format_bytes
from ui.desktop.hub.quant_badges import OWN, SUFFIX_ROLE, BadgeComboBox, LevelBadge
from ui.desktop.hub.tables import BADGE_COLORS
from ui.desktop.settings.context import ContextControl
from ui.desktop.shared.estimate_controller import (
    RUNNER_TITLES,
    EstimateController,
    EstimateState,
    QuantChoice,
    max_context,
)
from ui.desktop.shared.hardware import HardwareChoice, HardwareController, describe_hardware
from ui.desktop.shared.model_card import LoadedModel
from ui.desktop.shared.widgets import signals_blocked, wrap_tip

_FLASH_TITLES = {"auto": "Auto", "on": "On", "off": "Off"}

FILE_QUANT = ""
"""The Quantization combo's data for the open file itself (simulated levels: their name)."""
QUANT_TOOLTIP = (
    "Estimate the file you have, or the model simulated at another quant level "
    "(download that GGUF or make it with llama-quantize to run it)"
)


def quant_title(choice: QuantChoice) -> str:
    """Return the Quantization combo's text for a simulated level."""
    size = f", {format_bytes(choice.weights_bytes)}" if choice.weights_bytes else ""
    extra = ", needs an imatrix" if choice.needs_imatrix else ""
    return f"{choice.name} — simulated{size}{extra}"


def _form(box: QGroupBox) -> QFormLayout:
    form = QFormLayout(box)
    form.setRowWrapPolicy(QFormLayout.RowWrapPolicy.WrapLongRows)
    form.setFieldGrowthPolicy(QFormLayout.FieldGrowthPolicy.AllNonFixedFieldsGrow)
    return form


def _label(text: str, buddy: QWidget) -> QLabel:
    label = QLabel(text)
    label.setBuddy(buddy)
    return label


class SettingsPanel(QWidget):
    """The settings form (GUI thread); see the module doc."""

    def __init__(
        self,
        controller: EstimateController,
        hardware: HardwareController,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._controller = controller
        self._hardware = hardware
        self._spec: ModelSpec | None = None
        self._quant_badges: Mapping[str, LevelBadge] = {}
        layout = QVBoxLayout(self)
        layout.setContentsMargins(4, 4, 4, 4)
        layout.addWidget(self._build_runner())
        layout.addWidget(self._build_quant())
        layout.addWidget(self._build_context())
        layout.addWidget(self._build_placement())
        layout.addWidget(self._build_hardware())
        layout.addStretch(1)

        controller.settings_changed.connect(self._on_controller_settings_changed)
        controller.model_changed.connect(self._on_controller_model_changed)
        controller.runner_changed.connect(self._on_controller_runner_changed)
        controller.quant_changed.connect(self._on_controller_quant_changed)
        controller.quant_choices_changed.connect(lambda _c: self._fill_quant_combo())
        controller.state_changed.connect(self._on_controller_state_changed)
        hardware.local_detected.connect(self._on_hardware_local_detected)
        hardware.hardware_changed.connect(self._on_hardware_changed)
        self._on_controller_settings_changed(controller.settings)
        self._on_hardware_changed(hardware.choice)

    # --- building ---

    def _build_runner(self) -> QGroupBox:
        box = QGroupBox("Runner")
        form = _form(box)
        self.runner_combo = QComboBox()
        for runner in RUNNERS:
            self.runner_combo.addItem(RUNNER_TITLES[runner], runner)
        self.runner_combo.setCurrentIndex(RUNNERS.index(self._controller.runner))
        self.runner_combo.setToolTip(
            "Whose defaults to start from: each runner picks its own context, batch "
            "sizes and parallel users"
        )
        self.runner_combo.currentIndexChanged.connect(self._on_runner_combo_changed)
        self.reset_button = QPushButton("Reset")
        self.reset_button.setToolTip("Take the runner's default settings again")
        self.reset_button.clicked.connect(self._controller.reset_to_runner_defaults)
        row = QHBoxLayout()
        row.addWidget(self.runner_combo, 1)
        row.addWidget(self.reset_button)
        form.addRow(_label("Preset:", self.runner_combo), row)
        self.cache_ram = QSpinBox()
        self.cache_ram.setRange(-1, 1024 * 1024)
        self.cache_ram.setSingleStep(1024)
        self.cache_ram.setSpecialValueText("no limit")
        self.cache_ram.setSuffix(" MiB")
        self.cache_ram.setValue(DEFAULT_CACHE_RAM_MIB)
        self.cache_ram.setKeyboardTracking(False)
        self.cache_ram.setToolTip(
            wrap_tip(
                "llama-server's --cache-ram: system RAM kept for prompts already read, so "
                "a conversation picked up again is not read again (0 turns it off). Its "
                f"default is {DEFAULT_CACHE_RAM_MIB:,} MiB; the Memory bars show it as "
                "Prompt cache, memory that grows with use up to this limit"
            )
        )
        self.cache_ram.valueChanged.connect(
            lambda mib: self._controller.set_options(cache_ram_mib=mib)
        )
        form.addRow(_label("Prompt cache:", self.cache_ram), self.cache_ram)
        self.checkpoints = QSpinBox()
        self.checkpoints.setRange(0, 1024)
        self.checkpoints.setSuffix(" per user")
        self.checkpoints.setValue(DEFAULT_CTX_CHECKPOINTS)
        self.checkpoints.setKeyboardTracking(False)
        self.checkpoints.setToolTip(
            wrap_tip(
                "llama-server's --ctx-checkpoints: copies of the recurrent or sliding-window "
                "state kept per user, so an edited conversation need not be read from the "
                f"start (default {DEFAULT_CTX_CHECKPOINTS}; 0: none). The Memory bars show "
                "them as Checkpoints; models without such state keep none"
            )
        )
        self.checkpoints.valueChanged.connect(
            lambda n: self._controller.set_options(ctx_checkpoints=n)
        )
        form.addRow(_label("Checkpoints:", self.checkpoints), self.checkpoints)
        self._show_server_options(self._controller.runner)
        return box

    def _show_server_options(self, runner: str) -> None:
        """Show llama-server's own knobs as the controller holds them (on for it alone)."""
        options = self._controller.options
        server = runner == "llama-server"
        with signals_blocked(self.cache_ram, self.checkpoints):
            self.cache_ram.setValue(
                DEFAULT_CACHE_RAM_MIB if options.cache_ram_mib is None else options.cache_ram_mib
            )
            self.checkpoints.setValue(
                DEFAULT_CTX_CHECKPOINTS
                if options.ctx_checkpoints is None
                else options.ctx_checkpoints
            )
        self.cache_ram.setEnabled(server)
        self.checkpoints.setEnabled(server)

    def _build_quant(self) -> QGroupBox:
        box = QGroupBox("Model file")
        form = _form(box)
        self.quant_combo = BadgeComboBox()
        self.quant_combo.setToolTip(QUANT_TOOLTIP)
        self.quant_combo.setEnabled(False)
        self.quant_combo.currentIndexChanged.connect(self._on_quant_combo_changed)
        form.addRow(_label("&Quantization:", self.quant_combo), self.quant_combo)
        return box

    def _build_context(self) -> QGroupBox:
        box = QGroupBox("Context and KV cache")
        form = _form(box)
        self.context = ContextControl()
        self.context.slider.valueChanged.connect(self._on_context_slider_moved)
        self.context.spin.valueChanged.connect(self._on_context_spin_changed)
        form.addRow(_label("&Context:", self.context.slider), self.context)
        self.context_note = QLabel()
        self.context_note.setWordWrap(True)
        form.addRow(self.context_note)

        self.cache_k = QComboBox()
        self.cache_v = QComboBox()
        for combo, field in ((self.cache_k, "cache_type_k"), (self.cache_v, "cache_type_v")):
            for t in CACHE_TYPES:
                combo.addItem(t, t)
            combo.currentIndexChanged.connect(
                lambda _i, c=combo, f=field: self._controller.update(**{f: c.currentData()})
            )
        self.cache_k.setToolTip("Number format of the attention keys in the cache")
        self.cache_v.setToolTip(
            "Number format of the attention values; quantized types need flash attention"
        )
        form.addRow(_label("&K cache type:", self.cache_k), self.cache_k)
        form.addRow(_label("V cache t&ype:", self.cache_v), self.cache_v)

        self.flash = QComboBox()
        for mode in FLASH_ATTN_MODES:
            self.flash.addItem(_FLASH_TITLES[mode], mode)
        self.flash.setToolTip(
            "Flash attention: less compute memory, needed for a quantized V cache; "
            "Auto turns it on where the backend supports it"
        )
        self.flash.currentIndexChanged.connect(
            lambda _i: self._controller.update(flash_attn=self.flash.currentData())
        )
        form.addRow(_label("Flash attention:", self.flash), self.flash)

        self.parallel = QSpinBox()
        self.parallel.setRange(1, 256)
        self.parallel.setSuffix(" users")
        self.parallel.setToolTip("Sequences served at once (llama-server -np)")
        self.parallel.setKeyboardTracking(False)
        self.parallel.valueChanged.connect(lambda v: self._controller.update(n_parallel=v))
        self.unified = QCheckBox("Shared cache for all users")
        self.unified.setToolTip(
            "One KV cache shared by all users (-kvu) instead of an equal slice each"
        )
        self.unified.toggled.connect(lambda on: self._controller.update(kv_unified=on))
        form.addRow(_label("Parallel users:", self.parallel), self.parallel)
        form.addRow("", self.unified)

        self.swa_full = QCheckBox("Full-size sliding-window cache")
        self.swa_full.setToolTip(
            "Keep every token in the sliding-window layers' cache (--swa-full); "
            "needed to reuse long prompts, costs memory"
        )
        self.swa_full.toggled.connect(lambda on: self._controller.update(swa_full=on))
        form.addRow("", self.swa_full)
        return box

    def _build_placement(self) -> QGroupBox:
        box = QGroupBox("Placement and batches")
        form = _form(box)
        self.gpu_layers = QSlider(Qt.Orientation.Horizontal)
        self.gpu_layers.setAccessibleName("Layers on the GPU")
        self.gpu_layers.valueChanged.connect(self._on_gpu_layers_moved)
        self.gpu_layers_label = QLabel()
        self.gpu_layers_label.setWordWrap(True)
        row = QVBoxLayout()  # the slider full width, its words under it
        row.setSpacing(2)
        row.addWidget(self.gpu_layers)
        row.addWidget(self.gpu_layers_label)
        form.addRow(_label("&GPU layers:", self.gpu_layers), row)

        self.cpu_moe = QSpinBox()
        self.cpu_moe.setSuffix(" layers")
        self.cpu_moe.setKeyboardTracking(False)
        self.cpu_moe.valueChanged.connect(lambda v: self._controller.update(n_cpu_moe=v))
        form.addRow(_label("MoE experts on CPU:", self.cpu_moe), self.cpu_moe)

        self.batch = QSpinBox()
        self.batch.setRange(1, 65536)
        self.batch.setSuffix(" tokens")
        self.batch.setKeyboardTracking(False)
        self.batch.setToolTip("Logical batch: prompt tokens handed to llama.cpp at once (-b)")
        self.batch.valueChanged.connect(self._on_batch_changed)
        self.ubatch = QSpinBox()
        self.ubatch.setRange(1, 65536)
        self.ubatch.setSuffix(" tokens")
        self.ubatch.setKeyboardTracking(False)
        self.ubatch.setToolTip(
            "Physical batch: tokens computed in one step (-ub); sets the compute buffers"
        )
        self.ubatch.valueChanged.connect(lambda v: self._controller.update(n_ubatch=v))
        form.addRow(_label("Batch:", self.batch), self.batch)
        form.addRow(_label("Micro-batch:", self.ubatch), self.ubatch)
        self.mmap = QCheckBox("Map the file into memory (mmap)")
        self.mmap.setToolTip(
            "Read the weights straight from the file (the runners' default). Off "
            "(llama-server --load-mode none, Ollama use_mmap false): the weights are "
            "copied into RAM, which saves memory where llama.cpp repacks them for the CPU"
        )
        self.mmap.toggled.connect(lambda on: self._controller.update(use_mmap=on))
        form.addRow("", self.mmap)
        self.repack = QCheckBox("Repack weights for this CPU")
        self.repack.setToolTip(
            "llama.cpp keeps a converted copy of the weights for faster CPU kernels. Off "
            "(llama-server --no-repack): the weights stay as in the file. Off by default "
            "on a CPU with AMX, where the pinned llama.cpp's AMX kernels crash on some "
            "machines (llama.cpp issue #20824)"
        )
        self.repack.toggled.connect(lambda on: self._controller.update(repack=on))
        form.addRow("", self.repack)
        return box

    def _build_hardware(self) -> QGroupBox:
        box = QGroupBox("Hardware")
        form = _form(box)
        self.this_machine = QRadioButton("This machine")
        self.planned = QRadioButton("Plan for GPUs:")
        self.profile = QRadioButton("A profile from the Hardware tab:")
        self.profile.setToolTip("The profile or composition last chosen on the Hardware tab")
        self.profile.setEnabled(False)  # until one is chosen there
        group = QButtonGroup(self)
        group.addButton(self.this_machine)
        group.addButton(self.profile)
        group.addButton(self.planned)
        self.this_machine.setChecked(True)
        self.machine_label = QLabel("detecting…")
        self.machine_label.setWordWrap(True)
        self.profile_label = QLabel("none chosen yet")
        self.profile_label.setWordWrap(True)
        self._profile_choice: HardwareChoice | None = None
        form.addRow(self.this_machine)
        form.addRow(self.machine_label)
        form.addRow(self.profile)
        form.addRow(self.profile_label)
        form.addRow(self.planned)
        self.gpu_count = QSpinBox()
        self.gpu_count.setRange(1, 16)
        self.gpu_count.setSuffix(" GPU(s)")
        self.gpu_gib = QDoubleSpinBox()
        self.gpu_gib.setRange(0.5, 1024)
        self.gpu_gib.setDecimals(1)
        self.gpu_gib.setValue(24)
        self.gpu_gib.setSuffix(" GiB each")
        self.ram_gib = QDoubleSpinBox()
        self.ram_gib.setRange(1, 8192)
        self.ram_gib.setDecimals(1)
        self.ram_gib.setValue(64)
        self.ram_gib.setSuffix(" GiB")
        for spin in (self.gpu_count, self.gpu_gib, self.ram_gib):
            spin.setKeyboardTracking(False)
            spin.valueChanged.connect(self._on_plan_changed)
        row = QHBoxLayout()
        row.addWidget(self.gpu_count)
        row.addWidget(self.gpu_gib, 1)
        form.addRow(_label("Size:", self.gpu_count), row)
        self.gpu_bandwidth = QDoubleSpinBox()
        self.gpu_bandwidth.setRange(0, 20_000)
        self.gpu_bandwidth.setDecimals(0)
        self.gpu_bandwidth.setSingleStep(50)
        self.gpu_bandwidth.setSuffix(" GB/s each")
        self.gpu_bandwidth.setSpecialValueText(
            f"not given ({DEFAULT_GPU_BANDWIDTH_GB_PER_S:.0f} GB/s assumed)"
        )
        self.gpu_bandwidth.setKeyboardTracking(False)
        self.gpu_bandwidth.setToolTip(
            wrap_tip(
                "How fast each GPU reads its memory: writing speed follows it (an RTX 4090 "
                "reads 1008 GB/s, an RTX 3060 360). Not given, the speed is worked out at "
                f"{DEFAULT_GPU_BANDWIDTH_GB_PER_S:.0f} GB/s; a profile on the Hardware tab "
                "brings its own"
            )
        )
        self.gpu_bandwidth.valueChanged.connect(self._on_plan_changed)
        form.addRow(_label("Bandwidth:", self.gpu_bandwidth), self.gpu_bandwidth)
        form.addRow(_label("System RAM:", self.ram_gib), self.ram_gib)
        self.this_machine.toggled.connect(self._on_this_machine_toggled)
        self.profile.toggled.connect(self._on_profile_toggled)
        self.planned.toggled.connect(self._on_planned_toggled)
        self._set_plan_enabled(False)
        return box

    # --- controls -> controller ---

    def _on_runner_combo_changed(self, index: int) -> None:
        self._controller.set_runner(RUNNERS[index])

    def _on_quant_combo_changed(self, _index: int) -> None:
        data = self.quant_combo.currentData()
        self._controller.set_quant(data or None)

    def _on_context_slider_moved(self, position: int) -> None:
        self._controller.update(n_ctx=self.context.steps[position])

    def _on_context_spin_changed(self, value: int) -> None:
        self._controller.update(n_ctx=value)

    def _on_gpu_layers_moved(self, value: int) -> None:
        top = self.gpu_layers.maximum()
        self._controller.update(n_gpu_layers=ALL_LAYERS if value >= top else value)

    def _on_batch_changed(self, value: int) -> None:
        changes: dict[str, object] = {"n_batch": value}
        if self.ubatch.value() > value:
            changes["n_ubatch"] = value
        self._controller.update(**changes)

    def _on_this_machine_toggled(self, on: bool) -> None:
        if on:
            self._set_plan_enabled(False)
            self._hardware.use_local()

    def _on_planned_toggled(self, on: bool) -> None:
        if on:
            self._set_plan_enabled(True)
            self._on_plan_changed()

    def _on_profile_toggled(self, on: bool) -> None:
        choice = self._profile_choice
        if on and choice is not None and self._hardware.choice != choice:
            self._set_plan_enabled(False)
            self._hardware.set_hardware(choice.hardware, choice.label, "profile")

    def _on_plan_changed(self) -> None:
        if self.planned.isChecked():
            sizes = [self.gpu_gib.value()] * self.gpu_count.value()
            bandwidth = self.gpu_bandwidth.value() or None
            self._hardware.plan_gpus(sizes, self.ram_gib.value(), bandwidth)

    def _set_plan_enabled(self, enabled: bool) -> None:
        for w in (self.gpu_count, self.gpu_gib, self.ram_gib, self.gpu_bandwidth):
            w.setEnabled(enabled)

    # --- controller -> controls ---

    def _on_controller_runner_changed(self, runner: str) -> None:
        with signals_blocked(self.runner_combo):
            self.runner_combo.setCurrentIndex(self.runner_combo.findData(runner))
        if runner != "llama-server":  # the others take their own defaults
            self._controller.set_options(cache_ram_mib=None, ctx_checkpoints=None)
        self._show_server_options(runner)

    def _on_controller_quant_changed(self, quant: str | None) -> None:
        index = self.quant_combo.findData(quant or FILE_QUANT)
        with signals_blocked(self.quant_combo):
            self.quant_combo.setCurrentIndex(max(0, index))

    def _fill_quant_combo(self) -> None:
        own = self._controller.own_quant() or "file"
        with signals_blocked(self.quant_combo):
            self.quant_combo.clear()
            model = self._controller.model
            what = "catalog spec" if model is not None and model.is_catalog else "this file"
            self.quant_combo.addItem(f"{own} — {what}", FILE_QUANT)
            for choice in self._controller.quant_choices():
                self.quant_combo.addItem(quant_title(choice), choice.name)
            index = self.quant_combo.findData(self._controller.quant or FILE_QUANT)
            self.quant_combo.setCurrentIndex(max(0, index))
        self._show_quant_badges()
        self.quant_combo.setEnabled(True)
        self.quant_combo.setToolTip(
            "Working out the other quant levels (a moment for a large model)…"
            if self._controller.quant_choices_pending
            else QUANT_TOOLTIP
        )

    def set_quant_badges(self, badges: Mapping[str, LevelBadge]) -> None:
        """Write each level's badge (and the open file's size) into the Quantization combo
        (:class:`ui.desktop.hub.quant_badges.QuantBadgeController`'s; {}: none)."""
        self._quant_badges = badges
        self._show_quant_badges()

    def _show_quant_badges(self) -> None:
        combo = self.quant_combo
        for i in range(combo.count()):
            key = combo.itemData(i)
            level = self._quant_badges.get(key if isinstance(key, str) else OWN)
            suffix, tip, color = "", None, None
            if level is not None:
                size = f", {format_bytes(level.size_bytes)}" if key == FILE_QUANT else ""
                suffix = f"{size} — {level.badge.text}"
                tip = wrap_tip(level.badge.detail)
                color = QColor(BADGE_COLORS[level.badge.kind])
            combo.setItemData(i, suffix, SUFFIX_ROLE)
            combo.setItemData(i, tip, Qt.ItemDataRole.ToolTipRole)
            combo.setItemData(i, color, Qt.ItemDataRole.ForegroundRole)

    def _on_controller_model_changed(self, model: LoadedModel) -> None:
        spec = model.spec
        self._spec = spec
        self._fill_quant_combo()
        with signals_blocked(self.gpu_layers):
            self.gpu_layers.setRange(0, spec.n_layer + 1)
            self.gpu_layers.setPageStep(max(1, (spec.n_layer + 1) // 8))
        moe = spec.n_expert > 0
        with signals_blocked(self.cpu_moe):
            self.cpu_moe.setRange(0, spec.n_layer if moe else 0)
        self.cpu_moe.setEnabled(moe)
        self.cpu_moe.setToolTip(
            "Keep the expert weights of the first N layers in system RAM (--n-cpu-moe)"
            if moe
            else "Only for mixture-of-experts models; this one is dense"
        )
        swa = any(spec.is_swa)
        self.swa_full.setEnabled(swa)
        if not swa:
            self.swa_full.setToolTip("Only for models with sliding-window layers")
        self._on_controller_settings_changed(self._controller.settings)

    def _on_controller_settings_changed(self, settings: Settings) -> None:
        if self._spec is not None:
            self.context.set_maximum(max_context(self._spec, settings))
        self.context.show_value(settings.n_ctx)
        blocked = (
            self.cache_k,
            self.cache_v,
            self.flash,
            self.parallel,
            self.unified,
            self.swa_full,
            self.gpu_layers,
            self.cpu_moe,
            self.batch,
            self.ubatch,
            self.mmap,
            self.repack,
        )
        with signals_blocked(*blocked):
            self.cache_k.setCurrentIndex(self.cache_k.findData(settings.cache_type_k))
            self.cache_v.setCurrentIndex(self.cache_v.findData(settings.cache_type_v))
            self.flash.setCurrentIndex(self.flash.findData(settings.flash_attn))
            self.parallel.setValue(settings.n_parallel)
            self.unified.setChecked(settings.kv_unified)
            self.swa_full.setChecked(settings.swa_full)
            top = self.gpu_layers.maximum()
            ngl = settings.n_gpu_layers
            self.gpu_layers.setValue(top if ngl == ALL_LAYERS or ngl >= top else ngl)
            self.cpu_moe.setValue(settings.n_cpu_moe)
            self.batch.setValue(settings.n_batch)
            self.ubatch.setValue(settings.n_ubatch)
            self.mmap.setChecked(settings.use_mmap)
            self.repack.setChecked(settings.repack)
        self._show_gpu_layers(settings)

    def _show_gpu_layers(self, settings: Settings) -> None:
        n_layer = self.gpu_layers.maximum() - 1
        self.gpu_layers_label.setText(gpu_layers_text(settings.n_gpu_layers, n_layer))

    def _on_controller_state_changed(self, state: EstimateState) -> None:
        self._show_server_options(self._controller.runner)  # set_options has no signal
        est = state.estimate
        if est is not None:
            ctx = est.context
            per_user = (
                f"{ctx.n_ctx:,} cells shared by {state.settings.n_parallel} users"
                if ctx.n_stream == 1 and state.settings.n_parallel > 1
                else f"{ctx.n_ctx_seq:,} tokens per user"
                if ctx.n_stream > 1
                else f"{ctx.n_ctx:,} cells in the cache"
            )
            self.context_note.setText(f"{per_user}; training context {self._train_text()}")
        plan = state.plan
        if plan is not None and "n_ctx" not in state.pinned and state.settings.n_ctx:
            self.context.show_value(state.settings.n_ctx)  # the runner's choice (fit)
        if plan is not None and "n_gpu_layers" not in state.pinned:
            # the runner decides: show its choice (moving the slider pins a value)
            top = self.gpu_layers.maximum()
            planned = min(plan.gpu_layers, top)
            with signals_blocked(self.gpu_layers):
                self.gpu_layers.setValue(planned)
            chosen = gpu_layers_text(planned, top - 1)
            self.gpu_layers_label.setText(f"{chosen}, chosen by {plan.title}")
        has_gpu = bool(state.hardware.hardware.gpus)
        if not has_gpu and state.spec is not None:
            self.gpu_layers_label.setText(f"no GPU: all {state.spec.n_layer} layers on the CPU")
        self.gpu_layers.setEnabled(has_gpu)
        self.gpu_layers.setToolTip(
            "Layers whose weights and KV cache go to the GPU (-ngl); the output layer counts"
            if has_gpu
            else "No GPU to put layers on: choose Plan for GPUs below to try one"
        )

    def _train_text(self) -> str:
        return "unknown" if self._spec is None else f"{self._spec.n_ctx_train:,} tokens"

    def _on_hardware_local_detected(self, hardware: Hardware) -> None:
        ram = hardware.host.capacity_bytes
        self.machine_label.setText(describe_hardware(hardware))
        if ram and self._hardware.choice.source == "local":  # a plan's RAM stays shown
            with signals_blocked(self.ram_gib):
                self.ram_gib.setValue(round(ram / GIB, 1))

    def _on_hardware_changed(self, choice: HardwareChoice) -> None:
        """Show the hardware planned for, whichever tab chose it: the box never
        contradicts the plan (a profile's GPUs and RAM fill the sizes, greyed)."""
        button = {"local": self.this_machine, "profile": self.profile}.get(
            choice.source, self.planned
        )
        if choice.source == "profile":
            self._profile_choice = choice
            self.profile.setEnabled(True)
            self.profile_label.setText(choice.label)
        if choice.source != "local":
            gpus = choice.hardware.gpus
            ram = choice.hardware.host.capacity_bytes
            with signals_blocked(self.gpu_count, self.gpu_gib, self.ram_gib, self.gpu_bandwidth):
                if gpus:
                    self.gpu_count.setValue(len(gpus))
                    self.gpu_gib.setValue(round((gpus[0].capacity_bytes or 0) / GIB, 1))
                    self.gpu_bandwidth.setValue(gpus[0].bandwidth_gb_per_s or 0)
                if ram:
                    self.ram_gib.setValue(round(ram / GIB, 1))
        with signals_blocked(self.this_machine, self.profile, self.planned):
            button.setChecked(True)
        self._set_plan_enabled(choice.source == "planned")
