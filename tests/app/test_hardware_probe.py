"""Hardware probes: the real ones on this machine, and sysfs/sysctl parsing on built trees.

The sysfs trees and sysctl answers below follow the documented formats: the kernel's
amdgpu documentation (``mem_info_vram_total``/``mem_info_vram_used``: bytes, decimal; PCI
``vendor``/``device``: ``0x`` hex with a newline), ``pci.ids`` (vendor lines at column 0,
devices after one tab), ``sysctl -n`` (the bare value) and ``ioreg -rc AGXAccelerator``.
"""

from __future__ import annotations

import ctypes.util
import json
import os
import platform
import threading
from collections.abc import Sequence
from pathlib import Path

import psutil
import pytest

from app.hardware.apple import parse_gpu_core_count, probe_apple
from app.hardware.bandwidth import host_bandwidth
from app.hardware.drm import drm_gpus, pci_device_name, probe_drm
from app.hardware.host import linux_memory_and_cores, parse_cpuinfo, probe_host
from app.hardware.nvidia import nvml_bandwidth_gb_per_s, probe_nvidia
from app.hardware.probe import detect, local_cpu_flags, local_hardware
from app.hardware.report import DrmCard, HardwareReport, ProbeUnavailable, run_command, with_timeout

GIB = 1024**3
MIB = 1024**2

# --- the real machine --------------------------------------------------------------------


def test_host_probe_agrees_with_psutil_and_os() -> None:
    host = probe_host()
    vm = psutil.virtual_memory()
    assert host.ram_total_bytes == vm.total
    assert host.ram_available_bytes is not None
    assert 0 < host.ram_available_bytes <= vm.total
    assert host.logical_cores == os.cpu_count()
    assert host.physical_cores == psutil.cpu_count(logical=False)
    assert host.swap_total_bytes == psutil.swap_memory().total
    assert host.system == platform.system()
    assert host.machine == platform.machine()
    assert host.cpu_flags == local_cpu_flags()


@pytest.mark.skipif(not Path("/proc/meminfo").is_file(), reason="Linux /proc only")
def test_on_linux_the_host_probe_reads_psutils_own_files_to_the_same_figures() -> None:
    # The host probe skips psutil's ~10 ms of import on Linux by reading what it reads.
    counts = linux_memory_and_cores()
    assert counts is not None, "no MemAvailable or CPU topology here: psutil decides"
    vm, swap = psutil.virtual_memory(), psutil.swap_memory()
    total, available, swap_total, swap_free, physical, logical = counts
    assert (total, swap_total) == (vm.total, swap.total)
    assert (physical, logical) == (psutil.cpu_count(logical=False), psutil.cpu_count())
    assert abs(available - vm.available) < 256 * MIB  # the two reads are a moment apart
    assert abs(swap_free - swap.free) < 256 * MIB
    host = probe_host()
    assert (host.ram_total_bytes, host.physical_cores) == (total, physical)


@pytest.mark.skipif(not Path("/proc/cpuinfo").is_file(), reason="Linux /proc only")
def test_host_flags_are_those_of_proc_cpuinfo() -> None:
    text = Path("/proc/cpuinfo").read_text()
    flags_line = next(
        line for line in text.splitlines() if line.split(":")[0].strip() in ("flags", "Features")
    )
    listed = set(flags_line.partition(":")[2].split())
    host = probe_host()
    for flag in host.cpu_flags:
        assert flag in listed or flag in ("neon", "dotprod")
    if platform.machine() == "x86_64":
        assert ("avx2" in host.cpu_flags) == ("avx2" in listed)
        model = next(line for line in text.splitlines() if line.startswith("model name"))
        assert host.cpu_model == " ".join(model.partition(":")[2].split())


def _nvml_library_present() -> bool:
    return ctypes.util.find_library("nvidia-ml") is not None


