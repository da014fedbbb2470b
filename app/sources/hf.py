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
import errno
import hashlib
import http.client
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
    RateLimitedError,
    RemoteAuthError,
    RemoteError,
    RemoteNotFoundError,
    RemoteUnavailableError,
    SplitModelError,
)
from app.model.gguf_reader import Header, ModelFile, TensorInfo
from app.sources.refs import (
    RepoRef,
    hub_endpoint,
    is_repo_id,
    is_url,
    on_hub,
    parse_repo,
)
from app.sources.remote import (
    BLOCK_BYTES,
    TIMEOUT_S,
    check_url,
    open_url,
    read_body,
    read_remote_header,
)

__all__ = [
    "DownloadProgress",
    "HubFile",
    "HubRepo",
    "ModelEntry",
    "RemoteModel",
    "RepoListing",
    "download",
    "hub_cache_dir",
    "hub_token",
    "list_repo",
    "quant_label",
    "read_entry",
    "read_models",
    "read_url_model",
    "search_models",
]

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


# --------------------------------------------------------------------------- endpoint, token


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
    return hub_token() if on_hub(urllib.parse.urlsplit(url).netloc) else None


def hub_cache_dir() -> Path:
    """Return the Hugging Face cache the library scans (``$HF_HUB_CACHE``, ...)."""
    from app.sources.library import default_roots

    hub = default_roots().huggingface_hub
    assert hub is not None, "default_roots always names a Hugging Face cache"
    return hub


# --------------------------------------------------------------------------- names


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
        skipped = f" ({len(self.issues)} left out; first: {self.issues[0]})" if self.issues else ""
        raise RemoteNotFoundError(
            where, f"no file or quant {selector!r}; the repo has: {have}{skipped}"
        )


MAX_REMOTE_SHARDS: Final = 1024
"""Most shards of a split model read by URL (the biggest real ones have about 50)."""

MAX_JSON_BYTES: Final = 32 << 20
"""Largest hub API answer read (a tree page of 1,000 files is about 300 KiB)."""

MAX_TREE_PAGES: Final = 10_000
"""Most tree pages followed (10 million files at the hub's 1,000 per page)."""

_SHA256: Final = re.compile(r"^[0-9a-fA-F]{64}$")
_GIT_OID: Final = re.compile(r"^[0-9a-f]{40}$")
_COMMIT: Final = re.compile(r"^[0-9a-f]{40}$")
"""A commit id as huggingface_hub checks it (``constants.REGEX_COMMIT_HASH``)."""


def _get_json(url: str, token: str | None, timeout_s: float) -> tuple[object, str | None]:
    """GET ``url`` and return (parsed JSON, the next page's URL from ``Link``).

    The answer may take at most ``timeout_s`` seconds and :data:`MAX_JSON_BYTES`.
    """
    with open_url(
        url, token=token, headers={"Accept": "application/json"}, timeout_s=timeout_s
    ) as response:
        body = read_body(response, url, max_bytes=MAX_JSON_BYTES, deadline_s=timeout_s)
        link = response.headers.get("Link")
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        raise RemoteError(url, "the hub's answer is not JSON") from None
    next_url = None
    if link:
        match = re.search(r'<([^>]+)>\s*;\s*rel="?next"?', link)
        if match:
            next_url = urllib.parse.urljoin(url, match.group(1))
    return data, next_url


def _same_origin(a: str, b: str) -> bool:
    pa, pb = urllib.parse.urlsplit(a), urllib.parse.urlsplit(b)
    return (pa.scheme, pa.netloc.lower()) == (pb.scheme, pb.netloc.lower())


