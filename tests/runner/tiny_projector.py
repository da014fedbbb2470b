"""A tiny vision projector (Gemma 3's SigLIP + pooling + projection) written with GGUFWriter.

The pinned llama.cpp's mtmd loader (``tools/mtmd/clip.cpp``: ``clip_model_loader``, the
``gemma3`` projector type, ``clip_graph_siglip``) accepts it: ``v.*`` ViT tensors, the
``mm.input_projection``/``mm.soft_emb_norm`` of Gemma 3, ``clip.vision.*`` hyperparameters.
Its ``projection_dim`` must be the text model's ``n_embd`` (mtmd checks it).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from gguf import GGUFValueType, GGUFWriter


def write_tiny_projector(
    path: Path,
    *,
    n_embd_text: int,
    image_size: int = 64,
    patch_size: int = 16,
    n_embd: int = 64,
    n_ff: int = 128,
    n_head: int = 4,
    n_layer: int = 2,
    merge: int = 2,
) -> Path:
    """Write the projector to ``path`` (F32 weights, small random values); return ``path``."""
    rng = np.random.default_rng(0)

    def w(*shape: int) -> np.ndarray:
        return (rng.standard_normal(shape) * 0.02).astype(np.float32)

    writer = GGUFWriter(path, "clip")
    writer.add_key_value("clip.projector_type", "gemma3", GGUFValueType.STRING)
    writer.add_key_value("clip.has_vision_encoder", True, GGUFValueType.BOOL)
    writer.add_key_value("clip.use_gelu", True, GGUFValueType.BOOL)
    for key, value in (
        ("image_size", image_size),
        ("patch_size", patch_size),
        ("embedding_length", n_embd),
        ("feed_forward_length", n_ff),
        ("block_count", n_layer),
        ("projection_dim", n_embd_text),
        ("attention.head_count", n_head),
        ("projector.scale_factor", merge),
    ):
        writer.add_key_value(f"clip.vision.{key}", value, GGUFValueType.UINT32)
    writer.add_key_value("clip.vision.attention.layer_norm_epsilon", 1e-6, GGUFValueType.FLOAT32)
    for key in ("image_mean", "image_std"):
        writer.add_key_value(
            f"clip.vision.{key}",
            [0.5, 0.5, 0.5],
            GGUFValueType.ARRAY,
            sub_type=GGUFValueType.FLOAT32,
        )
    n_pos = (image_size // patch_size) ** 2
    tensors: list[tuple[str, np.ndarray]] = [
        ("v.patch_embd.weight", w(n_embd, 3, patch_size, patch_size)),
        ("v.patch_embd.bias", w(n_embd)),
        ("v.position_embd.weight", w(n_pos, n_embd)),
    ]
    for il in range(n_layer):
        blk = f"v.blk.{il}"
        for name in ("attn_q", "attn_k", "attn_v", "attn_out"):
            tensors += [
                (f"{blk}.{name}.weight", w(n_embd, n_embd)),
                (f"{blk}.{name}.bias", w(n_embd)),
            ]
        for name in ("ln1", "ln2"):
            tensors += [
                (f"{blk}.{name}.weight", np.ones(n_embd, np.float32)),
                (f"{blk}.{name}.bias", np.zeros(n_embd, np.float32)),
            ]
        tensors += [
            (f"{blk}.ffn_up.weight", w(n_ff, n_embd)),
            (f"{blk}.ffn_up.bias", w(n_ff)),
            (f"{blk}.ffn_down.weight", w(n_embd, n_ff)),
            (f"{blk}.ffn_down.bias", w(n_embd)),
        ]
    tensors += [
        ("v.post_ln.weight", np.ones(n_embd, np.float32)),
        ("v.post_ln.bias", np.zeros(n_embd, np.float32)),
        ("mm.soft_emb_norm.weight", np.ones(n_embd, np.float32)),
        ("mm.input_projection.weight", w(n_embd, n_embd_text)),
    ]
    for name, data in tensors:
        writer.add_tensor(name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
