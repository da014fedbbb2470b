"""Devices a model can be placed on: GPUs and the host, with capacity and bandwidth.

This is the minimal description the estimator needs; detection and profiles build on it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

DeviceKind = Literal["gpu", "host"]


@dataclass(frozen=True, slots=True)
class Device:
    """One memory pool. Units: bytes and GB/s; ``None`` means unknown."""

    name: str
    kind: DeviceKind
    capacity_bytes: int | None = None
    free_bytes: int | None = None
    bandwidth_gb_per_s: float | None = None
    unified_memory: bool = False
    cpu_flags: tuple[str, ...] = ()
    """For the host: ISA features that change llama.cpp's CPU buffers (avx2, avx512f, neon…)."""


@dataclass(frozen=True, slots=True)
class Hardware:
    """The host (always present, first) and zero or more GPUs, in llama.cpp's order."""

    host: Device
    gpus: tuple[Device, ...] = ()

    @property
    def devices(self) -> tuple[Device, ...]:
        """Return the GPUs in order, then the host."""
        return (*self.gpus, self.host)

    @classmethod
    def cpu_only(cls, ram_bytes: int | None = None, cpu_flags: tuple[str, ...] = ()) -> Hardware:
        """Return a machine with no GPU and ``ram_bytes`` of system memory."""
        return cls(host=Device("CPU", "host", ram_bytes, cpu_flags=cpu_flags))

    @classmethod
    def with_gpus(
        cls,
        gpu_bytes: list[int] | tuple[int, ...],
        ram_bytes: int | None = None,
        cpu_flags: tuple[str, ...] = (),
    ) -> Hardware:
        """Return a machine with one GPU per entry of ``gpu_bytes`` (capacity in bytes).

        GPUs are named as llama.cpp's CUDA backend names them (CUDA0, CUDA1, …).
        """
        gpus = tuple(Device(f"CUDA{i}", "gpu", b) for i, b in enumerate(gpu_bytes))
        return cls(host=Device("CPU", "host", ram_bytes, cpu_flags=cpu_flags), gpus=gpus)


_INTERESTING_FLAGS = (
    "avx",
    "avx2",
    "avx512f",
    "avx512bw",
    "avx512vnni",
    "f16c",
    "fma",
    "neon",
    "dotprod",
    "i8mm",
    "sve",
)


def local_cpu_flags() -> tuple[str, ...]:
    """Return the ISA features of this machine's CPU that matter to llama.cpp.

    Linux: the ``flags``/``Features`` lines of /proc/cpuinfo; macOS on Apple Silicon:
    NEON, dot product and (M2 and later) i8mm via sysctl. Unknown elsewhere (empty).
    """
    import platform
    import subprocess

    machine = platform.machine().lower()
    found: set[str] = set()
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                key, _, value = line.partition(":")
                if key.strip() in ("flags", "Features"):
                    found.update(value.split())
                    break
    except OSError:
        pass
    if machine in ("arm64", "aarch64"):
        found.add("neon")
        if "asimddp" in found:
            found.add("dotprod")
        if platform.system() == "Darwin":
            found.add("dotprod")
            try:
                out = subprocess.run(
                    ["sysctl", "-n", "hw.optional.arm.FEAT_I8MM"],
                    capture_output=True,
                    text=True,
                    timeout=2,
                    check=False,
                )
                if out.stdout.strip() == "1":
                    found.add("i8mm")
            except (OSError, subprocess.SubprocessError):
                pass
    return tuple(f for f in _INTERESTING_FLAGS if f in found)


def local_hardware() -> Hardware:
    """Return this machine as far as the core can see it without GPU libraries: the host.

    RAM comes from psutil (available memory as free); GPUs are added by the hardware
    probes (issue: hardware) and by ``--gpu-mem`` in the CLI.
    """
    import psutil

    vm = psutil.virtual_memory()
    host = Device("CPU", "host", int(vm.total), int(vm.available), cpu_flags=local_cpu_flags())
    return Hardware(host=host)
