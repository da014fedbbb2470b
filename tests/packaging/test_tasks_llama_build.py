"""tasks.py's llama.cpp build recipe: a wheelhouse per configuration, tools beside the wheel.

The build itself (minutes) is what ``python3 tasks.py test`` runs before these tests; they
check the bookkeeping that decides whether a second set-up builds anything.
"""

from __future__ import annotations

import importlib.util
import json
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def tasks() -> ModuleType:
    spec = importlib.util.spec_from_file_location("ggtune_tasks", ROOT / "tasks.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["ggtune_tasks"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def test_every_backend_builds_with_rpc(tasks: ModuleType) -> None:
    for backend in tasks.BACKEND_DEFINES:
        assert tasks.build_defines(backend)["GGML_RPC"] == "ON"
    assert tasks.build_defines("cuda")["GGML_CUDA"] == "ON"


def test_the_wheelhouse_changes_with_the_build_configuration(
    tasks: ModuleType, monkeypatch: pytest.MonkeyPatch
) -> None:
    keys = {b: tasks.recipe_key(b, "0.3.36") for b in tasks.BACKEND_DEFINES}
    assert len(set(keys.values())) == len(keys)
    assert tasks.recipe_key("cpu", "0.3.37") != keys["cpu"]
    monkeypatch.setattr(tasks, "COMMON_DEFINES", {})  # the old recipe: no RPC
    assert tasks.recipe_key("cpu", "0.3.36") != keys["cpu"]
    monkeypatch.undo()
    monkeypatch.setattr(tasks, "TOOLS_CMAKE", tasks.TOOLS_CMAKE + "# changed\n")
    assert tasks.recipe_key("cpu", "0.3.36") != keys["cpu"]
    home = tasks.wheelhouse_of("cpu", "0.3.36")
    assert home.parent == tasks.cache_dir() / "wheels"
    assert home.name.startswith("cpu-")


def test_the_tools_cmake_builds_the_three_tools_in_bin(tasks: ModuleType) -> None:
    for tool in tasks.LLAMA_TOOLS:
        assert f"add_executable({tool}" in tasks.TOOLS_CMAKE
    assert "GGML_RPC" not in tasks.TOOLS_CMAKE  # that is a definition, passed to pip
    assert "RUNTIME_OUTPUT_DIRECTORY" in tasks.TOOLS_CMAKE


@pytest.mark.skipif(os.name == "nt", reason="symlinks")
def test_collected_tools_keep_library_links_and_are_ready(
    tasks: ModuleType, tmp_path: Path
) -> None:
    bin_dir = tmp_path / "build" / "bin"
    bin_dir.mkdir(parents=True)
    for tool in tasks.LLAMA_TOOLS:
        (bin_dir / tool).write_bytes(b"tool")
    (bin_dir / "libllama.so.0.5.0").write_bytes(b"lib")
    (bin_dir / "libllama.so.0").symlink_to("libllama.so.0.5.0")
    (bin_dir / "notes.txt").write_text("left out")
    wheelhouse = tmp_path / "house"
    assert not tasks.tools_ready(wheelhouse)
    tasks.collect_tools(tmp_path / "build", wheelhouse / "tools", {"backend": "cpu"})
    tools = wheelhouse / "tools"
    assert (tools / "libllama.so.0").is_symlink()
    assert not (tools / "notes.txt").exists()
    manifest = json.loads((tools / "manifest.json").read_text())
    assert manifest["tools"] == {t: t for t in tasks.LLAMA_TOOLS}
    assert tasks.tools_ready(wheelhouse)
    (tools / "llama-fit-params").unlink()
    assert not tasks.tools_ready(wheelhouse)


def test_the_installed_wheel_came_from_its_recipe_wheelhouse(tasks: ModuleType) -> None:
    from importlib.metadata import version

    from runner.llama_tools import find_tools

    tools = find_tools()
    assert tools.folder.parent == tasks.wheelhouse_of(tools.backend, version("llama-cpp-python"))
