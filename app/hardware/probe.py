"""Detect this machine's CPU, memory and GPUs; every probe on its own, none can crash or hang.

:func:`detect` runs the probes and returns a :class:`HardwareReport`: what was found, and
for every probe that found nothing or failed, why (``"unknown: NVML Shared Library Not
Found"``). :meth:`HardwareReport.to_hardware` turns it into the estimator's
:class:`~app.hardware.devices.Hardware`.

The probes, each usable alone and each pointed at its source so tests can build one:

* :func:`probe_host`: CPU model, cores, ISA flags (``/proc/cpuinfo`` or sysctl), RAM and
  swap (psutil);
* :func:`probe_nvidia`: every GPU NVML sees (nvidia-ml-py, imported here only): memory,
  bus width × max memory clock → bandwidth, compute capability, driver and CUDA version,
  MIG mode, the processes holding memory;
* :func:`probe_apple`: a Mac's chip, unified memory and GPU cores (``sysctl``, ``ioreg``),
  and the share Metal lets the GPU wire (``iogpu.wired_limit_mb``, else Metal's default);
* :func:`probe_drm`: GPUs the Linux kernel's DRM drivers expose under ``/sys/class/drm``;
  AMD cards (amdgpu) report their VRAM there, the others are listed with unknown memory;
* :func:`host_bandwidth`: the host's memory bandwidth, measured once (≤ 2 s, a numpy copy)
  and cached per machine.

Example::

    report = detect()
    report.host.ram_total_bytes          # 25769803776
    [str(s) for s in report.statuses]    # ["host: ok: …", "nvidia: unknown: NVML …", …]
    hardware = report.to_hardware()      # CPU (+ CUDA0 …, MTL0, ROCm0 …)
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import json
import os
import platform
import re
import subprocess
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any, Final, Literal, TypeVar

from app.errors import StateFileError
from app.hardware.devices import Device, Hardware
from app.state_files import load_json
from app.units import GIB, MIB

if TYPE_CHECKING:
    from app.hardware.profiles import ProfileSet

T = TypeVar("T")


PROBE_TIMEOUT_S: Final = 10.0
"""The longest any one probe may take before it is reported as timed out."""

COMMAND_TIMEOUT_S: Final = 3.0
"""The longest one external command (``sysctl``, ``ioreg``) may take."""

BANDWIDTH_SECONDS: Final = 1.6
"""Time the bandwidth benchmark may take in all, allocating the arrays included (≤ 2 s)."""

BANDWIDTH_ARRAY_BYTES: Final = 256 * MIB
"""Size of the array the benchmark copies: far larger than any CPU cache."""

LLAMA_CPU_FLAGS: Final = (
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
"""ISA features that change which kernels and repacked buffers llama.cpp's CPU backend uses."""

VENDOR_AMD: Final = 0x1002
VENDOR_NVIDIA: Final = 0x10DE
VENDOR_INTEL: Final = 0x8086
_VENDORS: Final = {VENDOR_AMD: "amd", VENDOR_NVIDIA: "nvidia", VENDOR_INTEL: "intel"}

PCI_IDS_PATHS: Final = ("usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids")
"""Where Linux distributions keep the PCI ID database (relative to the root)."""

Vendor = Literal["nvidia", "amd", "apple", "intel", "other"]
ProbeState = Literal["ok", "none", "unknown"]

CommandRunner = Callable[[Sequence[str], float], str]
"""Run ``argv`` with a time limit in seconds and return its stdout; raise
:class:`ProbeUnavailable` when it cannot run, fails or times out."""


class ProbeUnavailable(Exception):
    """A probe cannot see what it looks for; ``str()`` is the reason, in plain words."""


# --- results --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class ProbeStatus:
    """What one probe did: ``ok`` (found something), ``none`` (nothing to find here, e.g.
    NVML on a Mac) or ``unknown`` (it failed; ``detail`` is the reason)."""

    probe: str
    state: ProbeState
    detail: str

    def __str__(self) -> str:
        return f"{self.probe}: {self.state}: {self.detail}"


@dataclass(frozen=True, slots=True)
class HostInfo:
    """The host: CPU and system memory. Bytes; ``None`` is unknown."""

    system: str
    machine: str
    cpu_model: str | None
    physical_cores: int | None
    logical_cores: int | None
    cpu_flags: tuple[str, ...]
    ram_total_bytes: int | None
    ram_available_bytes: int | None
    swap_total_bytes: int | None
    swap_free_bytes: int | None


