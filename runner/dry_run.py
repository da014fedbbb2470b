"""Ask llama.cpp itself what a model costs under given settings, in a child process.

:func:`dry_run` loads the model and creates one context for a :class:`~app.settings.Settings`
through the low-level C API of llama-cpp-python (never the high-level ``Llama`` class,
whose defaults differ), captures every llama.cpp log line and returns an
:class:`~app.measured.engine_report.EngineReport`. :func:`dry_run_many` does the same for many
settings in one child, loading the model once per distinct set of *model* parameters
(``n_gpu_layers``, ``n_cpu_moe``, ``tensor_split``, and ``use_mmap`` in ``alloc`` mode)
and creating one context per settings.

Modes:

* ``"no_alloc"`` (the dry run, what ``common/fit.cpp`` does): model params
  ``no_alloc = true`` with ``load_mode = LLAMA_LOAD_MODE_NONE`` (with mmap, llama.cpp
  aborts on ``GGML_ASSERT(!ml.no_alloc)`` in ``src/llama-model.cpp``). Nothing big is
  allocated: model and KV buffer lines print ``0.00 MiB``; the KV cache ``size =`` lines,
  the compute buffer sizes (computed by ``graph_reserve`` without allocating) and the
  output buffer (really allocated, it is small) carry the numbers. The per-device split
  of the weights is *not* reported in this mode (llama.cpp only exposes it through the
  C++ ``llama_get_memory_breakdown``); ``model_size_bytes`` has the exact total.
* ``"alloc"``: a real load (mmap as the settings say) and a real context.

Example::

    from app.settings import Settings
    from runner.dry_run import dry_run, dry_run_many

    report = dry_run("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096, swa_full=False))
    [(c.role, c.cells, c.layers) for c in report.kv_caches]
    # [('non-SWA', 4096, 3), ('SWA', 1024, 15)]
    reports = dry_run_many(path, [Settings(n_ctx=n) for n in (512, 4096, 32768)])

Everything that runs llama.cpp is imported inside the child function, so importing this
module is cheap. Failures raise :class:`~app.errors.EngineError` subclasses (see
``runner/worker.py``).
"""

from __future__ import annotations

import ctypes
import os
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from app.errors import (
    EngineError,
    EngineLoadError,
    EngineUnsupportedError,
    ModelFileNotFoundError,
)
from app.measured.engine_report import DeviceType, EngineDevice, EngineMode, EngineReport
from app.model.ggml import GGML_TYPE_IDS
from app.settings import CACHE_TYPES, CacheType, FlashAttn, Settings
from runner.engine_log import LogLineJoiner, parse_log
from runner.worker import (
    ChildChannel,
    ChildFailure,
    EngineWorker,
    Event,
    LogEvent,
    StepEvent,
)

DEFAULT_TIMEOUT_S: Final = 120.0

# llama.h, enum llama_load_mode.
LOAD_MODE_NONE: Final = 0
LOAD_MODE_MMAP: Final = 1

# llama.h, enum llama_flash_attn_type.
FLASH_ATTN_TYPES: Final[dict[FlashAttn, int]] = {"auto": -1, "off": 0, "on": 1}

# ggml's type ids by name (app.model.ggml; llama-cpp-python 0.3.36's bindings lack GGML_TYPE_BF16).
GGML_TYPES: Final[dict[CacheType, int]] = {c: GGML_TYPE_IDS[c] for c in CACHE_TYPES}

# ggml/include/ggml-backend.h, enum ggml_backend_dev_type.
_DEVICE_TYPES: Final[tuple[DeviceType, ...]] = ("cpu", "gpu", "igpu", "accel", "meta")

MAX_DEVICES: Final = 16
"""``llama_max_devices()``: the length of ``llama_model_params.tensor_split``."""

MAX_TENSOR_BUFT_OVERRIDES: Final = 4096
"""``llama_max_tensor_buft_overrides()`` (``src/llama.cpp``)."""

FFN_EXPS_REGEX: Final = r"\.ffn_(up|down|gate|gate_up)_(ch|)exps"
"""``LLM_FFN_EXPS_REGEX`` from ``common/common.h``: a layer's MoE expert weights."""