def list_repo(
    repo: str | RepoRef, *, token: str | None = None, timeout_s: float = TIMEOUT_S
) -> RepoListing:
    """List the GGUF models of ``repo`` (an id, URL or :class:`RepoRef`) with sizes.

    Two kinds of request, as huggingface_hub makes them: the revision's info (for its
    commit) and the recursive file tree at that commit (paginated). ``token`` defaults to
    :func:`hub_token`; each answer must arrive whole within ``timeout_s`` seconds. Files
    whose path is unsafe (``..``, absolute) or that carry no checksum to verify a
    download against are left out and named in ``issues``. Raise
    :class:`~app.errors.RemoteError` subclasses (404 for an unknown repo or revision,
    401/403 for a private one, offline, rate limited, an answer that is not the hub's).
    """
    ref = parse_repo(repo) if isinstance(repo, str) else repo
    endpoint = hub_endpoint()
    token = token if token is not None else hub_token()
    rev = urllib.parse.quote(ref.revision, safe="")
    where = f"{endpoint}/{ref.repo_id}"
    info, _ = _get_json(f"{endpoint}/api/models/{ref.repo_id}/revision/{rev}", token, timeout_s)
    commit = info.get("sha") if isinstance(info, dict) else None
    if not isinstance(commit, str) or not _COMMIT.match(commit):
        raise RemoteError(where, "the hub's answer names no valid commit id")
    files: list[HubFile] = []
    issues: list[str] = []
    page: str | None = (
        f"{endpoint}/api/models/{ref.repo_id}/tree/{commit}?recursive=true&expand=false"
    )
    seen: set[str] = set()
    while page is not None:
        if page in seen or len(seen) >= MAX_TREE_PAGES:
            raise RemoteError(where, "the hub's file tree pages loop; refused")
        if not _same_origin(page, endpoint):
            raise RemoteError(
                where, f"the hub's next tree page is on another host ({_host_of(page)}); refused"
            )
        seen.add(page)
        data, page = _get_json(page, token, timeout_s)
        if not isinstance(data, list):
            raise RemoteError(where, "the hub's file tree is not a list")
        for item in data:
            if _is_gguf_item(item):
                assert isinstance(item, dict), "checked by _is_gguf_item"
                hub_file, problem = _hub_file(item)
                if hub_file is None:
                    issues.append(problem)
                else:
                    files.append(hub_file)
    models, extras, group_issues = _group(files)
    return RepoListing(
        ref.repo_id, ref.revision, commit, endpoint, models, extras, (*issues, *group_issues)
    )


# --------------------------------------------------------------------------- search

SEARCH_LIMIT: Final = 30
"""Repos a search returns unless asked for another number."""

MAX_SEARCH_LIMIT: Final = 100
"""Most repos one search asks for (one page of the hub's answer)."""

MAX_SEARCH_CHARS: Final = 200
"""Longest search text sent (the hub matches words in repo ids; longer finds nothing)."""


@dataclass(frozen=True, slots=True)
class HubRepo:
    """One repo a search found: ``repo_id`` ("org/name"), its ``downloads`` (the hub's
    count over the last 30 days) and ``likes`` (None where the answer gave no number),
    ``gated`` (True when access must be asked for; None when the answer does not say, as
    the hub's list leaves it out unless asked to expand it) and ``last_modified`` (the
    hub's ISO time, "" when not given)."""

    repo_id: str
    downloads: int | None
    likes: int | None
    gated: bool | None = None
    last_modified: str = ""


def _count(value: object) -> int | None:
    """Return a count from the hub's answer, None unless a non-negative int."""
    if isinstance(value, int) and not isinstance(value, bool) and value >= 0:
        return value
    return None


