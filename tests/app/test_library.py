"""Library discovery against store layouts built from their documented formats, with the
real demo models as the files, and the Ollama client against a local HTTP server that
answers as Ollama's docs/api.md shows."""

from __future__ import annotations

import json
import os
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, HTTPServer
from pathlib import Path

import pytest
from gguf import GGUFWriter

from app.sources.demo_models import SMOLLM
from app.sources.library import (
    HeaderCache,
    LibraryRoots,
    add_folder,
    compare_with_ollama,
    scan_library,
    user_folders,
)
from app.sources.ollama_api import ollama_base_url, ollama_status, show_model

MODEL_MEDIA = "application/vnd.ollama.image.model"


def _link(src: Path, dst: Path) -> None:
    dst.parent.mkdir(parents=True, exist_ok=True)
    try:
        os.link(src, dst)
    except OSError:
        dst.symlink_to(src)


def _manifest(path: Path, digest: str, size: int, media: str = MODEL_MEDIA) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(
        json.dumps(
            {
                "schemaVersion": 2,
                "mediaType": "application/vnd.docker.distribution.manifest.v2+json",
                "config": {
                    "mediaType": "application/vnd.docker.container.image.v1+json",
                    "digest": "sha256:" + "0" * 64,
                    "size": 10,
                },
                "layers": [
                    {"mediaType": media, "digest": f"sha256:{digest}", "size": size},
                    {
                        "mediaType": "application/vnd.ollama.image.params",
                        "digest": "sha256:" + "1" * 64,
                        "size": 20,
                    },
                ],
            }
        )
    )


def _roots(**kw: object) -> LibraryRoots:
    return LibraryRoots(**kw)  # type: ignore[arg-type]


def test_ollama_store(tmp_path: Path, smollm_path: Path) -> None:
    models = tmp_path / "ollama"
    _link(smollm_path, models / "blobs" / f"sha256-{SMOLLM.sha256}")
    size = smollm_path.stat().st_size
    mf = models / "manifests"
    _manifest(mf / "registry.ollama.ai" / "library" / "smollm2" / "135m", SMOLLM.sha256, size)
    _manifest(mf / "registry.ollama.ai" / "library" / "smollm2" / "latest", SMOLLM.sha256, size)
    _manifest(mf / "registry.ollama.ai" / "me" / "tiny" / "v1", SMOLLM.sha256, size)
    _manifest(mf / "hf.co" / "org" / "repo" / "Q4_1", SMOLLM.sha256, size)
    (mf / "registry.ollama.ai" / "library" / "broken" / "latest").parent.mkdir(parents=True)
    (mf / "registry.ollama.ai" / "library" / "broken" / "latest").write_text("{not json")
    _manifest(mf / "registry.ollama.ai" / "library" / "gone" / "latest", "a" * 64, 1)
    (models / "blobs" / ("sha256-" + "b" * 64)).write_bytes(b"not a gguf at all" * 10)
    _manifest(mf / "registry.ollama.ai" / "library" / "junk" / "latest", "b" * 64, 170)
    _manifest(
        mf / "registry.ollama.ai" / "library" / "embed" / "latest",
        "c" * 64,
        1,
        media="application/vnd.ollama.image.projector",
    )

    lib = scan_library(_roots(ollama_models=models), cache=HeaderCache(None))
    names = [e.name for e in lib.entries]
    # os.walk order, sorted: hf.co before registry.ollama.ai, library before me
    assert names == ["hf.co/org/repo:Q4_1", "smollm2:135m", "smollm2:latest", "me/tiny:v1"]
    first = lib.entries[0]
    assert first.source == "ollama"
    assert first.architecture == "llama"
    assert first.size_bytes == size
    assert first.duplicate_of is None
    assert all(e.duplicate_of == "hf.co/org/repo:Q4_1" for e in lib.entries[1:])
    messages = {Path(i.path).parent.name: i.message for i in lib.issues}
    assert "broken manifest" in messages["broken"]
    assert "blob" in messages["gone"]
    assert "missing" in messages["gone"]
    assert any(
        m.startswith("junk:latest: not a usable GGUF") and "GGUF" in m
        for m in (i.message for i in lib.issues)
    )
    assert "no application/vnd.ollama.image.model layer" in messages["embed"]


def _tiny_gguf(path: Path, split: tuple[int, int] | None = None) -> None:
    w = GGUFWriter(str(path), "llama")
    w.add_name("tiny")
    w.add_context_length(128)
    if split is not None:
        w.add_uint16("split.no", split[0])
        w.add_uint16("split.count", split[1])
    w.write_header_to_file()
    w.write_kv_data_to_file()
    w.write_tensors_to_file()
    w.close()