def cpu_moe_patterns(n_cpu_moe: int) -> tuple[str, ...]:
    """Return the tensor patterns ``--n-cpu-moe n_cpu_moe`` keeps in CPU memory.

    As ``llm_add_n_cpu_ffn_overrides`` (``common/common.h``): one regex per layer,
    ``blk\\.<i>\\.ffn_(up|down|gate|gate_up)_(ch|)exps`` for ``i < n_cpu_moe``, each
    mapped to the CPU buffer type (llama.cpp then picks CPU_REPACK where it can).

    >>> cpu_moe_patterns(2)[1]
    'blk\\\\.1\\\\.ffn_(up|down|gate|gate_up)_(ch|)exps'
    """
    return tuple(f"blk\\.{i}{FFN_EXPS_REGEX}" for i in range(n_cpu_moe))


# --- the plan (parent) and the messages (child -> parent); all picklable -------------


@dataclass(frozen=True, slots=True)
class ModelLoad:
    """The ``llama_model_params`` of one model load, resolved from settings and mode."""

    n_gpu_layers: int
    tensor_split: tuple[float, ...]
    load_mode: int
    no_alloc: bool
    cpu_tensor_patterns: tuple[str, ...] = ()
    use_extra_bufts: bool = True

    @classmethod
    def from_settings(cls, settings: Settings, mode: EngineMode) -> ModelLoad:
        """Map the model-level fields of ``settings`` to llama.cpp model params."""
        if mode == "no_alloc":
            load_mode = LOAD_MODE_NONE  # mmap + no_alloc aborts (src/llama-model.cpp)
        else:
            load_mode = LOAD_MODE_MMAP if settings.use_mmap else LOAD_MODE_NONE
        return cls(
            n_gpu_layers=settings.n_gpu_layers,
            tensor_split=settings.tensor_split,
            load_mode=load_mode,
            no_alloc=mode == "no_alloc",
            cpu_tensor_patterns=cpu_moe_patterns(settings.n_cpu_moe),
            use_extra_bufts=settings.repack,
        )

    def describe(self) -> str:
        """Return the parameters in a few words, for step labels."""
        parts = [f"n_gpu_layers={self.n_gpu_layers}"]
        if self.tensor_split:
            parts.append(f"tensor_split={','.join(f'{p:g}' for p in self.tensor_split)}")
        if self.cpu_tensor_patterns:
            parts.append(f"{len(self.cpu_tensor_patterns)} CPU tensor overrides")
        parts.append("no_alloc" if self.no_alloc else "mmap" if self.load_mode else "no mmap")
        if not self.use_extra_bufts:
            parts.append("no repack")
        return ", ".join(parts)


@dataclass(frozen=True, slots=True)
class ContextJob:
    """One context to create: ``index`` into the caller's settings list."""

    index: int
    settings: Settings


@dataclass(frozen=True, slots=True)
class LoadGroup:
    """One model load and the contexts created on it."""

    load: ModelLoad
    jobs: tuple[ContextJob, ...]


@dataclass(frozen=True, slots=True)
class DryRunRequest:
    """What the child does: for each group, load the model, then create each context."""

    model_path: str
    mode: EngineMode
    groups: tuple[LoadGroup, ...]
    rpc_servers: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class EngineFacts:
    """Sent once, before any load: the build and the devices it sees."""

    engine_version: str
    system_info: str
    devices: tuple[EngineDevice, ...]


@dataclass(frozen=True, slots=True)
class ModelFacts:
    """Sent after each model load, from the C API (exact)."""

    size_bytes: int
    n_params: int
    n_layer: int
    n_ctx_train: int
    desc: str


@dataclass(frozen=True, slots=True)
class ContextFacts:
    """Sent after each context was created and freed again, from the C API."""

    index: int
    n_ctx: int
    n_ctx_seq: int
    n_seq_max: int
    n_batch: int
    n_ubatch: int


def check_rpc_endpoint(endpoint: str) -> str:
    """Return ``endpoint`` (``host:port``) or raise a one-line error naming what is wrong.

    >>> check_rpc_endpoint("127.0.0.1:50052")
    '127.0.0.1:50052'
    """
    host, sep, port = endpoint.strip().rpartition(":")
    if not sep or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise EngineUnsupportedError(
            f"RPC server {endpoint!r} is not HOST:PORT (e.g. 192.168.1.20:50052)"
        )
    return f"{host}:{int(port)}"


