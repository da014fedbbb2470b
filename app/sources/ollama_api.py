"""Ask a running Ollama server what it loaded: ``/api/ps`` and ``/api/show``.

Shapes from ollama/ollama ``docs/api.md`` ("List Running Models", "Show Model
Information") and ``api/types.go`` (``ProcessModelResponse``: name, model, size, digest,
details, expires_at, size_vram, context_length; ``ShowResponse``: parameters, details,
model_info, …). ``context_length`` is the per-slot ``num_ctx`` (``llamaServerRunner
.ContextLength``); the engine's context is that times ``OLLAMA_NUM_PARALLEL``.

The server address follows ``envconfig.Host``/``ConnectableHost``: ``OLLAMA_HOST`` (scheme
optional, default port 11434; 0.0.0.0 means this machine), else 127.0.0.1:11434. Only the
standard library is used, with a short timeout: no server is the normal case and reads as
``running=False`` quietly.

Example::

    status = ollama_status()
    if status.running:
        for m in status.models:
            print(m.name, m.size_bytes, m.size_vram_bytes, m.context_length)
"""

from __future__ import annotations

import ipaddress
import json
import os
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Final

__all__ = [
    "OllamaShow",
    "OllamaStatus",
    "RunningModel",
    "ollama_base_url",
    "ollama_status",
    "show_model",
]

DEFAULT_TIMEOUT_S: Final = 0.5


@dataclass(frozen=True, slots=True)
class RunningModel:
    """One model Ollama holds in memory: sizes in bytes, ``context_length`` per slot."""

    name: str
    model: str
    size_bytes: int
    size_vram_bytes: int
    context_length: int | None
    digest: str
    expires_at: str | None
    details: Mapping[str, object] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class OllamaStatus:
    """Whether an Ollama server answered at ``base_url``, and the models it has loaded.

    ``error`` says why nothing answered (``None`` when it did); no server is normal.
    """

    base_url: str
    running: bool
    models: tuple[RunningModel, ...] = ()
    error: str | None = None


@dataclass(frozen=True, slots=True)
class OllamaShow:
    """What ``/api/show`` says about one model.

    ``parameters`` maps each parameter to its values as text (``stop`` may repeat), from
    the ``parameters`` field (``name   value`` lines).
    """

    name: str
    parameters: Mapping[str, tuple[str, ...]]
    details: Mapping[str, object]
    model_info: Mapping[str, object]
    modelfile: str


def ollama_base_url(env: Mapping[str, str] | None = None) -> str:
    """Return the URL of the Ollama server, as Ollama's own client computes it."""
    env = os.environ if env is None else env
    raw = env.get("OLLAMA_HOST", "").strip().strip("\"'")
    scheme, sep, hostport = raw.partition("://")
    default_port = "11434"
    if not sep:
        scheme, hostport = "http", raw
    elif scheme == "http":
        default_port = "80"
    elif scheme == "https":
        default_port = "443"
    hostport = hostport.split("/", 1)[0]
    host, port = _split_host_port(hostport)
    if host is None:
        host, port = "127.0.0.1", default_port
        bare = hostport.strip("[]")
        if _is_ip(bare):
            host = bare
        elif hostport:
            host = hostport
    if not port.isdigit() or int(port) > 65535:
        port = default_port
    if _is_ip(host) and ipaddress.ip_address(host).is_unspecified:
        host = "127.0.0.1" if ipaddress.ip_address(host).version == 4 else "::1"
    shown = f"[{host}]" if ":" in host else host
    return f"{scheme}://{shown}:{port}"


def _is_ip(text: str) -> bool:
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def _split_host_port(hostport: str) -> tuple[str | None, str]:
    """net.SplitHostPort: "host:port" or "[v6]:port"; (None, "") when there is no port."""
    if hostport.startswith("["):
        end = hostport.find("]")
        if end < 0 or hostport[end + 1 : end + 2] != ":":
            return None, ""
        return hostport[1:end], hostport[end + 2 :]
    if hostport.count(":") != 1:
        return None, ""
    host, port = hostport.split(":")
    return host, port


def _request(url: str, body: Mapping[str, object] | None, timeout_s: float) -> object:
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(
        url,
        data=data,
        method="GET" if body is None else "POST",
        headers={"Content-Type": "application/json"} if body is not None else {},
    )
    # No proxies: the server is local, and a proxy from the environment must not see it.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    with opener.open(req, timeout=timeout_s) as response:
        return json.loads(response.read())


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def ollama_status(
    base_url: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> OllamaStatus:
    """Return what ``GET /api/ps`` reports; never raise (no server = ``running=False``)."""
    url = base_url or ollama_base_url()
    try:
        payload = _request(url + "/api/ps", None, timeout_s)
    except (OSError, ValueError) as err:
        reason = getattr(err, "reason", None) or err
        return OllamaStatus(url, running=False, error=f"not running ({reason})")
    if not isinstance(payload, dict) or not isinstance(payload.get("models", []), list):
        return OllamaStatus(url, running=True, error="unexpected answer from /api/ps")
    models = []
    for item in payload.get("models") or []:
        if not isinstance(item, dict):
            continue
        ctx = item.get("context_length")
        details = item.get("details")
        models.append(
            RunningModel(
                name=str(item.get("name", "")),
                model=str(item.get("model", item.get("name", ""))),
                size_bytes=_int(item.get("size")),
                size_vram_bytes=_int(item.get("size_vram")),
                context_length=ctx if isinstance(ctx, int) and ctx > 0 else None,
                digest=str(item.get("digest", "")),
                expires_at=str(item["expires_at"]) if "expires_at" in item else None,
                details=details if isinstance(details, dict) else {},
            )
        )
    return OllamaStatus(url, running=True, models=tuple(models))


def parse_parameters(text: str) -> dict[str, tuple[str, ...]]:
    """Parse ``/api/show``'s ``parameters``: one ``name  value`` per line, values quoted."""
    out: dict[str, tuple[str, ...]] = {}
    for line in text.splitlines():
        name, _, value = line.strip().partition(" ")
        if not name:
            continue
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] == '"':
            value = value[1:-1]
        out[name] = (*out.get(name, ()), value)
    return out


def show_model(
    name: str, base_url: str | None = None, *, timeout_s: float = DEFAULT_TIMEOUT_S
) -> OllamaShow | None:
    """Return ``POST /api/show`` for ``name``, or None when the server does not answer."""
    url = base_url or ollama_base_url()
    try:
        payload = _request(url + "/api/show", {"model": name}, timeout_s)
    except (OSError, ValueError, urllib.error.HTTPError):
        return None
    if not isinstance(payload, dict):
        return None
    params = payload.get("parameters")
    details = payload.get("details")
    info = payload.get("model_info")
    modelfile = payload.get("modelfile")
    return OllamaShow(
        name=name,
        parameters=parse_parameters(params) if isinstance(params, str) else {},
        details=details if isinstance(details, dict) else {},
        model_info=info if isinstance(info, dict) else {},
        modelfile=modelfile if isinstance(modelfile, str) else "",
    )
