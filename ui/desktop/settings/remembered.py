"""Settings that survive a restart: per model, and the hardware plan for all of them.

LM Studio remembers each model's load settings; ggtune does too. What the user set for a
model (the runner preset, the quant level simulated, every setting pinned on the sliders,
llama-server's prompt cache and checkpoints) is kept under that model's path in
``QSettings`` and set again when the model is opened; the hardware planned for (a profile,
a composition or planned GPUs; or this machine) is kept once, for every model.

Only what the user set is kept: what the runner decides stays its to decide. A value
that no longer reads (another version wrote it, or the file was edited) is dropped
without a word: the model opens with the runner's defaults, nothing is lost but that.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any, Final

from PySide6.QtCore import QObject, QSettings

from app.errors import GGTuneError
from app.hardware.devices import Device, Hardware
from app.hardware.kernels import KernelRates
from app.settings import RUNNERS
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.hardware import HardwareChoice, HardwareController
from ui.desktop.shared.model_card import LoadedModel

MODEL_GROUP: Final = "remembered/models"
HARDWARE_KEY: Final = "remembered/hardware"
REMEMBERED_FIELDS: Final = (
    "n_ctx",
    "n_gpu_layers",
    "cache_type_k",
    "cache_type_v",
    "flash_attn",
    "n_parallel",
    "kv_unified",
    "swa_full",
    "n_batch",
    "n_ubatch",
    "n_cpu_moe",
    "use_mmap",
    "repack",
)
"""The sliders' settings kept per model (when the user set them)."""
REMEMBERED_OPTIONS: Final = ("cache_ram_mib", "ctx_checkpoints")
"""llama-server's own knobs kept per model."""


def model_key(path: str) -> str:
    """Return the ``QSettings`` key of the model at ``path`` (hashed: keys cannot hold '/')."""
    digest = hashlib.sha256(path.encode("utf-8", "surrogatepass")).hexdigest()[:24]
    return f"{MODEL_GROUP}/{digest}"


def _device_to_dict(device: Device) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for field in dataclasses.fields(device):
        value = getattr(device, field.name)
        if isinstance(value, KernelRates):
            value = value.to_dict()
        elif isinstance(value, tuple):
            value = list(value)
        out[field.name] = value
    return out


def _device_from_dict(data: dict[str, Any]) -> Device:
    values = dict(data)
    if values.get("kernels") is not None:
        values["kernels"] = KernelRates.from_dict(values["kernels"])
    if "cpu_flags" in values:
        values["cpu_flags"] = tuple(values["cpu_flags"])
    return Device(**values)


def hardware_to_json(choice: HardwareChoice) -> str:
    """Return ``choice`` as one JSON line."""
    hardware = choice.hardware
    return json.dumps(
        {
            "label": choice.label,
            "source": choice.source,
            "host": _device_to_dict(hardware.host),
            "gpus": [_device_to_dict(g) for g in hardware.gpus],
        }
    )


def hardware_from_json(text: str) -> HardwareChoice | None:
    """Return the choice :func:`hardware_to_json` wrote, or None when it does not read."""
    try:
        data = json.loads(text)
        hardware = Hardware(
            host=_device_from_dict(data["host"]),
            gpus=tuple(_device_from_dict(g) for g in data["gpus"]),
        )
        label, source = str(data["label"]), data["source"]
    except (ValueError, KeyError, TypeError, GGTuneError):
        return None
    if source not in ("local", "profile", "planned"):
        return None
    return HardwareChoice(hardware, label, source)


class RememberedSettings(QObject):
    """Keep each model's settings and the hardware plan in ``store`` (GUI thread).

    Every estimate of an open model saves that model's settings; :meth:`restore` sets them
    again after the model is opened; :meth:`restore_hardware` sets the plan kept (call it
    before detecting this machine).
    """

    def __init__(
        self,
        store: QSettings,
        estimates: EstimateController,
        hardware: HardwareController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._store = store
        self._estimates = estimates
        self._hardware = hardware
        self._restoring = False
        self._restored: str | None = None  # the model whose settings were set again
        estimates.state_changed.connect(self._on_estimates_state_changed)
        hardware.hardware_changed.connect(self._on_hardware_changed)

    def restore_hardware(self) -> bool:
        """Plan for the hardware kept, if any was; return whether one was set."""
        text = self._store.value(HARDWARE_KEY)
        choice = hardware_from_json(text) if isinstance(text, str) else None
        if choice is None or choice.source == "local":
            return False
        self._hardware.set_hardware(choice.hardware, choice.label, choice.source)
        return True

    def restore(self, model: LoadedModel) -> None:
        """Set again what the user set for ``model`` last time (nothing when nothing was)."""
        self._restored = model.path
        text = self._store.value(model_key(model.path))
        if not isinstance(text, str):
            return
        try:
            data = json.loads(text)
            runner, quant = data["runner"], data.get("quant")
            pinned = {k: v for k, v in data["pinned"].items() if k in REMEMBERED_FIELDS}
            options = {k: data.get(k) for k in REMEMBERED_OPTIONS}
        except (ValueError, KeyError, TypeError, AttributeError):
            return
        estimates = self._estimates
        self._restoring = True
        try:
            if runner in RUNNERS and runner != estimates.runner:
                estimates.set_runner(runner)
            if pinned:
                estimates.update(**pinned)
            if any(isinstance(v, int) for v in options.values()):
                estimates.set_options(
                    **{k: v if isinstance(v, int) else None for k, v in options.items()}
                )
            if isinstance(quant, str):
                estimates.set_quant(quant)
        finally:
            self._restoring = False
        self._save(model)

    def _save(self, model: LoadedModel) -> None:
        estimates = self._estimates
        settings, options = estimates.settings, estimates.options
        data = {
            "runner": estimates.runner,
            "quant": estimates.quant,
            "pinned": {k: getattr(settings, k) for k in REMEMBERED_FIELDS if k in estimates.pinned},
            **{k: getattr(options, k) for k in REMEMBERED_OPTIONS},
        }
        self._store.setValue(model_key(model.path), json.dumps(data))

    def _on_estimates_state_changed(self, state: EstimateState) -> None:
        model = self._estimates.model
        if model is not None and model.path == self._restored and not self._restoring:
            self._save(model)

    def _on_hardware_changed(self, choice: HardwareChoice) -> None:
        if choice.label.endswith("(detecting…)"):
            return  # the placeholder before this machine is probed
        self._store.setValue(HARDWARE_KEY, hardware_to_json(choice))
