"""Pick settings for a goal: longest context, fastest, best quality, or N users at X tok/s.

The planner searches what a user can change — quant level (the file they have and
simulated ones, :mod:`app.model.quant`), context, GPU layers, K/V cache types, flash attention,
parallel slots and unified KV, MoE experts on the CPU, tensor split over several GPUs —
with :func:`app.predict.estimate.estimate` for memory and :func:`app.predict.speed.predict_speed`
for speed, and says why in plain words (:func:`explain`), with the runner-up it beat.

Memory is monotonic in context and in GPU layers (tests/app/test_planner.py checks it), so
both are binary searches: a typical model plans in a few hundred milliseconds.

A setting *fits* when every device keeps ``margin_bytes`` (llama-server's ``--fit``
margin, 1 GiB) plus ``leave_free_bytes`` (what the user keeps for other apps) free; a
device of unknown capacity is taken to fit. Where GPUs exist, candidates that keep every
layer on them rank first for every goal: a layer in system RAM costs far more speed than
any quant or cache type saves (the explanation shows how much).

A **speculative draft model** (``Goal(draft=spec)``) is budgeted in the memory of every
plan: :func:`app.predict.estimate.estimate` of the draft with the target's settings (same context,
cache types, flash attention, slots, tensor split) but its own ``-ngld`` — every layer on
the GPUs when the target keeps all of its layers there, else none — placed on the same
devices. A simplification: llama-server gives the draft its own context and placement,
which this does not search. Its speed-up is the standard formula (Leviathan et al. 2023):
a target step with ``k`` drafted tokens yields ``(1 − α^(k+1))/(1 − α)`` tokens for an
acceptance rate ``α`` and costs ``k·t_draft + t_target`` (:mod:`app.predict.speed`). α is 0.7
unless given; it depends on how alike the two models are. The draft is recommended only
when it decodes ≥ 2.5× faster than the target and the predicted speed-up is above 1.1
(docs/sources.md §5); :attr:`Recommendation.draft` says why either way.

A **split over several machines** with llama.cpp's RPC backend (``Goal(rpc_hosts=…)``)
adds each remote's GPUs (its CPU when it has none: what ``ggml-rpc-server`` offers by
default) as devices ``RPC0``, ``RPC1`` … in the order given, before the local GPUs, as
llama.cpp does (``src/llama.cpp`` puts RPC devices first; ``ggml-rpc.cpp`` names them
``"RPC" + n`` with a global counter); layers are split over all devices in proportion to
their memory, like the default tensor split, and the plan then pins that split with
``-ts`` (one share per device: its layer count), so llama.cpp places the layers as planned
whatever free memory the servers report at load time. The speed model adds the network:
every byte llama.cpp's RPC protocol moves per step (:mod:`app.predict.rpc_traffic`: the
hidden state at each machine change, the graph inputs each remote device needs, the logits
when the output layer is remote) at the link's rate, and two latencies per round trip
(default 1 Gbit/s, 0.5 ms one way). MoE experts are not moved to the CPU (``-ncmoe``) in
such a plan: the first layers are on the remotes, so every one of them would send its
hidden state to the main machine's CPU and back. :attr:`Recommendation.rpc` gives the
memory per machine, the traffic and the commands that start each machine.

Example::

    options = quant_options(spec)                       # the file + simulated quants
    rec = recommend(spec, hardware, Goal("longest-context"), options=options)
    rec.best.settings, rec.best.n_ctx_per_user
    print(rec.why)
    rec = recommend(spec, hardware, Goal("fastest", draft=draft_spec))     # rec.draft.used
    rpc = RpcHost(compose("rtx-3090"), "192.168.1.20:50052")
    rec = recommend(spec, hardware, Goal("fastest", rpc_hosts=(rpc,)))
    rec.rpc.remote_commands             # (('ggml-rpc-server', '-H', '192.168.1.20', …),)
    server_argv("model.gguf", rec)      # llama-server … -ts 20,13 --rpc 192.168.1.20:50052
    max_users(spec, hardware, ctx_per_user=8192, min_tok_per_s=20).n_users
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from app.errors import PlanError, SettingsError
from app.export.llama_server import llama_server_argv
from app.export.rpc_server import CACHED_TENSOR_BYTES, rpc_server_argv
from app.hardware.devices import Device, Hardware
from app.model.spec import ModelSpec
from app.planning.goals import (
    CTX_STEP,
    DEFAULT_CTX,
    DRAFT_CAVEAT,
    KV_QUALITY_RANK,
    LOCAL_MACHINE,
    SPEC_VOCAB_MAX_SIZE_DIFFERENCE,
    Candidate,
    DraftPlan,
    Goal,
    MachineMemory,
    Recommendation,
    RpcHost,
    RpcPlan,
)
from app.planning.options import QuantOption, quality_cost, quant_options
from app.planning.words import explain, fmt_ctx, kv_words, placement_words, rpc_words, speed_words
from app.predict.estimate import (
    REPACK_NOTE_BYTES,
    DeviceEstimate,
    MemoryEstimate,
    estimate,
    place_layers,
    repack_is_safe,
    repacked_bytes,
    resolve_context,
    tensor_device,
)
from app.predict.rpc_traffic import StepTraffic, step_traffic
from app.predict.speed import (
    MIN_DRAFT_SPEED_RATIO,
    MIN_DRAFT_SPEEDUP,
    SpeedFactors,
    SpeedPrediction,
    best_draft_length,
    decode_bandwidth,
    expected_tokens_per_step,
    predict_speed,
    with_network,
)
from app.settings import ALL_LAYERS, MAX_SEQUENCES, Settings
from app.units import DEFAULT_MARGIN_BYTES, format_bytes, format_tps, speed_depth

# --- quant options ------------------------------------------------------------------------


# --- goals and candidates -----------------------------------------------------------------


class _Search:
    """Memoised estimates and fits for one (hardware, goal) pair."""

    def __init__(
        self,
        hardware: Hardware,
        goal: Goal,
        factors: SpeedFactors | None,
        *,
        machines: dict[str, str] | None = None,
        draft: ModelSpec | None = None,
    ) -> None:
        self.hardware = hardware
        self.goal = goal
        self.factors = factors or SpeedFactors()
        self.reserve = goal.margin_bytes + goal.leave_free_bytes
        self.count = 0
        self.machines = machines
        """Device name -> machine (an RPC split), None on one machine."""
        self.draft = draft
        self._draft_memo: dict[Settings, MemoryEstimate | None] = {}

    def draft_settings(self, settings: Settings) -> Settings:
        """Return the draft's settings: the target's, with its own ``-ngld`` (all layers on
        the GPUs when the target has all of its own there, else none) and no experts on
        the CPU."""
        ngl = ALL_LAYERS if settings.n_gpu_layers == ALL_LAYERS else 0
        return settings.replace(n_gpu_layers=ngl, n_cpu_moe=0)

    def draft_estimate(self, settings: Settings) -> MemoryEstimate | None:
        """Return the draft's own memory next to a target run with ``settings``."""
        if self.draft is None:
            return None
        ds = self.draft_settings(settings)
        if ds not in self._draft_memo:
            try:
                self.count += 1
                self._draft_memo[ds] = estimate(self.draft, ds, self.hardware)
            except SettingsError:
                self._draft_memo[ds] = None
        return self._draft_memo[ds]

    def estimate(
        self, spec: ModelSpec, settings: Settings, quick: bool = False
    ) -> MemoryEstimate | None:
        """Return the estimate with the draft model's memory (None: llama.cpp refuses the
        settings); ``quick``: with the stage model's compute buffers (a search's guess)."""
        try:
            self.count += 1
            est = estimate(spec, settings, self.hardware, quick_compute=quick)
        except SettingsError:
            return None  # llama.cpp refuses the combination (cache type rules)
        if self.draft is None:
            return est
        extra = self.draft_estimate(settings)
        return None if extra is None else _with_draft_memory(est, extra)

    def fits_at(
        self, spec: ModelSpec, settings: Settings, *, gpus_only: bool = False, quick: bool = False
    ) -> bool:
        """Return whether ``settings`` fits, reserving the compute graph only when the rest
        does: without its compute buffers every device's total is a lower bound, so a
        setting whose weights and caches alone do not fit is ruled out cheaply.
        ``quick``: with the stage model's compute buffers (a guess to start from, see
        :func:`_last_true`)."""
        try:
            lower = estimate(spec, settings, self.hardware, compute=False)
        except SettingsError:
            return False
        if self.draft is not None:
            extra = self.draft_estimate(settings)
            if extra is None:
                return False
            lower = _with_draft_memory(lower, extra)
        if not self.fits(lower, gpus_only=gpus_only):
            return False
        e = self.estimate(spec, settings, quick)
        return e is not None and self.fits(e, gpus_only=gpus_only)

    def fits(self, est: MemoryEstimate, *, gpus_only: bool = False) -> bool:
        for d in est.devices:
            if gpus_only and d.kind == "host":
                continue
            if d.capacity_bytes is not None and d.total_bytes > d.capacity_bytes - self.reserve:
                return False
        return True

    def gpu_layers(self, est: MemoryEstimate) -> int:
        return sum(d.n_layers for d in est.devices if d.kind == "gpu")

    def place(self, spec: ModelSpec, settings: Settings, quick: bool = False) -> Settings | None:
        """Return ``settings`` with the most GPU layers that fit (or MoE experts on the
        CPU, whichever is faster), or None when nothing fits. ``quick``: every figure with
        the stage model's compute buffers (a guess for :func:`_last_true`)."""
        full = settings.replace(n_gpu_layers=ALL_LAYERS, n_cpu_moe=0)
        est = self.estimate(spec, full, quick)
        if est is None:
            return None
        if self.fits(est):
            return full
        if not self.hardware.gpus:
            return None

        # the most layers whose GPU share fits (GPU memory grows with n_gpu_layers)
        def layers_fit(n: int, guess: bool) -> bool:
            s = settings.replace(n_gpu_layers=n, n_cpu_moe=0)
            return self.fits_at(spec, s, gpus_only=True, quick=quick or guess)

        # ngl in [0, n_layer_all]; +1 (all) failed above
        lo = _last_true(layers_fit, 0, spec.n_layer_all, quick)
        options: list[Settings] = []
        layered = settings.replace(n_gpu_layers=lo, n_cpu_moe=0)
        e = self.estimate(spec, layered, quick)
        if e is not None and self.fits(e):
            options.append(layered)
        if spec.n_expert and self.machines is None:
            # --n-cpu-moe: the fewest layers whose experts go to the CPU (llama.cpp's own
            # --fit tries this first for MoE models, common/fit.cpp); not over RPC, where
            # those first layers are remote (see the module doc)
            lo2, hi2 = 1, spec.n_layer
            found = None
            while lo2 <= hi2:
                mid = (lo2 + hi2) // 2
                if self.fits_at(spec, full.replace(n_cpu_moe=mid), gpus_only=True, quick=quick):
                    found, hi2 = mid, mid - 1
                else:
                    lo2 = mid + 1
            if found is not None:
                moe = full.replace(n_cpu_moe=found)
                e = self.estimate(spec, moe, quick)
                if e is not None and self.fits(e):
                    options.append(moe)
        if not options:
            return None
        return max(options, key=lambda s: self.speed(spec, s, 0, 1).decode_tok_per_s)

    def speed(self, spec: ModelSpec, settings: Settings, depth: int, users: int) -> SpeedPrediction:
        pred = predict_speed(
            spec, settings, self.hardware, depth=depth, n_users=users, factors=self.factors
        )
        if self.machines is None:
            return pred
        link = self.goal.link
        memory = estimate(spec, settings, self.hardware)

        def net(n_tokens: int, n_outputs: int, at: int) -> float:
            t = self.traffic(spec, settings, n_tokens, at, n_outputs=n_outputs, memory=memory)
            return t.seconds(link)

        # the prompt in micro-batches, only its last token with logits (llama-server)
        ub = max(1, resolve_context(spec, settings).n_ubatch)
        prefill = 0.0
        for start in range(0, pred.n_prompt, ub):
            n = min(ub, pred.n_prompt - start)
            prefill += net(n, 1 if start + n >= pred.n_prompt else 0, start)
        return with_network(
            pred,
            decode_s=net(1, 1, depth),
            decode_batch_s=net(users, users, depth),
            prefill_s=prefill,
        )

    def traffic(
        self,
        spec: ModelSpec,
        settings: Settings,
        n_tokens: int,
        depth: int,
        *,
        n_outputs: int | None = None,
        memory: MemoryEstimate | None = None,
    ) -> StepTraffic:
        """Return what one step of ``n_tokens`` tokens at ``depth`` moves over the network."""
        return step_traffic(
            spec,
            settings,
            self.hardware,
            self.machines or {},
            n_tokens=n_tokens,
            n_outputs=n_outputs,
            depth=depth,
            memory=memory,
        )

    def machines_of(self, device: str) -> str:
        return (self.machines or {}).get(device, LOCAL_MACHINE)

    def candidate(
        self, option: QuantOption, settings: Settings, ctx: int, users: int, depth: int
    ) -> Candidate | None:
        est = self.estimate(option.spec, settings)
        if est is None:
            return None
        spare = tuple(
            (d.name, None if d.capacity_bytes is None else d.capacity_bytes - d.total_bytes)
            for d in est.devices
        )
        return Candidate(
            quant=option,
            settings=settings,
            estimate=est,
            speed=self.speed(option.spec, settings, depth, users),
            n_ctx_per_user=ctx,
            n_users=users,
            gpu_layers=self.gpu_layers(est),
            n_layers=option.spec.n_layer_all,
            spare_bytes=spare,
        )


