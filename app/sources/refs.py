"""What the model a user names is: a catalog entry, a Hugging Face repo, a URL or a path.

Every command and view takes a model the same four ways; :func:`parse_model_ref` tells
them apart, here and nowhere else (:mod:`app.sources.reading` reads the one named):

- ``catalog:NAME``: an entry of ggtune's catalog (:mod:`app.model.catalog`), no file;
- a Hugging Face repo: ``org/name`` (also ``:QUANT`` or ``@revision``), ``hf.co/…``, or a
  huggingface.co URL naming a repo (not a file): many files, listed by :mod:`app.sources.hf`;
- an http(s) URL of a ``.gguf`` file: read with range requests, nothing downloaded;
- anything else: a local path (any shard of a split model).

An existing local path always wins over a repo of the same spelling (``org/name`` may be a
folder), and a ``.gguf`` name off the hub keeps its single-file meaning. Pure string rules
(and ``$HF_ENDPOINT``): nothing here touches the network or the disk beyond ``exists``.
"""

from __future__ import annotations

import os
import re
import urllib.parse
from dataclasses import dataclass
from typing import Final, Literal

from app.errors import GGTuneError, RemoteNotFoundError
from app.model.catalog_names import is_catalog

DEFAULT_ENDPOINT: Final = "https://huggingface.co"
DEFAULT_REVISION: Final = "main"
_REPO_ID: Final = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")
_HUB_HOSTS: Final = ("huggingface.co", "hf.co", "www.huggingface.co")


def is_url(text: str) -> bool:
    """Return whether ``text`` is an http(s) URL (what :mod:`app.sources.remote` reads)."""
    return text.startswith(("http://", "https://"))


def hub_endpoint() -> str:
    """Return the hub's base URL: ``$HF_ENDPOINT`` or ``https://huggingface.co``."""
    return (os.environ.get("HF_ENDPOINT") or DEFAULT_ENDPOINT).rstrip("/")


def on_hub(host: str) -> bool:
    """Return whether ``host`` (a URL's netloc) is the Hugging Face hub (or HF_ENDPOINT's)."""
    host = host.lower()
    return host in _HUB_HOSTS or host == urllib.parse.urlsplit(hub_endpoint()).netloc.lower()


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
    if on_hub(split.netloc):
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


def is_repo_id(text: str) -> bool:
    """Return whether ``text`` is a repo id as the hub writes one (``org/name``, at most
    200 characters)."""
    return len(text) <= 200 and _REPO_ID.fullmatch(text) is not None


def _checked(ref: RepoRef, raw: str) -> RepoRef:
    if not _REPO_ID.match(ref.repo_id):
        raise RemoteNotFoundError(
            raw, "not a Hugging Face repo: expected org/name or a huggingface.co URL"
        )
    return ref


RefKind = Literal["catalog", "repo", "url", "path"]


@dataclass(frozen=True, slots=True)
class ModelRef:
    """A model as the user named it: ``kind`` and the ``text`` (stripped)."""

    kind: RefKind
    text: str


def is_repo(text: str) -> bool:
    """Return whether the model argument ``text`` names a Hugging Face repo.

    ``org/name`` (also ``:QUANT``/``@rev``), ``hf.co/…`` and huggingface.co URLs that name
    a repo are; an existing path, ``catalog:NAME``, any http(s) URL of a ``.gguf`` file and
    a name ending in ``.gguf`` off the hub are not (they keep their single-file meaning).
    """
    t = text.strip()
    if not t or is_catalog(t) or os.path.exists(t):
        return False
    scheme = "://" in t
    hub = on_hub(urllib.parse.urlsplit(t if scheme else "https://" + t).netloc)
    if scheme and (not hub or urllib.parse.urlsplit(t).path.lower().endswith(".gguf")):
        return False
    if not hub and t.lower().endswith(".gguf"):
        return False
    try:
        parse_repo(t)
    except GGTuneError:
        return False
    return True


def parse_model_ref(text: str | os.PathLike[str], *, repos: bool = True) -> ModelRef:
    """Return what ``text`` names (see the module's docstring for the rules).

    ``repos=False`` for a command that takes one file: ``org/name`` is then a path (a typo
    in a path reads "no such file", not a hint about Hugging Face repos).
    """
    t = os.fspath(text).strip()
    if is_catalog(t):
        return ModelRef("catalog", t)
    if repos and is_repo(t):
        return ModelRef("repo", t)
    if is_url(t):
        return ModelRef("url", t)
    return ModelRef("path", os.fspath(text))