def test_lmstudio_folders_shards_and_huggingface_cache(tmp_path: Path, smollm_path: Path) -> None:
    lms = tmp_path / ".lmstudio" / "models"
    _link(smollm_path, lms / "pub" / "SmolLM2-GGUF" / "SmolLM2.Q4_1.gguf")
    shard_dir = lms / "pub" / "Big-GGUF"
    shard_dir.mkdir(parents=True)
    _tiny_gguf(shard_dir / "big-00001-of-00002.gguf", (0, 2))
    _tiny_gguf(shard_dir / "big-00002-of-00002.gguf", (1, 2))
    _tiny_gguf(shard_dir / "half-00001-of-00002.gguf", (0, 2))

    hub = tmp_path / "hub"
    repo = hub / "models--org--SmolLM2-GGUF"
    _link(smollm_path, repo / "blobs" / SMOLLM.sha256)
    for rev in ("a" * 40, "b" * 40):
        snap = repo / "snapshots" / rev / "SmolLM2.Q4_1.gguf"
        snap.parent.mkdir(parents=True)
        snap.symlink_to(Path("..") / ".." / "blobs" / SMOLLM.sha256)

    lib = scan_library(_roots(lmstudio_models=(lms,), huggingface_hub=hub), cache=HeaderCache(None))
    by_name = {e.name: e for e in lib.entries}
    big = by_name["pub/Big-GGUF/big-00001-of-00002.gguf"]
    assert len(big.files) == 2
    assert big.size_bytes == sum(Path(f).stat().st_size for f in big.files)
    smol = by_name["pub/SmolLM2-GGUF/SmolLM2.Q4_1.gguf"]
    assert smol.model_name is not None
    hf = [e for e in lib.entries if e.source == "huggingface"]
    assert [e.name for e in hf] == [
        f"org/SmolLM2-GGUF/SmolLM2.Q4_1.gguf@{'a' * 8}",
        f"org/SmolLM2-GGUF/SmolLM2.Q4_1.gguf@{'b' * 8}",
    ]
    if smol.file_id == hf[0].file_id:  # hard link worked: same file as the LM Studio copy
        assert hf[0].duplicate_of == smol.name
    assert hf[1].duplicate_of in (smol.name, hf[0].name)
    assert any("missing 1 of 2 shards" in i.message for i in lib.issues)