def _with_draft_memory(est: MemoryEstimate, draft: MemoryEstimate) -> MemoryEstimate:
    """Return ``est`` with the draft's memory added on each device (same devices)."""
    extra = {d.name: d for d in draft.devices}

    def add(d: DeviceEstimate) -> DeviceEstimate:
        x = extra.get(d.name)
        if x is None:
            return d
        return dataclasses.replace(
            d,
            weights_bytes=d.weights_bytes + x.weights_bytes,
            kv_bytes=d.kv_bytes + x.kv_bytes,
            recurrent_bytes=d.recurrent_bytes + x.recurrent_bytes,
            compute_bytes=d.compute_bytes + x.compute_bytes,
            output_bytes=d.output_bytes + x.output_bytes,
            other_bytes=d.other_bytes + x.other_bytes,
        )

    return dataclasses.replace(
        est,
        devices=tuple(add(d) for d in est.devices),
        notes=(*est.notes, "includes the speculative draft model's weights, KV cache and buffers"),
    )


def rpc_hardware(local: Hardware, hosts: Sequence[RpcHost]) -> tuple[Hardware, dict[str, str]]:
    """Return ``local`` with the remotes' devices in front, and each device's machine.

    Each remote offers its GPUs (its CPU when it has none, as ``rpc-server`` does by
    default); they are named ``RPC0``, ``RPC1`` … over all remotes in order, as
    ``ggml-rpc.cpp`` names them, and come before the local GPUs (``src/llama.cpp``).
    """
    remote: list[Device] = []
    machines: dict[str, str] = {}
    n = 0
    for h in hosts:
        lent_cpu = not h.hardware.gpus
        for d in h.hardware.gpus or (h.hardware.host,):
            name = f"RPC{n}"
            n += 1
            what = d.description or h.label or d.name
            remote.append(
                dataclasses.replace(
                    d,
                    name=name,
                    kind="gpu",
                    description=f"{what} @ {h.endpoint}",
                    lent_cpu=lent_cpu,
                    cpu_flags=(),  # RPC buffers are plain: no CPU repacking over the wire
                )
            )
            machines[name] = h.endpoint
    for d in local.devices:
        machines[d.name] = LOCAL_MACHINE
    return Hardware(host=local.host, gpus=(*remote, *local.gpus)), machines


