"""Every runner test ends with no child process left behind (no zombie, no orphan)."""

from __future__ import annotations

from collections.abc import Iterator

import psutil
import pytest


def leftover_children() -> list[psutil.Process]:
    """Our child processes, except multiprocessing's long-lived resource tracker."""
    found = []
    for child in psutil.Process().children(recursive=True):
        try:
            cmdline = " ".join(child.cmdline())
        except psutil.Error:
            cmdline = ""
        if "resource_tracker" not in cmdline:
            found.append(child)
    return found


@pytest.fixture(autouse=True)
def _no_leftover_children() -> Iterator[None]:
    yield
    assert leftover_children() == [], "a child process was left behind"