def probe_rpc_servers(endpoints: Sequence[str], timeout_s: float = 3.0) -> None:
    """Raise :class:`~app.errors.EngineLoadError` for the first server that does not accept
    a TCP connection within ``timeout_s``.

    llama.cpp aborts the whole process when an RPC handshake fails (``ggml-rpc.cpp``), so
    the parent checks first and says which server is missing instead of "the engine
    crashed". The probe connection closes before its HELLO, which ggml-rpc-server drops.
    """
    import socket

    for endpoint in endpoints:
        host, _, port = endpoint.rpartition(":")
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=timeout_s):
                pass
        except OSError as exc:
            raise EngineLoadError(
                f"RPC server {endpoint} does not answer ({exc.strerror or exc}); start "
                f"ggml-rpc-server -H {host} -p {port} on that machine"
            ) from None


def plan(
    model_path: str | os.PathLike[str],
    settings_list: Sequence[Settings],
    mode: EngineMode,
    rpc_servers: Sequence[str] = (),
) -> DryRunRequest:
    """Group ``settings_list`` by model params, in first-seen order; check what can't pass."""
    assert mode in ("no_alloc", "alloc"), f"mode must be 'no_alloc' or 'alloc', not {mode!r}"
    groups: dict[ModelLoad, list[ContextJob]] = {}
    for index, settings in enumerate(settings_list):
        if len(settings.tensor_split) > MAX_DEVICES:
            raise EngineUnsupportedError(
                f"settings #{index}: tensor split has {len(settings.tensor_split)} entries; "
                f"llama.cpp takes at most {MAX_DEVICES}"
            )
        if settings.n_cpu_moe > MAX_TENSOR_BUFT_OVERRIDES - 1:
            raise EngineUnsupportedError(
                f"settings #{index}: n_cpu_moe={settings.n_cpu_moe} needs more tensor "
                f"overrides than llama.cpp takes ({MAX_TENSOR_BUFT_OVERRIDES})"
            )
        load = ModelLoad.from_settings(settings, mode)
        groups.setdefault(load, []).append(ContextJob(index, settings))
    return DryRunRequest(
        model_path=os.fspath(model_path),
        mode=mode,
        groups=tuple(LoadGroup(load, tuple(jobs)) for load, jobs in groups.items()),
        rpc_servers=tuple(check_rpc_endpoint(e) for e in rpc_servers),
    )


# --- the child ----------------------------------------------------------------------


def _ggml_function(libs: Sequence[Any], name: str, restype: Any, argtypes: list[Any]) -> Any:
    for lib in libs:
        fn = getattr(lib, name, None)
        if fn is not None:
            fn.restype = restype
            fn.argtypes = argtypes
            return fn
    raise ChildFailure(
        f"the ggml library of llama-cpp-python has no {name}()", error=EngineUnsupportedError
    )