def fit_layers(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    margin_bytes: int = DEFAULT_MARGIN_BYTES,
    leave_free_bytes: int = 0,
) -> Settings | None:
    """Return ``settings`` with every layer on the GPUs if that fits, else the most layers
    (or MoE experts on the CPU) that fit; None when nothing fits."""
    goal = Goal("fastest", margin_bytes=margin_bytes, leave_free_bytes=leave_free_bytes)
    return _Search(hardware, goal, None).place(spec, settings)


def _variants(
    spec: ModelSpec, hardware: Hardware, goal: Goal, users: int, *, pooled: bool = False
) -> list[Settings]:
    """Return the settings to try besides context and placement: cache types with the
    flash-attention modes llama.cpp accepts, unified KV for several users, tensor splits,
    and mmap off where llama.cpp repacks the weights for this CPU (llama.cpp #16761: with
    mmap the mapped file keeps the originals as well).

    ``pooled`` (a split over machines, whose devices differ widely: a remote CPU lends its
    RAM at CPU speed) adds splits that leave the slowest devices out: the fastest one,
    then the two fastest … by memory (zero shares for the rest), so a model that fits the
    fast devices is not spread over slow ones."""
    out: list[Settings] = []
    # no repacking where llama.cpp's AMX kernels may crash (as the runner's plan)
    repack = repack_is_safe(hardware.host)
    worth_it = repack and repacked_bytes(spec, hardware.host) >= REPACK_NOTE_BYTES
    mmaps = (True, False) if worth_it else (True,)
    splits: list[tuple[float, ...]] = [()]
    gpus = hardware.gpus
    if len(gpus) > 1 and all(g.bandwidth_gb_per_s for g in gpus) and not pooled:
        by_bw = tuple(float(g.bandwidth_gb_per_s or 0) for g in gpus)
        if len(set(by_bw)) > 1:
            splits.append(by_bw)  # faster cards carry more layers
    if pooled and len(gpus) > 1:
        rate = [decode_bandwidth(g) for g in gpus]
        splits.append(tuple(r / 1e9 for r in rate))  # faster devices carry more layers
        # fastest first; of equally fast ones the larger first
        order = sorted(range(len(gpus)), key=lambda i: (-rate[i], -(gpus[i].capacity_bytes or 0)))
        for k in range(1, len(gpus)):
            keep = set(order[:k])
            splits.append(
                tuple(
                    float(g.capacity_bytes or 1) if i in keep else 0.0 for i, g in enumerate(gpus)
                )
            )
    for kv in goal.kv_types:
        v_type = goal.cache_type_v or kv
        # a quantized V cache needs flash attention (llama-context.cpp refuses it without)
        plain = kv == "f16" and v_type == "f16"
        fa_modes: tuple[Literal["on", "off"], ...] = ("on", "off") if plain else ("on",)
        for fa in fa_modes:
            for unified in (False, True) if users > 1 else (False,):
                for split in splits:
                    for mmap in mmaps:
                        out.append(
                            Settings(
                                n_ctx=DEFAULT_CTX,
                                cache_type_k=kv,
                                cache_type_v=v_type,
                                flash_attn=fa,
                                n_parallel=users,
                                kv_unified=unified,
                                swa_full=False,
                                tensor_split=split,
                                use_mmap=mmap,
                                repack=repack,
                            )
                        )
    return out


