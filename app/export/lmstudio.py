"""LM Studio: per-model load settings, the ``lms load`` command, and an SDK snippet.

Keys and value shapes come from lmstudio-js ``packages/lms-kv-config/src/schema.ts``
(scope ``llm.load``; 6ec11db, 2026-08-21) and ``lms-shared-types`` ``LLMLoadModelConfig.ts``
(offload ratio 0–1 | "max" | "off"; KV types f32, f16, q8_0, q4_0, q4_1, iq4_nl, q5_0,
q5_1 — no bf16). LM Studio keeps the defaults a user sets for one model in
``~/.lmstudio/.internal/user-concrete-model-default-config/<publisher>/<repo>/<file>.json``
as ``{"load": {"fields": [{"key": …, "value": …}]}}``: observed, not a documented
contract, so :func:`write_lmstudio_config` writes it only when asked, keeps every field it
does not set, and backs up the file it replaces.

``lms load`` (lmstudio-ai/lms ``src/subcommands/load.ts``) has ``--gpu``, ``-c``,
``--parallel``, ``--identifier`` and no flags for flash attention, KV types or batch sizes;
the lmstudio-python SDK (``_kv_config.py``) accepts contextLength, evalBatchSize,
flashAttention, tryMmap, the two KV types and gpuOffload.ratio, and refuses unknown keys.
The config file carries everything.

Example::

    out = export_lmstudio(path, settings, facts=facts, lmstudio_home=Path("~/.lmstudio"))
    out.config_json            # the fields as LM Studio stores them
    shlex.join(out.lms_load)   # lms load publisher/repo/file.gguf --gpu max -c 8192 …
"""

from __future__ import annotations

import json
import os
import shlex
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import ExportError, StateFileError
from app.export.common import ModelFacts, write_text_atomic
from app.settings import ALL_LAYERS, CacheType, Settings
from app.state_files import load_json, read_text

__all__ = [
    "LMSTUDIO_KV_TYPES",
    "LMStudioExport",
    "default_lmstudio_home",
    "export_lmstudio",
    "lmstudio_fields",
    "lmstudio_model_key",
    "write_lmstudio_config",
]

LMSTUDIO_KV_TYPES: Final[tuple[CacheType, ...]] = (
    "f32",
    "f16",
    "q8_0",
    "q4_0",
    "q4_1",
    "iq4_nl",
    "q5_0",
    "q5_1",
)

_CONFIG_DIR: Final = (".internal", "user-concrete-model-default-config")


def default_lmstudio_home(home: Path | None = None) -> Path:
    """Return LM Studio's folder: the path in ``~/.lmstudio-home-pointer``, else ``~/.lmstudio``."""
    home = home or Path.home()
    pointer = home / ".lmstudio-home-pointer"
    text = ""
    if os.path.lexists(pointer):
        try:
            text = read_text(pointer, max_bytes=4096).strip()
        except StateFileError:
            text = ""  # a pipe, /dev/zero, not UTF-8: LM Studio's default folder
    if not text or "\0" in text or "\n" in text or not os.path.isabs(text):
        return home / ".lmstudio"
    return Path(text)


def lmstudio_model_key(model_path: str | os.PathLike[str], models_dir: Path) -> str | None:
    """Return ``publisher/repo/file.gguf`` when the model lies in ``models_dir``, else None."""
    try:
        rel = Path(os.path.abspath(model_path)).relative_to(os.path.abspath(models_dir))
    except ValueError:
        return None
    return rel.as_posix() if len(rel.parts) >= 3 else None


def _ratio(layers: int, total: int, what: str) -> float | str:
    if layers == 0:
        return "off"
    if layers == ALL_LAYERS or layers > total:
        return "max"
    if total <= 0:
        raise ExportError(f"{what}: the model's layer count is needed to write a ratio")
    return round(layers / total, 6)


