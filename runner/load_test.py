"""N users decoding together on the real engine, in a child process: the load test.

:func:`load_test` (or :class:`LoadTest`, cancellable) runs one child process
(``spawn``, through :class:`~runner.worker.EngineWorker`) that loads the model with the
low-level llama.cpp API for the given :class:`~app.settings.Settings` (the same
parameter mapping as the benchmark and the dry run; ``n_parallel`` must cover the most
users of the plan) and then, per user count of the :class:`~app.measured.users_result.UsersPlan`
and per repetition, serves one round:

* each user is one sequence (``seq_id`` = user) with a prompt of real text of
  ``n_prompt`` tokens, different per user, after ``depth`` tokens of earlier
  conversation (filled once into sequence 0, untimed for the users, and copied to every
  sequence with ``llama_memory_seq_cp``, like ``llama-batched-bench -pps``);
* users arrive all at once, staggered or as a Poisson process (``Arrivals``);
* **continuous batching** as llama-server's ``update_slots`` does it
  (``tools/server/server-context.cpp``): every step is one ``llama_decode`` over one
  batch holding the next token of every user that is decoding, then prompt tokens of
  users that arrived, up to ``n_batch`` tokens; a user whose prompt ends in the batch
  gets its first token from that step; tokens are picked by argmax over the logits
  (greedy, end-of-sequence ignored: every user generates ``n_gen`` tokens);
* the time of every token is recorded, so each user's TTFT (arrival to first token),
  TPOT and every inter-token gap come out, and the round's aggregate tok/s.

The parent sees :class:`~app.measured.bench_result.LoadProgress`,
:class:`~app.measured.bench_result.Loaded` and one
:class:`~app.measured.bench_result.BenchStep` per round; the result is an
:class:`~app.measured.users_result.UsersResult`. A failure raises an
:class:`~app.errors.EngineError` subclass (cause, llama.cpp's last log lines).

Example::

    from app.measured.users_result import Slo, UsersPlan
    from runner.load_test import load_test

    result = load_test("gemma-3-270m-q4_k_m.gguf", Settings(n_ctx=4096, n_parallel=4),
                       UsersPlan(n_users=(1, 2, 4)))
    [s.per_user_tok_per_s for s in result.summaries(Slo())]
"""

from __future__ import annotations

import ctypes
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Final

from app.errors import EngineError, EngineUnsupportedError, ModelFileNotFoundError
from app.measured.bench_result import BenchProgress, BenchStep, Loaded, LoadProgress
from app.measured.users_result import (
    FillTiming,
    StepTiming,
    UsersPlan,
    UsersResult,
    UsersRound,
    UserTiming,
)
from app.settings import Settings
from runner.benchmark import (
    CHAT_TEXT,
    create_context,
    machine_info,
    physical_cores,
)
from runner.dry_run import (
    MAX_DEVICES,
    ContextFacts,
    EngineFacts,
    ModelFacts,
    ModelLoad,
    build_report,
    load_model,
    open_engine,
)
from runner.worker import ChildChannel, ChildFailure, EngineWorker, Event, ItemEvent, LogEvent

DEFAULT_TIMEOUT_S: Final = 600.0
"""Per step (starting, loading, the context, the depth fill, each round)."""

PROMPT_TOPICS: Final = (
    "tomatoes",
    "a bicycle",
    "bread",
    "a first marathon",
    "learning the cello",
    "a leaking roof",
    "a job interview",
    "a trip to Lisbon",
)
"""Each user's prompt starts with its own question, so no two users share a prefix."""


@dataclass(frozen=True, slots=True)
class LoadTestRequest:
    """What the child does (picklable)."""

    model_path: str
    settings: Settings
    plan: UsersPlan
    n_threads: int


@dataclass(frozen=True, slots=True)
class _ChildLoaded:
    load_s: float
    context_s: float
    facts: ContextFacts


@dataclass(frozen=True, slots=True)
class _ChildRound:
    round: UsersRound


@dataclass(frozen=True, slots=True)
class _ChildResult:
    fill: tuple[FillTiming, ...]
    machine: Any
    n_threads: int
    loadavg: tuple[float, float, float] | None