def _with_ctx(settings: Settings, ctx: int, users: int) -> Settings:
    return settings.replace(n_ctx=ctx * users, n_parallel=users)


def _allowed(options: Sequence[QuantOption], goal: Goal) -> list[QuantOption]:
    if goal.max_kld is None:
        return list(options)
    out = []
    for o in options:
        if o.on_disk or quality_cost(o, options) <= goal.max_kld + 1e-9:
            out.append(o)
    return out


def _train_ctx(spec: ModelSpec) -> int:
    return spec.n_ctx_train if spec.n_ctx_train > 0 else 131072


def recommend(
    spec: ModelSpec,
    hardware: Hardware,
    goal: Goal,
    *,
    options: Sequence[QuantOption] | None = None,
    factors: SpeedFactors | None = None,
) -> Recommendation:
    """Return the best plan for ``goal`` with the reason and the runner-up (pure).

    ``options`` are the quants to consider (default: the model's own, no simulation).
    With ``goal.draft`` the plan is made with and without the draft and
    :attr:`Recommendation.draft` says which won and why; with ``goal.rpc_hosts`` the plan
    is over this machine and the remotes (:attr:`Recommendation.rpc`).
    """
    opts = list(options) if options is not None else list(quant_options(spec, simulate=None))
    if not opts:
        raise PlanError("no quant to plan for")
    local = hardware
    machines: dict[str, str] | None = None
    if goal.rpc_hosts:
        hardware, machines = rpc_hardware(hardware, goal.rpc_hosts)
    rec, search = _recommend_on(spec, hardware, goal, opts, factors, machines, None)
    if goal.draft is not None:
        rec = _consider_draft(spec, hardware, goal, opts, factors, machines, rec)
    if machines is None:
        return dataclasses.replace(rec, hardware=hardware)
    best = None if rec.best is None else pin_split(search, rec.best)
    unused = _unused_hosts(search, goal.rpc_hosts, best)
    if unused and len(unused) < len(goal.rpc_hosts):
        # plan again without them: no server to start, no --rpc entry, no device
        kept = tuple(h for h in goal.rpc_hosts if h not in unused)
        again = recommend(
            spec, local, dataclasses.replace(goal, rpc_hosts=kept), options=opts, factors=factors
        )
        names = ", ".join(h.endpoint for h in unused)
        note = (
            f" Not used: {names} (the plan is faster without {'it' if len(unused) == 1 else 'them'}"
            ": fewer machines, fewer network round trips per token)."
        )
        return dataclasses.replace(again, why=again.why + note)
    rpc = _rpc_plan(goal, search, best)
    rec = dataclasses.replace(rec, best=best, rpc=rpc, why=f"{rec.why} {rpc_words(rpc)}")
    return dataclasses.replace(rec, hardware=hardware)


