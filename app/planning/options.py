"""The quant levels a plan can choose from: the file a user has and the levels simulated from it.

:func:`quant_options` lists one :class:`QuantOption` per weight quant (the model's own
file, and each llama.cpp level :func:`app.model.quant.simulate_quant` makes of it, with
its measured quality from ``profiles/quality/``); :func:`own_quant_name` names the quant a
file is in; :func:`quality_cost` is the KLD the planner weighs a level by (the nearest
measured bits per weight when the level itself was not measured). The planner
(:mod:`app.planning.planner`), the Compare rows and the desktop's quant box use them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from app.errors import GGTuneError
from app.model.catalog import is_catalog
from app.model.spec import ModelSpec

COMPARE_QUANTS: Final = (
    "F16",
    "Q8_0",
    "Q6_K",
    "Q5_K_M",
    "Q5_K_S",
    "Q4_K_M",
    "Q4_K_S",
    "IQ4_XS",
    "Q4_0",
    "Q3_K_M",
    "IQ3_M",
    "Q3_K_S",
    "Q2_K",
)
"""The quant levels ``ggtune compare`` and the planner consider, best to smallest."""


DEFAULT_MAX_KLD: Final = 0.0313
"""Quality floor for weight quants the planner may pick unasked: Q4_K_M's KLD on
Llama-3-8B (llama.cpp tools/perplexity/README.md; docs/sources.md §4)."""


@dataclass(frozen=True, slots=True)
class QuantOption:
    """One weight quant the user could run: the file they have, or a simulated one.

    ``kld``/``delta_ppl`` are the quality cost against FP16 measured on ``quality_model``
    (None when no measurement exists); ``on_disk`` is True for the user's own file.
    """

    name: str
    spec: ModelSpec
    file_bytes: int
    on_disk: bool
    kld: float | None = None
    delta_ppl: float | None = None
    quality_model: str | None = None
    needs_imatrix: bool = False

    @property
    def bits_per_weight(self) -> float:
        """Return the average bits per weight over all tensors."""
        return self.spec.bits_per_weight

    @property
    def origin(self) -> str:
        """Return "on disk", "catalog" or "simulated" (where the numbers come from)."""
        if self.on_disk:
            return "catalog" if is_catalog(self.spec.path) else "on disk"
        return "simulated"


Simulate = Callable[[ModelSpec, str], tuple[ModelSpec, int, bool]]
"""``simulate(spec, ftype) -> (spec at ftype, file bytes, needs an importance matrix)``."""


Quality = Callable[[str], tuple[float, float, str] | None]
"""``quality(ftype) -> (kld, delta_ppl, model measured on)`` or None when unmeasured."""


def _real_simulate(spec: ModelSpec, ftype: str) -> tuple[ModelSpec, int, bool]:
    from app.model.quant import simulate_quant

    result = simulate_quant(spec, ftype)
    return result.spec, result.file_bytes, result.needs_imatrix


def _real_quality() -> Quality:
    from app.model.quality import load_quality, weight_quality

    table = load_quality()

    def quality(ftype: str) -> tuple[float, float, str] | None:
        m = weight_quality(table, ftype)
        return None if m is None else (m.kld, m.delta_ppl, m.model)

    return quality


def own_quant_name(spec: ModelSpec) -> str:
    """Return the llama.cpp file type name of ``spec`` (``general.file_type``), or "file"."""
    from app.model.quant import FILE_TYPES

    for ft in FILE_TYPES:
        if ft.ftype == spec.file_type:
            return ft.name
    return "file"


def quant_options(
    spec: ModelSpec,
    *,
    names: Sequence[str] = COMPARE_QUANTS,
    simulate: Simulate | None = _real_simulate,
    quality: Quality | None = None,
    file_bytes: int | None = None,
) -> tuple[QuantOption, ...]:
    """Return the user's own quant and each of ``names`` simulated, largest first.

    ``simulate`` is :func:`app.model.quant.simulate_quant` by default (None: the file alone);
    ``quality`` defaults to :func:`app.model.quality.weight_quality` on the shipped table. A
    quant llama.cpp cannot make from this model is left out.
    """
    quality = quality if quality is not None else _real_quality()
    own = own_quant_name(spec)

    def option(name: str, s: ModelSpec, nbytes: int, on_disk: bool, imatrix: bool) -> QuantOption:
        q = quality(name)
        return QuantOption(
            name=name,
            spec=s,
            file_bytes=nbytes,
            on_disk=on_disk,
            kld=q[0] if q else None,
            delta_ppl=q[1] if q else None,
            quality_model=q[2] if q else None,
            needs_imatrix=imatrix,
        )

    out = [option(own, spec, file_bytes or spec.weights_bytes, True, False)]
    if simulate is not None:
        for name in names:
            if name == own:
                continue
            try:
                s, nbytes, imatrix = simulate(spec, name)
            except GGTuneError:
                continue
            out.append(option(name, s, nbytes, False, imatrix))
    out.sort(key=lambda o: -o.spec.weights_bytes)
    return tuple(out)


def quality_cost(option: QuantOption, options: Sequence[QuantOption] = ()) -> float:
    """Return the KLD of ``option``; unmeasured: that of the nearest measured bits/weight."""
    if option.kld is not None:
        return option.kld
    known = [o for o in options if o.kld is not None]
    if not known:
        return max(0.0, 16.0 - option.bits_per_weight)  # only the order matters then
    near = min(known, key=lambda o: abs(o.bits_per_weight - option.bits_per_weight))
    return near.kld if near.kld is not None else 0.0