def read_loadavg() -> tuple[float, float, float] | None:
    """Return the 1, 5 and 15 minute load averages (``/proc/loadavg``), where known."""
    try:
        return os.getloadavg()
    except (OSError, AttributeError):
        return None


def prompt_text(user: int) -> str:
    """Return the real text user ``user`` asks (long enough for any prompt length)."""
    topic = PROMPT_TOPICS[user % len(PROMPT_TOPICS)]
    return f"Question {user + 1}, about {topic}. " + CHAT_TEXT * 64


# --- the child ----------------------------------------------------------------------


class _Batch:
    """One ``llama_batch`` filled token by token; ``rows`` maps output rows to users."""

    def __init__(self, bindings: Any, capacity: int) -> None:
        self.b = bindings
        self.capacity = capacity
        self.batch = bindings.llama_batch_init(capacity, 0, 1)
        self.n = 0

    def clear(self) -> None:
        self.n = 0

    def add(self, token: int, pos: int, seq: int, logits: bool) -> None:
        assert self.n < self.capacity, "batch full"
        b, i = self.batch, self.n
        b.token[i] = token
        b.pos[i] = pos
        b.n_seq_id[i] = 1
        b.seq_id[i][0] = seq
        b.logits[i] = 1 if logits else 0
        self.n += 1

    def decode(self, ctx: Any) -> None:
        self.batch.n_tokens = self.n
        rc = self.b.llama_decode(ctx, self.batch)
        if rc != 0:
            raise ChildFailure(
                f"llama_decode returned {rc} with {self.n} tokens "
                "(1: no room in the KV cache, 2: aborted, <0: error)",
                error=EngineError,
            )
        self.b.llama_synchronize(ctx)

    def free(self) -> None:
        self.b.llama_batch_free(self.batch)


class _User:
    """One request's state in a round."""

    def __init__(self, index: int, arrival_s: float, prompt: list[int], depth: int) -> None:
        self.index = index
        self.arrival_s = arrival_s
        self.prompt = prompt
        self.fed = 0  # prompt tokens in the cache
        self.pos = depth  # next position of this sequence
        self.depth = depth
        self.arrived = False
        self.last = -1  # the last token picked
        self.token_s: list[float] = []

    @property
    def decoding(self) -> bool:
        return self.fed == len(self.prompt)


def _tokenize(bindings: Any, vocab: Any, text: str, n: int) -> list[int]:
    data = text.encode()
    buf = (ctypes.c_int32 * (len(data) + 8))()
    got = bindings.llama_tokenize(vocab, data, len(data), buf, len(buf), True, False)
    if got < 0:  # more tokens than bytes (byte fallback): llama.cpp says how many
        buf = (ctypes.c_int32 * -got)()
        got = bindings.llama_tokenize(vocab, data, len(data), buf, len(buf), True, False)
    if got < n:
        raise ChildFailure(f"the prompt text gives only {got} tokens, {n} needed")
    return list(buf[:n])


