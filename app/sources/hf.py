"""Hugging Face repos: compare every quant level of a repo before downloading, then download.

:func:`list_repo` lists a repo's GGUF files with their sizes and sha256 through the hub's
own API, the endpoints huggingface_hub calls (``HfApi.model_info`` and
``HfApi.list_repo_tree``)::

    GET {endpoint}/api/models/{repo}/revision/{revision}   -> {"sha": <commit>, ...}
    GET {endpoint}/api/models/{repo}/tree/{commit}?recursive=true
        -> [{"type": "file", "path", "size", "oid", "lfs": {"oid": <sha256>, "size", ...}}]
           (more pages follow the ``Link: <...>; rel="next"`` header)

Files are grouped into models (the shards ``name-0000k-of-0000n.gguf`` of a split model
join into one) labelled with the quant level parsed from the name (``Q4_K_M``, ``IQ4_XS``,
``BF16``, ...); vision projectors (``mmproj``) and imatrix files are set aside.
:func:`read_models` reads every model's header with range requests only
(:mod:`app.sources.remote`; all shards, each header cached on disk by its sha256), so
:func:`app.model.spec.model_spec` and :func:`app.predict.estimate.estimate` can say what fits before
anything is downloaded. :func:`download` fetches one model (all shards) with progress,
cancel, resume, a free-disk check and sha256 verification, into the Hugging Face cache
layout (``models--org--name/blobs/<sha256>`` + ``snapshots/<commit>/<file>`` symlinks, as
``hf_hub_download`` writes it, so the library and huggingface_hub both find the file) or a
folder the user picks.

The endpoint is ``$HF_ENDPOINT`` (default ``https://huggingface.co``); the token comes from
huggingface_hub's ``get_token()`` when it is installed, otherwise from ``$HF_TOKEN`` or the
token file ``huggingface-cli login`` writes, and is sent to the endpoint's host only.

Example::

    listing = list_repo("unsloth/gemma-3-270m-it-GGUF")
    for model in read_models(listing):
        print(model.entry.quant, model.entry.size_bytes, model_spec(model.model).n_params)
    path = download(listing, listing.find("Q4_K_M"), progress=print)
"""

from __future__ import annotations

import collections
import dataclasses
import hashlib
import json
import os
import re
import shutil
import threading
import time
import urllib.parse
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import (
    DownloadCancelledError,
    DownloadError,
    GGTuneError,
    RemoteError,
    RemoteNotFoundError,
    RemoteUnavailableError,
    SplitModelError,
)
from app.model.gguf_reader import Header, ModelFile, TensorInfo
from app.sources.remote import BLOCK_BYTES, is_url, open_url, read_remote_header

__all__ = [
    "DownloadProgress",
    "HubFile",
    "ModelEntry",
    "RemoteModel",
    "RepoListing",
    "RepoRef",
    "download",
    "hub_cache_dir",
    "hub_endpoint",
    "hub_token",
    "list_repo",
    "parse_repo",
    "quant_label",
    "read_entry",
    "read_models",
    "read_url_model",
]

DEFAULT_ENDPOINT: Final = "https://huggingface.co"
DEFAULT_REVISION: Final = "main"
CHUNK_BYTES: Final = 1 << 20
HEADER_SLACK_BYTES: Final = BLOCK_BYTES + (64 << 10)
"""Bytes on top of a sibling's header size for a model's first block: the reader's window
reads up to one block past the header's end, and quant files of one repo have headers
within a few KiB of each other, so one request usually reads the whole header."""

_SPLIT: Final = re.compile(r"^(?P<prefix>.+)-(?P<no>\d{5})-of-(?P<count>\d{5})\.gguf$")
_QUANT: Final = re.compile(
    r"(?<![A-Za-z0-9])("
    r"(?:UD-)?I?Q[1-8]_(?:K|0|1|NL)(?:_(?:XXS|XS|S|M|L|XL))?"
    r"|(?:UD-)?IQ[1-4]_(?:XXS|XS|S|M|L|NL)"
    r"|TQ[12]_0|MXFP4(?:_MOE)?|BF16|F16|FP16|F32|FP32"
    r")(?![A-Za-z0-9])",
    re.IGNORECASE,
)
_EXTRA: Final = re.compile(r"mmproj|imatrix", re.IGNORECASE)
_REPO_ID: Final = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HUB_HOSTS: Final = ("huggingface.co", "hf.co", "www.huggingface.co")


