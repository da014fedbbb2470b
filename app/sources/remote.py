"""Read remote GGUF files over HTTP(S) with range requests, without downloading them.

:class:`RemoteFile` is a seekable, read-only binary file object over a URL: every read that
misses its buffer fetches one block with ``Range: bytes=a-b`` (1 MiB, doubling up to 8 MiB
while reads stay sequential), so :func:`app.model.gguf_reader.read_header` plugs straight in and
fetches the header plus at most one block. A server that answers a range request with the
whole file (HTTP 200) is refused rather than downloaded.

:func:`read_remote_header` adds an on-disk cache: the raw header bytes (``data_offset``
bytes) are kept under ``<cache>/ggtune/remote-headers/``, keyed by the file's content hash
(the hub's LFS sha256) or the server's ETag, and parsed again from memory, so a second look
at a file whose hash is known costs no network at all (an ETag costs one ``HEAD``).

Errors are :class:`~app.errors.RemoteError` subclasses with one readable line: offline or
timed out, 401/403 (gated or private: log in), 404, 429 (with the server's Retry-After),
no range support; a file that is not a GGUF raises the reader's
:class:`~app.errors.NotGGUFError`. Only the standard library is used (``urllib``); a token
is only ever sent to the host it was given for, never along a redirect to another host.

Example::

    header = read_remote_header("https://example.org/models/model-Q4_K_M.gguf")
    header.data_offset            # 6525120: bytes of header; at most one more block fetched

    with RemoteFile(url) as f:    # any seekable-file consumer works
        f.seek(-16, os.SEEK_END)
        tail = f.read(16)
        f.bytes_fetched, f.requests
"""

from __future__ import annotations

import contextlib
import email.utils
import hashlib
import http.client
import io
import os
import socket
import struct
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from email.message import Message
from pathlib import Path
from typing import IO, TYPE_CHECKING, BinaryIO, Final, cast

from app.errors import (
    GGUFError,
    RangeNotSupportedError,
    RateLimitedError,
    RemoteAuthError,
    RemoteError,
    RemoteNotFoundError,
    RemoteUnavailableError,
)
from app.model.gguf_reader import Header, read_header, read_header_bytes

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

__all__ = [
    "BLOCK_BYTES",
    "MAX_BLOCK_BYTES",
    "MIN_BYTES_PER_S",
    "RemoteFile",
    "check_url",
    "header_cache_dir",
    "open_url",
    "read_body",
    "read_remote_header",
]

BLOCK_BYTES: Final = 1 << 20
"""First read block in bytes (the GGUF reader's own window)."""

MAX_BLOCK_BYTES: Final = 8 << 20
"""Largest read block: blocks double while reads stay sequential, up to this."""

TIMEOUT_S: Final = 30.0
"""Seconds to wait for a connection or for the next bytes of an answer."""

USER_AGENT: Final = "ggtune/0.1 (+https://github.com/ggtune)"

_CACHE_MAGIC: Final = b"ggtuneH1"
_CACHE_HEAD: Final = struct.Struct("<8sQ")  # magic, size of the whole remote file in bytes
_MAX_CACHED_HEADER_BYTES: Final = 256 << 20


# --------------------------------------------------------------------------- requests


class _RedirectHandler(urllib.request.HTTPRedirectHandler):
    """Follow redirects, keeping the token only while the host stays the same.

    The hub answers ``/resolve/`` with a redirect to a CDN URL that carries its own
    signature; the token must not travel there (huggingface_hub does the same).
    """

    def redirect_request(
        self,
        req: urllib.request.Request,
        fp: IO[bytes],
        code: int,
        msg: str,
        headers: http.client.HTTPMessage,
        newurl: str,
    ) -> urllib.request.Request | None:
        new = super().redirect_request(req, fp, code, msg, headers, newurl)
        auth = req.get_header("Authorization") or req.unredirected_hdrs.get("Authorization")
        if new is not None and auth:
            same_host = (
                urllib.parse.urlsplit(newurl).netloc == urllib.parse.urlsplit(req.full_url).netloc
            )
            if same_host:
                new.add_unredirected_header("Authorization", auth)
        return new


_OPENER: Final = urllib.request.build_opener(_RedirectHandler)


