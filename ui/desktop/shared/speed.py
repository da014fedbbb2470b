"""Speed beside the memory bars: the speed factors, tok/s on every tick, users on the pool.

:class:`SpeedController` adds speed to the views: the speed factors (calibrated from the
user's own ``ggtune bench`` runs on this machine, as ``ggtune compare`` does,
:func:`load_speed_factors`) are loaded once per model and hardware on the job pool;
:func:`app.predict.speed.predict_speed` (~0.2 ms) runs on every tick;
:func:`app.planning.planner.max_users` (a search, tens of ms and more) runs debounced on
the pool through :class:`~ui.desktop.shared.jobs.LatestJob`. The Memory view shows its
:class:`SpeedSummary`; the Compare and Recommend tabs read its factors.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import (
    QObject,
    QTimer,
    Signal,
)

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.users_result import Slo
from app.model.catalog import is_catalog
from app.model.spec import ModelSpec
from app.planning.goals import Goal
from app.planning.options import QuantOption, quant_options
from app.planning.planner import Capacity, max_users
from app.planning.users import MeasuredUsers, UsersAnswer, measured_users, users_within_slo
from app.planning.words import fmt_ctx
from app.predict.speed import (
    DEFAULT_GPU_BANDWIDTH_GB_PER_S,
    SpeedFactors,
    SpeedPrediction,
    predict_speed,
)
from app.settings import Settings
from app.units import format_seconds, format_tps, plural, speed_depth
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.hardware import HardwareChoice
from ui.desktop.shared.jobs import LatestJob, run_job
from ui.desktop.shared.model_card import describe_error

USERS_SLO: Final = Slo()
"""The SLO of the "N users fit" line: the load test's default (first token ≤ 2 s, ≥ 10 tok/s
each), so Verify's Users run measures the same thing."""
USERS_MIN_TOK_PER_S: Final = USERS_SLO.min_tok_per_s
USERS_MAX: Final = 256
"""Where the users search stops (llama-server's -np limit): a count there reads "256 or
more"."""
"""The per-user speed the "users that fit" line asks for: faster than people read."""


SPEED_PROMPT_TOKENS: Final = 512
"""The prompt the time to first token is quoted for (llama-bench's ``-p 512``)."""


def model_file_bytes(spec: ModelSpec) -> int | None:
    """Return the size of the model's file, bytes (None when it cannot be read). Blocks."""
    if is_catalog(spec.path):
        return None
    try:
        return os.path.getsize(spec.path)
    except OSError:
        return None


def load_speed_factors(spec: ModelSpec, hardware: Hardware, this_machine: bool) -> SpeedFactors:
    """Return speed factors fitted to this machine's stored runs (published ratios else).

    Blocks on the results database and a host probe: call on the job pool. Does what
    ``ggtune compare``/``recommend`` do (:mod:`app.measured.calibration`), so both quote the same
    speed.
    """
    from app.measured.calibration import machine_factors

    if not this_machine:
        return SpeedFactors()
    try:
        return machine_factors(spec, hardware)
    except (GGTuneError, OSError):
        return SpeedFactors()


@dataclass(frozen=True, slots=True)
class SpeedSummary:
    """What the speed line shows: the prediction at the settings, and users that fit.

    ``capacity`` is None while it is being worked out (or when it failed: ``error``).
    """

    prediction: SpeedPrediction | None
    capacity: Capacity | None
    ctx_per_user: int
    error: str | None = None
    users: UsersAnswer | None = None
    """The users that also get their first token in time (:data:`USERS_SLO`)."""
    measured: MeasuredUsers | None = None
    """The newest load test of this file under the same SLO (Verify's Users run), if any."""
    no_speed: str | None = None
    """Why there is no prediction: the settings do not fit, so nothing would run."""
    assumed_bandwidth: bool = False
    """A GPU of the plan has no bandwidth given: the speed assumed
    :data:`~app.predict.speed.DEFAULT_GPU_BANDWIDTH_GB_PER_S` for it."""
    timing_kernels: bool = False
    """This CPU's kernels for the model are being timed now
    (:class:`~ui.desktop.shared.kernel_timing.KernelTimingController`)."""


def users_goal(settings: Settings, margin_bytes: int) -> Goal:
    """Return the "users" goal for the line: the settings' own K and V cache types (mixed
    ones too: K q8_0 with V f16 holds fewer users than q8_0 for both), the verdict's margin."""
    k, v = settings.cache_type_k, settings.cache_type_v
    return Goal(
        "users", margin_bytes=margin_bytes, kv_types=(k,), cache_type_v=None if v == k else v
    )