@dataclass(frozen=True, slots=True)
class GpuProcess:
    """A process holding GPU memory (NVML); ``used_bytes`` ``None`` when NVML hides it."""

    pid: int
    used_bytes: int | None
    name: str | None


@dataclass(frozen=True, slots=True)
class GpuInfo:
    """One GPU as a probe saw it. Bytes, GB/s; ``None`` is unknown.

    ``engine_name`` is the name llama.cpp's backend gives it (CUDA0, ROCm0, MTL0), ``""``
    when no backend is known to use it. ``usable_bytes`` is what a model may use when it
    is less than ``total_bytes`` (a Mac's Metal working set).
    """

    vendor: Vendor
    index: int
    engine_name: str
    name: str
    total_bytes: int | None = None
    free_bytes: int | None = None
    used_bytes: int | None = None
    usable_bytes: int | None = None
    usable_source: str = ""
    bandwidth_gb_per_s: float | None = None
    bandwidth_source: str = ""
    fp16_tflops: float | None = None
    bus_width_bits: int | None = None
    max_memory_clock_mhz: int | None = None
    compute_capability: str | None = None
    driver_version: str | None = None
    cuda_version: str | None = None
    mig_enabled: bool | None = None
    processes: tuple[GpuProcess, ...] = ()
    pci_id: str | None = None
    unified_memory: bool = False
    gpu_cores: int | None = None
    notes: tuple[str, ...] = ()

    @property
    def capacity_bytes(self) -> int | None:
        """Return what a model may use: the usable share, else all memory."""
        return self.usable_bytes if self.usable_bytes is not None else self.total_bytes


@dataclass(frozen=True, slots=True)
class BandwidthMeasurement:
    """The host's memory bandwidth by a multi-threaded numpy copy (STREAM "copy": bytes
    read + written per second), the best of ``runs`` rounds."""

    gb_per_s: float
    array_bytes: int
    runs: int
    threads: int
    measured_at: str
    machine_key: str
    cached: bool = False


@dataclass(frozen=True, slots=True)
class DrmCard:
    """One ``/sys/class/drm/cardN`` device. VRAM in bytes (amdgpu only); ``None`` unknown."""

    card: str
    vendor_id: int
    device_id: int
    name: str
    driver: str | None
    vram_total_bytes: int | None
    vram_used_bytes: int | None
    gtt_total_bytes: int | None

    @property
    def pci_id(self) -> str:
        """Return ``vendor:device`` in hex, as lspci prints it."""
        return f"{self.vendor_id:04x}:{self.device_id:04x}"


@dataclass(frozen=True, slots=True)
class HardwareReport:
    """Everything :func:`detect` found, and what it could not find with the reasons."""

    host: HostInfo | None
    gpus: tuple[GpuInfo, ...]
    host_bandwidth: BandwidthMeasurement | None
    statuses: tuple[ProbeStatus, ...]

    def status(self, probe: str) -> ProbeStatus:
        """Return the status of one probe by name (``host``, ``nvidia``, ``apple``…)."""
        return next(s for s in self.statuses if s.probe == probe)

    def to_hardware(self) -> Hardware:
        """Return the estimator's view: the host, then the GPUs whose memory is known.

        GPUs whose memory is unknown are left out (the estimator could only guess), as are
        those no llama.cpp backend is known to use; the report still lists them.
        """
        h = self.host
        unified = any(g.unified_memory for g in self.gpus)
        host = Device(
            "CPU",
            "host",
            h.ram_total_bytes if h else None,
            h.ram_available_bytes if h else None,
            self.host_bandwidth.gb_per_s if self.host_bandwidth else None,
            unified_memory=unified,
            cpu_flags=h.cpu_flags if h else (),
            memory_bytes=h.ram_total_bytes if h else None,
            description=(h.cpu_model or "") if h else "",
        )
        gpus = tuple(
            Device(
                g.engine_name,
                "gpu",
                g.capacity_bytes,
                g.free_bytes,
                g.bandwidth_gb_per_s,
                unified_memory=g.unified_memory,
                fp16_tflops=g.fp16_tflops,
                memory_bytes=g.total_bytes,
                description=g.name,
            )
            for g in self.gpus
            if g.capacity_bytes is not None and g.engine_name
        )
        return Hardware(host=host, gpus=gpus)

    def to_dict(self) -> dict[str, Any]:
        """Return the report as plain data (what ``ggtune hw --json`` prints)."""
        return {
            "host": None if self.host is None else asdict(self.host),
            "host_bandwidth": None if self.host_bandwidth is None else asdict(self.host_bandwidth),
            "gpus": [asdict(g) for g in self.gpus],
            "probes": [asdict(s) for s in self.statuses],
        }


