"""Set up ggtune and run it, or run all its checks: the README's two commands.

    python3 tasks.py run     # set up, then open the desktop app (the demo model the first time)
    python3 tasks.py test    # set up, then ruff, ruff format, mypy, import-linter, pytest
    python3 tasks.py bundle  # set up, then build the double-click app into dist/

On Windows write ``py tasks.py run``. Only the standard library is used: this runs before
any virtual environment exists. Set-up, each step skipped when already done:

1. ``.venv`` in the repository, made with the Python running this script (3.11 or newer).
2. llama-cpp-python, at the version pinned in pyproject.toml, built once per backend with
   llama.cpp's RPC backend (``GGML_RPC=ON`` plus the backend's flag) into a wheelhouse in
   the user cache folder, ``<cache>/ggtune/wheels/<backend>-<recipe>/``, and reused from
   there by every later set-up, in this clone or another. ``<recipe>`` is a hash of
   everything that decides the build (pin, backend, CMake definitions, tools), so a wheel
   of another configuration (an older one without RPC) is never picked up. The same CMake
   build makes llama.cpp's ``ggml-rpc-server``, ``llama-fit-params`` and
   ``llama-batched-bench`` from the sdist's vendor/llama.cpp (TOOLS_CMAKE); they are kept
   with the libraries they link in ``tools/`` beside the wheel, with a ``manifest.json``
   that runner/llama_tools.py reads. The backend is CUDA when both a CUDA toolkit
   (``nvcc``) and an NVIDIA GPU (``nvidia-smi -L``) are present, Metal on Apple Silicon,
   otherwise CPU; ``GGTUNE_BACKEND=cpu|cuda|metal`` forces one. pip's own wheel cache is
   keyed by the download URL alone, so it would hand a CPU build to a later CUDA set-up:
   hence a wheelhouse per recipe, and no pip cache while building. A lock on the
   wheelhouse makes a second set-up wait for the first one's build instead of building.
3. ``pip install -e .[dev,desktop,desktop-test,package]`` with llama-cpp-python taken from the
   wheelhouse; a stamp in ``.venv`` (hash of pyproject.toml, wheelhouse and Python version)
   skips it next time. ``test`` also makes ``.venv-headless`` with ``.[dev]`` alone (no Qt).
4. The demo and test models, fetched from PyPI by ``python -m app.sources.demo_models``.

``run`` starts the desktop app (``ggtune-desktop``) after checking that Qt can open a
window (ui/desktop/preflight.py: a missing system library is one line naming it and its
install command, not Qt's abort); on Linux without a display (neither ``DISPLAY`` nor
``WAYLAND_DISPLAY`` set) it prints ``ggtune estimate`` for the demo model instead, its
command-line twin.

A failure ends with one line that names the step and how to retry, and the exit status of
the step that failed.
"""

import sys

if sys.version_info < (3, 11):  # noqa: UP036  (runs on old Pythons to say so clearly)
    sys.exit(
        f"ggtune needs Python 3.11 or newer, but {sys.executable} is Python "
        f"{sys.version_info[0]}.{sys.version_info[1]}. Install Python 3.11+ and run this "
        "script with it, e.g. `python3.11 tasks.py run` (Windows: `py -3.11 tasks.py run`)."
    )

import argparse
import contextlib
import dataclasses
import hashlib
import json
import os
import platform
import re
import shutil
import signal
import subprocess
import sysconfig
import tempfile
import time
import tomllib
import zipfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import IO

ROOT = Path(__file__).resolve().parent
WINDOWS = os.name == "nt"
AGAIN = "py tasks.py" if WINDOWS else "python3 tasks.py"

