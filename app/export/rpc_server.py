"""ggml-rpc-server: the command that lends a machine's devices to llama.cpp over the network.

The program and its flags are those of ``tools/rpc/rpc-server.cpp`` in the llama.cpp that
llama-cpp-python 0.3.36 vendors (commit 0c1e570): the CMake target is ``ggml-rpc-server``
(``tools/rpc/CMakeLists.txt``), and it knows ``-H/--host`` (an IPv4 address: the server
binds with ``inet_addr``, ``ggml-rpc/transport.cpp``; default 127.0.0.1), ``-p/--port``
(default 50052), ``-t/--threads`` (the CPU device's threads, default half the hardware
threads), ``-d/--device`` (which devices to offer, comma-separated; default every GPU,
else the CPU) and ``-c/--cache`` (keep weights larger than 10 MiB in
``$LLAMA_CACHE/rpc`` or ``~/.cache/llama.cpp/rpc``, so a later load sends only their
hashes). There is no memory limit flag in this build: a server offers each device's free
memory as it reports it. :data:`FLAGS` lists what :func:`rpc_server_argv` may write; a test
checks each against the vendored file.

The server has no authentication or encryption. Bound to the address the main machine
connects to (``-H`` that LAN address) it listens on that interface alone; for a host name
(which ``-H`` does not take) the command binds every interface, ``-H 0.0.0.0``, and says so.

Example::

    rpc_server_argv("192.168.1.20:50052")
    # ('ggml-rpc-server', '-H', '192.168.1.20', '-p', '50052', '-c')
"""

from __future__ import annotations

import ipaddress
import shlex
from collections.abc import Sequence
from typing import Final

from app.errors import PlanError

__all__ = [
    "ANY_ADDRESS",
    "CACHED_TENSOR_BYTES",
    "FLAGS",
    "PROGRAM",
    "bind_address",
    "parse_endpoint",
    "rpc_server_argv",
    "rpc_server_line",
]

PROGRAM: Final = "ggml-rpc-server"
"""The program's name in the pinned build (older llama.cpp called it ``rpc-server``)."""

FLAGS: Final = ("-H", "-p", "-t", "-d", "-c")
"""Every flag :func:`rpc_server_argv` may write (each in the pinned rpc-server.cpp)."""

ANY_ADDRESS: Final = "0.0.0.0"

CACHED_TENSOR_BYTES: Final = 10 * 1024 * 1024
"""With ``-c`` a weight tensor larger than this is sent as its hash once the server has it
(``ggml-rpc.cpp`` ``HASH_THRESHOLD``); smaller ones are sent on every load."""


def parse_endpoint(endpoint: str) -> tuple[str, int]:
    """Return (host, port) of ``host:port`` as llama.cpp's ``--rpc`` reads it.

    llama.cpp splits at the first ``:`` and resolves the host with ``gethostbyname``
    (``ggml-rpc.cpp`` ``parse_endpoint``, ``transport.cpp``): an IPv4 address or a name,
    never an IPv6 literal. Raise :class:`~app.errors.PlanError` with the reason otherwise.
    """
    text = endpoint.strip()
    host, sep, port = text.partition(":")
    if not sep or not host or not port:
        raise PlanError(f"RPC machine must be HOST:PORT (e.g. 192.168.1.20:50052), got {text!r}")
    if ":" in port or host.startswith("["):
        raise PlanError(
            f"RPC machine {text!r}: llama.cpp's RPC client takes an IPv4 address or a host "
            "name before the port, not an IPv6 address"
        )
    if not port.isdigit() or not 0 < int(port) < 65536:
        raise PlanError(f"RPC machine {text!r}: the port must be a number from 1 to 65535")
    if any(c.isspace() or c in ",/@=" for c in host):
        raise PlanError(f"RPC machine {text!r}: {host!r} is not a host name or address")
    return host, int(port)


def bind_address(endpoint: str) -> str:
    """Return the ``-H`` for the server the main machine reaches at ``endpoint``: that
    IPv4 address itself, or :data:`ANY_ADDRESS` for a host name (``-H`` takes no names)."""
    host, _ = parse_endpoint(endpoint)
    try:
        return str(ipaddress.IPv4Address(host))
    except ValueError:
        return ANY_ADDRESS


def rpc_server_argv(
    endpoint: str,
    *,
    program: str = PROGRAM,
    bind: str | None = None,
    threads: int | None = None,
    devices: Sequence[str] = (),
    cache: bool = True,
) -> tuple[str, ...]:
    """Return the argument vector that starts the server the main machine reaches at
    ``endpoint`` (``host:port``).

    ``bind`` overrides ``-H`` (default :func:`bind_address`); ``threads`` writes ``-t``
    (worth it only where the server offers its CPU); ``devices`` writes ``-d`` (default:
    what the server offers by itself, its GPUs or else its CPU); ``cache`` writes ``-c``.
    """
    _, port = parse_endpoint(endpoint)
    argv = [program, "-H", bind or bind_address(endpoint), "-p", str(port)]
    if threads is not None:
        if threads < 1:
            raise PlanError(f"rpc-server threads must be ≥ 1, got {threads}")
        argv += ["-t", str(threads)]
    if devices:
        argv += ["-d", ",".join(devices)]
    if cache:
        argv.append("-c")
    return tuple(argv)


def rpc_server_line(argv: Sequence[str]) -> str:
    """Return ``argv`` as one POSIX shell line."""
    return shlex.join(argv)
