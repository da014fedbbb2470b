"""Find on Hugging Face and the Quantization dropdown on a real X11 desktop (issue 18)::

    .venv/bin/python -m tests.ui.hub_screens docs/screenshots/issue18 [NAME,NAME…]

The app reaches the fake hub of the tests (tests/fake_hub.py: the demo models under
quant-style names, a 2-shard split model, a gated repo, a repo without GGUF files) through
``HF_ENDPOINT``; downloads go to a throw-away ``HF_HOME``. The machine is the one of
issue 18's first question (tests/ui/screens.py's ``qwen`` scenario: Qwen3-8B Q4_K_M at
32k on an RTX 3060 12 GB + 32 GB), so the badges are for that plan. docs/screens.md says
what was looked at.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from app.sources.demo_models import ensure_demo_models
from tests.fake_hub import make_hub, running, write_split_model
from tests.ui import x11
from tests.ui.screens import QWEN, config

FIND = [
    "key", "ctrl+shift+f", "sleep", "1",
    "type", "ggtune", "key", "Return", "sleep", "2",
    "key", "alt+r", "sleep", "4",
    "key", "alt+f", "key", "Down", "sleep", "1",
]  # fmt: skip
"""Open the dialog, search, go to the repos (the first is read), then to its second file."""

DROPDOWN = ["key", "alt+q", "key", "alt+Down", "sleep", "4"]
"""Open the Quantization list (its badges are worked out while it is open)."""

SHOTS: list[tuple[str, str | None, float | None, list[str]]] = [
    # name, window size, QT_SCALE_FACTOR, steps before the grab
    ("hub-find-1004x700", "1004x700", None, FIND),
    ("hub-find-1920x1080", "1920x1080", None, FIND),
    ("hub-find-scale1.5", None, 1.5, FIND),
    ("hub-quant-dropdown-1004x700", "1004x700", None, DROPDOWN),
    ("hub-quant-dropdown-1920x1080", "1920x1080", None, DROPDOWN),
    ("hub-quant-dropdown-scale1.5", None, 1.5, DROPDOWN),
]


def play(env: dict[str, str], steps: list[str]) -> None:
    """Play ``steps`` as tests/ui/x11.py's ``play`` does, but into whichever window has
    the focus (the dialog, once open), as a keyboard does."""
    words = list(steps)
    while words:
        verb = words.pop(0)
        if verb == "key":
            x11.xdotool(env, "key", "--clearmodifiers", words.pop(0))
        elif verb == "type":
            x11.xdotool(env, "type", "--delay", "30", words.pop(0))
        elif verb == "sleep":
            time.sleep(float(words.pop(0)))
        elif verb == "shot":
            x11.grab(env, words.pop(0))
        else:
            raise SystemExit(f"unknown step {verb!r}")
        time.sleep(0.3)


def main(argv: list[str]) -> int:
    """Take every screen of :data:`SHOTS` (or those named) into the folder given."""
    out = Path(argv[0])
    out.mkdir(parents=True, exist_ok=True)
    wanted = set(argv[1].split(",")) if len(argv) > 1 else None
    models = ensure_demo_models()
    scratch = Path(tempfile.mkdtemp(prefix="ggtune-hub-screens-"))
    try:
        shards = write_split_model(scratch, "demo-Q8_0")
        with running(make_hub(models.gemma, models.smollm, shards)) as hub:
            os.environ["HF_ENDPOINT"] = hub.endpoint
            os.environ["HF_HOME"] = str(scratch / "hf")
            os.environ["XDG_CACHE_HOME"] = str(scratch / "cache")  # headers read afresh
            for name in ("HF_HUB_CACHE", "HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"):
                os.environ.pop(name, None)
            with x11.desktop() as env:
                for name, size, scale, steps in SHOTS:
                    if wanted is not None and name not in wanted:
                        continue
                    folder = config("qwen")
                    try:
                        with x11.app(
                            env, size=size, scale=scale, view="memory", model=QWEN, config=folder
                        ):
                            play(env, [*steps, "shot", str(out / f"{name}.png")])
                    finally:
                        shutil.rmtree(folder, ignore_errors=True)
                    print("shot", name, flush=True)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