#: Bump to make every existing .venv re-run the install step once.
SETUP_VERSION = "2"
#: pip that understands pyproject-only editable installs (PEP 660) and ``pip wheel -C``.
MIN_PIP = (22, 1)
LLAMA_DIST = "llama-cpp-python"
#: CMake definitions of the llama.cpp build, per backend; every build also gets GGML_RPC
#: (llama.cpp's RPC backend: ggml-rpc-server processes on loopback are GPU-class devices).
BACKEND_DEFINES: Mapping[str, Mapping[str, str]] = {
    "cuda": {"GGML_CUDA": "ON"},
    "metal": {"GGML_METAL": "ON"},
    "cpu": {},
}
COMMON_DEFINES: Mapping[str, str] = {"GGML_RPC": "ON"}
#: llama.cpp's own programs built in the same CMake build as the wheel (the tests' oracles).
LLAMA_TOOLS = ("ggml-rpc-server", "llama-fit-params", "llama-batched-bench")
#: Bump to rebuild every wheelhouse (the folder name is a hash of the whole recipe).
BUILD_RECIPE = "1"
#: Included at the end of llama-cpp-python's top-level ``project(llama_cpp)`` call
#: (CMAKE_PROJECT_llama_cpp_INCLUDE). Its CMakeLists.txt adds vendor/llama.cpp as a
#: subdirectory with LLAMA_BUILD_TOOLS off, and turning that on would add tools/mtmd a
#: second time (the wheel adds it itself). So the three tools are defined here, from the
#: sources and links of their own CMakeLists.txt (tools/rpc, tools/fit-params,
#: tools/batched-bench), deferred to the end of the top-level directory, when the ggml,
#: llama and llama-common targets exist (CMake refuses add_subdirectory there). They link
#: the very libraries the wheel ships; $ORIGIN lets them and those libraries run from one
#: folder once copied out of the build tree.
TOOLS_CMAKE = """\
# Written by ggtune's tasks.py (TOOLS_CMAKE): llama.cpp's ggml-rpc-server, llama-fit-params
# and llama-batched-bench in the same build as the llama-cpp-python wheel.
if(APPLE)
    set(CMAKE_BUILD_RPATH "@loader_path")
elseif(UNIX)
    set(CMAKE_BUILD_RPATH "$ORIGIN")
endif()
function(ggtune_add_llama_tools)
    set(tools "${CMAKE_SOURCE_DIR}/vendor/llama.cpp/tools")
    find_package(Threads REQUIRED)
    add_executable(ggml-rpc-server "${tools}/rpc/rpc-server.cpp")
    target_link_libraries(ggml-rpc-server PRIVATE ggml)
    add_executable(llama-fit-params
        "${tools}/fit-params/main.cpp" "${tools}/fit-params/fit-params.cpp")
    add_executable(llama-batched-bench
        "${tools}/batched-bench/main.cpp" "${tools}/batched-bench/batched-bench.cpp")
    foreach(tool llama-fit-params llama-batched-bench)
        target_link_libraries(${tool} PRIVATE llama-common llama Threads::Threads)
    endforeach()
    foreach(tool ggml-rpc-server llama-fit-params llama-batched-bench)
        target_compile_features(${tool} PRIVATE cxx_std_17)
        set_target_properties(${tool} PROPERTIES RUNTIME_OUTPUT_DIRECTORY "${CMAKE_BINARY_DIR}/bin")
    endforeach()
endfunction()
cmake_language(DEFER DIRECTORY "${CMAKE_SOURCE_DIR}" CALL ggtune_add_llama_tools)
"""
TOOLS_MANIFEST = "manifest.json"
NET = " (pip needs the network to reach PyPI)"


class TaskError(Exception):
    """Report an expected failure: ``str()`` is the line to show, ``code`` the exit status.

    main() adds how to retry; no traceback is shown.
    """

    def __init__(self, message: str, code: int = 1) -> None:
        super().__init__(message)
        self.code = code or 1


@dataclasses.dataclass(frozen=True)
class Check:
    """One command of the test run; any exit status but 0 fails it."""

    name: str
    argv: tuple[str, ...]  # argv[0] is a console script of the leg's virtual environment
    env: Mapping[str, str] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class Leg:
    """A virtual environment with some extras installed, and the checks run inside it.

    Another leg is one more entry in LEGS; the llama-cpp-python wheel is shared through the
    wheelhouse, so a second environment costs a minute, not a build. The main leg has the
    Qt extras (and ``QT_QPA_PLATFORM=offscreen`` in its pytest env); HEADLESS proves the
    core installs and runs without PySide6.
    """

    venv: str
    extras: str
    checks: tuple[Check, ...]


MAIN = Leg(
    venv=".venv",
    extras="dev,desktop,desktop-test,package",
    checks=(
        Check("ruff check", ("ruff", "check", ".")),
        Check("ruff format", ("ruff", "format", "--check", ".")),
        Check("mypy", ("mypy",)),
        Check("import-linter", ("lint-imports",)),
        Check("pytest", ("pytest",), env={"QT_QPA_PLATFORM": "offscreen"}),
    ),
)
#: The core without Qt: ggtune[dev] alone, the app and runner tests (the fast ones).
HEADLESS = Leg(
    venv=".venv-headless",
    extras="dev",
    checks=(
        Check(
            "no Qt in the headless venv",
            (
                "python",
                "-c",
                "import importlib.util, sys; "
                "sys.exit('PySide6 is installed' if importlib.util.find_spec('PySide6') else 0)",
            ),
        ),
        Check("pytest (no Qt)", ("pytest", "tests/app", "tests/runner", "-q", "-m", "not slow")),
    ),
)
LEGS = (MAIN, HEADLESS)


# --- output ----------------------------------------------------------------------------


def say(message: str) -> None:
    print(f"==> {message}", flush=True)


def note(message: str) -> None:
    print(f"    {message}", flush=True)


def run(
    argv: Sequence[str | os.PathLike[str]], *, step: str, cwd: Path | None = None, hint: str = ""
) -> None:
    """Run a command that inherits the terminal; raise TaskError naming ``step`` if it fails."""
    try:
        code = subprocess.run(
            [os.fspath(arg) for arg in argv], cwd=cwd, stdin=subprocess.DEVNULL, check=False
        ).returncode
    except OSError as err:
        raise TaskError(f"{step} failed: cannot run {os.fspath(argv[0])}: {err.strerror}") from err
    if code != 0:
        raise TaskError(f"{step} failed (exit {code}); see the output above{hint}", code)