class GgmlBackend:
    """The few ggml-backend functions llama-cpp-python does not bind, through ctypes.

    Child-only (it loads the shared libraries); :mod:`runner.benchmark` uses it too.
    """

    def __init__(self) -> None:
        from llama_cpp import llama_cpp as bindings
        from llama_cpp._ctypes_extensions import load_shared_library

        # libllama's own handle first: dlsym on it searches the libggml it was linked with.
        # The wheel ships libggml.so and libggml.so.0 as two copies of one file (wheels hold
        # no symlinks), and loading libggml.so by name would give a second, separate backend
        # registry: RPC devices registered there are invisible to llama.cpp, and a buffer
        # type from it is not one llama.cpp knows.
        libs: list[Any] = [bindings._lib]
        for name in ("ggml", "ggml-base"):
            try:
                libs.append(load_shared_library(name, bindings._base_path))
            except (RuntimeError, OSError, FileNotFoundError):
                continue
        vp, sz = ctypes.c_void_p, ctypes.c_size_t
        self.dev_count = _ggml_function(libs, "ggml_backend_dev_count", sz, [])
        self.dev_get = _ggml_function(libs, "ggml_backend_dev_get", vp, [sz])
        self.dev_by_type = _ggml_function(libs, "ggml_backend_dev_by_type", vp, [ctypes.c_int])
        self.dev_name = _ggml_function(libs, "ggml_backend_dev_name", ctypes.c_char_p, [vp])
        self.dev_description = _ggml_function(
            libs, "ggml_backend_dev_description", ctypes.c_char_p, [vp]
        )
        self.dev_type = _ggml_function(libs, "ggml_backend_dev_type", ctypes.c_int, [vp])
        self.dev_memory = _ggml_function(
            libs, "ggml_backend_dev_memory", None, [vp, ctypes.POINTER(sz), ctypes.POINTER(sz)]
        )
        self.dev_buffer_type = _ggml_function(libs, "ggml_backend_dev_buffer_type", vp, [vp])
        self.reg_by_name = _ggml_function(libs, "ggml_backend_reg_by_name", vp, [ctypes.c_char_p])
        self.reg_get_proc_address = _ggml_function(
            libs, "ggml_backend_reg_get_proc_address", vp, [vp, ctypes.c_char_p]
        )
        self.register = _ggml_function(libs, "ggml_backend_register", None, [vp])

    def add_rpc_servers(self, endpoints: Sequence[str]) -> None:
        """Register one RPC backend per ``host:port``, as llama.cpp's ``--rpc`` does.

        ``common/arg.cpp`` ``add_rpc_devices``: ``ggml_backend_reg_by_name("RPC")``, then
        ``ggml_backend_rpc_add_server`` through ``ggml_backend_reg_get_proc_address`` (the
        function is not exported on its own) and ``ggml_backend_register``. Each server's
        devices appear as ``RPC0``, ``RPC1`` … in order; llama.cpp puts them before the
        local GPUs (``src/llama.cpp``). A server that does not answer aborts the process
        inside libggml (``GGML_ABORT("RPC handshake failed")``): callers check first.
        """
        if not endpoints:
            return
        reg = self.reg_by_name(b"RPC")
        if not reg:
            raise ChildFailure(
                "this llama.cpp build has no RPC backend (built without GGML_RPC=ON); "
                "run the set-up again (python3 tasks.py run)",
                error=EngineUnsupportedError,
            )
        address = self.reg_get_proc_address(reg, b"ggml_backend_rpc_add_server")
        if not address:
            raise ChildFailure(
                "the RPC backend does not offer ggml_backend_rpc_add_server",
                error=EngineUnsupportedError,
            )
        add_server = ctypes.CFUNCTYPE(ctypes.c_void_p, ctypes.c_char_p)(address)
        for endpoint in endpoints:
            server_reg = add_server(endpoint.encode())
            if not server_reg:
                raise ChildFailure(
                    f"RPC server {endpoint} reports no devices", error=EngineLoadError
                )
            self.register(server_reg)

    def devices(self) -> tuple[EngineDevice, ...]:
        found = []
        for i in range(self.dev_count()):
            dev = self.dev_get(i)
            free, total = ctypes.c_size_t(0), ctypes.c_size_t(0)
            self.dev_memory(dev, ctypes.byref(free), ctypes.byref(total))
            kind = self.dev_type(dev)
            found.append(
                EngineDevice(
                    name=(self.dev_name(dev) or b"").decode("utf-8", "replace"),
                    description=(self.dev_description(dev) or b"").decode("utf-8", "replace"),
                    type=_DEVICE_TYPES[kind] if 0 <= kind < len(_DEVICE_TYPES) else "unknown",
                    free_bytes=free.value,
                    total_bytes=total.value,
                )
            )
        return tuple(found)

    def cpu_buffer_type(self) -> int:
        """Return ``ggml_backend_cpu_buffer_type()`` (the CPU device's default buffer type)."""
        dev = self.dev_by_type(0)  # GGML_BACKEND_DEVICE_TYPE_CPU
        if not dev:
            raise ChildFailure("llama.cpp has no CPU device", error=EngineUnsupportedError)
        buft: int | None = self.dev_buffer_type(dev)
        if not buft:
            raise ChildFailure("the CPU device has no buffer type", error=EngineUnsupportedError)
        return buft


class _BuftOverride(ctypes.Structure):
    # llama.h: struct llama_model_tensor_buft_override { const char * pattern;
    # ggml_backend_buffer_type_t buft; }; a list of them ends with pattern == NULL.
    # llama-cpp-python declares the field as a void pointer and binds no struct.
    _fields_ = (("pattern", ctypes.c_char_p), ("buft", ctypes.c_void_p))


