"""The Compare tab's controller: which rows are on screen, worked out on the job pool.

:class:`CompareController` simulates the quant options once per model and recomputes the
rows (:mod:`ui.desktop.compare.rows`) debounced, when the settings, the model, the
hardware or the speed factors change; :meth:`CompareController.compare_repo` switches to a
Hugging Face repo's files, :meth:`CompareController.show_model` back to the open model.
"""

from __future__ import annotations

from typing import Final

from PySide6.QtCore import (
    QObject,
    Signal,
)

from app.errors import GGTuneError
from app.planning.compare import HUB_ORIGIN, CompareRow
from app.planning.options import QuantOption
from app.sources.hf import (
    ModelEntry,
    RepoListing,
)
from app.sources.refs import parse_repo
from ui.desktop.compare.rows import (
    CompareResult,
    RepoHeaders,
    compare_options,
    compare_table,
    read_repo,
    repo_table,
    runner_choice,
)
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState
from ui.desktop.shared.jobs import LatestJob
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.speed import SpeedController


class CompareController(QObject):
    """Quant levels side by side for the main screen's state (GUI thread).

    Signals: ``result_changed(CompareResult)``, ``failed(str)`` (one line, no traceback),
    ``busy_changed(bool)``, ``repo_changed(object)`` (the repo text compared, or None for
    the open model). Work runs on the job pool, ``DELAY_MS`` after the last change.
    """

    result_changed = Signal(object)
    failed = Signal(str)
    busy_changed = Signal(bool)
    repo_changed = Signal(object)

    DELAY_MS: Final = 150

    def __init__(
        self,
        estimates: EstimateController,
        speed: SpeedController,
        parent: QObject | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._speed = speed
        self._options: tuple[str, tuple[QuantOption, ...]] | None = None
        self._result: CompareResult | None = None
        self._key: tuple[object, ...] | None = None
        self._active = False
        self._repo: str | None = None
        self._headers: RepoHeaders | None = None
        self._job = LatestJob(self.DELAY_MS, self._on_job_done, self._on_job_failed, self)
        self._job.busy_changed.connect(self.busy_changed)
        estimates.state_changed.connect(self._on_estimates_state_changed)
        speed.factors_changed.connect(lambda _f: self.refresh())
        self.refresh()

    @property
    def result(self) -> CompareResult | None:
        """The rows shown now (None before the first model)."""
        return self._result

    @property
    def busy(self) -> bool:
        """Whether new rows are being worked out."""
        return self._job.busy

    @property
    def repo(self) -> str | None:
        """The repo being compared (as typed), or None for the open model's quants."""
        return self._repo

    def hub_entry(self, row: CompareRow) -> tuple[RepoListing, ModelEntry] | None:
        """Return the listing and model entry behind the hub row ``row`` (all its shards),
        or None when ``row`` is not a hub row of the repo shown or its header was not read.
        """
        headers = self._headers
        if row.origin != HUB_ORIGIN or row.error or headers is None:
            return None
        result = self._result
        if result is None or result.repo != headers.listing.repo_id or headers.text != self._repo:
            return None
        for m in headers.models:
            if m.entry.name == row.name:
                return headers.listing, m.entry
        return None

    def compare_repo(self, text: str) -> None:
        """Compare every quant file of the Hugging Face repo ``text`` (GUI thread).

        The listing and headers are read on the pool (once per repo; then only the rows
        follow the settings); a repo that cannot be read is reported by ``failed``.
        """
        text = text.strip()
        try:
            parse_repo(text)
        except GGTuneError as err:
            self.failed.emit(f"Could not read the repo: {describe_error(err)}")
            return
        if text != self._repo:
            self._repo = text
            self.repo_changed.emit(text)
        self._key = None
        self.refresh(now=self._active)

    def show_model(self) -> None:
        """Go back to the open model's quants (GUI thread)."""
        if self._repo is None:
            return
        self._repo = None
        self._key = None
        self._job.cancel()
        self.repo_changed.emit(None)
        self.refresh(now=self._active)

    def refresh(self, *, now: bool = False) -> None:
        """Work the rows out again for the state in force (debounced unless ``now``)."""
        self._on_estimates_state_changed(self._estimates.state, now=now)

    def set_active(self, active: bool) -> None:
        """Work rows out only while the Compare tab is shown (GUI thread).

        Compare runs the estimator and the speed model for every quant level; doing that in
        the background while the tab is hidden costs every slider tick GIL time for nothing.
        """
        self._active = active
        if active:
            self.refresh()

    def _on_estimates_state_changed(self, state: EstimateState, *, now: bool = False) -> None:
        if not (self._active or now):
            return
        if self._repo is not None:
            self._request_repo(state, now=now)
            return
        if state.model is None:
            return
        spec = state.model.spec
        settings = state.settings
        hardware = state.hardware.hardware
        factors = self._speed.factors
        runner = runner_choice(state)
        key = (state.model.path, settings, hardware, factors, runner)
        if key == self._key and not now:
            return
        self._key = key
        cached = self._options
        known = cached[1] if cached is not None and cached[0] == spec.path else None

        def job() -> tuple[tuple[QuantOption, ...], CompareResult]:
            options = known if known is not None else compare_options(spec)
            return options, compare_table(spec, options, settings, hardware, factors, runner)

        first = (
            self._result is None
            or self._result.repo is not None
            or self._result.model_path != spec.path
        )
        self._job.request(job, now=now or first)

    def _request_repo(self, state: EstimateState, *, now: bool) -> None:
        text = self._repo
        assert text is not None, "only in repo mode"
        settings = state.settings
        hardware = state.hardware.hardware
        factors = self._speed.factors
        runner = runner_choice(state)
        key = ("repo", text, settings, hardware, factors, runner)
        if key == self._key and not now:
            return
        self._key = key
        cached = self._headers
        known = cached if cached is not None and cached.text == text else None

        def job() -> tuple[RepoHeaders, CompareResult]:
            headers = known if known is not None else read_repo(text)
            return headers, repo_table(headers, settings, hardware, factors, runner)

        first = known is None or self._result is None or self._result.repo is None
        self._job.request(job, now=now or first)

    def _on_job_done(
        self, outcome: tuple[tuple[QuantOption, ...] | RepoHeaders, CompareResult]
    ) -> None:
        extra, result = outcome
        if isinstance(extra, RepoHeaders):
            if extra.text != self._repo:
                return  # the user went back (or on) meanwhile
            self._headers = extra
        else:
            if self._repo is not None:
                return
            self._options = (result.model_path, extra)
        self._result = result
        self.result_changed.emit(result)

    def _on_job_failed(self, error: Exception) -> None:
        self._key = None  # try again on the next change
        if self._repo is not None:
            self.failed.emit(f"Could not read the repo {self._repo}: {describe_error(error)}")
            return
        self.failed.emit(f"Could not compare the quants: {describe_error(error)}")
