"""Every export target in one registry: ``ggtune export --to`` and the Export tab call it.

:func:`export_for` runs the exporter of one target (:mod:`app.export.ollama`,
:mod:`app.export.lmstudio`, :mod:`app.export.llama_server`,
:mod:`app.export.llama_cpp_python`) and returns an :class:`Export`: the text to show or
print, the text to save and its file name, the notes; :class:`ExportOptions` carries
what only some runners can use (a draft model, threads, stop strings, a projector…), each
passed to the exporters that take it. The exporters stay pure; writing is
:func:`app.export.common.write_text_atomic`.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Final, get_args

from app.export.common import ModelFacts, SystemName
from app.settings import RunnerName, Settings

if TYPE_CHECKING:
    from app.export.lmstudio import LMStudioExport
    from app.export.ollama import OllamaExport

TARGETS: Final[tuple[RunnerName, ...]] = ("ollama", "lmstudio", "llama-server", "llama-cpp-python")
"""The runners ggtune exports for, in the order the CLI and the desktop list them."""

SYSTEMS: Final[tuple[SystemName, ...]] = get_args(SystemName)


def this_system() -> SystemName:
    """Return the system ggtune runs on, as the exporters name it."""
    if sys.platform == "darwin":
        return "macos"
    if os.name == "nt":
        return "windows"
    return "linux"


@dataclass(frozen=True, slots=True)
class ExportOptions:
    """What a user may add to an export; each goes to the runners that can express it.

    ``name``, ``stop``, ``num_gpu_auto`` (no ``num_gpu``: Ollama fits) and ``placeholder``
    (``path`` stands for a model not downloaded yet) are Ollama's; ``lmstudio_home`` is LM
    Studio's; ``mmproj_path``/``mmproj_offload``, ``cache_ram_mib`` and ``ctx_checkpoints``
    llama-server's; ``draft`` and ``threads`` both of theirs; ``fitting`` (lines saying
    how the runner's own fitting chose the settings) goes into every export that has
    comments.
    """

    name: str | None = None
    draft: str | None = None
    threads: int | None = None
    stop: Sequence[str] = ()
    num_gpu_auto: bool = False
    placeholder: bool = False
    fitting: Sequence[str] = ()
    lmstudio_home: Path | None = None
    mmproj_path: str | None = None
    mmproj_offload: bool = True
    cache_ram_mib: int | None = None
    ctx_checkpoints: int | None = None


@dataclass(frozen=True, slots=True)
class Export:
    """One export: ``text`` to show or print, ``file_text`` to save as ``filename``.

    ``notes`` say what the runner does differently from the settings. ``ollama`` and
    ``lmstudio`` keep their runner's own export (Ollama's instructions name the saved
    Modelfile's path; LM Studio's config file can be written into its settings folder).
    """

    target: RunnerName
    text: str
    file_text: str
    filename: str
    notes: tuple[str, ...] = ()
    ollama: OllamaExport | None = None
    lmstudio: LMStudioExport | None = None


def export_for(
    target: RunnerName,
    path: str,
    settings: Settings,
    *,
    facts: ModelFacts,
    system: SystemName,
    options: ExportOptions = ExportOptions(),
) -> Export:
    """Return the export of ``settings`` for ``target``; raise the exporters' ExportError."""
    o = options
    if target == "ollama":
        from app.export.ollama import export_ollama

        out = export_ollama(
            path,
            settings,
            facts=facts,
            name=o.name,
            draft=o.draft,
            num_thread=o.threads,
            stop=o.stop,
            placeholder=o.placeholder,
            num_gpu_auto=o.num_gpu_auto,
            fitting=o.fitting,
        )
        return Export(target, out.render(system), out.modelfile, "Modelfile", out.notes, ollama=out)
    if target == "lmstudio":
        from app.export.lmstudio import export_lmstudio

        lms = export_lmstudio(
            path, settings, facts=facts, lmstudio_home=o.lmstudio_home, fitting=o.fitting
        )
        name = lms.config_path.name if lms.config_path else Path(path).name + ".json"
        return Export(target, lms.render(), lms.config_json, name, lms.notes, lmstudio=lms)
    if target == "llama-server":
        from app.export.llama_server import export_llama_server

        res = export_llama_server(
            path,
            settings,
            windows=system == "windows",
            draft_path=o.draft,
            n_threads=o.threads,
            fitting=o.fitting,
            mmproj_path=o.mmproj_path,
            mmproj_offload=o.mmproj_offload,
            cache_ram_mib=o.cache_ram_mib,
            ctx_checkpoints=o.ctx_checkpoints,
        )
    else:
        from app.export.llama_cpp_python import export_llama_cpp_python

        res = export_llama_cpp_python(path, settings)
    return Export(target, res.text, res.text, res.filename, res.notes)
