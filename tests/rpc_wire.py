"""A TCP relay that reads llama.cpp's RPC protocol as it passes: every command, every reply.

Between llama.cpp (the client) and a real ``ggml-rpc-server``, :class:`WireTap` forwards the
bytes unchanged and records each message: the client's commands ``| cmd (1 byte) | size
(8, little-endian) | payload |`` and the server's replies ``| size (8) | payload |``
(``ggml-rpc.cpp``, protocol 7.0.0; replies come in the order of the commands that have one).
For ``SET_TENSOR``/``GET_TENSOR`` it also reads the serialized tensor's name and shape
(``rpc_tensor``: ``ne`` at byte 20, ``name`` at byte 228). The server must run with
``GGML_RPC_NO_RDMA=1`` so the connection stays plain TCP.

:func:`decode_steps` cuts the recording into steady decode steps: from one
``GRAPH_RECOMPUTE`` to the next (the graph already on the server is run again), so each
step holds its result's ``GET_TENSOR`` and the next step's inputs. Used by
tests/runner/test_rpc_pool.py and bench/bench_rpc.py, which also talks to servers itself
with :class:`RpcClient` (HELLO, one buffer, SET/GET_TENSOR) and :func:`replay`s a recorded
step to time the protocol on loopback.

Example::

    with WireTap(server_port) as tap:          # llama.cpp connects to tap.endpoint
        ...
    steps = decode_steps(tap.messages)
"""

from __future__ import annotations

import contextlib
import itertools
import socket
import struct
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from types import TracebackType

LOOPBACK = "127.0.0.1"

COMMANDS = (
    "ALLOC_BUFFER", "GET_ALIGNMENT", "GET_MAX_SIZE", "BUFFER_GET_BASE", "FREE_BUFFER",
    "BUFFER_CLEAR", "SET_TENSOR", "SET_TENSOR_HASH", "GET_TENSOR", "COPY_TENSOR",
    "GRAPH_COMPUTE", "GET_DEVICE_MEMORY", "INIT_TENSOR", "GET_ALLOC_SIZE", "HELLO",
    "DEVICE_COUNT", "GRAPH_RECOMPUTE", "MEMSET_TENSOR",
)  # fmt: skip
"""``enum rpc_cmd`` in the pinned ggml-rpc.cpp, in order (HELLO must be 14)."""

RPC_TENSOR_BYTES = 296
_NAME_AT = 228
_NE_AT = 20


@dataclass(frozen=True, slots=True)
class Message:
    """One message on the wire: ``command`` (or ``"REPLY"``), its size with the header."""

    at: float
    to_server: bool
    command: str
    n_bytes: int
    tensor: str = ""
    shape: tuple[int, ...] = ()


def _read(sock: socket.socket, n: int) -> bytes:
    buf = bytearray(n)
    view = memoryview(buf)
    got = 0
    while got < n:  # recv_into: no new buffer of the remaining size per call
        k = sock.recv_into(view[got:], n - got)
        if not k:
            raise EOFError
        got += k
    return bytes(buf)