def model_params(
    bindings: Any, ggml: GgmlBackend, load: ModelLoad, keep_alive: list[object], progress: object
) -> Any:
    """Return ``llama_model_params`` for ``load``; ``keep_alive`` holds what C points into.

    ``progress`` is a ``llama_progress_callback`` (returning True continues the load).
    """
    params = bindings.llama_model_default_params()
    params.n_gpu_layers = load.n_gpu_layers
    params.load_mode = load.load_mode
    params.no_alloc = load.no_alloc
    params.use_extra_bufts = load.use_extra_bufts
    params.progress_callback = progress  # returns True; replaces the dots llama.cpp logs
    if load.tensor_split:
        split = (ctypes.c_float * MAX_DEVICES)(*load.tensor_split)
        keep_alive.append(split)
        params.tensor_split = ctypes.cast(split, ctypes.POINTER(ctypes.c_float))
    if load.cpu_tensor_patterns:
        cpu = ggml.cpu_buffer_type()
        n = len(load.cpu_tensor_patterns)
        overrides = (_BuftOverride * (n + 1))()
        for i, pattern in enumerate(load.cpu_tensor_patterns):
            overrides[i].pattern = pattern.encode()
            overrides[i].buft = cpu
        overrides[n].pattern = None
        keep_alive.append(overrides)
        params.tensor_buft_overrides = ctypes.cast(overrides, ctypes.c_void_p)
    return params


def context_params(bindings: Any, settings: Settings) -> Any:
    """Return ``llama_context_params`` for ``settings`` (threads left at llama.cpp's default)."""
    params = bindings.llama_context_default_params()
    params.n_ctx = settings.n_ctx
    params.n_batch = settings.n_batch
    params.n_ubatch = settings.n_ubatch
    params.n_seq_max = settings.n_parallel
    params.type_k = GGML_TYPES[settings.cache_type_k]
    params.type_v = GGML_TYPES[settings.cache_type_v]
    params.flash_attn_type = FLASH_ATTN_TYPES[settings.flash_attn]
    params.offload_kqv = settings.offload_kqv
    params.swa_full = settings.swa_full
    params.kv_unified = settings.kv_unified
    return params


def model_desc(bindings: Any, model: Any) -> str:
    """Return ``llama_model_desc`` (e.g. ``"gemma3 270M Q4_K - Medium"``)."""
    buf = ctypes.create_string_buffer(256)
    bindings.llama_model_desc(model, buf, ctypes.sizeof(buf))
    return buf.value.decode("utf-8", "replace")


@dataclass(slots=True)
class EngineSession:
    """The child's handle on llama.cpp (see :func:`open_engine`); not picklable.

    ``log_callback`` must stay referenced while llama.cpp may log (C holds a pointer).
    """

    bindings: Any
    forwarder: LogLineJoiner
    ggml: GgmlBackend
    facts: EngineFacts
    log_callback: object


def open_engine(channel: ChildChannel, rpc_servers: Sequence[str] = ()) -> EngineSession:
    """In the child: route llama.cpp's log to ``channel``, start the backends, send facts.

    ``rpc_servers`` (``host:port``) become devices ``RPC0``, ``RPC1`` … before the facts are
    read, so every model load in this process can place layers on them. Sends one
    :class:`EngineFacts` (build, system info, devices) before returning.
    """
    import llama_cpp
    from llama_cpp import llama_cpp as bindings

    assert (bindings.LLAMA_LOAD_MODE_NONE, bindings.LLAMA_LOAD_MODE_MMAP) == (
        LOAD_MODE_NONE,
        LOAD_MODE_MMAP,
    ), "llama_load_mode changed"
    forwarder = LogLineJoiner(channel.log)
    log_callback = bindings.llama_log_callback(forwarder.on_log)
    bindings.llama_log_set(log_callback, ctypes.c_void_p(0))
    bindings.llama_backend_init()
    ggml = GgmlBackend()
    if rpc_servers:
        channel.step(f"connecting to RPC servers {', '.join(rpc_servers)}")
        ggml.add_rpc_servers(rpc_servers)
    facts = EngineFacts(
        engine_version=f"llama-cpp-python {llama_cpp.__version__}",
        system_info=(bindings.llama_print_system_info() or b"").decode("utf-8", "replace").strip(),
        devices=ggml.devices(),
    )
    channel.send(facts)
    return EngineSession(bindings, forwarder, ggml, facts, log_callback)


