"""Read the one model a name gives: a catalog entry, an http(s) URL or a local path.

:func:`read_source` returns its header (a :class:`~app.model.gguf_reader.ModelFile`, or a
:class:`~app.model.catalog.CatalogHeader` for a catalog entry); :func:`load_model_spec`
the spec of it. What a name means is :func:`app.sources.refs.parse_model_ref`'s rule; a
command that takes one file reads ``org/name`` as a path (a Hugging Face repo holds many
files: :mod:`app.sources.hf` lists them). Only a URL imports the HTTP readers, and only a
catalog name the catalog.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from app.model.gguf_reader import ModelFile, read_model
from app.model.spec import ModelSpec, model_spec
from app.sources.refs import parse_model_ref

if TYPE_CHECKING:
    from app.model.catalog import CatalogHeader


def read_source(text: str | os.PathLike[str]) -> ModelFile | CatalogHeader:
    """Read the header of the one model ``text`` names: a catalog entry, a URL, a path.

    Raise the readers' own typed errors (a URL of a hub repo, not a file, says to use
    ``ggtune hf REPO``).
    """
    ref = parse_model_ref(text, repos=False)
    if ref.kind == "catalog":
        from app.model.catalog import catalog_header

        return catalog_header(ref.text)
    if ref.kind == "url":
        from app.sources.hf import read_url_model

        return read_url_model(ref.text)
    return read_model(ref.text)


def load_model_spec(text: str | os.PathLike[str]) -> ModelSpec:
    """Return the spec of the model ``text`` names (see :func:`read_source`)."""
    return model_spec(read_source(text))
