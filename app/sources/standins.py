"""A header stand-in for any model ggtune can describe (see app/model/standin.py).

:func:`write_model_standin` takes the :class:`~app.model.spec.ModelSpec` the app shows
and the header it came from, and writes the sparse file llama.cpp's dry run can load in
place of the weights:

* a local file (or an Ollama blob): each shard's own header bytes;
* a Hugging Face / HTTP file read header-only: each shard's header bytes as the range
  reads fetched them (from the header cache when they were read before);
* a simulated quant (the spec's tensors differ in type from the file's): the source's
  metadata bytes with new tensor infos, one file;
* a catalog entry (``catalog:KEY``): a header serialized from the entry.

:func:`engine_target` says which file a dry run should load: the model's own file when
it is a local, unmodified one (it is its own stand-in), else a stand-in it writes.

Example::

    spec = model_spec(catalog_header("qwen3-8b"))
    target = engine_target(spec)           # a stand-in in <cache>/ggtune/standins/
    target.path, target.stand_in.disk_bytes
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from app.errors import StandInError
from app.model.catalog import CatalogHeader, is_catalog
from app.model.gguf_reader import Header, ModelFile, read_model
from app.model.spec import ModelSpec
from app.model.standin import (
    StandIn,
    TensorRow,
    catalog_prefix,
    file_prefix,
    requantized_prefix,
    write_standin,
)
from app.sources.reading import read_source
from app.sources.refs import is_url
from app.sources.remote import read_remote_prefix

__all__ = ["EngineTarget", "Source", "engine_target", "model_source", "write_model_standin"]

Source = ModelFile | CatalogHeader


@dataclass(frozen=True, slots=True)
class EngineTarget:
    """The file a dry run loads for a model: ``path``, and the stand-in when it is one."""

    path: Path
    stand_in: StandIn | None


def model_source(spec: ModelSpec) -> Source:
    """Return the header ``spec`` was built from (read again: local, cached remote, catalog)."""
    return read_source(spec.path)


def _rows(spec: ModelSpec) -> list[TensorRow]:
    return [(t.name, t.shape, t.ggml_type, t.n_bytes) for t in spec.tensors]


def _same_tensors(spec: ModelSpec, source: Source) -> bool:
    mine = {t.name: (t.ggml_type, t.shape) for t in spec.tensors}
    theirs = {t.name: (t.ggml_type, tuple(t.shape)) for t in source.tensors}
    return mine == theirs


def _shard_prefix(shard: Header) -> tuple[Header, bytes, int]:
    if is_url(shard.path):
        return read_remote_prefix(shard.path, size=shard.file_size)
    data, size = file_prefix(shard.path)
    return shard, data, size


def write_model_standin(
    spec: ModelSpec, source: Source | None = None, *, folder: Path | None = None
) -> StandIn:
    """Write the stand-in of ``spec`` (its header, its tensors) and return it.

    ``source`` is the header ``spec`` was built from (read again from ``spec.path`` when
    None). Raise :class:`~app.errors.StandInError` (and the readers' errors).
    """
    source = source or model_source(spec)
    key = f"{spec.path}#{spec.file_type}" if isinstance(source, ModelFile) else spec.path
    if isinstance(source, CatalogHeader):
        md = dict(source.metadata)
        if spec.file_type is not None:
            md["general.file_type"] = spec.file_type
        data, size = catalog_prefix(md, _rows(spec))
        return write_standin(data, size, key=f"{key}#{spec.file_type}", folder=folder)
    if _same_tensors(spec, source):
        parts = [_shard_prefix(shard)[1:] for shard in source.shards]
        (first, first_size), *rest = parts
        return write_standin(first, first_size, key=key, folder=folder, shard_prefixes=rest)
    # a simulated quant: one file with the source's metadata and the new tensor infos
    header, data, _ = _shard_prefix(source.shards[0])
    if len(source.shards) > 1:
        raise StandInError(
            f"{spec.path}: a simulated quant of a split model has no stand-in yet "
            "(llama-quantize writes one file; quantize the real model to check it)"
        )
    data, size = requantized_prefix(data, header, _rows(spec), file_type=spec.file_type)
    return write_standin(data, size, key=key, folder=folder)


def engine_target(
    spec: ModelSpec, source: Source | None = None, *, folder: Path | None = None
) -> EngineTarget:
    """Return the file a dry run should load for ``spec`` (writing a stand-in if needed)."""
    path = spec.path
    if not is_catalog(path) and not is_url(path) and os.path.isfile(path):
        source = source or read_model(path)
        if _same_tensors(spec, source):
            return EngineTarget(Path(path), None)
    stand_in = write_model_standin(spec, source, folder=folder)
    return EngineTarget(stand_in.path, stand_in)
