"""Find llama.cpp's own programs that the set-up builds beside the llama-cpp-python wheel.

``python3 tasks.py run|test`` builds llama-cpp-python (with llama.cpp's RPC backend,
``GGML_RPC=ON``) and, in the same CMake build of the pinned sdist's vendor/llama.cpp,
three of llama.cpp's tools: ``ggml-rpc-server`` (exposes this machine's devices to another
llama.cpp over TCP; two on 127.0.0.1 appear to llama.cpp as devices RPC0 and RPC1),
``llama-fit-params`` (llama.cpp's own fitter; ``-fitp on`` prints its MiB per device) and
``llama-batched-bench``. They are kept, with the shared libraries they link, in
``<cache>/ggtune/wheels/<backend>-<recipe>/tools/`` next to the wheel, with a
``manifest.json`` naming the llama-cpp-python version, the backend and the tools.

:func:`find_tools` picks the folder built for the llama-cpp-python installed here (its
version and backend); :func:`find_tool` returns one program. When none was built they
raise :class:`LlamaToolMissing`, whose message says how to build it. ``GGTUNE_LLAMA_TOOLS``
may name a folder holding the programs instead (built by hand, e.g. with llama.cpp's own
``cmake -DGGML_RPC=ON``).

Nothing here imports llama_cpp or starts a process: the tools run as child processes of
whoever calls them (the tests' fixtures in tests/llama_tools.py, the runner).

Example::

    >>> find_tool("ggml-rpc-server")                        # doctest: +SKIP
    PosixPath('/home/me/.cache/ggtune/wheels/cpu-a762cede42fa/tools/ggml-rpc-server')
"""

from __future__ import annotations

import importlib.util
import json
import os
import struct
import sys
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Final, Literal, get_args

from app.paths import cache_dir

__all__ = [
    "TOOL_NAMES",
    "LlamaToolMissing",
    "LlamaTools",
    "ToolName",
    "find_tool",
    "find_tools",
    "installed_backend",
    "installed_llama_lib_dir",
]

ToolName = Literal["ggml-rpc-server", "llama-fit-params", "llama-batched-bench"]
TOOL_NAMES: Final[tuple[ToolName, ...]] = get_args(ToolName)
Backend = Literal["cpu", "cuda", "metal"]

ENV_OVERRIDE: Final = "GGTUNE_LLAMA_TOOLS"
MANIFEST: Final = "manifest.json"
_HOW_TO_BUILD: Final = (
    "run `python3 tasks.py run` (or `python3 tasks.py test`) in the ggtune checkout: it "
    "builds them once per backend beside the llama-cpp-python wheel, or set "
    f"{ENV_OVERRIDE} to a folder holding them"
)


class LlamaToolMissing(RuntimeError):
    """A llama.cpp tool is not built for the installed llama-cpp-python; says how to build it."""

    def __init__(self, message: str, *, tool: str | None = None) -> None:
        super().__init__(message)
        self.tool = tool


@dataclass(frozen=True)
class LlamaTools:
    """One folder of llama.cpp programs and what they were built from."""

    folder: Path
    llama_cpp_python: str
    backend: str
    recipe: str
    paths: dict[ToolName, Path]

    def path(self, name: ToolName) -> Path:
        """Return the program ``name``; raise :class:`LlamaToolMissing` if it is not there."""
        found = self.paths.get(name)
        if found is None or not found.is_file():
            raise LlamaToolMissing(f"{name} is not in {self.folder}; {_HOW_TO_BUILD}", tool=name)
        return found


def _exe(name: str) -> str:
    return f"{name}.exe" if sys.platform == "win32" else name


def installed_llama_lib_dir() -> Path | None:
    """Return the ``llama_cpp/lib`` folder of the installed llama-cpp-python (not imported)."""
    try:
        spec = importlib.util.find_spec("llama_cpp")
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    for location in spec.submodule_search_locations:
        lib = Path(location) / "lib"
        if lib.is_dir():
            return lib
    return None


def installed_backend(lib_dir: Path | None = None) -> Backend:
    """Return the backend the installed llama-cpp-python was built for, from its libraries.

    ``libggml-cuda`` means CUDA, ``libggml-metal`` Metal, neither the CPU build (the only
    backends tasks.py builds).
    """
    lib = lib_dir if lib_dir is not None else installed_llama_lib_dir()
    names = [entry.name for entry in lib.iterdir()] if lib is not None and lib.is_dir() else []
    if any("ggml-cuda" in name for name in names):
        return "cuda"
    if any("ggml-metal" in name for name in names):
        return "metal"
    return "cpu"


