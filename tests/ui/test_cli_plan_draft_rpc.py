"""ggtune recommend/plan with --draft and --rpc-host: the verdict, memory per machine, commands."""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest

from ui.cli.main import run


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict[str, Any]:
    assert run(list(argv)) == 0
    data = json.loads(capsys.readouterr().out)
    assert isinstance(data, dict)
    return data


def test_recommend_with_a_draft_that_pays_off(capsys: pytest.CaptureFixture[str]) -> None:
    # 8B F16 target on an RTX 4090, the 3B catalog model (F16, 6 GiB) as the draft: ~2.5×
    # faster at best — the verdict, either way, comes with its reason and numbers
    data = run_json(
        capsys, "recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--profile",
        "rtx-4090", "--ram", "64", "--no-simulate", "--draft", "catalog:llama-3.2-3b", "--json",
    )  # fmt: skip
    d = data["draft"]
    assert d["model"] == "catalog:llama-3.2-3b"
    assert isinstance(d["used"], bool)
    assert d["speed_ratio"] > 1
    assert "#5877" in d["why"]
    assert data["goal"]["draft"] == "catalog:llama-3.2-3b"
    assert "CUDA0" in d["devices"]
    if not d["used"]:
        assert "too slow" in d["why"] or "speed-up" in d["why"]
        assert "-md" not in data["command"]


def test_recommend_draft_used_prints_the_flags(capsys: pytest.CaptureFixture[str]) -> None:
    # 70B F16 (131 GiB) on two 96 GiB GPUs with the 8B F16 (15 GiB) as the draft: the draft
    # decodes ~9× faster, so at α = 0.7 it pays off (×1.9) and its flags are printed
    assert run(["recommend", "catalog:llama-3.1-70b", "--goal", "fastest", "--gpu-mem", "96",
                "96", "--ram", "64", "--no-simulate", "--any-quant", "--draft",
                "catalog:llama-3.1-8b"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "Draft model Llama-3.1-8B: used" in out
    assert "Leviathan" in out
    assert "#10455" in out
    line = out.split("on this machine:\n", 1)[1].splitlines()[0]
    argv = shlex.split(line)
    assert argv[argv.index("-md") + 1] == "catalog:llama-3.1-8b"
    assert argv[argv.index("--spec-type") + 1] == "draft-simple"
    assert argv[argv.index("-ngld") + 1] == "all"
    assert int(argv[argv.index("--spec-draft-n-max") + 1]) >= 1


def test_recommend_split_over_rpc_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "recommend", "catalog:llama-3.1-70b", "--goal", "fastest", "--profile",
        "rtx-4090", "--ram", "64", "--no-simulate", "--any-quant", "--kv-types", "q8_0",
        "--rpc-host", "rtx-3090:80GB@10.0.0.2:50052", "--rpc-host", "rtx-3090:80GB",
        "--json",
    )  # fmt: skip
    # F16 70B (131 GiB) over 23 + 2 × 80 GiB (overridden sizes) of GPU memory
    rpc = data["rpc"]
    assert [m["machine"] for m in rpc["machines"]] == [
        "10.0.0.2:50052",
        "remote2:50052",
        "this machine",
    ]
    assert data["goal"]["rpc_hosts"] == ["10.0.0.2:50052", "remote2:50052"]
    # an IPv4 address is bound as given; a name (remote2) cannot be (-H takes no names)
    assert rpc["remote_commands"] == [
        "ggml-rpc-server -H 10.0.0.2 -p 50052 -c",
        "ggml-rpc-server -H 0.0.0.0 -p 50052 -c",
    ]
    assert rpc["traffic"]["round_trips"] == len(rpc["traffic"]["machines"])
    assert rpc["traffic"]["complete"]
    assert "never expose" in rpc["security"]
    argv = shlex.split(data["command"])
    assert argv[argv.index("--rpc") + 1] == "10.0.0.2:50052,remote2:50052"
    assert [d["name"] for d in data["best"]["devices"]] == ["RPC0", "RPC1", "CUDA0", "CPU"]
    assert data["best"]["all_on_gpu"]


def test_recommend_rpc_text_prints_the_commands(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["recommend", "catalog:llama-3.1-8b", "--goal", "fastest", "--profile",
                "rtx-3060-12g", "--ram", "64", "--rpc-host", "rtx-3060-12g@192.168.1.9:50053",
                "--link-gbps", "10"]) == 0  # fmt: skip
    out = capsys.readouterr().out
    assert "192.168.1.9:50053:  ggml-rpc-server -H 192.168.1.9 -p 50053 -c" in out
    assert "10 Gbit/s" in out
    main = out.split("on this machine:\n", 1)[1].splitlines()[0]
    argv = shlex.split(main)
    assert argv[0] == "llama-server"
    assert argv[argv.index("--rpc") + 1] == "192.168.1.9:50053"


def test_plan_accepts_rpc_hosts(capsys: pytest.CaptureFixture[str]) -> None:
    data = run_json(
        capsys, "plan", "catalog:llama-3.1-8b", "--users", "4", "--ctx", "4096", "--min-tps",
        "5", "--profile", "rtx-3060-12g", "--ram", "64", "--rpc-host", "rtx-3090", "--json",
    )  # fmt: skip
    assert data["max_users"] >= 4
    names = [d["name"] for d in data["plan"]["devices"]]
    assert names[0] == "RPC0"


def test_bad_rpc_endpoint_is_an_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["recommend", "catalog:smollm2-135m", "--goal", "fastest", "--profile",
                "rtx-3060-12g", "--rpc-host", "rtx-3090@nohost"]) != 0  # fmt: skip