def _host(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def open_url(
    url: str,
    *,
    token: str | None = None,
    headers: Mapping[str, str] | None = None,
    method: str = "GET",
    timeout_s: float = TIMEOUT_S,
) -> http.client.HTTPResponse:
    """Open ``url`` and return the response (the caller closes it); follow redirects.

    ``token`` is sent as ``Authorization: Bearer`` to ``url``'s host only. HTTP errors and
    network failures become :class:`~app.errors.RemoteError` subclasses naming ``url``.
    """
    check_url(url)
    request = urllib.request.Request(url, method=method)
    request.add_header("User-Agent", USER_AGENT)
    request.add_header("Accept-Encoding", "identity")  # sizes and ranges are of the raw bytes
    for key, value in (headers or {}).items():
        request.add_header(key, value)
    if token:
        request.add_unredirected_header("Authorization", f"Bearer {token}")
    try:
        return cast(http.client.HTTPResponse, _OPENER.open(request, timeout=timeout_s))
    except urllib.error.HTTPError as err:
        with err:
            raise http_error(url, err.code, err.headers, token_sent=bool(token)) from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        raise _network_error(url, err, timeout_s) from None
    except ValueError as err:  # http.client.InvalidURL: a port out of range, a bad host
        raise RemoteNotFoundError(url, f"not a valid web address: {err}") from None


def check_url(url: str) -> urllib.parse.SplitResult:
    """Return ``url`` split, or raise RemoteNotFoundError when it is not a usable address
    (``http://[::1`` with its bracket open, a port past 65535, no host)."""
    try:
        parts = urllib.parse.urlsplit(url)
        parts.port  # noqa: B018 - parses the port, raising ValueError when it is bad
    except ValueError as err:
        raise RemoteNotFoundError(url, f"not a valid web address: {err}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise RemoteNotFoundError(url, "not a valid web address: expected http(s)://host/…")
    return parts


def _network_error(url: str, err: BaseException, timeout_s: float) -> RemoteUnavailableError:
    reason: object = err.reason if isinstance(err, urllib.error.URLError) else err
    if isinstance(reason, TimeoutError | socket.timeout):
        return RemoteUnavailableError(url, f"no answer from {_host(url)} within {timeout_s:g} s")
    if isinstance(reason, socket.gaierror):
        return RemoteUnavailableError(
            url, f"cannot resolve {_host(url)}: are you offline? ({reason.strerror or reason})"
        )
    if isinstance(reason, ConnectionRefusedError):
        return RemoteUnavailableError(url, f"{_host(url)} refused the connection")
    text = getattr(reason, "strerror", None) or str(reason) or type(reason).__name__
    return RemoteUnavailableError(url, f"cannot reach {_host(url)}: {text} (offline?)")


def _retry_after_s(value: str | None) -> float | None:
    """Parse a Retry-After header: delay-seconds or an HTTP date."""
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(when.timestamp() - time.time(), 0.0)


_LOGIN_HINT: Final = (
    "log in with `huggingface-cli login` (or `hf auth login`) or set HF_TOKEN, and accept "
    "the model's terms on its page if it is gated"
)


def http_error(
    url: str,
    status: int,
    headers: Message | Mapping[str, str] | None,
    *,
    token_sent: bool = False,
) -> RemoteError:
    """Return the error for an HTTP error ``status`` from ``url``.

    The hub's ``X-Error-Code`` (``GatedRepo``, ``RepoNotFound``, ``RevisionNotFound``,
    ``EntryNotFound``, as huggingface_hub's ``hf_raise_for_status`` reads it) sharpens the
    message.
    """
    headers = headers or {}
    code = headers.get("X-Error-Code") or ""
    hub_message = (headers.get("X-Error-Message") or "").strip()
    detail = f" ({hub_message})" if hub_message else ""
    if code == "RepoNotFound":
        return RemoteNotFoundError(
            url,
            f"no such repository (HTTP {status}){detail}; if it is private, {_LOGIN_HINT}",
            status=status,
        )
    if code == "RevisionNotFound":
        return RemoteNotFoundError(url, f"no such revision (HTTP {status}){detail}", status=status)
    if code == "EntryNotFound":
        return RemoteNotFoundError(url, f"no such file (HTTP {status}){detail}", status=status)
    if status in (401, 403):
        what = "a gated repository" if code == "GatedRepo" else "gated or private"
        tried = "the token sent has no access" if token_sent else "no token was sent"
        return RemoteAuthError(
            url, f"access denied (HTTP {status}): {what}; {tried}: {_LOGIN_HINT}", status=status
        )
    if status == 404:
        return RemoteNotFoundError(url, f"not found (HTTP 404){detail}", status=status)
    if status == 429:
        retry = _retry_after_s(headers.get("Retry-After"))
        when = f"retry in {retry:.0f} s" if retry is not None else "retry later"
        return RateLimitedError(
            url,
            f"rate limited (HTTP 429): too many requests; {when} (logged-in users get a higher "
            "limit)",
            retry_after_s=retry,
        )
    if status == 416:
        return RemoteError(url, "the server refused the byte range (HTTP 416)", status=status)
    return RemoteError(url, f"HTTP {status}{detail}", status=status)


def _normalize_etag(value: str | None) -> str | None:
    """Return an ETag without ``W/`` and quotes (huggingface_hub ``_normalize_etag``)."""
    if not value:
        return None
    return value.removeprefix("W/").strip('"') or None


def _parse_content_range(value: str | None) -> tuple[int, int, int | None] | None:
    """Parse ``bytes a-b/total`` (total may be ``*``); ``None`` when malformed."""
    if not value or not value.startswith("bytes "):
        return None
    span, _, total = value[6:].partition("/")
    first, _, last = span.partition("-")
    try:
        return int(first), int(last), None if total.strip() == "*" else int(total)
    except ValueError:
        return None


# --------------------------------------------------------------------------- the file object


class RemoteFile(io.RawIOBase):
    """A read-only, seekable binary file over an HTTP(S) URL, read with range requests.

    ``size`` is the file size in bytes when known (otherwise learned from the first
    answer's ``Content-Range``). A read that misses the buffered block fetches
    ``max(n, block)`` bytes at the read position; the block starts at ``block_bytes``
    (``first_block_bytes`` for the very first fetch, e.g. a header size already seen in
    the same repo) and doubles while fetches follow each other, up to ``max_block_bytes``.
    ``bytes_fetched`` and ``requests`` count what went over the network. With
    ``record=True`` every fetched block is kept so :meth:`prefix` can return the first
    bytes without fetching them again. Not thread-safe: one reader at a time.
    """

    def __init__(
        self,
        url: str,
        *,
        token: str | None = None,
        size: int | None = None,
        block_bytes: int = BLOCK_BYTES,
        max_block_bytes: int = MAX_BLOCK_BYTES,
        first_block_bytes: int | None = None,
        timeout_s: float = TIMEOUT_S,
        record: bool = False,
    ) -> None:
        assert 0 < block_bytes <= max_block_bytes, "need 0 < block_bytes <= max_block_bytes"
        super().__init__()
        self.url = url
        self.name = url
        self.etag: str | None = None
        self.bytes_fetched = 0
        self.requests = 0
        self._token = token
        self._size = size
        self._block = block_bytes
        self._min_block = block_bytes
        self._max_block = max_block_bytes
        self._first_block = first_block_bytes
        self._timeout_s = timeout_s
        self._pos = 0
        self._chunk = b""
        self._chunk_start = 0
        self._last_end = -1
        self._fetch_url = url
        self._record: list[tuple[int, bytes]] | None = [] if record else None

    # io.RawIOBase ---------------------------------------------------------------------

    def readable(self) -> bool:
        """Return True: the file can be read."""
        return True

    def seekable(self) -> bool:
        """Return True: any position can be read."""
        return True

    def tell(self) -> int:
        """Return the read position in bytes."""
        return self._pos

    def seek(self, offset: int, whence: int = os.SEEK_SET) -> int:
        """Move the read position; ``SEEK_END`` needs the size (one fetch if unknown)."""
        if self.closed:
            raise ValueError("seek on a closed RemoteFile")
        if whence == os.SEEK_SET:
            target = offset
        elif whence == os.SEEK_CUR:
            target = self._pos + offset
        elif whence == os.SEEK_END:
            target = self.size + offset
        else:
            raise ValueError(f"invalid whence {whence}")
        if target < 0:
            raise OSError(f"{self.url}: negative seek position {target}")
        self._pos = target
        return target

    def readinto(self, buffer: WriteableBuffer) -> int:
        """Read ``len(buffer)`` bytes at the read position (fewer only at the end of the
        file); fetch what the buffered block lacks."""
        view = memoryview(buffer).cast("B")
        done = 0
        while done < len(view):
            if self._size is not None and self._pos >= self._size:
                break
            offset = self._pos - self._chunk_start
            if not 0 <= offset < len(self._chunk):
                self._fetch(self._pos, len(view) - done)
                offset = self._pos - self._chunk_start
                if not 0 <= offset < len(self._chunk):
                    break
            got = min(len(view) - done, len(self._chunk) - offset)
            view[done : done + got] = self._chunk[offset : offset + got]
            self._pos += got
            done += got
        return done

    def readall(self) -> bytes:
        """Refuse to read a whole remote file through the header reader's interface."""
        raise RemoteError(self.url, "refusing to read the whole remote file through RemoteFile")

    # remote specifics -----------------------------------------------------------------

    @property
    def size(self) -> int:
        """Return the file size in bytes (fetching the first block if it is not known)."""
        if self._size is None:
            self._fetch(0, 1)
        if self._size is None:  # "Content-Range: bytes 0-9/*": a server that will not say
            raise RemoteError(
                self.url, "the server does not say how large the file is (Content-Range */*)"
            )
        return self._size

    def prefix(self, n: int) -> bytes:
        """Return the first ``n`` bytes, from the recorded blocks, fetching only gaps."""
        assert self._record is not None, "prefix() needs RemoteFile(record=True)"
        n = min(n, self.size)
        out = bytearray()
        for start, data in sorted(self._record):
            if len(out) >= n:
                break
            if start > len(out):
                out += self._get_range(len(out), min(start, n) - 1)
            out += data[len(out) - start : n - start]
        if len(out) < n:
            out += self._get_range(len(out), n - 1)
        return bytes(out[:n])

    def _fetch(self, start: int, want: int) -> None:
        """Fetch the block at ``start`` (at least ``want`` bytes) into the buffer."""
        if start == self._last_end:
            self._block = min(self._block * 2, self._max_block)
        else:
            self._block = self._min_block
        block = max(want, self._block)
        if self._first_block is not None:
            block, self._first_block = max(want, self._first_block), None
        end = start + block
        if self._size is not None:
            end = min(end, self._size)
        if end <= start:
            self._chunk, self._chunk_start = b"", start
            return
        data = self._get_range(start, end - 1)
        self._chunk, self._chunk_start = data, start
        self._last_end = start + len(data)
        if self._record is not None:
            self._record.append((start, data))

    def _get_range(self, first: int, last: int) -> bytes:
        """GET bytes ``first..last`` (inclusive) and check the answer is exactly that."""
        headers = {"Range": f"bytes={first}-{last}"}
        try:
            response = open_url(
                self._fetch_url, token=self._token_for(self._fetch_url), headers=headers,
                timeout_s=self._timeout_s,
            )  # fmt: skip
        except RemoteAuthError:
            if self._fetch_url == self.url:
                raise
            # A signed CDN address from an earlier redirect expired: resolve it again.
            self._fetch_url = self.url
            return self._get_range(first, last)
        self.requests += 1
        with response:
            if response.status != 206:
                length = response.headers.get("Content-Length")
                whole = f" ({int(length):,} bytes)" if length and length.isdigit() else ""
                raise RangeNotSupportedError(
                    self.url,
                    f"the server ignored the range request (HTTP {response.status}) and would "
                    f"send the whole file{whole}; ggtune only reads headers from servers that "
                    "support range requests (HTTP 206)",
                    status=response.status,
                )
            span = _parse_content_range(response.headers.get("Content-Range"))
            if span is None or span[0] != first or not first <= span[1] <= last:
                raise RemoteError(
                    self.url,
                    f"the server answered bytes {response.headers.get('Content-Range')!r} to a "
                    f"request for bytes {first}-{last}",
                    status=206,
                )
            total = span[2]
            if total is not None:
                if self._size is not None and total != self._size:
                    raise RemoteError(
                        self.url,
                        f"the file changed on the server while reading ({self._size:,} bytes, "
                        f"now {total:,})",
                        status=206,
                    )
                self._size = total
            if self.etag is None:
                self.etag = _normalize_etag(
                    response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
                )
            # Later blocks go straight to where the redirects led (a signed CDN URL).
            self._fetch_url = response.geturl() or self._fetch_url
            expected = span[1] - span[0] + 1
            data = _read_exactly(response, expected, self.url, self._timeout_s)
        self.bytes_fetched += len(data)
        return data

    def _token_for(self, url: str) -> str | None:
        return self._token if _host(url) == _host(self.url) else None


MIN_BYTES_PER_S: Final = 64 << 10
"""Slowest answer ggtune waits for: a range answer of n bytes must arrive within
``timeout_s + n / MIN_BYTES_PER_S`` seconds (8 MiB: 2 min 38 s), so a server that sends
one byte every 20 s (never tripping the socket's own timeout) still ends."""


def read_body(
    response: http.client.HTTPResponse,
    url: str,
    *,
    max_bytes: int,
    deadline_s: float,
    exact: int | None = None,
) -> bytes:
    """Read an answer's body: at most ``max_bytes``, all of it within ``deadline_s``.

    ``exact`` (bytes) insists on exactly that many (a range answer). A body larger than
    ``max_bytes`` is :class:`~app.errors.RemoteError` ("too large"); one still arriving
    after ``deadline_s`` seconds, or cut early, is
    :class:`~app.errors.RemoteUnavailableError`. Reads return what the socket has
    (``read1``), so the deadline is checked after every packet however slowly they come.
    """
    want = exact if exact is not None else max_bytes + 1
    parts: list[bytes] = []
    got = 0
    started = time.monotonic()
    try:
        while got < want:
            data = response.read1(min(want - got, 1 << 20))
            if not data:
                break
            parts.append(data)
            got += len(data)
            if time.monotonic() - started > deadline_s and got < want:
                raise RemoteUnavailableError(
                    url,
                    f"{_host(url)} is too slow: {got:,} bytes of the answer in "
                    f"{deadline_s:g} s; try again later",
                )
    except (OSError, http.client.HTTPException) as err:
        raise _network_error(url, err, deadline_s) from None
    if exact is None and got > max_bytes:
        raise RemoteError(url, f"the answer is too large (over {max_bytes / 2**20:g} MiB); refused")
    if exact is not None and got < exact:
        raise RemoteUnavailableError(
            url, f"the connection closed after {got:,} of {exact:,} bytes; try again"
        )
    return b"".join(parts)


def _read_exactly(
    response: http.client.HTTPResponse, n: int, url: str, timeout_s: float = TIMEOUT_S
) -> bytes:
    """Read ``n`` body bytes within ``timeout_s + n / MIN_BYTES_PER_S`` seconds."""
    return read_body(
        response, url, max_bytes=n, exact=n, deadline_s=timeout_s + n / MIN_BYTES_PER_S
    )


# --------------------------------------------------------------------------- header cache


def header_cache_dir() -> Path:
    """Return the folder of cached remote headers: ``<cache>/ggtune/remote-headers``."""
    from app.paths import cache_dir

    return cache_dir() / "remote-headers"


def _cache_path(key: str, folder: Path | None) -> Path:
    digest = hashlib.sha256(key.encode("utf-8")).hexdigest()
    return (folder or header_cache_dir()) / f"{digest}.gguf-header"


def _load_cached(key: str, folder: Path | None) -> tuple[bytes, int] | None:
    """Return ``(header bytes, remote file size)`` cached under ``key``, or None."""
    try:
        raw = _cache_path(key, folder).read_bytes()
    except OSError:
        return None
    if len(raw) < _CACHE_HEAD.size:
        return None
    magic, size = _CACHE_HEAD.unpack_from(raw)
    if magic != _CACHE_MAGIC:
        return None
    return raw[_CACHE_HEAD.size :], int(size)


def _store_cached(key: str, folder: Path | None, data: bytes, size: int) -> None:
    """Write the cache entry atomically; a cache that cannot be written is skipped."""
    path = _cache_path(key, folder)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_bytes(_CACHE_HEAD.pack(_CACHE_MAGIC, size) + data)
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)


def _parse_cached(data: bytes, size: int, name: str) -> Header | None:
    try:
        return read_header_bytes(data, size, name)
    except GGUFError:
        return None  # a damaged entry: read the file again


def read_remote_header(
    url: str,
    *,
    token: str | None = None,
    content_key: str | None = None,
    size: int | None = None,
    first_block_bytes: int | None = None,
    cache: bool = True,
    cache_folder: Path | None = None,
    timeout_s: float = TIMEOUT_S,
) -> Header:
    """Read the GGUF header of the file at ``url`` with range requests; ``path`` is the URL.

    ``content_key`` identifies the file's content (the hub's LFS sha256): with it a cached
    header is used without any request. Without it the server's ETag is the key, learned
    with one ``HEAD``. ``size`` (bytes) and ``first_block_bytes`` save a request or two
    when known. Raise :class:`~app.errors.RemoteError` subclasses for network and HTTP
    problems, :class:`~app.errors.GGUFError` subclasses when the bytes are not a GGUF.
    """
    header, _ = _read_remote(
        url,
        token=token,
        content_key=content_key,
        size=size,
        first_block_bytes=first_block_bytes,
        cache=cache,
        cache_folder=cache_folder,
        timeout_s=timeout_s,
        want_bytes=False,
    )
    return header


def read_remote_prefix(
    url: str,
    *,
    token: str | None = None,
    content_key: str | None = None,
    size: int | None = None,
    cache: bool = True,
    cache_folder: Path | None = None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[Header, bytes, int]:
    """Return (header, its bytes up to the data offset, file size) of the file at ``url``.

    The same reads (and cache) as :func:`read_remote_header`; a header read before comes
    from the cache. The bytes make a header stand-in (app/model/standin.py).
    """
    header, data = _read_remote(
        url,
        token=token,
        content_key=content_key,
        size=size,
        first_block_bytes=None,
        cache=cache,
        cache_folder=cache_folder,
        timeout_s=timeout_s,
        want_bytes=True,
    )
    assert data is not None
    file_size = header.file_size if header.file_size is not None else size
    if file_size is None:
        raise RemoteError(url, "the server did not say how large the file is")
    return header, data, file_size


def _read_remote(
    url: str,
    *,
    token: str | None,
    content_key: str | None,
    size: int | None,
    first_block_bytes: int | None,
    cache: bool,
    cache_folder: Path | None,
    timeout_s: float,
    want_bytes: bool,
) -> tuple[Header, bytes | None]:
    """Read the header at ``url`` (cache first); also its bytes when ``want_bytes``."""
    key = content_key
    if cache and key is None:
        try:
            response = open_url(url, token=token, method="HEAD", timeout_s=timeout_s)
        except RemoteError as err:
            if err.status not in (405, 501):  # a server without HEAD: read, keyed by ETag
                raise
            response = None
        with response or contextlib.nullcontext():
            if response is not None:
                key = _normalize_etag(
                    response.headers.get("X-Linked-Etag") or response.headers.get("ETag")
                )
                length = response.headers.get("Content-Length")
                if size is None and length and length.isdigit():
                    size = int(length)
    if cache and key:
        hit = _load_cached(key, cache_folder)
        if hit is not None:
            header = _parse_cached(hit[0], hit[1], url)
            if header is not None:
                return header, hit[0][: header.data_offset] if want_bytes else None
    with RemoteFile(
        url,
        token=token,
        size=size,
        first_block_bytes=first_block_bytes,
        timeout_s=timeout_s,
        record=cache or want_bytes,
    ) as remote:
        header = read_header(cast(BinaryIO, remote), name=url)
        data = None
        if want_bytes or (cache and header.data_offset <= _MAX_CACHED_HEADER_BYTES):
            data = remote.prefix(header.data_offset)
        if cache and data is not None and header.data_offset <= _MAX_CACHED_HEADER_BYTES:
            key = key or remote.etag
            if key:
                _store_cached(key, cache_folder, data, remote.size)
    return header, data if want_bytes else None
