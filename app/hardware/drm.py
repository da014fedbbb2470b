"""The Linux DRM probe: GPUs the kernel's DRM drivers expose under ``/sys/class/drm``.

AMD cards (amdgpu) report their VRAM there; the others are listed with unknown memory.
Names come from the card (``product_name``) or the PCI ID database.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Sequence
from pathlib import Path

from app.hardware.report import (
    PCI_IDS_PATHS,
    VENDORS,
    DrmCard,
    GpuInfo,
    ProbeUnavailable,
    Vendor,
    read_int,
    read_text,
)
from app.units import GIB


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
        vendor, device = read_int(dev / "vendor"), read_int(dev / "device")
        if vendor is None or device is None:
            continue
        driver = None
        with contextlib.suppress(OSError):
            driver = os.path.basename(os.readlink(dev / "driver"))
        name = (
            read_text(dev / "product_name")
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
                vram_total_bytes=read_int(dev / "mem_info_vram_total"),
                vram_used_bytes=read_int(dev / "mem_info_vram_used"),
                gtt_total_bytes=read_int(dev / "mem_info_gtt_total"),
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
        vendor: Vendor = VENDORS.get(c.vendor_id, "other")  # type: ignore[assignment]
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
