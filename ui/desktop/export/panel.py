"""The Export tab: the settings on screen in a runner's own format, live, with Copy and Save….

:class:`ExportPanel` shows the preview of
:class:`~ui.desktop.export.controller.ExportController` (made by
:mod:`ui.desktop.export.preview`) and writes files through
:func:`~app.export.common.write_text_atomic`, asking before it replaces anything; the
questions go through :attr:`ExportPanel.ask_save_path` and :attr:`ExportPanel.confirm`, which
tests replace.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from PySide6.QtCore import Qt, Signal
from PySide6.QtGui import QFontDatabase, QGuiApplication
from PySide6.QtWidgets import (
    QComboBox,
    QFileDialog,
    QHBoxLayout,
    QLabel,
    QPlainTextEdit,
    QPushButton,
    QVBoxLayout,
    QWidget,
)

from app.errors import GGTuneError
from app.export.common import write_text_atomic
from app.export.targets import TARGETS
from ui.desktop.export.controller import ExportController
from ui.desktop.export.preview import SYSTEM_TITLES, ExportPreview
from ui.desktop.shared.banner import MessageBanner
from ui.desktop.shared.estimate_controller import RUNNER_TITLES
from ui.desktop.shared.model_card import describe_error
from ui.desktop.shared.widgets import confirm


def _ask_save_path(parent: QWidget, suggested: str) -> str | None:
    # We ask about overwriting ourselves (and then pass overwrite=True), so the dialog must not.
    path, _ = QFileDialog.getSaveFileName(
        parent,
        "Save the export",
        suggested,
        "All files (*)",
        options=QFileDialog.Option.DontConfirmOverwrite,
    )
    return path or None


class ExportPanel(QWidget):
    """Runner and system choice, the live preview, notes, Copy / Save… (GUI thread).

    ``ask_save_path(parent, suggested) -> path | None`` and ``confirm(parent, title, text)
    -> bool`` are the dialogs; tests replace them so nothing blocks.
    """

    saved = Signal(str)

    def __init__(self, controller: ExportController, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        self._controller = controller
        self.ask_save_path: Callable[[QWidget, str], str | None] = _ask_save_path
        self.save_folder = str(Path.home())
        self.confirm: Callable[[QWidget, str, str], bool] = confirm
        layout = QVBoxLayout(self)

        row = QHBoxLayout()
        self.target_combo = QComboBox()
        self.target_combo.setAccessibleName("Export for")
        self.target_combo.setToolTip("Which program should run the model with these settings")
        for target in TARGETS:
            self.target_combo.addItem(RUNNER_TITLES[target], target)
        target_label = QLabel("E&xport for:")
        target_label.setBuddy(self.target_combo)
        row.addWidget(target_label)
        row.addWidget(self.target_combo)
        self.system_combo = QComboBox()
        self.system_combo.setAccessibleName("System")
        self.system_combo.setToolTip("Whose shell and service manager the instructions are for")
        for system, title in SYSTEM_TITLES.items():
            self.system_combo.addItem(title, system)
        system_label = QLabel("&System:")
        system_label.setBuddy(self.system_combo)
        row.addSpacing(12)
        row.addWidget(system_label)
        row.addWidget(self.system_combo)
        row.addStretch(1)
        layout.addLayout(row)

        self.notes_label = QLabel()
        self.notes_label.setObjectName("exportNotes")
        self.notes_label.setWordWrap(True)
        self.notes_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        self.notes_label.setAccessibleName("Export notes")
        layout.addWidget(self.notes_label)

        self.preview = QPlainTextEdit()
        self.preview.setReadOnly(True)
        # wrap long command lines on screen (Copy and Save take the text, not the wrapping)
        self.preview.setLineWrapMode(QPlainTextEdit.LineWrapMode.WidgetWidth)
        self.preview.setFont(QFontDatabase.systemFont(QFontDatabase.SystemFont.FixedFont))
        self.preview.setAccessibleName("Export preview")
        layout.addWidget(self.preview, 1)

        buttons = QHBoxLayout()
        self.copy_button = QPushButton("C&opy")
        self.copy_button.setToolTip("Copy everything shown to the clipboard")
        self.copy_button.clicked.connect(self.copy)
        self.save_button = QPushButton("S&ave…")
        self.save_button.clicked.connect(self.save)
        self.lmstudio_button = QPushButton("&Write to LM Studio's config")
        self.lmstudio_button.setToolTip(
            "Write these load settings into LM Studio's per-model config file "
            "(a backup of the old file is kept beside it)"
        )
        self.lmstudio_button.clicked.connect(self.write_lmstudio)
        self.status_label = QLabel()
        self.status_label.setWordWrap(True)
        self.status_label.setTextInteractionFlags(Qt.TextInteractionFlag.TextSelectableByMouse)
        buttons.addWidget(self.copy_button)
        buttons.addWidget(self.save_button)
        buttons.addWidget(self.lmstudio_button)
        buttons.addWidget(self.status_label, 1)
        layout.addLayout(buttons)
        self.banner = MessageBanner(name="export_banner")
        layout.addWidget(self.banner)

        self.target_combo.currentIndexChanged.connect(self._on_target_combo_changed)
        self.system_combo.currentIndexChanged.connect(self._on_system_combo_changed)
        controller.preview_changed.connect(self._on_controller_preview_changed)
        self._sync_combos()
        self._on_controller_preview_changed(controller.preview)

    # --- actions ---

    def copy(self) -> None:
        """Put the preview on the clipboard."""
        self.banner.hide()
        preview = self._controller.preview
        if preview is None or preview.error:
            return
        QGuiApplication.clipboard().setText(preview.text)
        self.status_label.setText("Copied to the clipboard.")

    def save(self) -> None:
        """Ask for a file and write the export there atomically (asks before replacing)."""
        self.banner.hide()
        preview = self._controller.preview
        if preview is None or preview.error:
            return
        # in the folder saved to last, else the home folder (never the current directory)
        path = self.ask_save_path(self, os.path.join(self.save_folder, preview.filename))
        if not path:
            return
        exists = os.path.exists(path)
        if exists and not self.confirm(
            self, "Replace the file?", f"{path} already exists. Replace it?"
        ):
            self.status_label.setText("Not saved: the file was kept.")
            return
        try:
            written = write_text_atomic(path, preview.file_text, overwrite=exists)
        except (GGTuneError, OSError) as err:
            self._show_error(f"Not saved: {describe_error(err)}")
            return
        if preview.file_text.startswith("#!"):  # a script runs as saved (issue 18)
            try:
                mode = written.stat().st_mode
                written.chmod(mode | ((mode & 0o444) >> 2))  # executable where readable
            except OSError as err:
                self._show_error(f"Saved, but not made executable: {describe_error(err)}")
                return
        self.save_folder = str(Path(written).parent)
        self.status_label.setText(f"Saved {written}")
        self.saved.emit(str(written))

    def write_lmstudio(self) -> None:
        """Write the settings into LM Studio's per-model config, after asking."""
        self.banner.hide()
        from app.export.lmstudio import write_lmstudio_config

        preview = self._controller.preview
        if preview is None or preview.lmstudio is None or preview.lmstudio.config_path is None:
            return
        target = preview.lmstudio.config_path
        exists = target.exists()
        question = (
            f"Write these load settings into {target}? Its other settings are kept and the "
            "old file is saved beside it first."
            if exists
            else f"Create {target} with these load settings?"
        )
        if not self.confirm(self, "Write to LM Studio's config", question):
            return
        try:
            written = write_lmstudio_config(preview.lmstudio, overwrite=exists)
        except (GGTuneError, OSError) as err:
            self._show_error(f"Not written: {describe_error(err)}")
            return
        self.status_label.setText(f"Wrote {written}")
        self.saved.emit(str(written))

    # --- slots ---

    def _on_target_combo_changed(self, index: int) -> None:
        target = self.target_combo.itemData(index)
        if target in TARGETS and target != self._controller.target:
            self._controller.set_target(target)

    def _on_system_combo_changed(self, index: int) -> None:
        system = self.system_combo.itemData(index)
        if system in SYSTEM_TITLES and system != self._controller.system:
            self._controller.set_system(system)

    def _on_controller_preview_changed(self, preview: ExportPreview | None) -> None:
        self._sync_combos()
        self.status_label.clear()
        if preview is None:
            self.preview.setPlainText("")
            self.notes_label.setText("Open a model to export its settings.")
            self._style_notes(error=False)
        elif preview.error is not None:
            self.preview.setPlainText("")
            title = RUNNER_TITLES[preview.target]
            self.notes_label.setText(f"{title} cannot run these settings: {preview.error}")
            self._style_notes(error=True)
        else:
            self._set_text_keeping_scroll(preview.text)
            notes = preview.notes
            self.notes_label.setText(
                "Exact: the runner will use these settings as they are."
                if not notes
                else "\n".join(f"• {n}" for n in notes)
            )
            self._style_notes(error=False)
        usable = preview is not None and preview.error is None
        self.copy_button.setEnabled(usable)
        self.save_button.setEnabled(usable)
        if preview is not None:
            self.save_button.setToolTip(f"Save as a file ({preview.filename or 'nothing to save'})")
        lms = preview.lmstudio if preview is not None else None
        self.lmstudio_button.setVisible(preview is not None and preview.target == "lmstudio")
        self.lmstudio_button.setEnabled(lms is not None and lms.config_path is not None)

    # --- helpers ---

    def _sync_combos(self) -> None:
        for combo, value in (
            (self.target_combo, self._controller.target),
            (self.system_combo, self._controller.system),
        ):
            index = combo.findData(value)
            if index != combo.currentIndex():
                combo.blockSignals(True)
                combo.setCurrentIndex(index)
                combo.blockSignals(False)

    def _set_text_keeping_scroll(self, text: str) -> None:
        if self.preview.toPlainText() == text:
            return
        bar = self.preview.verticalScrollBar()
        position = bar.value()
        self.preview.setPlainText(text)
        bar.setValue(min(position, bar.maximum()))

    def _style_notes(self, *, error: bool) -> None:
        self.notes_label.setStyleSheet(
            "#exportNotes { background: #fdecea; color: #7f1d1d; border: 1px solid #e57373;"
            " border-radius: 4px; padding: 4px; }"
            if error
            else ""
        )

    def _show_error(self, text: str) -> None:
        self.status_label.clear()
        self.banner.show_message(text)
