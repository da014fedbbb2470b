"""The screens of issue 18 on a real X11 desktop (Xvfb + openbox), whole-screen grabs::

    .venv/bin/python -m tests.ui.screens docs/screenshots/issue18 [NAME,NAME…]

Each screen starts the app with a settings folder of its own, prepared as a user's would be
after answering one of the two questions of issue 18's "Done when" (the settings are
remembered per model, the hardware plan for all): Qwen3-8B Q4_K_M at 32k on an RTX 3060
12 GB + 32 GB, and Gemma 3 27B at 16k on a 24 GB GPU (an RTX 4090 + 64 GB). docs/screens.md
says what was looked at.
"""

from __future__ import annotations

import json
import shutil
import sys
import tempfile
from pathlib import Path

from PySide6.QtCore import QSettings

from app.hardware.profiles import compose
from tests.ui import x11
from ui.desktop.settings.remembered import HARDWARE_KEY, hardware_to_json, model_key
from ui.desktop.shared.hardware import HardwareChoice, describe_hardware


def key(path: str) -> str:
    """The settings key :mod:`ui.desktop.settings.remembered` keeps ``path``'s settings at."""
    import hashlib

    from ui.desktop.settings.remembered import MODEL_GROUP

    return f"{MODEL_GROUP}/" + hashlib.sha256(path.encode()).hexdigest()[:24]


SCENARIOS = {
    "qwen": ("RTX 3060 + 32 GB", "catalog:qwen3-8b", 32768),
    "gemma": ("rtx-4090 + 64 GB", "catalog:gemma-3-27b", 16384),
}
"""Each question: the hardware composed on the Hardware tab, the model, the context."""


def config(scenario: str | None) -> Path:
    """Return a settings folder as the user left it after ``scenario`` (None: fresh)."""
    folder = Path(tempfile.mkdtemp(prefix="ggtune-screens-"))
    store = QSettings(str(folder / "ggtune" / "ggtune.conf"), QSettings.Format.IniFormat)
    if scenario is not None:
        text, model, n_ctx = SCENARIOS[scenario]
        hardware = compose(text)
        label = f"{text}: {describe_hardware(hardware)}"
        store.setValue(HARDWARE_KEY, hardware_to_json(HardwareChoice(hardware, label, "profile")))
        kept = {"runner": "llama-server", "quant": "Q4_K_M", "pinned": {"n_ctx": n_ctx}}
        store.setValue(model_key(model), json.dumps(kept))
    store.sync()
    return folder


QWEN, GEMMA = "catalog:qwen3-8b", "catalog:gemma-3-27b"
WAIT = ["sleep", "6"]  # the Compare rows are worked out on the job pool
SCROLL = ["click", "600", "560", "key", "Next"]
BENCH = ["key", "F6", "sleep", "75"]  # the quick plan: 10-20 s quiet, more on a busy machine
SHOTS: list[tuple[str, str | None, str | None, str | None, float | None, str, list[str]]] = [
    # name, scenario, model, window size, QT_SCALE_FACTOR, tab, steps before the grab
    ("qwen-memory-1280x800", "qwen", QWEN, "1280x800", None, "memory", []),
    ("qwen-compare-1280x800", "qwen", QWEN, "1280x800", None, "compare", WAIT),
    ("gemma-compare-1280x800", "gemma", GEMMA, "1280x800", None, "compare", WAIT),
    ("qwen-memory-1004x700", "qwen", QWEN, "1004x700", None, "memory", []),
    ("qwen-memory-1920x1080", "qwen", QWEN, "1920x1080", None, "memory", []),
    ("qwen-memory-scale1.5", "qwen", QWEN, None, 1.5, "memory", []),
    ("qwen-hardware-1280x800", "qwen", QWEN, "1280x800", None, "hardware", []),
    ("demo-recommend-1280x800", None, None, "1280x800", None, "recommend", []),
    ("demo-recommend-1004x700", None, None, "1004x700", None, "recommend", []),
    ("demo-recommend-1920x1080", None, None, "1920x1080", None, "recommend", []),
    ("demo-recommend-scale1.5", None, None, None, 1.5, "recommend", []),
    ("demo-hardware-1004x700", None, None, "1004x700", None, "hardware", []),
    ("gemma-compare-1920x1080", "gemma", GEMMA, "1920x1080", None, "compare", WAIT),
    ("gemma-compare-scale1.5", "gemma", GEMMA, None, 1.5, "compare", WAIT),
    ("qwen-export-1280x800", "qwen", QWEN, "1280x800", None, "export", []),
    ("gemma-explain-1280x800", "gemma", GEMMA, "1280x800", None, "explain", []),
    # the weights step, scrolled to: the token table held twice (click in the text, page on)
    ("gemma-explain-weights-1280x800", "gemma", GEMMA, "1280x800", None, "explain", SCROLL),
    ("gemma-explain-1004x700", "gemma", GEMMA, "1004x700", None, "explain", []),
    ("gemma-explain-1920x1080", "gemma", GEMMA, "1920x1080", None, "explain", []),
    ("gemma-explain-scale1.5", "gemma", GEMMA, None, 1.5, "explain", []),
    # a quick benchmark of the demo model, started with F6 and left to finish
    ("demo-verify-1280x800", None, None, "1280x800", None, "verify", BENCH),
    ("demo-verify-1004x700", None, None, "1004x700", None, "verify", BENCH),
    ("demo-verify-1920x1080", None, None, "1920x1080", None, "verify", BENCH),
    ("demo-verify-scale1.5", None, None, None, 1.5, "verify", BENCH),
]


def main(argv: list[str]) -> int:
    """Take every screen of :data:`SHOTS` (or those named) into the folder given."""
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(argv[1].split(",")) if len(argv) > 1 else None
    with x11.desktop() as env:
        for name, scenario, model, size, scale, view, steps in SHOTS:
            if wanted is not None and name not in wanted:
                continue
            folder = config(scenario)
            try:
                with x11.app(env, size=size, scale=scale, view=view, model=model, config=folder):
                    x11.play(env, [*steps, "sleep", "1", "shot", str(out / f"{name}.png")])
            finally:
                shutil.rmtree(folder, ignore_errors=True)
            print("shot", name, flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