# --- the virtual environment -----------------------------------------------------------


def venv_exe(venv: Path, name: str) -> Path:
    """Return the path of ``name`` (python, pip, a console script) inside ``venv``."""
    if WINDOWS:
        return venv / "Scripts" / f"{name}.exe"
    return venv / "bin" / name


def venv_python_version(venv: Path) -> tuple[int, int] | None:
    """Read the (major, minor) Python version of ``venv`` from pyvenv.cfg without running it."""
    try:
        text = (venv / "pyvenv.cfg").read_text(encoding="utf-8")
    except OSError:
        return None
    match = re.search(r"^\s*version(?:_info)?\s*=\s*(\d+)\.(\d+)", text, re.MULTILINE)
    return (int(match[1]), int(match[2])) if match else None


def site_packages(venv: Path) -> Path | None:
    found = sorted(venv.glob("Lib/site-packages" if WINDOWS else "lib/python3*/site-packages"))
    return found[0] if found else None


def pip_version(venv: Path) -> tuple[int, ...] | None:
    """Read pip's version from its dist-info folder name (no process started)."""
    packages = site_packages(venv)
    if packages is None or not (packages / "pip").is_dir():
        return None
    for info in packages.glob("pip-*.dist-info"):
        match = re.match(r"pip-(\d+)\.(\d+)", info.name)
        if match:
            return (int(match[1]), int(match[2]))
    return None


def venv_hint() -> str:
    hint = "reinstall Python from python.org (it includes venv and ensurepip)"
    if sys.platform.startswith("linux"):
        hint = "on Debian/Ubuntu install the venv module: sudo apt install python3-venv"
    return hint


def ensure_venv(venv: Path) -> Path:
    """Create ``venv`` with this Python unless a usable one (3.11+, with pip) is there."""
    python = venv_exe(venv, "python")
    version = venv_python_version(venv)
    if python.exists() and version is not None and version >= (3, 11):
        if pip_version(venv) is None:
            say(f"pip is missing from {venv.name}: installing it with ensurepip")
            ensure_pip(python)
        return python
    say(f"creating {venv.name} with Python {platform.python_version()} ({sys.executable})")
    command = [sys.executable, "-m", "venv", str(venv)]
    if venv.exists():
        command.insert(3, "--clear")  # broken, or made by a Python older than 3.11
    try:
        run(command, step="creating the virtual environment")
    except TaskError as err:
        raise TaskError(f"{err}; {venv_hint()}", err.code) from err
    if pip_version(venv) is None:
        ensure_pip(python)
    return python


def ensure_pip(python: Path) -> None:
    try:
        run([python, "-m", "ensurepip", "--upgrade"], step="installing pip into the venv")
    except TaskError as err:
        raise TaskError(f"{err}; {venv_hint()}", err.code) from err


# --- the llama.cpp backend and its wheelhouse -------------------------------------------


def find_nvcc() -> Path | None:
    """Return the CUDA compiler: on PATH, under $CUDA_HOME / $CUDA_PATH, or /usr/local/cuda."""
    found = shutil.which("nvcc")
    if found:
        return Path(found)
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"]
    for root in filter(None, roots):
        candidate = Path(root) / "bin" / ("nvcc.exe" if WINDOWS else "nvcc")
        if candidate.is_file():
            return candidate
    return None


def nvidia_gpu() -> str | None:
    """Return the first GPU line of ``nvidia-smi -L``, or None without a working GPU/driver."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    try:
        result = subprocess.run(
            [smi, "-L"], capture_output=True, text=True, timeout=20, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    gpus = [line for line in result.stdout.splitlines() if line.startswith("GPU ")]
    return gpus[0].strip() if result.returncode == 0 and gpus else None


@dataclasses.dataclass(frozen=True)
class Backend:
    name: str  # cpu, cuda or metal: the wheelhouse folder
    why: str
    nvcc: Path | None = None


def detect_backend() -> Backend:
    forced = os.environ.get("GGTUNE_BACKEND", "").strip().lower()
    if forced:
        if forced not in BACKEND_DEFINES:
            names = ", ".join(BACKEND_DEFINES)
            raise TaskError(f"GGTUNE_BACKEND={forced!r}: use one of {names}")
        return Backend(forced, "forced by GGTUNE_BACKEND", find_nvcc())
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return Backend("metal", "Apple Silicon")
    nvcc = find_nvcc()
    gpu = nvidia_gpu()
    if nvcc and gpu:
        return Backend("cuda", f"{gpu}; CUDA toolkit {nvcc}", nvcc)
    if nvcc:
        return Backend("cpu", f"CUDA toolkit at {nvcc}, but `nvidia-smi -L` lists no GPU")
    if gpu:
        return Backend("cpu", f"{gpu}, but no CUDA toolkit (nvcc); install it for a CUDA build")
    return Backend("cpu", "no NVIDIA GPU with a CUDA toolkit, not Apple Silicon")


def cache_dir() -> Path:
    """Return ggtune's user cache folder; the same as app.paths.cache_dir()."""
    if WINDOWS:
        local = os.environ.get("LOCALAPPDATA") or str(Path.home() / "AppData" / "Local")
        return Path(local) / "ggtune" / "Cache"
    if sys.platform == "darwin":
        return Path.home() / "Library" / "Caches" / "ggtune"
    xdg = os.environ.get("XDG_CACHE_HOME", "").strip()
    return Path(xdg or Path.home() / ".cache") / "ggtune"