# --------------------------------------------------------------------------- endpoint, token


def hub_endpoint() -> str:
    """Return the hub's base URL: ``$HF_ENDPOINT`` or ``https://huggingface.co``."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def hub_token() -> str | None:
    """Return the user's hub token, as huggingface_hub finds it, or None.

    With huggingface_hub installed its ``get_token()`` decides; otherwise ``$HF_TOKEN``
    (or the older ``$HUGGING_FACE_HUB_TOKEN``), then the file ``huggingface-cli login``
    writes (``$HF_TOKEN_PATH``, default ``$HF_HOME/token``, ``~/.cache/huggingface/token``).
    """
    try:
        from huggingface_hub import get_token  # type: ignore[import-not-found,unused-ignore]
    except ImportError:
        pass
    else:
        token = get_token()
        return str(token) if token else None
    for name in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
        value = os.environ.get(name, "").strip()
        if value:
            return value
    home = os.environ.get("HF_HOME") or str(Path.home() / ".cache" / "huggingface")
    path = os.environ.get("HF_TOKEN_PATH") or os.path.join(home, "token")
    try:
        return Path(path).expanduser().read_text(encoding="utf-8").strip() or None
    except OSError:
        return None


def _token_for(url: str) -> str | None:
    """Return the hub token if ``url`` is on the hub's host (never for other hosts)."""
    host = urllib.parse.urlsplit(url).netloc.lower()
    hub_host = urllib.parse.urlsplit(hub_endpoint()).netloc.lower()
    return hub_token() if host == hub_host or host in _HUB_HOSTS else None


def hub_cache_dir() -> Path:
    """Return the Hugging Face cache the library scans (``$HF_HUB_CACHE``, ...)."""
    from app.sources.library import default_roots

    hub = default_roots().huggingface_hub
    assert hub is not None, "default_roots always names a Hugging Face cache"
    return hub


# --------------------------------------------------------------------------- names


@dataclass(frozen=True, slots=True)
class RepoRef:
    """A repo on the hub: ``repo_id`` ("org/name"), ``revision`` and an optional
    ``selector`` (a file path in the repo, or a quant label like ``Q4_K_M``)."""

    repo_id: str
    revision: str = DEFAULT_REVISION
    selector: str | None = None


def parse_repo(text: str) -> RepoRef:
    """Parse a repo id or a hub URL into a :class:`RepoRef`.

    Accepted: ``org/name``, ``org/name:FILE-or-QUANT``, ``org/name@revision``,
    ``hf.co/org/name:Q4_K_M`` (Ollama's form), and ``https://huggingface.co/org/name``
    with ``/tree/<rev>``, ``/blob/<rev>/<file>`` or ``/resolve/<rev>/<file>``. Raise
    :class:`~app.errors.RemoteNotFoundError` when it names no repo.

    Example::

        parse_repo("https://hf.co/org/m-GGUF/blob/main/m-Q4_K_M.gguf")
        # RepoRef(repo_id='org/m-GGUF', revision='main', selector='m-Q4_K_M.gguf')
    """
    raw = text.strip()
    rest = raw
    split = urllib.parse.urlsplit(raw if "://" in raw else "https://" + raw)
    host = split.netloc.lower()
    hub_host = urllib.parse.urlsplit(hub_endpoint()).netloc.lower()
    if host in _HUB_HOSTS or host == hub_host:
        rest = urllib.parse.unquote(split.path).strip("/")
        parts = rest.split("/")
        if len(parts) >= 4 and parts[2] in ("blob", "resolve", "tree"):
            revision = parts[3]
            selector = "/".join(parts[4:]) or None
            return _checked(RepoRef(f"{parts[0]}/{parts[1]}", revision, selector), raw)
        if parts and parts[0] == "models":
            rest = "/".join(parts[1:])
    selector = None
    if ":" in rest:
        rest, selector = rest.split(":", 1)
    revision = DEFAULT_REVISION
    if "@" in rest:
        rest, revision = rest.split("@", 1)
    return _checked(RepoRef(rest.strip("/"), revision or DEFAULT_REVISION, selector or None), raw)