def _installed_pin() -> str:
    try:
        return version("llama-cpp-python")
    except PackageNotFoundError as err:
        raise LlamaToolMissing(f"llama-cpp-python is not installed; {_HOW_TO_BUILD}") from err


def _read_manifest(folder: Path) -> dict[str, object] | None:
    try:
        data = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def _tools_of(folder: Path, manifest: dict[str, object]) -> LlamaTools | None:
    listed = manifest.get("tools")
    if not isinstance(listed, dict):
        return None
    paths = {name: folder / str(listed[name]) for name in TOOL_NAMES if name in listed}
    return LlamaTools(
        folder=folder,
        llama_cpp_python=str(manifest.get("llama_cpp_python", "")),
        backend=str(manifest.get("backend", "")),
        recipe=str(manifest.get("recipe", "")),
        paths=paths,
    )


_BUILD_ID_NOTE: Final = struct.pack("<III", 4, 20, 3) + b"GNU\0"  # NT_GNU_BUILD_ID, SHA-1


def build_id(path: Path) -> str | None:
    """Return the GNU build ID of an ELF file (hex), or None (none, unreadable, not ELF).

    The installed wheel's libraries are stripped copies of the build's, so their bytes
    differ but the linker's build ID note is the same.
    """
    try:
        with path.open("rb") as handle:
            head = handle.read(1 << 16)  # the note sits in the first pages
    except OSError:
        return None
    where = head.find(_BUILD_ID_NOTE) if head[:4] == b"\x7fELF" else -1
    if where < 0:
        return None
    start = where + len(_BUILD_ID_NOTE)
    return head[start : start + 20].hex()


def _same_build(folder: Path, lib_dir: Path | None) -> bool:
    """Whether ``folder`` carries the libllama of the installed wheel's build (same build ID)."""
    if lib_dir is None:
        return False
    mine, theirs = build_id(folder / "libllama.so"), build_id(lib_dir / "libllama.so")
    return mine is not None and mine == theirs


def _override() -> LlamaTools | None:
    raw = os.environ.get(ENV_OVERRIDE, "").strip()
    if not raw:
        return None
    folder = Path(raw).expanduser()
    if not folder.is_dir():
        raise LlamaToolMissing(f"{ENV_OVERRIDE}={raw} is not a folder")
    manifest = _read_manifest(folder)
    if manifest is not None:
        tools = _tools_of(folder, manifest)
        if tools is not None:
            return tools
    paths = {name: folder / _exe(name) for name in TOOL_NAMES}
    return LlamaTools(folder, llama_cpp_python="", backend="", recipe="", paths=paths)


def find_tools(cache: Path | None = None) -> LlamaTools:
    """Return the tools built for the installed llama-cpp-python's version and backend.

    ``cache`` is ggtune's cache folder (default :func:`app.paths.cache_dir`). Among several
    matching folders the one from the same build as the installed wheel wins (its libllama
    has the installed one's build ID), else the newest. Raises
    :class:`LlamaToolMissing` when there is none.
    """
    override = _override()
    if override is not None:
        return override
    pin = _installed_pin()
    lib_dir = installed_llama_lib_dir()
    backend = installed_backend(lib_dir)
    root = (cache if cache is not None else cache_dir()) / "wheels"
    candidates: list[tuple[bool, float, LlamaTools]] = []
    for manifest_path in root.glob(f"*/tools/{MANIFEST}"):
        folder = manifest_path.parent
        manifest = _read_manifest(folder)
        if manifest is None:
            continue
        if manifest.get("llama_cpp_python") != pin or manifest.get("backend") != backend:
            continue
        tools = _tools_of(folder, manifest)
        if tools is None:
            continue
        candidates.append((_same_build(folder, lib_dir), manifest_path.stat().st_mtime, tools))
    if not candidates:
        raise LlamaToolMissing(
            f"llama.cpp's tools ({', '.join(TOOL_NAMES)}) are not built for "
            f"llama-cpp-python {pin} ({backend.upper()}) in {root}; {_HOW_TO_BUILD}"
        )
    candidates.sort(key=lambda c: (c[0], c[1]))
    return candidates[-1][2]


def find_tool(name: ToolName, cache: Path | None = None) -> Path:
    """Return the path of llama.cpp's program ``name`` (see :func:`find_tools`)."""
    if name not in TOOL_NAMES:
        raise LlamaToolMissing(f"unknown llama.cpp tool {name!r}: one of {TOOL_NAMES}")
    return find_tools(cache).path(name)
