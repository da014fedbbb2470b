"""Run one job in a child process and get a typed outcome, whatever happens in there.

llama.cpp can abort (``GGML_ASSERT``), segfault or be killed for memory; that must not
take the app down (docs/sources.md §8). So every engine job runs in a child
started with the ``spawn`` method, and the parent:

* receives every event the child emits (log lines, step marks, partial results) the
  moment it is emitted, over a pipe, so nothing is lost when the child dies mid-way;
* captures the child's stderr and stdout (file descriptors 1 and 2, which is where
  ``GGML_ASSERT`` and ``std::terminate`` write) into a temporary file;
* turns a death, a time-out, a cancel or a failure the child reports into an
  :class:`~app.errors.EngineError` subclass carrying the cause, the last llama.cpp log
  lines and stderr, and the exit code or signal;
* never leaves a child behind: it is joined, or terminated and then killed.

The job is a top-level function ``target(request, channel)`` (picklable, as ``spawn``
needs) that reports through :class:`ChildChannel` and returns nothing. Example::

    def count(n: int, channel: ChildChannel) -> None:   # in an importable module
        for i in range(n):
            channel.step(f"item {i}")
            channel.send(i)

    events = EngineWorker(count, 3, timeout_s=10).run()
    [e.item for e in events if isinstance(e, ItemEvent)]   # [0, 1, 2]

Modelled on qutebrowser's ``misc/guiprocess.py`` (a process object with an outcome).
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal as signal_module
import sys
import tempfile
import threading
import time
import traceback
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Any, Final, Generic, TypeVar

from app.errors import (
    EngineCancelledError,
    EngineCrashedError,
    EngineError,
    EngineLoadError,
    EngineTimeoutError,
    EngineUnsupportedError,
)

RequestT = TypeVar("RequestT")

LOG_TAIL_LINES: Final = 30
"""How many llama.cpp log lines an :class:`EngineError` carries (DEBUG lines left out)."""

STDERR_TAIL_LINES: Final = 30
"""How many lines of the child's stderr an :class:`EngineError` carries after them."""

KILL_GRACE_S: Final = 0.4
"""Time a child gets after SIGTERM before SIGKILL."""

LOG_LEVEL_DEBUG: Final = 1
"""``GGML_LOG_LEVEL_DEBUG`` (``ggml/include/ggml.h``: NONE 0, DEBUG 1, INFO 2, WARN 3,
ERROR 4, CONT 5)."""

LOG_LEVEL_ERROR: Final = 4

_POLL_S: Final = 0.05
_STDERR_READ_LIMIT: Final = 256 * 1024

_ERRORS: Final[dict[str, type[EngineError]]] = {
    cls.__name__: cls
    for cls in (
        EngineError,
        EngineCrashedError,
        EngineLoadError,
        EngineTimeoutError,
        EngineCancelledError,
        EngineUnsupportedError,
    )
}


# --- events -------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LogEvent:
    """One whole log line (no trailing newline); ``level`` is a ggml log level."""

    level: int
    text: str


@dataclass(frozen=True, slots=True)
class StepEvent:
    """The child started a step; ``label`` completes "while ..." in error messages."""

    label: str


@dataclass(frozen=True, slots=True)
class ItemEvent:
    """A partial result the child sent (any picklable object)."""

    item: object


Event = LogEvent | StepEvent | ItemEvent


@dataclass(frozen=True, slots=True)
class ChildRun:
    """Everything a child that finished normally emitted, in order, and its stderr."""

    events: tuple[Event, ...]
    stderr: tuple[str, ...]


class ChildFailure(Exception):
    """Raise in a child target to end the run with a typed error in the parent.

    ``error`` names the :class:`EngineError` subclass the parent raises; the parent adds
    the log tail. Any other exception in the target becomes a plain :class:`EngineError`
    with its traceback in the log tail.
    """

    def __init__(self, cause: str, *, error: type[EngineError] = EngineError) -> None:
        assert error.__name__ in _ERRORS, f"{error!r} is not an engine error"
        super().__init__(cause)
        self.cause = cause
        self.error = error


# --- the child's side ---------------------------------------------------------------


class ChildChannel:
    """The child's end of the pipe; every call writes to the parent at once.

    Thread-safe (llama.cpp may log from its own threads).
    """

    def __init__(self, conn: Connection) -> None:
        self._conn = conn
        self._lock = threading.Lock()

    def _send(self, message: tuple[Any, ...]) -> None:
        with self._lock:
            self._conn.send(message)

    def log(self, level: int, text: str) -> None:
        """Forward one whole log line (without its newline)."""
        self._send(("log", level, text))

    def step(self, label: str) -> None:
        """Start a step: its time limit starts now; ``label`` reads "loading the model"."""
        self._send(("step", label))

    def send(self, item: object) -> None:
        """Forward a partial result."""
        self._send(("item", item))


