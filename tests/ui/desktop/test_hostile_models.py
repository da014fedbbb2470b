"""The desktop on hostile model files: one plain line in the banner, never a traceback.

A training context past Qt's int32 number boxes, hyperparameters llama.cpp refuses, a
FIFO named .gguf, a header past the reader's limits, and a model name written as rich
text: each must open (with the numbers the estimate uses) or fail in the banner, and the
window keeps the model it showed.
"""

from __future__ import annotations

import os
import struct
from pathlib import Path

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from gguf import GGUFValueType
from PySide6.QtCore import QSettings, Qt
from pytestqt.qtbot import QtBot

from tests.ui.desktop.test_main_window import LOAD_TIMEOUT_MS, make_window
from tests.zoo.dense import SPECS, write_spec
from ui.desktop.main_window import MainWindow
from ui.desktop.shared.estimate_controller import MAX_CONTEXT

U32, I32, STR = GGUFValueType.UINT32, GGUFValueType.INT32, GGUFValueType.STRING


@pytest.fixture
def window(qtbot: QtBot, qsettings: QSettings) -> MainWindow:
    return make_window(qtbot, qsettings)


def _llama(tmp_path: Path, name: str, **overrides: tuple[GGUFValueType, object, None]) -> Path:
    path = tmp_path / f"{name}.gguf"
    write_spec(
        SPECS["llama"],
        path,
        "llama",
        overrides={k.replace("__", "."): v for k, v in overrides.items()},
    )
    return path


def test_a_training_context_past_int32_opens_with_the_box_and_the_estimate_agreeing(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    path = _llama(tmp_path, "huge-ctx", **{"{arch}__context_length": (U32, 2**32 - 1, None)})
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(path))
    state = window.estimates.state
    box = window.settings_panel.context.spin
    assert state.settings.n_ctx <= MAX_CONTEXT
    assert box.value() == state.settings.n_ctx
    assert box.maximum() <= MAX_CONTEXT


@pytest.mark.parametrize(
    ("name", "key", "value"),
    [
        ("kv-heads", "{arch}__attention__head_count_kv", (I32, -(2**31), None)),
        ("no-embd", "{arch}__embedding_length", (U32, 0, None)),
        ("heads-zero", "{arch}__attention__head_count", (U32, 0, None)),
    ],
)
def test_impossible_hyperparameters_fail_in_the_banner(
    qtbot: QtBot,
    window: MainWindow,
    tmp_path: Path,
    name: str,
    key: str,
    value: tuple[GGUFValueType, object, None],
) -> None:
    path = _llama(tmp_path, name, **{key: value})
    demo = window.estimates.model
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.models.open_path(str(path))
    failure = blocker.args[0]
    assert "Traceback" not in failure.message
    assert "llama." in failure.message  # names the key
    assert window.banner.isVisible()
    assert "\n" not in window.banner.label.text()
    assert window.estimates.model is demo


def _header_claiming(tmp_path: Path, count: int) -> Path:
    path = tmp_path / "claims.gguf"
    key = b"tokenizer.ggml.tokens"
    head = b"GGUF" + struct.pack("<IQQ", 3, 0, 1) + struct.pack("<Q", len(key)) + key
    head += struct.pack("<IIQ", 9, 8, count)
    with path.open("wb") as f:
        f.write(head)
        f.truncate(len(head) + 8 * count)
    return path


def test_a_header_past_the_limits_fails_at_once(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    path = _header_claiming(tmp_path, 1 << 30)
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.models.open_path(str(path))
    message = blocker.args[0].message
    assert "64 MiB" in message
    assert "byte" not in message


def test_a_fifo_named_gguf_fails_without_hanging(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    path = tmp_path / "pipe.gguf"
    os.mkfifo(path)
    with qtbot.waitSignal(window.models.model_failed, timeout=LOAD_TIMEOUT_MS) as blocker:
        window.models.open_path(str(path))
    assert "Traceback" not in blocker.args[0].message


def test_a_model_name_is_shown_as_plain_text(
    qtbot: QtBot, window: MainWindow, tmp_path: Path
) -> None:
    rich = "<h1>Big</h1><a href='file:///etc/passwd'>click</a>"
    path = _llama(tmp_path, "rich", general__name=(STR, rich, None))
    with qtbot.waitSignal(window.models.model_loaded, timeout=LOAD_TIMEOUT_MS):
        window.models.open_path(str(path))
    title = window.models_panel.card_title
    assert title.textFormat() == Qt.TextFormat.PlainText
    assert rich in title.text()
