"""Qt in these tests runs offscreen, like tests/ui/desktop (CI has no display)."""

from __future__ import annotations

import os

os.environ.setdefault("QT_QPA_PLATFORM", "offscreen")