def _checked(ref: RepoRef, raw: str) -> RepoRef:
    if not _REPO_ID.match(ref.repo_id):
        raise RemoteNotFoundError(
            raw, "not a Hugging Face repo: expected org/name or a huggingface.co URL"
        )
    return ref


def quant_label(path: str) -> str:
    """Return the quant level a file name states (``"Q4_K_M"``), or ``""``.

    The file name is searched first, then its folders; the last match wins
    (``Model-7B-Q4_K_M.gguf``, ``Q8_0/model-Q8_0-00001-of-00002.gguf``).
    """
    for part in reversed(path.split("/")):
        found = _QUANT.findall(part)
        if found:
            label = str(found[-1]).upper()
            return {"FP16": "F16", "FP32": "F32"}.get(label, label)
    return ""


# --------------------------------------------------------------------------- listing


@dataclass(frozen=True, slots=True)
class HubFile:
    """One file in the repo: ``path``, ``size_bytes``, ``sha256`` (of an LFS file, else
    None) and ``blob_id`` (its git object id)."""

    path: str
    size_bytes: int
    sha256: str | None
    blob_id: str


@dataclass(frozen=True, slots=True)
class ModelEntry:
    """One model: a single GGUF file, or all shards of a split model in order.

    ``name`` is the file's path (a split model's first shard), ``quant`` the label parsed
    from the name (``""`` if none).
    """

    name: str
    quant: str
    files: tuple[HubFile, ...]

    @property
    def size_bytes(self) -> int:
        """Return the bytes of all its files."""
        return sum(f.size_bytes for f in self.files)


@dataclass(frozen=True, slots=True)
class RepoListing:
    """The GGUF files of ``repo_id`` at ``commit`` (the revision asked for, resolved).

    ``models`` are sorted by size; ``extras`` are GGUF files that are not models (vision
    projectors, imatrix); ``issues`` name files left out (a split model missing shards).
    """

    repo_id: str
    revision: str
    commit: str
    endpoint: str
    models: tuple[ModelEntry, ...]
    extras: tuple[HubFile, ...] = ()
    issues: tuple[str, ...] = ()

    def url(self, file: HubFile | str) -> str:
        """Return the download URL of ``file``, pinned to the listing's commit."""
        path = file if isinstance(file, str) else file.path
        return (
            f"{self.endpoint}/{self.repo_id}/resolve/{self.commit}/"
            f"{urllib.parse.quote(path, safe='/')}"
        )

    def by_quant(self) -> dict[str, tuple[ModelEntry, ...]]:
        """Return the models grouped by quant label, smallest group first."""
        groups: dict[str, list[ModelEntry]] = {}
        for model in self.models:
            groups.setdefault(model.quant, []).append(model)
        return {k: tuple(v) for k, v in groups.items()}

    def find(self, selector: str) -> ModelEntry:
        """Return the model named by ``selector``: a path, a file name, any shard's name,
        or a quant label (which must name one model). Raise RemoteNotFoundError."""
        wanted = selector.strip().lower()
        for model in self.models:
            for f in model.files:
                if wanted in (f.path.lower(), f.path.rsplit("/", 1)[-1].lower()):
                    return model
        matches = [m for m in self.models if m.quant.lower() == wanted.removeprefix("ud-")]
        matches = matches or [m for m in self.models if m.quant.lower() == wanted]
        if len(matches) == 1:
            return matches[0]
        where = f"{self.endpoint}/{self.repo_id}"
        if matches:
            names = ", ".join(m.name for m in matches)
            raise RemoteNotFoundError(where, f"{selector!r} names {len(matches)} files: {names}")
        have = ", ".join(sorted({m.quant or m.name for m in self.models})) or "no GGUF models"
        raise RemoteNotFoundError(where, f"no file or quant {selector!r}; the repo has: {have}")


