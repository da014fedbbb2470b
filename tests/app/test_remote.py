"""HTTP range reads of the real demo models from a local server (tests/fake_hub.py).

No test touches the network beyond 127.0.0.1: the server counts the bytes each request
sends, so the header-read bound is measured, not assumed.
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from app.errors import (
    NotGGUFError,
    RangeNotSupportedError,
    RateLimitedError,
    RemoteAuthError,
    RemoteNotFoundError,
    RemoteUnavailableError,
)
from app.model.gguf_reader import read_header
from app.sources.demo_models import GEMMA, SMOLLM
from app.sources.remote import BLOCK_BYTES, RemoteFile, read_remote_header
from tests.fake_hub import FakeHub, Served, running


@pytest.fixture
def server(
    gemma_path: Path, smollm_path: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[FakeHub]:
    """Serve both demo models as /files/gemma.gguf and /files/smollm.gguf."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    text = tmp_path / "readme.gguf"
    text.write_text("<html>not a model</html>" * 100)
    hub = FakeHub(
        plain={
            "gemma.gguf": Served(gemma_path, GEMMA.sha256, GEMMA.size_bytes),
            "smollm.gguf": Served(smollm_path, SMOLLM.sha256, SMOLLM.size_bytes),
            "readme.gguf": Served(text, "f" * 64, text.stat().st_size),
        }
    )
    with running(hub):
        yield hub


@pytest.mark.parametrize("name", ["gemma", "smollm"])
def test_header_read_fetches_header_plus_one_block(
    server: FakeHub, name: str, gemma_path: Path, smollm_path: Path
) -> None:
    local = read_header(gemma_path if name == "gemma" else smollm_path)
    url = f"{server.endpoint}/files/{name}.gguf"
    with RemoteFile(url) as remote:
        header = read_header(remote, name=url)  # type: ignore[arg-type]
        assert remote.bytes_fetched == server.sent(f"/files/{name}")
        last_block = remote.bytes_fetched - sum(e.sent for e in server.requests(name)[:-1])
    assert header.data_offset == local.data_offset
    assert header.file_size == local.file_size
    assert header.metadata.keys() == local.metadata.keys()
    assert header.tensors == local.tensors
    fetched = server.sent(f"/files/{name}")
    # The bound: the header, plus at most the one block that crossed its end.
    assert local.data_offset <= fetched <= local.data_offset + last_block
    assert fetched <= local.data_offset + max(BLOCK_BYTES, last_block)
    # gemma: 6,525,120 header bytes in 3 requests (1 + 2 + 4 MiB = 7,340,032 bytes)
    assert len(server.requests(name)) <= 4


def test_cached_header_costs_no_network(server: FakeHub, gemma_path: Path) -> None:
    url = f"{server.endpoint}/files/gemma.gguf"
    first = read_remote_header(url, content_key=GEMMA.sha256)
    server.clear()
    again = read_remote_header(url, content_key=GEMMA.sha256)
    assert server.requests() == []
    assert again.tensors == first.tensors
    assert again.metadata.keys() == first.metadata.keys()
    assert again.file_size == GEMMA.size_bytes
    # Keyed by the ETag instead: one HEAD, no body.
    server.clear()
    read_remote_header(url)
    assert [e.method for e in server.requests()] == ["HEAD"]
    assert server.sent() == 0


def test_remote_file_reads_like_a_local_file(server: FakeHub, smollm_path: Path) -> None:
    url = f"{server.endpoint}/files/smollm.gguf"
    with smollm_path.open("rb") as local, RemoteFile(url, block_bytes=4096) as remote:
        assert remote.seek(0, os.SEEK_END) == SMOLLM.size_bytes
        for offset, n in [(0, 16), (10, 5000), (50_000_000, 100), (SMOLLM.size_bytes - 7, 50)]:
            local.seek(offset)
            remote.seek(offset)
            assert remote.read(n) == local.read(n)
            assert remote.tell() == local.tell()
        assert remote.read(10) == b""
        assert remote.bytes_fetched < 100_000


def test_server_without_range_support_is_refused(server: FakeHub) -> None:
    server.refuse_range = True
    url = f"{server.endpoint}/files/smollm.gguf"
    with pytest.raises(RangeNotSupportedError, match=r"HTTP 200.*98,362,432 bytes.*206"):
        read_remote_header(url, cache=False)
    # The body was not downloaded: the connection was dropped at once.
    assert server.sent("/files/smollm") < SMOLLM.size_bytes // 4


@pytest.mark.parametrize(
    ("status", "headers", "error", "words"),
    [
        (401, {}, RemoteAuthError, "huggingface-cli login"),
        (403, {"X-Error-Code": "GatedRepo"}, RemoteAuthError, "gated repository"),
        (404, {}, RemoteNotFoundError, "not found"),
        (429, {"Retry-After": "7"}, RateLimitedError, "retry in 7 s"),
    ],
)
def test_http_errors_are_clear(
    server: FakeHub,
    status: int,
    headers: dict[str, str],
    error: type[Exception],
    words: str,
) -> None:
    server.fail["/files/gemma.gguf"] = (status, headers)
    url = f"{server.endpoint}/files/gemma.gguf"
    with pytest.raises(error, match=words) as info:
        read_remote_header(url, cache=False)
    assert str(info.value).startswith(url)
    if status in (401, 403):
        assert "HF_TOKEN" in str(info.value)
    if status == 429:
        assert isinstance(info.value, RateLimitedError)
        assert info.value.retry_after_s == 7


def test_not_a_gguf(server: FakeHub) -> None:
    url = f"{server.endpoint}/files/readme.gguf"
    with pytest.raises(NotGGUFError, match=r"readme\.gguf"):
        read_remote_header(url, cache=False)


def test_connection_cut_mid_header(server: FakeHub) -> None:
    server.cut_after["/files/gemma.gguf"] = 1000
    with pytest.raises(RemoteUnavailableError, match="closed after 1,000 of"):
        read_remote_header(f"{server.endpoint}/files/gemma.gguf", cache=False)


def test_refused_and_timeout() -> None:
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    with pytest.raises(RemoteUnavailableError, match="refused"):
        read_remote_header(f"http://127.0.0.1:{port}/m.gguf", cache=False)

    silent = socket.socket()  # accepts connections, never answers
    silent.bind(("127.0.0.1", 0))
    silent.listen()
    accepted: list[socket.socket] = []
    thread = threading.Thread(target=lambda: accepted.append(silent.accept()[0]), daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{silent.getsockname()[1]}/m.gguf"
        with pytest.raises(RemoteUnavailableError, match=r"no answer .* within 0.3 s"):
            read_remote_header(url, cache=False, timeout_s=0.3)
    finally:
        thread.join(timeout=2)
        for conn in accepted:
            conn.close()
        silent.close()