def search_models(
    words: str,
    *,
    limit: int = SEARCH_LIMIT,
    token: str | None = None,
    timeout_s: float = TIMEOUT_S,
) -> tuple[HubRepo, ...]:
    """Return the repos with GGUF files whose id matches ``words``, most downloaded first.

    One request, as huggingface_hub's ``HfApi.list_models(search=..., filter="gguf",
    sort="downloads", direction=-1, limit=...)`` makes it::

        GET {endpoint}/api/models?search=WORDS&filter=gguf&sort=downloads&direction=-1&limit=N
            -> [{"id": "org/name", "downloads": 123, "likes": 4, "gated": false, ...}]

    Only the first page is read (``limit`` at most :data:`MAX_SEARCH_LIMIT`). Entries
    that are not a repo id the hub would give (``org/name``) are skipped, as are
    repeats; a count that is not a number is None. Raise
    :class:`~app.errors.RemoteError` subclasses: offline, rate limited, an answer that
    is not a list of repos, or a search text that is empty or longer than
    :data:`MAX_SEARCH_CHARS` characters (nothing is sent then).
    """
    endpoint = hub_endpoint()
    where = f"{endpoint}/api/models"
    text = " ".join(words.split())
    if not text:
        raise RemoteError(where, "type a few words to search for (e.g. qwen3 8b)")
    if len(text) > MAX_SEARCH_CHARS:
        raise RemoteError(
            where, f"the search text has {len(text)} characters; at most {MAX_SEARCH_CHARS}"
        )
    assert 1 <= limit <= MAX_SEARCH_LIMIT, f"limit must be 1 to {MAX_SEARCH_LIMIT}, got {limit}"
    token = token if token is not None else hub_token()
    query = urllib.parse.urlencode(
        {
            "search": text,
            "filter": "gguf",
            "sort": "downloads",
            "direction": "-1",
            "limit": str(limit),
        }
    )
    data, _next = _get_json(f"{where}?{query}", token, timeout_s)
    if not isinstance(data, list):
        raise RemoteError(where, "the hub's search answer is not a list of repos")
    found: list[HubRepo] = []
    seen: set[str] = set()
    for item in data:
        if len(found) >= limit:
            break
        if not isinstance(item, dict):
            continue
        repo_id = item.get("id", item.get("modelId"))
        if not isinstance(repo_id, str) or not is_repo_id(repo_id) or repo_id in seen:
            continue
        seen.add(repo_id)
        modified = item.get("lastModified")
        found.append(
            HubRepo(
                repo_id=repo_id,
                downloads=_count(item.get("downloads")),
                likes=_count(item.get("likes")),
                gated=None if "gated" not in item else item["gated"] not in (False, "false", ""),
                last_modified=modified[:40] if isinstance(modified, str) else "",
            )
        )
    return tuple(found)


def _host_of(url: str) -> str:
    return urllib.parse.urlsplit(url).netloc or url


def _is_gguf_item(item: object) -> bool:
    return (
        isinstance(item, dict)
        and item.get("type") == "file"
        and isinstance(item.get("path"), str)
        and str(item["path"]).lower().endswith(".gguf")
    )


def unsafe_path_reason(path: str) -> str | None:
    """Return why a repo file path may not be written under a folder, or None if it may.

    A path is written below the download folder as it is, so it must be relative, use
    ``/`` only, and have no empty, ``.`` or ``..`` part, no control character, no ``\\``
    and no ``:`` (a drive or a stream on Windows).
    """
    if not path or len(path) > 1024:
        return "an empty or overlong path"
    if any(ord(c) < 32 or ord(c) == 127 for c in path):
        return "a control character in the path"
    if path.startswith("/"):
        return "an absolute path"
    if "\\" in path or ":" in path:
        return "a '\\' or ':' in the path (a drive or stream on Windows)"
    parts = path.split("/")
    if any(p in ("", ".", "..") for p in parts):
        return "a '..', '.' or empty part in the path"
    if any(len(p.encode("utf-8")) > 255 for p in parts):
        return "a file name longer than 255 bytes"
    return None


def _checksum_of(sha256: str | None, blob_id: str) -> str | None:
    """Return the checksum a download is verified against (sha256, else git oid)."""
    if sha256 is not None:
        return sha256.lower() if _SHA256.match(sha256) else None
    return blob_id if _GIT_OID.match(blob_id) else None


