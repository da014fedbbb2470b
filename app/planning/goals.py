"""What a plan is asked and what it answers: the goal, the candidates, the recommendation.

:class:`Goal` (longest context, fastest, best quality, or N users at X tok/s; the margin
kept free; a draft model; remote machines over llama.cpp's RPC backend), and the values
:func:`app.planning.planner.recommend` returns: each :class:`Candidate` (settings, memory,
speed), the :class:`Recommendation` with its runner-up, the :class:`DraftPlan` and the
:class:`RpcPlan`. Plain frozen data; the search is in :mod:`app.planning.planner`, the
words in :mod:`app.planning.words`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Literal, get_args

from app.errors import PlanError
from app.export.rpc_server import parse_endpoint
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.options import DEFAULT_MAX_KLD, QuantOption
from app.predict.estimate import (
    MemoryEstimate,
)
from app.predict.rpc_traffic import LOCAL, StepTraffic
from app.predict.speed import (
    DEFAULT_DRAFT_ACCEPTANCE,
    Link,
    SpeedPrediction,
)
from app.settings import CacheType, Settings
from app.units import DEFAULT_MARGIN_BYTES

GoalName = Literal["longest-context", "fastest", "best-quality", "users"]


GOALS: Final[tuple[GoalName, ...]] = get_args(GoalName)


DEFAULT_CTX: Final = 4096
"""Context for goals that do not set one (llama-server's ``--fit`` minimum, ``-fitc``)."""


CTX_STEP: Final = 256
"""Contexts are searched in llama.cpp's cell padding (``llama-context.cpp``)."""


KV_TYPES: Final[tuple[CacheType, ...]] = ("f16", "q8_0", "q4_0")


KV_QUALITY_RANK: Final[dict[str, int]] = {"f16": 0, "q8_0": 1, "q4_0": 2}
"""q8_0 K+V costs ~+0.005 PPL (llama.cpp PR #7412); q4_0 more, varying by model
(docs/sources.md §4): the order the planner prefers them in."""


DEFAULT_RPC_PORT: Final = 50052
"""rpc-server's default port (``tools/rpc/rpc-server.cpp``)."""


SPEC_VOCAB_MAX_SIZE_DIFFERENCE: Final = 128
"""llama.cpp refuses a draft whose vocabulary size differs more (common/speculative.cpp)."""


DRAFT_CAVEAT: Final = (
    "The speed-up depends on how alike the two models are (acceptance α); measured 1.7× "
    "on an RTX 3060 with a 1B draft for an 8B (llama.cpp #5877), no gain at low acceptance "
    "(llama.cpp PR #10455)."
)


LOCAL_MACHINE: Final = LOCAL


@dataclass(frozen=True, slots=True)
class RpcHost:
    """A remote machine that lends its devices through llama.cpp's ``rpc-server``.

    ``hardware``: its GPUs (or, with none, its host CPU, which rpc-server then offers);
    ``endpoint``: ``host:port`` as ``llama-server --rpc`` takes it.
    """

    hardware: Hardware
    endpoint: str = f"remote:{DEFAULT_RPC_PORT}"
    label: str = ""

    def __post_init__(self) -> None:
        parse_endpoint(self.endpoint)  # llama.cpp's own reading; PlanError with the reason

    @property
    def port(self) -> int:
        """Return the port rpc-server listens on."""
        return parse_endpoint(self.endpoint)[1]


@dataclass(frozen=True, slots=True)
class Goal:
    """What the user wants (see the module doc); sizes in tokens, bytes and tok/s.

        ``ctx``: context per user (fastest/best-quality/users; default 4096); ``min_ctx``: a
        floor for any goal; ``n_users``/``min_tok_per_s``: the users goal (each user at
        ``ctx`` tokens of depth must get ``min_tok_per_s``); ``leave_free_bytes``: kept free
        on every device above the margin; ``max_kld``: weight quants worse than this are not
        picked unless they are the user's own file; ``kv_types``: cache types allowed (the K and
    V caches alike, unless ``cache_type_v`` names V's: then every plan has K of ``kv_types``
    and that V, as llama-server ``-ctk q8_0 -ctv f16``).

        ``draft``: a speculative draft model to consider (``draft_acceptance`` α, at most
        ``draft_max`` drafted tokens per step); ``rpc_hosts``: remote machines to split over
        with llama.cpp's RPC backend, joined by ``link`` (see the module doc).
    """

    name: GoalName
    ctx: int | None = None
    min_ctx: int = 0
    n_users: int = 1
    min_tok_per_s: float | None = None
    leave_free_bytes: int = 0
    margin_bytes: int = DEFAULT_MARGIN_BYTES
    max_kld: float | None = DEFAULT_MAX_KLD
    kv_types: tuple[CacheType, ...] = ("f16", "q8_0")
    cache_type_v: CacheType | None = None
    draft: ModelSpec | None = None
    draft_acceptance: float = DEFAULT_DRAFT_ACCEPTANCE
    draft_max: int = 16
    rpc_hosts: tuple[RpcHost, ...] = ()
    link: Link = field(default_factory=Link)

    def __post_init__(self) -> None:
        if self.name not in GOALS:
            raise PlanError(f"unknown goal {self.name!r}; choose one of {', '.join(GOALS)}")
        if self.n_users < 1:
            raise PlanError(f"users must be ≥ 1, got {self.n_users}")
        if self.leave_free_bytes < 0 or self.margin_bytes < 0:
            raise PlanError("memory to leave free must be ≥ 0")
        if not self.kv_types:
            raise PlanError("at least one KV cache type is needed")
        if not 0.0 <= self.draft_acceptance < 1.0:
            raise PlanError(f"draft acceptance must be in [0, 1), got {self.draft_acceptance}")
        if self.draft_max < 1:
            raise PlanError(f"draft length must be ≥ 1, got {self.draft_max}")
        endpoints = [h.endpoint for h in self.rpc_hosts]
        if len(set(endpoints)) != len(endpoints):
            raise PlanError("each RPC host needs its own host:port")


@dataclass(frozen=True, slots=True)
class Candidate:
    """One complete plan: a quant, settings, their memory and speed.

    ``n_ctx_per_user`` tokens for each of ``n_users``; ``gpu_layers`` of ``n_layers``
    repeating layers sit on GPUs; ``spare_bytes`` per device is capacity minus total
    (None: unknown); ``speed`` at ``speed.depth`` tokens of context.
    """

    quant: QuantOption
    settings: Settings
    estimate: MemoryEstimate
    speed: SpeedPrediction
    n_ctx_per_user: int
    n_users: int
    gpu_layers: int
    n_layers: int
    spare_bytes: tuple[tuple[str, int | None], ...]

    @property
    def all_on_gpu(self) -> bool:
        """Return whether every layer, experts included, sits on a GPU."""
        return self.gpu_layers >= self.n_layers and self.settings.n_cpu_moe == 0

    @property
    def kv_type(self) -> str:
        """Return the cache types as "f16" or "q8_0/f16" (K/V)."""
        k, v = self.settings.cache_type_k, self.settings.cache_type_v
        return k if k == v else f"{k}/{v}"


@dataclass(frozen=True, slots=True)
class Recommendation:
    """The planner's answer: ``best`` (None: nothing fits), the ``runner_up`` it beat,
    ``why`` in plain words, and ``feasible`` False when the goal's constraints were not
    all met (then ``best`` is the closest plan and ``why`` says what is missing)."""

    goal: Goal
    best: Candidate | None
    runner_up: Candidate | None
    why: str
    feasible: bool
    n_evaluated: int
    alternatives: tuple[Candidate, ...] = field(default=())
    draft: DraftPlan | None = None
    rpc: RpcPlan | None = None
    hardware: Hardware | None = None
    """The devices planned on: ``hardware`` with the RPC devices first (None: as given)."""


@dataclass(frozen=True, slots=True)
class DraftPlan:
    """The planner's verdict on a speculative draft model (see the module doc).

    ``used``: recommended; ``why``: the reason either way, in plain words. The numbers are
    None where the planner never got to them (e.g. the draft did not fit). ``settings``
    are the draft's (``n_gpu_layers`` is ``-ngld``); ``estimate`` is its memory alone.
    """

    spec: ModelSpec
    used: bool
    why: str
    acceptance: float
    settings: Settings | None = None
    estimate: MemoryEstimate | None = None
    draft_tok_per_s: float | None = None
    target_tok_per_s: float | None = None
    speed_ratio: float | None = None
    draft_max: int | None = None
    tokens_per_step: float | None = None
    speedup: float | None = None

    @property
    def decode_tok_per_s(self) -> float | None:
        """Return the predicted one-user decode speed with the draft."""
        if self.target_tok_per_s is None or self.speedup is None:
            return None
        return self.target_tok_per_s * self.speedup


@dataclass(frozen=True, slots=True)
class MachineMemory:
    """Memory on one machine of an RPC split: ``machine`` is "this machine" or host:port.

    The sums over its devices (for this machine: its GPUs and its RAM, which holds the
    token embeddings, any layers not offloaded and the host compute buffer). A remote's
    ``load_bytes`` are the weights the main machine sends it when the model loads;
    ``reload_bytes`` what a later load still sends with ``-c`` (tensors of at most 10 MiB:
    larger ones the server keeps on its disk and are only named by their hash).
    """

    machine: str
    devices: tuple[str, ...]
    total_bytes: int
    weights_bytes: int
    capacity_bytes: int | None
    n_layers: int
    kv_bytes: int = 0
    compute_bytes: int = 0
    load_bytes: int = 0
    reload_bytes: int = 0
    label: str = ""

    @property
    def spare_bytes(self) -> int | None:
        """Return capacity minus total (None: capacity unknown)."""
        return None if self.capacity_bytes is None else self.capacity_bytes - self.total_bytes


@dataclass(frozen=True, slots=True)
class RpcPlan:
    """A split over machines with llama.cpp's RPC backend, and how to start it.

    ``machines``: memory per machine, remotes first; ``traffic``: what one decode step of
    one user moves over the network at the plan's quoted ``depth`` (None: nothing fits),
    and ``network_s_per_token`` what it costs on ``link``; ``remote_commands``: one
    ``ggml-rpc-server`` argv per remote; ``rpc_arg``: ``--rpc``'s value.
    """

    hosts: tuple[RpcHost, ...]
    link: Link
    machines: tuple[MachineMemory, ...]
    network_s_per_token: float
    remote_commands: tuple[tuple[str, ...], ...]
    rpc_arg: str
    traffic: StepTraffic | None = None
    depth: int = 0

    @property
    def n_round_trips(self) -> int:
        """Return the network round trips of one decode step."""
        return 0 if self.traffic is None else self.traffic.round_trips

    @property
    def bytes_per_token(self) -> int:
        """Return the bytes one decode step of one user moves, both ways."""
        return 0 if self.traffic is None else self.traffic.total_bytes
