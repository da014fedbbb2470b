"""A local stand-in for the Hugging Face hub and for plain HTTP file servers, for tests.

:class:`FakeHub` runs a ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port) that serves:

- ``/api/models?search=WORDS&filter=gguf&sort=downloads&direction=-1&limit=N``: the
  search huggingface_hub's ``HfApi.list_models`` makes; a repo matches when every word is
  in its id (case-insensitive) and, with ``filter=gguf``, it holds a ``.gguf`` file;
  sorted by ``sort`` (``downloads``, ``likes``; ``direction=-1`` most first), at most
  ``limit`` (default 1000, as the hub pages), each ``{"_id", "id", "downloads", "likes",
  "gated", "private", "tags", "lastModified", "library_name"}``;
- ``/api/models/{repo}/revision/{rev}`` and ``/api/models/{repo}/tree/{rev}?recursive=...``
  shaped as huggingface_hub's ``HfApi.model_info`` / ``list_repo_tree`` read them
  (``sha``, ``siblings``; ``type``/``path``/``size``/``oid``/``lfs.oid``/``lfs.size``/
  ``lfs.pointerSize``; pages chained by ``Link: <...>; rel="next"``), errors with the
  hub's ``X-Error-Code`` (``RepoNotFound``, ``RevisionNotFound``, ``EntryNotFound``,
  ``GatedRepo``);
- ``/{repo}/resolve/{rev}/{path}``: a 302 to ``/cdn/<sha256>`` on another host name
  (``localhost``), with ``X-Repo-Commit``, ``X-Linked-Etag`` and ``X-Linked-Size`` as the
  hub sends them, so a token must not follow the redirect;
- ``/cdn/<sha256>`` and ``/files/<name>``: the bytes, with ``Range`` support (206,
  ``Content-Range``, ``ETag``).

Every request is logged with its range, status, body bytes sent and Authorization header.
Switches: ``refuse_range`` (answer 200 with the whole file), ``fail[path] = (status,
headers)`` and ``cut_after[path] = n`` (close the connection after n body bytes, once).
"""

from __future__ import annotations

import hashlib
import json
import re
import socket
import threading
import urllib.parse
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
from gguf import GGUFWriter

from app.sources.demo_models import GEMMA, SMOLLM

COMMIT = "0123456789abcdef0123456789abcdef01234567"
REPO = "ggtune-test/demo-GGUF"


@dataclass
class Served:
    """One file: its bytes on disk, sha256 and size; ``lfs`` False for a plain git file."""

    local: Path
    sha256: str
    size: int
    lfs: bool = True

    @property
    def git_oid(self) -> str:
        """Return the git blob id (sha1 of "blob <size>\\0" + content)."""
        h = hashlib.sha1(f"blob {self.size}\0".encode())
        h.update(self.local.read_bytes())
        return h.hexdigest()


@dataclass
class Repo:
    """A fake repo: its files by path, and whether it is gated."""

    files: dict[str, Served]
    gated: bool = False
    commit: str = COMMIT
    downloads: int = 0
    likes: int = 0


@dataclass
class Logged:
    """One request as the server saw it."""

    method: str
    path: str
    range: str | None
    status: int
    sent: int
    auth: str | None
    host: str


@dataclass
class FakeHub:
    """The server's state; see the module docstring."""

    repos: dict[str, Repo] = field(default_factory=dict)
    plain: dict[str, Served] = field(default_factory=dict)
    log: list[Logged] = field(default_factory=list)
    refuse_range: bool = False
    fail: dict[str, tuple[int, dict[str, str]]] = field(default_factory=dict)
    cut_after: dict[str, int] = field(default_factory=dict)
    page_size: int = 3
    port: int = 0
    lock: threading.Condition = field(default_factory=threading.Condition)
    busy: int = 0  # requests being answered; the log waits for them

    @property
    def endpoint(self) -> str:
        """Return the hub endpoint (what HF_ENDPOINT is set to)."""
        return f"http://127.0.0.1:{self.port}"

    def by_sha(self, sha: str) -> Served | None:
        """Return the served file with content hash ``sha`` (LFS sha256 or git oid)."""
        for repo in self.repos.values():
            for f in repo.files.values():
                if sha in (f.sha256, f.git_oid if not f.lfs else ""):
                    return f
        return None

    def _settled(self) -> None:
        """Wait (lock held) until no request is being answered: a client may read the
        last byte of an answer before its handler has logged it."""
        self.lock.wait_for(lambda: self.busy == 0, timeout=10)

    def sent(self, needle: str = "") -> int:
        """Return the body bytes sent for requests whose path contains ``needle``."""
        return sum(e.sent for e in self.requests(needle))

    def requests(self, needle: str = "") -> list[Logged]:
        """Return the logged requests whose path contains ``needle``."""
        with self.lock:
            self._settled()
            return [e for e in self.log if needle in e.path]

    def clear(self) -> None:
        """Forget the log."""
        with self.lock:
            self._settled()
            self.log.clear()