# --- helpers --------------------------------------------------------------------------


def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """Run ``argv`` and return its stdout (see :data:`CommandRunner`)."""
    assert argv, "no command"
    try:
        out = subprocess.run(
            list(argv), capture_output=True, text=True, timeout=timeout_s, check=False
        )
    except FileNotFoundError:
        raise ProbeUnavailable(f"{argv[0]} not found") from None
    except subprocess.TimeoutExpired:
        raise ProbeUnavailable(f"{argv[0]} took longer than {timeout_s:g} s") from None
    except OSError as err:
        raise ProbeUnavailable(f"{argv[0]}: {err.strerror or err}") from None
    if out.returncode != 0:
        why = out.stderr.strip().splitlines()[-1] if out.stderr.strip() else ""
        raise ProbeUnavailable(
            f"{' '.join(argv)} failed" + (f": {why}" if why else f" (exit {out.returncode})")
        )
    return out.stdout


def with_timeout(fn: Callable[[], T], timeout_s: float, what: str) -> T:
    """Return ``fn()`` run in a daemon thread; raise :class:`ProbeUnavailable` past the limit.

    A native call that hangs (a driver in a bad state) cannot be interrupted, but the
    caller goes on and the thread dies with the process.
    """
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller below
            box["error"] = exc

    thread = threading.Thread(target=target, name=f"ggtune-probe-{what}", daemon=True)
    thread.start()
    thread.join(timeout_s)
    if thread.is_alive():
        raise ProbeUnavailable(f"{what} took longer than {timeout_s:g} s")
    if "error" in box:
        raise box["error"]
    value: T = box["value"]
    return value


def _read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def _read_int(path: Path) -> int | None:
    text = _read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None


# --- host -----------------------------------------------------------------------------


def parse_cpuinfo(text: str, machine: str) -> tuple[str | None, tuple[str, ...]]:
    """Return (CPU model, llama.cpp-relevant flags) from ``/proc/cpuinfo`` text.

    x86 lists ``model name`` and ``flags``; ARM lists ``Features`` (``asimd`` is NEON,
    ``asimddp`` dot product, ``i8mm``, ``sve``) and sometimes ``Model``/``Hardware``.
    """
    model: str | None = None
    found: set[str] = set()
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key = key.strip()
        if key in ("model name", "Model", "Hardware") and model is None:
            model = " ".join(value.split()) or None
        elif key in ("flags", "Features") and not found:
            found.update(value.split())
    if machine.lower() in ("arm64", "aarch64"):
        found.add("neon")
        if "asimddp" in found:
            found.add("dotprod")
    return model, tuple(f for f in LLAMA_CPU_FLAGS if f in found)


def _sysctl(run: CommandRunner, name: str) -> str | None:
    try:
        value = run(["sysctl", "-n", name], COMMAND_TIMEOUT_S).strip()
    except ProbeUnavailable:
        return None
    return value or None


def host_cpu_flags(
    *,
    cpuinfo_path: str | os.PathLike[str] = "/proc/cpuinfo",
    run: CommandRunner = run_command,
    system: str | None = None,
    machine: str | None = None,
) -> tuple[str, ...]:
    """Return the CPU's ISA features that matter to llama.cpp (empty when unknown)."""
    system = system or platform.system()
    machine = (machine or platform.machine()).lower()
    text = _read_text(Path(cpuinfo_path)) or ""
    _, flags = parse_cpuinfo(text, machine)
    if system == "Darwin" and machine in ("arm64", "aarch64"):
        extra = {"neon", "dotprod"}  # every Apple Silicon core (ARMv8.4+)
        if _sysctl(run, "hw.optional.arm.FEAT_I8MM") == "1":
            extra.add("i8mm")
        flags = tuple(f for f in LLAMA_CPU_FLAGS if f in extra or f in flags)
    return flags


def probe_host(
    *,
    cpuinfo_path: str | os.PathLike[str] = "/proc/cpuinfo",
    run: CommandRunner = run_command,
    system: str | None = None,
    machine: str | None = None,
) -> HostInfo:
    """Return the CPU and system memory (psutil; ``/proc/cpuinfo`` or sysctl for the CPU)."""
    import psutil

    system = system or platform.system()
    machine = machine or platform.machine()
    model, _ = parse_cpuinfo(_read_text(Path(cpuinfo_path)) or "", machine)
    if system == "Darwin":
        model = _sysctl(run, "machdep.cpu.brand_string") or model
    if model is None:
        model = platform.processor() or None
    vm = psutil.virtual_memory()
    swap_total: int | None = None
    swap_free: int | None = None
    try:
        swap = psutil.swap_memory()
        swap_total, swap_free = int(swap.total), int(swap.free)
    except (OSError, RuntimeError):
        pass
    return HostInfo(
        system=system,
        machine=machine,
        cpu_model=model,
        physical_cores=psutil.cpu_count(logical=False),
        logical_cores=psutil.cpu_count(logical=True),
        cpu_flags=host_cpu_flags(
            cpuinfo_path=cpuinfo_path, run=run, system=system, machine=machine
        ),
        ram_total_bytes=int(vm.total),
        ram_available_bytes=int(vm.available),
        swap_total_bytes=swap_total,
        swap_free_bytes=swap_free,
    )


