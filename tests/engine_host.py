"""What the engine tests need to know about this machine's CPU.

``ENGINE_REPACK`` is False on a CPU with AMX: there the pinned llama.cpp packs quantized
weights into its AMX buffer, and its AMX matrix product segfaults in the first product of
several tokens (llama.cpp issue #20824; docs/engine.md, "AMX"). Tests that decode run with
``repack=ENGINE_REPACK`` (``--no-repack``), as ggtune's own plans do on such a CPU
(:func:`app.predict.estimate.repack_is_safe`); the memory tests keep repacking on, since
loading and reserving work, so the AMX buffer is checked against the engine.
"""

from __future__ import annotations

import os
from typing import Final

from app.hardware.devices import Device, Hardware
from app.hardware.probe import local_cpu_flags
from app.model.spec import ModelSpec
from app.predict.estimate import amx_refusal, repack_is_safe
from app.settings import Settings

HOST: Final = Device("CPU", "host", None, cpu_flags=local_cpu_flags())
ENGINE_REPACK: Final = repack_is_safe(HOST)


def without_amx_abort(spec: ModelSpec, settings: Settings, hardware: Hardware) -> Settings:
    """Return ``settings``, with repacking off where llama.cpp would abort with the model's
    weights in its AMX buffer (MLA's 3-D ``attn_k_b``: :func:`app.predict.estimate.
    amx_refusal`); tests/agreement/test_agreement.py checks that abort on its own."""
    if amx_refusal(spec, settings, hardware) is not None:
        return settings.replace(repack=False)
    return settings


def child_env() -> dict[str, str]:
    """The environment of a test's own llama.cpp child script: ``GGTUNE_TEST_REPACK`` 0
    where it must load without the extra buffers (``use_extra_bufts = false``)."""
    return {**os.environ, "GGTUNE_TEST_REPACK": "1" if ENGINE_REPACK else "0"}