def _hub_file(item: dict[str, object]) -> tuple[HubFile | None, str]:
    """Return the listed file, or None and why it is left out."""
    path = str(item["path"])
    lfs = item.get("lfs")
    sha256 = lfs.get("oid") if isinstance(lfs, dict) else None
    size = item.get("size")
    oid = item.get("oid")
    hub_file = HubFile(
        path=path,
        size_bytes=size if isinstance(size, int) and not isinstance(size, bool) else -1,
        sha256=sha256 if isinstance(sha256, str) else ("" if isinstance(lfs, dict) else None),
        blob_id=oid if isinstance(oid, str) else "",
    )
    unsafe = unsafe_path_reason(path)
    if unsafe is not None:
        return None, f"{path!r}: skipped, {unsafe} (not a file the hub would list)"
    if hub_file.size_bytes < 0:
        return None, f"{path}: skipped, the hub gives no size for it"
    if _checksum_of(hub_file.sha256, hub_file.blob_id) is None:
        return None, f"{path}: skipped, the hub gives no checksum to verify a download"
    return hub_file, ""


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
    parts = check_url(url)
    path = parts.path
    segments = path.split("/")
    hub = on_hub(parts.netloc)
    if hub and len(segments) > 4 and segments[3] == "blob":
        segments[3] = "resolve"
    elif hub and len(segments) <= 3 and not segments[-1].lower().endswith(".gguf"):
        raise RemoteNotFoundError(
            url, "a repo, not a file: use `ggtune hf REPO` to compare its files"
        )
    url = urllib.parse.urlunsplit(parts._replace(path="/".join(segments)))
    token = _token_for(url)
    first = read_remote_header(url, token=token, cache=cache)
    n_split = first.get_int("split.count", 0)
    if n_split <= 1:
        return join_shards((first,))
    if n_split > MAX_REMOTE_SHARDS:
        raise SplitModelError(
            f"{url}: split.count says {n_split} shards; ggtune reads at most "
            f"{MAX_REMOTE_SHARDS} over HTTP (one request each)"
        )
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
    (the snapshot path pointing at a blob, None for a plain folder); ``checksum`` is what
    its bytes must hash to (sha256, or the git blob id of a plain git file)."""

    file: HubFile
    final: Path
    partial: Path
    link: Path | None
    checksum: str
    user_folder: bool


def _inside(path: Path, root: Path) -> bool:
    """Return whether ``path`` stays below ``root`` once ``..`` and links are resolved."""
    try:
        return path.resolve().is_relative_to(root.resolve())
    except (OSError, RuntimeError):  # a link loop
        return False


def _targets(
    listing: RepoListing, entry: ModelEntry, to: Path | None, hub_cache: Path | None
) -> list[_Target]:
    """Return where each file goes; raise DownloadError for a file that would land
    outside the folder (a hostile listing) or that has nothing to verify it against."""
    out = []
    if to is None:
        root = (hub_cache or hub_cache_dir()) / ("models--" + listing.repo_id.replace("/", "--"))
        if not _COMMIT.match(listing.commit):
            raise DownloadError(
                listing.url(entry.files[0]), f"unsafe commit id {listing.commit[:60]!r}; refused"
            )
    else:
        root = to
    for f in entry.files:
        url = listing.url(f)
        unsafe = unsafe_path_reason(f.path)
        if unsafe is not None:
            raise DownloadError(url, f"unsafe file path {f.path[:80]!r} ({unsafe}); refused")
        checksum = _checksum_of(f.sha256, f.blob_id)
        if checksum is None or f.size_bytes < 0:
            raise DownloadError(
                url, "the hub gives no checksum (or size) to verify this file; refused"
            )
        if to is not None:
            final = to / f.path.rsplit("/", 1)[-1]
            out.append(
                _Target(f, final, final.with_name(final.name + ".part"), None, checksum, True)
            )
            continue
        blob = root / "blobs" / checksum
        # huggingface_hub's own name for a partial blob: either tool resumes the other's.
        partial = blob.with_name(blob.name + ".incomplete")
        link = root / "snapshots" / listing.commit / f.path
        out.append(_Target(f, blob, partial, link, checksum, False))
    for t in out:
        for path in (t.final, t.partial, t.link):
            if path is not None and not _inside(path, root):
                raise DownloadError(
                    listing.url(t.file), f"{path} would lie outside {root}; refused"
                )
    return out


def _disk_error(url: str, err: OSError, path: Path | None = None) -> DownloadError:
    """Return the one-line error for a failed file operation during a download."""
    where = path or (Path(err.filename) if err.filename else None)
    if err.errno == errno.ENOSPC:
        why = "the disk is full"
    elif err.errno == errno.EFBIG:
        why = "the file is larger than this process may write (file size limit)"
    elif err.errno in (errno.EACCES, errno.EPERM, errno.EROFS):
        why = "cannot write there (permission denied or a read-only disk)"
    elif err.errno in (errno.ENOTDIR, errno.EEXIST, errno.EISDIR):
        why = "a file is in the way of a folder (or a folder of a file)"
    else:
        why = err.strerror or str(err)
    at = f" ({where})" if where is not None else ""
    return DownloadError(
        url, f"{why}{at}; what was downloaded is kept, run the download again to resume"
    )


def _same_bytes(target: _Target, meter: _Meter, index: int, chunk_bytes: int) -> bool | None:
    """Return whether the file at ``target.final`` is the hub's file (size and hash),
    None when there is no file there."""
    try:
        st = target.final.stat()
    except OSError:
        return None
    if not target.final.is_file():
        return False
    if st.st_size != target.file.size_bytes:
        return False
    meter.report(target.file.path, index, "checking", force=True)
    digest = _hasher(target.file)
    with target.final.open("rb") as f:
        while chunk := f.read(chunk_bytes):
            digest.update(chunk)
    return digest.hexdigest() == target.checksum


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
    blob id for non-LFS files) and only then renamed into place. A file already there
    counts only once its bytes hash right: a cached blob that does not is fetched again;
    a different file of the same name in ``to`` is never replaced (DownloadError).
    ``progress`` gets a :class:`DownloadProgress` about 5 times a second; setting
    ``cancel`` stops at the next chunk with :class:`~app.errors.DownloadCancelledError`
    (the partial file stays). Nothing is written outside ``to`` or the repo's cache
    folder: a listing whose paths or checksums would lead elsewhere is refused. Raise
    :class:`~app.errors.DownloadError` when the disk lacks room (checked before starting,
    and when it fills up), a checksum does not match (the partial file is deleted) or a
    file cannot be written, other RemoteError subclasses for network and HTTP problems.
    """
    token = token if token is not None else hub_token()
    first_url = listing.url(entry.files[0])
    if to is not None and to.exists() and not to.is_dir():
        raise DownloadError(first_url, f"{to} is a file, not a folder to download into")
    targets = _targets(listing, entry, to, hub_cache)
    total = entry.size_bytes
    meter = _Meter(progress, total, len(targets))
    done: set[int] = set()
    need = 0
    for index, t in enumerate(targets):
        same = _same_bytes(t, meter, index, chunk_bytes)
        if same:
            done.add(index)
            continue
        if same is False and t.user_folder:
            raise DownloadError(
                listing.url(t.file),
                f"{t.final} exists and differs from the hub's file; it was left as it is "
                "(move it away or download into another folder)",
            )
        try:
            have = t.partial.stat().st_size if t.partial.is_file() else 0
        except OSError:
            have = 0
        need += max(t.file.size_bytes - have, 0)
    folder = targets[0].final.parent
    try:
        free = free_bytes(folder)
    except OSError as err:
        raise _disk_error(first_url, err, folder) from None
    if need > free:
        raise DownloadError(
            first_url,
            f"needs {need / 1024**3:.2f} GiB more, but {folder} has {free / 1024**3:.2f} GiB free",
        )
    for index, t in enumerate(targets):
        url = listing.url(t.file)
        try:
            if index in done:
                meter.add(t.file.size_bytes)
            else:
                _download_one(url, t, index, meter, cancel, token, retries, chunk_bytes)
            if t.link is not None:
                _link(t.final, t.link)
        except OSError as err:
            raise _disk_error(url, err) from None
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


