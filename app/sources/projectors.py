"""Where each runner keeps a model's projector (``--mmproj``), found for a model file.

- a ``mmproj*.gguf`` in the model's folder: Hugging Face repos (what llama-server ``-hf``
  downloads beside the model), LM Studio's ``<publisher>/<model>/`` folders;
- Ollama: a model blob's manifest (``manifests/<registry>/<ns>/<model>/<tag>``) lists a
  layer ``application/vnd.ollama.image.projector`` beside the model layer; its blob is
  the projector (``server/images.go`` ProjectorPaths);
- inside the model file (older Ollama GGUFs keep ``v.*``/``mm.*`` tensors inline;
  ``llm/llama_server.go`` then passes the model itself as ``--mmproj``):
  :func:`app.model.projector.inline_projector_bytes`.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Final

OLLAMA_PROJECTOR_MEDIA_TYPE: Final = "application/vnd.ollama.image.projector"
OLLAMA_MODEL_MEDIA_TYPE: Final = "application/vnd.ollama.image.model"
_BLOB = re.compile(r"^sha256-([0-9a-fA-F]{64})$")
_MAX_MANIFESTS: Final = 10_000
"""Stop looking after this many manifests (a store is a few hundred)."""


def find_projector(model_path: str | os.PathLike[str]) -> tuple[str, str] | None:
    """Return (projector path, where it was found) for ``model_path``, or None."""
    path = Path(model_path)
    blob = _BLOB.match(path.name)
    if blob is not None and path.parent.name == "blobs":
        found = _ollama_projector(path.parent.parent, blob[1].lower())
        if found is not None:
            return found, "Ollama's projector layer"
        return None
    beside = _beside(path)
    return (beside, "next to the model") if beside is not None else None


def _beside(path: Path) -> str | None:
    """Return the ``mmproj*.gguf`` next to the model at ``path``, or None.

    With several, the one sharing the longest name prefix with the model wins (a repo
    with ``mmproj-F16.gguf`` and ``mmproj-Q8_0.gguf``: whichever the model's name is
    closer to, else the first in name order).
    """
    folder = path.parent
    try:
        names = sorted(
            n
            for n in os.listdir(folder)
            if n.lower().endswith(".gguf") and "mmproj" in n.lower() and n != path.name
        )
    except OSError:
        return None
    if not names:
        return None
    stem = path.name.lower()

    def shared(n: str) -> int:
        other = n.lower().replace("mmproj-", "")
        length = 0
        for a, b in zip(stem, other, strict=False):
            if a != b:
                break
            length += 1
        return length

    return str(folder / max(names, key=shared))


def _ollama_projector(models: Path, digest: str) -> str | None:
    manifests = models / "manifests"
    seen = 0
    for folder, _dirs, names in os.walk(manifests):
        for name in sorted(names):
            seen += 1
            if seen > _MAX_MANIFESTS:
                return None
            try:
                data = json.loads((Path(folder) / name).read_text(encoding="utf-8"))
            except (OSError, ValueError):
                continue
            layers = data.get("layers") if isinstance(data, dict) else None
            if not isinstance(layers, list):
                continue
            digests = {
                x.get("mediaType"): str(x.get("digest", "")) for x in layers if isinstance(x, dict)
            }
            model = digests.get(OLLAMA_MODEL_MEDIA_TYPE, "").lower()
            projector = digests.get(OLLAMA_PROJECTOR_MEDIA_TYPE, "")
            if model.endswith(digest) and projector.startswith("sha256:"):
                candidate = models / "blobs" / projector.replace(":", "-", 1)
                if candidate.is_file():
                    return str(candidate)
    return None