def _get_json(url: str, token: str | None) -> tuple[object, str | None]:
    """GET ``url`` and return (parsed JSON, the next page's URL from ``Link``)."""
    with open_url(url, token=token, headers={"Accept": "application/json"}) as response:
        body = response.read()
        link = response.headers.get("Link")
    try:
        data = json.loads(body)
    except ValueError:
        raise RemoteError(url, "the hub's answer is not JSON") from None
    next_url = None
    if link:
        match = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
        if match:
            next_url = urllib.parse.urljoin(url, match.group(1))
    return data, next_url


def list_repo(repo: str | RepoRef, *, token: str | None = None) -> RepoListing:
    """List the GGUF models of ``repo`` (an id, URL or :class:`RepoRef`) with sizes.

    Two kinds of request, as huggingface_hub makes them: the revision's info (for its
    commit) and the recursive file tree at that commit (paginated). ``token`` defaults to
    :func:`hub_token`. Raise :class:`~app.errors.RemoteError` subclasses (404 for an
    unknown repo or revision, 401/403 for a private one, offline, rate limited).
    """
    ref = parse_repo(repo) if isinstance(repo, str) else repo
    endpoint = hub_endpoint()
    token = token if token is not None else hub_token()
    rev = urllib.parse.quote(ref.revision, safe="")
    info, _ = _get_json(f"{endpoint}/api/models/{ref.repo_id}/revision/{rev}", token)
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not commit:
        raise RemoteError(f"{endpoint}/{ref.repo_id}", "the hub's answer names no commit")
    files: list[HubFile] = []
    page: str | None = (
        f"{endpoint}/api/models/{ref.repo_id}/tree/{commit}?recursive=true&expand=false"
    )
    while page is not None:
        data, page = _get_json(page, token)
        if not isinstance(data, list):
            raise RemoteError(f"{endpoint}/{ref.repo_id}", "the hub's file tree is not a list")
        files.extend(_hub_file(item) for item in data if _is_gguf_item(item))
    models, extras, issues = _group(files)
    return RepoListing(ref.repo_id, ref.revision, commit, endpoint, models, extras, issues)


def _is_gguf_item(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "file"
        and str(item.get("path", "")).lower().endswith(".gguf")
    )


def _hub_file(item: dict[str, object]) -> HubFile:
    lfs = item.get("lfs")
    sha256 = lfs.get("oid") if isinstance(lfs, dict) else None
    size = item.get("size")
    return HubFile(
        path=str(item["path"]),
        size_bytes=size if isinstance(size, int) else 0,
        sha256=sha256 if isinstance(sha256, str) else None,
        blob_id=str(item.get("oid", "")),
    )


def _group(
    files: Iterable[HubFile],
) -> tuple[tuple[ModelEntry, ...], tuple[HubFile, ...], tuple[str, ...]]:
    """Split files into models (shards joined), extras and issues."""
    models: list[ModelEntry] = []
    extras: list[HubFile] = []
    issues: list[str] = []
    splits: dict[tuple[str, int], dict[int, HubFile]] = {}
    for f in files:
        base = f.path.rsplit("/", 1)[-1]
        if _EXTRA.search(base):
            extras.append(f)
            continue
        match = _SPLIT.match(f.path)
        if match is None:
            models.append(ModelEntry(f.path, quant_label(f.path), (f,)))
            continue
        splits.setdefault((match["prefix"], int(match["count"])), {})[int(match["no"])] = f
    for (prefix, count), shards in splits.items():
        missing = [n for n in range(1, count + 1) if n not in shards]
        if missing:
            issues.append(
                f"{prefix}: split model is missing shard(s) "
                + ", ".join(f"{n:05d}-of-{count:05d}" for n in missing)
            )
            continue
        ordered = tuple(shards[n] for n in range(1, count + 1))
        models.append(ModelEntry(ordered[0].path, quant_label(prefix), ordered))
    models.sort(key=lambda m: (m.size_bytes, m.name))
    return tuple(models), tuple(extras), tuple(issues)


# --------------------------------------------------------------------------- headers


@dataclass(frozen=True, slots=True)
class RemoteModel:
    """One entry's header(s) read remotely: ``model`` or the ``error`` that stopped it."""

    entry: ModelEntry
    model: ModelFile | None
    error: GGTuneError | None = None