def llama_requirement() -> tuple[str, str]:
    """Return (requirement, version) of llama-cpp-python as pinned in pyproject.toml."""
    with (ROOT / "pyproject.toml").open("rb") as handle:
        dependencies = tomllib.load(handle)["project"]["dependencies"]
    for requirement in dependencies:
        match = re.fullmatch(r"llama[-_.]cpp[-_.]python\s*==\s*([\w.]+)", requirement.strip())
        if match:
            return f"{LLAMA_DIST}=={match[1]}", match[1]
    raise TaskError("pyproject.toml must pin llama-cpp-python exactly (llama-cpp-python==X.Y.Z)")


def platform_tag_matches(tag: str) -> bool:
    """Whether a wheel's platform tag fits this machine (enough for a wheel built here)."""
    if tag == "any":
        return True
    here = sysconfig.get_platform().replace("-", "_").replace(".", "_")  # linux_x86_64, ...
    if sys.platform == "darwin":
        arch = platform.machine()
        return tag.startswith("macosx_") and (tag.endswith(f"_{arch}") or "universal" in tag)
    if sys.platform.startswith("linux") and tag.startswith("manylinux"):
        return tag.endswith("_" + here.split("_", 1)[1])  # same architecture
    return tag == here


def find_wheel(wheelhouse: Path, version: str, python: tuple[int, int]) -> Path | None:
    """Return a llama-cpp-python ``version`` wheel in ``wheelhouse`` that fits ``python``."""
    cp = f"cp{python[0]}{python[1]}"
    for wheel in sorted(wheelhouse.glob(f"llama_cpp_python-{version}-*.whl")):
        parts = wheel.stem.split("-")
        if len(parts) < 5:
            continue
        py_tags, abi_tags, plat_tags = (set(p.split(".")) for p in parts[-3:])
        if (
            py_tags & {cp, "py3", f"py{python[0]}{python[1]}"}
            and abi_tags & {cp, "abi3", "none"}
            and any(platform_tag_matches(tag) for tag in plat_tags)
        ):
            return wheel
    return None


def find_compiler() -> str | None:
    if WINDOWS:
        return "MSVC (found by CMake)"  # CMake locates Visual Studio itself
    for name in (os.environ.get("CXX"), "c++", "g++", "clang++"):
        if name and shutil.which(name.split()[0]):
            return name
    return None


@contextlib.contextmanager
def build_lock(wheelhouse: Path) -> Iterator[None]:
    """Hold an exclusive lock on ``wheelhouse`` so two set-ups never build at once."""
    with (wheelhouse / ".build.lock").open("a+b") as handle:
        if not _try_lock(handle):
            say(f"another ggtune set-up is building into {wheelhouse}; waiting for it")
            while not _try_lock(handle):
                time.sleep(2)
        try:
            yield
        finally:
            _unlock(handle)


if sys.platform == "win32":
    import msvcrt

    def _try_lock(handle: IO[bytes]) -> bool:
        try:
            msvcrt.locking(handle.fileno(), msvcrt.LK_NBLCK, 1)
        except OSError:
            return False
        return True

    def _unlock(handle: IO[bytes]) -> None:
        handle.seek(0)
        msvcrt.locking(handle.fileno(), msvcrt.LK_UNLCK, 1)

