"""llama.cpp's own fitting (``--fit``, on by default in llama-server), reproduced.

llama-server changes the settings the user left unset until the model fits every device
with a margin to spare. :func:`llama_fit` follows ``common_params_fit_impl`` in
``common/fit.cpp`` of the pinned llama.cpp step by step, with :func:`app.predict.estimate.estimate`
in place of the engine's ``no_alloc`` dry runs (``common_get_device_memory_data``):

1. Measure with the settings as given. One device: done when it keeps its margin
   (``--fit-target``, 1024 MiB) free; several: done when each does. No GPU: done when
   the host's total memory keeps the margin, else only step 2 is tried.
2. Context unset (``-c 0``) and short of memory: measure again at the minimum context
   (``--fit-ctx`` 4096, times the KV streams) and interpolate linearly between it and the
   training context to the memory there is, rounded down to 256 cells per stream. With
   one device (or none) that is the whole fit; with several, the target is lowered by
   about half a layer per device first.
3. Only now the settings the user set make fit give up: ``-ngl``, ``-ts``, ``-ot`` (also
   ``-ncmoe``/``-cmoe``, which are overrides) or ``-sm row``. Otherwise layers are filled
   back to front: the last device gets the output layer and as many layers as fit (the
   method of false position over the layer count), then the device before it. For a MoE
   model these layers are first "dense only": their experts go to the CPU with
   ``-ot blk\\.I\\.ffn_(up|down|gate_up|gate)_(ch|)exps=CPU``.
4. MoE, when every device has room with all experts on the CPU: front to back, dense-only
   layers become full layers while they fit, and one more layer is tried with only part
   of its FFN moved on (``ffn_(gate|gate_up|down)`` "UP", then ``ffn_down`` "GATE", else
   the whole FFN "ATTN"), to the next device or the CPU.

The result is what ``llama-fit-params`` prints: ``-c N -ngl N [-ts a,b] [-ot "…"]``.
Memory figures are ggtune's estimate of the engine's, so a decision can differ from the
engine's only where the estimate does (the compute buffers; see docs/benchmarks.md).
Host memory is taken as unlimited when there is a GPU, as in ``fit.h``.

Example::

    fit = llama_fit(spec, settings, hardware, pinned=frozenset({"n_ctx"}))
    fit.status, fit.n_gpu_layers, fit.overrides, fit.args
    fit.settings          # what llama.cpp will load with
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final, Literal

from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.predict.estimate import DeviceEstimate, MemoryEstimate, estimate
from app.settings import ALL_LAYERS, Settings
from app.units import DEFAULT_MARGIN_BYTES, MIB

DEFAULT_FIT_TARGET_MIB: Final = DEFAULT_MARGIN_BYTES // MIB  # 1024
"""``--fit-target`` default, per device (``common/common.h`` ``fit_params_target``)."""
DEFAULT_FIT_CTX: Final = 4096
"""``--fit-ctx`` default: the least context fit may choose (``fit_params_min_ctx``)."""
MAX_OVERRIDES: Final = 4096
"""``llama_max_tensor_buft_overrides()`` (``src/llama.cpp``)."""

FitStatus = Literal["not_needed", "fitted", "failed", "error"]
"""``not_needed``: the settings fit as they are; ``fitted``: fit changed them and projects
that they fit; ``failed``: fit gave up (``COMMON_PARAMS_FIT_STATUS_FAILURE``; llama.cpp then
loads with what it changed so far, e.g. a smaller context); ``error``: fit could not run
(a capacity unknown)."""

Fraction = Literal["attn", "up", "gate", "moe"]
"""``common_layer_fraction_t``: the part of a partial layer that stays on its device."""

_FRACTION_PATTERN: Final[dict[Fraction, str]] = {
    # common/fit.cpp get_overflow_pattern: the tensors that move on (overflow)
    "attn": r"blk\.{il}\.ffn_(gate|up|gate_up|down).*",
    "up": r"blk\.{il}\.ffn_(gate|gate_up|down).*",
    "gate": r"blk\.{il}\.ffn_down.*",
    "moe": r"blk\.{il}\.ffn_(up|down|gate_up|gate)_(ch|)exps",
}
ALL_EXPERTS_PATTERN: Final = r"blk\.\d+\.ffn_(up|down|gate_up|gate)_(ch|)exps"
"""Every MoE expert tensor (fit's probe with all experts in system memory)."""

FIT_FIELDS: Final = ("n_gpu_layers", "tensor_split", "tensor_overrides", "n_cpu_moe")
"""Settings whose being set by the user makes fit give up after the context step."""


class _FitAbort(Exception):
    """``common_params_fit_exception``: fit gives up, keeping what it changed."""


@dataclass(frozen=True, slots=True)
class LayerShare:
    """``ngl_t``: layers on one device, of which ``n_part`` keep only part of the layer."""

    n_layer: int = 0
    n_part: int = 0
    overflow: Fraction = "moe"
    """What stays of the first partial layer (later ones keep everything but experts)."""

    @property
    def n_full(self) -> int:
        """Return the layers held whole."""
        return self.n_layer - self.n_part


@dataclass(frozen=True, slots=True)
class FitResult:
    """What llama.cpp's fit decides, with the memory it projects per device.

    ``n_ctx`` is the total context llama.cpp creates (all streams; the training context
    times the streams when ``-c`` was unset and nothing had to shrink).
    ``tensor_split`` holds layers per device when there are several devices;
    ``overrides`` the ``-ot`` pairs (pattern, ``"CPU"`` or a device's name; see
    :attr:`buffer_overrides` for llama.cpp's buffer names).
    ``device_bytes``/``free_bytes``/``margin_bytes`` are per device, in device order.
    """

    status: FitStatus
    message: str
    settings: Settings
    n_ctx: int
    n_ctx_reduced_from: int | None
    n_gpu_layers: int | None
    tensor_split: tuple[int, ...]
    overrides: tuple[tuple[str, str], ...]
    shares: tuple[LayerShare, ...]
    device_names: tuple[str, ...]
    device_bytes: tuple[int, ...]
    free_bytes: tuple[int, ...]
    margin_bytes: tuple[int, ...]
    steps: tuple[str, ...]
    n_measurements: int
    buffer_names: tuple[str, ...] = ()
    """Per device, the name llama.cpp prints for its buffer in ``-ot`` (``RPC0[host:port]``)."""

    @property
    def changed(self) -> bool:
        """Return whether fit changed any setting."""
        return self.n_ctx_reduced_from is not None or self.n_gpu_layers is not None

    @property
    def args(self) -> str:
        """Return the flags as ``llama-fit-params`` prints them (``-c N -ngl N …``)."""
        ngl = self.n_gpu_layers if self.n_gpu_layers is not None else -1
        text = f"-c {self.n_ctx} -ngl {ngl}"
        split = list(self.tensor_split)
        while len(split) > 1 and split[-1] == 0:
            split.pop()  # llama-fit-params drops trailing zeros
        if len(split) > 1:
            text += " -ts " + ",".join(str(n) for n in split)
        if self.overrides:
            text += ' -ot "' + ",".join(f"{p}={b}" for p, b in self.buffer_overrides) + '"'
        return text

    @property
    def buffer_overrides(self) -> tuple[tuple[str, str], ...]:
        """Return the ``-ot`` pairs with each device named as llama.cpp names its buffer."""
        names = dict(zip(self.device_names, self.buffer_names, strict=False))
        return tuple((p, names.get(b, b)) for p, b in self.overrides)


def _fit_total(d: DeviceEstimate) -> int:
    """Return what fit's dry run sees on a device: model + context + compute."""
    return d.weights_bytes + d.kv_bytes + d.recurrent_bytes + d.compute_bytes


def _cdiv(a: int, b: int) -> int:
    """Return C's integer division (truncated towards zero)."""
    q = abs(a) // abs(b)
    return q if (a >= 0) == (b >= 0) else -q


def _u32(x: int) -> int:
    """Return ``x`` converted to ``uint32_t`` (modulo 2^32)."""
    return x & 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class FitMeasurement:
    """One dry run's answer (``common_get_device_memory_data``), in bytes: model + context
    + compute per model device (in device order), the model part alone, and the host's."""

    device_total: tuple[int, ...]
    device_model: tuple[int, ...]
    host_total: int


def llama_fit(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    pinned: frozenset[str] = frozenset(),
    margins_mib: Sequence[int] = (DEFAULT_FIT_TARGET_MIB,),
    n_ctx_min: int = DEFAULT_FIT_CTX,
    split_mode: Literal["layer", "row", "none", "tensor"] = "layer",
    extra: Callable[[Settings], MemoryEstimate] | None = None,
    measure: Callable[[Settings], FitMeasurement] | None = None,
    quick: bool = False,
) -> FitResult:
    """Return what llama.cpp's ``--fit`` makes of ``settings`` on ``hardware``.

    ``settings.n_ctx == 0`` means ``-c`` was left unset (fit may shrink it);
    ``pinned`` names the settings the user set (fields of :class:`Settings`): a pinned
    ``n_gpu_layers``, ``tensor_split``, ``tensor_overrides`` or ``n_cpu_moe`` makes fit give
    up after the context step, as llama.cpp does. ``margins_mib`` is ``--fit-target``:
    one value for every device, or one per device. ``extra`` measures a second model
    that shares the devices (a draft model) at the settings' context, added to every
    measurement (``common_fit_extra_model``). The host is taken to have unlimited memory
    when there are GPUs (``fit.h``). ``measure`` replaces the estimate as the dry run
    (the tests drive the same steps with the engine's own figures).

    ``quick`` (a slider tick: the reserve graph costs 10–70 ms per candidate for a large
    model partially offloaded, and fit tries five to ten): the steps first measure with
    the stage model's compute buffers; the settings they end with are reserved on the
    graph, and the steps run again with those buffers on each device, until they end
    where they were calibrated (twice at most; then fit runs on the graph throughout).
    One or two graphs per call. The decision can still differ from llama.cpp's where the
    buffers change with the layers (160 catalog cases, 4 models × 5 GPU sets × 4 contexts
    × llama-server/Ollama: 158 decide as the graph throughout, 2 split 12 + 8 GiB GPUs one
    layer apart; 13 differed without the calibration); the memory reported is the graph's.
    """
    args = (spec, settings, hardware, pinned, margins_mib, n_ctx_min, split_mode, extra)
    fit = _Fit(*args)
    if measure is not None:
        fit.dry_run = measure
        return fit.run()
    if not quick:
        return fit.run()
    calibration: tuple[int, ...] = ()
    calibrated_at: Settings | None = None
    for _ in range(3):
        fit = _Fit(*args)
        fit.quick, fit.calibration = True, calibration
        result = fit.run()
        if result.status == "error" or not result.device_names:
            return result
        dry = result.settings.replace(use_mmap=False)
        est = estimate(spec, dry, hardware, as_dry_run=True)
        exact = fit.estimated(result.settings, quick=False)
        breaks = any(
            used > free - margin
            for used, free, margin in zip(
                exact.device_total, result.free_bytes, result.margin_bytes, strict=False
            )
        )
        settled = calibrated_at is not None and dry == calibrated_at
        if (settled or result.status == "failed") and not breaks:
            return dataclasses.replace(result, device_bytes=exact.device_total)
        # search again with the graph's buffers of the settings it ended with on each
        # device (they change little with the layers): settled when it ends there again
        calibration = tuple(d.compute_bytes for d in est.devices)
        calibrated_at = dry
    return _Fit(*args).run()


class _Fit:
    def __init__(
        self,
        spec: ModelSpec,
        settings: Settings,
        hardware: Hardware,
        pinned: frozenset[str],
        margins_mib: Sequence[int],
        n_ctx_min: int,
        split_mode: str,
        extra: Callable[[Settings], MemoryEstimate] | None,
    ) -> None:
        assert margins_mib, "at least one fit margin"
        self.spec = spec
        self.hardware = hardware
        self.pinned = pinned
        self.split_mode = split_mode
        self.extra = extra
        self.n_ctx_min = n_ctx_min
        self.devices = hardware.gpus
        self.nd = len(self.devices)
        n = max(self.nd, 1)
        if len(margins_mib) == 1:
            margins = [margins_mib[0]] * n
        else:
            margins = list(margins_mib[:n]) + [DEFAULT_FIT_TARGET_MIB] * (n - len(margins_mib))
        self.margins = [m * MIB for m in margins]
        # cparams as fit sees them; the model params the user set, else llama's defaults
        self.cparams = settings
        self.user_ngl = "n_gpu_layers" in pinned
        self.base = settings.replace(
            n_gpu_layers=settings.n_gpu_layers if self.user_ngl else ALL_LAYERS,
            tensor_split=settings.tensor_split if "tensor_split" in pinned else (),
            tensor_overrides=settings.tensor_overrides,
            n_cpu_moe=settings.n_cpu_moe,
        )
        self.n_streams = 1 if settings.kv_unified else max(1, settings.n_parallel)
        self.n_ctx_auto = settings.n_ctx == 0
        self.hp_ngl = spec.n_layer  # llama_model_n_layer: the trunk, without NextN layers
        self.hp_nct = spec.n_ctx_train
        self.hp_nex = spec.n_expert
        self.steps: list[str] = []
        self.n_measurements = 0
        self.n_ctx_reduced_from: int | None = None
        self.final: Settings = self.base
        self.last_mem: list[int] = []
        self.dry_run: Callable[[Settings], FitMeasurement] = self.estimated
        self.quick = False
        self.calibration: tuple[int, ...] = ()
        """Quick steps: each device's compute buffer (bytes, devices then host) instead of
        the stage model's."""

    # --- measuring (common_get_device_memory_data) -----------------------------------

    def measure(self, settings: Settings) -> FitMeasurement:
        self.n_measurements += 1
        return self.dry_run(settings)

    def estimated(self, settings: Settings, quick: bool | None = None) -> FitMeasurement:
        # fit's dry runs load with no_alloc and load_mode NONE: no mapped file, and the
        # compute buffers as the dry run sizes them (without the scheduler's pins)
        dry = settings.replace(use_mmap=False)
        quick = self.quick if quick is None else quick
        est = estimate(self.spec, dry, self.hardware, as_dry_run=True, quick_compute=quick)
        # common_get_device_memory_data counts host buffers and the model devices' ones:
        # not the output buffer (not in the memory breakdown) and not CPU_REPACK (neither a
        # host buffer nor one of a model device), so repacked weights are missed
        totals = [_fit_total(d) for d in est.devices]
        if quick and self.calibration:
            for i, d in enumerate(est.devices):
                if i < len(self.calibration):
                    totals[i] += self.calibration[i] - d.compute_bytes
        models = [d.weights_bytes for d in est.devices]
        if self.extra is not None:
            x = self.extra(dry)
            by_name = {d.name: d for d in x.devices}
            for i, d in enumerate(est.devices):
                xd = by_name.get(d.name)
                if xd is not None:
                    totals[i] += _fit_total(xd)
                    models[i] += xd.weights_bytes
        return FitMeasurement(tuple(totals[:-1]), tuple(models[:-1]), totals[-1])

    def free(self, i: int) -> int:
        d = self.devices[i]
        value = d.free_bytes if d.free_bytes is not None else d.capacity_bytes
        assert value is not None
        return value

    # --- the steps ---------------------------------------------------------------------

    def run(self) -> FitResult:
        unknown = [
            d.name for d in self.devices if d.free_bytes is None and d.capacity_bytes is None
        ]
        if unknown or (self.nd == 0 and self.hardware.host.capacity_bytes is None):
            what = ", ".join(unknown) or "system RAM"
            return self._result("error", f"the free memory of {what} is unknown", self.base)
        try:
            status = self._fit()
            message = "fits" if status == "not_needed" else "fitted"
        except _FitAbort as abort:
            status, message = "failed", str(abort)
            self.steps.append(f"fit gave up: {message}")
        return self._result(status, message, self.final)

    def _fit(self) -> FitStatus:
        if self.split_mode == "tensor":
            raise _FitAbort("fit is not implemented for split mode tensor")
        n_ctx_max = self.hp_nct * self.n_streams
        n_ctx_min_total = self.n_ctx_min * self.n_streams
        cparams = self.base
        if self.n_ctx_auto:
            cparams = cparams.replace(n_ctx=n_ctx_max)
        full = self.measure(cparams)
        nd = self.nd
        margins = self.margins
        self.final = cparams
        free: list[int] = []
        sum_model = 0

        # step 1: do the settings fit as they are?
        if nd == 0:
            host_total = self.hardware.host.capacity_bytes or 0
            used = full.host_total
            host_free = host_total - used
            if host_free >= margins[0]:
                self.steps.append(
                    f"fits in system memory: {used // MIB} of {host_total // MIB} MiB, "
                    f"{host_free // MIB} MiB left ≥ {margins[0] // MIB} MiB"
                )
                return "not_needed"
            sum_free = host_total
            sum_used = used
        else:
            free = [self.free(i) for i in range(nd)]
            projected_free = [free[i] - full.device_total[i] for i in range(nd)]
            sum_free = sum(free)
            sum_used = sum(full.device_total)
            if all(projected_free[i] >= margins[i] for i in range(nd)):
                self.steps.append(
                    "fits as set: "
                    + ", ".join(
                        f"{self.devices[i].name} {full.device_total[i] // MIB} MiB used, "
                        f"{projected_free[i] // MIB} MiB free"
                        for i in range(nd)
                    )
                )
                self.last_mem = list(full.device_total)
                return "not_needed"
            sum_model = sum(full.device_model)

        # step 2: a smaller context, when -c was left unset
        global_surplus = (sum_free - sum_used) - sum(margins[: max(nd, 1)])
        if global_surplus < 0:
            self.steps.append(f"{-global_surplus // MIB} MiB short in total")
            if self.n_ctx_auto:
                if n_ctx_max > n_ctx_min_total:
                    target = sum_free - sum(margins[: max(nd, 1)])
                    if nd > 1:
                        # only whole layers (dense) or whole tensors (MoE, ~1/3 layer) move
                        ngl = self.base.n_gpu_layers
                        denom = min(_u32(ngl), self.hp_ngl)
                        per_layer = sum_model // denom if denom else 0
                        target -= (nd + 1) * per_layer // (6 if self.hp_nex else 2)
                    cparams = cparams.replace(n_ctx=n_ctx_min_total)
                    low = self.measure(cparams)
                    used_min = low.host_total if nd == 0 else sum(low.device_total)
                    if target > used_min and sum_used != used_min:
                        n_ctx = n_ctx_min_total + _cdiv(
                            (n_ctx_max - n_ctx_min_total) * (target - used_min),
                            sum_used - used_min,
                        )
                        align = 256 * self.n_streams
                        n_ctx = max(n_ctx - n_ctx % align, n_ctx_min_total)
                        cparams = cparams.replace(n_ctx=n_ctx)
                        self.final = cparams
                        self.n_ctx_reduced_from = n_ctx_max
                        self.steps.append(f"context reduced from {n_ctx_max} to {n_ctx}")
                        if nd <= 1:
                            return "fitted"
                    else:
                        self.final = cparams
                        self.n_ctx_reduced_from = n_ctx_max
                        self.steps.append(
                            f"context reduced from {n_ctx_max} to the minimum {n_ctx_min_total}"
                        )
                else:
                    self.steps.append(
                        f"the training context {n_ctx_max} is ≤ the minimum "
                        f"{n_ctx_min_total}: context unchanged"
                    )
            else:
                self.steps.append(f"context set by the user ({cparams.n_ctx}): unchanged")
        if nd == 0:
            raise _FitAbort("was unable to fit model into system memory by reducing context")

        # the settings fit may not touch
        if self.user_ngl:
            raise _FitAbort(f"n_gpu_layers already set by user to {self.base.n_gpu_layers}")
        if nd > 1:
            if "tensor_split" in self.pinned and any(self.base.tensor_split):
                raise _FitAbort("tensor_split already set by user")
            if self.split_mode == "row":
                raise _FitAbort("changing weight allocation for split mode row not implemented")
        if self.base.tensor_overrides or self.base.n_cpu_moe:
            raise _FitAbort("tensor_buft_overrides already set by user")

        self.cparams = cparams
        return self._fill(margins, free)

    # --- steps 3 and 4 -------------------------------------------------------------------

    def _settings_for(self, shares: Sequence[LayerShare], bufts: Sequence[str]) -> Settings:
        """set_ngl_tensor_split_tbo: -ngl, -ts and -ot for layers per device."""
        nd = self.nd
        ngl = sum(s.n_layer for s in shares)
        assert ngl <= self.hp_ngl + 1, f"{ngl} layers > {self.hp_ngl + 1}"
        split: tuple[float, ...] = tuple(float(s.n_layer) for s in shares) if nd > 1 else ()
        il0 = self.hp_ngl + 1 - ngl
        overrides: list[tuple[str, str]] = []
        for i, share in enumerate(shares):
            il0 += share.n_full
            for il in range(il0, il0 + share.n_part):
                if len(overrides) + 1 >= MAX_OVERRIDES:
                    raise _FitAbort(
                        f"llama_max_tensor_buft_overrides() == {MAX_OVERRIDES} is insufficient"
                    )
                first = il == il0
                fraction: Fraction = share.overflow if first else "moe"
                buft = bufts[i] if first else "CPU"
                overrides.append((_FRACTION_PATTERN[fraction].format(il=il), buft))
            il0 += share.n_part
        return self.cparams.replace(
            n_gpu_layers=ngl, tensor_split=split, tensor_overrides=tuple(overrides)
        )

    def _mem(self, shares: Sequence[LayerShare], bufts: Sequence[str]) -> list[int]:
        return list(self.measure(self._settings_for(shares, bufts)).device_total)

    def _fill(self, margins: list[int], free: list[int]) -> FitStatus:
        nd = self.nd
        moe = self.hp_nex > 0
        surplus_cpu_moe = 0
        if moe:
            probe = self.cparams.replace(tensor_overrides=((ALL_EXPERTS_PATTERN, "CPU"),))
            m = self.measure(probe)
            surplus_cpu_moe = sum(free[i] - m.device_total[i] - margins[i] for i in range(nd))
            self.steps.append(
                f"with every expert in system memory: {abs(surplus_cpu_moe) // MIB} MiB "
                + ("to spare" if surplus_cpu_moe > 0 else "still short")
            )
        targets = [free[i] - margins[i] for i in range(nd)]
        bufts = ["CPU"] * nd
        cur = [LayerShare() for _ in range(nd)]
        mem = self._mem(cur, bufts)

        # step 3: dense (MoE: dense-only) layers back to front, false position per device
        for i in range(nd - 1, -1, -1):
            n_unassigned = self.hp_ngl + 1 - sum(cur[j].n_layer for j in range(i + 1, nd))
            high = list(cur)
            n_part = high[i].n_part
            if moe:
                n_part = n_unassigned if i < nd - 1 else n_unassigned - 1
            high[i] = dataclasses.replace(high[i], n_layer=n_unassigned, n_part=n_part)
            if high[i].n_layer > 0:
                mem_high = self._mem(high, bufts)
                if mem_high[i] > targets[i]:
                    delta = high[i].n_layer - cur[i].n_layer
                    while delta > 1:
                        step = _u32(_cdiv(delta * (targets[i] - mem[i]), mem_high[i] - mem[i]))
                        step = min(max(step, 1), delta - 1)
                        test = list(cur)
                        add_part = 0
                        if moe:
                            first_out = i == nd - 1 and test[i].n_part == 0
                            add_part = step - 1 if first_out else step
                        test[i] = dataclasses.replace(
                            test[i],
                            n_layer=test[i].n_layer + step,
                            n_part=test[i].n_part + add_part,
                        )
                        mem_test = self._mem(test, bufts)
                        if mem_test[i] <= targets[i]:
                            cur, mem = test, mem_test
                        else:
                            high, mem_high = test, mem_test
                        delta = high[i].n_layer - cur[i].n_layer
                else:
                    cur, mem = high, mem_high
            self.steps.append(
                f"{self.devices[i].name}: {cur[i].n_layer} layers"
                + (f" ({cur[i].n_part} with experts in system memory)" if moe else "")
                + f", {mem[i] // MIB} MiB used, {(free[i] - mem[i]) // MIB} MiB free"
            )
        if not moe or surplus_cpu_moe <= 0:
            return self._finish(cur, bufts, mem)

        # step 4: MoE with room to spare: dense-only layers become full, front to back
        dense_start = nd
        for i in range(nd - 1, -1, -1):
            if cur[i].n_layer > 0:
                dense_start = i
                continue
            break
        i = 0
        while i <= dense_start and dense_start < nd:
            high = list(cur)
            for j in range(dense_start, nd):
                move = high[j].n_layer if j < nd - 1 else high[j].n_layer - 1
                high[i] = dataclasses.replace(high[i], n_layer=high[i].n_layer + move)
                high[j] = dataclasses.replace(high[j], n_layer=high[j].n_layer - move, n_part=0)
            dense_start_high = nd - 1
            mem_high = self._mem(high, bufts)
            if mem_high[i] > targets[i]:
                delta = high[i].n_full - cur[i].n_full
                while delta > 1:
                    step = _u32(_cdiv(delta * (targets[i] - mem[i]), mem_high[i] - mem[i]))
                    step = min(max(step, 1), delta - 1)
                    test = list(cur)
                    ds_test = dense_start
                    converted = 0
                    while ds_test < nd:
                        n_convert = min(step - converted, test[ds_test].n_part)
                        test[ds_test] = dataclasses.replace(
                            test[ds_test],
                            n_layer=test[ds_test].n_layer - n_convert,
                            n_part=test[ds_test].n_part - n_convert,
                        )
                        test[i] = dataclasses.replace(test[i], n_layer=test[i].n_layer + n_convert)
                        converted += n_convert
                        if test[ds_test].n_part > 0:
                            break
                        ds_test += 1
                    mem_test = self._mem(test, bufts)
                    if mem_test[i] <= targets[i]:
                        cur, mem, dense_start = test, mem_test, ds_test
                    else:
                        high, mem_high, dense_start_high = test, mem_test, ds_test
                    delta = high[i].n_full - cur[i].n_full
            else:
                cur, mem, dense_start = high, mem_high, dense_start_high

            # try to fit part of one more layer
            ds = min(dense_start, nd - 1)
            if cur[ds].n_layer > (0 if i < nd - 1 else 1):
                test = list(cur)
                ds_test = ds
                test[ds_test] = dataclasses.replace(
                    test[ds_test],
                    n_layer=test[ds_test].n_layer - 1,
                    n_part=test[ds_test].n_part - 1,
                )
                test[i] = dataclasses.replace(
                    test[i], n_layer=test[i].n_layer + 1, n_part=test[i].n_part + 1
                )
                if test[ds_test].n_part == 0:
                    ds_test += 1
                test[i] = dataclasses.replace(test[i], overflow="up")
                bufts_test = list(bufts)
                if i < nd - 1:
                    bufts_test[i] = self.devices[i + 1].name

                def ok(m: list[int], i: int = i) -> bool:
                    return m[i] < targets[i] and (i + 1 == nd or m[i + 1] < targets[i + 1])

                mem_test = self._mem(test, bufts_test)
                if ok(mem_test):
                    cur, bufts, mem, dense_start = list(test), bufts_test, mem_test, ds_test
                    test[i] = dataclasses.replace(test[i], overflow="gate")
                    mem_test = self._mem(test, bufts_test)
                    if ok(mem_test):
                        cur, bufts, mem, dense_start = list(test), bufts_test, mem_test, ds_test
                else:
                    test[i] = dataclasses.replace(test[i], overflow="attn")
                    mem_test = self._mem(test, bufts_test)
                    if ok(mem_test):
                        cur, bufts, mem, dense_start = list(test), bufts_test, mem_test, ds_test
            self.steps.append(
                f"{self.devices[i].name}: {cur[i].n_layer} layers ({cur[i].n_part} overflowing), "
                f"{mem[i] // MIB} MiB used, {(free[i] - mem[i]) // MIB} MiB free"
            )
            i += 1
        return self._finish(cur, bufts, mem)

    def _finish(
        self, shares: Sequence[LayerShare], bufts: Sequence[str], mem: list[int]
    ) -> FitStatus:
        self.final = self._settings_for(shares, bufts)
        self.shares = tuple(shares)
        self.last_mem = mem
        return "fitted"

    def _result(self, status: FitStatus, message: str, settings: Settings) -> FitResult:
        shares: tuple[LayerShare, ...] = getattr(self, "shares", ())
        fitted_layers = bool(shares)
        nd = self.nd
        if len(self.last_mem) != nd and status != "error":
            self.last_mem = list(self.measure(settings).device_total) if nd else []
        return FitResult(
            status=status,
            message=message,
            settings=settings,
            n_ctx=settings.n_ctx if settings.n_ctx else self.hp_nct * self.n_streams,
            n_ctx_reduced_from=self.n_ctx_reduced_from,
            n_gpu_layers=settings.n_gpu_layers if fitted_layers else None,
            tensor_split=tuple(s.n_layer for s in shares) if fitted_layers and nd > 1 else (),
            overrides=settings.tensor_overrides if fitted_layers else (),
            shares=shares,
            device_names=tuple(d.name for d in self.devices),
            device_bytes=tuple(self.last_mem) if status != "error" else (),
            free_bytes=tuple(self.free(i) for i in range(nd)) if status != "error" else (),
            margin_bytes=tuple(self.margins[:nd]),
            steps=tuple(self.steps),
            n_measurements=self.n_measurements,
            buffer_names=tuple(d.buffer_name for d in self.devices),
        )