def read_entry(
    listing: RepoListing,
    entry: ModelEntry,
    *,
    token: str | None = None,
    cache: bool = True,
    first_block_bytes: int | None = None,
) -> ModelFile:
    """Read the header of every shard of ``entry`` remotely and join them.

    Each header costs its size plus at most one read block, or nothing when cached (by
    the file's sha256). Raise RemoteError, GGUFError or SplitModelError subclasses.
    """
    token = token if token is not None else hub_token()
    headers = []
    for f in entry.files:
        headers.append(
            read_remote_header(
                listing.url(f),
                token=token,
                content_key=f.sha256 or (f"git-{f.blob_id}" if f.blob_id else None),
                size=f.size_bytes or None,
                first_block_bytes=first_block_bytes,
                cache=cache,
            )
        )
    return join_shards(tuple(headers))


def read_models(
    listing: RepoListing,
    entries: Sequence[ModelEntry] | None = None,
    *,
    token: str | None = None,
    cache: bool = True,
    max_workers: int = 4,
) -> list[RemoteModel]:
    """Read the headers of ``entries`` (default: every model) in parallel, in order.

    The first model's header size sizes the first block of the others, so each usually
    needs one request. A model that cannot be read carries its error; others go on.
    """
    todo = list(listing.models if entries is None else entries)
    token = token if token is not None else hub_token()
    if not todo:
        return []

    def one(entry: ModelEntry, hint: int | None) -> RemoteModel:
        try:
            model = read_entry(listing, entry, token=token, cache=cache, first_block_bytes=hint)
        except GGTuneError as err:
            return RemoteModel(entry, None, err)
        return RemoteModel(entry, model)

    first = one(todo[0], None)
    hint = first.model.shards[0].data_offset + HEADER_SLACK_BYTES if first.model else None
    if first.error is not None and not _per_file(first.error):
        # Offline, rate limited or no access: every other file would fail the same way.
        return [first] + [RemoteModel(e, None, first.error) for e in todo[1:]]
    with ThreadPoolExecutor(max_workers=max(1, max_workers)) as pool:
        rest = list(pool.map(lambda e: one(e, hint), todo[1:]))
    return [first, *rest]


def _per_file(err: GGTuneError) -> bool:
    """Return whether ``err`` is about one file (others may still be readable)."""
    from app.errors import RateLimitedError, RemoteAuthError

    return not isinstance(err, RemoteUnavailableError | RateLimitedError | RemoteAuthError)


def join_shards(headers: tuple[Header, ...]) -> ModelFile:
    """Join the headers of a model's files (one, or every shard in order) into a ModelFile.

    Checks what :func:`app.model.gguf_reader.read_model` checks of local shards: ``split.no``
    and ``split.count`` of each, and the tensor count against ``split.tensors.count``.
    """
    assert headers, "a model has at least one file"
    n_split = headers[0].get_int("split.count", 0)
    if len(headers) > 1 or n_split > 1:
        if n_split != len(headers):
            raise SplitModelError(
                f"{headers[0].path}: split.count is {n_split}, but {len(headers)} shards given"
            )
        for i, h in enumerate(headers):
            if h.get_int("split.no", None) != i or h.get_int("split.count", None) != n_split:
                raise SplitModelError(f"{h.path}: is not shard {i + 1} of {n_split}")
        expected = headers[0].get_int("split.tensors.count", None)
        found = sum(len(h.tensors) for h in headers)
        if expected != found:
            raise SplitModelError(
                f"{headers[0].path}: split.tensors.count is {expected}, but the shards hold "
                f"{found} tensors"
            )
    tensors: list[TensorInfo] = []
    for i, h in enumerate(headers):
        tensors.extend(t if i == 0 else dataclasses.replace(t, shard=i) for t in h.tensors)
    return ModelFile(
        path=headers[0].path,
        shards=headers,
        metadata=headers[0].metadata,
        tensors=tuple(tensors),
        total_bytes=sum(t.n_bytes for t in tensors),
    )


