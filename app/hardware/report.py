"""What the hardware probes find: the host, the GPUs, the bandwidth, and each probe's status.

Frozen data shared by the probes (:mod:`app.hardware.host`, :mod:`app.hardware.nvidia`,
:mod:`app.hardware.apple`, :mod:`app.hardware.drm`, :mod:`app.hardware.bandwidth`) and
:func:`app.hardware.probe.detect`, which collects them into a :class:`HardwareReport`;
:meth:`HardwareReport.to_hardware` is the estimator's view. :func:`run_command` and
:func:`with_timeout` keep every probe from crashing or hanging.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, Literal, TypeVar

from app.hardware.devices import Device, Hardware
from app.hardware.kernels import KernelRates
from app.units import MIB

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
    "avx512_vnni",
    "amx_int8",
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


VENDORS: Final = {VENDOR_AMD: "amd", VENDOR_NVIDIA: "nvidia", VENDOR_INTEL: "intel"}


PCI_IDS_PATHS: Final = ("usr/share/hwdata/pci.ids", "usr/share/misc/pci.ids")
"""Where Linux distributions keep the PCI ID database (relative to the root)."""


Vendor = Literal["nvidia", "amd", "apple", "intel", "other"]


ProbeState = Literal["ok", "none", "unknown"]


CommandRunner = Callable[[Sequence[str], float], str]
"""Run ``argv`` with a time limit in seconds and return its stdout; raise
:class:`ProbeUnavailable` when it cannot run, fails or times out."""


class ProbeUnavailable(Exception):
    """A probe cannot see what it looks for; ``str()`` is the reason, in plain words."""


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
    int8_tops: float | None = None
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
    host_kernels: KernelRates | None = None
    """llama.cpp's CPU kernels timed on this machine at its physical core count (cached;
    a benchmark or Verify's Users run times them)."""

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
            kernels=self.host_kernels,
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
                int8_tops=g.int8_tops,
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


def run_command(argv: Sequence[str], timeout_s: float) -> str:
    """Run ``argv`` and return its stdout (see :data:`CommandRunner`)."""
    assert argv, "no command"
    import subprocess  # only the probes that run a command (macOS): ~5 ms a Linux run skips

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


def read_text(path: Path) -> str | None:
    try:
        return path.read_text(encoding="utf-8", errors="replace").strip()
    except OSError:
        return None


def read_int(path: Path) -> int | None:
    text = read_text(path)
    if text is None:
        return None
    try:
        return int(text, 0)
    except ValueError:
        return None
