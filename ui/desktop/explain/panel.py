"""The Explain tab: what happens between prompt and answer, with the open model's numbers.

The words come from :func:`app.planning.explain.explain_facts` /
:func:`app.planning.explain.sections_from_facts`
(pure); the tab only renders them: the sections as simple HTML in a
:class:`QTextBrowser` (:mod:`ui.desktop.explain.sections`, which also tells them for a
catalog model, one with no file yet), and three small painted pictures
(:mod:`ui.desktop.explain.pictures`) — where the memory goes, what one new token reads (and
so the speed bound), and the KV cache layer by layer.

Cost: the explanation runs a few estimates (~15 ms), so it is refreshed ``DELAY_MS`` after
the settings rest, and only while the tab is visible; a hidden tab just notes that it is
out of date and catches up in :meth:`ExplainPanel.showEvent`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Final

from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QShowEvent
from PySide6.QtWidgets import QLabel, QSplitter, QTextBrowser, QVBoxLayout, QWidget

from app.errors import GGTuneError
from app.planning.explain import Section, explain_facts, sections_from_facts
from app.planning.options import own_quant_name
from app.predict.speed import SpeedFactors
from app.units import format_bytes, format_tps
from ui.desktop.explain.pictures import (
    LayerCacheWidget,
    StackedBar,
    layer_kinds,
    memory_segments,
    read_segments,
)
from ui.desktop.explain.sections import catalog_sections, sections_html
from ui.desktop.shared.estimate_controller import EstimateController, EstimateState


class ExplainPanel(QWidget):
    """The Explain tab (GUI thread). ``factors`` returns the speed factors in force.

    ``refresh_count`` counts explanations built (tests check hidden tabs cost nothing).
    """

    DELAY_MS: Final = 100

    def __init__(
        self,
        estimates: EstimateController,
        factors: Callable[[], SpeedFactors] | None = None,
        parent: QWidget | None = None,
    ) -> None:
        super().__init__(parent)
        self._estimates = estimates
        self._factors = factors or SpeedFactors
        self._dirty = True
        self._sections: tuple[Section, ...] = ()
        self.refresh_count = 0

        self.memory_bar = StackedBar("Where the memory goes")
        self.read_bar = StackedBar("What one new token reads")
        self.layers = LayerCacheWidget()
        self.message = QLabel()
        self.message.setWordWrap(True)
        self.message.hide()
        pictures = QWidget()
        column = QVBoxLayout(pictures)
        column.setContentsMargins(0, 0, 0, 0)
        column.addWidget(self.memory_bar)
        column.addWidget(self.read_bar)
        column.addWidget(self.layers)
        column.addStretch(1)
        self.text = QTextBrowser()
        self.text.setOpenExternalLinks(False)
        self.text.setAccessibleName("Explanation")
        splitter = QSplitter(Qt.Orientation.Vertical)
        splitter.addWidget(pictures)
        splitter.addWidget(self.text)
        splitter.setStretchFactor(1, 1)
        splitter.setChildrenCollapsible(False)
        layout = QVBoxLayout(self)
        layout.setContentsMargins(6, 6, 6, 6)
        layout.addWidget(self.message)
        layout.addWidget(splitter, 1)

        self._timer = QTimer(self)
        self._timer.setSingleShot(True)
        self._timer.setInterval(self.DELAY_MS)
        self._timer.timeout.connect(self.refresh)
        estimates.state_changed.connect(self._on_estimates_state_changed)

    @property
    def sections(self) -> tuple[Section, ...]:
        """The sections shown now."""
        return self._sections

    @property
    def dirty(self) -> bool:
        """Whether the text is older than the settings (refreshed when shown)."""
        return self._dirty

    def section(self, key: str) -> Section | None:
        """Return the section called ``key`` ("kv", "speed"…), or None."""
        return next((s for s in self._sections if s.key == key), None)

    def _on_estimates_state_changed(self, _state: EstimateState) -> None:
        self._dirty = True
        if self.isVisible():
            self._timer.start()

    def showEvent(self, event: QShowEvent) -> None:
        """Catch up with changes made while the tab was hidden."""
        super().showEvent(event)
        if self._dirty:
            self.refresh()

    def refresh(self) -> None:
        """Rebuild the explanation for the current state."""
        self._timer.stop()
        self._dirty = False
        self.refresh_count += 1
        state = self._estimates.state
        if state.model is None:
            self._show_message("Open a model to see how it works.")
            return
        if state.estimate is None:
            self._show_message(
                f"These settings cannot run ({state.error}); showing the last ones that could."
            )
            return
        try:
            facts = explain_facts(
                state.spec or state.model.spec,
                state.settings,
                state.estimate,
                state.hardware.hardware,
                factors=self._factors(),
            )
        except GGTuneError as err:
            self._show_message(f"Could not explain these settings: {err}")
            return
        self.message.hide()
        self._sections = sections_from_facts(facts)
        if state.model.is_catalog:
            self._sections = catalog_sections(
                self._sections,
                state.model.card.title,
                state.quant,
                own_quant_name(state.model.spec),
                facts.bits_per_weight,
            )
        bar = self.text.verticalScrollBar()
        position = bar.value()
        self.text.setHtml(sections_html(self._sections, self.palette()))
        bar.setValue(position)
        self.memory_bar.set_bar(
            f"Where the memory goes: {format_bytes(facts.total_bytes, down_to='bytes')} in all",
            memory_segments(facts),
        )
        if facts.bound_tok_per_s > 0:
            gbs = facts.bandwidth_bytes_per_s / 1e9
            caption = (
                "What one new token reads: "
                f"{format_bytes(facts.bytes_per_token_read, down_to='bytes')} "
                f"÷ {gbs:.0f} GB/s → at most {format_tps(facts.bound_tok_per_s)} tokens/s"
            )
            self.read_bar.set_bar(caption, read_segments(facts))
            self.read_bar.show()
        else:
            self.read_bar.hide()
        self.layers.set_facts(facts, layer_kinds(state))

    def _show_message(self, text: str) -> None:
        self.message.setText(text)
        self.message.show()