def lmstudio_fields(
    settings: Settings, facts: ModelFacts | None
) -> tuple[tuple[tuple[str, object], ...], tuple[str, ...]]:
    """Return the ``llm.load.*`` fields for ``settings`` and notes on what LM Studio differs in.

    The GPU offload is a ratio of the model's ``block_count`` layers (LM Studio's slider
    counts those; ``max`` = every layer and the output layer); it needs ``facts`` unless it
    is 0 or all.
    """
    s = settings
    notes: list[str] = []
    for kind, t in (("K", s.cache_type_k), ("V", s.cache_type_v)):
        if t not in LMSTUDIO_KV_TYPES:
            raise ExportError(
                f"LM Studio's KV cache types are {', '.join(LMSTUDIO_KV_TYPES)}; "
                f"{kind} {t} cannot be expressed"
            )
    n_ctx = s.n_ctx
    if n_ctx == 0:
        if facts is None or facts.n_ctx_train <= 0:
            raise ExportError(
                "context 0 means the training context, which LM Studio cannot express; "
                "give the model file or a context size"
            )
        n_ctx = facts.n_ctx_train
    n_layer = facts.n_layer_all if facts is not None else 0
    fields: list[tuple[str, object]] = [
        ("llm.load.contextLength", n_ctx),
        ("llm.load.llama.acceleration.offloadRatio", _ratio(s.n_gpu_layers, n_layer, "GPU layers")),
        ("llm.load.llama.autoFit", False),
        ("llm.load.numParallelSessions", s.n_parallel),
        ("llm.load.useUnifiedKvCache", s.kv_unified),
        ("llm.load.llama.evalBatchSize", s.n_batch),
        ("llm.load.llama.physicalBatchSize", s.n_ubatch),
        ("llm.load.llama.flashAttention", s.flash_attn != "off"),
        ("llm.load.llama.kCacheQuantizationType", {"checked": True, "value": s.cache_type_k}),
        ("llm.load.llama.vCacheQuantizationType", {"checked": True, "value": s.cache_type_v}),
        ("llm.load.llama.tryMmap", s.use_mmap),
        ("llm.load.offloadKVCacheToGpu", s.offload_kqv),
    ]
    if s.n_cpu_moe:
        fields.append(
            ("llm.load.numCpuExpertLayersRatio", _ratio(s.n_cpu_moe, n_layer, "MoE layers"))
        )
    if s.flash_attn == "auto":
        notes.append("LM Studio's flash attention is on or off: written as on (auto enables it)")
    if s.swa_full:
        notes.append("LM Studio has no full-size sliding-window cache setting (--swa-full)")
    if s.tensor_split:
        notes.append("LM Studio has no per-GPU proportions; it splits layers itself")
    if not s.repack:
        notes.append("LM Studio has no setting to turn weight repacking off (--no-repack)")
    notes.append(
        "autoFit is turned off so LM Studio loads these settings instead of refitting them"
    )
    return tuple(fields), tuple(notes)


@dataclass(frozen=True, slots=True)
class LMStudioExport:
    """LM Studio's per-model config, where it lives, ``lms load`` argv and an SDK snippet.

    ``config_path`` is ``None`` when the model is not in LM Studio's models folder (import
    it first: ``lms import PATH``); ``model_key`` then is the file's path.
    """

    fields: tuple[tuple[str, object], ...]
    config_json: str
    config_path: Path | None
    model_key: str
    lms_load: tuple[str, ...]
    sdk_snippet: str
    notes: tuple[str, ...] = ()

    def render(self) -> str:
        """Return everything for a person: where the config goes, the config, the commands."""
        where = (
            str(self.config_path)
            if self.config_path
            else "(model not in LM Studio's models folder: run `lms import PATH` first)"
        )
        parts = [
            f"# --- per-model load settings: {where} ---",
            self.config_json.rstrip("\n"),
            "",
            "# --- lms load (its flags cover GPU offload, context and parallel only) ---",
            shlex.join(self.lms_load),
            "",
            "# --- lmstudio-python ---",
            self.sdk_snippet.rstrip("\n"),
        ]
        if self.notes:
            parts += ["", "# --- notes ---", *(f"- {n}" for n in self.notes)]
        return "\n".join(parts) + "\n"


def _config_document(fields: tuple[tuple[str, object], ...]) -> dict[str, object]:
    return {"load": {"fields": [{"key": k, "value": v} for k, v in fields]}}


