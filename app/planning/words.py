"""Why a plan was chosen, in plain words: what :func:`app.planning.planner.recommend` says.

:func:`explain` words a :class:`~app.planning.goals.Candidate` for its
:class:`~app.planning.goals.Goal` (where the layers are, the cache, the speed, what mmap
costs, the runner-up it beat); :func:`fmt_ctx` says a context as people say it
("32k tokens"). Sizes and speeds read as :mod:`app.units` writes them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Final

from app.hardware.devices import Hardware
from app.planning.goals import Candidate, Goal, RpcPlan
from app.planning.options import QuantOption, quality_cost
from app.predict.estimate import (
    REPACK_NOTE_BYTES,
)
from app.units import format_bytes, format_tps

RPC_SECURITY_NOTE: Final = (
    "ggml-rpc-server has no authentication or encryption (it warns: never expose it to an "
    "open network): run it only on a trusted LAN; -H binds it to the address the main "
    "machine uses (-H 0.0.0.0, for a host name, listens on every interface), and a firewall "
    "should let only the main machine reach the port."
)


def rpc_words(rpc: RpcPlan) -> str:
    """Say how a split over machines uses each one, what the network costs and the load."""
    if not rpc.machines:
        return (
            f"Split over {len(rpc.hosts) + 1} machines with llama.cpp's RPC backend: nothing fits."
        )
    parts = []
    for m in rpc.machines:
        cap = f" of {format_bytes(m.capacity_bytes)}" if m.capacity_bytes else ""
        parts.append(
            f"{m.machine} {format_bytes(m.total_bytes)}{cap} ({', '.join(m.devices)}, "
            f"{m.n_layers} layers)"
        )
    t = rpc.traffic
    moved = (
        ""
        if t is None
        else (
            f"{format_bytes(t.total_bytes, down_to='bytes')} in {t.messages} messages with "
            f"{t.round_trips} round trip{'s' if t.round_trips != 1 else ''} per token"
        )
    )
    load = sum(m.load_bytes for m in rpc.machines)
    load_words = (
        f" Loading sends {format_bytes(load)} of weights to the other machines "
        f"(~{load * 8 / (rpc.link.gbit_per_s * 1e9):.0f} s); with -c a later load sends "
        f"{format_bytes(sum(m.reload_bytes for m in rpc.machines))}."
        if load
        else ""
    )
    return (
        f"Split over {len(rpc.machines)} machines with llama.cpp's RPC backend: "
        f"{'; '.join(parts)}. The network costs ~{rpc.network_s_per_token * 1000:.2f} ms per "
        f"token at {rpc.depth:,} tokens of context ({moved} at {rpc.link.gbit_per_s:g} Gbit/s "
        f"and {rpc.link.latency_s * 1000:g} ms one way), included in the speed.{load_words}"
    )


def fmt_ctx(n: int) -> str:
    """Return a context size the way people say it: "32k tokens", "83,712 tokens"."""
    if n >= 1024 and n % 1024 == 0:
        return f"{n // 1024}k tokens"
    return f"{n:,} tokens"


def _gpu_words(hardware: Hardware) -> str:
    gpus = hardware.gpus
    if not gpus:
        return "system RAM"
    names = {g.description or g.name for g in gpus}
    if len(gpus) == 1:
        g = gpus[0]
        size = (
            f" ({format_bytes(g.capacity_bytes)})" if g.capacity_bytes and not g.description else ""
        )
        return f"your {g.description or g.name}{size}"
    if len(names) == 1:
        return f"your {len(gpus)}× {next(iter(names))}"
    return f"your {len(gpus)} GPUs"


def placement_words(c: Candidate, hardware: Hardware) -> str:
    ctx = fmt_ctx(c.n_ctx_per_user)
    users = f" for each of {c.n_users} users" if c.n_users > 1 else ""
    if not hardware.gpus:
        host = c.estimate.devices[-1]
        cap = f" of {format_bytes(host.capacity_bytes)}" if host.capacity_bytes else ""
        used = format_bytes(host.total_bytes)
        return f"runs from system RAM with {ctx} of context{users}, using {used}{cap}"
    gpu_spare = [
        s for (_, s), d in zip(c.spare_bytes, c.estimate.devices, strict=True) if d.kind == "gpu"
    ]
    spare = min((s for s in gpu_spare if s is not None), default=None)
    spare_words = f" with {format_bytes(spare)} spare" if spare is not None else ""
    if c.settings.n_cpu_moe and c.all_on_gpu:
        return (
            f"keeps all {c.n_layers} layers on {_gpu_words(hardware)} with the experts of "
            f"{c.settings.n_cpu_moe} layers in system RAM, {ctx} of context{users}{spare_words}"
        )
    if c.all_on_gpu:
        where = _gpu_words(hardware)
        return f"keeps all {c.n_layers} layers and {ctx} of context{users} on {where}{spare_words}"
    off = c.n_layers - c.gpu_layers
    return (
        f"puts {c.gpu_layers} of {c.n_layers} layers on {_gpu_words(hardware)} and {off} in "
        f"system RAM, with {ctx} of context{users}"
    )


def kv_words(c: Candidate) -> str:
    fa = "on" if c.settings.flash_attn != "off" else "off"
    return f"{c.kv_type} KV cache, flash attention {fa}"


def _a(word: str) -> str:
    return f"an {word}" if word[:1].lower() in "aefhilmnorsx" and word[:1] != "q" else f"a {word}"


def speed_words(c: Candidate) -> str:
    s = c.speed
    if c.n_users > 1:
        return (
            f"~{format_tps(s.per_user_tok_per_s)} tok/s per user "
            f"({format_tps(s.aggregate_tok_per_s)} in all) at {fmt_ctx(s.depth)} each"
        )
    return f"~{format_tps(s.decode_tok_per_s)} tok/s"


def _versus(goal: Goal, best: Candidate, ru: Candidate, opts: Sequence[QuantOption]) -> str:
    """Say what the runner-up would do instead, in the goal's terms."""
    label = ru.quant.name if ru.quant.name != best.quant.name else f"{_a(ru.kv_type)} KV cache"
    if best.all_on_gpu and not ru.all_on_gpu and ru.n_layers:
        off = ru.n_layers - ru.gpu_layers
        return f"{label} would push {off} layers to system RAM and drop to {speed_words(ru)}"
    if goal.name == "longest-context" and ru.n_ctx_per_user != best.n_ctx_per_user:
        return f"{label} would reach only {fmt_ctx(ru.n_ctx_per_user)} ({speed_words(ru)})"
    if goal.name in ("fastest",) and ru.speed.decode_tok_per_s < best.speed.decode_tok_per_s:
        return f"{label} would run at {speed_words(ru)}"
    qb, qr = quality_cost(best.quant, opts), quality_cost(ru.quant, opts)
    if ru.quant.name != best.quant.name and qr > qb:
        return (
            f"{label} fits too ({speed_words(ru)}) but loses more quality "
            f"(KLD {qr:.4f} vs {qb:.4f})"
        )
    if ru.quant.name != best.quant.name and qr < qb:
        return f"{label} is closer to the original (KLD {qr:.4f}) but " + (
            "does not meet the speed" if goal.min_tok_per_s else f"runs at {speed_words(ru)}"
        )
    return f"{label} would give {fmt_ctx(ru.n_ctx_per_user)} at {speed_words(ru)}"