def users_capacity(
    option: QuantOption, hardware: Hardware, settings: Settings, margin: int, f: SpeedFactors
) -> Capacity:
    """Return how many users fit with this file at the settings' context per user (pure)."""
    ctx = max(256, settings.n_ctx // max(1, settings.n_parallel))
    return max_users(
        option.spec,
        hardware,
        ctx_per_user=ctx,
        min_tok_per_s=USERS_MIN_TOK_PER_S,
        goal=users_goal(settings, margin),
        options=(option,),
        factors=f,
        max_n=USERS_MAX,
    )


def basis_text(factors_source: str) -> str:
    """Return where the predicted figures come from, short: "calibrated on 3 run(s) of this
    machine" or "not calibrated" (the full source goes in the tooltip)."""
    if factors_source.startswith("calibrated on "):
        return factors_source.split(" (")[0]
    return "not calibrated"


def speed_text(summary: SpeedSummary) -> str:
    """Return the compact speed line: writing and reading speed, first token, users, and
    whether the figures are calibrated or measured."""
    parts = []
    p = summary.prediction
    if summary.no_speed is not None:
        parts.append(f"No speed: {summary.no_speed}")
    if p is not None:
        parts.append(
            f"~{format_tps(p.decode_tok_per_s)} tok/s writing, "
            f"~{format_tps(p.prefill_tok_per_s)} tok/s reading the prompt, "
            f"first token after {format_seconds(p.ttft_s)} ({p.n_prompt}-token prompt)"
        )
    if summary.error is not None:
        parts.append(f"users: could not work out ({summary.error})")
    elif summary.capacity is None:
        parts.append("users: working out…")
    else:
        answer = summary.users
        n = answer.n_users if answer is not None else summary.capacity.n_users
        slo = USERS_SLO.describe() if answer is not None else f"≥ {USERS_MIN_TOK_PER_S:g} tok/s"
        count = (
            f"{n} or more users fit"
            if n >= USERS_MAX
            else plural(n, "user") + (" fits" if n == 1 else " fit")
        )
        text = f"{count} with {fmt_ctx(summary.ctx_per_user)} each ({slo}; predicted"
        m = summary.measured
        if m is not None:
            text += f"; {m.describe()}"  # Verify's Users run or ggtune bench --users
        parts.append(text + ")")
    line = " · ".join(parts)
    if p is not None:
        line += f" — {basis_text(p.factors_source)}"
        if p.host_kernels is False:
            now = "timing them now…" if summary.timing_kernels else "they are not timed yet"
            line += f"; the CPU's part is rough, from its memory bandwidth alone ({now})"
        if summary.assumed_bandwidth:
            line += (
                f"; GPU bandwidth not given, {DEFAULT_GPU_BANDWIDTH_GB_PER_S:.0f} GB/s assumed "
                "(set it under Plan for GPUs, or choose a profile)"
            )
    return line


class SpeedController(QObject):
    """Predicted speed and users that fit for the main screen's state (GUI thread).

    Signals: ``factors_changed(SpeedFactors)`` once the factors for a model and hardware
    are loaded (on the pool); ``speed_changed(SpeedSummary)`` ``LINE_DELAY_MS`` after the
    last estimate (predict_speed is ~0.2-1 ms, the label's re-wrap more), and again when
    the debounced users count arrives.
    """

    factors_changed = Signal(object)
    speed_changed = Signal(object)

    USERS_DELAY_MS: Final = 250
    LINE_DELAY_MS: Final = 80

    def __init__(self, estimates: EstimateController, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._factors = SpeedFactors()
        self._factors_key: tuple[str, str, Hardware] | None = None
        self._factors_serial = 0
        self._summary = SpeedSummary(None, None, 0)
        self._timing_kernels = False
        self._measured: MeasuredUsers | None = None
        self._users_key: tuple[object, ...] | None = None
        self._users = LatestJob(
            self.USERS_DELAY_MS, self._on_users_done, self._on_users_failed, self
        )
        # the line changes only when the slider rests: re-wrapping a label and predicting
        # on every tick doubled the tick (bench/bench_desktop.py)
        self._tick = QTimer(self)
        self._tick.setSingleShot(True)
        self._tick.setInterval(self.LINE_DELAY_MS)
        self._tick.timeout.connect(lambda: self._on_estimates_state_changed(estimates.state))
        estimates.state_changed.connect(lambda _state: self._tick.start())
        self._on_estimates_state_changed(estimates.state)

    @property
    def factors(self) -> SpeedFactors:
        """The speed factors in force (published ratios until calibrated ones load)."""
        return self._factors

    @property
    def summary(self) -> SpeedSummary:
        """The latest speed line."""
        return self._summary

    @property
    def users_busy(self) -> bool:
        """Whether the users count is being worked out."""
        return self._users.busy

    def set_timing_kernels(self, busy: bool) -> None:
        """Say on the line whether this CPU's kernels are being timed now."""
        self._timing_kernels = busy
        if self._summary.timing_kernels != busy:
            self._summary = dataclasses.replace(self._summary, timing_kernels=busy)
            self.speed_changed.emit(self._summary)

    def reload(self) -> None:
        """Read this machine's calibration and the newest Users run again: a benchmark or a
        Users run just stored one, so every tab moves to the new figure now, not at the
        next launch."""
        self._factors_key = None
        self._on_estimates_state_changed(self._estimates.state)

    def _on_estimates_state_changed(self, state: EstimateState) -> None:
        if state.model is None:
            return
        self._maybe_load_factors(state.model.spec, state.hardware)
        prediction = None
        no_speed = None
        if state.error is not None:
            no_speed = "these settings cannot run"
        elif state.estimate is not None and state.estimate.fits is False:
            no_speed = "these settings do not fit, so nothing would run"
        elif state.estimate is not None:
            try:
                prediction = predict_speed(
                    state.spec or state.model.spec,
                    state.settings,
                    state.hardware.hardware,
                    depth=speed_depth(state.settings.n_ctx, state.settings.n_parallel),
                    n_prompt=SPEED_PROMPT_TOKENS,
                    factors=self._factors,
                )
            except GGTuneError:
                prediction = None
        ctx = max(256, state.settings.n_ctx // max(1, state.settings.n_parallel))
        key = (
            state.model.path,
            state.quant,
            state.hardware,
            state.settings,
            state.margin_bytes,
            self._factors,
        )
        same = key == self._users_key
        capacity = self._summary.capacity if same else None
        users = self._summary.users if same else None
        assumed = any(g.bandwidth_gb_per_s is None for g in state.hardware.hardware.gpus)
        self._summary = SpeedSummary(
            prediction,
            capacity,
            ctx,
            None,
            users,
            self._measured,
            no_speed=no_speed,
            assumed_bandwidth=assumed,
            timing_kernels=self._timing_kernels,
        )
        if key != self._users_key:
            self._users_key = key
            self._request_users(state)
        self.speed_changed.emit(self._summary)

    def _request_users(self, state: EstimateState) -> None:
        assert state.model is not None, "users need a model"
        spec = state.spec or state.model.spec  # the simulated quant's, when one is chosen
        hardware = state.hardware.hardware
        settings = state.settings
        margin = state.margin_bytes
        factors = self._factors

        def job() -> UsersAnswer:
            (own,) = quant_options(spec, simulate=None, file_bytes=spec.weights_bytes)
            capacity = users_capacity(own, hardware, settings, margin, factors)
            return users_within_slo(capacity, hardware, USERS_SLO, factors)

        self._users.request(job)

    def _on_users_done(self, answer: UsersAnswer) -> None:
        self._summary = dataclasses.replace(
            self._summary,
            capacity=answer.capacity,
            error=None,
            users=answer,
            measured=self._measured,
        )
        self.speed_changed.emit(self._summary)

    def _on_users_failed(self, error: Exception) -> None:
        self._summary = dataclasses.replace(
            self._summary, capacity=None, error=describe_error(error), users=None
        )
        self.speed_changed.emit(self._summary)

    def _maybe_load_factors(self, spec: ModelSpec, choice: HardwareChoice) -> None:
        key = (spec.path, choice.source, choice.hardware)
        if key == self._factors_key:
            return
        self._factors_key = key
        self._factors_serial += 1
        serial = self._factors_serial
        hardware = choice.hardware
        local = choice.source == "local"

        def job() -> tuple[SpeedFactors, MeasuredUsers | None]:
            factors = load_speed_factors(spec, hardware, local)
            measured = None
            if local and not is_catalog(spec.path):
                measured = measured_users(spec.path, USERS_SLO)
            return factors, measured

        run_job(
            job,
            on_success=lambda found: self._on_factors_loaded(serial, found),
            on_failure=lambda _e: None,  # load_speed_factors falls back by itself
            parent=self,
        )

    def _on_factors_loaded(
        self, serial: int, found: tuple[SpeedFactors, MeasuredUsers | None]
    ) -> None:
        if serial != self._factors_serial:
            return
        factors, measured = found
        changed = factors != self._factors or measured != self._measured
        self._factors, self._measured = factors, measured
        self.factors_changed.emit(factors)
        if changed:
            self._on_estimates_state_changed(self._estimates.state)