def export_lmstudio(
    model_path: str | os.PathLike[str],
    settings: Settings,
    *,
    facts: ModelFacts | None = None,
    lmstudio_home: Path | None = None,
    fitting: Sequence[str] = (),
) -> LMStudioExport:
    """Return LM Studio's load settings for ``settings`` (pure: reads and writes nothing)."""
    home = lmstudio_home if lmstudio_home is not None else default_lmstudio_home()
    fields, notes = lmstudio_fields(settings, facts)
    notes = (*fitting, *notes)
    values = dict(fields)
    key = lmstudio_model_key(model_path, home / "models")
    config_path = None
    if key is not None:
        config_path = home.joinpath(*_CONFIG_DIR, *key.split("/")).with_name(
            Path(key).name + ".json"
        )
    model_key = key or os.fspath(model_path)
    ratio = values["llm.load.llama.acceleration.offloadRatio"]
    lms_load = (
        "lms",
        "load",
        model_key,
        "--gpu",
        str(ratio),
        "-c",
        str(values["llm.load.contextLength"]),
        "--parallel",
        str(settings.n_parallel),
    )
    sdk_config: dict[str, object] = {
        "contextLength": values["llm.load.contextLength"],
        "gpuOffload": {"ratio": ratio},
        "evalBatchSize": settings.n_batch,
        "flashAttention": values["llm.load.llama.flashAttention"],
        "llamaKCacheQuantizationType": settings.cache_type_k,
        "llamaVCacheQuantizationType": settings.cache_type_v,
        "tryMmap": settings.use_mmap,
    }
    snippet_lines = [
        "import lmstudio as lms",
        "",
        f"model = lms.llm({model_key!r}, config={{",
        *(f"    {k!r}: {v!r}," for k, v in sdk_config.items()),
        "})",
        "# The SDK has no keys for parallel sessions, unified KV, physical batch size or",
        "# KV offload; the per-model config file above carries them.",
    ]
    return LMStudioExport(
        fields=fields,
        config_json=json.dumps(_config_document(fields), indent=2) + "\n",
        config_path=config_path,
        model_key=model_key,
        lms_load=lms_load,
        sdk_snippet="\n".join(snippet_lines) + "\n",
        notes=notes,
    )


def write_lmstudio_config(export: LMStudioExport, *, overwrite: bool = False) -> Path:
    """Write ``export``'s fields into LM Studio's per-model config file, atomically.

    An existing file is kept unless ``overwrite``; when overwriting, its other fields and
    keys are kept, ours replace theirs, and the old file is saved beside it first
    (``…json.YYYYmmdd-HHMMSS.bak``). Raise :class:`~app.errors.ExportError` when the model
    is not in LM Studio's models folder, the file exists (without ``overwrite``) or holds
    something other than a JSON object, or the write fails.
    """
    path = export.config_path
    if path is None:
        raise ExportError(
            f"{export.model_key}: not in LM Studio's models folder; import it first "
            "(lms import PATH), then export again"
        )
    document: dict[str, object] = {}
    if path.exists():
        if not overwrite:
            raise ExportError(f"{path}: already exists (ask to overwrite it)")
        try:
            loaded = load_json(path)
        except StateFileError as err:
            raise ExportError(f"{path}: cannot read the existing settings: {err.message}") from err
        if not isinstance(loaded, dict):
            raise ExportError(f"{path}: is not a JSON object; not touching it")
        document = loaded
    load = document.get("load")
    load = dict(load) if isinstance(load, dict) else {}
    old_fields = load.get("fields")
    ours = {k for k, _ in export.fields}
    kept = [
        f
        for f in (old_fields if isinstance(old_fields, list) else [])
        if not (isinstance(f, dict) and f.get("key") in ours)
    ]
    load["fields"] = kept + [{"key": k, "value": v} for k, v in export.fields]
    document["load"] = load
    text = json.dumps(document, indent=2) + "\n"
    return write_text_atomic(path, text, overwrite=overwrite, backup=True, make_parents=True)