def read_url_model(url: str, *, cache: bool = True) -> ModelFile:
    """Read the model at an http(s) ``url`` with range requests (``inspect``/``estimate``).

    A hub page URL (``/blob/``) is read from its ``/resolve/`` twin, with the hub token;
    other hosts never get a token. The siblings of a split model's shard are found by
    name next to it, as for local files. Raise RemoteError or GGUFError subclasses.
    """
    assert is_url(url), f"not an http(s) URL: {url}"
    parts = urllib.parse.urlsplit(url)
    path = parts.path
    segments = path.split("/")
    host = parts.netloc.lower()
    on_hub = host in _HUB_HOSTS or host == urllib.parse.urlsplit(hub_endpoint()).netloc.lower()
    if on_hub and len(segments) > 4 and segments[3] == "blob":
        segments[3] = "resolve"
    elif on_hub and len(segments) <= 3 and not segments[-1].lower().endswith(".gguf"):
        raise RemoteNotFoundError(
            url, "a repo, not a file: use `ggtune hf REPO` to compare its files"
        )
    url = urllib.parse.urlunsplit(parts._replace(path="/".join(segments)))
    token = _token_for(url)
    first = read_remote_header(url, token=token, cache=cache)
    n_split = first.get_int("split.count", 0)
    if n_split <= 1:
        return join_shards((first,))
    name = urllib.parse.unquote(segments[-1])
    match = _SPLIT.match(name)
    split_no = first.get_int("split.no", 0)
    if match is None or int(match["no"]) != split_no + 1 or int(match["count"]) != n_split:
        raise SplitModelError(
            f"{url}: shard {split_no + 1} of {n_split} must be named "
            f"'<name>-{split_no + 1:05d}-of-{n_split:05d}.gguf' to find its siblings"
        )
    headers = []
    for i in range(n_split):
        sibling = f"{match['prefix']}-{i + 1:05d}-of-{n_split:05d}.gguf"
        sibling_url = urllib.parse.urlunsplit(
            parts._replace(path="/".join([*segments[:-1], urllib.parse.quote(sibling)]), query="")
        )
        headers.append(
            first if i == split_no else read_remote_header(sibling_url, token=token, cache=cache)
        )
    return join_shards(tuple(headers))


# --------------------------------------------------------------------------- download


@dataclass(frozen=True, slots=True)
class DownloadProgress:
    """Where a download stands: ``file`` being fetched (``file_index`` of ``n_files``),
    ``done_bytes`` of ``total_bytes`` over all files, ``bytes_per_s`` over the last few
    seconds, ``eta_s`` (None until a speed is known) and ``stage`` ("checking" while an
    existing partial file is hashed, "downloading", "done")."""

    file: str
    file_index: int
    n_files: int
    done_bytes: int
    total_bytes: int
    bytes_per_s: float
    eta_s: float | None
    stage: str = "downloading"


ProgressCallback = Callable[[DownloadProgress], None]


