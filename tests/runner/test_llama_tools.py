"""llama.cpp's own programs built by the set-up: found, runnable, and RPC devices on loopback.

The tools are built by tasks.py in the same CMake build as the llama-cpp-python wheel
(``GGML_RPC=ON``); these tests use the real programs and the real demo model.
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from runner import llama_tools as lt
from tests.llama_tools import RpcServers, rpc_arg

pytestmark = pytest.mark.engine


def test_every_tool_is_built_for_the_installed_llama_cpp_python(
    llama_tools: lt.LlamaTools,
) -> None:
    from importlib.metadata import version

    assert llama_tools.llama_cpp_python == version("llama-cpp-python")
    assert llama_tools.backend == lt.installed_backend()
    for name in lt.TOOL_NAMES:
        path = llama_tools.path(name)
        assert path.is_file()
        assert path.stat().st_mode & stat.S_IXUSR, f"{path} is not executable"
    assert lt.find_tool("llama-fit-params") == llama_tools.path("llama-fit-params")


def test_the_tools_come_from_the_build_of_the_installed_wheel(llama_tools: lt.LlamaTools) -> None:
    lib_dir = lt.installed_llama_lib_dir()
    assert lib_dir is not None
    assert lt._same_build(llama_tools.folder, lib_dir), (
        f"{llama_tools.folder} does not carry the installed libllama of {lib_dir}"
    )


_RPC_PROBE = """
import ctypes
from llama_cpp import llama_cpp as bindings
from llama_cpp._ctypes_extensions import load_shared_library
ggml = load_shared_library("ggml", bindings._base_path)
vp = ctypes.c_void_p
ggml.ggml_backend_reg_by_name.restype = vp
ggml.ggml_backend_reg_by_name.argtypes = [ctypes.c_char_p]
ggml.ggml_backend_reg_get_proc_address.restype = vp
ggml.ggml_backend_reg_get_proc_address.argtypes = [vp, ctypes.c_char_p]
reg = ggml.ggml_backend_reg_by_name(b"RPC")
add = ggml.ggml_backend_reg_get_proc_address(reg, b"ggml_backend_rpc_add_server") if reg else 0
print("reg", bool(reg), "add_server", bool(add), "supports_rpc", bindings.llama_supports_rpc())
"""


def test_installed_libggml_exposes_the_rpc_backend() -> None:
    # In a child: llama_cpp is loaded only in child processes (runner/ rule).
    result = subprocess.run(
        [sys.executable, "-c", _RPC_PROBE], capture_output=True, text=True, timeout=60, check=False
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["reg", "True", "add_server", "True", "supports_rpc", "True"]


def test_two_rpc_servers_are_devices_rpc0_and_rpc1_of_llama_fit_params(
    rpc_servers: RpcServers, llama_tools: lt.LlamaTools, gemma_path: Path
) -> None:
    fit = llama_tools.path("llama-fit-params")
    with rpc_servers(2) as servers:
        assert len({server.port for server in servers}) == 2
        result = subprocess.run(
            [fit, "--rpc", rpc_arg(servers), "-m", gemma_path, "-c", "4096", "-fitp", "on"],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        outputs = [server.output() for server in servers]
    assert result.returncode == 0, result.stderr[-2000:]
    rows = {line.split()[0]: line.split()[1:] for line in result.stdout.splitlines() if line}
    assert set(rows) == {"RPC0", "RPC1", "Host"}, result.stdout
    model = {name: int(values[0]) for name, values in rows.items()}
    assert model["RPC0"] > 0
    assert model["RPC1"] > 0  # the layers are split over both servers
    assert all(len(values) == 3 for values in rows.values())
    for output in outputs:
        assert "Accepted client connection" in output
    for server in servers:
        assert server.process.returncode is not None  # stopped and reaped on leaving


def test_a_server_left_running_is_stopped_by_the_fixture(rpc_servers: RpcServers) -> None:
    manager = rpc_servers(1)
    (server,) = manager.__enter__()  # never left: the fixture's teardown ends it
    assert server.process.poll() is None
    # tests/runner/conftest.py's no-leftover-children check runs after the fixture's
    # teardown and fails this test if the server is still there.


def test_servers_are_capped_in_address_space(rpc_servers: RpcServers) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("RLIMIT_AS is set on Linux only")
    import resource

    with rpc_servers(1, memory_limit=3 << 30) as (server,):
        soft, hard = resource.prlimit(server.process.pid, resource.RLIMIT_AS)
    assert soft == hard == 3 << 30


def test_missing_tools_say_how_to_build_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(lt.ENV_OVERRIDE, raising=False)
    with pytest.raises(lt.LlamaToolMissing, match=r"tasks\.py run") as failure:
        lt.find_tools(tmp_path)
    assert "ggml-rpc-server" in str(failure.value)


def test_tools_of_another_version_or_backend_are_not_used(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(lt.ENV_OVERRIDE, raising=False)
    for name, pin, backend in (("old", "0.0.1", lt.installed_backend()), ("gpu", None, "xpu")):
        folder = tmp_path / "wheels" / name / "tools"
        folder.mkdir(parents=True)
        manifest = {
            "llama_cpp_python": pin or lt._installed_pin(),
            "backend": backend,
            "tools": {tool: tool for tool in lt.TOOL_NAMES},
        }
        (folder / lt.MANIFEST).write_text(json.dumps(manifest), encoding="utf-8")
        for tool in lt.TOOL_NAMES:
            (folder / tool).write_bytes(b"")
    with pytest.raises(lt.LlamaToolMissing):
        lt.find_tools(tmp_path)


def test_the_override_folder_is_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(lt.ENV_OVERRIDE, str(tmp_path))
    (tmp_path / ("ggml-rpc-server.exe" if os.name == "nt" else "ggml-rpc-server")).write_bytes(b"")
    assert lt.find_tool("ggml-rpc-server").parent == tmp_path
    with pytest.raises(lt.LlamaToolMissing, match="llama-fit-params is not in"):
        lt.find_tool("llama-fit-params")