STALL_S: Final = 120.0
"""A download that gets under :data:`STALL_BYTES` in this many seconds is dropped (and
resumed by the retries), so a server sending a byte now and then cannot hold it forever."""

STALL_BYTES: Final = 64 << 10


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
    if t.partial.is_file():
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
    restarted = False
    while state.have < t.file.size_bytes:
        try:
            _fetch_into(url, t, state, meter, index, cancel, token, chunk_bytes)
        except RemoteUnavailableError:
            attempts += 1
            if attempts > retries:
                raise
            time.sleep(min(0.2 * attempts, 2.0))
        except RemoteError as err:
            if err.status != 416 or not state.have or restarted:
                raise
            # The server refuses to resume from this partial file (it changed, or the
            # server ignores ranges): start the file over, once.
            restarted = True
            meter.add(-state.have)
            t.partial.unlink(missing_ok=True)
            state = _Partial(0, _hasher(t.file))
    actual = state.digest.hexdigest()
    if state.have != t.file.size_bytes or actual != t.checksum:
        t.partial.unlink(missing_ok=True)
        raise DownloadError(
            url,
            f"checksum mismatch: got {state.have:,} bytes with hash {actual[:16]}…, the hub "
            f"says {t.file.size_bytes:,} bytes with {t.checksum[:16]}…; the partial "
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
        stall = _Stall(url, time.monotonic(), state.have)
        with t.partial.open("ab" if state.have else "wb") as out:
            while state.have < size:
                if cancel is not None and cancel.is_set():
                    raise DownloadCancelledError(
                        url,
                        f"cancelled after {state.have:,} of {size:,} bytes; run the download "
                        "again to resume",
                    )
                chunk = stall.read(response, min(chunk_bytes, size - state.have), state.have)
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


@dataclass(slots=True)
class _Stall:
    """Drop a download that gets under :data:`STALL_BYTES` in :data:`STALL_S` seconds."""

    url: str
    mark_time: float
    mark_bytes: int

    def read(self, response: http.client.HTTPResponse, n: int, have: int) -> bytes:
        """Read up to ``n`` bytes (fewer only at the end), packet by packet, checking the
        speed between packets; ``have`` is the file's size so far."""
        parts: list[bytes] = []
        got = 0
        while got < n:
            try:
                data = response.read1(n - got)
            except (OSError, ValueError, http.client.HTTPException) as err:
                raise RemoteUnavailableError(self.url, f"connection lost: {err}") from None
            if not data:
                break
            parts.append(data)
            got += len(data)
            now = time.monotonic()
            if have + got - self.mark_bytes >= STALL_BYTES:
                self.mark_time, self.mark_bytes = now, have + got
            elif now - self.mark_time > STALL_S:
                raise RemoteUnavailableError(
                    self.url,
                    f"the download stalled (under {STALL_BYTES >> 10} KiB in {STALL_S:g} s); "
                    "run it again to resume",
                )
        return b"".join(parts)


def _link(blob: Path, link: Path) -> None:
    """Point the snapshot path at the blob with a relative symlink (copy where none).

    Only a link (or a copy huggingface_hub made) inside the snapshot folder is replaced;
    ``_targets`` has checked that ``link`` lies inside the repo's cache folder.
    """
    link.parent.mkdir(parents=True, exist_ok=True)
    if link.is_symlink() or link.exists():
        if link.resolve() == blob.resolve():
            return
        if link.is_dir() and not link.is_symlink():
            raise IsADirectoryError(errno.EISDIR, "a folder is in the way", str(link))
        link.unlink()
    try:
        os.symlink(os.path.relpath(blob, link.parent), link)
    except OSError:
        # No symlinks (Windows without developer mode): a copy, as huggingface_hub does.
        tmp = link.with_name(link.name + ".part")
        shutil.copyfile(blob, tmp)
        os.replace(tmp, link)


def _write_ref(target: _Target, listing: RepoListing) -> None:
    """Record ``refs/<revision>`` = commit, as huggingface_hub does for branch names.

    A revision that is not a safe relative path (``../x``) gets no ref file.
    """
    assert target.link is not None, "refs only exist in the cache layout"
    if unsafe_path_reason(listing.revision) is not None:
        return
    storage = target.final.parent.parent
    ref = storage / "refs" / listing.revision
    if not _inside(ref, storage):
        return
    try:
        ref.parent.mkdir(parents=True, exist_ok=True)
        tmp = ref.with_name(f"{ref.name}.{os.getpid()}.tmp")
        tmp.write_text(listing.commit, encoding="utf-8")
        os.replace(tmp, ref)
    except OSError:
        return  # the ref only saves huggingface_hub a lookup; the download is complete
