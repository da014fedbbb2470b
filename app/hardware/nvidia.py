"""The NVIDIA probe: every GPU NVML sees (nvidia-ml-py, imported here only).

Memory, bus width × max memory clock → bandwidth, compute capability, driver and CUDA
version, MIG mode, and the processes holding memory.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import Any, Final

from app.hardware.report import (
    GpuInfo,
    GpuProcess,
    ProbeUnavailable,
)

NVML_LIBRARY: Final = "libnvidia-ml.so.1"
"""The library nvidia-ml-py loads outside Windows (pynvml.py, ``_LoadNvmlLibrary``)."""


def _nvml_library_missing() -> bool:
    """Whether NVML's library cannot load here, so nvmlInit would fail with
    NVML_ERROR_LIBRARY_NOT_FOUND: known in ~0.1 ms, without pynvml's ~10 ms of import."""
    if sys.platform.startswith("win"):
        return False  # pynvml looks in two places there: let it
    import ctypes  # only for this check; pynvml imports it anyway

    try:
        ctypes.CDLL(NVML_LIBRARY)
    except OSError:
        return True
    return False


def nvml_bandwidth_gb_per_s(bus_width_bits: int, max_memory_clock_mhz: int) -> float:
    """Return the theoretical memory bandwidth from NVML's bus width and max memory clock.

    GDDR and HBM move data on both clock edges, so bytes per second = bus width / 8 ×
    clock × 2 (RTX 3090: 384 bit × 9751 MHz → 936 GB/s; H100 SXM: 5120 × 2619 → 3352).
    """
    assert bus_width_bits > 0, f"bus width must be > 0, got {bus_width_bits}"
    assert max_memory_clock_mhz > 0, f"clock must be > 0, got {max_memory_clock_mhz}"
    return bus_width_bits / 8 * max_memory_clock_mhz * 1e6 * 2 / 1e9


def _cuda_version(v: int) -> str:
    # nvmlSystemGetCudaDriverVersion: 1000 × major + 10 × minor (12040 → 12.4)
    return f"{v // 1000}.{v % 1000 // 10}"


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


def probe_nvidia() -> tuple[GpuInfo, ...]:
    """Return every GPU NVML sees, in NVML's (PCI bus) order; raise when NVML cannot run.

    Each field is read on its own: one NVML call that is not supported leaves that field
    unknown and adds a note, the rest is still read.
    """
    if _nvml_library_missing():  # what nvmlInit says then, without importing pynvml
        if importlib.util.find_spec("pynvml") is None:
            raise ProbeUnavailable("nvidia-ml-py (pynvml) is not installed")
        raise ProbeUnavailable("NVML: NVML Shared Library Not Found")
    try:
        nvml: Any = importlib.import_module("pynvml")
    except ImportError:
        raise ProbeUnavailable("nvidia-ml-py (pynvml) is not installed") from None
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as err:
        raise ProbeUnavailable(f"NVML: {err}") from None
    except OSError as err:  # a broken libnvidia-ml
        raise ProbeUnavailable(f"NVML: {err}") from None
    try:
        return _nvidia_devices(nvml)
    finally:
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()


class _NvmlReader:
    """Call NVML functions one by one; a failed call gives ``None`` and a note."""

    def __init__(self, nvml: Any, notes: Sequence[str] = ()) -> None:
        self.nvml = nvml
        self.notes = list(notes)

    def __call__(self, what: str, fn: Callable[..., Any], *args: Any) -> Any:
        try:
            return fn(*args)
        except self.nvml.NVMLError as err:
            self.notes.append(f"{what}: {err}")
            return None


