"""The Recommend tab's values and words: the goal form (``ggtune recommend``'s flags), a
finished search, the planner run on the pool, a pooled plan's commands, a plan in one line,
and what Apply did."""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Final

from app.hardware.devices import Hardware
from app.model.facts import gpu_layers_text
from app.model.spec import ModelSpec
from app.planning.goals import Candidate, Goal, GoalName, Recommendation
from app.planning.options import DEFAULT_MAX_KLD, QuantOption
from app.planning.planner import recommend, server_argv
from app.planning.words import RPC_SECURITY_NOTE, fmt_ctx
from app.predict.speed import SpeedFactors
from app.units import GIB, format_bytes, format_tps

GOAL_TITLES: Final[dict[GoalName, str]] = {
    "longest-context": "Longest context",
    "fastest": "Fastest",
    "best-quality": "Best quality",
    "users": "Several users at a speed",
}


@dataclass(frozen=True, slots=True)
class GoalForm:
    """What the goal form holds (tokens, tok/s, GiB); :meth:`goal` turns it into a Goal.

    Mirrors ``ggtune recommend``'s flags: ``ctx`` is ``--ctx`` (context per user; 0 for
    the goal's default), ``any_quant`` ``--any-quant``, ``only_open_file``
    ``--no-simulate``.
    """

    name: GoalName = "longest-context"
    n_users: int = 1
    min_tok_per_s: float = 0.0
    ctx: int = 0
    min_ctx: int = 0
    leave_free_gib: float = 0.0
    any_quant: bool = False
    only_open_file: bool = False
    use_machines: bool = True
    """Also plan over the other machines that are on (the Hardware tab), as
    ``--rpc-saved``."""

    def goal(self, margin_bytes: int) -> Goal:
        """Return the planner's goal (raises PlanError on nonsense, e.g. 0 users)."""
        return Goal(
            self.name,
            ctx=self.ctx or None,
            min_ctx=self.min_ctx,
            n_users=self.n_users,
            min_tok_per_s=self.min_tok_per_s or None,
            leave_free_bytes=int(self.leave_free_gib * GIB),
            margin_bytes=margin_bytes,
            max_kld=None if self.any_quant else DEFAULT_MAX_KLD,
        )


@dataclass(frozen=True, slots=True)
class RecommendOutcome:
    """A finished search: the recommendation for the model at ``model_path``."""

    model_path: str
    open_quant: str
    recommendation: Recommendation
    users_line: str | None = None
    """For the "users" goal: the plan's users against the Memory view's SLO, predicted,
    and the newest Users run of the file (:func:`app.planning.users.plan_users_line`)."""


def plan(
    spec: ModelSpec,
    hardware: Hardware,
    goal: Goal,
    options: tuple[QuantOption, ...],
    factors: SpeedFactors,
) -> Recommendation:
    """Run the planner (pure; seconds for a large model, so call it on the pool)."""
    return recommend(spec, hardware, goal, options=options, factors=factors)


def pooled_commands(outcome: RecommendOutcome) -> str:
    """Return, for a plan over several machines, each machine's share and the commands that
    start it: ``ggml-rpc-server`` on each remote, ``llama-server --rpc …`` here."""
    rec = outcome.recommendation
    rpc = rec.rpc
    if rpc is None or rec.best is None:
        return ""
    lines = ["Each machine's share:"]
    for m in rpc.machines:
        cap = f" of {format_bytes(m.capacity_bytes)}" if m.capacity_bytes else ""
        what = f" ({m.label})" if m.label else ""
        load = f"; loading sends it {format_bytes(m.load_bytes)}" if m.load_bytes else ""
        lines.append(
            f"  {m.machine}{what}: {m.n_layers} layers, {format_bytes(m.total_bytes)}{cap}{load}"
        )
    lines.append("On each other machine:")
    for host, argv in zip(rpc.hosts, rpc.remote_commands, strict=True):
        lines.append(f"  {host.endpoint}:  {shlex.join(argv)}")
    lines.append("On this machine:")
    lines.append(f"  {shlex.join(server_argv(outcome.model_path, rec))}")
    lines.append(RPC_SECURITY_NOTE)
    return "\n".join(lines)


def settings_summary(c: Candidate) -> str:
    """Return the plan's settings in one line, as the Settings panel names them."""
    s = c.settings
    has_gpu = any(d.kind == "gpu" for d in c.estimate.devices)
    if not has_gpu:
        layers = f"no GPU: all {c.n_layers} layers on the CPU"
    else:
        # the repeating layers on GPUs, and the output layer, which goes there first: the
        # words of the slider, the card and Verify ("all 36 layers + output")
        ngl = c.gpu_layers + 1 if c.gpu_layers else 0
        layers = "GPU layers: " + gpu_layers_text(ngl, c.n_layers)
    parts = [
        f"{c.quant.name} ({c.quant.origin})",
        f"context {fmt_ctx(s.n_ctx)}"
        + (f" ({fmt_ctx(c.n_ctx_per_user)} × {s.n_parallel} users)" if s.n_parallel > 1 else ""),
        layers,
        f"KV cache {s.cache_type_k}/{s.cache_type_v}",
        f"flash attention {s.flash_attn}",
    ]
    if s.kv_unified:
        parts.append("one shared cache")
    if s.n_cpu_moe:
        parts.append(f"experts of {s.n_cpu_moe} layers on the CPU")
    if not s.use_mmap:
        parts.append("mmap off")
    if not s.repack:
        parts.append("no repacking")
    speed = c.speed
    parts.append(f"~{format_tps(speed.per_user_tok_per_s)} tok/s per user")
    used = sum(d.total_bytes for d in c.estimate.devices)
    parts.append(f"{format_bytes(used)} in all")
    return ", ".join(parts)


def apply_note(c: Candidate, open_quant: str) -> str:
    """Return what Apply did, and what is left to do when the plan is for another quant."""
    if c.quant.on_disk or c.quant.name == open_quant:
        return "Applied: the sliders now hold this plan for the file you have open."
    imatrix = " (with --imatrix)" if c.quant.needs_imatrix else ""
    return (
        f"Applied, with {c.quant.name} simulated (your file is {open_quant}): to run it, "
        f"download a {c.quant.name} GGUF or make one with llama-quantize{imatrix}."
    )