def load_test_child(request: LoadTestRequest, channel: ChildChannel) -> None:
    """Run ``request`` in this (child) process, reporting through ``channel``."""
    # OpenMP's wait policy: the engine's default (runner.benchmark.WAIT_POLICY_NOTE)
    import numpy as np

    engine = open_engine(channel)
    bindings, forwarder = engine.bindings, engine.forwarder
    settings, plan = request.settings, request.plan
    last_progress = [-1.0]

    def on_progress(fraction: float, _user_data: object) -> bool:
        if fraction >= 1.0 or fraction - last_progress[0] >= 0.01:
            last_progress[0] = fraction
            channel.send(LoadProgress(min(1.0, float(fraction))))
        return True

    progress = bindings.llama_progress_callback(on_progress)
    keep_alive: list[object] = []
    t0 = time.perf_counter()
    model = load_model(
        engine, channel, request.model_path, ModelLoad.from_settings(settings, "alloc"),
        keep_alive, progress,
    )  # fmt: skip
    load_s = time.perf_counter() - t0
    ctx = None
    batch: _Batch | None = None
    try:
        channel.step("creating the context")
        ctx, context_s, facts = create_context(
            bindings, model, settings, request.n_threads, forwarder
        )
        channel.send(_ChildLoaded(load_s, context_s, facts))
        if facts.n_seq_max < plan.max_users:
            raise ChildFailure(
                f"the context has {facts.n_seq_max} sequence(s); the plan needs "
                f"{plan.max_users} (set n_parallel)",
                error=EngineUnsupportedError,
            )
        need = plan.cells_per_user()
        shared = settings.kv_unified
        room = facts.n_ctx // plan.max_users if shared else facts.n_ctx_seq
        if need > room:
            raise ChildFailure(
                f"each user needs {need} cells (depth {plan.depth} + prompt {plan.n_prompt} "
                f"+ {plan.n_gen} generated) but has {room}: raise the context",
                error=EngineUnsupportedError,
            )
        vocab = bindings.llama_model_get_vocab(model)
        n_vocab = bindings.llama_vocab_n_tokens(vocab)
        mem = bindings.llama_get_memory(ctx)
        n_batch = facts.n_batch
        batch = _Batch(bindings, max(n_batch, plan.max_users))
        prompts = [
            _tokenize(bindings, vocab, prompt_text(u), plan.n_prompt) for u in range(plan.max_users)
        ]
        history = _tokenize(bindings, vocab, CHAT_TEXT * (2 + plan.depth // 40), plan.depth + 1)
        total = 2 + len(plan.n_users) * plan.repetitions
        step_no = 0

        def begin(label: str) -> None:
            nonlocal step_no
            step_no += 1
            channel.step(label)
            channel.send(BenchStep(step_no, total, label))

        def pick(row: int) -> int:
            logits = bindings.llama_get_logits_ith(ctx, row)
            return int(np.ctypeslib.as_array(logits, shape=(n_vocab,)).argmax())

        begin("warming up")
        # A prompt with its last token's logits, then one decode step: the first round then
        # finds every weight paged in, the output head's included (a tied embedding is
        # otherwise read whole for the first time by the first user's first token).
        bindings.llama_memory_clear(mem, True)
        warm = prompts[0][: min(plan.n_prompt, n_batch)]
        batch.clear()
        for i, tok in enumerate(warm):
            batch.add(tok, i, 0, i == len(warm) - 1)
        batch.decode(ctx)
        batch.clear()
        batch.add(pick(len(warm) - 1), len(warm), 0, True)
        batch.decode(ctx)
        bindings.llama_memory_clear(mem, True)

        begin(f"filling {plan.depth} tokens of earlier conversation" if plan.depth else "ready")
        fill: list[FillTiming] = []

        def fill_depth() -> list[FillTiming]:
            chunks = []
            bindings.llama_memory_clear(mem, True)
            for start in range(0, plan.depth, n_batch):
                part = history[start : min(plan.depth, start + n_batch)]
                batch.clear()
                for i, tok in enumerate(part):
                    batch.add(tok, start + i, 0, i == len(part) - 1)
                t, c = time.perf_counter(), time.process_time()
                batch.decode(ctx)
                chunks.append(
                    FillTiming(start, len(part), time.perf_counter() - t, time.process_time() - c)
                )
            return chunks

        if plan.depth:
            fill = fill_depth()

        def reset(n_users: int) -> None:
            """Leave ``depth`` cached tokens in sequences 0..n-1 and nothing else."""
            if not plan.depth:
                bindings.llama_memory_clear(mem, True)
                return
            for s in range(1, plan.max_users):
                bindings.llama_memory_seq_rm(mem, s, -1, -1)
            if not bindings.llama_memory_seq_rm(mem, 0, plan.depth, -1):
                fill_depth()  # recurrent state cannot forget part of a sequence
            for s in range(1, n_users):
                bindings.llama_memory_seq_cp(mem, 0, s, -1, -1)
            if n_users > 1 and not shared:
                # a copy between streams is applied at the next decode: do it now, untimed
                # (tools/batched-bench/batched-bench.cpp does the same)
                batch.clear()
                batch.add(history[plan.depth], plan.depth, 0, False)
                batch.decode(ctx)
                bindings.llama_memory_seq_rm(mem, 0, plan.depth, -1)

        for n_users in plan.n_users:
            for rep in range(plan.repetitions):
                begin(f"{n_users} user{'s' if n_users != 1 else ''}, round {rep + 1}")
                reset(n_users)
                arrivals = plan.arrivals.times(n_users, plan.seed + 1000 * n_users + rep)
                users = [_User(u, arrivals[u], prompts[u], plan.depth) for u in range(n_users)]
                channel.send(_ChildRound(_serve(users, batch, ctx, plan, pick, n_users, rep)))
        channel.send(
            _ChildResult(
                fill=tuple(fill),
                machine=machine_info(engine.facts),
                n_threads=request.n_threads,
                loadavg=read_loadavg(),
            )
        )
    finally:
        if batch is not None:
            batch.free()
        if ctx:
            bindings.llama_free(ctx)
        bindings.llama_model_free(model)
        forwarder.flush()
        del keep_alive


def _serve(
    users: list[_User],
    batch: _Batch,
    ctx: Any,
    plan: UsersPlan,
    pick: Callable[[int], int],
    n_users: int,
    rep: int,
) -> UsersRound:
    """Serve one round with continuous batching; return every token's time."""
    n_batch = batch.capacity
    steps: list[StepTiming] = []
    start = time.perf_counter()
    while True:
        active = [u for u in users if len(u.token_s) < plan.n_gen]
        if not active:
            break
        now = time.perf_counter() - start
        for u in active:
            if not u.arrived and u.arrival_s <= now:
                u.arrived = True
        ready = [u for u in active if u.arrived]
        if not ready:
            time.sleep(max(0.0, min(u.arrival_s for u in active) - now))
            continue
        batch.clear()
        rows: list[tuple[int, _User]] = []
        n_decode = 0
        depth_sum = 0
        for u in ready:  # decoding users first, one token each
            if u.decoding:
                rows.append((batch.n, u))
                batch.add(u.last, u.pos, u.index, True)
                n_decode += 1
                depth_sum += u.pos
        n_prefill = 0
        for u in ready:  # then prompts, oldest arrival first, as far as the batch goes
            if u.decoding:
                continue
            take = min(len(u.prompt) - u.fed, n_batch - batch.n)
            if take <= 0:
                break
            for i in range(take):
                last = u.fed + i == len(u.prompt) - 1
                if last:
                    rows.append((batch.n, u))
                batch.add(u.prompt[u.fed + i], u.pos + i, u.index, last)
            u.fed += take
            u.pos += take
            n_prefill += take
        t = time.perf_counter()
        c = time.process_time()
        batch.decode(ctx)
        for row, u in rows:
            u.last = pick(row)
            if u.token_s:  # a decoding user's token went in at its position
                u.pos += 1
        done = time.perf_counter()
        cpu = time.process_time() - c
        stamp = done - start
        for _row, u in rows:
            u.token_s.append(stamp)
        steps.append(
            StepTiming(n_decode, n_prefill, depth_sum // n_decode if n_decode else 0, done - t, cpu)
        )
    timings = tuple(
        UserTiming(u.index, u.arrival_s, plan.n_prompt, plan.depth, tuple(u.token_s)) for u in users
    )
    wall = max(u.token_s[-1] for u in users) - min(u.arrival_s for u in users)
    return UsersRound(n_users, rep, timings, wall, tuple(steps))


# --- the parent ---------------------------------------------------------------------


class LoadTest:
    """A cancellable load test of one model with one settings; :meth:`run` blocks.

    ``cancel()`` may be called from any other thread: the child is gone within a second
    and :meth:`run` raises :class:`~app.errors.EngineCancelledError`. ``on_progress`` is
    called in the thread that called :meth:`run`. ``n_threads`` ``None`` means the
    physical cores. ``on_round`` gets each round as it finishes.
    """

    def __init__(
        self,
        model_path: str | os.PathLike[str],
        settings: Settings,
        plan: UsersPlan,
        *,
        n_threads: int | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        on_progress: Callable[[BenchProgress], None] | None = None,
        on_round: Callable[[UsersRound], None] | None = None,
    ) -> None:
        if not os.path.isfile(model_path):
            raise ModelFileNotFoundError(f"{os.fspath(model_path)}: no such model file")
        if len(settings.tensor_split) > MAX_DEVICES:
            raise EngineUnsupportedError(
                f"tensor split has {len(settings.tensor_split)} entries; llama.cpp takes at "
                f"most {MAX_DEVICES}"
            )
        if settings.n_parallel < plan.max_users:
            raise EngineUnsupportedError(
                f"{plan.max_users} users need {plan.max_users} parallel slots; the settings "
                f"have {settings.n_parallel}"
            )
        assert n_threads is None or n_threads >= 1, f"n_threads must be ≥ 1, got {n_threads}"
        self.request = LoadTestRequest(
            model_path=os.fspath(model_path),
            settings=settings,
            plan=plan,
            n_threads=n_threads or physical_cores(),
        )
        self._on_progress = on_progress
        self._on_round = on_round
        self._log: list[str] = []
        self._engine: EngineFacts | None = None
        self._model: ModelFacts | None = None
        self._loaded: Loaded | None = None
        self._rounds: list[UsersRound] = []
        self._worker = EngineWorker(
            load_test_child, self.request, timeout_s=timeout_s, on_event=self._on_event
        )

    @property
    def pid(self) -> int | None:
        """The child's process id while it runs."""
        return self._worker.pid

    def run(self) -> UsersResult:
        """Run the load test; return what it measured (raises EngineError subclasses)."""
        started = datetime.now(UTC)
        t0 = time.perf_counter()
        try:
            events = self._worker.run().events
        except EngineError:
            raise
        except BaseException:
            if self._worker.pid is not None:
                self._worker.cancel()
            raise
        final = next(
            (
                e.item
                for e in events
                if isinstance(e, ItemEvent) and isinstance(e.item, _ChildResult)
            ),
            None,
        )
        if final is None or self._loaded is None:
            raise EngineError("the engine finished without reporting its measurements")
        return UsersResult(
            model_path=self.request.model_path,
            settings=self.request.settings,
            plan=self.request.plan,
            n_threads=final.n_threads,
            engine=self._loaded.report,
            load_s=self._loaded.load_s,
            rounds=tuple(self._rounds),
            fill=final.fill,
            machine=final.machine,
            started_at=started.isoformat(timespec="seconds"),
            duration_s=time.perf_counter() - t0,
            loadavg=final.loadavg,
        )

    def cancel(self) -> None:
        """Kill the child now; :meth:`run` raises EngineCancelledError."""
        self._worker.cancel()

    def _on_event(self, event: Event) -> None:
        if isinstance(event, LogEvent):
            self._log.append(event.text)
            return
        if not isinstance(event, ItemEvent):
            return
        item = event.item
        progress: BenchProgress | None = None
        if isinstance(item, EngineFacts):
            self._engine = item
        elif isinstance(item, ModelFacts):
            self._model = item
        elif isinstance(item, LoadProgress | BenchStep):
            progress = item
        elif isinstance(item, _ChildRound):
            self._rounds.append(item.round)
            if self._on_round is not None:
                self._on_round(item.round)
        elif isinstance(item, _ChildLoaded):
            assert self._engine is not None, "engine facts come first"
            assert self._model is not None, "model facts come before the context"
            report = build_report(
                self.request.model_path,
                "alloc",
                self.request.settings,
                self._engine,
                self._model,
                item.facts,
                tuple(self._log),
            )
            self._loaded = progress = Loaded(item.load_s, item.context_s, report)
        if progress is not None and self._on_progress is not None:
            self._on_progress(progress)


def load_test(
    model_path: str | os.PathLike[str],
    settings: Settings,
    plan: UsersPlan,
    *,
    n_threads: int | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    on_progress: Callable[[BenchProgress], None] | None = None,
) -> UsersResult:
    """Load-test ``model_path`` with ``settings`` in one child process; see the module doc."""
    return LoadTest(
        model_path,
        settings,
        plan,
        n_threads=n_threads,
        timeout_s=timeout_s,
        on_progress=on_progress,
    ).run()
