"""A zoo of tiny GGUF models of many architectures, written with gguf.GGUFWriter.

Each builder writes a small but complete model that the real llama.cpp loads, so the
estimator can be checked against the engine on architectures we have no real file for.
``ZOO`` maps a zoo name (usually the architecture) to its builder: ``builder(path)``
writes the model to ``path``.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from tests.zoo import dense, modern, special

Builder = Callable[[Path], None]

ZOO: dict[str, Builder] = {**dense.BUILDERS, **special.BUILDERS, **modern.BUILDERS}


def write_model(name: str, directory: Path) -> Path:
    """Write zoo model ``name`` into ``directory`` (once) and return its path."""
    path = directory / f"zoo-{name}.gguf"
    if not path.exists():
        tmp = path.with_suffix(".tmp")
        ZOO[name](tmp)
        tmp.replace(path)
    return path