else:
    import fcntl

    def _try_lock(handle: IO[bytes]) -> bool:
        try:
            fcntl.flock(handle.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            return False
        return True

    def _unlock(handle: IO[bytes]) -> None:
        fcntl.flock(handle.fileno(), fcntl.LOCK_UN)


def foreign_builds(wheelhouse: Path) -> list[int]:
    """Return pids of other ``pip wheel -w <wheelhouse>`` processes (Linux /proc; else [])."""
    proc = Path("/proc")
    if not sys.platform.startswith("linux") or not proc.is_dir():
        return []
    targets = {str(wheelhouse), os.path.realpath(wheelhouse)}
    pids = []
    for entry in proc.iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            args = (entry / "cmdline").read_bytes().decode(errors="replace").split("\0")
        except OSError:
            continue
        building = "wheel" in args and any("pip" in arg for arg in args)
        if building and any(arg.rstrip("/\\") in targets for arg in args):
            pids.append(int(entry.name))
    return pids


def wait_for_foreign_builds(wheelhouse: Path) -> None:
    """Wait while a pip not started by a ggtune set-up builds into ``wheelhouse``."""
    started = time.monotonic()
    report_at = started + 60
    pids = foreign_builds(wheelhouse)
    if pids:
        say(f"pip (pid {pids[0]}) is already building llama-cpp-python into {wheelhouse}")
        note("waiting for it instead of building a second time (Ctrl-C to stop)")
    while pids:
        time.sleep(5)
        pids = foreign_builds(wheelhouse)
        if pids and time.monotonic() >= report_at:
            report_at += 60
            note(f"still waiting ({(time.monotonic() - started) / 60:.0f} min)")


# Build progress lines: make prints "[ 45%] Building ...", ninja "[12/345] Building ...".
PROGRESS = re.compile(r"^\[\s*(\d+)%\]|^\[(\d+)/(\d+)\]")
PIP_LINES = re.compile(r"^\s*(Collecting|Downloading|Building wheel|Created wheel|ERROR)")


def progress_label(text: str) -> str:
    """Shorten a verbose build line to its counter and the file it makes, e.g. "[12/193] ggml.c"."""
    counter, _, rest = text.partition("]")
    target = re.search(r"\s(?:-c|-o|object)\s+(\S+)", rest)  # ninja -v: -c/-o; make: object
    label = os.path.basename(target[1]) if target else rest.strip()
    return f"{counter}] {label}"[:100]


def stop_build(process: subprocess.Popen[str]) -> None:
    """End a build and, on POSIX, every compiler it started (its own process group)."""
    if sys.platform == "win32":
        process.terminate()
    else:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()


def run_build(argv: Sequence[str], env: Mapping[str, str], log_path: Path) -> int:
    """Run the wheel build: full output to ``log_path``, a short progress view on screen."""
    tty = sys.stdout.isatty()
    width = shutil.get_terminal_size().columns - 1
    shown_percent = -1
    # One `with` per resource: this file must parse on old Pythons to say they are too old.
    with log_path.open("w", encoding="utf-8") as log:
        process = subprocess.Popen(
            argv,
            env=dict(env),
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            errors="replace",
            bufsize=1,
            start_new_session=not WINDOWS,  # so that stop_build() can end the whole tree
        )
        assert process.stdout is not None, "stdout is a pipe"
        try:
            for line in process.stdout:
                log.write(line)
                text = line.strip()
                match = PROGRESS.match(text)
                if match:
                    percent = int(match[1]) if match[1] else 100 * int(match[2]) // int(match[3])
                    if tty:
                        shown = f"\r    {progress_label(text)}"[:width]
                        print(shown.ljust(width), end="", flush=True)
                    elif percent // 5 != shown_percent // 5:
                        note(progress_label(text))
                    shown_percent = percent
                elif PIP_LINES.match(text):
                    print(("\n" if tty and shown_percent >= 0 else "") + f"    {text[:150]}")
        except BaseException:  # Ctrl-C above all: never leave a compiler running behind us
            stop_build(process)
            raise
        finally:
            process.stdout.close()
        code = process.wait()
        if tty and shown_percent >= 0:
            print()
    return code


def build_defines(backend: str) -> dict[str, str]:
    """Return the CMake definitions of the llama.cpp build for ``backend``."""
    return {**COMMON_DEFINES, **BACKEND_DEFINES[backend]}


def recipe_key(backend: str, version: str) -> str:
    """Return the short hash of everything that decides what a build makes.

    It names the wheelhouse, so a wheel built by another recipe (an older one without RPC,
    another backend's, other tools) is never picked up.
    """
    recipe = {
        "recipe": BUILD_RECIPE,
        "llama-cpp-python": version,
        "backend": backend,
        "defines": build_defines(backend),
        "tools": LLAMA_TOOLS,
        "tools.cmake": TOOLS_CMAKE,
    }
    return hashlib.sha256(json.dumps(recipe, sort_keys=True).encode()).hexdigest()[:12]


def wheelhouse_of(backend: str, version: str) -> Path:
    """Return ``<cache>/ggtune/wheels/<backend>-<recipe key>``: the wheel and tools/ beside it."""
    return cache_dir() / "wheels" / f"{backend}-{recipe_key(backend, version)}"


def exe_name(tool: str) -> str:
    return f"{tool}.exe" if WINDOWS else tool


def is_shared_library(name: str) -> bool:
    return name.endswith((".so", ".dylib", ".dll")) or ".so." in name


def tools_ready(wheelhouse: Path) -> bool:
    """Whether ``wheelhouse/tools`` holds a manifest and every tool it names."""
    tools = wheelhouse / "tools"
    try:
        manifest = json.loads((tools / TOOLS_MANIFEST).read_text(encoding="utf-8"))
        files = [manifest["tools"][name] for name in LLAMA_TOOLS]
    except (OSError, ValueError, KeyError, TypeError):
        return False
    return all(isinstance(f, str) and (tools / f).is_file() for f in files)


def collect_tools(build_dir: Path, target: Path, manifest: dict[str, object]) -> None:
    """Copy the tools and the shared libraries beside them from the build into ``target``."""
    bin_dirs = [build_dir / "bin", build_dir / "bin" / "Release"]  # Release: Visual Studio
    found = [d for d in bin_dirs if all((d / exe_name(t)).is_file() for t in LLAMA_TOOLS)]
    if not found:
        raise TaskError(
            f"the llama.cpp build made no {', '.join(LLAMA_TOOLS)} in {build_dir / 'bin'}"
        )
    shutil.rmtree(target, ignore_errors=True)
    target.mkdir(parents=True)
    wanted = {exe_name(t) for t in LLAMA_TOOLS}
    for entry in sorted(found[0].iterdir()):
        if entry.name not in wanted and not is_shared_library(entry.name):
            continue
        if entry.is_symlink():  # libggml.so -> libggml.so.0 -> libggml.so.0.25.3
            os.symlink(os.readlink(entry), target / entry.name)
        elif entry.is_file():
            shutil.copy2(entry, target / entry.name)
    manifest["tools"] = {name: exe_name(name) for name in LLAMA_TOOLS}
    text = json.dumps(manifest, indent=2, sort_keys=True) + "\n"
    (target / TOOLS_MANIFEST).write_text(text, encoding="utf-8")


def smoke_test_tools(tools: Path) -> None:
    """Run each tool's --help/--version from ``tools``: they must load their libraries there."""
    for tool, flag in zip(LLAMA_TOOLS, ("--help", "--version", "--version"), strict=True):
        argv = [str(tools / exe_name(tool)), flag]
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, errors="replace", timeout=60, check=False
            )
        except (OSError, subprocess.TimeoutExpired) as err:
            raise TaskError(f"the built {tool} does not start from {tools}: {err}") from err
        if result.returncode != 0:
            last = (result.stderr or result.stdout).strip().splitlines()[-1:] or ["no output"]
            raise TaskError(
                f"the built {tool} does not start from {tools} (exit {result.returncode}): "
                f"{last[0]}"
            )


