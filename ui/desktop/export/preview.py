"""The Export tab's preview, pure (no Qt): the settings on screen in a runner's own format.

:func:`export_preview` calls :mod:`app.export` exactly as ``ggtune export`` does
(``ui/cli/export.py``) and returns an :class:`ExportPreview`: the text shown, the text a
Save writes, a suggested file name, the exporter's notes, or its refusal.

A catalog model (``catalog:NAME``) has no file yet, but its settings are worth exporting
before the download: :func:`placeholder_preview` exports them for a placeholder path such
as ``/path/to/Llama-3.1-70B-Q4_K_M.gguf`` (named after the quant level planned) and says
so first among the notes, so the user puts the downloaded file's path there.
"""

from __future__ import annotations

import dataclasses
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import GGTuneError
from app.export.common import ModelFacts, SystemName, facts_from_spec
from app.export.lmstudio import LMStudioExport
from app.export.targets import ExportOptions, export_for
from app.model.spec import ModelSpec
from app.planning.options import own_quant_name
from app.planning.runner_plan import (
    DEFAULT_CACHE_RAM_MIB,
    DEFAULT_CTX_CHECKPOINTS,
    RunnerPlan,
    fitting_comments,
)
from app.settings import RunnerName, Settings
from ui.desktop.shared.estimate_controller import EstimateState
from ui.desktop.shared.model_card import LoadedModel

SYSTEM_TITLES: Final[dict[SystemName, str]] = {
    "linux": "Linux (systemd, sh)",
    "macos": "macOS (launchctl, sh)",
    "windows": "Windows (PowerShell)",
}


PLACEHOLDER_DIR: Final = "/path/to"
"""Where a catalog model's placeholder path says the file will be."""


@dataclass(frozen=True, slots=True)
class ExportPreview:
    """One export: ``text`` to show and copy, ``file_text`` to save as ``filename``.

    ``error`` is the exporter's refusal (one line; ``text`` is then empty), ``notes`` what
    the runner does differently from the settings. ``lmstudio`` is LM Studio's export, for
    writing its config file.
    """

    target: RunnerName
    text: str
    file_text: str
    filename: str
    notes: tuple[str, ...] = ()
    error: str | None = None
    lmstudio: LMStudioExport | None = None


def export_preview(
    path: str,
    facts: ModelFacts,
    settings: Settings,
    target: RunnerName,
    system: SystemName,
    *,
    lmstudio_home: Path | None = None,
    placeholder: bool = False,
    plan: RunnerPlan | None = None,
) -> ExportPreview:
    """Return the export of ``settings`` for ``target`` (pure; the CLI's calls, same output).

    ``placeholder``: ``path`` stands for a model not downloaded yet (written as it is).
    ``plan``: the runner's plan the settings come from; the export then says what the
    runner's own fitting chose (comments), leaves Ollama's ``num_gpu`` to it when it was
    not pinned, and passes the projector to llama-server. Never raises for what the
    exporters refuse: the refusal is ``error``.
    """
    auto_layers = plan is not None and plan.runner == "ollama" and "n_gpu_layers" not in plan.pinned
    projector = plan.projector if plan is not None else None
    options = ExportOptions(
        placeholder=placeholder,
        lmstudio_home=lmstudio_home,
        num_gpu_auto=auto_layers,
        fitting=fitting_comments(plan, pinned_in_export=not auto_layers) if plan else (),
        mmproj_path=projector.path if projector is not None else None,
        mmproj_offload=plan.projector_on_gpu if plan is not None else True,
        # llama-server's prompt cache and checkpoints, when the Settings panel changed them
        cache_ram_mib=_changed(plan, "cache_ram_mib", DEFAULT_CACHE_RAM_MIB),
        ctx_checkpoints=_changed(plan, "ctx_checkpoints", DEFAULT_CTX_CHECKPOINTS),
    )
    try:
        out = export_for(target, path, settings, facts=facts, system=system, options=options)
    except GGTuneError as err:
        return ExportPreview(target, "", "", "", error=str(err))
    return ExportPreview(
        target, out.text, out.file_text, out.filename, out.notes, lmstudio=out.lmstudio
    )


def _changed(plan: RunnerPlan | None, field: str, default: int) -> int | None:
    """Return ``plan``'s llama-server ``field`` when it is not llama-server's default."""
    if plan is None or plan.runner != "llama-server":
        return None
    value = int(getattr(plan, field))
    return None if value == default else value


def placeholder_path(spec: ModelSpec, quant: str) -> str:
    """Return the path that stands for a model not downloaded yet, named as GGUF files of
    ``quant`` usually are: ``/path/to/Llama-3.1-70B-Q4_K_M.gguf``."""
    name = re.sub(r"[^A-Za-z0-9._-]+", "-", spec.name or "").strip("-.") or "model"
    return f"{PLACEHOLDER_DIR}/{name}-{quant}.gguf"


def placeholder_note(model_name: str, placeholder: str) -> str:
    """Return the note that says the model path of an export is a placeholder."""
    return (
        f"{placeholder} is a placeholder: {model_name} is planned from ggtune's catalog and "
        "has no file yet. Download a GGUF of it (Compare tab → a Hugging Face repo) and put "
        "its path there."
    )


def placeholder_preview(
    placeholder: str,
    model_name: str,
    facts: ModelFacts,
    settings: Settings,
    target: RunnerName,
    system: SystemName,
    *,
    lmstudio_home: Path | None = None,
    plan: RunnerPlan | None = None,
) -> ExportPreview:
    """Return the export of ``settings`` for a model with no file yet, at ``placeholder``
    (written as it is; the first note says it is a placeholder)."""
    facts = dataclasses.replace(facts, path=placeholder)
    preview = export_preview(
        placeholder,
        facts,
        settings,
        target,
        system,
        lmstudio_home=lmstudio_home,
        placeholder=True,
        plan=plan,
    )
    if preview.error is not None:
        return preview
    note = placeholder_note(model_name, placeholder)
    return dataclasses.replace(preview, notes=(note, *preview.notes))


def model_preview(
    model: LoadedModel,
    state: EstimateState,
    target: RunnerName,
    system: SystemName,
    *,
    lmstudio_home: Path | None = None,
) -> ExportPreview:
    """Return the export of the estimate's settings for the open model: its file, or for a
    catalog model a placeholder path named after the quant level planned."""
    if model.is_catalog:
        quant = state.quant or own_quant_name(model.spec)
        return placeholder_preview(
            placeholder_path(model.spec, quant),
            model.card.title,
            facts_from_spec(model.spec),
            state.settings,
            target,
            system,
            lmstudio_home=lmstudio_home,
            plan=state.plan,
        )
    return export_preview(
        model.path,
        facts_from_spec(model.spec),
        state.settings,
        target,
        system,
        lmstudio_home=lmstudio_home,
        plan=state.plan,
    )
