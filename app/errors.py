"""Typed errors raised by ggtune's core.

Every error a user can cause (a bad file, a bad flag) is a :class:`GGTuneError`; callers
catch that one class and show ``str(err)``, which is always one readable line.

The tree::

    GGTuneError
    ├── PathError                  about one file: .path names it (None when no file is
    │   │                          at fault), .message says what; str() is "path: message"
    │   ├── GGUFError              a model file could not be read; str() says so in plain
    │   │   │                          words, .offset/.message/.detail keep the reader's find
    │   │   ├── UnreadableFileError    the file exists but cannot be read (permission, I/O)
    │   │   ├── NotGGUFError           the magic is not "GGUF"
    │   │   ├── UnsupportedVersionError  GGUF version other than 2 or 3
    │   │   ├── TruncatedError         the file ends inside a structure
    │   │   ├── LimitExceededError     a count or length larger than the file could hold,
    │   │   │   │                      or more tensors or keys than any model (65,536)
    │   │   │   └── HeaderTooLargeError  a header past what any real model needs (64 MiB)
    │   │   ├── UnknownValueTypeError  a metadata value type outside the GGUF spec
    │   │   ├── UnknownTensorTypeError a ggml tensor type this build does not know
    │   │   ├── InvalidTensorDataError tensor data out of the file, misaligned or overlapping
    │   │   └── InvalidMetadataError   a key the model needs is missing or has the wrong type,
    │   │                              or a hyperparameter llama.cpp refuses (names the key)
    │   ├── ModelFileNotFoundError the path does not exist / is not a file
    │   ├── ModelOpenError         a model file could not be opened (an OSError)
    │   ├── HardwareProfileError   a hardware profile file or a composition like
    │   │                          "2x rtx-3090 + 64 GB DDR5" is invalid (no path)
    │   ├── CatalogError           a model catalog entry is unknown, unreadable or invalid
    │   │                          (the profiles/models/*.json file at fault)
    │   ├── ProjectorError         a file given as a projector (--mmproj) is not one
    │   ├── QualityProfileError    a quality table in profiles/quality/ is missing or bad
    │   ├── StateFileError         a small file ggtune or a runner keeps (library.json, a
    │   │                          manifest, a cache, a pointer, a profile) is missing, not
    │   │                          a regular file, too large, not UTF-8 or not valid
    │   │                          JSON/TOML; a scan skips it and says why
    │   └── ResultsDBError         the benchmark history database cannot be used: written
    │                              by a newer ggtune, read-only, or in use by another
    │                              program (never moved); a corrupt one is set aside and
    │                              reported, not raised
    ├── SplitModelError            shards of a split model are missing or do not match
    ├── StandInError               a header stand-in (app/model/standin.py) could not be
    │                              written or checked (no room, no sparse files, bad header)
    ├── UnsupportedModelError      the architecture's memory rules are unknown
    ├── SettingsError              a setting out of range (e.g. a negative context)
    ├── PlanError                  the planner was asked what it cannot answer (no quant,
    │                              a bad goal)
    ├── ModelFetchError            a demo/test model could not be fetched from PyPI
    │                              (pip failed, checksum mismatch, disk full)
    ├── QuantError                 llama.cpp would refuse to quantize a model to a file type
    ├── ExportError                settings could not be exported, written or read back
    │                              (a runner cannot express them, the target exists or is
    │                              not a regular file, disk full, a Modelfile or a model
    │                              name that Ollama would refuse)
    ├── RemoteError                a remote file or the Hugging Face hub could not be read
    │   │                          (has .url and .status, the HTTP status or None), or
    │   │                          answered what the hub never does (too large, looping
    │   │                          pages, another host, a size it will not say)
    │   ├── RemoteUnavailableError offline, DNS failure, refused, timed out, connection cut,
    │   │                          too slow (a whole answer has a deadline), stalled
    │   ├── RemoteAuthError        401/403: a gated or private repo (log in: HF_TOKEN or
    │   │                          `huggingface-cli login`)
    │   ├── RemoteNotFoundError    404: no such repo, revision or file
    │   ├── RateLimitedError       429: too many requests (has .retry_after_s)
    │   ├── RangeNotSupportedError the server ignores Range requests (would send it all)
    │   └── DownloadError          a download could not finish: not enough free disk, a
    │       │                      size or sha256 mismatch (nothing is left looking complete),
    │       │                      a listing whose paths would leave the folder or that has
    │       │                      no checksum, a different file already in the folder, a
    │       │                      disk that fills up (the partial file is kept to resume)
    │       └── DownloadCancelledError  cancelled; the partial file is kept for resuming
    └── EngineError                llama.cpp, run in a child process, failed (has .cause,
        │                          .log_tail, .exit_code, .signal); the app stays up
        ├── EngineCrashedError     the child died inside llama.cpp (abort, segfault, OOM kill)
        ├── EngineLoadError        llama.cpp refused the model or the context (NULL)
        ├── EngineTimeoutError     a step ran past its time limit; the child was killed
        ├── EngineCancelledError   cancelled by the user; the child was killed
        └── EngineUnsupportedError a setting the engine bindings cannot express

Every error survives pickling with its type, its message and its fields (the runner's
child process sends them to the parent; the desktop's job pool hands them between
threads): :meth:`GGTuneError.__reduce__` rebuilds the object field by field, whatever its
constructor takes.

Example::

    try:
        header = read_header("model.gguf")
    except GGTuneError as err:
        print(err)  # "model.gguf: the file is cut short: it ends inside its header (...)"
        print(err.detail)  # GGUFError: "at byte 1234: file ends at byte 1240 inside ..."

    try:
        report = dry_run("model.gguf", settings)
    except EngineError as err:
        print(err)                    # "llama.cpp aborted (SIGABRT) while loading ...: ..."
        print(*err.log_tail, sep="\n")  # llama.cpp's last log lines, then the child's stderr
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any, ClassVar


def _rebuild(cls: type[GGTuneError], args: tuple[object, ...], state: dict[str, Any]) -> Any:
    """Unpickle an error: the same type, ``args`` and fields, without calling __init__."""
    err = cls.__new__(cls)
    err.args = args
    err.__dict__.update(state)
    return err


class GGTuneError(Exception):
    """Base of every error a user can cause; ``str()`` is one readable line."""

    def __reduce__(self) -> tuple[object, ...]:
        # Any constructor shape: the fields travel as they are (keyword-only ones too).
        return (_rebuild, (type(self), self.args, self.__dict__))


class PathError(GGTuneError):
    """An error about one file: ``path`` names it (None when no file is at fault, e.g. a
    profile composition typed by the user), ``message`` says what is wrong with it.

    ``str(err)`` is ``"path: message"``, or the message alone without a path.
    """

    def __init__(self, message: str, *, path: str | os.PathLike[str] | None = None) -> None:
        self.path = None if path is None else os.fspath(path)
        self.message = message
        super().__init__(f"{self.path}: {message}" if self.path else message)


class GGUFError(PathError):
    """A GGUF file could not be read.

    ``path`` names the file (or the file object's ``name``), ``offset`` the byte where the
    problem was found (``None`` when it is not about one place), ``message`` what the
    reader found there, and :attr:`detail` both ("at byte 8: tensor count 2000000 is more
    than the limit of 65536"). The reader raises these hundreds of times over, so the
    constructor is positional: ``(path, offset, message)``.

    ``str(err)`` is for the user: ``"path: "`` and the class's :attr:`summary` in plain
    words ("is damaged or not a real model: …"), or the message itself for the classes
    whose message already is plain (a key llama.cpp refuses, an unreadable file, a
    version). The CLI prints :attr:`detail` too with ``GGTUNE_DEBUG=1``.
    """

    summary: ClassVar[str | None] = None
    """What the user is told instead of the reader's detail (None: the message itself)."""

    def __init__(self, path: str | os.PathLike[str], offset: int | None, message: str) -> None:
        shown = message if self.summary is None else self.summary
        super().__init__(shown, path=path)
        self.offset = offset
        self.message = message

    @property
    def detail(self) -> str:
        """Return where and what the reader found, for a bug report or ``--verbose``."""
        return f"at byte {self.offset}: {self.message}" if self.offset is not None else self.message


class UnreadableFileError(GGUFError):
    """The file exists but reading it failed: no permission, an I/O error, a folder."""


class NotGGUFError(GGUFError):
    """The file does not start with the GGUF magic."""

    summary = "not a GGUF model file"


class UnsupportedVersionError(GGUFError):
    """The GGUF version is not one this reader understands (2 or 3)."""


class TruncatedError(GGUFError):
    """The file ends in the middle of a header structure."""

    summary = "the file is cut short: it ends inside its header (an unfinished download or copy?)"


class LimitExceededError(GGUFError):
    """A count or length is larger than the rest of the file could possibly hold, or than
    any real model's header needs."""

    summary = (
        "damaged, or not a real model: its header claims more than the file or any model holds"
    )


class HeaderTooLargeError(LimitExceededError):
    """The header would run past what any real model needs (64 MiB, MAX_HEADER_BYTES)."""

    summary = (
        "not a model ggtune can use: its header would be larger than 64 MiB (real models' "
        "headers are under 20 MiB)"
    )


class UnknownValueTypeError(GGUFError):
    """A metadata value has a type code outside the GGUF specification."""

    summary = "damaged, or a newer GGUF: it holds a metadata type outside the GGUF format"


class UnknownTensorTypeError(GGUFError):
    """A tensor has a ggml type code this build of gguf does not know."""

    summary = "holds a tensor type this ggtune and its llama.cpp do not know (a newer quant?)"


class InvalidTensorDataError(GGUFError):
    """Tensor data lies outside the file, is misaligned, or overlaps another tensor."""

    summary = "damaged: its table of tensors does not match the file"


class InvalidMetadataError(GGUFError):
    """A metadata key the model needs is missing or has the wrong type."""


class SplitModelError(GGTuneError):
    """Shards of a split model are missing, duplicated, or do not belong together."""


class ModelFileNotFoundError(PathError):
    """The given model path does not exist or is not a regular file."""


class StateFileError(PathError):
    """A small file ggtune reads (a config, a manifest, a cache, a profile) is unusable.

    ``path`` names the file, ``message`` says what is wrong in plain words, e.g.
    ``"~/.ollama/models/manifests/…/latest: not a regular file (a pipe, device or
    folder); skipped"``.
    """


class ModelOpenError(PathError):
    """A model file could not be opened for a reason outside the GGUF checks (an OSError)."""


class UnsupportedModelError(GGTuneError):
    """ggtune does not know the memory rules of this model's architecture."""


class ProjectorError(PathError):
    """A file given as a projector (``--mmproj``) is not one."""


class SettingsError(GGTuneError):
    """A setting is out of range or contradicts another setting."""


class PlanError(GGTuneError):
    """The planner was asked something it cannot answer (no quant, bad goal)."""


class HardwareProfileError(PathError):
    """A hardware profile file, or a composition of profiles, is invalid.

    ``path`` names the file (``None`` for a composition typed by the user); the message
    says which profile and which field, e.g. ``"~/.config/ggtune/profiles/my.toml:
    profile 'box' (#1): bandwidth_gb_per_s.value must be a number > 0, got -1"``.
    """


class ModelFetchError(GGTuneError):
    """A demo or test model could not be fetched from PyPI, checked, or written to disk.

    Nothing is left behind: the file is either complete and checksummed, or absent.
    """


class StandInError(GGTuneError):
    """A header stand-in (app/model/standin.py) could not be written or checked.

    The message names the model and the cause, e.g. ``"the file system at /mnt/usb does
    not keep sparse files (...)"``.
    """


class CatalogError(PathError):
    """A model catalog entry is unknown, cannot be read, or does not describe a model.

    ``path`` names the entry's file (``None`` when no file was found); the message says
    which field, e.g. ``"profiles/models/qwen3-8b.json: metadata lacks
    qwen3.embedding_length"``.
    """


class ExportError(GGTuneError):
    """Settings could not be exported for a runner, written to disk, or read back.

    Raised when a runner cannot express a setting (Ollama has one KV type for K and V),
    when the target file exists and overwriting was not asked for, when the disk is full
    or the folder is not writable (no partial file is left), and when a Modelfile is one
    that Ollama's parser would refuse.
    """


class RemoteError(GGTuneError):
    """A remote file (HTTP range reads) or the Hugging Face hub could not be read.

    ``url`` is the address at fault, ``status`` the HTTP status code (``None`` when no
    response came back). ``str(err)`` is one line that says what to do, e.g.
    ``"https://huggingface.co/org/model/resolve/main/m.gguf: access denied (HTTP 401): ..."``.
    """

    def __init__(self, url: str, message: str, *, status: int | None = None) -> None:
        self.url = url
        self.status = status
        self.message = message
        super().__init__(f"{url}: {message}")


class RemoteUnavailableError(RemoteError):
    """No answer: offline, the name does not resolve, refused, timed out, or cut midway."""


class RemoteAuthError(RemoteError):
    """HTTP 401/403: the repo is gated or private, or the token lacks access."""


class RemoteNotFoundError(RemoteError):
    """HTTP 404: no such repo, revision or file."""


class RateLimitedError(RemoteError):
    """HTTP 429: too many requests; ``retry_after_s`` is the server's hint (or ``None``)."""

    def __init__(
        self,
        url: str,
        message: str,
        *,
        status: int | None = 429,
        retry_after_s: float | None = None,
    ) -> None:
        super().__init__(url, message, status=status)
        self.retry_after_s = retry_after_s


class RangeNotSupportedError(RemoteError):
    """The server answered a Range request with the whole file (HTTP 200, not 206)."""


class DownloadError(RemoteError):
    """A download could not finish: too little free disk, or a size/sha256 mismatch.

    A file only ever gets its final name after its size and checksum matched, so nothing
    half-written is left looking complete.
    """


class DownloadCancelledError(DownloadError):
    """The download was cancelled; the partial file is kept so a later call resumes."""


class ResultsDBError(PathError):
    """The benchmark results database cannot be opened, set aside, or written.

    ``path`` names the database file.
    """


class EngineError(GGTuneError):
    """llama.cpp, run in a child process by ``runner/``, failed; the app stays up.

    ``cause`` is the one-line reason (also ``str(err)``), e.g. ``"llama.cpp aborted
    (SIGABRT) while loading the model: .../llama-model.cpp:1855: GGML_ASSERT(!ml.no_alloc)
    failed"``. ``log_tail`` holds llama.cpp's last log lines (DEBUG lines left out) followed
    by what the child wrote to stderr, oldest first. ``exit_code`` is the child's exit
    status when it exited by itself, ``signal`` the number of the signal that ended it;
    both are ``None`` when the child was still alive or the error came from the parent.
    """

    def __init__(
        self,
        cause: str,
        *,
        log_tail: Iterable[str] = (),
        exit_code: int | None = None,
        signal: int | None = None,
    ) -> None:
        self.cause = " ".join(cause.split())
        self.log_tail = tuple(log_tail)
        self.exit_code = exit_code
        self.signal = signal
        super().__init__(self.cause)


class EngineCrashedError(EngineError):
    """The child process died inside llama.cpp: an abort, a segfault, or a kill (OOM)."""


class EngineLoadError(EngineError):
    """llama.cpp returned no model or no context (bad file, unsupported setting)."""


class EngineTimeoutError(EngineError):
    """A step of the engine run took longer than allowed; the child was killed."""


class EngineCancelledError(EngineError):
    """The run was cancelled; the child was killed."""


class EngineUnsupportedError(EngineError):
    """A setting cannot be expressed through the llama.cpp bindings in use."""


class QuantError(GGTuneError):
    """llama.cpp would refuse to quantize this model to this file type (not for imatrix)."""


class QualityProfileError(PathError):
    """A quality table in ``profiles/quality/`` is missing or malformed."""