def wheel_has_rpc(wheel: Path) -> bool:
    with zipfile.ZipFile(wheel) as archive:
        return any("ggml-rpc" in name.rsplit("/", 1)[-1] for name in archive.namelist())


def build_llama(venv: Path, python: Path, backend: Backend, wheelhouse: Path) -> Path:
    """Build llama-cpp-python and llama.cpp's tools for ``backend`` (once); return the wheel.

    One CMake build of the pinned sdist makes both: the wheel (GGML_RPC on, plus the
    backend's flag) and ggml-rpc-server, llama-fit-params and llama-batched-bench from its
    vendor/llama.cpp (TOOLS_CMAKE), copied with the libraries they link to
    ``wheelhouse/tools``.
    """
    requirement, version = llama_requirement()
    venv_version = venv_python_version(venv)
    assert venv_version is not None, "ensure_venv() checked pyvenv.cfg"
    wheelhouse.mkdir(parents=True, exist_ok=True)
    with build_lock(wheelhouse):
        wait_for_foreign_builds(wheelhouse)
        wheel = find_wheel(wheelhouse, version, venv_version)
        if wheel is not None and tools_ready(wheelhouse):
            return wheel  # another set-up built it while this one waited
        compiler = find_compiler()
        if compiler is None:
            hint = (
                "macOS: xcode-select --install"
                if sys.platform == "darwin"
                else "Debian/Ubuntu: sudo apt install build-essential cmake"
            )
            raise TaskError(
                f"building {requirement} needs a C++ compiler and none was found; "
                f"install one ({hint})"
            )
        jobs = os.cpu_count() or 1
        defines = build_defines(backend.name)
        say(f"building {requirement} and llama.cpp's tools for {backend.name.upper()}")
        note(f"once per backend: 8-14 min on 2 shared cores (this machine: {jobs} cores)")
        note(f"the wheel and {', '.join(LLAMA_TOOLS)} are kept in {wheelhouse}")
        note(" ".join(f"-D{name}={value}" for name, value in defines.items()))
        env = dict(os.environ, CMAKE_BUILD_PARALLEL_LEVEL=str(jobs))
        env.pop("CMAKE_ARGS", None)  # only the definitions below
        if backend.name == "cuda" and backend.nvcc and not shutil.which("nvcc"):
            env["CUDACXX"] = str(backend.nvcc)
        log_path = wheelhouse / "build.log"
        staging = Path(tempfile.mkdtemp(prefix=".build-", dir=wheelhouse))
        build_dir = staging / "build"
        include = staging / "ggtune-tools.cmake"
        include.write_text(TOOLS_CMAKE, encoding="utf-8")
        defines["CMAKE_PROJECT_llama_cpp_INCLUDE"] = include.as_posix()
        partial = wheelhouse / ".tools-partial"
        try:
            # --no-cache-dir: pip's wheel cache would hand back a build for another backend.
            argv = [str(python), "-m", "pip", "wheel", "--no-deps", "--no-cache-dir", "--no-input"]
            argv += ["--verbose", "--wheel-dir", str(staging)]
            argv += [f"--config-settings=build-dir={build_dir.as_posix()}"]
            argv += [f"--config-settings=cmake.define.{k}={v}" for k, v in defines.items()]
            argv.append(requirement)
            started = time.monotonic()
            code = run_build(argv, env, log_path)
            if code != 0:
                tail = log_path.read_text(encoding="utf-8", errors="replace").splitlines()[-30:]
                print("\n".join(["    ..."] + [f"    {line}" for line in tail]), file=sys.stderr)
                raise TaskError(
                    f"building {requirement} failed (exit {code}); full log: {log_path}; "
                    "check the network to PyPI and the compiler or CMake error it shows",
                    code,
                )
            minutes = (time.monotonic() - started) / 60
            built = sorted(staging.glob("*.whl"))
            if not built or not wheel_has_rpc(built[0]):
                raise TaskError(f"pip built no {LLAMA_DIST} wheel with RPC; see {log_path}")
            manifest: dict[str, object] = {
                "llama_cpp_python": version,
                "backend": backend.name,
                "recipe": recipe_key(backend.name, version),
                "defines": build_defines(backend.name),
                "wheel": built[0].name,
                "built": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "build_minutes": round(minutes, 1),
            }
            collect_tools(build_dir, partial, manifest)
            shutil.rmtree(build_dir, ignore_errors=True)  # first: no build tree to fall back on
            smoke_test_tools(partial)
            shutil.rmtree(wheelhouse / "tools", ignore_errors=True)
            os.replace(partial, wheelhouse / "tools")
            for wheel_file in built:
                os.replace(wheel_file, wheelhouse / wheel_file.name)  # atomic: never a half wheel
            note(f"built in {minutes:.1f} min")
        finally:
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(partial, ignore_errors=True)
        wheel = find_wheel(wheelhouse, version, venv_version)
        if wheel is None:
            raise TaskError(f"pip built no usable {LLAMA_DIST} wheel; see {log_path}")
        return wheel