# --- NVIDIA ---------------------------------------------------------------------------


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


# --- Apple ----------------------------------------------------------------------------


def parse_gpu_core_count(ioreg_output: str) -> int | None:
    """Return ``gpu-core-count`` from ``ioreg -rc AGXAccelerator -d 1`` output."""
    m = re.search(r'"gpu-core-count"\s*=\s*(\d+)', ioreg_output)
    return int(m.group(1)) if m else None


def probe_apple(
    run: CommandRunner = run_command, *, profiles: ProfileSet | None = None
) -> tuple[GpuInfo, int]:
    """Return a Mac's GPU (as llama.cpp's MTL0) and its unified memory in bytes.

    ``sysctl -n machdep.cpu.brand_string`` names the chip ("Apple M2 Max"),
    ``hw.memsize`` is the memory; the GPU may wire ``iogpu.wired_limit_mb`` MiB when that
    is set (macOS 14 and later; ``debug.iogpu.wired_limit`` in bytes before), otherwise
    Metal's default (:func:`app.hardware.profiles.metal_default_working_set_bytes`).
    Bandwidth and FP16 rate come from the chip's profile; GPU cores from ``ioreg``.
    """
    from app.hardware.profiles import (
        METAL_SMALL_MEMORY_BYTES,
        apple_profile,
        metal_default_working_set_bytes,
    )

    chip = _sysctl(run, "machdep.cpu.brand_string")
    if chip is None or not chip.startswith("Apple"):
        raise ProbeUnavailable(f"not Apple Silicon (CPU: {chip or 'unknown'})")
    memsize_text = _sysctl(run, "hw.memsize")
    if memsize_text is None or not memsize_text.isdigit():
        raise ProbeUnavailable(f"sysctl hw.memsize gave {memsize_text!r}")
    memsize = int(memsize_text)
    notes: list[str] = []
    usable: int
    limit_mb = _sysctl(run, "iogpu.wired_limit_mb")
    legacy = None if limit_mb is not None else _sysctl(run, "debug.iogpu.wired_limit")
    if limit_mb is not None and limit_mb.isdigit() and int(limit_mb) > 0:
        usable = min(int(limit_mb) * MIB, memsize)
        usable_source = f"sysctl iogpu.wired_limit_mb = {limit_mb}"
    elif legacy is not None and legacy.isdigit() and int(legacy) > 0:
        usable = min(int(legacy), memsize)
        usable_source = f"sysctl debug.iogpu.wired_limit = {legacy}"
    else:
        usable = metal_default_working_set_bytes(memsize)
        share = "2/3" if memsize <= METAL_SMALL_MEMORY_BYTES else "3/4"
        usable_source = (
            f"Metal's default working set: {share} of memory (iogpu.wired_limit_mb unset)"
        )
    cores: int | None = None
    try:
        cores = parse_gpu_core_count(
            run(["ioreg", "-rc", "AGXAccelerator", "-d", "1"], COMMAND_TIMEOUT_S)
        )
    except ProbeUnavailable as err:
        notes.append(f"GPU cores: {err}")
    bandwidth = fp16 = None
    bw_source = ""
    if profiles is None:
        from app.hardware.profiles import load_profiles

        profiles = load_profiles(include_user=False)
    prof = apple_profile(profiles, chip, cores)
    if prof is not None:
        bandwidth, fp16 = prof.bandwidth_gb_per_s.value, prof.fp16_tflops.value
        bw_source = f"profile {prof.id}"
    else:
        notes.append(f"no profile for {chip}: bandwidth unknown")
    gpu = GpuInfo(
        vendor="apple",
        index=0,
        engine_name="MTL0",
        name=chip,
        total_bytes=memsize,
        usable_bytes=usable,
        usable_source=usable_source,
        bandwidth_gb_per_s=bandwidth,
        bandwidth_source=bw_source,
        fp16_tflops=fp16,
        unified_memory=True,
        gpu_cores=cores,
        notes=tuple(notes),
    )
    return gpu, memsize