def load_model(
    engine: EngineSession,
    channel: ChildChannel,
    model_path: str,
    load: ModelLoad,
    keep_alive: list[object],
    progress: object,
) -> Any:
    """In the child: load the model for ``load`` and send its :class:`ModelFacts`.

    Returns llama.cpp's model handle (free it with ``llama_model_free``). A NULL model
    raises :class:`~runner.worker.ChildFailure` (→ ``EngineLoadError``) with llama.cpp's
    first error line. ``keep_alive`` keeps the ctypes buffers of the params alive.
    """
    bindings, forwarder = engine.bindings, engine.forwarder
    channel.step(f"loading the model with {load.describe()}")
    forwarder.errors.clear()
    params = model_params(bindings, engine.ggml, load, keep_alive, progress)
    model = bindings.llama_model_load_from_file(model_path.encode(), params)
    forwarder.flush()
    if not model:
        why = f": {forwarder.errors[0]}" if forwarder.errors else ""
        raise ChildFailure(f"llama.cpp could not load the model{why}", error=EngineLoadError)
    channel.send(
        ModelFacts(
            size_bytes=bindings.llama_model_size(model),
            n_params=bindings.llama_model_n_params(model),
            n_layer=bindings.llama_model_n_layer(model),
            n_ctx_train=bindings.llama_model_n_ctx_train(model),
            desc=model_desc(bindings, model),
        )
    )
    return model


def dry_run_child(request: DryRunRequest, channel: ChildChannel) -> None:
    """Run ``request`` in this (child) process, reporting through ``channel``.

    Sends :class:`EngineFacts`, then per group a :class:`ModelFacts` and per context a
    :class:`ContextFacts`; each model load and each context is a step.
    """
    engine = open_engine(channel, request.rpc_servers)
    bindings, forwarder = engine.bindings, engine.forwarder
    progress = bindings.llama_progress_callback(lambda _progress, _user_data: True)
    for group in request.groups:
        keep_alive: list[object] = []
        model = load_model(engine, channel, request.model_path, group.load, keep_alive, progress)
        try:
            for job in group.jobs:
                channel.step(f"creating the context for settings #{job.index}")
                forwarder.errors.clear()
                ctx = bindings.llama_init_from_model(model, context_params(bindings, job.settings))
                forwarder.flush()
                if not ctx:
                    why = f": {forwarder.errors[0]}" if forwarder.errors else ""
                    raise ChildFailure(
                        f"llama.cpp could not create the context{why}", error=EngineLoadError
                    )
                facts = ContextFacts(
                    index=job.index,
                    n_ctx=bindings.llama_n_ctx(ctx),
                    n_ctx_seq=bindings.llama_n_ctx_seq(ctx),
                    n_seq_max=bindings.llama_n_seq_max(ctx),
                    n_batch=bindings.llama_n_batch(ctx),
                    n_ubatch=bindings.llama_n_ubatch(ctx),
                )
                bindings.llama_free(ctx)
                forwarder.flush()
                channel.send(facts)
        finally:
            bindings.llama_model_free(model)
            forwarder.flush()
        del keep_alive


# --- the parent ---------------------------------------------------------------------


def _reports(request: DryRunRequest, events: Sequence[Event]) -> list[EngineReport]:
    """Cut the event stream into per-context logs and build one report per settings."""
    settings_by_index = {job.index: job.settings for g in request.groups for job in g.jobs}
    preamble: list[str] = []
    segment: list[str] = []
    load_lines: tuple[str, ...] = ()
    seen_step = False
    engine: EngineFacts | None = None
    model: ModelFacts | None = None
    reports: dict[int, EngineReport] = {}
    for event in events:
        if isinstance(event, LogEvent):
            (segment if seen_step else preamble).append(event.text)
        elif isinstance(event, StepEvent):
            seen_step = True
            segment = []
        elif isinstance(event.item, EngineFacts):
            engine = event.item
        elif isinstance(event.item, ModelFacts):
            model = event.item
            load_lines = tuple(segment)
        elif isinstance(event.item, ContextFacts):
            assert engine is not None, "engine facts must come first"
            assert model is not None, "model facts must come before context facts"
            facts = event.item
            log = (*preamble, *load_lines, *segment)
            reports[facts.index] = _report(
                request, settings_by_index[facts.index], engine, model, facts, log
            )
    missing = sorted(set(settings_by_index) - set(reports))
    if missing:
        raise EngineError(f"the engine reported nothing for settings {missing}")
    return [reports[i] for i in sorted(reports)]


def _report(
    request: DryRunRequest,
    settings: Settings,
    engine: EngineFacts,
    model: ModelFacts,
    facts: ContextFacts,
    log: tuple[str, ...],
) -> EngineReport:
    return build_report(request.model_path, request.mode, settings, engine, model, facts, log)


