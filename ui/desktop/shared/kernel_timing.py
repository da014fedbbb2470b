"""Time this CPU's kernels for the open model in the background, the first time it needs them.

The speed model prices the CPU's share of a model by llama.cpp's own matrix products timed
on this machine (:class:`~app.hardware.kernels.KernelRates`, cached per machine and thread
count). On a machine that never ran a Users test they are missing, and the speed line fell
back on memory bandwidth alone: on the 2-core Xeon of docs/benchmarks.md, Verify's estimate
for the demo model was 64.9 tok/s against 25.7 measured (+152 %); priced by its kernels it
is within the calibrated goal.

:class:`KernelTimingController` watches the estimate. When this machine (or GPUs planned on
it) runs part of the model on its CPU and a weight type, row length or attention kernel the
model needs was not timed, it waits for the settings to rest, then times what is missing
(:func:`runner.kernel_bench.ensure_rates`: a child process, a few seconds a type) on
:func:`~ui.desktop.shared.jobs.background_pool`, and hands the rates to the
:class:`~ui.desktop.shared.hardware.HardwareController`: every tab moves to the priced
figure at once, and later launches read the cache. It never runs beside a Verify run (a
benchmark measures a quiet machine): one starting cancels it (its child is killed), and it
starts again once Verify is done. A timing that fails is not retried for the same needs;
the speed line says the figure is rough (:func:`ui.desktop.shared.speed.speed_text`).

Signals (GUI thread): ``timing(bool)`` when a timing starts / ends; ``timed(object)`` with
the :class:`~app.hardware.kernels.KernelRates`; ``failed(str)``: the one-line reason.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from typing import Final

from PySide6.QtCore import QCoreApplication, QObject, QTimer, Signal

from app.errors import EngineCancelledError
from app.hardware.devices import Hardware
from app.hardware.kernels import KernelRates, cached_rates
from app.model.spec import ModelSpec
from app.predict.speed import KernelNeeds, kernel_needs
from app.settings import Settings
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.hardware import HardwareController
from ui.desktop.shared.jobs import background_pool, run_job
from ui.desktop.shared.model_card import describe_error

DELAY_MS: Final = 1500
"""How long the settings must rest before a timing starts (it loads the CPU for seconds)."""

TimeKernels = Callable[[KernelNeeds, int, KernelRates | None, Callable[[Callable[[], None]], None]],
                       KernelRates]  # fmt: skip
"""``(needs, n_threads, rates known, on_cancel_ready) -> rates``; blocks (a pool thread)."""


def engine_time_kernels(
    needs: KernelNeeds,
    n_threads: int,
    rates: KernelRates | None,
    on_cancel_ready: Callable[[Callable[[], None]], None],
) -> KernelRates:
    """Time what ``needs`` lacks on the real engine and cache it (the app's timer)."""
    from runner.kernel_bench import ensure_rates

    return ensure_rates(needs, n_threads=n_threads, rates=rates, on_cancel_ready=on_cancel_ready)


def host_threads() -> int:
    """Return the thread count the kernels are timed at: llama.cpp's default, the physical
    cores (what Verify's runs and the hardware probe's cache lookup use)."""
    from runner.benchmark import physical_cores

    return physical_cores()


class Cancels:
    """The stops of children a worker thread starts (any thread may call them): a stop
    added after :meth:`cancel` runs at once, so a child that started late dies too."""

    def __init__(self) -> None:
        self.cancelled = False
        self._stops: list[Callable[[], None]] = []

    def add(self, stop: Callable[[], None]) -> None:
        """Keep ``stop`` (an ``on_cancel_ready`` callback); run it now if cancelled."""
        self._stops.append(stop)
        if self.cancelled:
            stop()

    def cancel(self) -> None:
        """Run every stop kept so far, and any added later."""
        self.cancelled = True
        for stop in list(self._stops):
            stop()


KERNELS_STEP: Final = "timing this CPU's kernels (once)"
"""The progress label of a Verify run that times them first."""


def with_kernels(
    spec: ModelSpec,
    settings: Settings,
    hardware: Hardware,
    *,
    on_step: Callable[[str], None],
    on_cancel_ready: Callable[[Callable[[], None]], None],
) -> Hardware:
    """Return ``hardware`` with this CPU's kernel rates for ``spec`` at ``settings``, timed
    now (saying :data:`KERNELS_STEP` to ``on_step``) where neither the hardware nor the
    cache has them. Blocks: a worker thread (Verify's benchmark and Users runs)."""
    from app.hardware.bandwidth import machine_key
    from app.hardware.host import probe_host
    from runner.kernel_bench import ensure_rates

    needs = kernel_needs(spec, settings, hardware)
    if not needs:  # the CPU runs no product: nothing to price
        return hardware
    threads = host_threads()
    known = hardware.host.kernels
    if known is None or known.n_threads != threads:
        known = cached_rates(machine_key(probe_host()), threads)
    if known is not None and not needs.missing(known):
        rates = known
    else:
        on_step(KERNELS_STEP)
        rates = ensure_rates(needs, n_threads=threads, rates=known, on_cancel_ready=on_cancel_ready)
    host = dataclasses.replace(hardware.host, kernels=rates)
    return dataclasses.replace(hardware, host=host)


class KernelTimingController(QObject):
    """Time the open model's missing CPU kernels in the background (see the module doc)."""

    timing = Signal(bool)
    timed = Signal(object)
    failed = Signal(str)

    def __init__(
        self,
        estimates: EstimateController,
        hardware: HardwareController,
        parent: QObject | None = None,
        *,
        delay_ms: int = DELAY_MS,
        time_kernels: TimeKernels = engine_time_kernels,
        n_threads: int | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._hardware = hardware
        self._time_kernels = time_kernels
        self._threads = n_threads
        self._paused = False
        self._running: Cancels | None = None  # the timing in flight
        self._given_up: set[KernelNeeds] = set()
        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(delay_ms)
        self._timer.timeout.connect(self._on_timer_timeout)
        estimates.state_changed.connect(self._on_state_changed)
        hardware.local_detected.connect(lambda _h: self._on_state_changed(estimates.state))
        app = QCoreApplication.instance()
        if app is not None:
            app.aboutToQuit.connect(self.stop)
        self.destroyed.connect(self._kill)

    @property
    def busy(self) -> bool:
        """Whether a timing is waiting for the settings to rest or running."""
        return self._timer.isActive() or self._running is not None

    @property
    def running(self) -> bool:
        """Whether a timing runs now (its child process measuring)."""
        return self._running is not None

    def set_paused(self, paused: bool) -> None:
        """Hold timings off (a Verify run started: its child is killed) or let them go on."""
        self._paused = paused
        if paused:
            self._timer.stop()
            self._cancel_running()
        else:
            self._on_state_changed(self._estimates.state)

    def stop(self) -> None:
        """Stop for good (the window closes): no timing waits or runs after this."""
        self._paused = True
        self._timer.stop()
        self._cancel_running()

    def missing(self, state: EstimateState | None = None) -> KernelNeeds | None:
        """Return what the current model lacks on this CPU, or None when nothing is to be
        timed: no model, not this machine, the CPU runs nothing, or all was timed."""
        state = state or self._estimates.state
        local = self._hardware.local
        spec = state.spec or (state.model.spec if state.model is not None else None)
        if spec is None or local is None or state.error is not None:
            return None
        if state.hardware.source not in ("local", "planned"):
            return None  # a profile's CPU is another machine's
        try:
            needs = kernel_needs(spec, state.settings, state.hardware.hardware)
        except Exception:  # an architecture the placement cannot place: no speed either
            return None
        known = local.host.kernels
        if known is not None and known.n_threads != self._n_threads():
            known = None
        missing = needs.missing(known)
        return missing if missing else None

    def _n_threads(self) -> int:
        if self._threads is None:
            self._threads = host_threads()
        return self._threads

    def _on_state_changed(self, state: EstimateState) -> None:
        if self._paused or self._running is not None:
            return
        self._timer.stop()
        if self._hardware.local is not None and state.model is not None:
            self._timer.start()

    def _on_timer_timeout(self) -> None:
        if self._paused or self._running is not None:
            return
        missing = self.missing()
        if missing is None or missing in self._given_up:
            return
        local = self._hardware.local
        assert local is not None, "missing() is None before the probe answered"
        known = local.host.kernels
        threads = self._n_threads()
        run = Cancels()
        self._running = run
        self.timing.emit(True)

        def job() -> KernelRates:
            return self._time_kernels(missing, threads, known, run.add)

        def done(rates: KernelRates) -> None:
            if self._running is not run:
                return
            self._running = None
            self._hardware.set_host_kernels(rates)
            self.timing.emit(False)
            self.timed.emit(rates)

        def failed(error: Exception) -> None:
            if self._running is not run:
                return
            self._running = None
            self.timing.emit(False)
            if isinstance(error, EngineCancelledError):
                return
            self._given_up.add(missing)
            self.failed.emit(f"Could not time this CPU's kernels: {describe_error(error)}")

        run_job(job, on_success=done, on_failure=failed, parent=self, pool=background_pool())

    def _cancel_running(self) -> None:
        running, self._running = self._running, None
        if running is not None:
            self.timing.emit(False)
            running.cancel()

    def _kill(self) -> None:
        if self._running is not None:
            self._running.cancel()
