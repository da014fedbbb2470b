"""The Quantization dropdown's badges: each level's size and whether it runs here, how fast.

:class:`QuantBadgeController` works out, on the job pool, the badge of the open file and of
every level it can be simulated at (:func:`app.planning.badges.quant_badges`: each level's
Compare row, as the runner chosen would run it, the same badge as the hub search's) for
the settings and hardware in force, while the dropdown's list is open, debounced
(:class:`~ui.desktop.shared.jobs.LatestJob`), and announces them with ``badges_changed``;
the Settings panel's :class:`BadgeComboBox` draws them after each level's title.
The levels' specs are simulated once per model by the estimate controller; the badges
take those specs
(:meth:`~ui.desktop.shared.estimate_controller.EstimateController.simulated_specs`) and
never simulate again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from PySide6.QtCore import QEvent, QModelIndex, QObject, QPersistentModelIndex, Qt, Signal
from PySide6.QtWidgets import QComboBox, QStyledItemDelegate, QStyleOptionViewItem, QWidget

from app.model.spec import ModelSpec
from app.planning.badges import Badge, quant_badges
from app.planning.compare import RunnerChoice
from app.planning.options import QuantOption, own_quant_name
from app.predict.speed import SpeedFactors
from ui.desktop.compare.rows import runner_choice
from ui.desktop.shared.estimate_controller import (
    EstimateController,
    EstimateState,
    QuantChoice,
)
from ui.desktop.shared.jobs import LatestJob
from ui.desktop.shared.speed import SpeedController, model_file_bytes

OWN: Final = ""
"""The key of the open file's own level in ``badges_changed`` (the dropdown's data for it)."""


SUFFIX_ROLE: Final = int(Qt.ItemDataRole.UserRole) + 1
"""Where a dropdown item keeps the words drawn after its title (", 241 MiB — fits on GPU,
~40 tok/s"); the item's own text stays the title, so the closed box keeps its width."""


class BadgeSuffixDelegate(QStyledItemDelegate):
    """Draw each dropdown item's title followed by its :data:`SUFFIX_ROLE` words (GUI
    thread); the item's ForegroundRole colours them."""

    def initStyleOption(
        self, option: QStyleOptionViewItem, index: QModelIndex | QPersistentModelIndex
    ) -> None:
        """Append the item's badge words to its text."""
        super().initStyleOption(option, index)
        suffix = index.data(SUFFIX_ROLE)
        if isinstance(suffix, str) and suffix:
            option.text = f"{option.text}{suffix}"


class BadgeComboBox(QComboBox):
    """A combo box whose list draws each item's :data:`SUFFIX_ROLE` words after its text
    (:class:`BadgeSuffixDelegate`) and opens wide enough for them, kept on the screen
    (Qt sizes the list by the item texts alone, and a wider view was cut at the screen's
    edge). GUI thread."""

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self.setItemDelegate(BadgeSuffixDelegate(self))
        # badges that arrive while the list is open widen it there and then
        self.model().dataChanged.connect(lambda *_args: self._fit_popup())

    def popup_width(self) -> int:
        """Return the width the list needs for its longest title and badge, pixels."""
        metrics = self.view().fontMetrics()
        widest = 0
        for i in range(self.count()):
            suffix = self.itemData(i, SUFFIX_ROLE)
            text = self.itemText(i) + (suffix if isinstance(suffix, str) else "")
            widest = max(widest, metrics.horizontalAdvance(text))
        scroll = self.view().verticalScrollBar().sizeHint().width()
        return widest + 4 * metrics.averageCharWidth() + scroll

    def showPopup(self) -> None:
        """Open the list, widened to :meth:`popup_width` and moved back onto the screen."""
        super().showPopup()
        self._fit_popup()

    def _fit_popup(self) -> None:
        if not self.view().isVisible():
            return
        popup = self.view().window()
        want = self.popup_width()
        if popup is self.window() or want <= popup.width():
            return
        geometry = popup.geometry()
        screen = self.screen().availableGeometry()
        geometry.setWidth(min(want, screen.width()))
        if geometry.right() > screen.right():
            geometry.moveRight(screen.right())
        if geometry.left() < screen.left():
            geometry.moveLeft(screen.left())
        popup.setGeometry(geometry)


@dataclass(frozen=True, slots=True)
class LevelBadge:
    """One dropdown level: the bytes of its file (weights at that level) and its badge."""

    size_bytes: int
    badge: Badge


def level_options(
    spec: ModelSpec, choices: tuple[QuantChoice, ...], simulated: Mapping[str, ModelSpec]
) -> tuple[QuantOption, ...]:
    """Return the open file and each of ``choices`` as quant options, the levels' specs
    from ``simulated`` (the estimate controller's: nothing is simulated again; a level not
    there is left out). Reads the file's size (pool)."""
    own = QuantOption(
        name=own_quant_name(spec),
        spec=spec,
        file_bytes=model_file_bytes(spec) or spec.weights_bytes,
        on_disk=True,
    )
    levels = [
        QuantOption(
            name=c.name,
            spec=simulated[c.name],
            file_bytes=c.weights_bytes or simulated[c.name].weights_bytes,
            on_disk=False,
            needs_imatrix=c.needs_imatrix,
        )
        for c in choices
        if c.name in simulated
    ]
    return (own, *levels)


def level_badges(
    options: tuple[QuantOption, ...],
    state: EstimateState,
    factors: SpeedFactors,
    runner: RunnerChoice,
) -> dict[str, LevelBadge]:
    """Return each level's size and badge, the open file's under :data:`OWN` (pure)."""
    badges = quant_badges(options, state.settings, state.hardware.hardware, factors, runner)
    out: dict[str, LevelBadge] = {}
    for i, o in enumerate(options):
        if o.name in badges:
            out[OWN if i == 0 else o.name] = LevelBadge(o.file_bytes, badges[o.name])
    return out


_Outcome = tuple[object, tuple[QuantOption, ...], dict[str, LevelBadge]]
"""A job's answer: the state it is for, the model's levels as quant options, their badges."""


class QuantBadgeController(QObject):
    """The dropdown's badges for the state in force (GUI thread; the work on the pool).

    Worked out only while the dropdown's list is open (:meth:`watch`): a level's badge
    costs an estimate and the runner's own fitting (35 levels: 0.1-0.3 s of one core
    with warm caches, up to 3.4 s cold for a 27B model that does not fit; bench/
    bench_badges.py, docs/benchmarks.md), which a slider drag must not pay for a list
    nobody looks at. A change of the state clears the badges at once (never a stale one) and, with
    the list open, works them out again.

    ``badges_changed(dict[str, LevelBadge])``: by level name, the open file's under
    :data:`OWN`; an empty dict when they no longer hold.
    """

    badges_changed = Signal(object)

    DELAY_MS: Final = 300

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
        self._badges: dict[str, LevelBadge] = {}
        self._shown_key: object = None
        self._asked_key: object = None
        self._view: QWidget | None = None
        self._open = False
        self._job = LatestJob(self.DELAY_MS, self._on_job_done, self._on_job_failed, self)
        estimates.state_changed.connect(lambda _state: self.refresh())
        estimates.quant_choices_changed.connect(lambda _choices: self.refresh(now=True))
        speed.factors_changed.connect(lambda _factors: self.refresh())

    @property
    def badges(self) -> Mapping[str, LevelBadge]:
        """The badges shown now, by level (the open file's under :data:`OWN`)."""
        return self._badges

    @property
    def busy(self) -> bool:
        """Whether new badges are being worked out."""
        return self._job.busy

    def watch(self, combo: QComboBox) -> None:
        """Work the badges out whenever ``combo``'s list opens (and while it is open)."""
        self._view = combo.view()
        self._view.installEventFilter(self)

    def eventFilter(self, watched: QObject, event: QEvent) -> bool:
        """Note the list opening and closing (never eats the event)."""
        if watched is self._view:
            if event.type() == QEvent.Type.Show:
                self._open = True
                self.refresh(now=True)
            elif event.type() == QEvent.Type.Hide:
                self._open = False
        return False

    def _state_key(self) -> object:
        state = self._estimates.state
        if state.model is None or self._estimates.quant_choices_pending:
            return None
        return (
            state.model.spec.path,
            self._estimates.quant_choices(),
            state.settings,
            state.hardware.hardware,
            self._speed.factors,
            runner_choice(state),
        )

    def refresh(self, *, now: bool = False) -> None:
        """Clear badges that no longer hold; with the list open, work them out for the
        state in force (debounced unless ``now``)."""
        key = self._state_key()
        if key != self._shown_key and self._badges:
            self._badges = {}
            self._shown_key = None
            self.badges_changed.emit({})
        if key is None or not self._open or key in (self._asked_key, self._shown_key):
            return
        self._asked_key = key
        state = self._estimates.state
        assert state.model is not None, "a key has a model"
        spec = state.model.spec
        choices = self._estimates.quant_choices()
        simulated = self._estimates.simulated_specs()
        factors = self._speed.factors
        runner = runner_choice(state)
        cached = self._options
        known = cached[1] if cached is not None and cached[0] == spec.path else None

        def job() -> _Outcome:
            options = known if known is not None else level_options(spec, choices, simulated)
            return key, options, level_badges(options, state, factors, runner)

        self._job.request(job, now=now)

    def _on_job_done(self, outcome: _Outcome) -> None:
        key, options, badges = outcome
        self._asked_key = None
        if key != self._state_key():
            self.refresh()  # the state moved meanwhile
            return
        state = self._estimates.state
        assert state.model is not None, "a key has a model"
        self._options = (state.model.spec.path, options)
        self._badges = badges
        self._shown_key = key
        self.badges_changed.emit(badges)

    def _on_job_failed(self, _error: Exception) -> None:
        # quant_badges gives a refused level its own badge; anything else leaves the
        # dropdown without badges, and the next change or opening tries again
        self._asked_key = None
