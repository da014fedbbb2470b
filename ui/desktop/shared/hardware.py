"""Which hardware the estimate plans for: this machine, or GPUs the user describes.

:class:`HardwareController` owns the choice and emits :class:`HardwareChoice` on
``hardware_changed``. Three sources feed it: this machine (probed once on the job pool),
"plan for N GPUs of X GiB" (the Settings panel), and anything else that can build a
:class:`~app.hardware.devices.Hardware`: hardware profiles plug in by calling
:meth:`HardwareController.set_hardware` with ``source="profile"``.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

from PySide6.QtCore import QObject, Signal

from app.hardware.devices import Hardware, planned_hardware
from app.hardware.kernels import KernelRates
from app.hardware.probe import local_hardware
from app.units import GIB, format_bytes
from ui.desktop.shared.jobs import run_job
from ui.desktop.shared.model_card import describe_error

HardwareSource = Literal["local", "planned", "profile"]


@dataclass(frozen=True, slots=True)
class HardwareChoice:
    """The hardware to plan for and how to name it (``label``: one line for the UI)."""

    hardware: Hardware
    label: str
    source: HardwareSource


def describe_hardware(hardware: Hardware) -> str:
    """Return e.g. "1 × 24.0 GiB GPU, 62.8 GiB RAM" or "CPU only, 23.5 GiB RAM"; a GPU of a
    profile says what of its memory a model may use: "1 × 11.0 GiB GPU (usable of 12.0 GiB)"
    (llama.cpp's fit leaves 1 GiB free per device)."""
    host = hardware.host
    ram = host.capacity_bytes
    ram_text = "RAM size unknown" if ram is None else f"{format_bytes(ram)} RAM"
    if ram is not None and host.free_bytes is not None and host.free_bytes < ram:
        ram_text += f" ({format_bytes(host.free_bytes)} free)"
    if not hardware.gpus:
        return f"CPU only, {ram_text}"
    sizes = [g.capacity_bytes for g in hardware.gpus]
    if len(set(sizes)) == 1:
        size = "unknown size" if sizes[0] is None else format_bytes(sizes[0])
        gpus = f"{len(sizes)} × {size} GPU"
    else:
        gpus = " + ".join("?" if s is None else format_bytes(s) for s in sizes) + " GPUs"
    physical = {g.memory_bytes for g in hardware.gpus}
    if len(physical) == 1 and None not in physical and physical != set(sizes):
        (whole,) = physical
        gpus += f" (usable of {format_bytes(whole or 0)})"
    return f"{gpus}, {ram_text}"


def _with_kernels(hardware: Hardware, rates: KernelRates) -> Hardware:
    host = dataclasses.replace(hardware.host, kernels=rates)
    return dataclasses.replace(hardware, host=host)


class HardwareController(QObject):
    """Hold the hardware choice (GUI thread); probe this machine once, off the GUI thread.

    ``hardware_changed(HardwareChoice)`` fires on every change; ``local_detected(Hardware)``
    once the probe answered; ``detection_failed(str)`` when it could not.
    """

    hardware_changed = Signal(object)
    local_detected = Signal(object)
    detection_failed = Signal(str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._local: Hardware | None = None
        self._choice = HardwareChoice(
            Hardware.cpu_only(), "This machine (detecting…)", source="local"
        )

    @property
    def choice(self) -> HardwareChoice:
        """The hardware planned for now."""
        return self._choice

    @property
    def local(self) -> Hardware | None:
        """This machine as probed, or None before the probe answered."""
        return self._local

    def detect(self) -> None:
        """Probe this machine on the job pool (≤ a few hundred ms); answer by signal."""
        run_job(
            local_hardware,
            on_success=self._on_probe_done,
            on_failure=self._on_probe_failed,
            parent=self,
        )

    def set_hardware(self, hardware: Hardware, label: str, source: HardwareSource) -> None:
        """Plan for ``hardware`` (the seam for profiles and compositions)."""
        self._choice = HardwareChoice(hardware, label, source)
        self.hardware_changed.emit(self._choice)

    def use_local(self) -> None:
        """Plan for this machine (as detected; CPU with unknown RAM until then)."""
        if self._local is None:
            self.set_hardware(Hardware.cpu_only(), "This machine (detecting…)", "local")
        else:
            label = f"This machine: {describe_hardware(self._local)}"
            self.set_hardware(self._local, label, "local")

    def plan_gpus(
        self, gpu_gib: list[float], ram_gib: float, bandwidth_gb_per_s: float | None = None
    ) -> None:
        """Plan for GPUs of ``gpu_gib`` GiB each and ``ram_gib`` GiB of system RAM, each GPU
        reading its memory at ``bandwidth_gb_per_s`` (None: not given; the speed model then
        assumes :data:`~app.predict.speed.DEFAULT_GPU_BANDWIDTH_GB_PER_S` and says so)."""
        assert all(g > 0 for g in gpu_gib), f"GPU sizes must be > 0 GiB, got {gpu_gib}"
        # this machine's CPU flags (they decide llama.cpp's CPU repack buffers) when known
        base = self._local or Hardware.cpu_only()
        gpu_bytes = [int(g * GIB) for g in gpu_gib]
        hardware = planned_hardware(base, gpu_bytes=gpu_bytes, ram_bytes=int(ram_gib * GIB))
        if bandwidth_gb_per_s:
            gpus = tuple(
                dataclasses.replace(g, bandwidth_gb_per_s=bandwidth_gb_per_s) for g in hardware.gpus
            )
            hardware = dataclasses.replace(hardware, gpus=gpus)
        self.set_hardware(hardware, f"Planned: {describe_hardware(hardware)}", "planned")

    def set_host_kernels(self, rates: KernelRates) -> None:
        """This CPU's kernels were timed: plan with them from now on, for this machine and
        for GPUs planned on it (a profile's CPU is another machine's: left as it is)."""
        if self._local is None:
            return
        self._local = _with_kernels(self._local, rates)
        choice = self._choice
        if choice.source == "local":
            self.use_local()
        elif choice.source == "planned":
            self.set_hardware(_with_kernels(choice.hardware, rates), choice.label, "planned")

    def _on_probe_done(self, hardware: Hardware) -> None:
        self._local = hardware
        self.local_detected.emit(hardware)
        if self._choice.source == "local":
            self.use_local()

    def _on_probe_failed(self, error: Exception) -> None:
        self.detection_failed.emit(f"Could not detect this machine: {describe_error(error)}")
