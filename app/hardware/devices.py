"""Devices a model can be placed on: GPUs and the host, with capacity and bandwidth.

This is the minimal description the estimator needs; detection and profiles build on it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from app.hardware.kernels import KernelRates

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
    int8_tops: float | None = None
    """Peak dense INT8 tensor throughput, TOPS: what llama.cpp's MMQ kernels run on for
    quantized weights on NVIDIA GPUs (Turing and later); ``None``: unknown."""
    memory_bytes: int | None = None
    """Physical memory before the usable fraction (``capacity_bytes`` is what a model may
    use: e.g. the Metal working set of a Mac's unified memory); ``None``: as capacity."""
    description: str = ""
    """What the device is, in words ("NVIDIA GeForce RTX 3090", "Apple M2 Max")."""
    lent_cpu: bool = False
    """An RPC device that is another machine's CPU and RAM (``ggml-rpc-server`` offers its
    CPU when the machine has no GPU): llama.cpp places layers on it as on a GPU, but it
    runs at CPU speed."""
    kernels: KernelRates | None = None
    """For the host: what llama.cpp's CPU kernels cost here, measured
    (:mod:`app.hardware.kernels`); the speed model prices the CPU's work with them."""

    @property
    def buffer_name(self) -> str:
        """Return the name llama.cpp gives this device's buffer type (``-ot PATTERN=NAME``).

        A GPU's is its name (``CUDA1``); an RPC device's is ``RPC<n>[host:port]``
        (``ggml-rpc.cpp`` ``ggml_backend_rpc_buffer_type``), ``n`` its index on its server
        (0 for a server with one device), the endpoint kept in the description.
        """
        if self.name.startswith("RPC") and ":" in self.description:
            return f"RPC0[{self.description}]"
        return self.name


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
        gpus = tuple(planned_gpu(i, b) for i, b in enumerate(gpu_bytes))
        return cls(host=planned_host(ram_bytes, cpu_flags), gpus=gpus)


# --- machines the user describes by size ---------------------------------------------


def planned_gpu(index: int, capacity_bytes: int) -> Device:
    """Return a GPU the user gave by its size: ``CUDA<index>``, all of it for the model.

    A planned device has nothing known in use: its free memory is unknown (``None``), so
    the estimate and the planner take its capacity, as for every machine not probed.
    """
    return Device(f"CUDA{index}", "gpu", capacity_bytes, memory_bytes=capacity_bytes)


def planned_host(ram_bytes: int | None, cpu_flags: tuple[str, ...] = ()) -> Device:
    """Return system RAM the user gave by its size (free unknown, as :func:`planned_gpu`)."""
    return Device("CPU", "host", ram_bytes, memory_bytes=ram_bytes, cpu_flags=cpu_flags)


def planned_hardware(
    base: Hardware,
    *,
    gpu_bytes: Sequence[int] | None = None,
    ram_bytes: int | None = None,
) -> Hardware:
    """Return ``base`` with the GPUs and/or the system RAM the user planned instead.

    ``gpu_bytes`` (one size per GPU) replaces all of ``base``'s GPUs, ``ram_bytes`` its
    host (keeping the CPU's ISA flags: they decide llama.cpp's CPU repack buffers); what is
    not given stays as ``base`` has it. ``ggtune estimate --gpu-mem/--ram``, the desktop's
    "Plan GPUs" and a composition's bare "64 GB" all build their machines here.
    """
    host = base.host if ram_bytes is None else planned_host(ram_bytes, base.host.cpu_flags)
    gpus = (
        base.gpus
        if gpu_bytes is None
        else tuple(planned_gpu(i, b) for i, b in enumerate(gpu_bytes))
    )
    return Hardware(host=host, gpus=gpus)
