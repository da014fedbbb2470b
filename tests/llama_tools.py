"""llama.cpp's own programs in tests: their paths, and ggml-rpc-server processes on loopback.

A pytest plugin (tests/conftest.py loads it with ``pytest_plugins``), so every test folder
has its fixtures:

``llama_tools`` (session)
    :class:`runner.llama_tools.LlamaTools` for the installed llama-cpp-python:
    ``llama_tools.path("llama-fit-params")``. The set-up (``python3 tasks.py test``) builds
    the programs; without them the test fails with the line that says how to build them.

``rpc_servers`` (per test)
    Starts ggml-rpc-server processes: ``with rpc_servers(2) as servers:`` gives a list of
    :class:`RpcServer` (``.endpoint`` is ``"127.0.0.1:PORT"``; ``rpc_arg(servers)`` is the
    value of llama.cpp's ``--rpc``). Each listens on a free loopback port and accepts
    connections before the block starts; all are stopped (SIGTERM, then SIGKILL) and reaped
    when it ends, also on failure, so tests/runner's no-leftover-children check holds.

:func:`running_rpc_servers` is the same context manager for code without fixtures.

ggml-rpc-server has no memory option at this llama.cpp (tools/rpc/rpc-server.cpp: -H,
-p, -t, -d, -c only): each server shows llama.cpp one device per local device, here the
CPU, with the machine's free RAM as its free memory. Its address space is capped with
RLIMIT_AS on Linux (``memory_limit``, 4 GiB by default) so that a runaway test fails an
allocation instead of exhausting the shared machine.

Example::

    def test_two_devices(rpc_servers, llama_tools, gemma_path):
        with rpc_servers(2) as servers:
            subprocess.run([llama_tools.path("llama-fit-params"), "--rpc", rpc_arg(servers),
                            "-m", gemma_path, "-fitp", "on"], check=True)
"""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import pytest

from runner.llama_tools import LlamaToolMissing, LlamaTools, find_tools

LOOPBACK = "127.0.0.1"
START_TIMEOUT_S = 30.0
STOP_TIMEOUT_S = 10.0
DEFAULT_MEMORY_LIMIT = 4 << 30


