"""The Apple probe: a Mac's chip, unified memory and GPU cores (``sysctl``, ``ioreg``).

Also the share of the unified memory Metal lets the GPU wire (``iogpu.wired_limit_mb``,
else Metal's default working set, :func:`app.hardware.profiles.metal_default_working_set_bytes`).
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from app.hardware.host import sysctl
from app.hardware.report import (
    COMMAND_TIMEOUT_S,
    CommandRunner,
    GpuInfo,
    ProbeUnavailable,
    run_command,
)
from app.units import MIB

if TYPE_CHECKING:
    from app.hardware.profiles import ProfileSet


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

    chip = sysctl(run, "machdep.cpu.brand_string")
    if chip is None or not chip.startswith("Apple"):
        raise ProbeUnavailable(f"not Apple Silicon (CPU: {chip or 'unknown'})")
    memsize_text = sysctl(run, "hw.memsize")
    if memsize_text is None or not memsize_text.isdigit():
        raise ProbeUnavailable(f"sysctl hw.memsize gave {memsize_text!r}")
    memsize = int(memsize_text)
    notes: list[str] = []
    usable: int
    limit_mb = sysctl(run, "iogpu.wired_limit_mb")
    legacy = None if limit_mb is not None else sysctl(run, "debug.iogpu.wired_limit")
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