@dataclass(slots=True)
class _Meter:
    """Speed over a sliding window of a few seconds, and throttled progress reports."""

    callback: ProgressCallback | None
    total_bytes: int
    n_files: int
    done_bytes: int = 0
    window_s: float = 5.0
    every_s: float = 0.2
    samples: collections.deque[tuple[float, int]] = dataclasses.field(
        default_factory=collections.deque
    )
    last_report: float = 0.0

    def add(self, n: int) -> None:
        self.done_bytes += n
        now = time.monotonic()
        self.samples.append((now, self.done_bytes))
        while self.samples and now - self.samples[0][0] > self.window_s:
            self.samples.popleft()

    def speed(self) -> float:
        if len(self.samples) < 2:
            return 0.0
        (t0, b0), (t1, b1) = self.samples[0], self.samples[-1]
        return (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0

    def report(
        self, file: str, index: int, stage: str = "downloading", force: bool = False
    ) -> None:
        now = time.monotonic()
        if self.callback is None or (not force and now - self.last_report < self.every_s):
            return
        self.last_report = now
        speed = self.speed()
        left = self.total_bytes - self.done_bytes
        eta = left / speed if speed > 0 else (0.0 if left <= 0 else None)
        self.callback(
            DownloadProgress(
                file, index, self.n_files, self.done_bytes, self.total_bytes, speed, eta, stage
            )
        )


@dataclass(frozen=True, slots=True)
class _Target:
    """Where one file goes: ``final`` (blob or file), ``partial`` beside it, ``link``
    (the snapshot path pointing at a blob, None for a plain folder)."""

    file: HubFile
    final: Path
    partial: Path
    link: Path | None


def _targets(
    listing: RepoListing, entry: ModelEntry, to: Path | None, hub_cache: Path | None
) -> list[_Target]:
    out = []
    if to is not None:
        for f in entry.files:
            final = to / f.path.rsplit("/", 1)[-1]
            out.append(_Target(f, final, final.with_name(final.name + ".part"), None))
        return out
    storage = (hub_cache or hub_cache_dir()) / ("models--" + listing.repo_id.replace("/", "--"))
    for f in entry.files:
        blob = storage / "blobs" / (f.sha256 or f.blob_id)
        # huggingface_hub's own name for a partial blob: either tool resumes the other's.
        partial = blob.with_name(blob.name + ".incomplete")
        out.append(_Target(f, blob, partial, storage / "snapshots" / listing.commit / f.path))
    return out


def _complete(target: _Target) -> bool:
    try:
        return target.final.stat().st_size == target.file.size_bytes
    except OSError:
        return False


def free_bytes(folder: Path) -> int:
    """Return the free bytes of the disk ``folder`` is on (or would be, once created)."""
    probe = folder
    while not probe.exists() and probe.parent != probe:
        probe = probe.parent
    return shutil.disk_usage(probe).free


def download(
    listing: RepoListing,
    entry: ModelEntry,
    *,
    to: Path | None = None,
    hub_cache: Path | None = None,
    progress: ProgressCallback | None = None,
    cancel: threading.Event | None = None,
    token: str | None = None,
    retries: int = 2,
    chunk_bytes: int = CHUNK_BYTES,
) -> Path:
    """Download every file of ``entry`` and return the path of its first (or only) file.

    Into ``to`` (a folder: files keep their names) or else the Hugging Face cache
    (``hub_cache``, default :func:`hub_cache_dir`) in huggingface_hub's layout. Each file
    is written to ``<name>.part`` (``blobs/<sha256>.incomplete`` in the cache), resumed
    from its size with a Range request after an interruption (also across calls; up to
    ``retries`` times within one call), checked against the hub's size and sha256 (git
    blob id for non-LFS files) and only then renamed into place. ``progress`` gets a
    :class:`DownloadProgress` about 5 times a second; setting ``cancel`` stops at the next
    chunk with :class:`~app.errors.DownloadCancelledError` (the partial file stays). Raise
    :class:`~app.errors.DownloadError` when the disk lacks room (checked before starting)
    or a checksum does not match (the partial file is deleted), other RemoteError
    subclasses for network and HTTP problems.
    """
    token = token if token is not None else hub_token()
    targets = _targets(listing, entry, to, hub_cache)
    total = entry.size_bytes
    need = 0
    for t in targets:
        if not _complete(t):
            have = t.partial.stat().st_size if t.partial.exists() else 0
            need += max(t.file.size_bytes - have, 0)
    folder = targets[0].final.parent
    free = free_bytes(folder)
    if need > free:
        raise DownloadError(
            listing.url(entry.files[0]),
            f"needs {need / 1024**3:.2f} GiB more, but {folder} has {free / 1024**3:.2f} GiB free",
        )
    meter = _Meter(progress, total, len(targets))
    for index, t in enumerate(targets):
        if _complete(t):
            meter.add(t.file.size_bytes)
        else:
            _download_one(listing.url(t.file), t, index, meter, cancel, token, retries, chunk_bytes)
        if t.link is not None:
            _link(t.final, t.link)
        last = index == len(targets) - 1
        meter.report(t.file.path, index, "done" if last else "downloading", force=True)
    if to is None and listing.revision != listing.commit:
        _write_ref(targets[0], listing)
    first = targets[0]
    return first.link if first.link is not None else first.final


def _hasher(f: HubFile) -> hashlib._Hash:
    if f.sha256:
        return hashlib.sha256()
    # A git blob id: sha1 of "blob <size>\0" + content.
    h = hashlib.sha1(usedforsecurity=False)
    h.update(f"blob {f.size_bytes}\0".encode())
    return h


@dataclass(slots=True)
class _Partial:
    """The partial file so far: ``have`` bytes on disk, hashed into ``digest``."""

    have: int
    digest: hashlib._Hash


def _download_one(
    url: str,
    t: _Target,
    index: int,
    meter: _Meter,
    cancel: threading.Event | None,
    token: str | None,
    retries: int,
    chunk_bytes: int,
) -> None:
    t.final.parent.mkdir(parents=True, exist_ok=True)
    state = _Partial(0, _hasher(t.file))
    if t.partial.exists():
        meter.report(t.file.path, index, "checking", force=True)
        with t.partial.open("rb") as part:
            while chunk := part.read(chunk_bytes):
                state.digest.update(chunk)
                state.have += len(chunk)
        if state.have > t.file.size_bytes:  # not ours, or the file changed: start over
            t.partial.unlink()
            state = _Partial(0, _hasher(t.file))
    meter.add(state.have)
    attempts = 0
    while state.have < t.file.size_bytes:
        try:
            _fetch_into(url, t, state, meter, index, cancel, token, chunk_bytes)
        except RemoteUnavailableError:
            attempts += 1
            if attempts > retries:
                raise
            time.sleep(min(0.2 * attempts, 2.0))
    actual = state.digest.hexdigest()
    expected = t.file.sha256 or t.file.blob_id
    if state.have != t.file.size_bytes or (expected and actual != expected.lower()):
        t.partial.unlink(missing_ok=True)
        raise DownloadError(
            url,
            f"checksum mismatch: got {state.have:,} bytes with hash {actual[:16]}…, the hub "
            f"says {t.file.size_bytes:,} bytes with {(expected or '?')[:16]}…; the partial "
            "file was deleted, try again",
        )
    os.replace(t.partial, t.final)


def _fetch_into(
    url: str,
    t: _Target,
    state: _Partial,
    meter: _Meter,
    index: int,
    cancel: threading.Event | None,
    token: str | None,
    chunk_bytes: int,
) -> None:
    """Append the rest of the file from byte ``state.have``, updating ``state``."""
    size = t.file.size_bytes
    headers = {"Range": f"bytes={state.have}-"} if state.have else {}
    with open_url(url, token=token, headers=headers) as response:
        if state.have and response.status != 206:
            # The server sends the whole file again: start the partial file over.
            meter.add(-state.have)
            state.have, state.digest = 0, _hasher(t.file)
        with t.partial.open("ab" if state.have else "wb") as out:
            while state.have < size:
                if cancel is not None and cancel.is_set():
                    raise DownloadCancelledError(
                        url,
                        f"cancelled after {state.have:,} of {size:,} bytes; run the download "
                        "again to resume",
                    )
                try:
                    chunk = response.read(min(chunk_bytes, size - state.have))
                except (OSError, ValueError) as err:
                    raise RemoteUnavailableError(url, f"connection lost: {err}") from None
                if not chunk:
                    raise RemoteUnavailableError(
                        url,
                        f"the connection closed after {state.have:,} of {size:,} bytes; run "
                        "the download again to resume",
                    )
                out.write(chunk)
                state.digest.update(chunk)
                state.have += len(chunk)
                meter.add(len(chunk))
                meter.report(t.file.path, index)


def _link(blob: Path, link: Path) -> None:
    """Point the snapshot path at the blob with a relative symlink (copy where none)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.resolve() == blob.resolve():
            return
        link.unlink()
    try:
        os.symlink(os.path.relpath(blob, link.parent), link)
    except OSError:
        # No symlinks (Windows without developer mode): a copy, as huggingface_hub does.
        tmp = link.with_name(link.name + ".part")
        shutil.copyfile(blob, tmp)
        os.replace(tmp, link)


def _write_ref(target: _Target, listing: RepoListing) -> None:
    """Record ``refs/<revision>`` = commit, as huggingface_hub does for branch names."""
    assert target.link is not None, "refs only exist in the cache layout"
    storage = target.final.parent.parent
    ref = storage / "refs" / listing.revision
    ref.parent.mkdir(parents=True, exist_ok=True)
    tmp = ref.with_name(f"{ref.name}.{os.getpid()}.tmp")
    tmp.write_text(listing.commit, encoding="utf-8")
    os.replace(tmp, ref)