def build_report(
    model_path: str,
    mode: EngineMode,
    settings: Settings,
    engine: EngineFacts,
    model: ModelFacts,
    facts: ContextFacts,
    log: tuple[str, ...],
) -> EngineReport:
    """Return the report of one model load and one context from their facts and log."""
    parsed = parse_log(log)
    if parsed.kv_unified is None or parsed.flash_attn is None:
        raise EngineError(
            "llama.cpp's log did not say whether the KV cache is unified or flash "
            "attention is on (did the log format change?)",
            log_tail=log[-30:],
        )
    return EngineReport(
        model_path=model_path,
        settings=settings,
        mode=mode,
        model_size_bytes=model.size_bytes,
        model_n_params=model.n_params,
        model_desc=model.desc,
        n_layer=model.n_layer,
        n_ctx_train=model.n_ctx_train,
        n_ctx=facts.n_ctx,
        n_ctx_seq=facts.n_ctx_seq,
        n_seq_max=facts.n_seq_max,
        n_batch=facts.n_batch,
        n_ubatch=facts.n_ubatch,
        kv_unified=parsed.kv_unified,
        flash_attn=parsed.flash_attn,
        flash_attn_requested=parsed.flash_attn_requested or "",
        model_buffers=parsed.model_buffers,
        kv_buffers=parsed.kv_buffers,
        rs_buffers=parsed.rs_buffers,
        compute_buffers=parsed.compute_buffers,
        output_buffers=parsed.output_buffers,
        kv_caches=parsed.kv_caches,
        recurrent_caches=parsed.recurrent_caches,
        offloaded_layers=parsed.offloaded_layers,
        devices=engine.devices,
        system_info=engine.system_info,
        engine_version=engine.engine_version,
        log=log,
    )


class DryRun:
    """A cancellable dry run of many settings on one model; :meth:`run` blocks.

    ``cancel()`` may be called from another thread (e.g. the GUI's); the child is gone
    within a second and :meth:`run` raises :class:`~app.errors.EngineCancelledError`.
    ``timeout_s`` bounds each step: starting the engine, each model load, each context.
    ``on_event`` sees every log line, step and partial result as it arrives (in the
    thread that called :meth:`run`).
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        settings_list: Sequence[Settings],
        *,
        mode: EngineMode = "no_alloc",
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_event: Callable[[Event], None] | None = None,
        rpc_servers: Sequence[str] = (),
    ) -> None:
        if not os.path.isfile(model_path):
            raise ModelFileNotFoundError("no such model file", path=model_path)
        self.request = plan(model_path, settings_list, mode, rpc_servers)
        self._worker = EngineWorker(
            dry_run_child, self.request, timeout_s=timeout_s, on_event=on_event
        )

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._worker.pid

    def run(self) -> list[EngineReport]:
        """Run every settings; return one report per settings, in the given order."""
        if not self.request.groups:
            return []
        probe_rpc_servers(self.request.rpc_servers)
        result = self._worker.run()
        return _reports(self.request, result.events)

    def cancel(self) -> None:
        """Kill the child now; :meth:`run` raises EngineCancelledError."""
        self._worker.cancel()


def dry_run(
    model_path: str | os.PathLike[str],
    settings: Settings,
    *,
    mode: EngineMode = "no_alloc",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    rpc_servers: Sequence[str] = (),
) -> EngineReport:
    """Return llama.cpp's report for ``settings`` on ``model_path`` (one child process).

    ``timeout_s`` bounds each step (starting, loading, creating the context).
    Raises :class:`~app.errors.EngineError` subclasses and ``ModelFileNotFoundError``.
    """
    return DryRun(
        model_path, [settings], mode=mode, timeout_s=timeout_s, rpc_servers=rpc_servers
    ).run()[0]


def dry_run_many(
    model_path: str | os.PathLike[str],
    settings_list: Sequence[Settings],
    *,
    mode: EngineMode = "no_alloc",
    timeout_s: float = DEFAULT_TIMEOUT_S,
    rpc_servers: Sequence[str] = (),
) -> list[EngineReport]:
    """Return one report per settings, in order, from one child process.

    The model is loaded once per distinct model params (see the module doc); each
    settings gets its own context. ``timeout_s`` bounds each step. A settings that
    llama.cpp refuses (e.g. a quantized V cache with flash attention ``"off"``) fails
    the whole call with :class:`~app.errors.EngineLoadError` naming its index.
    """
    return DryRun(
        model_path, settings_list, mode=mode, timeout_s=timeout_s, rpc_servers=rpc_servers
    ).run()