def _unused_hosts(
    search: _Search, hosts: Sequence[RpcHost], best: Candidate | None
) -> tuple[RpcHost, ...]:
    """Return the remote machines on which ``best`` puts no layer."""
    if best is None:
        return ()
    counts = layer_split(best.quant.spec, best.settings, search.hardware)
    gpus = search.hardware.gpus
    used = {search.machines_of(g.name) for g, c in zip(gpus, counts, strict=True) if c > 0}
    return tuple(h for h in hosts if h.endpoint not in used)


def _recommend_on(
    spec: ModelSpec,
    hardware: Hardware,
    goal: Goal,
    opts: Sequence[QuantOption],
    factors: SpeedFactors | None,
    machines: dict[str, str] | None,
    draft: ModelSpec | None,
) -> tuple[Recommendation, _Search]:
    allowed = _allowed(opts, goal)
    search = _Search(hardware, goal, factors, machines=machines, draft=draft)
    users = goal.n_users if goal.name == "users" else 1
    train = _train_ctx(spec)
    want_ctx = max(goal.ctx or DEFAULT_CTX, goal.min_ctx)
    want_ctx = min(want_ctx, train) if goal.name != "users" else want_ctx
    cands: list[Candidate] = []
    for option in allowed:
        for base in _variants(option.spec, hardware, goal, users, pooled=machines is not None):
            if goal.name == "longest-context":
                c = _longest(search, option, base, goal, train)
            else:
                s = search.place(option.spec, _with_ctx(base, want_ctx, users))
                depth = want_ctx if goal.name == "users" else speed_depth(want_ctx)
                c = None if s is None else search.candidate(option, s, want_ctx, users, depth)
            if c is not None:
                cands.append(c)
    return _choose(goal, cands, opts, hardware, search.count), search


def _consider_draft(
    spec: ModelSpec,
    hardware: Hardware,
    goal: Goal,
    opts: Sequence[QuantOption],
    factors: SpeedFactors | None,
    machines: dict[str, str] | None,
    plain: Recommendation,
) -> Recommendation:
    """Return ``plain`` or the plan with the draft, whichever pays off, with the reason."""
    draft = goal.draft
    assert draft is not None
    alpha = goal.draft_acceptance
    name = draft.name or draft.path

    def refuse(reason: str, **numbers: Any) -> Recommendation:
        plan = DraftPlan(draft, False, f"{reason} {DRAFT_CAVEAT}", alpha, **numbers)
        return dataclasses.replace(
            plain,
            draft=plan,
            why=f"{plain.why} Draft model {name}: not used — {reason}"
            + (f" {DRAFT_CAVEAT}" if numbers else ""),
        )

    diff = abs(spec.n_vocab - draft.n_vocab)
    if diff > SPEC_VOCAB_MAX_SIZE_DIFFERENCE:
        return refuse(
            f"its vocabulary ({draft.n_vocab:,} tokens) differs from the target's "
            f"({spec.n_vocab:,}) by more than {SPEC_VOCAB_MAX_SIZE_DIFFERENCE}; llama.cpp "
            "refuses such a pair (common/speculative.cpp)."
        )
    if plain.best is None:
        return refuse("the target alone does not fit, so there is no room for a draft.")
    drafted, search = _recommend_on(spec, hardware, goal, opts, factors, machines, draft)
    best = drafted.best
    if best is None:
        return refuse(
            f"too big: with its {format_bytes(draft.weights_bytes)} of weights and its own KV "
            "cache nothing fits any more."
        )
    dset = search.draft_settings(best.settings)
    dest = estimate(draft, dset, hardware)
    depth = best.speed.depth
    dspeed = search.speed(draft, dset, depth, 1).decode_tok_per_s
    tspeed = best.speed.decode_tok_per_s
    ratio = dspeed / tspeed
    k, up = best_draft_length(alpha, 1.0 / dspeed, 1.0 / tspeed, k_max=goal.draft_max)
    numbers: dict[str, Any] = {
        "settings": dset,
        "estimate": dest,
        "draft_tok_per_s": dspeed,
        "target_tok_per_s": tspeed,
        "speed_ratio": ratio,
        "draft_max": k,
        "tokens_per_step": expected_tokens_per_step(alpha, k),
        "speedup": up,
    }
    with_draft = tspeed * up
    plain_tps = plain.best.speed.decode_tok_per_s
    reason = ""
    if ratio < MIN_DRAFT_SPEED_RATIO:
        reason = (
            f"too slow: it decodes at ~{format_tps(dspeed)} tok/s, only {ratio:.1f}× the "
            f"target's ~{format_tps(tspeed)}; a draft must be ≥ {MIN_DRAFT_SPEED_RATIO:g}× "
            f"faster to pay off (predicted ×{up:.2f} at acceptance {alpha:g})."
        )
    elif up <= MIN_DRAFT_SPEEDUP:
        reason = (
            f"the predicted speed-up is only ×{up:.2f} (≤ ×{MIN_DRAFT_SPEEDUP:g}) at "
            f"acceptance {alpha:g} with {k} drafted tokens per step."
        )
    elif with_draft <= plain_tps:
        reason = (
            f"too big: its memory pushes the target off the GPUs, and ×{up:.2f} of the "
            f"slower plan (~{format_tps(with_draft)} tok/s) does not beat "
            f"~{format_tps(plain_tps)} tok/s without it."
        )
    elif goal.name == "longest-context" and best.n_ctx_per_user < plain.best.n_ctx_per_user:
        reason = (
            f"its KV cache would cost context: {fmt_ctx(best.n_ctx_per_user)} instead of "
            f"{fmt_ctx(plain.best.n_ctx_per_user)} (it would give ×{up:.2f} speed)."
        )
    if reason:
        return refuse(reason, **numbers)
    used_on = ", ".join(
        f"{format_bytes(d.total_bytes)} on {d.name}" for d in dest.devices if d.total_bytes > 0
    )
    why = (
        f"Draft model {name}: used, predicted ×{up:.2f} (~{format_tps(with_draft)} tok/s instead "
        f"of ~{format_tps(tspeed)}). It decodes {ratio:.1f}× faster than the target; at "
        f"acceptance {alpha:g} with {k} drafted tokens a target step yields "
        f"{expected_tokens_per_step(alpha, k):.2f} tokens on average for the cost of "
        f"{k} draft steps and one target step (Leviathan et al. 2023). Its weights and KV "
        f"cache ({used_on}) are counted in the memory above."
    )
    plan = DraftPlan(draft, True, f"{why} {DRAFT_CAVEAT}", alpha, **numbers)
    return dataclasses.replace(drafted, draft=plan, why=f"{drafted.why} {why} {DRAFT_CAVEAT}")


