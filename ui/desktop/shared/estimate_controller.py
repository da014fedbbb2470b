"""The state of the main screen: model, settings, runner, hardware, and their estimate.

:class:`EstimateController` re-estimates synchronously on every change (``estimate()`` is
pure and takes well under a millisecond) and emits one :class:`EstimateState`. The
Settings panel writes through :meth:`EstimateController.update`; the memory view and the
verdict read ``state_changed``. Limits that depend on the model (the context slider's end,
the number of layers) are pure functions here, so tests can check them without widgets.

The estimate is of what the chosen runner will run (:func:`app.planning.runner_plan.plan_runner`):
its defaults, the settings the user moved (they are pinned), and its own fitting for the
rest (llama-server's ``--fit``: layers, MoE experts, a context left unset), with the whole
footprint (projector found beside the file, prompt cache, checkpoints).
``EstimateState.requested`` holds the sliders' values, ``EstimateState.settings`` what the
runner runs, ``EstimateState.plan`` the plan with its words; every tab reads ``settings``.

The estimate is for the open file, or for a simulated quant level of it
(:meth:`EstimateController.set_quant`): :func:`app.model.quant.simulate_quant` runs once per
(model, quant) and its spec is cached, so slider ticks re-estimate as fast as for the file.
``EstimateState.spec`` is the spec estimated; ``EstimateState.model`` stays the open file.
The list of levels a model can be simulated at (every level, :func:`app.model.quant.simulate_all`:
0.5 s for a 70B model's 724 tensors) is worked out on the job pool when a model opens and
announced by ``quant_choices_changed``; the GUI thread never waits for it.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QObject, Signal

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.model.projector import Projector, read_projector
from app.model.quant import QuantResult, simulate_all, simulate_quant
from app.model.spec import ModelSpec
from app.planning.options import own_quant_name
from app.planning.runner_plan import RunnerOptions, RunnerPlan, plan_runner
from app.predict.estimate import MemoryEstimate, repack_is_safe, safe_repack
from app.predict.verdict import Verdict, verdict
from app.settings import ALL_LAYERS, RUNNERS, RunnerName, Settings, runner_defaults
from app.sources.projectors import find_projector
from app.units import DEFAULT_MARGIN_BYTES
from ui.desktop.shared.hardware import HardwareChoice
from ui.desktop.shared.jobs import run_job
from ui.desktop.shared.model_card import LoadedModel
from ui.desktop.shared.scales import CONTEXT_QUANTUM

RUNNER_TITLES: Final[dict[RunnerName, str]] = {
    "llama-server": "llama-server",
    "ollama": "Ollama",
    "lmstudio": "LM Studio",
    "llama-cpp-python": "llama-cpp-python",
}
assert set(RUNNER_TITLES) == set(RUNNERS), "every runner needs a title"


@dataclass(frozen=True, slots=True)
class EstimateState:
    """One consistent snapshot: what was asked and what it costs.

    ``estimate`` and ``verdict`` are None when there is no model yet or when the settings
    cannot run (``error`` says why, in one line). ``quant`` is the simulated quant level
    estimated (None: the open file itself) and ``spec`` the spec estimated: the file's, or
    the simulated one (None without a model).
    """

    model: LoadedModel | None
    quant: str | None
    spec: ModelSpec | None
    settings: Settings
    runner: RunnerName
    hardware: HardwareChoice
    estimate: MemoryEstimate | None
    verdict: Verdict | None
    error: str | None
    margin_bytes: int
    requested: Settings | None = None
    """The sliders' values (``settings`` is what the runner runs after its own choices)."""
    plan: RunnerPlan | None = None
    pinned: frozenset[str] = frozenset()


@dataclass(frozen=True, slots=True)
class QuantChoice:
    """A quant level the open model can be simulated at (``needs_imatrix``: llama.cpp
    demands an importance matrix to make it)."""

    name: str
    needs_imatrix: bool
    weights_bytes: int = 0
    """The weights at this level (what the file would hold, bytes); 0: not known."""


def simulate_level(spec: ModelSpec, quant: str) -> QuantResult:
    """Return ``spec`` quantized to ``quant`` as :func:`app.model.quant.simulate_all` does it:
    with an importance matrix when llama.cpp demands one (raises QuantError)."""
    result = simulate_quant(spec, quant)
    if result.needs_imatrix:
        with_imatrix = simulate_quant(spec, quant, imatrix=True)
        result = dataclasses.replace(with_imatrix, needs_imatrix=True)
    return result