@pytest.mark.skipif(_nvml_library_present(), reason="this machine has NVIDIA's driver")
def test_without_nvidia_the_probe_says_unknown_and_why() -> None:
    with pytest.raises(ProbeUnavailable, match=r"^NVML: NVML Shared Library Not Found$"):
        probe_nvidia()
    report = detect()
    status = report.status("nvidia")
    assert str(status) == "nvidia: unknown: NVML: NVML Shared Library Not Found"
    assert not [g for g in report.gpus if g.vendor == "nvidia" and g.total_bytes is not None]


def test_detect_never_raises_and_names_every_probe() -> None:
    report = detect()
    probes = {s.probe for s in report.statuses}
    assert {"host", "nvidia", "apple", "drm", "host bandwidth", "profiles"} <= probes
    for s in report.statuses:
        assert s.state in ("ok", "none", "unknown")
        assert s.detail, f"{s.probe} gives no reason"
    assert report.status("host").state == "ok"
    json.dumps(report.to_dict())  # plain data all the way down


def test_local_hardware_is_the_probes_view() -> None:
    hw = local_hardware()
    assert hw.host.name == "CPU"
    assert hw.host.capacity_bytes == psutil.virtual_memory().total
    assert hw.host.cpu_flags == local_cpu_flags()
    assert all(g.capacity_bytes is not None and g.name for g in hw.gpus)


def test_nvml_bandwidth_is_bus_width_times_double_data_rate() -> None:
    # NVML's max memory clock for these cards, and their published bandwidths
    assert nvml_bandwidth_gb_per_s(384, 9751) == pytest.approx(936, abs=0.5)  # RTX 3090
    assert nvml_bandwidth_gb_per_s(384, 10501) == pytest.approx(1008, abs=0.5)  # RTX 4090
    assert nvml_bandwidth_gb_per_s(512, 14001) == pytest.approx(1792, abs=0.5)  # RTX 5090
    assert nvml_bandwidth_gb_per_s(5120, 2619) == pytest.approx(3352, abs=0.5)  # H100 SXM


# --- commands and time limits -------------------------------------------------------


def test_run_command_reports_missing_failing_and_slow_commands() -> None:
    with pytest.raises(ProbeUnavailable, match="not found"):
        run_command(["ggtune-no-such-command"], 2)
    with pytest.raises(ProbeUnavailable, match="failed"):
        run_command(["false"], 2)
    with pytest.raises(ProbeUnavailable, match=r"took longer than 0\.2 s"):
        run_command(["sleep", "5"], 0.2)
    assert run_command(["echo", "hi"], 2) == "hi\n"


