"""A loopback HTTP server whose every answer a test writes: the hostile twin of fake_hub.

:class:`HostileHub` runs a ``ThreadingHTTPServer`` on 127.0.0.1 (ephemeral port). A test
registers handlers by path pattern (``hub.on(r"^/api/models/", handler)``); each handler
gets a :class:`Exchange` and answers however it likes: a normal JSON page, a body that
never ends, one byte every few seconds, a ``Link`` header pointing back at itself, a
``Content-Range`` that lies, a 416. :meth:`HostileHub.serve_repo` answers the hub's API
for one repo (revision info, the recursive tree, ``/resolve/`` with Range support) from a
tree listing and blobs the test provides, so a test can make just one part hostile (a
tree entry whose path is ``../../x.gguf``, an lfs oid that is not a sha256, ...).

Every request is logged (method, path, Range, Authorization). Handlers that stream or
drip check :attr:`HostileHub.stopping`, so shutting the server down never waits for them.
"""

from __future__ import annotations

import json
import re
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Handler = Callable[["Exchange"], None]

_RANGE = re.compile(r"^bytes=(\d+)-(\d*)$")


@dataclass
class Seen:
    """One request as the server saw it."""

    method: str
    path: str
    range: str | None
    auth: str | None


@dataclass
class HostileHub:
    """The server's state: handlers by path pattern (first match wins) and the log."""

    routes: list[tuple[re.Pattern[str], Handler]] = field(default_factory=list)
    log: list[Seen] = field(default_factory=list)
    port: int = 0
    stopping: threading.Event = field(default_factory=threading.Event)
    lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def endpoint(self) -> str:
        """Return the base URL (what HF_ENDPOINT is set to)."""
        return f"http://127.0.0.1:{self.port}"

    def on(self, pattern: str, handler: Handler) -> None:
        """Answer requests whose path (query included) matches ``pattern`` with ``handler``."""
        self.routes.insert(0, (re.compile(pattern), handler))

    def requests(self, needle: str = "") -> list[Seen]:
        """Return the logged requests whose path contains ``needle``."""
        with self.lock:
            return [s for s in self.log if needle in s.path]

    def serve_repo(
        self,
        repo_id: str,
        *,
        commit: str,
        tree: list[dict[str, object]],
        blobs: dict[str, bytes] | None = None,
    ) -> None:
        """Answer the hub API for ``repo_id``: revision info naming ``commit``, the tree
        (one page), and ``/resolve/<rev>/<path>`` from ``blobs`` (by path), with ranges."""
        blobs = blobs or {}
        esc = re.escape(repo_id)

        def revision(ex: Exchange) -> None:
            ex.json({"id": repo_id, "sha": commit})

        def tree_page(ex: Exchange) -> None:
            ex.json(tree)

        def resolve(ex: Exchange) -> None:
            path = urllib.parse.unquote(ex.path.split("/resolve/", 1)[1].split("?")[0])
            path = path.split("/", 1)[1] if "/" in path else ""
            # A hostile hub serves whatever was asked for, however the path is spelled.
            data = blobs.get(path)
            if data is None:
                data = next((d for p, d in blobs.items() if path.endswith(p.rsplit("/")[-1])), None)
            if data is None:
                ex.send(404, b"{}", {"X-Error-Code": "EntryNotFound"})
                return
            ex.ranged(data)

        self.on(rf"^/api/models/{esc}/revision/", revision)
        self.on(rf"^/api/models/{esc}/tree/", tree_page)
        self.on(rf"^/{esc}/resolve/", resolve)