def simulate_choices(
    spec: ModelSpec,
) -> tuple[tuple[QuantChoice, ...], dict[str, ModelSpec]]:
    """Return every level ``spec`` can be simulated at but its own (big to small) and the
    simulated spec of each (pure; runs on the job pool)."""
    own = own_quant_name(spec)
    choices: list[QuantChoice] = []
    specs: dict[str, ModelSpec] = {}
    for result in simulate_all(spec):
        if not isinstance(result, QuantResult) or result.file_type.name == own:
            continue
        name = result.file_type.name
        specs[name] = result.spec
        choices.append(QuantChoice(name, result.needs_imatrix, result.spec.weights_bytes))
    return tuple(choices), specs


MAX_CONTEXT: Final = ((1 << 31) - 1) // 256 * 256
"""Largest context the desktop offers (2,147,483,392 tokens): Qt's number boxes hold an
int32, and a model claiming a larger training context must not make the box show one
number while the estimate uses another."""


def max_context(spec: ModelSpec, settings: Settings) -> int:
    """Return the largest total context (tokens) that keeps each sequence within training.

    With one shared (unified) cache every sequence may use all cells, so the end is the
    training context; with one stream per user, each gets ``n_ctx / n_parallel`` cells;
    never above :data:`MAX_CONTEXT`.
    """
    train = spec.n_ctx_train if spec.n_ctx_train > 0 else 4096
    total = train if settings.kv_unified else train * settings.n_parallel
    return min(total, MAX_CONTEXT)


def fit_settings(spec: ModelSpec, settings: Settings) -> Settings:
    """Return ``settings`` made explicit and within the limits of ``spec``.

    ``n_ctx`` 0 (the training context) becomes its value, then the context is kept within
    256 … :func:`max_context`; GPU layers above the model's count become "all"; MoE layers
    on the CPU stay within the layer count (0 for a dense model).
    """
    n_ctx = settings.n_ctx or spec.n_ctx_train or 4096
    n_ctx = max(CONTEXT_QUANTUM, min(n_ctx, max_context(spec, settings)))
    ngl = settings.n_gpu_layers
    if ngl > spec.n_layer:
        ngl = ALL_LAYERS  # n_layer + 1 (the output layer too) is every layer
    n_cpu_moe = min(settings.n_cpu_moe, spec.n_layer) if spec.n_expert else 0
    n_ubatch = min(settings.n_ubatch, settings.n_batch)
    return settings.replace(n_ctx=n_ctx, n_gpu_layers=ngl, n_cpu_moe=n_cpu_moe, n_ubatch=n_ubatch)


def gpu_total_bytes(hardware: Hardware) -> int:
    """Return the memory of all GPUs together, bytes (Ollama's default context uses it)."""
    return sum(g.capacity_bytes or 0 for g in hardware.gpus)