def layer_split(spec: ModelSpec, settings: Settings, hardware: Hardware) -> tuple[float, ...]:
    """Return ``-ts`` shares that place the layers exactly where ``settings`` place them:
    each GPU's count of layers (the output layer included, as llama.cpp counts it).

    llama.cpp gives layer ``il`` to the first device whose cumulative share exceeds
    ``(il − i_gpu_start) / n_offloaded`` (``src/llama-model.cpp`` ``load_tensors``,
    ``std::upper_bound`` over the normalised shares), so shares equal to the layer counts
    reproduce a placement exactly (both divisions are of whole numbers by the same total).
    """
    p = place_layers(spec, settings, hardware)
    counts = [0] * len(hardware.gpus)
    for i in (*p.layer_device, p.output_device):
        if i >= 0:
            counts[i] += 1
    return tuple(float(c) for c in counts)


def pin_split(search: _Search, cand: Candidate) -> Candidate:
    """Return ``cand`` with its layer split written out as ``-ts`` (:func:`layer_split`).

    Over RPC, llama.cpp's default split follows the free memory each server reports when
    the model loads, which the plan cannot know; the pinned shares keep the plan's
    placement. The estimate is recomputed with them (it is the same placement).
    """
    spec = cand.quant.spec
    if len(search.hardware.gpus) < 2 or cand.gpu_layers == 0:
        return cand
    pinned = cand.settings.replace(tensor_split=layer_split(spec, cand.settings, search.hardware))
    est = search.estimate(spec, pinned)
    if est is None:
        return cand
    return dataclasses.replace(cand, settings=pinned, estimate=est)


def _rpc_plan(goal: Goal, search: _Search, best: Candidate | None) -> RpcPlan:
    """Return the memory per machine of ``best``, its traffic, and the commands."""
    order = [*(h.endpoint for h in goal.rpc_hosts), LOCAL_MACHINE]
    labels = {h.endpoint: h.label for h in goal.rpc_hosts}
    machines: list[MachineMemory] = []
    traffic = None
    net = 0.0
    depth = 0
    if best is not None:
        spec = best.quant.spec
        loads = _load_bytes(spec, best.settings, search)
        for m in order:
            devs = [d for d in best.estimate.devices if search.machines_of(d.name) == m]
            caps = [d.capacity_bytes for d in devs]
            load, reload = loads.get(m, (0, 0)) if m != LOCAL_MACHINE else (0, 0)
            machines.append(
                MachineMemory(
                    machine=m,
                    devices=tuple(d.name for d in devs),
                    total_bytes=sum(d.total_bytes for d in devs),
                    weights_bytes=sum(d.weights_bytes for d in devs),
                    capacity_bytes=None if None in caps else sum(c or 0 for c in caps),
                    n_layers=sum(d.n_layers for d in devs),
                    kv_bytes=sum(d.kv_bytes + d.recurrent_bytes for d in devs),
                    compute_bytes=sum(d.compute_bytes for d in devs),
                    load_bytes=load,
                    reload_bytes=reload,
                    label=labels.get(m, ""),
                )
            )
        depth = best.speed.depth
        traffic = search.traffic(spec, best.settings, 1, depth, memory=best.estimate)
        net = traffic.seconds(goal.link)
    remote = tuple(rpc_server_argv(h.endpoint) for h in goal.rpc_hosts)
    return RpcPlan(
        hosts=goal.rpc_hosts,
        link=goal.link,
        machines=tuple(machines),
        network_s_per_token=net,
        remote_commands=remote,
        rpc_arg=",".join(h.endpoint for h in goal.rpc_hosts),
        traffic=traffic,
        depth=depth,
    )


def _load_bytes(spec: ModelSpec, settings: Settings, search: _Search) -> dict[str, tuple[int, int]]:
    """Return, per remote machine, the weight bytes a load sends and those a load with the
    server's cache (``-c``) still sends (tensors of at most 10 MiB)."""
    placement = place_layers(spec, settings, search.hardware)
    names = [g.name for g in search.hardware.gpus]
    out: dict[str, tuple[int, int]] = {}
    for t in spec.tensors:
        i = tensor_device(t, placement, settings.n_cpu_moe)
        if i < 0:
            continue
        m = search.machines_of(names[i])
        if m == LOCAL_MACHINE:
            continue
        load, reload = out.get(m, (0, 0))
        out[m] = (load + t.n_bytes, reload + (t.n_bytes if t.n_bytes <= CACHED_TENSOR_BYTES else 0))
    return out