# --- Linux DRM (AMD and the rest) -----------------------------------------------------


def pci_device_name(root: Path, vendor_id: int, device_id: int) -> str | None:
    """Return the device's name from the PCI ID database (``pci.ids``) under ``root``."""
    for rel in PCI_IDS_PATHS:
        path = root / rel
        try:
            f = path.open(encoding="utf-8", errors="replace")
        except OSError:
            continue
        with f:
            in_vendor = False
            vendor_name = ""
            for line in f:
                if not line.strip() or line.startswith("#"):
                    continue
                if not line[0].isspace():
                    if line.startswith("C "):  # device classes follow the vendors
                        break
                    in_vendor = line[:4].lower() == f"{vendor_id:04x}"
                    vendor_name = line[4:].strip() if in_vendor else ""
                elif (
                    in_vendor
                    and not line.startswith("\t\t")
                    and line[1:5].lower() == f"{device_id:04x}"
                ):
                    return f"{vendor_name} {line[5:].strip()}".strip()
    return None


def probe_drm(root: str | os.PathLike[str] = "/") -> tuple[DrmCard, ...]:
    """Return the GPUs under ``root``/sys/class/drm, sorted by card number.

    Reads ``device/vendor`` and ``device/device`` (hex ids), amdgpu's
    ``device/mem_info_vram_total``, ``mem_info_vram_used`` and ``mem_info_gtt_total``
    (bytes, decimal), ``device/product_name`` when the board has one, else the name from
    ``pci.ids``; ``device/driver`` is a link to the driver's folder.
    """
    base = Path(root)
    drm = base / "sys" / "class" / "drm"
    if not drm.is_dir():
        raise ProbeUnavailable(
            f"{drm} does not exist (no DRM driver loaded, or a container without /sys)"
        )
    try:
        entries = sorted(
            (e for e in drm.iterdir() if re.fullmatch(r"card\d+", e.name)),
            key=lambda e: int(e.name[4:]),
        )
    except OSError as err:
        raise ProbeUnavailable(f"cannot list {drm}: {err.strerror or err}") from None
    cards: list[DrmCard] = []
    for entry in entries:
        dev = entry / "device"
        vendor, device = _read_int(dev / "vendor"), _read_int(dev / "device")
        if vendor is None or device is None:
            continue
        driver = None
        with contextlib.suppress(OSError):
            driver = os.path.basename(os.readlink(dev / "driver"))
        name = (
            _read_text(dev / "product_name")
            or pci_device_name(base, vendor, device)
            or f"PCI device {vendor:04x}:{device:04x}"
        )
        cards.append(
            DrmCard(
                card=entry.name,
                vendor_id=vendor,
                device_id=device,
                name=name,
                driver=driver,
                vram_total_bytes=_read_int(dev / "mem_info_vram_total"),
                vram_used_bytes=_read_int(dev / "mem_info_vram_used"),
                gtt_total_bytes=_read_int(dev / "mem_info_gtt_total"),
            )
        )
    return tuple(cards)


def drm_gpus(cards: Sequence[DrmCard], *, skip_nvidia: bool) -> tuple[GpuInfo, ...]:
    """Return GpuInfo for DRM cards: AMD with VRAM as ROCm0…; the rest with unknown memory.

    ``skip_nvidia``: NVML already reported the NVIDIA cards.
    """
    gpus: list[GpuInfo] = []
    n_amd = 0
    for c in cards:
        vendor: Vendor = _VENDORS.get(c.vendor_id, "other")  # type: ignore[assignment]
        if vendor == "nvidia" and skip_nvidia:
            continue
        if vendor == "amd" and c.vram_total_bytes is not None:
            used = c.vram_used_bytes
            notes: tuple[str, ...] = ()
            if c.vram_total_bytes < 2 * GIB and c.gtt_total_bytes:
                notes = (
                    "integrated GPU: VRAM is a small carve-out; GTT (system memory the GPU "
                    f"can map) is {c.gtt_total_bytes / GIB:.1f} GiB",
                )
            gpus.append(
                GpuInfo(
                    vendor="amd",
                    index=n_amd,
                    engine_name=f"ROCm{n_amd}",
                    name=c.name,
                    total_bytes=c.vram_total_bytes,
                    free_bytes=c.vram_total_bytes - used if used is not None else None,
                    used_bytes=used,
                    pci_id=c.pci_id,
                    notes=(
                        *notes,
                        "llama.cpp names it ROCm<n> in a HIP build, Vulkan<n> in a Vulkan build",
                    ),
                )
            )
            n_amd += 1
            continue
        why = {
            "nvidia": "an NVIDIA GPU NVML could not read",
            "amd": "amdgpu does not report its memory",
            "intel": "the Intel driver does not report its memory in sysfs",
        }.get(vendor, "its driver does not report its memory")
        gpus.append(
            GpuInfo(
                vendor=vendor,
                index=len(gpus),
                engine_name="",
                name=c.name,
                pci_id=c.pci_id,
                notes=(
                    f"present ({c.card}, driver {c.driver or 'unknown'}); memory unknown: {why}",
                ),
            )
        )
    return tuple(gpus)