def _child_main(
    target: Callable[[Any, ChildChannel], None],
    request: object,
    conn: Connection,
    capture_path: str,
) -> None:
    """Entry point of the child: redirect fds 1 and 2, run ``target``, report, exit."""
    # Native code writes asserts and crashes to fds 1/2; keep them for the parent.
    fd = os.open(capture_path, os.O_WRONLY | os.O_APPEND)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    # ggml_print_backtrace (ggml/src/ggml.c) forks gdb/lldb on an abort: slow, and a
    # grandchild that could outlive a kill. The assert message itself is still printed.
    os.environ["GGML_NO_BACKTRACE"] = "1"
    channel = ChildChannel(conn)
    code = 0
    try:
        target(request, channel)
        channel._send(("done",))
    except ChildFailure as failure:
        channel._send(("fail", failure.error.__name__, failure.cause))
    except BaseException as exc:
        for line in traceback.format_exc().splitlines():
            with contextlib.suppress(Exception):
                channel.log(LOG_LEVEL_ERROR, line)
        with contextlib.suppress(Exception):
            channel._send(("fail", "EngineError", f"{type(exc).__name__}: {exc}"))
        code = 1
    finally:
        with contextlib.suppress(Exception):
            sys.stdout.flush()
            sys.stderr.flush()
        conn.close()
    # Skip interpreter teardown: native libraries' static destructors have crashed at
    # exit before, and everything is sent already.
    os._exit(code)


# --- the parent's side --------------------------------------------------------------


def _signal_name(number: int) -> str:
    try:
        return signal_module.Signals(number).name
    except ValueError:
        return f"signal {number}"


def _crash_cause(exit_code: int | None, signal: int | None, stderr: tuple[str, ...]) -> str:
    if signal is not None:
        name = _signal_name(signal)
        if signal == getattr(signal_module, "SIGABRT", None):
            cause = f"llama.cpp aborted ({name})"
        elif signal == getattr(signal_module, "SIGSEGV", None):
            cause = f"llama.cpp crashed ({name}, invalid memory access)"
        elif signal == getattr(signal_module, "SIGBUS", None):
            cause = f"llama.cpp crashed ({name}; the mapped model file may have changed)"
        elif signal == getattr(signal_module, "SIGKILL", None):
            cause = f"the engine process was killed ({name}; often the out-of-memory killer)"
        else:
            cause = f"the engine process died ({name})"
    else:
        cause = f"the engine process exited with code {exit_code}"
    for line in stderr:
        if "GGML_ASSERT" in line or "GGML_ABORT" in line or "terminate called" in line:
            return f"{cause}: {line.strip()}"
    return cause


