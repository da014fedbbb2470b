"""What each runner will actually run: its defaults, the user's pins, and its own fitting.

A user asks "will it fit in Ollama?" and the runner answers by changing the settings the
user left unset. :func:`plan_runner` reproduces that, so the verdict, Compare, Recommend
and every export describe the same run:

- **llama-server** (pinned llama.cpp ``common/common.h``, ``tools/server/server.cpp``):
  ``-c 0`` (the training context), ``-np`` auto = 4 slots sharing one unified cache (an
  explicit ``-np`` splits ``-c`` over the slots), ``-fa auto``, ``-b 2048 -ub 512``, then
  ``--fit on`` (:func:`app.planning.llama_fit.llama_fit`): the context shrinks (not below
  ``--fit-ctx`` 4096) when ``-c`` is unset, layers and MoE experts move to the CPU,
  1024 MiB stay free per device (``--fit-target``). A pinned ``-ngl``, ``-ts`` or ``-ot`` stops it.
  It also holds a host prompt cache (``--cache-ram`` 8192 MiB, grows with use) and up
  to 32 context checkpoints per slot (``--ctx-checkpoints``) for models that cannot roll
  back their memory (a sliding window, recurrent state).
- **Ollama** (read at ollama/ollama fb30760; ``llm/llama_server.go`` ``startLlamaServer``,
  ``llm/server.go``, ``server/sched.go``, ``server/routes.go``, ``envconfig/config.go``):
  runs llama-server with ``-c num_ctx×np -np np`` (so never a unified cache),
  ``num_ctx`` from ``OLLAMA_CONTEXT_LENGTH`` or by total VRAM (≥ 47 GiB 262144, ≥ 23 GiB
  32768, else 4096), capped at the training context, ``OLLAMA_NUM_PARALLEL`` 1, one KV
  type for K and V, ``-b``/``-ub`` both ``num_batch`` (automatic 512/1024/2048 by
  context and VRAM), ``-ngl`` only when ``num_gpu`` is set, mmap off on CPU-only
  machines; llama-server's own fit does the rest, its margin padded to the projector's
  weights + 1 GiB when a projector is offloaded. An out-of-memory load with an automatic
  context is retried once at the next lower tier (32768, then 4096).
- **LM Studio** (lmstudio-js ``packages/lms-kv-config/src/schema.ts``): context 4096,
  4 parallel sessions with a unified cache, flash attention off, ``-b 2048 -ub 512``,
  32 context checkpoints, and ``llm.load.llama.autoFit`` on, which ggtune takes to be
  llama.cpp's fit over the layers (the engine is closed source: an assumption, said in
  the plan's notes).
- **llama-cpp-python** (``Llama.__init__``): what it is given; no fitting.

Example::

    plan = plan_runner(spec, "ollama", hardware, given={"n_ctx": 4096})
    plan.summary   # "Ollama would put 47 of 63 layers on CUDA0 and keep 4096 context"
    plan.settings  # what llama.cpp will load with
    plan.estimate  # memory per device, with the prompt cache, projector, draft …
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from app.errors import GGTuneError, SettingsError
from app.hardware.devices import Hardware
from app.model.catalog_names import CATALOG_PREFIX
from app.model.facts import gpu_layers_text
from app.model.projector import Projector
from app.model.spec import ModelSpec
from app.planning.llama_fit import DEFAULT_FIT_CTX, DEFAULT_FIT_TARGET_MIB, FitResult, llama_fit
from app.predict.estimate import MemoryEstimate, estimate, row_bytes, safe_repack
from app.settings import ALL_LAYERS, RunnerName, Settings, runner_defaults
from app.units import GIB, MIB

RUNNER_TITLES: Final[dict[str, str]] = {
    "llama-server": "llama-server",
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "llama-cpp-python": "llama-cpp-python",
}

DEFAULT_CACHE_RAM_MIB: Final = 8192
"""llama-server ``--cache-ram`` default (``common/common.h`` ``cache_ram_mib``)."""
DEFAULT_CTX_CHECKPOINTS: Final = 32
"""llama-server ``--ctx-checkpoints`` default per slot (``n_ctx_checkpoints``)."""

OLLAMA_SINGLE_SLOT_FAMILIES: Final = frozenset(
    {
        "mllama",
        "qwen3vl",
        "qwen3vlmoe",
        "qwen35",
        "qwen35moe",
        "qwen3next",
        "lfm2",
        "lfm2moe",
        "nemotron_h",
        "nemotron_h_moe",
        "nemotron_h_omni",
    }
)
"""Architectures Ollama loads with one slot whatever OLLAMA_NUM_PARALLEL says
(``server/sched.go`` ``load``, ollama#4165)."""

OLLAMA_PROJECTOR_HEADROOM: Final = GIB
"""``mmprojOffloadHeadroom`` (``llm/llama_server.go``): added to the projector's weights."""


@dataclass(frozen=True, slots=True)
class RunnerOptions:
    """Runner knobs beyond :class:`~app.settings.Settings`; ``None`` is the runner's default.

    ``fit``: llama-server's ``--fit on|off``; ``fit_target_mib``: ``--fit-target`` (one
    value or one per GPU); ``fit_ctx``: ``--fit-ctx``; ``cache_ram_mib``: ``--cache-ram``
    (-1 no limit, 0 off); ``ctx_checkpoints``: ``--ctx-checkpoints``; ``mmproj_offload``:
    ``--no-mmproj-offload`` when False; ``ollama_context_length``: OLLAMA_CONTEXT_LENGTH;
    ``ollama_gpu_overhead_bytes``: OLLAMA_GPU_OVERHEAD. ``live``: a slider tick (the
    desktop): the runner's fit searches on the stage model's compute buffers and only its
    result is measured on the reserve graph (``llama_fit(quick=True)``); the plan's
    estimate is the reserve graph's either way.
    """

    fit: bool = True
    fit_target_mib: tuple[int, ...] = ()
    fit_ctx: int = DEFAULT_FIT_CTX
    cache_ram_mib: int | None = None
    ctx_checkpoints: int | None = None
    mmproj_offload: bool | None = None
    ollama_context_length: int = 0
    ollama_gpu_overhead_bytes: int = 0
    live: bool = False


@dataclass(frozen=True, slots=True)
class RunnerPlan:
    """One runner's run of one model on one machine.

    ``requested`` is the runner's preset with the user's pins; ``settings`` what llama.cpp
    loads after the runner's own choices and fitting; ``estimate`` its memory with the
    footprint around it (prompt cache, checkpoints, projector, draft model).
    ``decided`` names the settings the runner chose itself (not pinned, changed by it).
    """

    runner: RunnerName
    requested: Settings
    settings: Settings
    pinned: frozenset[str]
    fit: FitResult | None
    estimate: MemoryEstimate
    summary: str
    details: tuple[str, ...]
    notes: tuple[str, ...]
    decided: frozenset[str]
    projector: Projector | None
    projector_on_gpu: bool
    margins_mib: tuple[int, ...]
    cache_ram_mib: int
    ctx_checkpoints: int
    fit_env: tuple[tuple[str, str], ...] = ()
    """Environment the runner sets for llama-server (Ollama's LLAMA_ARG_FIT_TARGET)."""

    @property
    def title(self) -> str:
        """Return the runner's name as users write it."""
        return RUNNER_TITLES[self.runner]

    @property
    def gpu_layers(self) -> int:
        """Return the layers (with the output layer) on GPUs in this plan."""
        return self.estimate.n_gpu_layers


def plan_runner(
    spec: ModelSpec,
    runner: RunnerName,
    hardware: Hardware,
    *,
    given: Mapping[str, object] | None = None,
    options: RunnerOptions | None = None,
    projector: Projector | None = None,
    draft: ModelSpec | None = None,
) -> RunnerPlan:
    """Return what ``runner`` will run for ``spec`` on ``hardware`` with ``given`` pinned.

    ``given`` maps :class:`~app.settings.Settings` field names to the values the user set,
    in llama.cpp's terms (``n_ctx`` all slots together; for Ollama that is num_ctx × slots).
    Everything else takes the runner's default or its own choice.
    """
    given = dict(given or {})
    options = options or RunnerOptions()
    pinned = frozenset(given)
    if runner == "ollama":
        return _plan_ollama(spec, hardware, given, pinned, options, projector, draft)
    base = runner_defaults(runner)
    if runner == "lmstudio":
        # contextLength is always passed (no context shrink); the cache is unified
        requested = base.replace(**given)
    elif runner == "llama-server":
        if "n_parallel" in given and "kv_unified" not in given:
            given["kv_unified"] = False  # an explicit -np turns the unified cache off
        requested = safe_repack(base.replace(**given), hardware.host, given)
    else:
        requested = base.replace(**given)
    notes: list[str] = []
    if not requested.repack and "repack" not in given:
        notes.append(
            "--no-repack: on a CPU with AMX the pinned llama.cpp's AMX kernels crash on "
            "some machines (llama.cpp issue #20824), so the weights stay as in the file; "
            "turn repacking on (--repack) to try them"
        )
    fit: FitResult | None = None
    margins = options.fit_target_mib or (DEFAULT_FIT_TARGET_MIB,)
    settings = requested
    if runner in ("llama-server", "lmstudio") and options.fit:
        fit_pins = pinned | ({"n_ctx"} if runner == "lmstudio" else frozenset())
        fit, settings = _run_fit(spec, requested, hardware, fit_pins, margins, options, draft)
        if runner == "lmstudio":
            notes.append(
                "LM Studio's autoFit (llm.load.llama.autoFit, on by default) is taken to be "
                "llama.cpp's fit over the GPU layers; its engine is closed source"
            )
    elif runner in ("llama-server", "lmstudio"):
        notes.append(f"{RUNNER_TITLES[runner]} fitting is off: the settings run as given")
    if settings.n_ctx == 0:
        settings = settings.replace(n_ctx=spec.n_ctx_train)
    on_gpu = _projector_on_gpu(projector, settings, hardware, options)
    if projector is not None and runner == "llama-server" and on_gpu and fit is not None:
        notes.append(
            "llama-server's fit does not count the projector (it loads after the fit): "
            f"keep {math.ceil((projector.weights_bytes + projector.compute_bytes) / MIB)} MiB "
            "more free with --fit-target, or use --no-mmproj-offload"
        )
    cache_ram, checkpoints = _server_extras(runner, options)
    return _finish(
        spec,
        runner,
        hardware,
        requested,
        settings,
        pinned,
        fit,
        notes,
        projector,
        on_gpu,
        draft,
        tuple(margins),
        cache_ram,
        checkpoints,
        (),
    )


# --- Ollama ------------------------------------------------------------------------------


def ollama_default_num_ctx(hardware: Hardware, overhead_bytes: int = 0) -> int:
    """Return Ollama's default ``num_ctx`` for this machine's VRAM (``server/routes.go``).

    Total VRAM minus OLLAMA_GPU_OVERHEAD per GPU: ≥ 47 GiB → 262144, ≥ 23 GiB → 32768,
    else 4096 (the thresholds sit 1 GiB below 48/24 GiB for drivers' rounding).
    """
    total = sum(max((g.capacity_bytes or 0) - overhead_bytes, 0) for g in hardware.gpus)
    if total >= 47 * GIB:
        return 262144
    if total >= 23 * GIB:
        return 32768
    return 4096


def _ollama_next_lower_ctx(num_ctx: int) -> int | None:
    """``nextLowerAutoNumCtx`` (``server/sched.go``): the OOM retry's context."""
    if num_ctx > 32768:
        return 32768
    if num_ctx > 4096:
        return 4096
    return None


def _ollama_predicted_vram(spec: ModelSpec, n_ctx: int) -> int:
    """``llm.PredictServerVRAM``: file size + an f16 KV guess (min KV heads, n_embd/n_head)."""
    layers = spec.n_layer
    kv_heads = min((h for h in spec.n_head_kv[: spec.n_layer]), default=0) or 1
    n_head_max = max(spec.n_head[: spec.n_layer], default=0)
    head_dim = spec.n_embd // n_head_max if n_head_max else 0
    return spec.weights_bytes + 2 * layers * kv_heads * head_dim * n_ctx * 2


def ollama_auto_batch(spec: ModelSpec, hardware: Hardware, n_ctx: int, flash_off: bool) -> int:
    """Return Ollama's automatic ``num_batch`` (``server/sched.go``
    ``automaticGenerationBatch``): 2048 above 32768 tokens, 1024 above 4096, else 512,
    stepped down while the predicted VRAM leaves too little room."""
    if flash_off and hardware.gpus:
        return 512  # FA disabled on CUDA: the default (256 on ≤ 8 GiB GPUs above 4096 tokens)
    batch = 2048 if n_ctx > 32768 else 1024 if n_ctx > 4096 else 512
    predicted = _ollama_predicted_vram(spec, n_ctx)
    available = sum(g.free_bytes or g.capacity_bytes or 0 for g in hardware.gpus)

    def fits(b: int) -> bool:
        if predicted == 0 or available == 0:
            return True
        threshold = available * 80 // 100
        if predicted > threshold:
            return False
        if b >= 2048 and predicted > available * 60 // 100:
            return False
        if b >= 1024 and predicted > available * 75 // 100:
            return False
        surcharge = 2 * GIB if b >= 2048 else 768 * MIB if b >= 1024 else 0
        return surcharge <= threshold - predicted

    while batch > 512 and not fits(batch):
        batch = 1024 if batch > 1024 else 512
    return batch


def _plan_ollama(
    spec: ModelSpec,
    hardware: Hardware,
    given: dict[str, object],
    pinned: frozenset[str],
    options: RunnerOptions,
    projector: Projector | None,
    draft: ModelSpec | None,
) -> RunnerPlan:
    notes: list[str] = []
    k, v = given.get("cache_type_k"), given.get("cache_type_v")
    if k is not None and v is not None and k != v:
        raise SettingsError(
            f"Ollama has one KV cache type for K and V (OLLAMA_KV_CACHE_TYPE); K {k} and "
            f"V {v} cannot be expressed — pick one type, or plan for llama-server"
        )
    n_parallel = int(given.get("n_parallel", 1))  # type: ignore[call-overload]
    if spec.arch in OLLAMA_SINGLE_SLOT_FAMILIES and n_parallel != 1:
        notes.append(f"Ollama runs {spec.arch} with one slot (ollama#4165)")
        n_parallel = 1
    ctx_auto = "n_ctx" not in given and not options.ollama_context_length
    if "n_ctx" in given:
        num_ctx = max(int(given["n_ctx"]) // max(n_parallel, 1), 1)  # type: ignore[call-overload]
    elif options.ollama_context_length:
        num_ctx = options.ollama_context_length
    else:
        num_ctx = ollama_default_num_ctx(hardware, options.ollama_gpu_overhead_bytes)
    num_ctx = max(num_ctx, 4)
    if projector is not None:
        num_ctx = max(num_ctx, 2048)  # vision models need at least 2048 (sched.go)

    def attempt(num_ctx: int) -> tuple[RunnerPlan, int]:
        capped = min(num_ctx, spec.n_ctx_train) if spec.n_ctx_train > 0 else num_ctx
        kv = str(given.get("cache_type_k", given.get("cache_type_v", "f16")))
        flash = str(given.get("flash_attn", "auto"))
        if "n_batch" in given or "n_ubatch" in given:
            batch = int(given.get("n_ubatch", given.get("n_batch", 512)))  # type: ignore[call-overload]
        else:
            batch = ollama_auto_batch(spec, hardware, capped * n_parallel, flash == "off")
        ngl = int(given.get("n_gpu_layers", ALL_LAYERS))  # type: ignore[call-overload]
        use_mmap = bool(given.get("use_mmap", bool(hardware.gpus) and ngl != 0))
        requested = Settings(
            n_ctx=capped * n_parallel,
            n_gpu_layers=ngl,
            cache_type_k=kv,  # type: ignore[arg-type]
            cache_type_v=kv,  # type: ignore[arg-type]
            flash_attn=flash,  # type: ignore[arg-type]
            n_parallel=n_parallel,
            kv_unified=False,
            swa_full=False,
            n_batch=batch,
            n_ubatch=batch,
            use_mmap=use_mmap,
            repack=bool(given.get("repack", True)),
        )
        on_gpu = _ollama_projector_on_gpu(projector, spec, ngl, "n_gpu_layers" in pinned, hardware)
        if options.mmproj_offload is not None:
            on_gpu = on_gpu and options.mmproj_offload
        env: tuple[tuple[str, str], ...] = ()
        if options.fit_target_mib:
            margins = options.fit_target_mib
        else:
            margins = (DEFAULT_FIT_TARGET_MIB,)
        if projector is not None and on_gpu and projector.weights_bytes:
            pad = -(-(projector.weights_bytes + OLLAMA_PROJECTOR_HEADROOM) // MIB)
            # extraEnvsForStart: LLAMA_ARG_FIT_TARGET = projector + 1 GiB (MiB), added to
            # an inherited target from the runner's own environment
            margins = tuple(m + pad for m in options.fit_target_mib) or (pad,)
            env = (("LLAMA_ARG_FIT_TARGET", ",".join(str(m) for m in margins)),)
        fit_pins = frozenset({"n_ctx"}) | (pinned & {"n_gpu_layers"})
        fit, settings = _run_fit(spec, requested, hardware, fit_pins, margins, options, draft)
        cache_ram, checkpoints = _server_extras("ollama", options)
        plan = _finish(
            spec,
            "ollama",
            hardware,
            requested,
            settings,
            pinned,
            fit,
            list(notes),
            projector,
            on_gpu,
            draft,
            tuple(margins),
            cache_ram,
            checkpoints,
            env,
        )
        return plan, capped

    plan, capped = attempt(num_ctx)
    capped_note = f"Ollama caps num_ctx at the training context ({capped} tokens)"
    if capped < num_ctx:
        plan = _with_note(plan, capped_note)
    lower = _ollama_next_lower_ctx(capped)
    if ctx_auto and lower is not None and _load_fails(plan):
        retry, _ = attempt(lower)
        if capped < num_ctx:
            retry = _with_note(retry, capped_note)
        plan = _with_note(
            retry,
            f"Ollama's load would run out of memory at num_ctx {capped}; it retries once "
            f"at {lower} (server/sched.go reduceAutoNumCtxForLoadOOM)",
        )
    return plan


def _run_fit(
    spec: ModelSpec,
    requested: Settings,
    hardware: Hardware,
    pins: frozenset[str],
    margins: Sequence[int],
    options: RunnerOptions,
    draft: ModelSpec | None,
) -> tuple[FitResult, Settings]:
    """Run llama.cpp's fit as the runner calls it; return it and the settings it loads
    (the fit's dry runs load without mmap; the run keeps the requested mmap)."""
    fit = llama_fit(
        spec,
        requested,
        hardware,
        pinned=pins,
        margins_mib=margins,
        n_ctx_min=options.fit_ctx,
        extra=_draft_measure(draft, hardware),
        quick=options.live,
    )
    return fit, fit.settings.replace(use_mmap=requested.use_mmap)


def _load_fails(plan: RunnerPlan) -> bool:
    """Whether the load itself runs out of memory (growth of caches not counted)."""
    return plan.estimate.fits is False


def _ollama_projector_on_gpu(
    projector: Projector | None,
    spec: ModelSpec,
    ngl: int,
    ngl_pinned: bool,
    hardware: Hardware,
) -> bool:
    """``shouldDisableMMProjOffload``: CPU when num_gpu is 0, a partial num_gpu, or a GPU
    with less free memory than the projector + 1 GiB."""
    if projector is None or not hardware.gpus:
        return False
    if ngl_pinned and ngl == 0:
        return False
    if ngl_pinned and 0 < ngl < spec.n_layer + 1:
        return False
    need = projector.weights_bytes + OLLAMA_PROJECTOR_HEADROOM
    for g in hardware.gpus:
        memory = g.free_bytes or g.capacity_bytes or 0
        if 0 < memory < need:
            return False
    return True


# --- shared ------------------------------------------------------------------------------


def _server_extras(runner: RunnerName, options: RunnerOptions) -> tuple[int, int]:
    """Return (``--cache-ram`` MiB, ``--ctx-checkpoints``) of the runner's llama-server."""
    if runner == "llama-cpp-python":
        return 0, 0  # Llama() keeps no prompt cache unless set_cache() is called
    cache_ram = (
        options.cache_ram_mib if options.cache_ram_mib is not None else DEFAULT_CACHE_RAM_MIB
    )
    checkpoints = (
        options.ctx_checkpoints if options.ctx_checkpoints is not None else DEFAULT_CTX_CHECKPOINTS
    )
    return cache_ram, checkpoints


def _projector_on_gpu(
    projector: Projector | None, settings: Settings, hardware: Hardware, options: RunnerOptions
) -> bool:
    if projector is None or not hardware.gpus:
        return False
    if options.mmproj_offload is not None:
        return options.mmproj_offload
    return True  # --mmproj-offload is on by default (common.h mmproj_use_gpu)


def _draft_measure(
    draft: ModelSpec | None, hardware: Hardware
) -> Callable[[Settings], MemoryEstimate] | None:
    """Return fit's ``extra`` for a draft model: its memory at the target's settings with
    every layer on the GPUs (``-ngld`` auto), or None."""
    if draft is None:
        return None

    def measure(settings: Settings) -> MemoryEstimate:
        return estimate(
            draft,
            settings.replace(
                n_gpu_layers=ALL_LAYERS if hardware.gpus else 0,
                tensor_split=(),
                tensor_overrides=(),
                n_cpu_moe=0,
            ),
            hardware,
        )

    return measure


def checkpoint_bytes_each(spec: ModelSpec, settings: Settings) -> int:
    """Return the size of one context checkpoint of one slot, at most (0: none made).

    llama-server checkpoints the part of the memory that cannot be rolled back
    (``server-context.cpp``: SWA without ``--swa-full``, recurrent or hybrid state;
    ``llama_state_seq_get_size`` with ``LLAMA_STATE_SEQ_FLAGS_PARTIAL_ONLY``): the
    sliding-window cache of one sequence — at most its window plus one micro-batch of
    cells (``llama-kv-cache-iswa.cpp``) — or its recurrent state (R and S rows, f32).
    """
    total = 0
    swa = spec.memory_kind in ("iswa", "hybrid_iswa") and not settings.swa_full and spec.n_swa > 0
    if swa:
        cells = spec.n_swa + min(settings.n_ubatch, settings.n_batch)
        for il in range(spec.n_layer):
            if spec.is_swa[il] and not spec.is_recurrent[il] and spec.n_head_kv[il] > 0:
                total += row_bytes(settings.cache_type_k, spec.n_embd_k_gqa(il)) * cells
                if not spec.is_mla:
                    total += row_bytes(settings.cache_type_v, spec.n_embd_v_gqa(il)) * cells
    if spec.memory_kind in ("recurrent", "hybrid", "hybrid_iswa"):
        row = 4 * (spec.n_embd_r() + spec.n_embd_s())
        total += row * sum(1 for il in range(spec.n_layer) if spec.is_recurrent[il])
    return total


def _finish(
    spec: ModelSpec,
    runner: RunnerName,
    hardware: Hardware,
    requested: Settings,
    settings: Settings,
    pinned: frozenset[str],
    fit: FitResult | None,
    notes: list[str],
    projector: Projector | None,
    on_gpu: bool,
    draft: ModelSpec | None,
    margins: tuple[int, ...],
    cache_ram_mib: int,
    ctx_checkpoints: int,
    env: tuple[tuple[str, str], ...],
) -> RunnerPlan:
    est = estimate(spec, settings, hardware)
    est = with_footprint(
        est,
        spec,
        settings,
        hardware,
        projector=projector,
        projector_on_gpu=on_gpu,
        draft=draft,
        cache_ram_mib=cache_ram_mib,
        ctx_checkpoints=ctx_checkpoints,
    )
    decided = frozenset(
        f
        for f in ("n_ctx", "n_gpu_layers", "tensor_split", "tensor_overrides")
        if f not in pinned and getattr(settings, f) != getattr(requested, f)
    )
    summary, details = _words(runner, spec, requested, settings, est, fit, hardware, pinned)
    if cache_ram_mib < 0:
        notes.append("--cache-ram -1: the prompt cache has no limit and grows with use")
    if projector is None and _catalog_has_projector(spec):
        notes.append(
            "this model has a vision projector in a separate mmproj file; its memory "
            "(weights and warm-up compute) is not in this plan until one is given "
            "(--mmproj FILE, or an mmproj*.gguf beside the model)"
        )
    return RunnerPlan(
        runner=runner,
        requested=requested,
        settings=settings,
        pinned=pinned,
        fit=fit,
        estimate=est,
        summary=summary,
        details=tuple(details),
        notes=tuple(notes),
        decided=decided,
        projector=projector,
        projector_on_gpu=on_gpu,
        margins_mib=margins,
        cache_ram_mib=cache_ram_mib,
        ctx_checkpoints=ctx_checkpoints,
        fit_env=env,
    )


def _catalog_has_projector(spec: ModelSpec) -> bool:
    """Whether ``spec`` is a catalog entry whose published model has a vision tower."""
    if not spec.path.startswith(CATALOG_PREFIX):
        return False
    from app.model.catalog import load_entry  # here: a file's plan need not import the catalog

    try:
        return load_entry(spec.path.removeprefix(CATALOG_PREFIX)).vision_projector
    except GGTuneError:
        return False


def _with_note(plan: RunnerPlan, note: str) -> RunnerPlan:
    return dataclasses.replace(plan, notes=(*plan.notes, note))


def with_footprint(
    est: MemoryEstimate,
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    projector: Projector | None = None,
    projector_on_gpu: bool = False,
    draft: ModelSpec | None = None,
    cache_ram_mib: int = 0,
    ctx_checkpoints: int = 0,
) -> MemoryEstimate:
    """Return ``est`` with the memory the runner holds around the model, per device.

    The projector (weights + compute, on the first GPU unless not offloaded) and the draft
    model (its weights, KV for every slot and compute, every layer on the GPUs) are held
    from the load on; the prompt cache (host, up to ``--cache-ram``) and the context
    checkpoints (host, up to ``--ctx-checkpoints`` per slot) grow with use.
    """
    devices = list(est.devices)
    host_i = len(devices) - 1
    if projector is not None:
        i = 0 if projector_on_gpu and hardware.gpus else host_i
        devices[i] = dataclasses.replace(
            devices[i],
            projector_bytes=devices[i].projector_bytes
            + projector.weights_bytes
            + projector.compute_bytes,
        )
    if draft is not None:
        measure = _draft_measure(draft, hardware)
        assert measure is not None
        x = measure(settings)
        for i, d in enumerate(x.devices):
            if i < len(devices) and d.total_bytes:
                devices[i] = dataclasses.replace(
                    devices[i], draft_bytes=devices[i].draft_bytes + d.total_bytes
                )
    if cache_ram_mib > 0:
        devices[host_i] = dataclasses.replace(
            devices[host_i], prompt_cache_bytes=cache_ram_mib * MIB
        )
    each = checkpoint_bytes_each(spec, settings)
    if ctx_checkpoints > 0 and each:
        devices[host_i] = dataclasses.replace(
            devices[host_i], checkpoint_bytes=each * ctx_checkpoints * settings.n_parallel
        )
    return dataclasses.replace(est, devices=tuple(devices))


def _ctx_words(n: int) -> str:
    return f"{n // 1024}k" if n >= 8192 and n % 1024 == 0 else str(n)


def _words(
    runner: RunnerName,
    spec: ModelSpec,
    requested: Settings,
    settings: Settings,
    est: MemoryEstimate,
    fit: FitResult | None,
    hardware: Hardware,
    pinned: frozenset[str],
) -> tuple[str, list[str]]:
    """Return the plan in a sentence ("Ollama would put 47 of 63 layers on CUDA0 and keep
    4096 context") and the details under it."""
    title = RUNNER_TITLES[runner]
    total_layers = spec.n_layer_all + 1
    gpus = [d for d in est.devices if d.kind == "gpu"]
    on_gpu = est.n_gpu_layers
    ctx = est.context.n_ctx
    per_slot = est.context.n_ctx_seq if est.context.n_stream > 1 else ctx
    if not gpus:
        where = "run in system RAM"
    elif on_gpu == 0:
        where = f"keep all {total_layers - 1} layers and the output in system RAM"
    else:
        used = [d.name for d in gpus if d.n_layers] or [gpus[0].name]
        names = used[0] if len(used) == 1 else f"{len(used)} GPUs"
        if len(used) in (2, 3):
            names = ", ".join(used[:-1]) + " and " + used[-1]
        # counted as the model card, the slider and the verdict count them (-ngl counts
        # the output layer too: "all 36 layers + output", not "all 37 layers")
        where = f"put {gpu_layers_text(on_gpu, total_layers - 1)} on {names}"
    moved = sum(1 for _, b in settings.tensor_overrides if b.upper().startswith("CPU"))
    if moved and settings.tensor_overrides != requested.tensor_overrides:
        where += f", with the experts (or FFN) of {moved} layers in system RAM"
    keep = (
        "keep"
        if "n_ctx" in pinned or (fit is not None and fit.n_ctx_reduced_from is None)
        else "use"
    )
    slots = settings.n_parallel
    ctx_part = f"{keep} {_ctx_words(ctx)} context"
    if slots > 1:
        share = "shared by" if est.context.n_stream == 1 else f"{_ctx_words(per_slot)} each for"
        ctx_part += f" ({share} {slots} slots)"
    summary = f"{title} would {where} and {ctx_part}"
    details: list[str] = []
    if fit is not None:
        if fit.n_ctx_reduced_from is not None:
            details.append(
                f"--fit shrinks the context from {fit.n_ctx_reduced_from} (the training "
                f"context) to {fit.n_ctx}"
            )
        if fit.status == "failed":
            details.append(f"--fit gave up ({fit.message}): the pinned settings run as set")
        elif fit.status == "fitted" and fit.n_gpu_layers is not None:
            details.append(f"--fit picks {fit.args}")
        elif fit.status == "not_needed":
            details.append("--fit changes nothing: the settings fit with the margin")
        elif fit.status == "error":
            details.append(f"--fit cannot be reproduced: {fit.message}")
    return summary, details


def fitting_comments(plan: RunnerPlan, *, pinned_in_export: bool) -> tuple[str, ...]:
    """Return the comment lines an export carries about the runner's own fitting.

    ``pinned_in_export``: the export writes the fitted values (llama-server with
    ``--fit off``, LM Studio with autoFit off), or leaves them to the runner (Ollama's
    ``num_gpu`` unset).
    """
    lines = [f"{plan.summary} (ggtune's reproduction of its fitting, for this machine)"]
    fit = plan.fit
    if fit is None:
        return tuple(lines)
    if fit.status == "fitted" and pinned_in_export:
        lines.append(
            f"{plan.title}'s own fit would pick {fit.args} here; pinned so it runs as planned"
        )
    elif fit.status == "fitted":
        pin = (
            f"PARAMETER num_gpu {fit.n_gpu_layers} pins the layers"
            if plan.runner == "ollama" and fit.n_gpu_layers is not None
            else "add the values to pin them"
        )
        lines.append(f"left to {plan.title}: its llama-server --fit picks {fit.args} here ({pin})")
    elif fit.status == "failed":
        lines.append(f"{plan.title}'s fit gives up here ({fit.message}): the pinned values run")
    for note in plan.notes:
        lines.append(note)
    return tuple(lines)


__all__ = [
    "DEFAULT_CACHE_RAM_MIB",
    "DEFAULT_CTX_CHECKPOINTS",
    "Projector",
    "RunnerOptions",
    "RunnerPlan",
    "checkpoint_bytes_each",
    "fitting_comments",
    "ollama_auto_batch",
    "ollama_default_num_ctx",
    "plan_runner",
    "with_footprint",
]