def test_a_hanging_probe_is_abandoned_with_a_reason() -> None:
    release = threading.Event()
    try:
        with pytest.raises(ProbeUnavailable, match=r"nvidia took longer than 0\.1 s"):
            with_timeout(lambda: release.wait(10), 0.1, "nvidia")
    finally:
        release.set()
    with pytest.raises(ZeroDivisionError):
        with_timeout(lambda: 1 // 0, 1, "broken")
    assert with_timeout(lambda: 42, 1, "fine") == 42


# --- /proc/cpuinfo -------------------------------------------------------------------

X86_CPUINFO = """\
processor\t: 0
vendor_id\t: GenuineIntel
model name\t: 13th Gen Intel(R) Core(TM) i7-13700K
flags\t\t: fpu vme sse sse2 avx f16c fma avx2 avx512f avx_vnni

processor\t: 1
model name\t: 13th Gen Intel(R) Core(TM) i7-13700K
flags\t\t: fpu vme sse sse2 avx f16c fma avx2 avx512f avx_vnni
"""

ARM_CPUINFO = """\
processor\t: 0
BogoMIPS\t: 50.00
Features\t: fp asimd evtstrm aes pmull sha1 sha2 crc32 atomics asimddp i8mm sve
CPU implementer\t: 0x41
"""


def test_cpuinfo_x86_gives_the_model_and_llama_flags() -> None:
    model, flags = parse_cpuinfo(X86_CPUINFO, "x86_64")
    assert model == "13th Gen Intel(R) Core(TM) i7-13700K"
    assert flags == ("avx", "avx2", "avx512f", "f16c", "fma")


def test_cpuinfo_arm_features_map_to_neon_dotprod_i8mm_sve() -> None:
    model, flags = parse_cpuinfo(ARM_CPUINFO, "aarch64")
    assert model is None
    assert flags == ("neon", "dotprod", "i8mm", "sve")


def test_host_probe_reads_a_given_cpuinfo(tmp_path: Path) -> None:
    path = tmp_path / "cpuinfo"
    path.write_text(X86_CPUINFO)
    host = probe_host(cpuinfo_path=path, system="Linux", machine="x86_64")
    assert host.cpu_model == "13th Gen Intel(R) Core(TM) i7-13700K"
    assert "avx512f" in host.cpu_flags


# --- Linux sysfs (AMD and others) ----------------------------------------------------

PCI_IDS = """\
# comment
1002  Advanced Micro Devices, Inc. [AMD/ATI]
\t744c  Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]
\t\t1002 0e3b  Radeon RX 7900 XTX
\t73bf  Navi 21 [Radeon RX 6800/6800 XT / 6900 XT]
10de  NVIDIA Corporation
\t2204  GA102 [GeForce RTX 3090]
8086  Intel Corporation
\t4680  AlderLake-S GT1
C 03  Display controller
\t00  VGA compatible controller
"""


def _card(
    root: Path, name: str, vendor: str, device: str, files: dict[str, str], driver: str
) -> None:
    dev = root / "sys" / "devices" / "pci0000:00" / name
    dev.mkdir(parents=True)
    (dev / "vendor").write_text(f"{vendor}\n")
    (dev / "device").write_text(f"{device}\n")
    for fname, text in files.items():
        (dev / fname).write_text(text)
    drivers = root / "sys" / "bus" / "pci" / "drivers" / driver
    drivers.mkdir(parents=True, exist_ok=True)
    (dev / "driver").symlink_to(drivers)
    card = root / "sys" / "class" / "drm" / name
    card.mkdir(parents=True)
    (card / "device").symlink_to(dev)


@pytest.fixture
def sysfs(tmp_path: Path) -> Path:
    """A machine with an RX 7900 XTX (card1), an Intel iGPU (card0) and an RTX 3090 (card2)."""
    (tmp_path / "usr" / "share" / "hwdata").mkdir(parents=True)
    (tmp_path / "usr" / "share" / "hwdata" / "pci.ids").write_text(PCI_IDS)
    _card(tmp_path, "card0", "0x8086", "0x4680", {}, "i915")
    _card(
        tmp_path,
        "card1",
        "0x1002",
        "0x744c",
        {
            "mem_info_vram_total": "25753026560\n",
            "mem_info_vram_used": "1073741824\n",
            "mem_info_gtt_total": "33554432000\n",
        },
        "amdgpu",
    )
    _card(tmp_path, "card2", "0x10de", "0x2204", {}, "nvidia")
    drm = tmp_path / "sys" / "class" / "drm"
    (drm / "card1-DP-1").mkdir()  # a connector, not a card
    (drm / "renderD128").mkdir()
    (drm / "version").write_text("drm 1.1.0 20060810\n")
    return tmp_path


def test_pci_ids_names_devices(sysfs: Path) -> None:
    assert pci_device_name(sysfs, 0x1002, 0x744C) == (
        "Advanced Micro Devices, Inc. [AMD/ATI] Navi 31 [Radeon RX 7900 XT/7900 XTX/7900 GRE/7900M]"
    )
    assert pci_device_name(sysfs, 0x10DE, 0x2204) == "NVIDIA Corporation GA102 [GeForce RTX 3090]"
    assert pci_device_name(sysfs, 0x10DE, 0x9999) is None
    assert pci_device_name(sysfs / "nowhere", 0x1002, 0x744C) is None


def test_drm_probe_reads_cards_in_order_and_skips_connectors(sysfs: Path) -> None:
    cards = probe_drm(sysfs)
    assert [c.card for c in cards] == ["card0", "card1", "card2"]
    amd = cards[1]
    assert (amd.vendor_id, amd.device_id, amd.pci_id) == (0x1002, 0x744C, "1002:744c")
    assert amd.vram_total_bytes == 25753026560
    assert amd.vram_used_bytes == 1073741824
    assert amd.gtt_total_bytes == 33554432000
    assert amd.driver == "amdgpu"
    assert "Navi 31" in amd.name
    assert cards[0].vram_total_bytes is None
    assert cards[0].driver == "i915"


def test_amdgpu_product_name_wins_over_pci_ids(sysfs: Path) -> None:
    dev = sysfs / "sys" / "class" / "drm" / "card1" / "device"
    (dev / "product_name").write_text("AMD Radeon RX 7900 XTX\n")
    assert probe_drm(sysfs)[1].name == "AMD Radeon RX 7900 XTX"


def test_drm_gpus_amd_have_memory_others_are_present_but_unknown(sysfs: Path) -> None:
    gpus = drm_gpus(probe_drm(sysfs), skip_nvidia=False)
    by_vendor = {g.vendor: g for g in gpus}
    amd = by_vendor["amd"]
    assert amd.engine_name == "ROCm0"
    assert amd.total_bytes == 25753026560
    assert amd.free_bytes == 25753026560 - 1073741824
    for vendor in ("intel", "nvidia"):
        other = by_vendor[vendor]
        assert other.total_bytes is None
        assert other.engine_name == ""
        assert "memory unknown" in other.notes[0]
    assert [g.vendor for g in drm_gpus(probe_drm(sysfs), skip_nvidia=True)] == ["intel", "amd"]


def test_detect_on_a_sysfs_tree_gives_the_amd_gpu_to_the_estimator(
    sysfs: Path, tmp_path: Path
) -> None:
    report = detect(root=sysfs, system="Linux", nvidia=False, cache_dir=tmp_path / "cache")
    assert report.status("drm").state == "ok"
    hw = report.to_hardware()
    assert [g.name for g in hw.gpus] == ["ROCm0"]
    assert hw.gpus[0].capacity_bytes == 25753026560
    assert hw.gpus[0].free_bytes == 25753026560 - 1073741824
    assert len(report.gpus) == 3  # the Intel and NVIDIA cards are still reported


def test_profiles_are_read_only_when_a_gpu_lacks_a_figure(sysfs: Path, tmp_path: Path) -> None:
    # A CPU-only machine needs no profile figure: the 18 ms of reading them are saved.
    bare = tmp_path / "bare"
    bare.mkdir()
    alone = detect(root=bare, system="Linux", nvidia=False, cache_dir=tmp_path / "cache")
    assert alone.gpus == ()
    assert alone.status("profiles").state == "none"
    # GPUs from sysfs carry no bandwidth or FP16 rate: the profiles are read to fill them.
    report = detect(root=sysfs, system="Linux", nvidia=False, cache_dir=tmp_path / "cache")
    assert report.status("profiles").state == "ok"
    assert "built-in profiles" in report.status("profiles").detail


def test_integrated_amd_gpu_says_its_vram_is_a_carve_out() -> None:
    apu = DrmCard("card0", 0x1002, 0x15BF, "Phoenix1", "amdgpu", 512 * MIB, 0, 16 * GIB)
    (gpu,) = drm_gpus([apu], skip_nvidia=False)
    assert gpu.total_bytes == 512 * MIB
    assert "carve-out" in gpu.notes[0]


def test_no_sysfs_is_unknown_with_the_path(tmp_path: Path) -> None:
    with pytest.raises(ProbeUnavailable, match=r"sys/class/drm does not exist"):
        probe_drm(tmp_path)
    report = detect(root=tmp_path, system="Linux", nvidia=False, cache_dir=tmp_path)
    assert report.status("drm").state == "unknown"
    assert "does not exist" in report.status("drm").detail


def test_unreadable_vram_file_leaves_the_memory_unknown(sysfs: Path) -> None:
    dev = sysfs / "sys" / "class" / "drm" / "card1" / "device"
    (dev / "mem_info_vram_total").unlink()
    (dev / "mem_info_vram_total").mkdir()  # reading it fails (EISDIR) even as root
    cards = probe_drm(sysfs)
    assert cards[1].vram_total_bytes is None
    gpus = drm_gpus(cards, skip_nvidia=True)
    assert gpus[1].vendor == "amd"
    assert gpus[1].total_bytes is None


# --- macOS sysctl --------------------------------------------------------------------

IOREG_M2_MAX = """\
+-o AGXAcceleratorG14X  <class AGXAcceleratorG14X, id 0x1000003a2, registered>
    {
      "IOClass" = "AGXAcceleratorG14X"
      "gpu-core-count" = 38
      "model" = "Apple M2 Max"
    }
"""


class FakeMac:
    """``sysctl -n`` and ``ioreg`` of a Mac, answering from a table like the real tools."""

    def __init__(self, values: dict[str, str], ioreg: str | None = IOREG_M2_MAX) -> None:
        self.values = values
        self.ioreg = ioreg
        self.calls: list[tuple[str, ...]] = []

    def __call__(self, argv: Sequence[str], timeout_s: float) -> str:
        self.calls.append(tuple(argv))
        if argv[0] == "sysctl":
            name = argv[-1]
            if name not in self.values:
                raise ProbeUnavailable(f"sysctl: unknown oid '{name}'")
            return self.values[name] + "\n"
        if argv[0] == "ioreg" and self.ioreg is not None:
            return self.ioreg
        raise ProbeUnavailable(f"{argv[0]} not found")


M2_MAX_64 = {
    "machdep.cpu.brand_string": "Apple M2 Max",
    "hw.memsize": str(64 * GIB),
    "iogpu.wired_limit_mb": "0",
    "hw.optional.arm.FEAT_I8MM": "1",
}


def test_ioreg_gpu_core_count() -> None:
    assert parse_gpu_core_count(IOREG_M2_MAX) == 38
    assert parse_gpu_core_count("no such key") is None


def test_apple_default_working_set_is_metals_rule() -> None:
    gpu, memsize = probe_apple(FakeMac(M2_MAX_64))
    assert memsize == 64 * GIB
    assert gpu.engine_name == "MTL0"
    assert gpu.unified_memory
    assert gpu.usable_bytes == 48 * GIB  # 49152.00 MiB in llama.cpp #1870's log
    assert "3/4" in gpu.usable_source
    assert gpu.gpu_cores == 38
    assert gpu.bandwidth_gb_per_s == 400  # profile m2-max
    assert gpu.fp16_tflops == 13.6


def test_apple_wired_limit_overrides_the_default() -> None:
    gpu, _ = probe_apple(FakeMac({**M2_MAX_64, "iogpu.wired_limit_mb": "57344"}))
    assert gpu.usable_bytes == 56 * GIB
    assert gpu.usable_source == "sysctl iogpu.wired_limit_mb = 57344"


def test_apple_before_macos_14_reads_the_debug_wired_limit() -> None:
    values = {k: v for k, v in M2_MAX_64.items() if k != "iogpu.wired_limit_mb"}
    gpu, _ = probe_apple(FakeMac({**values, "debug.iogpu.wired_limit": str(40 * GIB)}))
    assert gpu.usable_bytes == 40 * GIB
    gpu, _ = probe_apple(FakeMac(values))
    assert gpu.usable_bytes == 48 * GIB


def test_apple_small_mac_gets_two_thirds_and_variant_by_gpu_cores() -> None:
    values = {**M2_MAX_64, "machdep.cpu.brand_string": "Apple M3 Max", "hw.memsize": str(36 * GIB)}
    ioreg = IOREG_M2_MAX.replace("38", "30")
    gpu, _ = probe_apple(FakeMac(values, ioreg))
    assert gpu.usable_bytes == pytest.approx(24 * GIB, abs=16384)
    assert "2/3" in gpu.usable_source
    assert gpu.bandwidth_gb_per_s == 300  # the 30-core M3 Max
    gpu, _ = probe_apple(FakeMac(values, ioreg.replace("30", "40")))
    assert gpu.bandwidth_gb_per_s == 400


def test_apple_without_ioreg_still_works_and_says_so() -> None:
    gpu, _ = probe_apple(FakeMac(M2_MAX_64, ioreg=None))
    assert gpu.gpu_cores is None
    assert any("GPU cores" in n for n in gpu.notes)


def test_an_intel_mac_is_not_apple_silicon() -> None:
    fake = FakeMac({"machdep.cpu.brand_string": "Intel(R) Core(TM) i9-9880H CPU @ 2.30GHz"})
    with pytest.raises(ProbeUnavailable, match="not Apple Silicon"):
        probe_apple(fake)


def test_an_unknown_chip_has_unknown_bandwidth() -> None:
    gpu, _ = probe_apple(FakeMac({**M2_MAX_64, "machdep.cpu.brand_string": "Apple M9 Hyper"}))
    assert gpu.bandwidth_gb_per_s is None
    assert any("no profile" in n for n in gpu.notes)


def test_detect_on_a_mac_gives_a_unified_metal_device(tmp_path: Path) -> None:
    report = detect(root=tmp_path, run=FakeMac(M2_MAX_64), system="Darwin", cache_dir=tmp_path)
    assert report.status("apple").state == "ok"
    assert report.status("nvidia").state == "none"
    assert report.host is not None
    assert report.host.cpu_model == "Apple M2 Max"
    hw = report.to_hardware()
    assert [g.name for g in hw.gpus] == ["MTL0"]
    assert hw.gpus[0].capacity_bytes == 48 * GIB
    assert hw.gpus[0].memory_bytes == 64 * GIB
    assert hw.gpus[0].unified_memory
    assert hw.host.unified_memory


# --- host bandwidth ------------------------------------------------------------------


def test_host_bandwidth_is_measured_once_then_cached(tmp_path: Path) -> None:
    host = probe_host()
    assert host_bandwidth(host, cache_dir=tmp_path, measure=False) is None
    first = host_bandwidth(host, cache_dir=tmp_path)
    assert first is not None
    assert first.gb_per_s > 0
    assert not first.cached
    assert first.runs >= 2
    second = host_bandwidth(host, cache_dir=tmp_path, measure=False)
    assert second is not None
    assert second.cached
    assert second.gb_per_s == first.gb_per_s
    data = json.loads((tmp_path / "hardware" / "host-bandwidth.json").read_text())
    assert data["machines"][first.machine_key]["gb_per_s"] == first.gb_per_s
    report = detect(cache_dir=tmp_path)
    assert report.host_bandwidth == second
    assert report.to_hardware().host.bandwidth_gb_per_s == first.gb_per_s


def test_a_corrupt_bandwidth_cache_is_ignored(tmp_path: Path) -> None:
    path = tmp_path / "hardware" / "host-bandwidth.json"
    path.parent.mkdir()
    path.write_text("{not json")
    assert host_bandwidth(probe_host(), cache_dir=tmp_path, measure=False) is None
    report = detect(cache_dir=tmp_path)
    assert report.status("host bandwidth").state == "unknown"


def test_report_without_host_still_gives_hardware() -> None:
    report = HardwareReport(host=None, gpus=(), host_bandwidth=None, statuses=())
    hw = report.to_hardware()
    assert hw.host.name == "CPU"
    assert hw.host.capacity_bytes is None


def test_a_detected_nvidia_gpu_gets_its_profiles_int8_rate() -> None:
    from app.hardware.probe import _with_profile_figures
    from app.hardware.profiles import load_profiles
    from app.hardware.report import GpuInfo

    gpu = GpuInfo("nvidia", 0, "CUDA0", "NVIDIA GeForce RTX 4090", total_bytes=24 * GIB)
    (filled,) = _with_profile_figures((gpu,), load_profiles())
    assert (filled.int8_tops, filled.fp16_tflops, filled.bandwidth_gb_per_s) == (660.6, 165.2, 1008)
    report = HardwareReport(host=None, gpus=(filled,), host_bandwidth=None, statuses=())
    assert report.to_hardware().gpus[0].int8_tops == 660.6
    unknown = GpuInfo("nvidia", 0, "CUDA0", "NVIDIA Some Future GPU", total_bytes=8 * GIB)
    assert _with_profile_figures((unknown,), load_profiles())[0].int8_tops is None


# --- the last-level cache (what the kernel timing must stream past) ---------------------


def _cache_index(root: Path, n: int, level: int, kind: str, size: str) -> None:
    d = root / f"index{n}"
    d.mkdir(parents=True)
    (d / "level").write_text(f"{level}\n")
    (d / "type").write_text(f"{kind}\n")
    (d / "size").write_text(f"{size}\n")


def test_sysfs_cache_sizes_parse_with_their_units() -> None:
    from app.hardware.host import parse_cache_size

    assert parse_cache_size("32K\n") == 32 * 1024
    assert parse_cache_size("8192K") == 8 * MIB
    assert parse_cache_size("491520K") == 480 * MIB  # a server's L3 as a VM reports it
    assert parse_cache_size("2M") == 2 * MIB
    assert parse_cache_size("") is None
    assert parse_cache_size("0K") is None
    assert parse_cache_size("lots") is None


def test_the_last_level_cache_is_the_highest_data_or_unified_level(tmp_path: Path) -> None:
    from app.hardware.host import last_level_cache_bytes

    _cache_index(tmp_path, 0, 1, "Data", "32K")
    _cache_index(tmp_path, 1, 1, "Instruction", "64M")  # never the instruction cache
    _cache_index(tmp_path, 2, 2, "Unified", "512K")
    _cache_index(tmp_path, 3, 3, "Unified", "8192K")
    assert last_level_cache_bytes(cache_dir=tmp_path, system="Linux") == 8 * MIB
    # no tree, or one with unreadable sizes: unknown, never a guess
    assert last_level_cache_bytes(cache_dir=tmp_path / "absent", system="Linux") is None
    bad = tmp_path / "bad"
    _cache_index(bad, 0, 3, "Unified", "huge")
    assert last_level_cache_bytes(cache_dir=bad, system="Linux") is None


def test_on_this_machine_the_last_level_cache_is_what_the_os_says() -> None:
    from app.hardware.host import last_level_cache_bytes

    system = platform.system()
    if system == "Linux" and not Path("/sys/devices/system/cpu/cpu0/cache").exists():
        pytest.skip("this Linux has no sysfs cache tree (some containers hide it)")
    if system not in ("Linux", "Darwin"):
        pytest.skip(f"no cache probe on {system}: the timing keeps its 96 MiB")
    found = last_level_cache_bytes()
    assert found is not None
    assert found >= 256 * 1024  # every x86/ARM server has that much


def test_a_mac_reports_its_l3_or_else_its_l2() -> None:
    from app.hardware.host import last_level_cache_bytes

    intel = FakeMac({"hw.l3cachesize": str(12 * MIB), "hw.l2cachesize": str(MIB)})
    assert last_level_cache_bytes(run=intel, system="Darwin") == 12 * MIB
    apple = FakeMac({"hw.l2cachesize": str(4 * MIB)})  # Apple Silicon: no L3 reported
    assert last_level_cache_bytes(run=apple, system="Darwin") == 4 * MIB
    assert last_level_cache_bytes(run=FakeMac({}), system="Darwin") is None
