"""The host probe: CPU model, cores and ISA flags (``/proc/cpuinfo`` or sysctl), RAM, swap."""

from __future__ import annotations

import os
import platform
import sys
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


def linux_memory_and_cores() -> tuple[int, int, int, int, int, int] | None:
    """Linux: RAM total and available, swap total and free (bytes), physical and logical
    cores, read where psutil reads them (psutil/_pslinux.py: ``virtual_memory``,
    ``swap_memory``, ``cpu_count_cores`` method 1, ``cpu_count_logical``), so the figures
    are psutil's without its ~10 ms of import; None when a source is missing or odd
    (no MemAvailable, none in a container's limits, no topology files): psutil decides then."""
    try:
        mems: dict[bytes, int] = {}
        with open("/proc/meminfo", "rb") as f:
            for line in f:
                fields = line.split()
                mems[fields[0]] = int(fields[1]) * 1024
        total, available = mems[b"MemTotal:"], mems[b"MemAvailable:"]
        swap_total, swap_free = mems[b"SwapTotal:"], mems[b"SwapFree:"]
        logical = os.sysconf("SC_NPROCESSORS_ONLN")
        cpus = Path("/sys/devices/system/cpu")
        names = [
            n for n in os.listdir(cpus) if n[:3] == "cpu" and n[3:4].isascii() and n[3:4].isdigit()
        ]
        cores: set[bytes] = set()
        for leaf in ("core_cpus_list", "thread_siblings_list"):  # psutil's order
            lists = [cpus / n / "topology" / leaf for n in names]
            lists = [p for p in lists if p.exists()]
            if lists:
                cores = {p.read_bytes().strip() for p in lists}
                break
    except (OSError, KeyError, ValueError, IndexError):
        return None
    if not 0 < available <= total or not cores or logical < 1:
        return None
    return total, available, swap_total, swap_free, len(cores), logical


def probe_host(
    *,
    cpuinfo_path: str | os.PathLike[str] = "/proc/cpuinfo",
    run: CommandRunner = run_command,
    system: str | None = None,
    machine: str | None = None,
) -> HostInfo:
    """Return the CPU and system memory (psutil, or on Linux the files it reads;
    ``/proc/cpuinfo`` or sysctl for the CPU)."""
    system = system or platform.system()
    machine = machine or platform.machine()
    model, _ = parse_cpuinfo(read_text(Path(cpuinfo_path)) or "", machine)
    if system == "Darwin":
        model = sysctl(run, "machdep.cpu.brand_string") or model
    if model is None:
        model = platform.processor() or None
    counts = linux_memory_and_cores() if sys.platform.startswith("linux") else None
    swap_total: int | None = None
    swap_free: int | None = None
    if counts is not None:
        ram_total, ram_available, swap_total, swap_free, physical, logical = counts
    else:
        import psutil  # not on Linux's common path: ~10 ms of import

        vm = psutil.virtual_memory()
        ram_total, ram_available = int(vm.total), int(vm.available)
        try:
            swap = psutil.swap_memory()
            swap_total, swap_free = int(swap.total), int(swap.free)
        except (OSError, RuntimeError):
            pass
        physical, logical = psutil.cpu_count(logical=False), psutil.cpu_count(logical=True)
    return HostInfo(
        system=system,
        machine=machine,
        cpu_model=model,
        physical_cores=physical,
        logical_cores=logical,
        cpu_flags=host_cpu_flags(
            cpuinfo_path=cpuinfo_path, run=run, system=system, machine=machine
        ),
        ram_total_bytes=ram_total,
        ram_available_bytes=ram_available,
        swap_total_bytes=swap_total,
        swap_free_bytes=swap_free,
    )


def parse_cache_size(text: str) -> int | None:
    """Return bytes of a sysfs cache ``size`` (``"32768K"``, ``"8M"``, ``"491520K"``)."""
    value = text.strip().upper()
    scale = {"K": 2**10, "M": 2**20, "G": 2**30}.get(value[-1:], 1)
    digits = value.rstrip("KMG")
    size = int(digits) * scale if digits.isdigit() else 0
    return size or None


def last_level_cache_bytes(
    *,
    cache_dir: str | os.PathLike[str] = "/sys/devices/system/cpu/cpu0/cache",
    run: CommandRunner = run_command,
    system: str | None = None,
) -> int | None:
    """Return the size of the CPU's largest cache (its last level), or ``None`` unknown.

    Linux: the highest ``level`` under ``/sys/devices/system/cpu/cpu0/cache/index*``
    (data or unified); macOS: sysctl ``hw.l3cachesize``, else ``hw.l2cachesize``
    (Apple Silicon has no L3 the OS reports). What a VM reports is the host's whole cache,
    which it shares with other guests.
    """
    system = system or platform.system()
    if system == "Darwin":
        for name in ("hw.l3cachesize", "hw.l2cachesize"):
            value = sysctl(run, name)
            if value and value.isdigit() and int(value) > 0:
                return int(value)
        return None
    best: tuple[int, int] | None = None
    try:
        entries = sorted(Path(cache_dir).glob("index*"))
    except OSError:
        return None
    for entry in entries:
        kind = (read_text(entry / "type") or "").strip()
        level = (read_text(entry / "level") or "").strip()
        size = parse_cache_size(read_text(entry / "size") or "")
        if kind == "Instruction" or not level.isdigit() or size is None:
            continue
        if best is None or (int(level), size) > best:
            best = (int(level), size)
    return best[1] if best else None
