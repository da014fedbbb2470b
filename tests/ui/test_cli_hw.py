"""``ggtune hw`` and ``--profile``, as a user types them."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest

from app.units import GIB
from ui.cli.main import run


@pytest.fixture(autouse=True)
def _own_dirs(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Keep the bandwidth cache and the user's profiles of these tests in tmp_path."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> object:
    assert run(list(argv)) == 0
    return json.loads(capsys.readouterr().out)


def test_hw_json_reports_this_machine_and_every_probe(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    data = run_json(capsys, "hw", "--json", "--no-engine")
    assert isinstance(data, dict)
    assert set(data) >= {"host", "host_bandwidth", "gpus", "probes", "engine", "hardware", "notes"}
    assert data["host"]["ram_total_bytes"] == psutil.virtual_memory().total
    assert data["host"]["logical_cores"] == psutil.cpu_count()
    probes = {p["probe"]: p for p in data["probes"]}
    assert {"host", "nvidia", "apple", "drm", "host bandwidth"} <= set(probes)
    for p in data["probes"]:
        assert p["state"] in ("ok", "none", "unknown")
        assert p["detail"]
    # measured once, into the cache dir of this test
    assert data["host_bandwidth"]["gb_per_s"] > 0
    assert not data["host_bandwidth"]["cached"]
    assert (tmp_path / "cache" / "ggtune" / "hardware" / "host-bandwidth.json").is_file()
    again = run_json(capsys, "hw", "--json", "--no-engine")
    assert isinstance(again, dict)
    assert again["host_bandwidth"]["cached"]
    assert again["hardware"]["host"]["bandwidth_gb_per_s"] == data["host_bandwidth"]["gb_per_s"]
    assert data["engine"] is None


@pytest.mark.engine
def test_hw_shows_llama_cpps_devices_beside_the_probes(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert run(["hw"]) == 0
    out = capsys.readouterr().out
    assert "probes" in out
    assert "nvidia" in out
    assert "llama.cpp devices (llama-cpp-python" in out
    assert "as the estimator sees it" in out
    data = run_json(capsys, "hw", "--json")
    assert isinstance(data, dict)
    names = [d["name"] for d in data["engine"]["devices"]]
    assert "CPU" in names
    ours = {d["name"] for d in data["hardware"]["gpus"]}
    # every GPU ggtune gives the estimator is one llama.cpp has, or a note says why not
    for name in ours - set(names):
        assert any(name in note for note in data["notes"])


def test_hw_profiles_lists_every_profile_with_sources(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["hw", "--profiles"]) == 0
    out = capsys.readouterr().out
    assert "rtx-3090" in out
    assert "m4-max-40c" in out
    rows = run_json(capsys, "hw", "--profiles", "--json")
    assert isinstance(rows, list)
    assert len(rows) >= 30
    for r in rows:
        for key in ("memory_gib", "bandwidth_gb_per_s", "usable_fraction", "fp16_tflops"):
            assert r[key]["source"]
        # the INT8 rate the speed model prices quantized prefill by (NVIDIA), with its source
        assert r["int8_tops"] is None or (r["int8_tops"]["value"] > 0 and r["int8_tops"]["source"])
    by_id = {r["id"]: r for r in rows}
    assert by_id["rtx-3090"]["int8_tops"]["value"] > 0
    assert by_id["m4-max-40c"]["int8_tops"] is None


def test_hw_profile_shows_a_composition(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(capsys, "hw", "--profile", "2x rtx-3090 + 64 GB DDR5", "--json")
    assert isinstance(data, dict)
    assert [g["name"] for g in data["gpus"]] == ["CUDA0", "CUDA1"]
    assert data["host"]["memory_bytes"] == 64 * GIB
    assert run(["hw", "--profile", "m2-max:64GB"]) == 0
    out = capsys.readouterr().out
    assert "MTL0" in out
    assert "48.00 GiB" in out


def test_estimate_plans_for_a_profile(
    smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    data = run_json(capsys, "estimate", str(smollm_path), "--profile", "rtx-3060-12g", "--json")
    assert isinstance(data, dict)
    devices = {d["name"]: d for d in data["devices"]}
    assert set(devices) == {"CUDA0", "CPU"}
    assert devices["CUDA0"]["capacity_bytes"] == int(12 * GIB * 0.9167)
    assert devices["CUDA0"]["fits"] is True
    assert devices["CPU"]["capacity_bytes"] is not None  # this machine's host
    mac = run_json(capsys, "estimate", str(smollm_path), "--profile", "m1:8GB", "--json")
    assert isinstance(mac, dict)
    assert {d["name"]: d["capacity_bytes"] for d in mac["devices"]} == {
        "MTL0": 5726633984,  # 8 GiB × 2/3, rounded up to a 16 KiB page
        "CPU": 8 * GIB,
    }


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["hw", "--profile", "rtx-309"], "did you mean rtx-3090"),
        (["hw", "--profile", "m2-max + 32GB"], "both describe the host"),
    ],
)
def test_profile_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_profile_and_gpu_mem_together_are_refused(
    smollm_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["estimate", str(smollm_path), "--profile", "rtx-4090", "--gpu-mem", "8"]
    assert run(argv) == 2
    assert "--profile and --gpu-mem" in capsys.readouterr().err


def test_a_bad_user_profile_names_the_file(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = tmp_path / "config" / "ggtune" / "profiles"
    folder.mkdir(parents=True)
    (folder / "broken.toml").write_text('[[profile]]\nid = "x"\n')
    assert run(["hw", "--profiles"]) == 2
    err = capsys.readouterr().err
    assert f"{folder / 'broken.toml'}: profile 'x' (#1): missing name" in err