# --- set-up ------------------------------------------------------------------------------


def stamp_of(leg: Leg, backend: Backend, venv: Path, wheelhouse: Path) -> str:
    digest = hashlib.sha256()
    parts = (SETUP_VERSION, leg.extras, backend.name, wheelhouse.name)
    for part in (*parts, str(venv_python_version(venv))):
        digest.update(part.encode() + b"\0")
    digest.update((ROOT / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def ensure_leg(leg: Leg) -> Path:
    """Make ``leg``'s virtual environment ready; return its Python."""
    venv = ROOT / leg.venv
    python = ensure_venv(venv)
    backend = detect_backend()
    _, version = llama_requirement()
    wheelhouse = wheelhouse_of(backend.name, version)
    stamp_path = venv / ".ggtune-setup-stamp"
    stamp = stamp_of(leg, backend, venv, wheelhouse)
    try:
        if stamp_path.read_text(encoding="utf-8").strip() == stamp and tools_ready(wheelhouse):
            return python
    except OSError:
        pass
    say(f"llama.cpp backend: {backend.name.upper()} ({backend.why})")
    pip = pip_version(venv)
    if pip is None or pip < MIN_PIP:
        say("upgrading pip in the venv (too old for editable installs and pip wheel -C)")
        run([python, "-m", "pip", "install", "--upgrade", "pip"], step="upgrading pip", hint=NET)
    venv_version = venv_python_version(venv)
    assert venv_version is not None, "ensure_venv() checked pyvenv.cfg"
    wheel = find_wheel(wheelhouse, version, venv_version)
    if wheel is None or not tools_ready(wheelhouse):
        wheel = build_llama(venv, python, backend, wheelhouse)
    else:
        note(f"reusing {wheel} and {wheelhouse / 'tools'}")
    say(f"installing {wheel.name} and ggtune[{leg.extras}] into {leg.venv}")
    pip_install = [str(python), "-m", "pip", "install", "--no-input"]
    # Replace whatever llama-cpp-python is there (maybe another backend's) with this one...
    run(
        [*pip_install, "--no-deps", "--force-reinstall", str(wheel)],
        step="installing llama-cpp-python",
        hint=NET,
    )
    # ...and never let pip fall back to building the sdist without our definitions.
    only_wheel = ["--find-links", str(wheelhouse), f"--only-binary={LLAMA_DIST}"]
    run(
        [*pip_install, *only_wheel, "--editable", f".[{leg.extras}]"],
        step=f"installing ggtune[{leg.extras}]",
        cwd=ROOT,
        hint=NET,
    )
    stamp_path.write_text(stamp + "\n", encoding="utf-8")
    return python


def fetch_models(python: Path) -> dict[str, Path]:
    """Fetch the demo/test models (instant when cached); return them by name."""
    step = "fetching the demo models from PyPI"
    try:
        result = subprocess.run(
            [str(python), "-m", "app.sources.demo_models"],
            cwd=ROOT,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            text=True,
            check=False,
        )
    except OSError as err:
        raise TaskError(f"{step} failed: {err.strerror}") from err
    if result.returncode != 0:
        raise TaskError(f"{step} failed (exit {result.returncode}); see the message above")
    models = {}
    for line in result.stdout.splitlines():
        name, sep, path = line.partition(": ")
        if sep:
            models[name.strip()] = Path(path.strip())
    if "gemma" not in models:
        raise TaskError(f"{step}: app.sources.demo_models printed no gemma path")
    return models


def activated_env(venv: Path, extra: Mapping[str, str]) -> dict[str, str]:
    bin_dir = venv_exe(venv, "python").parent
    env = dict(os.environ, VIRTUAL_ENV=str(venv), **extra)
    env["PATH"] = os.pathsep.join([str(bin_dir), env.get("PATH", "")])
    env.pop("PYTHONHOME", None)
    return env


# --- the commands ------------------------------------------------------------------------


def has_display() -> bool:
    """Whether a window can open: on Linux and the BSDs, an X11 or Wayland display is set."""
    if sys.platform.startswith(("linux", "freebsd", "openbsd", "netbsd")):
        return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
    return True  # Windows and macOS always have a desktop


def gui_preflight(venv: Path) -> None:
    """Raise TaskError with ui/desktop/preflight.py's one line if Qt cannot open a window.

    Qt itself would abort (SIGABRT) on a missing xcb library; the line names the libraries
    and the command that installs them.
    """
    python = venv_exe(venv, "python")
    try:
        result = subprocess.run(
            [str(python), "-m", "ui.desktop.preflight"],
            cwd=ROOT,
            env=activated_env(venv, {}),
            capture_output=True,
            text=True,
            errors="replace",
            timeout=60,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as err:
        raise TaskError(f"checking that the desktop app can start failed: {err}") from err
    if result.returncode != 0:
        lines = (result.stderr or result.stdout).strip().splitlines() or ["no output"]
        line = lines[-1].removeprefix("ggtune: ").rstrip(".")
        raise TaskError(line, result.returncode)


def command_run() -> int:
    started = time.monotonic()
    python = ensure_leg(MAIN)
    models = fetch_models(python)
    say(f"set-up done in {time.monotonic() - started:.1f} s")
    venv = ROOT / MAIN.venv
    if has_display():
        gui_preflight(venv)
        say("starting the desktop app (ggtune-desktop); close its window to finish")
        argv = [str(venv_exe(venv, "ggtune-desktop"))]
        step = "ggtune-desktop"
    else:
        say("no display (neither DISPLAY nor WAYLAND_DISPLAY is set): showing the CLI estimate")
        note("the desktop app needs a display; `ggtune estimate` is its command-line twin")
        argv = [str(venv_exe(venv, "ggtune")), "estimate", str(models["gemma"])]
        step = "ggtune estimate"
        say(f"ggtune estimate {models['gemma']}")
    try:
        code = subprocess.run(argv, cwd=ROOT, env=activated_env(venv, {}), check=False).returncode
    except OSError as err:
        raise TaskError(f"{step} failed to start: {err.strerror}") from err
    if code != 0:
        raise TaskError(f"{step} failed (exit {code}); see the output above", code)
    return 0


def command_test() -> int:
    started = time.monotonic()
    ready = [(leg, ensure_leg(leg)) for leg in LEGS]
    fetch_models(ready[0][1])
    say(f"set-up done in {time.monotonic() - started:.1f} s")
    for leg, _ in ready:
        venv = ROOT / leg.venv
        for check in leg.checks:
            argv = [str(venv_exe(venv, check.argv[0])), *check.argv[1:]]
            say(f"{' '.join(check.argv)}  ({leg.venv})")
            try:
                code = subprocess.run(
                    argv, cwd=ROOT, env=activated_env(venv, check.env), check=False
                ).returncode
            except OSError as err:
                raise TaskError(f"check '{check.name}' could not start: {err.strerror}") from err
            if code == 5 and check.argv[0] == "pytest":
                raise TaskError("pytest collected no tests (exit 5): that is a failure here", 5)
            if code != 0:
                raise TaskError(f"check '{check.name}' failed (exit {code})", code)
    say(f"all checks passed in {time.monotonic() - started:.0f} s")
    return 0


def command_bundle() -> int:
    """Set up, then build the double-click app for this OS into dist/ (packaging/build.py)."""
    python = ensure_leg(MAIN)
    say("building the app bundle with PyInstaller (packaging/build.py)")
    run([python, ROOT / "packaging" / "build.py"], step="building the bundle", cwd=ROOT)
    return 0


COMMANDS = {"run": command_run, "test": command_test, "bundle": command_bundle}


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog=AGAIN, description="Set up ggtune (venv, llama.cpp, demo models) and run or test it."
    )
    parser.add_argument(
        "command",
        choices=tuple(COMMANDS),
        help="run: open the desktop app (no display: the CLI estimate); test: run every "
        "check; bundle: build the double-click app into dist/",
    )
    args = parser.parse_args(argv)
    again = f"{AGAIN} {args.command}"
    try:
        return COMMANDS[args.command]()
    except TaskError as err:
        print(f"\nggtune: {err}. Fix that, then run `{again}` again.", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        print(f"\nggtune: interrupted; run `{again}` to continue", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
