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
    fp16_tflops: float | None = None
    """Peak dense FP16 matrix throughput (prompt processing is bound by it), TFLOPS."""
    memory_bytes: int | None = None
    """Physical memory before the usable fraction (``capacity_bytes`` is what a model may
    use: e.g. the Metal working set of a Mac's unified memory); ``None``: as capacity."""
    description: str = ""
    """What the device is, in words ("NVIDIA GeForce RTX 3090", "Apple M2 Max")."""


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


def local_cpu_flags() -> tuple[str, ...]:
    """Return the ISA features of this machine's CPU that matter to llama.cpp.

    Linux: the ``flags``/``Features`` lines of /proc/cpuinfo; macOS on Apple Silicon:
    NEON, dot product and (M2 and later) i8mm via sysctl. Unknown elsewhere (empty).
    See :func:`app.hardware_probe.host_cpu_flags`.
    """
    from app.hardware_probe import host_cpu_flags

    return host_cpu_flags()


def local_hardware(*, measure_bandwidth: bool = False) -> Hardware:
    """Return this machine as the hardware probes see it: the host and its GPUs.

    The host's RAM comes from psutil (available memory as free); NVIDIA GPUs from NVML,
    AMD GPUs from sysfs (Linux), a Mac's GPU from sysctl, with the share of unified memory
    Metal lets the GPU wire as its capacity. A probe that fails leaves its devices out;
    :func:`app.hardware_probe.detect` says why. The host's bandwidth is the cached
    measurement (``measure_bandwidth=True`` measures it, ≤ 2 s, when none is cached).
    """
    from app.hardware_probe import detect

    return detect(measure_bandwidth=measure_bandwidth).to_hardware()