def unreachable_endpoint() -> str:
    """Return an http address on loopback that nobody listens on (offline, for tests)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return f"http://127.0.0.1:{port}"


def served(path: Path, *, lfs: bool = True, sha256: str | None = None) -> Served:
    """Describe the file at ``path`` for serving (hashes it unless ``sha256`` is known)."""
    if sha256 is not None:
        return Served(path, sha256, path.stat().st_size, lfs)
    h = hashlib.sha256()
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return Served(path, h.hexdigest(), path.stat().st_size, lfs)


def write_split_model(folder: Path, stem: str) -> list[Path]:
    """Write a tiny llama model as 2 shards with gguf's writer; return their paths."""
    writer = GGUFWriter(folder / f"{stem}.gguf", "llama", split_max_tensors=11)
    writer.add_name("fake split llama")
    writer.add_block_count(2)
    writer.add_context_length(4096)
    writer.add_embedding_length(64)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(2)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(16)
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([f"t{i}" for i in range(256)])
    writer.add_tensor("token_embd.weight", np.zeros((256, 64), np.float32))
    writer.add_tensor("output_norm.weight", np.zeros((64,), np.float32))
    writer.add_tensor("output.weight", np.zeros((256, 64), np.float32))
    shapes = {
        "attn_norm": (64,),
        "attn_q": (64, 64),
        "attn_k": (32, 64),
        "attn_v": (32, 64),
        "attn_output": (64, 64),
        "ffn_norm": (64,),
        "ffn_gate": (128, 64),
        "ffn_up": (128, 64),
        "ffn_down": (64, 128),
    }
    for il in range(2):
        for name, shape in shapes.items():
            writer.add_tensor(f"blk.{il}.{name}.weight", np.zeros(shape, np.float32))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    shards = sorted(folder.glob(f"{stem}-*-of-*.gguf"))
    assert len(shards) == 2, shards
    return shards


def make_hub(gemma: Path, smollm: Path, shards: list[Path]) -> FakeHub:
    """Return a hub with REPO: the demo models as two quant files, the 2-shard split
    model in a subfolder, a vision projector and a split model missing shards; a gated
    twin; and a repo without GGUF files (for the search's ``filter=gguf``)."""
    files = {
        "demo-Q4_K_M.gguf": served(gemma, sha256=GEMMA.sha256),
        "demo-Q4_1.gguf": served(smollm, sha256=SMOLLM.sha256),
        "Q8_0/demo-Q8_0-00001-of-00002.gguf": served(shards[0]),
        "Q8_0/demo-Q8_0-00002-of-00002.gguf": served(shards[1], lfs=False),
        "mmproj-demo-F16.gguf": served(shards[1]),
        "broken/demo-IQ2_XS-00001-of-00003.gguf": served(shards[0]),
    }
    return FakeHub(
        repos={
            REPO: Repo(files, downloads=1200, likes=7),
            "ggtune-test/gated-GGUF": Repo(
                {"m-Q4_1.gguf": files["demo-Q4_1.gguf"]}, gated=True, downloads=40, likes=1
            ),
            "ggtune-test/demo-safetensors": Repo(
                {"model.safetensors": served(shards[1])}, downloads=9000, likes=30
            ),
        }
    )


_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


