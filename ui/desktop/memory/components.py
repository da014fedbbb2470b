"""The parts of the memory bar: each kind of memory a device holds, its name, colour and meaning."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

from app.predict.estimate import DeviceEstimate


@dataclass(frozen=True, slots=True)
class Component:
    """One kind of memory: its ``DeviceEstimate`` field, name, colour and meaning."""

    field: str
    title: str
    color: str
    meaning: str
    growth: bool = False


COMPONENTS: Final = (
    Component("weights_bytes", "Weights", "#4e79a7", "the model's parameters"),
    Component("kv_bytes", "KV cache", "#f28e2b", "attention memory of the conversation"),
    Component("recurrent_bytes", "Recurrent state", "#b07aa1", "state of recurrent layers"),
    Component("compute_bytes", "Compute", "#59a14f", "scratch space for one micro-batch"),
    Component("output_bytes", "Output", "#76b7b2", "logits buffer on the host"),
    Component("other_bytes", "Other", "#9c9c9c", "repacked CPU weights and the like"),
    Component(
        "projector_bytes",
        "Projector",
        "#edc948",
        "the vision/audio projector (--mmproj): its weights and compute buffer",
    ),
    Component(
        "draft_bytes",
        "Draft model",
        "#ff9da7",
        "the draft model (-md): weights, KV for every slot and compute",
    ),
    Component(
        "prompt_cache_bytes",
        "Prompt cache (up to)",
        "#bab0ac",
        "llama-server's host prompt cache: starts empty and grows with use, up to "
        "--cache-ram (8 GiB by default)",
        growth=True,
    ),
    Component(
        "checkpoint_bytes",
        "Checkpoints (up to)",
        "#d4a6c8",
        "context checkpoints (sliding window or recurrent state): grow with use, up to "
        "--ctx-checkpoints (32) per slot",
        growth=True,
    ),
)
"""The bar's parts, in painting order; ``growth`` parts (hatched) come after the memory
held from the load on and are not in its total."""


def component_bytes(device: DeviceEstimate, component: Component) -> int:
    value = getattr(device, component.field)
    assert isinstance(value, int), f"{component.field} must be bytes"
    return value