# --- host bandwidth -------------------------------------------------------------------


def measure_host_bandwidth(
    *,
    seconds: float = BANDWIDTH_SECONDS,
    array_bytes: int | None = None,
    threads: int | None = None,
) -> tuple[float, int, int, int]:
    """Return (GB/s, array bytes, rounds, threads): the best round of copying a large array.

    Each round copies ``array_bytes`` with ``np.copyto`` split over ``threads`` threads
    (numpy releases the GIL for plain copies), counting bytes read + written, like STREAM's
    "copy". Rounds repeat until ``seconds`` after the start, allocation included (at least
    two rounds). The array shrinks on machines with little free memory (≤ 1/8 of what is
    available, ≥ 16 MiB).
    """
    from concurrent.futures import ThreadPoolExecutor

    import numpy as np
    import psutil

    deadline = time.perf_counter() + seconds

    if array_bytes is None:
        available = int(psutil.virtual_memory().available)
        array_bytes = max(16 * MIB, min(BANDWIDTH_ARRAY_BYTES, available // 8))
    threads = threads or psutil.cpu_count(logical=False) or os.cpu_count() or 1
    n = array_bytes // 8
    src = np.ones(n, dtype=np.float64)  # ones, not empty: every page is touched now
    dst = np.zeros(n, dtype=np.float64)
    dst[:] = 2.0
    bounds = [(n * k // threads, n * (k + 1) // threads) for k in range(threads)]

    def copy_slice(b: tuple[int, int]) -> None:
        np.copyto(dst[b[0] : b[1]], src[b[0] : b[1]])

    best = 0.0
    rounds = 0
    with ThreadPoolExecutor(max_workers=threads, thread_name_prefix="ggtune-bw") as pool:
        while rounds < 2 or time.perf_counter() < deadline:
            start = time.perf_counter()
            list(pool.map(copy_slice, bounds))
            elapsed = time.perf_counter() - start
            rounds += 1
            if elapsed > 0:
                best = max(best, 2 * n * 8 / elapsed / 1e9)
            if rounds >= 200:
                break
    return best, n * 8, rounds, threads


def machine_key(host: HostInfo | None) -> str:
    """Return a short key naming this machine for the cache (host name, CPU, RAM)."""
    parts = [platform.node(), platform.machine()]
    if host is not None:
        parts += [host.cpu_model or "", str(host.ram_total_bytes or "")]
    return hashlib.sha256("|".join(parts).encode()).hexdigest()[:16]


def _bandwidth_cache_file(cache_dir: Path | None) -> Path:
    if cache_dir is None:
        from app.paths import cache_dir as ggtune_cache_dir

        cache_dir = ggtune_cache_dir()
    return cache_dir / "hardware" / "host-bandwidth.json"


def _cached_bandwidth(entry: object) -> BandwidthMeasurement | None:
    """Return a cache entry as a measurement, or None when any field is not what
    :func:`host_bandwidth` writes (null, a string, a list, 1e308 GB/s): measure again."""
    if not isinstance(entry, dict):
        return None
    gb = entry.get("gb_per_s")
    array_bytes, runs, threads = (entry.get(k) for k in ("array_bytes", "runs", "threads"))
    measured_at, machine = entry.get("measured_at"), entry.get("machine_key")
    if (
        isinstance(gb, bool)
        or not isinstance(gb, int | float)
        or not 0 < gb < 100_000  # GB/s: HBM3e is ~5,000
        or not _positive_int(array_bytes)
        or not _positive_int(runs)
        or not _positive_int(threads)
        or not isinstance(measured_at, str)
        or not isinstance(machine, str)
    ):
        return None
    assert isinstance(array_bytes, int), "checked by _positive_int"
    assert isinstance(runs, int), "checked by _positive_int"
    assert isinstance(threads, int), "checked by _positive_int"
    return BandwidthMeasurement(
        float(gb), array_bytes, runs, threads, measured_at, machine, cached=True
    )


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def host_bandwidth(
    host: HostInfo | None,
    *,
    cache_dir: Path | None = None,
    measure: bool = True,
    refresh: bool = False,
) -> BandwidthMeasurement | None:
    """Return this machine's host memory bandwidth: cached, or measured now and cached.

    The cache is ``<user cache dir>/hardware/host-bandwidth.json``, one entry per machine
    (:func:`machine_key`). ``measure=False`` only reads the cache (``None`` when empty);
    ``refresh=True`` measures again. A cache that cannot be written is not an error.
    """
    path = _bandwidth_cache_file(cache_dir)
    key = machine_key(host)
    entries: dict[str, Any] = {}
    if os.path.lexists(path):
        try:
            data = load_json(path, max_bytes=1 << 20)
        except StateFileError:
            data = None  # measured again and written over: it is ggtune's own cache
        if isinstance(data, dict) and isinstance(data.get("machines"), dict):
            entries = data["machines"]
    entry = entries.get(key)
    if entry is not None and not refresh:
        cached = _cached_bandwidth(entry)
        if cached is not None:
            return cached
    if not measure:
        return None
    gb_per_s, nbytes, rounds, threads = measure_host_bandwidth()
    result = BandwidthMeasurement(
        gb_per_s=round(gb_per_s, 2),
        array_bytes=nbytes,
        runs=rounds,
        threads=threads,
        measured_at=time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        machine_key=key,
    )
    entries[key] = asdict(result)
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".host-bandwidth-", suffix=".json")
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump({"version": 1, "machines": entries}, f, indent=2)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    return result


# --- everything -----------------------------------------------------------------------


@dataclass
class _Collect:
    statuses: list[ProbeStatus] = field(default_factory=list)

    def run(self, probe: str, fn: Callable[[], T], timeout_s: float) -> T | None:
        try:
            return with_timeout(fn, timeout_s, probe)
        except ProbeUnavailable as err:
            self.statuses.append(ProbeStatus(probe, "unknown", str(err)))
        except Exception as err:  # a probe must never take the app down
            self.statuses.append(ProbeStatus(probe, "unknown", f"{type(err).__name__}: {err}"))
        return None


def _lacks_figures(gpu: GpuInfo) -> bool:
    """Whether a profile of ``gpu``'s name could fill a figure its probe did not find."""
    missing = gpu.bandwidth_gb_per_s is None or gpu.fp16_tflops is None
    return missing and gpu.vendor in ("nvidia", "amd", "intel")


def _with_profile_figures(
    gpus: tuple[GpuInfo, ...], profiles: ProfileSet | None
) -> tuple[GpuInfo, ...]:
    """Fill bandwidth and FP16 rate from a profile of the same name where a probe lacks them."""
    out = []
    for g in gpus:
        prof = None
        if profiles is not None and g.vendor in ("nvidia", "amd", "intel"):
            name = g.name.lower()
            prof = next((p for p in profiles if p.name.lower() == name), None)
        if prof is not None:
            if g.bandwidth_gb_per_s is None and prof.bandwidth_gb_per_s.value is not None:
                g = replace(
                    g,
                    bandwidth_gb_per_s=prof.bandwidth_gb_per_s.value,
                    bandwidth_source=f"profile {prof.id}",
                )
            if g.fp16_tflops is None:
                g = replace(g, fp16_tflops=prof.fp16_tflops.value)
        out.append(g)
    return tuple(out)


def detect(
    *,
    root: str | os.PathLike[str] = "/",
    run: CommandRunner = run_command,
    system: str | None = None,
    measure_bandwidth: bool = False,
    refresh_bandwidth: bool = False,
    cache_dir: Path | None = None,
    timeout_s: float = PROBE_TIMEOUT_S,
    nvidia: bool = True,
) -> HardwareReport:
    """Run every probe that applies to this system and return what they found.

    ``root``, ``run`` and ``system`` point the probes elsewhere (tests build a file tree
    and a sysctl); ``nvidia=False`` skips NVML. The host's bandwidth comes from the cache,
    or is measured (≤ 2 s) when ``measure_bandwidth`` is true (again, cache or not, with
    ``refresh_bandwidth``).
    """
    system = system or platform.system()
    c = _Collect()
    base = Path(root)
    read: list[ProfileSet | None] = []

    def profiles() -> ProfileSet | None:
        """The built-in profiles, read on first need (18 ms: a CPU-only machine has none)."""
        if not read:
            read.append(c.run("profiles", _builtin_profiles, timeout_s))
        return read[0]

    host = c.run(
        "host",
        lambda: probe_host(cpuinfo_path=base / "proc" / "cpuinfo", run=run, system=system),
        timeout_s,
    )
    if host is not None:
        cores = f"{host.physical_cores or '?'} cores / {host.logical_cores or '?'} threads"
        ram = f"{(host.ram_total_bytes or 0) / GIB:.1f} GiB RAM"
        c.statuses.append(ProbeStatus("host", "ok", f"{host.cpu_model or 'CPU'}, {cores}, {ram}"))
    gpus: list[GpuInfo] = []
    nvidia_ok = False
    if not nvidia:
        c.statuses.append(ProbeStatus("nvidia", "none", "skipped"))
    elif system == "Darwin":
        c.statuses.append(ProbeStatus("nvidia", "none", "macOS has no NVIDIA driver"))
    else:
        found = c.run("nvidia", probe_nvidia, timeout_s)
        if found is not None:
            nvidia_ok = True
            gpus += found
            detail = ", ".join(g.name for g in found) or "NVML runs but sees no GPU"
            c.statuses.append(ProbeStatus("nvidia", "ok" if found else "none", detail))
    if system == "Darwin":
        apple = c.run("apple", lambda: probe_apple(run, profiles=profiles()), timeout_s)
        if apple is not None:
            gpu, _ = apple
            gpus.append(gpu)
            c.statuses.append(ProbeStatus("apple", "ok", f"{gpu.name}, {gpu.usable_source}"))
    else:
        c.statuses.append(ProbeStatus("apple", "none", f"not macOS ({system})"))
    if system == "Linux":
        cards = c.run("drm", lambda: probe_drm(base), timeout_s)
        if cards is not None:
            found_drm = drm_gpus(cards, skip_nvidia=nvidia_ok)
            gpus += found_drm
            detail = ", ".join(g.name for g in found_drm) or "no GPU besides those listed"
            c.statuses.append(ProbeStatus("drm", "ok" if found_drm else "none", detail))
    else:
        c.statuses.append(ProbeStatus("drm", "none", f"sysfs is Linux only ({system})"))
    bandwidth = c.run(
        "host bandwidth",
        lambda: host_bandwidth(
            host,
            cache_dir=cache_dir,
            measure=measure_bandwidth or refresh_bandwidth,
            refresh=refresh_bandwidth,
        ),
        timeout_s,
    )
    if bandwidth is not None:
        how = "cached" if bandwidth.cached else "measured now"
        c.statuses.append(
            ProbeStatus("host bandwidth", "ok", f"{bandwidth.gb_per_s:.1f} GB/s ({how})")
        )
    elif not any(s.probe == "host bandwidth" for s in c.statuses):
        c.statuses.append(
            ProbeStatus("host bandwidth", "unknown", "not measured yet (ggtune hw measures it)")
        )
    if any(_lacks_figures(g) for g in gpus):
        with_figures = _with_profile_figures(tuple(gpus), profiles())
    else:
        with_figures = tuple(gpus)
    if not read:
        c.statuses.append(ProbeStatus("profiles", "none", "not read: no GPU lacks their figures"))
    elif read[0] is not None:
        c.statuses.append(ProbeStatus("profiles", "ok", f"{len(read[0])} built-in profiles"))
    return HardwareReport(
        host=host,
        gpus=with_figures,
        host_bandwidth=bandwidth,
        statuses=tuple(c.statuses),
    )


def _builtin_profiles() -> ProfileSet:
    from app.hardware.profiles import load_profiles

    return load_profiles(include_user=False)


def local_cpu_flags() -> tuple[str, ...]:
    """Return the ISA features of this machine's CPU that matter to llama.cpp.

    Linux: the ``flags``/``Features`` lines of /proc/cpuinfo; macOS on Apple Silicon:
    NEON, dot product and (M2 and later) i8mm via sysctl. Unknown elsewhere (empty).
    See :func:`app.hardware.probe.host_cpu_flags`.
    """
    return host_cpu_flags()


def local_hardware(*, measure_bandwidth: bool = False) -> Hardware:
    """Return this machine as the hardware probes see it: the host and its GPUs.

    The host's RAM comes from psutil (available memory as free); NVIDIA GPUs from NVML,
    AMD GPUs from sysfs (Linux), a Mac's GPU from sysctl, with the share of unified memory
    Metal lets the GPU wire as its capacity. A probe that fails leaves its devices out;
    :func:`app.hardware.probe.detect` says why. The host's bandwidth is the cached
    measurement (``measure_bandwidth=True`` measures it, ≤ 2 s, when none is cached).
    """
    return detect(measure_bandwidth=measure_bandwidth).to_hardware()