class Exchange:
    """One request and the means to answer it (wraps the stdlib handler)."""

    def __init__(self, handler: BaseHTTPRequestHandler, hub: HostileHub) -> None:
        self._h = handler
        self.hub = hub
        self.method = handler.command
        self.path = handler.path
        self.headers = handler.headers

    @property
    def range(self) -> tuple[int, int | None] | None:
        """Return the requested byte range (first, last or None), or None."""
        m = _RANGE.match(self.headers.get("Range") or "")
        if m is None:
            return None
        return int(m.group(1)), int(m.group(2)) if m.group(2) else None

    def head(self, status: int, headers: dict[str, str] | None = None) -> None:
        """Send the status line and headers (no Content-Length unless given)."""
        self._h.send_response(status)
        for key, value in (headers or {}).items():
            self._h.send_header(key, value)
        self._h.end_headers()

    def write(self, data: bytes) -> bool:
        """Write body bytes; return False once the client has gone."""
        try:
            self._h.wfile.write(data)
            self._h.wfile.flush()
        except OSError:
            return False
        return True

    def send(self, status: int, body: bytes = b"", headers: dict[str, str] | None = None) -> None:
        """Answer with a complete body."""
        self.head(status, {**(headers or {}), "Content-Length": str(len(body))})
        if self.method != "HEAD":
            self.write(body)

    def json(self, data: object, headers: dict[str, str] | None = None) -> None:
        """Answer 200 with ``data`` as JSON."""
        self.send(
            200, json.dumps(data).encode(), {"Content-Type": "application/json", **(headers or {})}
        )

    def stream(
        self, chunks: Iterable[bytes], status: int = 200, headers: dict[str, str] | None = None
    ) -> None:
        """Answer with a body of unknown length (ends when the connection closes)."""
        self._h.close_connection = True
        self.head(status, {"Connection": "close", **(headers or {})})
        for chunk in chunks:
            if self.hub.stopping.is_set() or not self.write(chunk):
                return

    def drip(self, data: bytes, every_s: float, headers: dict[str, str] | None = None) -> None:
        """Answer 200 with ``data`` declared in full but sent one byte every ``every_s``."""
        self.head(200, {"Content-Length": str(len(data)), **(headers or {})})
        for i in range(len(data)):
            if not self.write(data[i : i + 1]) or self.hub.stopping.wait(every_s):
                return

    def ranged(self, data: bytes, headers: dict[str, str] | None = None) -> None:
        """Answer a GET or HEAD for ``data`` honestly, honouring Range (206)."""
        size = len(data)
        want = self.range
        base = {"Accept-Ranges": "bytes", **(headers or {})}
        if want is None:
            self.send(200, data, base)
            return
        first, last = want
        last = size - 1 if last is None else min(last, size - 1)
        if first >= size:
            self.send(416, b"", {**base, "Content-Range": f"bytes */{size}"})
            return
        self.send(
            206, data[first : last + 1], {**base, "Content-Range": f"bytes {first}-{last}/{size}"}
        )


def endless(chunk: bytes, prefix: bytes = b"") -> Iterator[bytes]:
    """Yield ``prefix`` then ``chunk`` forever (an endless body)."""
    if prefix:
        yield prefix
    while True:
        yield chunk


def _make_handler(hub: HostileHub) -> type[BaseHTTPRequestHandler]:
    class _Handler(BaseHTTPRequestHandler):
        server_version = "HostileHub/1"
        protocol_version = "HTTP/1.1"

        def log_message(self, format: str, *args: object) -> None:
            pass  # quiet

        def do_GET(self) -> None:
            self._answer()

        def do_HEAD(self) -> None:
            self._answer()

        def _answer(self) -> None:
            with hub.lock:
                hub.log.append(
                    Seen(
                        self.command,
                        self.path,
                        self.headers.get("Range"),
                        self.headers.get("Authorization"),
                    )
                )
            for pattern, handler in hub.routes:
                if pattern.search(self.path):
                    handler(Exchange(self, hub))
                    return
            Exchange(self, hub).send(404, b"{}")

    return _Handler


@contextmanager
def running(hub: HostileHub) -> Iterator[HostileHub]:
    """Serve ``hub`` on 127.0.0.1 (ephemeral port) for the duration of the block."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(hub))
    server.daemon_threads = True
    hub.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, args=(0.05,), daemon=True)
    thread.start()
    try:
        yield hub
    finally:
        hub.stopping.set()
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)
        time.sleep(0)  # let dripping handlers see the flag
