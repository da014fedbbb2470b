"""llama.cpp's own figures for any model ggtune can describe: a dry run on a header stand-in.

:class:`EngineCheck` writes the model's stand-in when it has no file of its own
(:func:`app.sources.standins.engine_target`: a catalog entry, a Hugging Face file read
header-only, a simulated quant) and runs :class:`runner.dry_run.DryRun` on it, in a
child process as always. A local, unmodified file is dry-run as it is.

Example::

    from app.model.catalog import catalog_header
    from app.model.spec import model_spec

    spec = model_spec(catalog_header("qwen3-8b"))
    result = engine_check(spec, [Settings(n_ctx=8192)])
    result.reports[0].kv_caches      # llama.cpp's caches for a model not on disk
    result.standin_s, result.dry_run_s
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass

from app.errors import EngineCancelledError
from app.measured.engine_report import EngineReport
from app.model.spec import ModelSpec
from app.settings import Settings
from app.sources.standins import EngineTarget, Source, engine_target
from runner.dry_run import DEFAULT_TIMEOUT_S, DryRun

__all__ = ["EngineCheck", "EngineCheckResult", "engine_check"]


@dataclass(frozen=True, slots=True)
class EngineCheckResult:
    """One report per settings, the file that was loaded, and the time each step took."""

    reports: tuple[EngineReport, ...]
    target: EngineTarget
    standin_s: float
    dry_run_s: float


class EngineCheck:
    """A cancellable engine check; :meth:`run` blocks (call it off the GUI thread).

    The stand-in is written in :meth:`run` (a few ms to ~0.2 s: the header bytes), then the
    dry run starts; :meth:`cancel` from another thread stops the child
    (:class:`~app.errors.EngineCancelledError` from :meth:`run`).
    """

    def __init__(
        self,
        spec: ModelSpec,
        settings_list: Sequence[Settings],
        *,
        source: Source | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
    ) -> None:
        self.spec = spec
        self.settings_list = tuple(settings_list)
        self.source = source
        self.timeout_s = timeout_s
        self._run: DryRun | None = None
        self._cancelled = False

    def run(self) -> EngineCheckResult:
        """Write the stand-in if needed, dry-run every settings, return the result."""
        start = time.perf_counter()
        target = engine_target(self.spec, self.source)
        written = time.perf_counter()
        if self._cancelled:
            raise EngineCancelledError("the engine check was cancelled")
        self._run = DryRun(target.path, self.settings_list, timeout_s=self.timeout_s)
        if self._cancelled:
            raise EngineCancelledError("the engine check was cancelled")
        reports = self._run.run()
        done = time.perf_counter()
        return EngineCheckResult(tuple(reports), target, written - start, done - written)

    def cancel(self) -> None:
        """Stop the check (the child is killed if it runs)."""
        self._cancelled = True
        if self._run is not None:
            self._run.cancel()


def engine_check(
    spec: ModelSpec,
    settings_list: Sequence[Settings],
    *,
    source: Source | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> EngineCheckResult:
    """Return llama.cpp's dry-run reports for ``spec`` (via its stand-in when it has no file)."""
    return EngineCheck(spec, settings_list, source=source, timeout_s=timeout_s).run()
