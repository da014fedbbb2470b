"""What a quant level costs in quality, with the model it was measured on.

The numbers live in ``profiles/quality/`` (data, not code; docs/sources.md §4):

* ``weight_quants.json``: perplexity and KL divergence against FP16 for each llama.cpp
  weight quant, from llama.cpp's ``tools/perplexity/README.md`` (Llama-3-8B, plus a
  Llama-2-7B column), with and without an importance matrix;
* ``kv_quants.json``: notes and figures for the KV-cache types (q8_0 ≈ +0.005 PPL, …).

:func:`load_quality` reads and checks both; a bad file raises
:class:`QualityProfileError` naming the file and the entry. :func:`weight_quality` and
:func:`kv_quality` return the measurement for a quant. Example::

    table = load_quality()
    cost = weight_quality(table, "Q4_K_M")
    cost.delta_ppl, cost.kld, cost.model      # (0.175482, 0.031273, 'Llama-3-8B')
    weight_quality(table, "IQ2_XXS").imatrix  # 'WT 10m': only measured with one
    kv_quality(table, "q8_0")[0].delta_ppl     # 0.005
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import QualityProfileError
from app.paths import data_dir

__all__ = [
    "QUALITY_DIR",
    "KvQuality",
    "QualityProfileError",
    "QualitySource",
    "QualityTable",
    "WeightQuality",
    "kv_quality",
    "load_quality",
    "weight_quality",
]

QUALITY_DIR: Final = data_dir() / "quality"
"""Where the shipped quality tables live."""

SCHEMA_VERSION: Final = 1


@dataclass(frozen=True, slots=True)
class QualitySource:
    """Where numbers come from: a title, a URL and free-form details."""

    key: str
    title: str
    url: str
    details: Mapping[str, str]


@dataclass(frozen=True, slots=True)
class WeightQuality:
    """One measurement of a weight quant against the FP16 model.

    ``delta_ppl`` is the perplexity increase (wikitext-2), ``kld`` the mean KL divergence
    of the token distribution, ``same_top_token_pct`` how often both models pick the same
    most likely token (None where not measured); ``imatrix`` names the importance matrix
    used ("WT 10m") or is None. ``model`` is the model it was measured on.
    """

    quant: str
    model: str
    imatrix: str | None
    size_gib: float | None
    ppl: float
    delta_ppl: float
    kld: float
    mean_delta_p_pct: float
    rms_delta_p_pct: float
    same_top_token_pct: float | None
    source: QualitySource
    note: str | None


@dataclass(frozen=True, slots=True)
class KvQuality:
    """One note on a KV-cache type: ``delta_ppl`` where a figure exists (``approximate``
    when it is "about"), ``model`` where the source names one."""

    cache_type: str
    delta_ppl: float | None
    approximate: bool
    model: str | None
    source: QualitySource | None
    note: str


@dataclass(frozen=True, slots=True)
class QualityTable:
    """Both tables, checked: every weight and KV measurement and their sources."""

    weights: tuple[WeightQuality, ...]
    kv: tuple[KvQuality, ...]
    weight_description: str
    kv_description: str


# --- reading --------------------------------------------------------------------------


class _Reader:
    """Typed access to one JSON object with errors naming the file and the place."""

    def __init__(self, path: Path, where: str, obj: object) -> None:
        if not isinstance(obj, dict):
            raise QualityProfileError(f"{where} should be an object", path=path)
        self.path = path
        self.where = where
        self.obj: dict[str, object] = obj

    def _get(self, key: str, optional: bool) -> object:
        if key not in self.obj:
            if optional:
                return None
            raise QualityProfileError(f"{self.where}: missing {key!r}", path=self.path)
        return self.obj[key]

    def str_(self, key: str) -> str:
        value = self._get(key, False)
        if not isinstance(value, str) or not value:
            raise QualityProfileError(f"{self.where}: {key!r} should be a string", path=self.path)
        return value

    def opt_str(self, key: str) -> str | None:
        value = self._get(key, True)
        if value is None:
            return None
        if not isinstance(value, str) or not value:
            raise QualityProfileError(f"{self.where}: {key!r} should be a string", path=self.path)
        return value

    def num(self, key: str, *, minimum: float | None = None) -> float:
        self._get(key, False)  # "missing 'key'" before "should be a number"
        value = self.opt_num(key, minimum=minimum)
        if value is None:
            raise QualityProfileError(f"{self.where}: {key!r} should be a number", path=self.path)
        return value

    def opt_num(self, key: str, *, minimum: float | None = None) -> float | None:
        value = self._get(key, True)
        if value is None:
            return None
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise QualityProfileError(f"{self.where}: {key!r} should be a number", path=self.path)
        number = float(value)
        if not math.isfinite(number) or (minimum is not None and number < minimum):
            raise QualityProfileError(
                f"{self.where}: {key!r} out of range ({value!r})", path=self.path
            )
        return number

    def bool_(self, key: str) -> bool:
        value = self._get(key, False)
        if not isinstance(value, bool):
            raise QualityProfileError(
                f"{self.where}: {key!r} should be true or false", path=self.path
            )
        return value

    def list_(self, key: str) -> list[object]:
        value = self._get(key, False)
        if not isinstance(value, list) or not value:
            raise QualityProfileError(f"{self.where}: {key!r} should be a list", path=self.path)
        return value


def _load_json(path: Path) -> _Reader:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise QualityProfileError(f"cannot read: {err.strerror or err}", path=path) from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as err:
        raise QualityProfileError(
            f"not valid JSON: {err.msg} (line {err.lineno})", path=path
        ) from None
    top = _Reader(path, "top level", data)
    version = top.num("schema_version")
    if version != SCHEMA_VERSION:
        raise QualityProfileError(f"schema_version {version:g} is not {SCHEMA_VERSION}", path=path)
    return top


def _sources(top: _Reader) -> dict[str, QualitySource]:
    raw = top._get("sources", False)
    if not isinstance(raw, dict) or not raw:
        raise QualityProfileError("'sources' should be a non-empty object", path=top.path)
    out: dict[str, QualitySource] = {}
    for key, value in raw.items():
        r = _Reader(top.path, f"source {key!r}", value)
        details = {k: v for k, v in r.obj.items() if k not in ("title", "url")}
        if not all(isinstance(v, str) for v in details.values()):
            raise QualityProfileError(f"source {key!r}: details should be strings", path=top.path)
        out[key] = QualitySource(
            key=key,
            title=r.str_("title"),
            url=r.str_("url"),
            details={k: str(v) for k, v in details.items()},
        )
    return out


def _source(r: _Reader, sources: Mapping[str, QualitySource], key: str | None) -> QualitySource:
    if key is None or key not in sources:
        raise QualityProfileError(f"{r.where}: unknown source {key!r}", path=r.path)
    return sources[key]


def _weights(path: Path) -> tuple[tuple[WeightQuality, ...], str]:
    top = _load_json(path)
    sources = _sources(top)
    out: list[WeightQuality] = []
    seen: set[tuple[str, str, str | None]] = set()
    for i, raw in enumerate(top.list_("measurements")):
        r = _Reader(path, f"measurement #{i}", raw)
        quant = r.str_("quant").upper()
        r.where = f"measurement #{i} ({quant})"
        entry = WeightQuality(
            quant=quant,
            model=r.str_("model"),
            imatrix=r.opt_str("imatrix"),
            size_gib=r.opt_num("size_gib", minimum=0.0),
            ppl=r.num("ppl", minimum=0.0),
            delta_ppl=r.num("delta_ppl"),
            kld=r.num("kld"),
            mean_delta_p_pct=r.num("mean_delta_p_pct"),
            rms_delta_p_pct=r.num("rms_delta_p_pct", minimum=0.0),
            same_top_token_pct=r.opt_num("same_top_token_pct", minimum=0.0),
            source=_source(r, sources, r.opt_str("source")),
            note=r.opt_str("note"),
        )
        if entry.same_top_token_pct is not None and entry.same_top_token_pct > 100:
            raise QualityProfileError(f"{r.where}: same_top_token_pct above 100", path=path)
        key = (entry.quant, entry.model, entry.imatrix)
        if key in seen:
            raise QualityProfileError(f"{r.where}: measured twice on {entry.model}", path=path)
        seen.add(key)
        out.append(entry)
    return tuple(out), top.str_("description")


def _kv(path: Path) -> tuple[tuple[KvQuality, ...], str]:
    top = _load_json(path)
    sources = _sources(top)
    out: list[KvQuality] = []
    for i, raw in enumerate(top.list_("measurements")):
        r = _Reader(path, f"measurement #{i}", raw)
        cache_type = r.str_("cache_type").lower()
        r.where = f"measurement #{i} ({cache_type})"
        source_key = r.opt_str("source")
        out.append(
            KvQuality(
                cache_type=cache_type,
                delta_ppl=r.opt_num("delta_ppl"),
                approximate=r.bool_("approximate"),
                model=r.opt_str("model"),
                source=None if source_key is None else _source(r, sources, source_key),
                note=r.str_("note"),
            )
        )
    return tuple(out), top.str_("description")


def load_quality(directory: str | Path = QUALITY_DIR) -> QualityTable:
    """Read and check ``weight_quants.json`` and ``kv_quants.json`` in ``directory``.

    Raises :class:`QualityProfileError` (file and entry named) for a missing file, bad
    JSON, a missing or mistyped field, an unknown source or a duplicate measurement.
    """
    folder = Path(directory)
    weights, weight_description = _weights(folder / "weight_quants.json")
    kv, kv_description = _kv(folder / "kv_quants.json")
    return QualityTable(weights, kv, weight_description, kv_description)


def weight_quality(
    table: QualityTable, quant: str, *, imatrix: bool | None = None, model: str | None = None
) -> WeightQuality | None:
    """Return the measurement of weight quant ``quant`` (a llama-quantize name), or None.

    ``imatrix`` True/False prefers a measurement made with/without an importance matrix;
    None prefers without, falling back to with (the IQ1/IQ2 types exist only with one).
    ``model`` picks the model; by default the first listed (Llama-3-8B).
    """
    name = quant.strip().upper()
    found = [m for m in table.weights if m.quant == name and (model is None or m.model == model)]
    if not found:
        return None
    want_imatrix = bool(imatrix)
    for m in found:
        if (m.imatrix is not None) == want_imatrix:
            return m
    return found[0]


def kv_quality(table: QualityTable, cache_type: str) -> Sequence[KvQuality]:
    """Return every note on KV-cache type ``cache_type`` ("q8_0", "q4_0", "f16" …)."""
    name = cache_type.strip().lower()
    return tuple(k for k in table.kv if k.cache_type == name)