class EngineWorker(Generic[RequestT]):
    """One child process running ``target(request, channel)``; see the module doc.

    :meth:`run` (or :meth:`start` then :meth:`wait`) blocks the calling thread;
    :meth:`cancel` may be called from any other thread and returns once the child is
    gone (well within a second). ``timeout_s`` bounds each step: the time from the start
    (spawn, imports, first step) or from the last :meth:`ChildChannel.step` to the next
    step or the end. ``on_event`` is called in the waiting thread for every event, as it
    arrives.
    """

    def __init__(
        self,
        target: Callable[[RequestT, ChildChannel], None],
        request: RequestT,
        *,
        timeout_s: float,
        on_event: Callable[[Event], None] | None = None,
    ) -> None:
        assert timeout_s > 0, f"timeout must be > 0 s, got {timeout_s}"
        self._target = target
        self._request = request
        self._timeout_s = timeout_s
        self._on_event = on_event
        self._ctx = multiprocessing.get_context("spawn")
        self._process: multiprocessing.process.BaseProcess | None = None
        self._conn: Connection | None = None
        self._capture_path: str | None = None
        self._cancelled = threading.Event()
        self._kill_lock = threading.Lock()
        self._events: list[Event] = []

    @property
    def pid(self) -> int | None:
        """The child's process id once started."""
        return None if self._process is None else self._process.pid

    def start(self) -> None:
        """Spawn the child (returns when it is started, before it imports anything)."""
        assert self._process is None, "an EngineWorker runs once"
        fd, self._capture_path = tempfile.mkstemp(prefix="ggtune-engine-", suffix=".log")
        os.close(fd)
        receiver, sender = self._ctx.Pipe(duplex=False)
        self._conn = receiver
        # under the kill lock: a cancel from another thread while the child spawns (tens of
        # ms, the Process not yet started: terminate() would raise) waits for it, then
        # stops it; wait() then reports the cancel
        with self._kill_lock:
            self._process = self._ctx.Process(
                target=_child_main,
                args=(self._target, self._request, sender, self._capture_path),
                name="ggtune-engine",
                daemon=True,
            )
            try:
                self._process.start()
            finally:
                # Only the child holds the sending end now: its death reads as EOF here.
                sender.close()

    def run(self) -> ChildRun:
        """Start the child and wait for it; see :meth:`wait`."""
        self.start()
        return self.wait()

    def wait(self) -> ChildRun:
        """Collect events until the child is done; raise an EngineError otherwise."""
        assert self._process is not None, "start() first"
        assert self._conn is not None, "start() first"
        step = "starting the engine"
        deadline = time.monotonic() + self._timeout_s
        outcome: tuple[Any, ...] | None = None
        try:
            while outcome is None:
                if self._cancelled.is_set():
                    self._stop()
                    raise self._error(EngineCancelledError, f"cancelled while {step}")
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    self._stop()
                    raise self._error(
                        EngineTimeoutError,
                        f"llama.cpp took longer than {self._timeout_s:g} s while {step}",
                    )
                try:
                    if not self._conn.poll(min(remaining, _POLL_S)):
                        continue
                    message = self._conn.recv()
                except (EOFError, OSError):
                    outcome = ("died",)
                    break
                kind = message[0]
                if kind == "log":
                    self._emit(LogEvent(message[1], message[2]))
                elif kind == "step":
                    step = message[1]
                    deadline = time.monotonic() + self._timeout_s
                    self._emit(StepEvent(step))
                elif kind == "item":
                    self._emit(ItemEvent(message[1]))
                else:
                    outcome = message
            if outcome[0] == "done":
                self._join()
                return ChildRun(tuple(self._events), self._read_stderr())
            if outcome[0] == "fail":
                self._join()
                error = _ERRORS.get(outcome[1], EngineError)
                raise self._error(error, f"{outcome[2]} (while {step})")
            # The pipe closed without a word: the child died.
            self._join()
            exit_code = self._process.exitcode
            if self._cancelled.is_set():
                raise self._error(EngineCancelledError, f"cancelled while {step}")
            signal = -exit_code if exit_code is not None and exit_code < 0 else None
            code = exit_code if signal is None else None
            stderr = self._read_stderr()
            cause = f"{_crash_cause(code, signal, stderr)} (while {step})"
            raise self._error(EngineCrashedError, cause, exit_code=code, signal=signal)
        finally:
            self._cleanup()

    def cancel(self) -> None:
        """Stop the child now (SIGTERM, then SIGKILL); :meth:`wait` raises cancelled."""
        self._cancelled.set()
        self._stop()

    def __enter__(self) -> EngineWorker[RequestT]:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._stop()
        self._cleanup()

    # --- internals ---

    def _emit(self, event: Event) -> None:
        self._events.append(event)
        if self._on_event is not None:
            self._on_event(event)

    def _join(self) -> None:
        assert self._process is not None
        self._process.join(2.0)
        if self._process.is_alive():
            self._stop()

    def _stop(self) -> None:
        """Terminate, then kill, then reap the child; safe from any thread, repeatable."""
        with self._kill_lock:
            process = self._process
            if process is None or process.exitcode is not None:
                if process is not None:
                    process.join(0)
                return
            process.terminate()
            process.join(KILL_GRACE_S)
            if process.exitcode is None:
                process.kill()
                process.join(KILL_GRACE_S)

    def _read_stderr(self) -> tuple[str, ...]:
        if self._capture_path is None:
            return ()
        try:
            with open(self._capture_path, "rb") as f:
                f.seek(0, os.SEEK_END)
                size = f.tell()
                f.seek(max(0, size - _STDERR_READ_LIMIT))
                data = f.read()
        except OSError:
            return ()
        return tuple(line for line in data.decode("utf-8", "replace").splitlines() if line)

    def _error(
        self,
        error: type[EngineError],
        cause: str,
        *,
        exit_code: int | None = None,
        signal: int | None = None,
    ) -> EngineError:
        logs: deque[str] = deque(maxlen=LOG_TAIL_LINES)
        for event in self._events:
            if isinstance(event, LogEvent) and event.level != LOG_LEVEL_DEBUG:
                logs.append(event.text)
        stderr = self._read_stderr()[-STDERR_TAIL_LINES:]
        return error(cause, log_tail=(*logs, *stderr), exit_code=exit_code, signal=signal)

    def _cleanup(self) -> None:
        if self._conn is not None:
            self._conn.close()
        if self._capture_path is not None:
            with contextlib.suppress(OSError):
                os.unlink(self._capture_path)
            self._capture_path = None
