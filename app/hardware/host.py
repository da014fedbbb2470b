"""The host probe: CPU model, cores and ISA flags (``/proc/cpuinfo`` or sysctl), RAM, swap."""

from __future__ import annotations

import os
import platform
from pathlib import Path

from app.hardware.report import (
    COMMAND_TIMEOUT_S,
    LLAMA_CPU_FLAGS,
    CommandRunner,
    HostInfo,
    ProbeUnavailable,
    read_text,
    run_command,
)


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


def sysctl(run: CommandRunner, name: str) -> str | None:
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
    text = read_text(Path(cpuinfo_path)) or ""
    _, flags = parse_cpuinfo(text, machine)
    if system == "Darwin" and machine in ("arm64", "aarch64"):
        extra = {"neon", "dotprod"}  # every Apple Silicon core (ARMv8.4+)
        if sysctl(run, "hw.optional.arm.FEAT_I8MM") == "1":
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
    model, _ = parse_cpuinfo(read_text(Path(cpuinfo_path)) or "", machine)
    if system == "Darwin":
        model = sysctl(run, "machdep.cpu.brand_string") or model
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
