"""The job pool's object lifetimes: callbacks reach live parents only, and Python's garbage
collector never runs on a pool thread (a QObject it collects is deleted where it runs).

The flaky SIGSEGV at ``ui/desktop/shared/jobs.py``'s relay ``emit`` came from both: a relay that
was a child of a parentless controller, collected (and so deleted) by a collection that a
pool thread's allocations triggered while another pool thread emitted on it. Reproduced
outside pytest with 400 such controllers and allocating jobs at ``gc.set_threshold(50, 5,
5)``: a segfault at that line in one of three runs, before the fix.
"""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

pytest.importorskip("PySide6")
pytest.importorskip("pytestqt")

from PySide6.QtCore import QObject, QThreadPool, Signal
from pytestqt.qtbot import QtBot

from ui.desktop.shared.jobs import GuiCollector, run_job


class _Controller(QObject):
    """A parentless controller in a reference cycle, as tests and panels make them."""

    poke = Signal(object)

    def __init__(self) -> None:
        super().__init__()
        self.poke.connect(lambda value: self.got.append(value))  # the lambda holds self
        self.got: list[object] = []


def _allocate() -> int:
    """Make garbage in cycles on the pool thread (what triggers a collection there)."""
    junk = [[i] for i in range(20_000)]
    for item in junk:
        item.append(item)
    return len(junk)


@pytest.fixture
def eager_gc() -> Iterator[None]:
    """Make the collector due after a few allocations, to give it every chance to run."""
    before = gc.get_threshold()
    gc.set_threshold(50, 5, 5)
    yield
    gc.set_threshold(*before)


def test_automatic_collection_is_off_and_collects_on_the_gui_thread(
    qtbot: QtBot, eager_gc: None
) -> None:
    assert not gc.isenabled(), "the desktop tests run with GuiCollector, as the app does"
    threads: set[int] = set()

    def seen(phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            threads.add(threading.get_ident())

    gc.callbacks.append(seen)
    try:
        done: list[int] = []
        keep = QObject()
        for _ in range(40):
            run_job(_allocate, on_success=done.append, on_failure=pytest.fail, parent=keep)
        qtbot.waitUntil(lambda: len(done) == 40, timeout=60_000)
        collector = GuiCollector()
        try:
            # the session's own collector may have collected while the jobs ran (under
            # load the wait is long): ``seen`` recorded where; else there is garbage due
            assert threads or gc.get_count()[0] > 50, "the jobs left garbage to collect"
            collector.collect_due()
        finally:
            collector.stop()
            gc.disable()  # the session's collector keeps it off
    finally:
        gc.callbacks.remove(seen)
    assert threads == {threading.main_thread().ident}, "collected on a pool thread"


def test_callbacks_reach_live_parents_and_skip_deleted_ones(qtbot: QtBot, eager_gc: None) -> None:
    live = [_Controller() for _ in range(20)]
    doomed = [_Controller() for _ in range(20)]
    for c in (*live, *doomed):
        for _ in range(3):
            run_job(_allocate, on_success=c.poke.emit, on_failure=pytest.fail, parent=c)
    for c in doomed:
        c.deleteLater()  # deleted on the GUI thread while its jobs run
    del c
    doomed.clear()  # and its wrapper dropped: only the job still names it
    assert QThreadPool.globalInstance().waitForDone(60_000)
    qtbot.waitUntil(lambda: all(len(c.got) == 3 for c in live), timeout=30_000)
    assert all(c.got == [20_000] * 3 for c in live)


def test_a_failure_reaches_on_failure_on_the_gui_thread(qtbot: QtBot) -> None:
    keep = QObject()
    errors: list[tuple[Exception, int]] = []

    def boom() -> None:
        raise ValueError("bad header")

    run_job(
        boom,
        on_success=lambda _r: pytest.fail("no result expected"),
        on_failure=lambda e: errors.append((e, threading.get_ident())),
        parent=keep,
    )
    qtbot.waitUntil(lambda: bool(errors), timeout=10_000)
    error, thread = errors[0]
    assert isinstance(error, ValueError)
    assert str(error) == "bad header"
    assert thread == threading.main_thread().ident


def test_a_job_ending_after_the_dispatcher_is_gone_ends_quietly(
    qtbot: QtBot, capfd: pytest.CaptureFixture[str]
) -> None:
    """At exit Python deletes the dispatcher while a job started just before the window
    closed may still run: its outcome is dropped, with no traceback on the way out."""
    import shiboken6

    from ui.desktop.shared import jobs

    started, release = threading.Event(), threading.Event()

    def wait_for_exit() -> int:
        started.set()
        release.wait(10)
        return 1

    holder = QObject()
    got: list[object] = []
    run_job(wait_for_exit, on_success=got.append, on_failure=got.append, parent=holder)
    assert started.wait(10)
    dispatcher = jobs._DISPATCHER[0]
    shiboken6.delete(dispatcher)  # what interpreter shutdown does to it
    release.set()
    assert QThreadPool.globalInstance().waitForDone(10_000)
    jobs._DISPATCHER.clear()  # the next job makes a new one (only at exit is there none)
    jobs._TASKS.clear()
    assert "Signal source has been deleted" not in capfd.readouterr().err
    assert got == []
    holder.deleteLater()
