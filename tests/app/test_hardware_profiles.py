"""Hardware profiles: every built-in one validates and cites a source; composition arithmetic;
custom profiles and the errors a bad file gives."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from app.errors import GGTuneError, HardwareProfileError
from app.hardware.devices import Device, Hardware
from app.hardware.profiles import (
    FIGURES,
    ProfileSet,
    builtin_profiles_dir,
    compose,
    load_profile_file,
    load_profiles,
    metal_default_working_set_bytes,
    user_profiles_dir,
)
from app.units import GIB

MIB = 1024**2


@pytest.fixture(scope="module")
def builtin() -> ProfileSet:
    return load_profiles(include_user=False)


# --- the built-in profiles -------------------------------------------------------------


def test_at_least_30_profiles_covering_every_family(builtin: ProfileSet) -> None:
    assert len(builtin) >= 30
    wanted = [
        "rtx-3060-12g",
        "rtx-4060-ti-16g",
        "rtx-4070",
        "rtx-3090",
        "rtx-4090",
        "rtx-5090",
        "rtx-a4000",
        "rtx-a6000",
        "rx-7900-xtx",
        "arc-a770-16g",
        "dgx-spark",
    ]
    for chip in ("m1", "m2", "m3", "m4"):
        wanted += [chip, f"{chip}-pro", f"{chip}-max", f"{chip}-ultra"] if chip != "m4" else []
    wanted += ["m4", "m4-pro", "m4-max"]
    for name in wanted:
        builtin.get(name)
    kinds = {p.kind for p in builtin}
    assert kinds == {"gpu", "unified", "host"}
    assert sum(p.kind == "host" for p in builtin) >= 4


def test_every_figure_has_a_source_and_a_sane_value(builtin: ProfileSet) -> None:
    for p in builtin:
        for key in FIGURES:
            fig = getattr(p, key)
            assert fig.source.strip(), f"{p.id}.{key} has no source"
        assert 1 <= (p.memory_gib.value or 0) <= 1024, p.id
        assert 10 <= (p.bandwidth_gb_per_s.value or 0) <= 10_000, p.id
        assert 0.5 <= (p.usable_fraction.value or 0) <= 1, p.id
        if p.kind == "gpu":
            assert p.fp16_tflops.value is not None, f"{p.id}: a GPU's FP16 rate is published"
        assert Path(p.path).parent == builtin_profiles_dir()


def test_bandwidths_agree_with_docs_sources_section_6(builtin: ProfileSet) -> None:
    reference = {  # docs/sources.md §6
        "rtx-3060-12g": 360,
        "rtx-4060-ti-16g": 288,
        "rtx-4070": 504,
        "rtx-3090": 936,
        "rtx-4090": 1008,
        "rtx-5090": 1792,
        "rx-7900-xtx": 960,
        "dgx-spark": 273,
        "m1": 68.25,
        "m2": 100,
        "m3": 100,
        "m4": 120,
        "m1-pro": 200,
        "m2-pro": 200,
        "m3-pro": 150,
        "m4-pro": 273,
        "m1-max": 400,
        "m2-max": 400,
        "m3-max-30c": 300,
        "m3-max-40c": 400,
        "m4-max-40c": 546,
        "m1-ultra": 800,
        "m2-ultra": 800,
        "m3-ultra": 819,
        "desktop-ddr4-3200": 51.2,
    }
    for pid, gb_per_s in reference.items():
        assert builtin.get(pid).bandwidth_gb_per_s.value == gb_per_s, pid


def test_apple_usable_fraction_is_metals_rule_for_their_memory(builtin: ProfileSet) -> None:
    for p in builtin:
        if p.backend == "MTL":
            expected = metal_default_working_set_bytes(p.memory_bytes) / p.memory_bytes
            assert p.usable_fraction.value == pytest.approx(expected, abs=1e-4), p.id


def test_discrete_usable_fraction_leaves_llama_cpps_one_gib(builtin: ProfileSet) -> None:
    for p in builtin:
        if p.kind == "gpu":
            margin = p.memory_bytes - p.usable_bytes
            assert margin == pytest.approx(GIB, rel=0.02), p.id


def test_metal_default_working_set_matches_llama_cpp_logs() -> None:
    # recommendedMaxWorkingSetSize as llama.cpp printed it (MiB, %.2f)
    logs = {16: "10922.67", 32: "21845.34", 64: "49152.00"}
    for gib, printed in logs.items():
        assert f"{metal_default_working_set_bytes(gib * GIB) / MIB:.2f}" == printed
    assert metal_default_working_set_bytes(128 * GIB) == 96 * GIB


# --- composition -----------------------------------------------------------------------


def test_two_3090s_and_64_gb_of_ddr5(builtin: ProfileSet) -> None:
    hw = compose("2x rtx-3090 + 64 GB DDR5", profiles=builtin)
    assert [g.name for g in hw.gpus] == ["CUDA0", "CUDA1"]
    for g in hw.gpus:
        assert g.memory_bytes == 24 * GIB
        assert g.capacity_bytes == int(24 * GIB * 0.9583)
        assert g.bandwidth_gb_per_s == 936
        assert g.fp16_tflops == 71
        assert g.free_bytes is None
    assert hw.host.memory_bytes == 64 * GIB
    assert hw.host.capacity_bytes == int(64 * GIB * 0.9)
    assert hw.host.bandwidth_gb_per_s == 89.6
    assert "avx2" in hw.host.cpu_flags
    assert sum(g.capacity_bytes or 0 for g in hw.gpus) == 2 * int(24 * GIB * 0.9583)


def test_spellings_of_a_composition_agree(builtin: ProfileSet) -> None:
    a = compose("2x rtx-3090 + 64 GB DDR5", profiles=builtin)
    for text in (
        "2 x 3090, 64GB ddr5",
        "rtx-3090 + rtx-3090 + 64 GiB ddr5-5600",
        "2×RTX-3090+64g DDR5",
    ):
        assert compose(text, profiles=builtin) == a, text


def test_a_mac_with_other_memory_follows_metals_rule(builtin: ProfileSet) -> None:
    hw = compose("m2-max:64GB", profiles=builtin)
    (gpu,) = hw.gpus
    assert gpu.name == "MTL0"
    assert gpu.unified_memory
    assert gpu.capacity_bytes == 48 * GIB
    assert gpu.memory_bytes == 64 * GIB
    assert gpu.description == "Apple M2 Max, 64 GB"
    assert hw.host.capacity_bytes == 64 * GIB
    assert hw.host.unified_memory
    assert hw.host.bandwidth_gb_per_s == 400
    small = compose("m4-pro:24", profiles=builtin).gpus[0]
    assert small.capacity_bytes == metal_default_working_set_bytes(24 * GIB)


def test_backends_are_numbered_separately(builtin: ProfileSet) -> None:
    hw = compose("rtx-4090, rx-7900-xtx, rtx-3060", profiles=builtin)
    assert [g.name for g in hw.gpus] == ["CUDA0", "ROCm0", "CUDA1"]


def test_this_machine_plus_a_gpu(builtin: ProfileSet) -> None:
    here = Hardware.with_gpus([8 * GIB], ram_bytes=32 * GIB)
    hw = compose("this + rtx-3090", profiles=builtin, this_machine=lambda: here)
    assert [g.name for g in hw.gpus] == ["CUDA0", "CUDA1"]
    assert hw.gpus[0] == here.gpus[0]
    assert hw.host == here.host


def test_without_a_host_term_the_default_host_is_used(builtin: ProfileSet) -> None:
    host = Device("CPU", "host", 16 * GIB, 8 * GIB)
    assert compose("rtx-4070", profiles=builtin, default_host=host).host == host
    assert compose("rtx-4070", profiles=builtin).host.capacity_bytes is None
    bare = compose("rtx-4070 + 48GB", profiles=builtin).host
    assert bare.capacity_bytes == 48 * GIB
    assert bare.bandwidth_gb_per_s is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("", "no hardware given"),
        ("rtx-309", "did you mean rtx-3090"),
        ("m2-max + 64 GB DDR5", "both describe the host"),
        ("2x m2-max", "whole machine"),
        ("64 GB rtx-3090", "a size goes before system RAM"),
        ("2x ddr5", "one host"),
        ("rtx-3090:0GB", "expected a memory size"),
        ("this", "not available"),
    ],
)
def test_bad_compositions_say_what_is_wrong(builtin: ProfileSet, text: str, message: str) -> None:
    with pytest.raises(HardwareProfileError, match=message) as info:
        compose(text, profiles=builtin)
    assert isinstance(info.value, GGTuneError)
    assert "\n" not in str(info.value)


# --- custom profiles -------------------------------------------------------------------

GOOD = """\
[[profile]]
id = "my-box"
name = "My box, 2x P40"
kind = "gpu"
backend = "CUDA"
aliases = ["p40"]
memory_gib = { value = 24, source = "nvidia-smi on my machine" }
bandwidth_gb_per_s = { value = 347, source = "NVIDIA Tesla P40 datasheet" }
usable_fraction = { value = 0.95, source = "my guess" }
fp16_tflops = { source = "the P40 has no fast FP16" }
"""


def test_every_nvidia_gpu_has_an_int8_rate_and_devices_carry_it(builtin: ProfileSet) -> None:
    for p in builtin:
        if p.backend == "CUDA":
            assert p.int8_tops is not None, p.id
            assert p.int8_tops.value, p.id
            assert p.int8_tops.source.strip(), p.id
            # dense INT8 is 2x (full-rate FP32 accumulate) to 4x (GeForce) the FP16 figure
            assert p.fp16_tflops.value is not None
            assert 1.9 <= p.int8_tops.value / p.fp16_tflops.value <= 4.1, p.id
        elif p.kind == "host":
            assert p.int8_tops is None, p.id
    hw = compose("rtx-4090 + 64GB", profiles=builtin)
    assert hw.gpus[0].int8_tops == 660.6
    assert compose("m2-ultra", profiles=builtin).gpus[0].int8_tops is None


def test_int8_rate_is_optional_and_checked(tmp_path: Path) -> None:
    (tmp_path / "mine.toml").write_text(
        GOOD + 'int8_tops = { value = 47, source = "P40 datasheet" }\n'
    )
    mine = load_profiles([tmp_path]).get("my-box")
    assert mine.int8_tops is not None
    assert mine.int8_tops.value == 47
    assert mine.gpu_device("CUDA0").int8_tops == 47
    (tmp_path / "mine.toml").write_text(GOOD + 'int8_tops = { source = "unknown" }\n')
    with pytest.raises(HardwareProfileError, match=r"int8_tops.value is missing"):
        load_profiles([tmp_path])
    host = GOOD.replace('kind = "gpu"', 'kind = "host"').replace('"CUDA"', '"CPU"')
    (tmp_path / "mine.toml").write_text(host + 'int8_tops = { value = 1, source = "x" }\n')
    with pytest.raises(HardwareProfileError, match=r"int8_tops is a GPU figure"):
        load_profiles([tmp_path])


def test_a_custom_profile_loads_and_composes(tmp_path: Path, builtin: ProfileSet) -> None:
    (tmp_path / "mine.toml").write_text(GOOD)
    profiles = load_profiles([builtin_profiles_dir(), tmp_path])
    assert len(profiles) == len(builtin) + 1
    p = profiles.get("P40")
    assert p.id == "my-box"
    assert p.fp16_tflops.value is None
    hw = compose("2x p40 + rtx-3090", profiles=profiles)
    assert [g.name for g in hw.gpus] == ["CUDA0", "CUDA1", "CUDA2"]
    assert hw.gpus[0].capacity_bytes == int(24 * GIB * 0.95)


def test_user_profiles_come_from_the_config_dir(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path))
    assert user_profiles_dir() == tmp_path / "ggtune" / "profiles"
    user_profiles_dir().mkdir(parents=True)
    (user_profiles_dir() / "mine.toml").write_text(GOOD)
    assert load_profiles().get("my-box").name == "My box, 2x P40"
    assert "my-box" not in load_profiles(include_user=False).profiles


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (
            lambda t: t.replace('source = "NVIDIA Tesla P40 datasheet"', 'source = ""'),
            r"profile 'my-box' \(#1\): bandwidth_gb_per_s.source must be a non-empty string",
        ),
        (
            lambda t: t.replace("value = 347", "value = -1"),
            r"bandwidth_gb_per_s.value must be a number > 0, got -1",
        ),
        (
            lambda t: t.replace("value = 0.95", "value = 1.5"),
            r"usable_fraction.value must be a number in \(0, 1\], got 1.5",
        ),
        (
            lambda t: t.replace("value = 24", 'value = "24"'),
            r"memory_gib.value must be a number, got '24'",
        ),
        (
            lambda t: t.replace(
                'memory_gib = { value = 24, source = "nvidia-smi on my machine" }', ""
            ),
            r"missing memory_gib",
        ),
        (lambda t: t + 'colour = "green"\n', r"unknown keys \['colour'\]"),
        (
            lambda t: t.replace('kind = "gpu"', 'kind = "tpu"'),
            r"kind must be one of gpu, unified, host",
        ),
        (
            lambda t: t.replace('backend = "CUDA"', 'backend = "CPU"'),
            r"backend CPU goes with kind host",
        ),
        (lambda t: t.replace('id = "my-box"', 'id = "My Box"'), r"id must be lowercase"),
        (lambda t: t.replace('id = "my-box"', 'id = "rtx-3090"'), r"taken by profile 'rtx-3090'"),
        (lambda t: t.replace('"p40"', '"4090"'), r"the name '4090' is taken"),
        (lambda t: t.replace("[[profile]]", "[profile]"), r"no \[\[profile\]\] tables"),
        (lambda t: t.replace("[[profile]]", "[[profiles]]"), r"unknown top-level keys"),
        (lambda t: t.replace("value = 24,", "value = 24"), r"not valid TOML"),
        (lambda t: t.replace("memory_gib = {", "memory_gib = 24 #"), r"memory_gib must be a table"),
    ],
)
def test_a_bad_custom_profile_gives_a_clear_error(
    tmp_path: Path, edit: Callable[[str], str], message: str
) -> None:
    path = tmp_path / "bad.toml"
    path.write_text(edit(GOOD))
    with pytest.raises(HardwareProfileError, match=message) as info:
        load_profiles([builtin_profiles_dir(), tmp_path])
    assert info.value.path == str(path)
    assert str(info.value).startswith(f"{path}: ")
    assert "\n" not in str(info.value)


def test_an_unreadable_profile_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "binary.toml"
    path.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(HardwareProfileError, match="not UTF-8 text"):
        load_profile_file(path)
    with pytest.raises(HardwareProfileError, match="no such file"):
        load_profile_file(tmp_path / "missing.toml")