def server_argv(
    model_path: str,
    rec: Recommendation,
    *,
    draft_path: str | None = None,
    program: str = "llama-server",
) -> tuple[str, ...]:
    """Return the llama-server command for ``rec``: its settings, the draft when it is
    used (``-md FILE --spec-type draft-simple -ngld N --spec-draft-n-max K``; FILE is
    ``draft_path`` or the draft's own path) and ``--rpc host:port,…`` for a split."""
    if rec.best is None:
        raise PlanError("nothing fits: no command to give")
    d = rec.draft if rec.draft is not None and rec.draft.used else None
    argv = list(
        llama_server_argv(
            model_path,
            rec.best.settings,
            program=program,
            draft_path=None if d is None else (draft_path or d.spec.path),
            draft_gpu_layers=None if d is None or d.settings is None else d.settings.n_gpu_layers,
        )
    )
    if d is not None and d.draft_max is not None:
        argv += ["--spec-draft-n-max", str(d.draft_max)]
    if rec.rpc is not None:
        argv += ["--rpc", rec.rpc.rpc_arg]
    return tuple(argv)


def _last_true(fits: Callable[[int, bool], bool], lo: int, hi: int, quick: bool = False) -> int:
    """Return the largest n in [lo, hi] with ``fits(n, False)`` (lo when none: lo is not
    tested), for a predicate true up to some n and false above (``quick``: the guess).

    A binary search with ``fits(n, True)`` (the stage model's compute buffers: no graph
    reserved) gives a guess; the answer is then found from it with the exact predicate,
    one step, then doubling steps, then bisecting: one to three reserved graphs where a
    plain bisection reserves log2(hi - lo), the same answer.
    """
    a, b = lo, hi
    while a < b:
        mid = (a + b + 1) // 2
        if fits(mid, True):
            a = mid
        else:
            b = mid - 1
    guess = a
    if quick:
        return guess
    if guess > lo and not fits(guess, False):
        good, bad, step = lo, guess, 1  # fits(bad) is false; walk down
        while bad - step > lo:
            if fits(bad - step, False):
                good = bad - step
                break
            bad, step = bad - step, step * 2
    else:
        good, step = guess, 1  # fits(good) holds (or good is lo); walk up
        bad = hi + 1
        while good + step <= hi:
            if not fits(good + step, False):
                bad = good + step
                break
            good, step = good + step, step * 2
    while bad - good > 1:
        mid = (good + bad) // 2
        if fits(mid, False):
            good = mid
        else:
            bad = mid
    return good