def _nvidia_devices(nvml: Any) -> tuple[GpuInfo, ...]:
    read = _NvmlReader(nvml)
    driver = read("driver version", nvml.nvmlSystemGetDriverVersion)
    cuda = read("CUDA version", nvml.nvmlSystemGetCudaDriverVersion_v2)
    try:
        count = int(nvml.nvmlDeviceGetCount())
    except nvml.NVMLError as err:
        raise ProbeUnavailable(f"NVML: {err}") from None
    gpus = [
        _nvidia_device(
            nvml,
            i,
            None if driver is None else _text(driver),
            None if cuda is None else _cuda_version(int(cuda)),
            read.notes,
        )
        for i in range(count)
    ]
    if len(gpus) > 1:
        # NVML counts in PCI bus order, CUDA fastest first unless CUDA_DEVICE_ORDER=PCI_BUS_ID
        # (and CUDA_VISIBLE_DEVICES may hide or reorder): llama.cpp's own list decides.
        gpus = [
            replace(g, notes=(*g.notes, "CUDA may number the GPUs differently from NVML"))
            for g in gpus
        ]
    return tuple(gpus)


def _nvidia_device(
    nvml: Any, i: int, driver: str | None, cuda: str | None, notes: Sequence[str]
) -> GpuInfo:
    read = _NvmlReader(nvml, notes)
    h = read("handle", nvml.nvmlDeviceGetHandleByIndex, i)
    if h is None:
        return GpuInfo("nvidia", i, f"CUDA{i}", f"NVIDIA GPU {i}", notes=tuple(read.notes))
    name = read("name", nvml.nvmlDeviceGetName, h)
    mem = read("memory", nvml.nvmlDeviceGetMemoryInfo, h)
    bus = read("memory bus width", nvml.nvmlDeviceGetMemoryBusWidth, h)
    clock = read("max memory clock", nvml.nvmlDeviceGetMaxClockInfo, h, nvml.NVML_CLOCK_MEM)
    cc = read("compute capability", nvml.nvmlDeviceGetCudaComputeCapability, h)
    mig = read("MIG mode", nvml.nvmlDeviceGetMigMode, h)
    pci = read("PCI ids", nvml.nvmlDeviceGetPciInfo, h)
    procs: dict[int, GpuProcess] = {}
    for kind, fn in (
        ("compute", nvml.nvmlDeviceGetComputeRunningProcesses),
        ("graphics", nvml.nvmlDeviceGetGraphicsRunningProcesses),
    ):
        for p in read(f"{kind} processes", fn, h) or []:
            used = getattr(p, "usedGpuMemory", None)
            procs[int(p.pid)] = GpuProcess(
                int(p.pid), int(used) if isinstance(used, int) else None, _process_name(p.pid)
            )
    bandwidth = None
    bw_source = ""
    if bus and clock:
        bandwidth = nvml_bandwidth_gb_per_s(int(bus), int(clock))
        bw_source = f"NVML: {bus}-bit bus × {clock} MHz max memory clock × 2"
    pci_id = None
    if pci is not None:
        dev_id = int(pci.pciDeviceId)  # device id in the high 16 bits, vendor in the low
        pci_id = f"{dev_id & 0xFFFF:04x}:{dev_id >> 16:04x}"
    return GpuInfo(
        vendor="nvidia",
        index=i,
        engine_name=f"CUDA{i}",
        name=_text(name) if name is not None else f"NVIDIA GPU {i}",
        total_bytes=int(mem.total) if mem is not None else None,
        free_bytes=int(mem.free) if mem is not None else None,
        used_bytes=int(mem.used) if mem is not None else None,
        bandwidth_gb_per_s=bandwidth,
        bandwidth_source=bw_source,
        bus_width_bits=int(bus) if bus else None,
        max_memory_clock_mhz=int(clock) if clock else None,
        compute_capability=f"{cc[0]}.{cc[1]}" if cc is not None else None,
        driver_version=driver,
        cuda_version=cuda,
        mig_enabled=bool(mig[0] == nvml.NVML_DEVICE_MIG_ENABLE) if mig else None,
        processes=tuple(procs.values()),
        pci_id=pci_id,
        notes=tuple(read.notes),
    )


def _process_name(pid: int) -> str | None:
    import psutil

    try:
        return str(psutil.Process(pid).name())
    except (psutil.Error, OSError):
        return None