@dataclass(frozen=True)
class RpcServer:
    """One running ggml-rpc-server."""

    port: int
    process: subprocess.Popen[bytes]
    log: Path

    @property
    def endpoint(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def output(self) -> str:
        """Return what the server printed so far (its device list, connections)."""
        return self.log.read_text(encoding="utf-8", errors="replace")


def rpc_arg(servers: Sequence[RpcServer]) -> str:
    """Return llama.cpp's ``--rpc`` value for ``servers``: ``host:port,host:port``."""
    return ",".join(server.endpoint for server in servers)


def free_port() -> int:
    """Return a TCP port on loopback that nothing listens on right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def _accepts(port: int) -> bool:
    # ggml-rpc-server serves one client at a time and drops a client that closes before
    # its HELLO (ggml-rpc.cpp, rpc_serve_client), so a bare connect is a harmless probe.
    try:
        with socket.create_connection((LOOPBACK, port), timeout=0.5):
            return True
    except OSError:
        return False


def _limit_memory(pid: int, limit: int | None) -> None:
    if limit is None or not sys.platform.startswith("linux"):
        return
    import resource

    with contextlib.suppress(OSError, ValueError):  # the process may already have exited
        resource.prlimit(pid, resource.RLIMIT_AS, (limit, limit))


def _stop(process: subprocess.Popen[bytes]) -> None:
    """End ``process`` (SIGTERM, then SIGKILL after STOP_TIMEOUT_S) and reap it."""
    if process.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            process.terminate()
        try:
            process.wait(timeout=STOP_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait()


def _start_one(
    exe: Path,
    log_dir: Path,
    threads: int,
    memory_limit: int | None,
    logs: list[IO[bytes]],
    registry: list[RpcServer],
) -> RpcServer:
    last_error = ""
    for _attempt in range(3):  # the free port may be taken between probe and bind
        port = free_port()
        log_path = log_dir / f"rpc-server-{port}.log"
        log = log_path.open("wb")
        logs.append(log)
        argv = [str(exe), "-H", LOOPBACK, "-p", str(port), "-t", str(threads)]
        # GGML_RPC_NO_RDMA: plain TCP on loopback, whatever the machine's NICs can do
        env = dict(os.environ, GGML_RPC_NO_RDMA="1")
        process = subprocess.Popen(
            argv, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, env=env
        )
        server = RpcServer(port, process, log_path)
        registry.append(server)
        _limit_memory(process.pid, memory_limit)
        deadline = time.monotonic() + START_TIMEOUT_S
        while time.monotonic() < deadline:
            if process.poll() is not None:
                break
            if _accepts(port):
                return server
            time.sleep(0.05)
        _stop(process)
        tail = server.output().strip().splitlines()[-3:]
        last_error = f"exit {process.returncode}: {' | '.join(tail) or 'no output'}"
    raise RuntimeError(f"ggml-rpc-server did not start on {LOOPBACK} ({last_error})")


@contextlib.contextmanager
def running_rpc_servers(
    exe: Path,
    count: int,
    *,
    threads: int = 1,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
    log_dir: Path | None = None,
    registry: list[RpcServer] | None = None,
) -> Iterator[list[RpcServer]]:
    """Start ``count`` ggml-rpc-servers on free loopback ports; stop them all on exit.

    ``threads`` is each server's ``-t`` (its CPU device's threads); ``memory_limit`` caps
    each server's address space in bytes (Linux; None: no cap). Their output goes to
    ``log_dir`` (a temporary folder by default), readable with :meth:`RpcServer.output`.
    Every server started is also appended to ``registry`` when given.
    """
    if count < 1:
        raise ValueError(f"count must be at least 1, not {count}")
    started: list[RpcServer] = [] if registry is None else registry
    first = len(started)
    logs: list[IO[bytes]] = []
    with contextlib.ExitStack() as stack:
        if log_dir is None:
            log_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="rpc-")))
        try:
            servers = [
                _start_one(exe, log_dir, threads, memory_limit, logs, started) for _ in range(count)
            ]
            yield servers
        finally:
            for server in started[first:]:
                _stop(server.process)
            for log in logs:
                log.close()


@contextlib.contextmanager
def running_rpc_commands(
    commands: Sequence[Sequence[str]],
    exe: Path,
    *,
    log_dir: Path,
    env: dict[str, str] | None = None,
    memory_limit: int | None = DEFAULT_MEMORY_LIMIT,
) -> Iterator[list[RpcServer]]:
    """Start ggml-rpc-servers with the given argument vectors (an export's commands, each
    with its own ``-p PORT`` on loopback); stop them all on exit, as :func:`running_rpc_servers`.

    ``argv[0]`` is replaced by ``exe`` (the program built by the set-up); everything else is
    passed as it is. Each must accept connections on its ``-p`` port within START_TIMEOUT_S.
    """
    started: list[RpcServer] = []
    logs: list[IO[bytes]] = []
    environment = dict(os.environ, GGML_RPC_NO_RDMA="1", **(env or {}))
    try:
        for argv in commands:
            port = int(argv[list(argv).index("-p") + 1])
            log_path = log_dir / f"rpc-server-{port}.log"
            log = log_path.open("wb")
            logs.append(log)
            process = subprocess.Popen(
                [str(exe), *argv[1:]],
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                env=environment,
            )
            server = RpcServer(port, process, log_path)
            started.append(server)
            _limit_memory(process.pid, memory_limit)
            deadline = time.monotonic() + START_TIMEOUT_S
            while not _accepts(port):
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(
                        f"{' '.join(argv)} did not start: {server.output().strip()[-300:]}"
                    )
                time.sleep(0.05)
        yield started
    finally:
        for server in started:
            _stop(server.process)
        for handle in logs:
            handle.close()


RpcServers = Callable[..., contextlib.AbstractContextManager[list[RpcServer]]]


@pytest.fixture(scope="session")
def llama_tools() -> LlamaTools:
    """Return llama.cpp's programs built by the set-up for the installed llama-cpp-python."""
    try:
        return find_tools()
    except LlamaToolMissing as err:
        pytest.fail(str(err), pytrace=False)


@pytest.fixture
def rpc_servers(llama_tools: LlamaTools, tmp_path: Path) -> Iterator[RpcServers]:
    """Return ``start(count, *, threads=1, memory_limit=4 GiB)``: servers as a context manager.

    Any server still running when the test ends (a block never left) is stopped then.
    """
    exe = llama_tools.path("ggml-rpc-server")
    registry: list[RpcServer] = []

    def start(
        count: int, *, threads: int = 1, memory_limit: int | None = DEFAULT_MEMORY_LIMIT
    ) -> contextlib.AbstractContextManager[list[RpcServer]]:
        log_dir = Path(tempfile.mkdtemp(prefix="rpc-", dir=tmp_path))
        return running_rpc_servers(
            exe,
            count,
            threads=threads,
            memory_limit=memory_limit,
            log_dir=log_dir,
            registry=registry,
        )

    try:
        yield start
    finally:
        for server in registry:
            _stop(server.process)
