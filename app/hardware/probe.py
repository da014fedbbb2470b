"""Detect this machine's CPU, memory and GPUs; every probe on its own, none can crash or hang.

:func:`detect` runs the probes and returns a :class:`~app.hardware.report.HardwareReport`:
what was found, and for every probe that found nothing or failed, why (``"unknown: NVML
Shared Library Not Found"``); its ``to_hardware()`` is the estimator's
:class:`~app.hardware.devices.Hardware`, and :func:`local_hardware` that of this machine.

The probes, each usable alone and each pointed at its source so tests can build one:

* :mod:`app.hardware.host` (``probe_host``): CPU model, cores, ISA flags
  (``/proc/cpuinfo`` or sysctl), RAM and swap (psutil);
* :mod:`app.hardware.nvidia` (``probe_nvidia``): every GPU NVML sees (nvidia-ml-py):
  memory, bus width × max memory clock → bandwidth, compute capability, driver and CUDA
  version, MIG mode, the processes holding memory;
* :mod:`app.hardware.apple` (``probe_apple``): a Mac's chip, unified memory and GPU cores
  (``sysctl``, ``ioreg``), and the share Metal lets the GPU wire (``iogpu.wired_limit_mb``,
  else Metal's default);
* :mod:`app.hardware.drm` (``probe_drm``): GPUs the Linux kernel's DRM drivers expose
  under ``/sys/class/drm``; AMD cards (amdgpu) report their VRAM there, the others are
  listed with unknown memory;
* :mod:`app.hardware.bandwidth` (``host_bandwidth``): the host's memory bandwidth,
  measured once (≤ 2 s, a numpy copy) and cached per machine.

Example::

    report = detect()
    report.host.ram_total_bytes          # 25769803776
    [str(s) for s in report.statuses]    # ["host: ok: …", "nvidia: unknown: NVML …", …]
    hardware = report.to_hardware()      # CPU (+ CUDA0 …, MTL0, ROCm0 …)
"""

from __future__ import annotations

import os
import platform
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from app.hardware.apple import probe_apple
from app.hardware.bandwidth import host_bandwidth, machine_key
from app.hardware.devices import Hardware
from app.hardware.drm import drm_gpus, probe_drm
from app.hardware.host import host_cpu_flags, probe_host
from app.hardware.kernels import cached_rates
from app.hardware.nvidia import probe_nvidia
from app.hardware.report import (
    PROBE_TIMEOUT_S,
    CommandRunner,
    GpuInfo,
    HardwareReport,
    ProbeStatus,
    ProbeUnavailable,
    T,
    run_command,
    with_timeout,
)
from app.units import GIB

if TYPE_CHECKING:
    from app.hardware.profiles import ProfileSet


# --- results --------------------------------------------------------------------------


# --- helpers --------------------------------------------------------------------------


# --- host -----------------------------------------------------------------------------


# --- NVIDIA ---------------------------------------------------------------------------


# --- Apple ----------------------------------------------------------------------------


# --- Linux DRM (AMD and the rest) -----------------------------------------------------


# --- host bandwidth -------------------------------------------------------------------


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
    missing = missing or (gpu.int8_tops is None and gpu.vendor == "nvidia")
    return missing and gpu.vendor in ("nvidia", "amd", "intel")


def _with_profile_figures(
    gpus: tuple[GpuInfo, ...], profiles: ProfileSet | None
) -> tuple[GpuInfo, ...]:
    """Fill bandwidth, FP16 and INT8 rates from a profile of the same name where a probe
    lacks them."""
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
            if g.int8_tops is None and prof.int8_tops is not None:
                g = replace(g, int8_tops=prof.int8_tops.value)
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
    kernels = None
    if host is not None:
        kernels = cached_rates(
            machine_key(host), host.physical_cores or host.logical_cores or 1, cache_dir=cache_dir
        )
    if kernels is not None:
        detail = (
            f"{len(kernels.types())} weight types at {kernels.n_threads} thread(s), "
            f"measured {kernels.measured_at[:10]}"
        )
        c.statuses.append(ProbeStatus("cpu kernels", "ok", detail))
    else:
        c.statuses.append(
            ProbeStatus(
                "cpu kernels", "unknown", "not timed yet (timed once when a model needs them)"
            )
        )
    return HardwareReport(
        host=host,
        gpus=with_figures,
        host_bandwidth=bandwidth,
        statuses=tuple(c.statuses),
        host_kernels=kernels,
    )


def _builtin_profiles() -> ProfileSet:
    from app.hardware.profiles import load_profiles

    return load_profiles(include_user=False)


def local_cpu_flags() -> tuple[str, ...]:
    """Return the ISA features of this machine's CPU that matter to llama.cpp.

    Linux: the ``flags``/``Features`` lines of /proc/cpuinfo; macOS on Apple Silicon:
    NEON, dot product and (M2 and later) i8mm via sysctl. Unknown elsewhere (empty).
    See :func:`app.hardware.host.host_cpu_flags`.
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