class WireTap:
    """Relay loopback connections to ``target_port`` and record every RPC message."""

    def __init__(self, target_port: int) -> None:
        self.target_port = target_port
        self._lock = threading.Lock()
        self._messages: list[Message] = []
        self._listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self._listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self._listener.bind((LOOPBACK, 0))
        self._listener.listen(8)
        self.port: int = self._listener.getsockname()[1]
        self._sockets: list[socket.socket] = []
        self._threads: list[threading.Thread] = []
        self._closed = False
        self._acceptor = threading.Thread(target=self._accept, daemon=True)

    @property
    def endpoint(self) -> str:
        """Return the ``host:port`` llama.cpp should connect to."""
        return f"{LOOPBACK}:{self.port}"

    @property
    def messages(self) -> list[Message]:
        """Return a copy of what was recorded so far."""
        with self._lock:
            return list(self._messages)

    def __enter__(self) -> WireTap:
        self._acceptor.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Stop accepting, close every relayed connection and wait for the threads."""
        self._closed = True
        with contextlib.suppress(OSError):
            self._listener.close()
        for s in list(self._sockets):
            with contextlib.suppress(OSError):
                s.shutdown(socket.SHUT_RDWR)
            with contextlib.suppress(OSError):
                s.close()
        for t in [self._acceptor, *self._threads]:
            if t.is_alive():
                t.join(timeout=5)

    def _record(self, message: Message) -> None:
        with self._lock:
            self._messages.append(message)

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            try:
                server = socket.create_connection((LOOPBACK, self.target_port), timeout=10)
            except OSError:
                client.close()
                continue
            server.settimeout(None)
            for s in (client, server):
                s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                self._sockets.append(s)
            for target in (self._commands, self._replies):
                t = threading.Thread(target=target, args=(client, server), daemon=True)
                self._threads.append(t)
                t.start()

    def _commands(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                head = _read(client, 9)
                size = struct.unpack("<Q", head[1:])[0]
                payload = _read(client, size)
                name = COMMANDS[head[0]] if head[0] < len(COMMANDS) else f"CMD{head[0]}"
                tensor, shape = "", ()
                if name in ("SET_TENSOR", "GET_TENSOR") and size >= RPC_TENSOR_BYTES:
                    raw = payload[_NAME_AT : _NAME_AT + 64].split(b"\0")[0]
                    tensor = raw.decode(errors="replace")
                    shape = struct.unpack("<4I", payload[_NE_AT : _NE_AT + 16])
                self._record(Message(time.monotonic(), True, name, 9 + size, tensor, shape))
                server.sendall(head + payload)
        except (EOFError, OSError):
            pass
        finally:
            _shut(client, server)

    def _replies(self, client: socket.socket, server: socket.socket) -> None:
        try:
            while True:
                head = _read(server, 8)
                size = struct.unpack("<Q", head)[0]
                payload = _read(server, size)
                self._record(Message(time.monotonic(), False, "REPLY", 8 + size))
                client.sendall(head + payload)
        except (EOFError, OSError):
            pass
        finally:
            _shut(client, server)


def _shut(*sockets: socket.socket) -> None:
    for s in sockets:
        with contextlib.suppress(OSError):
            s.shutdown(socket.SHUT_RDWR)


@dataclass(frozen=True, slots=True)
class Step:
    """One steady decode step on one connection: bytes each way, round trips, commands."""

    sent_bytes: int
    received_bytes: int
    round_trips: int
    messages: int
    tensors: tuple[str, ...]


def step_messages(messages: Sequence[Message]) -> list[list[Message]]:
    """Return the messages of each steady step (see :func:`decode_steps`)."""
    marks = [i for i, m in enumerate(messages) if m.command == "GRAPH_RECOMPUTE"]
    out = []
    for a, b in itertools.pairwise(marks):
        chunk = list(messages[a + 1 : b + 1])  # the GET of step a … step b's own RECOMPUTE
        if not any(m.command == "GRAPH_COMPUTE" for m in chunk):  # else a new graph was sent
            out.append(chunk)
    return out


def decode_steps(messages: Sequence[Message]) -> list[Step]:
    """Return the steps between consecutive ``GRAPH_RECOMPUTE`` commands (see the module doc).

    A step's round trips are its commands that get a reply (GET_TENSOR, COPY_TENSOR…),
    counted as the replies it holds.
    """
    return [
        Step(
            sent_bytes=sum(m.n_bytes for m in chunk if m.to_server),
            received_bytes=sum(m.n_bytes for m in chunk if not m.to_server),
            round_trips=sum(1 for m in chunk if not m.to_server),
            messages=sum(1 for m in chunk if m.to_server),
            tensors=tuple(f"{m.command} {m.tensor}" for m in chunk if m.tensor),
        )
        for chunk in step_messages(messages)
    ]


@contextlib.contextmanager
def tapped(ports: Sequence[int]) -> Iterator[list[WireTap]]:
    """Run one :class:`WireTap` per server port; close them all on exit."""
    with contextlib.ExitStack() as stack:
        yield [stack.enter_context(WireTap(p)) for p in ports]


# --- a client that speaks the protocol itself (for the loopback timing floor) ------------------

_TENSOR = struct.Struct("<QIQ4I4II16ii10QQQQ64si")
assert _TENSOR.size == RPC_TENSOR_BYTES
_CMD = {name: i for i, name in enumerate(COMMANDS)}
HELLO_CAPS_BYTES = 24  # RPC_CONN_CAPS_SIZE (ggml-rpc/transport.h)


class RpcClient:
    """A minimal client of one ggml-rpc-server: HELLO, one buffer, SET/GET_TENSOR on it.

    It sends what llama.cpp sends for a tensor in that buffer (a 296-byte ``rpc_tensor``,
    F32, one row), so a server handles it exactly as llama.cpp's inputs and results.
    """

    def __init__(self, port: int, buffer_bytes: int) -> None:
        self.sock = socket.create_connection((LOOPBACK, port), timeout=30)
        self.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self._call("HELLO", bytes(HELLO_CAPS_BYTES), 4 + HELLO_CAPS_BYTES)
        reply = self._call("ALLOC_BUFFER", struct.pack("<IQ", 0, buffer_bytes), 16)
        self.buffer, size = struct.unpack("<QQ", reply)
        if self.buffer == 0 or size < buffer_bytes:
            raise RuntimeError(f"the server could not allocate {buffer_bytes} bytes")
        base = self._call("BUFFER_GET_BASE", struct.pack("<Q", self.buffer), 8)
        (self.base,) = struct.unpack("<Q", base)
        self.buffer_bytes = buffer_bytes

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self.sock.close()

    def _send(self, command: str, payload: bytes) -> None:
        self.sock.sendall(bytes([_CMD[command]]) + struct.pack("<Q", len(payload)) + payload)

    def _reply(self, size: int) -> bytes:
        (n,) = struct.unpack("<Q", _read(self.sock, 8))
        if n != size:
            raise RuntimeError(f"reply of {n} bytes, expected {size}")
        return _read(self.sock, n)

    def _call(self, command: str, payload: bytes, reply: int) -> bytes:
        self._send(command, payload)
        return self._reply(reply)

    def tensor(self, n_bytes: int) -> bytes:
        """Return a serialized F32 tensor of ``n_bytes`` (whole floats) at the buffer's start."""
        n = max(1, n_bytes // 4)
        if 4 * n > self.buffer_bytes:
            raise ValueError("tensor larger than the buffer")
        ne = (n, 1, 1, 1)
        nb = (4, 4 * n, 4 * n, 4 * n)
        return _TENSOR.pack(1, 0, self.buffer, *ne, *nb, 0, *(0,) * 16, 0, *(0,) * 10, 0, 0,
                            self.base, b"bench", 0)  # fmt: skip

    def set_tensor(self, data: bytes) -> None:
        """``SET_TENSOR``: no reply (llama.cpp does not wait for one either)."""
        self._send("SET_TENSOR", self.tensor(len(data)) + b"\0" + struct.pack("<Q", 0) + data)

    def get_tensor(self, n_bytes: int) -> bytes:
        """``GET_TENSOR`` of ``n_bytes`` (whole floats): one round trip."""
        size = 4 * max(1, n_bytes // 4)
        return self._call("GET_TENSOR", self.tensor(size) + struct.pack("<QQ", 0, size), size)


def replay(client: RpcClient, step: Sequence[Message]) -> float:
    """Send ``step``'s messages as llama.cpp sent them (same order and payload sizes;
    ``GRAPH_RECOMPUTE`` left out: there is no graph) and return the seconds it took."""
    plan: list[tuple[str, int]] = []
    for i, m in enumerate(step):
        if m.to_server and m.command == "SET_TENSOR":
            plan.append(("set", m.n_bytes - 9 - RPC_TENSOR_BYTES - 9))
        elif m.to_server and m.command == "GET_TENSOR":
            reply = next(r for r in step[i + 1 :] if not r.to_server)
            plan.append(("get", reply.n_bytes - 8))
    payloads = {n: bytes(n) for kind, n in plan if kind == "set"}
    start = time.perf_counter()
    for kind, n in plan:
        if kind == "set":
            client.set_tensor(payloads[n])
        else:
            client.get_tensor(n)
    return time.perf_counter() - start
