"""Quantize a GGUF model with llama.cpp's own quantizer, in a child process.

:func:`quantize` calls ``llama_model_quantize`` (llama-cpp-python's binding of
``src/llama-quant.cpp``) with ``llama_model_quantize_default_params()``,
``allow_requantize`` on (any source type may be quantized again) and the given file type
and thread count. It runs in a child started by :class:`~runner.worker.EngineWorker`: a
crash or an out-of-memory kill inside llama.cpp becomes an
:class:`~app.errors.EngineCrashedError` and the caller stays up.

``imatrix="ones"`` passes an importance matrix of ones for every tensor llama.cpp may
quantize (uniform importance): what a real imatrix changes in the choice of types is
whether one is given at all, so this lets the types that need one be made and checked.

Example::

    from runner.quantize import quantize

    outcome = quantize("SmolLM2-135M-Instruct.Q4_1.gguf", "/tmp/smol-q4_k_m.gguf", "Q4_K_M")
    outcome.seconds, outcome.output_path
    quantize(src, dst, "IQ2_XXS")   # EngineError: ... this quantization requires an imatrix!
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final, Literal

from app.errors import EngineError, ModelFileNotFoundError
from app.model.quant import FileType, allows_quantization, file_type
from runner.engine_log import LogLineJoiner
from runner.worker import ChildChannel, EngineWorker, ItemEvent

DEFAULT_TIMEOUT_S: Final = 600.0

ImatrixMode = Literal["none", "ones"]


@dataclass(frozen=True, slots=True)
class QuantizeJob:
    """One ``llama_model_quantize`` call: write ``output_path`` at LLAMA_FTYPE ``ftype``."""

    output_path: str
    ftype: int
    imatrix: ImatrixMode = "none"


@dataclass(frozen=True, slots=True)
class QuantizeRequest:
    """Jobs on one input model, run one after another in one child (picklable)."""

    input_path: str
    jobs: tuple[QuantizeJob, ...]
    nthread: int


@dataclass(frozen=True, slots=True)
class QuantizeOutcome:
    """One finished job: the file written (unless ``error``), the time it took in seconds
    and llama.cpp's log lines for it. ``error`` is llama.cpp's reason for refusing (its
    last error line, e.g. "... this quantization requires an imatrix!"), else None."""

    output_path: str
    file_type: FileType
    imatrix: ImatrixMode
    seconds: float
    log: tuple[str, ...]
    error: str | None


@dataclass(frozen=True, slots=True)
class _JobDone:
    index: int
    seconds: float
    log: tuple[str, ...]
    error: str | None


def _imatrix_entries(bindings: Any, path: str) -> tuple[Any, list[object]]:
    """Build a NULL-terminated ``llama_model_imatrix_data`` array of ones (and keepalives)."""
    from app.model.gguf_reader import read_model

    model = read_model(path)
    arch = model.metadata.get("general.architecture")
    keep: list[object] = []
    rows: list[tuple[bytes, Any, int]] = []
    for t in model.tensors:
        if not allows_quantization(str(arch), t.name, t.shape):
            continue
        # one value per column and expert (src/llama-quant.cpp: ne[0] * ne[2])
        size = t.shape[0] * (t.shape[2] if len(t.shape) > 2 else 1)
        data = (ctypes.c_float * size)(*([1.0] * size))
        name = t.name.encode()
        keep += [data, name]
        rows.append((name, data, size))
    entries = (bindings.llama_model_imatrix_data * (len(rows) + 1))()
    for i, (name, data, size) in enumerate(rows):
        entries[i].name = name
        entries[i].data = ctypes.cast(data, ctypes.POINTER(ctypes.c_float))
        entries[i].size = size
    entries[len(rows)].name = None
    keep.append(entries)
    return entries, keep


def quantize_child(request: QuantizeRequest, channel: ChildChannel) -> None:
    """In the child: route llama.cpp's log to ``channel`` and run every job in turn.

    A refusal (``llama_model_quantize`` returns non-zero) ends that job only; it is sent
    as a result with its error. A crash ends the child, and the parent raises.
    """
    from llama_cpp import llama_cpp as bindings

    lines: list[str] = []

    def emit(level: int, text: str) -> None:
        lines.append(text)
        channel.log(level, text)

    forwarder = LogLineJoiner(emit)
    log_callback = bindings.llama_log_callback(forwarder.on_log)
    bindings.llama_log_set(log_callback, ctypes.c_void_p(0))
    bindings.llama_backend_init()
    ones: tuple[Any, list[object]] | None = None
    for index, job in enumerate(request.jobs):
        channel.step(f"quantizing to file type {job.ftype} ({job.output_path})")
        lines.clear()
        forwarder.errors.clear()
        params = bindings.llama_model_quantize_default_params()
        params.ftype = job.ftype
        params.nthread = request.nthread
        params.allow_requantize = True
        if job.imatrix == "ones":
            if ones is None:
                ones = _imatrix_entries(bindings, request.input_path)
            params.imatrix = ones[0]
        start = time.perf_counter()
        rc = bindings.llama_model_quantize(
            request.input_path.encode(), job.output_path.encode(), ctypes.byref(params)
        )
        seconds = time.perf_counter() - start
        forwarder.flush()
        error = None
        if rc != 0:
            error = forwarder.errors[-1] if forwarder.errors else f"llama.cpp returned {rc}"
        channel.send(_JobDone(index, seconds, tuple(lines), error))


def quantize_many(
    input_path: str | os.PathLike[str],
    jobs: Sequence[tuple[str | os.PathLike[str], str | FileType, ImatrixMode]],
    *,
    nthread: int = 2,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> list[QuantizeOutcome]:
    """Run ``(output_path, quant, imatrix)`` jobs on one input in one child, in order.

    Returns one outcome per job; a job llama.cpp refuses has ``error`` set (the others
    still run). ``timeout_s`` bounds each job. Raises :class:`~app.errors.EngineError`
    when the child dies (then no outcome is returned),
    :class:`~app.errors.ModelFileNotFoundError` when the input is missing and
    :class:`~app.model.quant.QuantError` for an unknown quant name.
    """
    planned = [(os.fspath(out), file_type(q), imatrix) for out, q, imatrix in jobs]
    if not os.path.isfile(input_path):
        raise ModelFileNotFoundError("no such model file", path=input_path)
    request = QuantizeRequest(
        input_path=os.fspath(input_path),
        jobs=tuple(QuantizeJob(out, ft.ftype, imatrix) for out, ft, imatrix in planned),
        nthread=nthread,
    )
    run = EngineWorker(quantize_child, request, timeout_s=timeout_s).run()
    done = {
        e.item.index: e.item
        for e in run.events
        if isinstance(e, ItemEvent) and isinstance(e.item, _JobDone)
    }
    if len(done) != len(planned):
        raise EngineError("llama.cpp's quantizer ended without all results", log_tail=())
    return [
        QuantizeOutcome(out, ft, imatrix, done[i].seconds, done[i].log, done[i].error)
        for i, (out, ft, imatrix) in enumerate(planned)
    ]


def quantize(
    input_path: str | os.PathLike[str],
    output_path: str | os.PathLike[str],
    quant: str | FileType,
    *,
    nthread: int = 2,
    imatrix: ImatrixMode = "none",
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> QuantizeOutcome:
    """Quantize ``input_path`` to ``output_path`` at file type ``quant`` (e.g. "Q4_K_M").

    Raises :class:`~app.errors.EngineError` when llama.cpp refuses (its reason is in the
    message, e.g. "this quantization requires an imatrix!") or the child dies,
    :class:`~app.errors.ModelFileNotFoundError` when the input is missing and
    :class:`~app.model.quant.QuantError` for an unknown quant name.
    """
    (outcome,) = quantize_many(
        input_path, [(output_path, quant, imatrix)], nthread=nthread, timeout_s=timeout_s
    )
    if outcome.error is not None:
        raise EngineError(
            f"llama.cpp refused to quantize to {outcome.file_type.name}: {outcome.error}",
            log_tail=outcome.log[-30:],
        )
    return outcome