def mmap_saving(c: Candidate) -> int:
    """Return the RAM that turning mmap off would save ``c``: weights llama.cpp repacks for
    the CPU while the mapped file keeps the originals (0 when none, or mmap is off)."""
    if not c.settings.use_mmap:
        return 0
    return c.estimate.mapped_twice_bytes


def _mmap_words(c: Candidate) -> str:
    repacked = sum(d.other_bytes for d in c.estimate.devices if d.kind == "host")
    if c.settings.use_mmap and repacked < REPACK_NOTE_BYTES:
        return ""
    if c.settings.use_mmap:
        return (
            f" Tip: turn mmap off (llama-server --load-mode none, Ollama use_mmap false) to "
            f"save {format_bytes(mmap_saving(c))} of RAM: llama.cpp repacks "
            f"{c.quant.name}'s weights for this CPU and the mapped file would keep the "
            "originals too."
        )
    return (
        f" mmap is off (llama-server --load-mode none, Ollama use_mmap false): llama.cpp "
        f"repacks {format_bytes(repacked)} of {c.quant.name}'s weights for this CPU, and a mapped "
        "file would keep a second copy of them in RAM."
    )


def explain(
    goal: Goal,
    best: Candidate,
    runner_up: Candidate | None,
    hardware: Hardware,
    *,
    feasible: bool = True,
    options: Sequence[QuantOption] = (),
) -> str:
    """Return why ``best`` was picked, in plain words with its numbers and the runner-up.

    Pure: the same candidates give the same sentence (the CLI and the desktop share it).
    """
    lead = {
        "longest-context": "Longest context",
        "fastest": "Fastest",
        "best-quality": "Best quality that fits",
        "users": f"{goal.n_users} users",
    }[goal.name]
    origin = "" if best.quant.on_disk else " (simulated: download or quantize that file)"
    text = (
        f"{lead}: {best.quant.name}{origin} {placement_words(best, hardware)}, "
        f"{speed_words(best)}, with {_a(kv_words(best))}."
    )
    if best.quant.kld is not None:
        text += (
            f" Quality: KLD {best.quant.kld:.4f} vs FP16 (+{best.quant.delta_ppl or 0:.3f} PPL, "
            f"measured on {best.quant.quality_model})."
        )
    text += _mmap_words(best)
    if goal.name == "users" and goal.min_tok_per_s is not None:
        ok = "meets" if feasible else "does NOT meet"
        text += f" It {ok} the {format_tps(goal.min_tok_per_s)} tok/s per user you asked for."
    elif goal.min_tok_per_s is not None and not feasible:
        text += f" Nothing reaches {format_tps(goal.min_tok_per_s)} tok/s; this is the closest."
    if runner_up is not None:
        text += f" Runner-up: {_versus(goal, best, runner_up, options)}."
    return text