def test_header_cache_reads_each_file_once(tmp_path: Path, smollm_path: Path) -> None:
    folder = tmp_path / "models"
    _link(smollm_path, folder / "a.gguf")
    cache_file = tmp_path / "cache.json"
    cache = HeaderCache(cache_file)
    scan_library(_roots(folders=(folder,)), cache=cache)
    assert cache.reads == 1
    cache.save()
    again = HeaderCache(cache_file)
    lib = scan_library(_roots(folders=(folder,)), cache=again)
    assert again.reads == 0
    assert lib.entries[0].architecture == "llama"
    st = (folder / "a.gguf").stat()
    os.utime(folder / "a.gguf", ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    scan_library(_roots(folders=(folder,)), cache=again)
    assert again.reads == 1


def test_unreadable_folder_is_an_issue_not_a_failure(
    tmp_path: Path, smollm_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    folder = tmp_path / "models"
    _link(smollm_path, folder / "ok" / "a.gguf")
    locked = folder / "locked"
    locked.mkdir()
    real_scandir = os.scandir

    def scandir(path: object) -> object:
        if os.fspath(path) == str(locked):  # type: ignore[call-overload]
            raise PermissionError(13, "Permission denied", str(locked))
        return real_scandir(path)  # type: ignore[call-overload]

    monkeypatch.setattr(os, "scandir", scandir)
    lib = scan_library(_roots(folders=(folder, tmp_path / "gone")), cache=HeaderCache(None))
    assert [e.name for e in lib.entries] == [str(folder / "ok" / "a.gguf")]
    issues = {i.path: i.message for i in lib.issues}
    assert "Permission denied" in issues[str(locked)]
    assert issues[str(tmp_path / "gone")] == "added folder is missing"


@pytest.mark.skipif(os.name == "nt" or os.geteuid() == 0, reason="root reads any folder")
def test_folder_without_permission_is_an_issue(tmp_path: Path) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    locked.chmod(0)
    try:
        lib = scan_library(_roots(folders=(tmp_path,)), cache=HeaderCache(None))
    finally:
        locked.chmod(0o755)
    assert any(i.path == str(locked) for i in lib.issues)


def test_demo_models_are_entries(gemma_path: Path) -> None:
    lib = scan_library(_roots(demo_models=gemma_path.parent), cache=HeaderCache(None))
    entry = lib.find(gemma_path.name)
    assert entry is not None
    assert entry.source == "demo"
    assert entry.architecture == "gemma3"
    assert entry.context_length == 32768


def test_added_folders_are_stored_atomically(tmp_path: Path) -> None:
    config = tmp_path / "cfg" / "library.json"
    assert user_folders(config) == ()
    added = add_folder(tmp_path, config)
    add_folder(tmp_path, config)  # twice: kept once
    assert user_folders(config) == (added,)
    assert json.loads(config.read_text()) == {"folders": [str(added)]}


# --------------------------------------------------------------------------- Ollama server


@pytest.mark.parametrize(
    ("value", "url"),
    [
        ("", "http://127.0.0.1:11434"),
        ("0.0.0.0", "http://127.0.0.1:11434"),
        ("0.0.0.0:1234", "http://127.0.0.1:1234"),
        ("example.com", "http://example.com:11434"),
        ("https://example.com", "https://example.com:443"),
        ("http://[::1]:5000/path", "http://[::1]:5000"),
        ('"127.0.0.1:9"', "http://127.0.0.1:9"),
    ],
)
def test_ollama_host_follows_envconfig(value: str, url: str) -> None:
    assert ollama_base_url({"OLLAMA_HOST": value}) == url


# docs/api.md "List Running Models" and "Show Model Information", plus context_length
# (api/types.go ProcessModelResponse).
PS = {
    "models": [
        {
            "name": "smollm2:135m",
            "model": "smollm2:135m",
            "size": 305_000_000,
            "digest": "2ae6f6dd7a3dd734790bbbf58b8909a606e0e7e97e94b7604e0aa7ae4490e6d8",
            "details": {
                "parent_model": "",
                "format": "gguf",
                "family": "llama",
                "families": ["llama"],
                "parameter_size": "134.52M",
                "quantization_level": "Q4_1",
            },
            "expires_at": "2024-06-04T14:38:31.83753-07:00",
            "size_vram": 0,
            "context_length": 4096,
        }
    ]
}
SHOW = {
    "modelfile": '# Modelfile generated by "ollama show"\nFROM /x\nPARAMETER num_ctx 4096\n',
    "parameters": "\n".join(
        [
            "num_ctx                        4096",
            'stop                           "<|im_end|>"',
            'stop                           "<|endoftext|>"',
        ]
    ),
    "template": "{{ .Prompt }}",
    "details": PS["models"][0]["details"],
    "model_info": {"general.architecture": "llama", "llama.context_length": 8192},
    "capabilities": ["completion"],
}


class _Handler(BaseHTTPRequestHandler):
    def _json(self, body: object) -> None:
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json; charset=utf-8")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:
        if self.path == "/api/ps":
            self._json(PS)
        else:
            self.send_error(404)

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if self.path == "/api/show" and body == {"model": "smollm2:135m"}:
            self._json(SHOW)
        else:
            self.send_error(404, "model not found")

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def ollama_url() -> Iterator[str]:
    server = HTTPServer(("127.0.0.1", 0), _Handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(5)


def test_ollama_ps_and_show(ollama_url: str) -> None:
    status = ollama_status(ollama_url)
    assert status.running
    (m,) = status.models
    assert (m.name, m.size_bytes, m.size_vram_bytes, m.context_length) == (
        "smollm2:135m",
        305_000_000,
        0,
        4096,
    )
    show = show_model("smollm2:135m", ollama_url)
    assert show is not None
    assert show.parameters == {"num_ctx": ("4096",), "stop": ("<|im_end|>", "<|endoftext|>")}
    assert show.model_info["llama.context_length"] == 8192
    assert show_model("nope", ollama_url) is None


def test_no_server_is_quietly_not_running() -> None:
    with HTTPServer(("127.0.0.1", 0), _Handler) as s:
        port = s.server_address[1]  # bound then closed: nothing listens there
    status = ollama_status(f"http://127.0.0.1:{port}")
    assert not status.running
    assert status.error is not None
    assert status.error.startswith("not running")


def test_ggtune_estimate_beside_what_ollama_did(ollama_url: str, smollm_path: Path) -> None:
    (m,) = ollama_status(ollama_url).models
    show = show_model(m.name, ollama_url)
    assert show is not None
    c = compare_with_ollama(m, str(smollm_path), num_parallel=2, parameters=show.parameters)
    assert c.ollama_total_bytes == 305_000_000
    assert c.settings.n_ctx == 4096 * 2  # type: ignore[attr-defined]
    assert c.ggtune_total_bytes > smollm_path.stat().st_size // 2