class _Handler(BaseHTTPRequestHandler):
    server_version = "FakeHub/1"
    hub: FakeHub  # set on the subclass made per server

    def log_message(self, format: str, *args: object) -> None:
        pass  # quiet

    def do_HEAD(self) -> None:
        self._counted()

    def do_GET(self) -> None:
        self._counted()

    def _counted(self) -> None:
        with self.hub.lock:
            self.hub.busy += 1
        try:
            self._route()
        finally:
            with self.hub.lock:
                self.hub.busy -= 1
                self.hub.lock.notify_all()

    # --- plumbing ---------------------------------------------------------------------

    def _log(self, status: int, sent: int) -> None:
        with self.hub.lock:
            self.hub.log.append(
                Logged(
                    self.command,
                    self.path,
                    self.headers.get("Range"),
                    status,
                    sent,
                    self.headers.get("Authorization"),
                    self.headers.get("Host", ""),
                )
            )

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.command != "HEAD":
            self.wfile.write(body)
        self._log(status, 0 if self.command == "HEAD" else len(body))

    def _json(self, data: object, headers: dict[str, str] | None = None) -> None:
        body = json.dumps(data).encode()
        self._send(200, body, {"Content-Type": "application/json", **(headers or {})})

    def _error(self, status: int, code: str = "", message: str = "") -> None:
        headers = {"Content-Type": "application/json"}
        if code:
            headers["X-Error-Code"] = code
        if message:
            headers["X-Error-Message"] = message
        self._send(status, json.dumps({"error": message or code}).encode(), headers)

    def _route(self) -> None:
        split = urllib.parse.urlsplit(self.path)
        path = urllib.parse.unquote(split.path)
        if path in self.hub.fail:
            status, headers = self.hub.fail[path]
            self._send(status, b'{"error": "nope"}', headers)
            return
        if path == "/api/models":
            self._search(urllib.parse.parse_qs(split.query))
        elif path.startswith("/api/models/"):
            self._api(path.removeprefix("/api/models/"), urllib.parse.parse_qs(split.query))
        elif path.startswith("/cdn/"):
            f = self.hub.by_sha(path.removeprefix("/cdn/"))
            self._file(f, path) if f else self._error(404)
        elif path.startswith("/files/"):
            f = self.hub.plain.get(path.removeprefix("/files/"))
            self._file(f, path) if f else self._error(404)
        elif "/resolve/" in path:
            self._resolve(path)
        else:
            self._error(404)

    def _repo(self, repo_id: str) -> Repo | None:
        repo = self.hub.repos.get(repo_id)
        if repo is None:
            # The hub says 401 RepoNotFound to anonymous users (it may be private).
            self._error(401, "RepoNotFound", "Repository Not Found for url.")
        return repo

    def _api(self, rest: str, query: dict[str, list[str]]) -> None:
        m = re.match(r"^([^/]+/[^/]+)(?:/(revision|tree)/([^/]+))?$", rest)
        if not m:
            self._error(404)
            return
        repo_id, kind, rev = m.group(1), m.group(2) or "revision", m.group(3) or "main"
        repo = self._repo(repo_id)
        if repo is None:
            return
        if rev not in ("main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        if kind == "revision":
            self._json(
                {
                    "_id": "66f0c0ffee",
                    "id": repo_id,
                    "modelId": repo_id,
                    "author": repo_id.split("/")[0],
                    "sha": repo.commit,
                    "lastModified": "2025-01-01T00:00:00.000Z",
                    "private": False,
                    "disabled": False,
                    "gated": "manual" if repo.gated else False,
                    "downloads": 0,
                    "likes": 0,
                    "tags": ["gguf"],
                    "siblings": [{"rfilename": p} for p in ["README.md", *repo.files]],
                }
            )
            return
        recursive = query.get("recursive", ["false"])[0] in ("true", "True", "1")
        entries: list[dict[str, object]] = [
            {"type": "file", "oid": "1" * 40, "size": 12, "path": "README.md"}
        ]
        folders = sorted({p.rsplit("/", 1)[0] for p in repo.files if "/" in p})
        entries += [{"type": "directory", "oid": "2" * 40, "size": 0, "path": d} for d in folders]
        for p, f in repo.files.items():
            if "/" in p and not recursive:
                continue
            entry: dict[str, object] = {"type": "file", "path": p, "size": f.size}
            if f.lfs:
                entry["oid"] = "3" * 40
                entry["lfs"] = {"oid": f.sha256, "size": f.size, "pointerSize": 134}
            else:
                entry["oid"] = f.git_oid
            entries.append(entry)
        cursor = int(query.get("cursor", ["0"])[0])
        page = entries[cursor : cursor + self.hub.page_size]
        headers = {}
        if cursor + self.hub.page_size < len(entries):
            q = urllib.parse.urlencode(
                {
                    "recursive": query.get("recursive", ["false"])[0],
                    "expand": "false",
                    "cursor": cursor + self.hub.page_size,
                }
            )
            nxt = f"{self.hub.endpoint}/api/models/{repo_id}/tree/{rev}?{q}"
            headers["Link"] = f'<{nxt}>; rel="next"'
        self._json(page, headers)

    def _search(self, query: dict[str, list[str]]) -> None:
        words = " ".join(query.get("search", [])).lower().split()
        gguf = "gguf" in query.get("filter", [])
        found = [
            (repo_id, repo)
            for repo_id, repo in self.hub.repos.items()
            if all(w in repo_id.lower() for w in words)
            and (not gguf or any(p.lower().endswith(".gguf") for p in repo.files))
        ]
        key = query.get("sort", [""])[0]
        if key in ("downloads", "likes"):
            most_first = query.get("direction", ["1"])[0] == "-1"
            found.sort(key=lambda item: getattr(item[1], key), reverse=most_first)
        limit = int(query.get("limit", ["1000"])[0])
        self._json(
            [
                {
                    "_id": f"66f0{i:04d}",
                    "id": repo_id,
                    "likes": repo.likes,
                    "private": False,
                    "downloads": repo.downloads,
                    "gated": "manual" if repo.gated else False,
                    "tags": ["gguf"] if gguf else [],
                    "library_name": "gguf" if gguf else None,
                    "lastModified": "2025-01-01T00:00:00.000Z",
                }
                for i, (repo_id, repo) in enumerate(found[:limit])
            ]
        )

    def _resolve(self, path: str) -> None:
        m = re.match(r"^/([^/]+/[^/]+)/resolve/([^/]+)/(.+)$", path)
        if not m:
            self._error(404)
            return
        repo_id, rev, file_path = m.groups()
        repo = self._repo(repo_id)
        if repo is None:
            return
        if rev not in ("main", repo.commit):
            self._error(404, "RevisionNotFound", f"Invalid rev id: {rev}")
            return
        f = repo.files.get(file_path)
        if f is None:
            self._error(404, "EntryNotFound", f"{file_path} does not exist on {rev}")
            return
        if repo.gated and self.headers.get("Authorization") != "Bearer hf_good":
            self._error(
                401,
                "GatedRepo",
                f"Access to model {repo_id} is restricted. You must have access to it and be "
                "authenticated to access it. Please log in.",
            )
            return
        sha = f.sha256 if f.lfs else f.git_oid
        headers = {
            "X-Repo-Commit": repo.commit,
            "X-Linked-Etag": f'"{sha}"',
            "X-Linked-Size": str(f.size),
            "ETag": f'"{sha}"',
            "Location": f"http://localhost:{self.hub.port}/cdn/{sha}?signature=abc",
        }
        self._send(302, b"", headers)

    def _file(self, f: Served, path: str) -> None:
        size = f.size
        first, last = 0, size - 1
        status = 200
        want = self.headers.get("Range")
        if want and not self.hub.refuse_range:
            m = _RANGE.match(want)
            if not m:
                self._error(416)
                return
            first = int(m.group(1))
            last = min(int(m.group(2)), size - 1) if m.group(2) else size - 1
            if first >= size:
                self._send(416, b"", {"Content-Range": f"bytes */{size}"})
                return
            status = 206
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Accept-Ranges", "bytes")
        self.send_header("ETag", f'"{f.sha256}"')
        self.send_header("Content-Length", str(last - first + 1))
        if status == 206:
            self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
        self.end_headers()
        if self.command == "HEAD":
            self._log(status, 0)
            return
        with self.hub.lock:
            cut = self.hub.cut_after.pop(path, None)
        sent = 0
        try:
            with f.local.open("rb") as data:
                data.seek(first)
                left = last - first + 1
                while left:
                    n = min(left, 1 << 16)
                    if cut is not None:
                        n = min(n, cut - sent)
                        if n <= 0:
                            break
                    chunk = data.read(n)
                    self.wfile.write(chunk)
                    sent += len(chunk)
                    left -= len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass
        finally:
            self._log(status, sent)
        if cut is not None:
            self.close_connection = True
            self.wfile.flush()
            self.connection.shutdown(2)


@contextmanager
def running(hub: FakeHub) -> Iterator[FakeHub]:
    """Serve ``hub`` on 127.0.0.1 (ephemeral port) for the duration of the block."""
    handler = type("Handler", (_Handler,), {"hub": hub})
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    hub.port = server.server_address[1]
    thread = threading.Thread(
        target=server.serve_forever, args=(0.05,), name="fake-hub", daemon=True
    )
    thread.start()
    try:
        yield hub
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
