"""The Export tab's controller: :class:`ExportController` re-runs
:func:`~ui.desktop.export.preview.export_preview` on every change of the estimate's state
(GUI thread; the exporters take well under a millisecond)."""

from __future__ import annotations

from pathlib import Path

from PySide6.QtCore import QObject, Signal

from app.export.common import SystemName
from app.export.targets import TARGETS, this_system
from app.settings import RunnerName
from ui.desktop.export.preview import SYSTEM_TITLES, ExportPreview, model_preview
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState


class ExportController(QObject):
    """Keep the export of the estimate's model and settings current (GUI thread).

    ``preview_changed(ExportPreview | None)`` fires on every change (None: no model yet).
    The target follows the runner preset until the user picks another.
    """

    preview_changed = Signal(object)

    def __init__(
        self,
        estimates: EstimateController,
        parent: QObject | None = None,
        *,
        lmstudio_home: Path | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._target: RunnerName = estimates.runner
        self._system: SystemName = this_system()
        self._lmstudio_home = lmstudio_home
        self._preview: ExportPreview | None = None
        estimates.state_changed.connect(self._on_estimates_state_changed)
        estimates.runner_changed.connect(self._on_estimates_runner_changed)
        self._refresh(estimates.state)

    @property
    def preview(self) -> ExportPreview | None:
        """The latest export, or None before a model is open."""
        return self._preview

    @property
    def target(self) -> RunnerName:
        """The runner exported for."""
        return self._target

    @property
    def system(self) -> SystemName:
        """Whose shell and service manager the instructions are for."""
        return self._system

    def set_target(self, target: RunnerName) -> None:
        """Export for ``target``."""
        assert target in TARGETS, f"unknown export target {target!r}"
        self._target = target
        self._refresh(self._estimates.state)

    def set_system(self, system: SystemName) -> None:
        """Write instructions for ``system``."""
        assert system in SYSTEM_TITLES, f"unknown system {system!r}"
        self._system = system
        self._refresh(self._estimates.state)

    def _on_estimates_runner_changed(self, runner: str) -> None:
        if runner in TARGETS:
            self._target = runner

    def _on_estimates_state_changed(self, state: EstimateState) -> None:
        self._refresh(state)

    def _refresh(self, state: EstimateState) -> None:
        model = state.model
        if model is None:
            self._preview = None
        else:
            self._preview = model_preview(
                model, state, self._target, self._system, lmstudio_home=self._lmstudio_home
            )
        self.preview_changed.emit(self._preview)