def _longest(
    search: _Search, option: QuantOption, base: Settings, goal: Goal, train: int
) -> Candidate | None:
    """Binary search the longest context (in 256-token steps) for one variant.

    With GPUs, every layer must stay on them; when even ``min_ctx`` does not allow that,
    layers may spill and the context is searched with the best placement instead.
    """
    spec = option.spec
    lo_ctx = max(goal.min_ctx, CTX_STEP)
    steps_hi = max(1, train // CTX_STEP)
    steps_lo = max(1, -(-lo_ctx // CTX_STEP))
    if steps_lo > steps_hi:
        return None

    def full_fits(ctx: int, quick: bool = False) -> bool:
        s = _with_ctx(base, ctx, 1).replace(n_gpu_layers=ALL_LAYERS)
        e = search.estimate(spec, s, quick)
        return e is not None and search.fits(e)

    def placed(ctx: int, quick: bool = False) -> Settings | None:
        return search.place(spec, _with_ctx(base, ctx, 1), quick)

    def full_test(step: int, quick: bool) -> bool:
        return full_fits(step * CTX_STEP, quick)

    test = full_test
    if not full_fits(steps_lo * CTX_STEP):
        if not search.hardware.gpus or placed(steps_lo * CTX_STEP) is None:
            return None

        def spill_test(step: int, quick: bool) -> bool:
            return placed(step * CTX_STEP, quick) is not None

        test = spill_test
    lo = _last_true(test, steps_lo, steps_hi)
    ctx = lo * CTX_STEP
    settings = placed(ctx)
    if settings is None:
        return None
    return search.candidate(option, settings, ctx, 1, speed_depth(ctx))


# --- ranking -----------------------------------------------------------------------------


def _rank_key(
    goal: Goal, c: Candidate, opts: Sequence[QuantOption], has_gpu: bool
) -> tuple[float, ...]:
    q = quality_cost(c.quant, opts)
    kv = KV_QUALITY_RANK.get(c.settings.cache_type_k, 3)
    tps = c.speed.per_user_tok_per_s
    full = 1.0 if (c.all_on_gpu or not has_gpu) else 0.0
    spare = min((s for _, s in c.spare_bytes if s is not None), default=0)
    if goal.name == "longest-context":
        # same context: more layers on the GPU (a smaller cache type buys them) first
        return (full, c.n_ctx_per_user, -q, c.gpu_layers, -kv, tps, spare)
    if goal.name == "fastest":
        return (full, round(tps, 1), -q, -kv, spare)
    meets = goal.min_tok_per_s is None or tps >= goal.min_tok_per_s
    if not meets:  # nothing meets the speed: the closest plan first
        return (0.0, tps, full, -q, -kv, spare)
    return (1.0, full, -q, -kv, tps, spare)  # users, best-quality


def _choose(
    goal: Goal,
    cands: list[Candidate],
    opts: Sequence[QuantOption],
    hardware: Hardware,
    count: int,
) -> Recommendation:
    has_gpu = bool(hardware.gpus)
    if not cands:
        why = _nothing_fits(goal, opts, hardware)
        return Recommendation(goal, None, None, why, False, count)
    ranked = sorted(cands, key=lambda c: _rank_key(goal, c, opts, has_gpu), reverse=True)
    best = ranked[0]
    runner = next((c for c in ranked[1:] if c.quant.name != best.quant.name), None)
    if runner is None:
        runner = next((c for c in ranked[1:] if c.kv_type != best.kv_type), None)
    feasible = True
    if goal.min_tok_per_s is not None and best.speed.per_user_tok_per_s < goal.min_tok_per_s:
        feasible = False
    why = explain(goal, best, runner, hardware, feasible=feasible, options=opts)
    return Recommendation(goal, best, runner, why, feasible, count, tuple(ranked[:8]))


def _nothing_fits(goal: Goal, opts: Sequence[QuantOption], hardware: Hardware) -> str:
    smallest = min(opts, key=lambda o: o.spec.weights_bytes)
    cap = sum(d.capacity_bytes or 0 for d in hardware.devices)
    return (
        f"Nothing fits: even {smallest.name} ({format_bytes(smallest.spec.weights_bytes)} of "
        f"weights) with {max(goal.ctx or 0, goal.min_ctx, CTX_STEP):,} tokens of context does "
        f"not fit in {format_bytes(cap)} with "
        f"{format_bytes(goal.margin_bytes + goal.leave_free_bytes)} kept free per device."
    )


# --- words ---------------------------------------------------------------------------------


# --- capacity --------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Capacity:
    """How many users fit: ``n_users`` each with ``ctx_per_user`` tokens at
    ``min_tok_per_s`` or more each, with the plan that serves them (``None``: not even one);
    ``limit`` says what stops one more user ("memory" or "speed")."""

    n_users: int
    ctx_per_user: int
    min_tok_per_s: float
    plan: Candidate | None
    limit: str
    why: str


def max_users(
    spec: ModelSpec,
    hardware: Hardware,
    *,
    ctx_per_user: int,
    min_tok_per_s: float,
    goal: Goal | None = None,
    options: Sequence[QuantOption] | None = None,
    factors: SpeedFactors | None = None,
    max_n: int = MAX_SEQUENCES,
) -> Capacity:
    """Return the most users that fit with ``ctx_per_user`` tokens each at the speed.

    Each variant (quant, cache type, flash attention, unified KV) is feasible for fewer
    users if it is for more (memory and per-user time both grow with n), so the count is
    a doubling then binary search per variant; the best variant wins. The count stops at
    ``max_n``, and never passes llama.cpp's limit of parallel sequences (MAX_SEQUENCES).
    """
    max_n = min(max_n, MAX_SEQUENCES)
    base_goal = goal or Goal("users")
    opts = list(options) if options is not None else list(quant_options(spec, simulate=None))
    allowed = _allowed(opts, base_goal)
    machines: dict[str, str] | None = None
    if base_goal.rpc_hosts:  # a draft model is not planned for several users
        hardware, machines = rpc_hardware(hardware, base_goal.rpc_hosts)
    search = _Search(hardware, base_goal, factors, machines=machines)
    best: tuple[int, Candidate | None, str] = (0, None, "memory")

    def feasible(option: QuantOption, base: Settings, n: int) -> tuple[Candidate | None, str]:
        s = search.place(option.spec, _with_ctx(base.replace(n_parallel=n), ctx_per_user, n))
        if s is None:
            return None, "memory"
        c = search.candidate(option, s, ctx_per_user, n, ctx_per_user)
        if c is None:
            return None, "memory"
        if c.speed.per_user_tok_per_s < min_tok_per_s:
            return None, "speed"
        return c, ""

    for option in allowed:
        for base in _variants(option.spec, hardware, base_goal, 2, pooled=machines is not None):
            c1, why1 = feasible(option, base, 1)
            if c1 is None:
                if best[0] == 0 and best[1] is None:
                    best = (0, None, why1)
                continue
            lo, lo_c, hi = 1, c1, 2
            limit = "memory"
            while hi <= max_n:
                c, why = feasible(option, base, hi)
                if c is None:
                    limit = why
                    break
                lo, lo_c, hi = hi, c, hi * 2
            else:
                hi = max_n + 1
            top = hi - 1
            while lo < top:
                mid = (lo + top + 1) // 2
                c, why = feasible(option, base, mid)
                if c is None:
                    top, limit = mid - 1, why
                else:
                    lo, lo_c = mid, c
            if lo > best[0] or (
                lo == best[0]
                and best[1] is not None
                and lo_c.speed.per_user_tok_per_s > best[1].speed.per_user_tok_per_s
            ):
                best = (lo, lo_c, limit)
    n, plan, limit = best
    if plan is None:
        why = (
            f"Not even one user fits with {fmt_ctx(ctx_per_user)} at "
            f"{format_tps(min_tok_per_s)} tok/s: limited by {limit}."
        )
    else:
        stop = "memory for their KV cache" if limit == "memory" else "the per-user speed"
        why = (
            f"{n} user{'s' if n != 1 else ''} fit{'s' if n == 1 else ''} with "
            f"{fmt_ctx(ctx_per_user)} each at ≥ "
            f"{format_tps(min_tok_per_s)} tok/s: {plan.quant.name}, {kv_words(plan)}"
            f"{', one shared (unified) cache' if plan.settings.kv_unified else ''}, "
            f"{placement_words(plan, hardware)}, {speed_words(plan)}. "
            f"One more user is stopped by {stop}."
        )
    return Capacity(n, ctx_per_user, min_tok_per_s, plan, limit, why)