class EstimateController(QObject):
    """Hold the main screen's state (GUI thread) and re-estimate on every change.

    Signals: ``model_changed(LoadedModel)``, ``settings_changed(Settings)`` (also when a
    runner preset or the model's limits changed them), ``runner_changed(str)``,
    ``quant_changed(object)`` (the simulated quant level, None for the file itself; also
    None after a new model), ``quant_choices_changed(tuple[QuantChoice, ...])`` when the
    levels the open model can be simulated at are known (worked out on the job pool after
    each new model), ``state_changed(EstimateState)`` after each estimate.
    """

    model_changed = Signal(object)
    quant_changed = Signal(object)
    quant_choices_changed = Signal(object)
    settings_changed = Signal(object)
    runner_changed = Signal(str)
    state_changed = Signal(object)

    def __init__(self, hardware: HardwareChoice, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self._runner: RunnerName = "llama-server"
        self._hardware = hardware
        self._settings = safe_repack(
            runner_defaults(self._runner, gpu_total_bytes=0), hardware.hardware.host
        )
        self._model: LoadedModel | None = None
        self._quant: str | None = None
        self._simulated: dict[tuple[str, str], ModelSpec] = {}
        self._choices: dict[str, tuple[QuantChoice, ...]] = {}
        self._pending: set[str] = set()
        self._margin_bytes = DEFAULT_MARGIN_BYTES
        self._pinned: frozenset[str] = frozenset()
        # live: the fit's search off the reserve graph (one graph per tick, not ten)
        self._options = RunnerOptions(live=True)
        self._projectors: dict[str, Projector | None] = {}
        self._state = self._compute()

    # --- reading ---

    @property
    def state(self) -> EstimateState:
        """The latest snapshot."""
        return self._state

    @property
    def settings(self) -> Settings:
        """The settings in force."""
        return self._settings

    @property
    def pinned(self) -> frozenset[str]:
        """The settings the user set (the runner decides the others)."""
        return self._pinned

    @property
    def options(self) -> RunnerOptions:
        """The runner's own knobs (fit, prompt cache, checkpoints, projector offload)."""
        return self._options

    @property
    def runner(self) -> RunnerName:
        """The runner whose defaults the settings started from."""
        return self._runner

    @property
    def model(self) -> LoadedModel | None:
        """The model estimated, or None before the first one loaded."""
        return self._model

    @property
    def quant(self) -> str | None:
        """The simulated quant level estimated, or None for the open file itself."""
        return self._quant

    @property
    def spec(self) -> ModelSpec | None:
        """The spec estimated: the open file's, or its simulated quant level's."""
        if self._model is None:
            return None
        if self._quant is None:
            return self._model.spec
        return self._simulated[(self._model.spec.path, self._quant)]

    def own_quant(self) -> str | None:
        """The open file's quant level (e.g. "Q4_K_M"; "file" when unknown), or None."""
        return None if self._model is None else own_quant_name(self._model.spec)

    def quant_choices(self) -> tuple[QuantChoice, ...]:
        """Every quant level the open model can be simulated at, but its own, big to small.

        Empty until the job started by :meth:`set_model` has worked them out (then
        ``quant_choices_changed`` says so); after that a :meth:`set_quant` to any of them
        costs nothing, their specs being cached.
        """
        model = self._model
        return () if model is None else self._choices.get(model.spec.path, ())

    def simulated_specs(self) -> dict[str, ModelSpec]:
        """Return the open model's simulated levels worked out so far, by name (the specs
        :meth:`set_quant` estimates; nothing is simulated here)."""
        model = self._model
        if model is None:
            return {}
        path = model.spec.path
        return {quant: spec for (p, quant), spec in self._simulated.items() if p == path}

    @property
    def quant_choices_pending(self) -> bool:
        """Whether the open model's simulated levels are still being worked out."""
        return self._model is not None and self._model.spec.path in self._pending

    def _start_quant_choices(self, spec: ModelSpec) -> None:
        path = spec.path
        if path in self._choices or path in self._pending:
            return
        self._pending.add(path)

        def done(answer: tuple[tuple[QuantChoice, ...], dict[str, ModelSpec]]) -> None:
            self._pending.discard(path)
            current = self._model is not None and self._model.spec.path == path
            if not current:
                return  # another model opened meanwhile: its own job answers for it
            choices, specs = answer
            for name, simulated in specs.items():
                self._simulated.setdefault((path, name), simulated)
            self._choices[path] = choices
            self.quant_choices_changed.emit(choices)

        def failed(_error: Exception) -> None:
            # simulate_all reports each level's refusal as a value; anything else leaves
            # only the file itself to choose (set_quant still simulates on demand)
            self._pending.discard(path)
            if self._model is not None and self._model.spec.path == path:
                self._choices[path] = ()
                self.quant_choices_changed.emit(())

        run_job(lambda: simulate_choices(spec), on_success=done, on_failure=failed, parent=self)

    # --- writing ---

    def set_model(self, model: LoadedModel) -> None:
        """Estimate for ``model`` itself (no simulated quant); keep the settings, fitted."""
        path = model.spec.path
        self._simulated = {k: v for k, v in self._simulated.items() if k[0] == path}
        self._choices = {k: v for k, v in self._choices.items() if k == path}
        self._model = model
        self._quant = None
        self._start_quant_choices(model.spec)
        self.model_changed.emit(model)
        self.quant_changed.emit(None)
        self._apply(self._settings)

    def set_quant(self, quant: str | None) -> None:
        """Estimate the open model simulated at ``quant`` (None or its own: the file).

        The simulation runs once per (model, quant); a level llama.cpp cannot make leaves
        the quant as it was and puts the reason in ``state.error``.
        """
        model = self._model
        if model is None:
            return
        if quant is not None and quant == own_quant_name(model.spec):
            quant = None
        if quant is not None:
            key = (model.spec.path, quant)
            if key not in self._simulated:
                try:
                    self._simulated[key] = simulate_level(model.spec, quant).spec
                except GGTuneError as err:
                    self._publish(dataclasses.replace(self._state, error=str(err)))
                    return
        changed = quant != self._quant
        self._quant = quant
        if changed:
            self.quant_changed.emit(quant)
        self._recompute()

    def set_hardware(self, choice: HardwareChoice) -> None:
        """Estimate for other hardware (settings unchanged, but repacking where the user
        left it to ggtune: off on a CPU with AMX, see :func:`repack_is_safe`)."""
        self._hardware = choice
        if "repack" not in self._pinned and self._runner == "llama-server":
            safe = repack_is_safe(choice.hardware.host)
            if self._settings.repack != safe:
                self._apply(self._settings.replace(repack=safe))
                return
        self._recompute()

    def set_runner(self, runner: RunnerName) -> None:
        """Switch to ``runner`` and take its default settings."""
        assert runner in RUNNERS, f"unknown runner {runner!r}"
        self._runner = runner
        self.runner_changed.emit(runner)
        self.reset_to_runner_defaults()

    def reset_to_runner_defaults(self) -> None:
        """Take the current runner's defaults for this hardware (its GPUs' memory); the
        runner decides every setting again (nothing pinned)."""
        gpu_total = gpu_total_bytes(self._hardware.hardware)
        self._pinned = frozenset()
        base = runner_defaults(self._runner, gpu_total_bytes=gpu_total)
        if self._runner == "llama-server":  # as the runner's plan does on an AMX CPU
            base = safe_repack(base, self._hardware.hardware.host)
        self._apply(base)

    def update(self, **changes: object) -> None:
        """Change some settings (field names of :class:`~app.settings.Settings`); they
        are pinned: the runner's own fitting leaves them as set."""
        try:
            settings = self._settings.replace(**changes)
        except GGTuneError as err:
            self._publish(dataclasses.replace(self._state, error=str(err)))
            return
        self._pinned = self._pinned | frozenset(changes)
        self._apply(settings)

    def unpin(self, *fields: str) -> None:
        """Let the runner decide ``fields`` again (its defaults and its own fitting)."""
        self._pinned = self._pinned - frozenset(fields)
        self._recompute()

    def set_options(self, **changes: object) -> None:
        """Change the runner's own knobs (fields of :class:`RunnerOptions`)."""
        self._options = dataclasses.replace(self._options, **changes)  # type: ignore[arg-type]
        self._recompute()

    def set_margin(self, margin_bytes: int) -> None:
        """Keep ``margin_bytes`` free on every device (the verdict's safety margin)."""
        self._margin_bytes = margin_bytes
        self._recompute()

    # --- internals ---

    def _apply(self, settings: Settings) -> None:
        if self._model is not None:
            settings = fit_settings(self._model.spec, settings)
        changed = settings != self._settings
        self._settings = settings
        if changed:
            self.settings_changed.emit(settings)
        self._recompute()

    def _recompute(self) -> None:
        self._publish(self._compute())

    def _publish(self, state: EstimateState) -> None:
        self._state = state
        self.state_changed.emit(state)

    def _projector(self) -> Projector | None:
        """The projector found for the open file (once per file; catalog: none)."""
        model = self._model
        if model is None or model.is_catalog or not os.path.isfile(model.path):
            return None
        if model.path not in self._projectors:
            found = None
            try:
                hit = find_projector(model.path)
                if hit is not None:
                    found = read_projector(hit[0], source=hit[1])
            except (GGTuneError, OSError):
                found = None  # an unreadable projector is left out, not guessed
            self._projectors[model.path] = found
        return self._projectors[model.path]

    def _compute(self) -> EstimateState:
        est: MemoryEstimate | None = None
        judged: Verdict | None = None
        error: str | None = None
        plan: RunnerPlan | None = None
        runs = self._settings
        spec = self.spec
        if spec is not None:
            try:
                given = {f: getattr(self._settings, f) for f in self._pinned}
                plan = plan_runner(
                    spec,
                    self._runner,
                    self._hardware.hardware,
                    given=given,
                    options=self._options,
                    projector=self._projector(),
                )
                runs = plan.settings
                est = plan.estimate
                judged = verdict(est, margin_bytes=self._margin_bytes)
            except GGTuneError as err:
                error = str(err)
        return EstimateState(
            model=self._model,
            quant=self._quant,
            spec=spec,
            settings=runs,
            runner=self._runner,
            hardware=self._hardware,
            estimate=est,
            verdict=judged,
            error=error,
            margin_bytes=self._margin_bytes,
            requested=self._settings,
            plan=plan,
            pinned=self._pinned,
        )
