"""A vision/audio projector (``--mmproj``) beside a model: where it is and what it holds.

llama-server loads it with ``tools/mtmd`` after the text model (and after ``--fit``):
its weights go to the GPU unless ``--no-mmproj-offload``, and ``clip.cpp``'s ``warmup``
reserves a compute buffer for one image of ``clip.vision.image_size`` pixels a side (or
one audio chunk). :func:`read_projector` sums its tensors and models the compute buffer;
:func:`app.sources.projectors.find_projector` finds the file where each runner keeps it.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Final, Protocol

from app.errors import ProjectorError

PROJECTOR_PREFIXES: Final = ("v.", "mm.", "a.")
"""Tensor name prefixes of a projector (``llm/llama_server.go`` mmprojMemoryRequirement)."""


@dataclass(frozen=True, slots=True)
class Projector:
    """A projector's memory: ``weights_bytes`` (its tensors), ``compute_bytes`` (the
    warm-up graph, modelled), ``source`` how it was found."""

    path: str
    weights_bytes: int
    compute_bytes: int
    source: str

    @property
    def total_bytes(self) -> int:
        """Return weights + compute."""
        return self.weights_bytes + self.compute_bytes


def read_projector(path: str | os.PathLike[str], *, source: str = "") -> Projector:
    """Read a projector GGUF's header and return its memory (weights + warm-up compute)."""
    from app.model.gguf_reader import read_header

    header = read_header(path)
    arch = header.get("general.architecture")
    if arch != "clip" and not any(t.name.startswith(PROJECTOR_PREFIXES) for t in header.tensors):
        raise ProjectorError(f"not a projector (architecture {arch!r})", path=path)
    weights = sum(t.n_bytes for t in header.tensors)
    return Projector(
        path=os.fspath(path),
        weights_bytes=weights,
        compute_bytes=projector_compute_bytes(header.metadata),
        source=source or "given",
    )


class _Tensor(Protocol):
    @property
    def name(self) -> str: ...
    @property
    def n_bytes(self) -> int: ...


def inline_projector_bytes(tensors: Iterable[_Tensor]) -> int:
    """Return the bytes of projector tensors inside a model file (``v.``/``mm.``/``a.``)."""
    return sum(t.n_bytes for t in tensors if t.name.startswith(PROJECTOR_PREFIXES))


def _int(metadata: object, key: str, default: int = 0) -> int:
    value = metadata.get(key, default)  # type: ignore[attr-defined]
    return int(value) if isinstance(value, (int, float)) else default


def projector_compute_bytes(metadata: object) -> int:
    """Model the compute buffer ``clip.cpp`` reserves at warm-up (one image, f32).

    The warm-up image is ``clip.vision.image_size`` pixels a side, cut into
    ``n_pos = (image_size / patch_size)²`` patches (``clip_graph::build_vit``), with flash
    attention (clip enables it where the backend has it). The buffer is the largest of:

    - the patch embedding: the f32 image and its f16 ``im2col`` (as many elements), 18
      bytes per pixel;
    - a ViT layer: attention holds Q, K, V, its output and the residual (5 rows of
      ``n_pos × n_embd`` f32), the FFN the up projection (``n_pos × n_ff``) above 3 rows;
    - Gemma 3's projection (``models/siglip.cpp``): the transposed copy of
      ``mm.input_projection`` (``n_embd × projection_dim``), its output for the pooled
      tokens and the pooled rows.

    Checked against the engine on tiny Gemma 3 projectors of 64–896 pixels
    (tests/runner/test_projector.py); other projector types share the ViT stages but not
    the last one, so their figure is a model, not a measurement.
    """
    if _int(metadata, "clip.has_vision_encoder", 1) == 0:
        return 0
    size = _int(metadata, "clip.vision.image_size")
    patch = _int(metadata, "clip.vision.patch_size", 1) or 1
    n_embd = _int(metadata, "clip.vision.embedding_length")
    n_ff = _int(metadata, "clip.vision.feed_forward_length")
    proj_dim = _int(metadata, "clip.vision.projection_dim")
    if not size or not n_embd:
        return 0
    side = size // patch
    n_pos = side * side
    row = 4 * n_pos * n_embd
    patch_embedding = (4 + 2) * 3 * size * size
    attention = 5 * row
    ffn = 4 * n_pos * n_ff + 3 * row
    projection = 0
    kind = metadata.get("clip.projector_type")  # type: ignore[attr-defined]
    if kind == "gemma3" and proj_dim:
        merge = _int(metadata, "clip.vision.projector.scale_factor", 4) or 4
        n_out = (side // merge) ** 2
        projection = 4 * n_embd * proj_dim + 4 * n_out * proj_dim + 2 * row
    return max(patch_embedding, attention, ffn, projection)
