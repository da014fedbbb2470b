"""What the code and docs cite lives in this repository: no file outside it is named."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUTSIDE = re.compile(r"DESIGN\.md|REFERENCE\.md|STYLE\.md|\.\./shared|/work/")
SECTION = re.compile(r"docs/sources\.md §(\d+)")


def _tracked_text() -> dict[str, str]:
    names = subprocess.run(
        ["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    out = {}
    for name in names:
        if name.endswith((".py", ".md", ".toml", ".json", ".spec", ".txt", ".cfg")):
            if name == "tests/test_docs_self_contained.py":
                continue
            out[name] = (ROOT / name).read_text(encoding="utf-8", errors="replace")
    return out


def test_nothing_cites_a_file_outside_the_repository() -> None:
    found = [
        f"{name}:{text.count(chr(10), 0, m.start()) + 1}: {m.group(0)}"
        for name, text in _tracked_text().items()
        for m in OUTSIDE.finditer(text)
    ]
    assert found == []


def test_every_cited_section_of_docs_sources_exists() -> None:
    headings = set(re.findall(r"^## (\d+)\. ", (ROOT / "docs" / "sources.md").read_text(), re.M))
    cited = {
        f"{name}: §{m.group(1)}"
        for name, text in _tracked_text().items()
        for m in SECTION.finditer(text)
        if m.group(1) not in headings
    }
    assert cited == set()
