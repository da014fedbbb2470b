"""Quant levels side by side: the rows of ``ggtune compare`` and of the desktop Compare tab.

:func:`compare_rows` works out one plain-data row per :class:`~app.planning.options.QuantOption` of
one model (the file and the levels simulated from it) at some settings: file size,
bits/weight, memory per device with the most GPU layers that fit (:mod:`app.predict.estimate`),
whether it fits, predicted tok/s (:mod:`app.predict.speed`) and the quality loss against FP16
(:mod:`app.model.quality`). :func:`repo_rows` does the same for every quant file of a Hugging
Face repo from the headers :func:`app.sources.hf.read_models` read over HTTP (nothing downloaded),
with ``origin`` ``"hub"``; a file whose header could not be read (or whose settings the
estimator refuses) gets a row carrying its ``error`` and no numbers.
:func:`app.sources.refs.is_repo` says whether a model argument names a repo rather than a
file or ``catalog:NAME``.

Pure: no Qt, no printing; the CLI (ui/cli/compare.py) and the desktop (ui/desktop/
compare/) format these rows.

Example::

    listing = list_repo("unsloth/gemma-3-270m-it-GGUF")
    rows = repo_rows(listing, read_models(listing), settings, hardware, SpeedFactors())
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.model.spec import ModelSpec, model_spec
from app.planning.options import QuantOption, own_quant_name, quality_cost
from app.planning.planner import fit_layers
from app.planning.runner_plan import RunnerOptions, plan_runner
from app.predict.speed import SpeedFactors, predict_speed
from app.settings import RunnerName, Settings
from app.sources.hf import RemoteModel, RepoListing
from app.units import speed_depth

__all__ = [
    "HUB_ORIGIN",
    "CompareRow",
    "RunnerChoice",
    "compare_rows",
    "hub_options",
    "option_row",
    "repo_rows",
]

HUB_ORIGIN: Final = "hub"
"""``origin`` of a row read from a Hugging Face repo's file header."""


@dataclass(frozen=True, slots=True)
class CompareRow:
    """One quant level at the settings: memory per device, speed, quality (KLD vs FP16).

    ``devices`` is (device name, bytes used, capacity bytes or None) per device;
    ``kld_nearest`` is the KLD of the nearest measured bits/weight when ``kld`` is None.
    A hub row also has ``name`` (the file, a split model's first shard), ``files`` and
    ``url``; one whose header could not be read (or whose settings the estimator refused)
    has ``error`` and zeros for its numbers. :meth:`to_dict` is what ``compare --json``
    prints (the key names are a stable interface).
    """

    quant: str
    origin: str
    file_bytes: int
    bits_per_weight: float
    devices: tuple[tuple[str, int, int | None], ...]
    fits: bool | None
    gpu_layers: int
    n_layers: int
    n_cpu_moe: int
    has_gpu: bool
    decode_tok_per_s: float
    prefill_tok_per_s: float
    kld: float | None
    kld_nearest: float
    delta_ppl: float | None
    quality_measured_on: str | None
    needs_imatrix: bool
    name: str = ""
    files: tuple[str, ...] = ()
    url: str = ""
    error: str | None = None

    @property
    def on_disk(self) -> bool:
        """Whether the row is a file the user has (not simulated, not on the hub)."""
        return self.origin not in ("simulated", HUB_ORIGIN)

    @property
    def total_bytes(self) -> int:
        """Return the memory on all devices together, bytes."""
        return sum(d[1] for d in self.devices)

    @property
    def fits_text(self) -> str:
        """Return "yes", "NO", "12/31 on GPU" … as ``ggtune compare`` and the tab say it."""
        text = {True: "yes", False: "NO", None: "?"}[self.fits]
        if self.fits is not False and self.has_gpu and self.gpu_layers < self.n_layers:
            return f"{self.gpu_layers}/{self.n_layers} on GPU"
        if self.fits is not False and self.n_cpu_moe:
            return f"experts of {self.n_cpu_moe} on CPU"
        return text

    @property
    def quality_text(self) -> str:
        """Return the KLD (``~`` for the nearest measured bits/weight)."""
        if self.kld is not None:
            return f"{self.kld:.4f}"
        return f"~{self.kld_nearest:.3f}"

    def to_dict(self) -> dict[str, Any]:
        """Return the row as ``ggtune compare --json`` prints it (None: not read)."""
        read = self.error is None
        out: dict[str, Any] = {
            "quant": self.quant,
            "origin": self.origin,
            "file_bytes": self.file_bytes,
            "bits_per_weight": self.bits_per_weight if read else None,
            "devices": {name: used for name, used, _cap in self.devices},
            "fits": self.fits,
            "gpu_layers": self.gpu_layers if read else None,
            "n_layers": self.n_layers if read else None,
            "n_cpu_moe": self.n_cpu_moe,
            "decode_tok_per_s": self.decode_tok_per_s if read else None,
            "prefill_tok_per_s": self.prefill_tok_per_s if read else None,
            "kld": self.kld,
            "kld_nearest": self.kld_nearest if read else None,
            "delta_ppl": self.delta_ppl,
            "quality_measured_on": self.quality_measured_on,
            "needs_imatrix": self.needs_imatrix,
        }
        if self.origin == HUB_ORIGIN:
            out |= {"error": self.error, "name": self.name, "files": list(self.files)}
            out["url"] = self.url
        return out


@dataclass(frozen=True, slots=True)
class RunnerChoice:
    """Whose plan each row follows: the runner and the settings the user pinned (by
    field name of :class:`~app.settings.Settings`), as :func:`plan_runner` takes them."""

    runner: RunnerName
    given: tuple[tuple[str, object], ...] = ()
    options: RunnerOptions = field(default_factory=RunnerOptions)


def option_row(
    o: QuantOption,
    options: Sequence[QuantOption],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> CompareRow:
    """Return the row of one quant option at ``settings``; ``kld_nearest`` from the
    measured ``options`` nearest in bits/weight.

    With ``runner`` each quant gets what that runner would run for it (its defaults, the
    pinned settings, its own fitting: :func:`app.planning.runner_plan.plan_runner`), the
    same plan the Memory view shows; without, the most GPU layers that fit ``settings``.
    """
    from app.predict.estimate import estimate

    if runner is not None:
        plan = plan_runner(
            o.spec, runner.runner, hardware, given=dict(runner.given), options=runner.options
        )
        placed, est = plan.settings, plan.estimate
    else:
        placed = fit_layers(o.spec, settings, hardware) or settings
        est = estimate(o.spec, placed, hardware)
    depth = speed_depth(settings.n_ctx, settings.n_parallel)
    speed = predict_speed(o.spec, placed, hardware, depth=depth, factors=factors)
    capacity = {d.name: d.capacity_bytes for d in hardware.devices}
    return CompareRow(
        quant=o.name,
        origin=o.origin,
        file_bytes=o.file_bytes,
        bits_per_weight=round(o.bits_per_weight, 3),
        devices=tuple((d.name, d.total_bytes, capacity.get(d.name)) for d in est.devices),
        fits=est.fits,
        gpu_layers=sum(d.n_layers for d in est.devices if d.kind == "gpu"),
        n_layers=o.spec.n_layer_all,
        n_cpu_moe=placed.n_cpu_moe,
        has_gpu=bool(hardware.gpus),
        decode_tok_per_s=round(speed.decode_tok_per_s, 2),
        prefill_tok_per_s=round(speed.prefill_tok_per_s, 1),
        kld=o.kld,
        kld_nearest=round(quality_cost(o, options), 5),
        delta_ppl=o.delta_ppl,
        quality_measured_on=o.quality_model,
        needs_imatrix=o.needs_imatrix,
    )


def compare_rows(
    spec: ModelSpec,
    options: tuple[QuantOption, ...],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> list[CompareRow]:
    """Return one row per quant at ``settings`` (``compare --json`` prints their dicts);
    with ``runner``, each as that runner would run it (see :func:`option_row`)."""
    del spec  # the options carry their specs; kept for the callers' signature
    return [option_row(o, options, settings, hardware, factors, runner) for o in options]


# --- a Hugging Face repo ------------------------------------------------------------------


def _quality_of() -> Any:
    from app.model.quality import load_quality, weight_quality

    table = load_quality()

    def quality(label: str) -> tuple[float, float, str] | None:
        m = weight_quality(table, label)
        return None if m is None else (m.kld, m.delta_ppl, m.model)

    return quality


def hub_options(
    models: Sequence[RemoteModel],
) -> list[tuple[RemoteModel, QuantOption | None, str | None]]:
    """Return (model, its quant option or None, error or None) per remote model, in order.

    The quant is the label in the file name (``UD-`` dropped for the quality table), else
    the header's ``general.file_type``; quality comes from :mod:`app.model.quality` by that label.
    """
    quality = _quality_of()
    out: list[tuple[RemoteModel, QuantOption | None, str | None]] = []
    for m in models:
        if m.model is None:
            out.append((m, None, str(m.error) if m.error is not None else "not read"))
            continue
        try:
            spec = model_spec(m.model)
        except GGTuneError as err:
            out.append((m, None, str(err)))
            continue
        label = m.entry.quant or own_quant_name(spec)
        q = quality(label.upper().removeprefix("UD-"))
        option = QuantOption(
            name=label,
            spec=spec,
            file_bytes=m.entry.size_bytes,
            on_disk=False,
            kld=q[0] if q else None,
            delta_ppl=q[1] if q else None,
            quality_model=q[2] if q else None,
        )
        out.append((m, option, None))
    return out


def _error_row(m: RemoteModel, label: str, error: str, hardware: Hardware) -> CompareRow:
    return CompareRow(
        quant=label,
        origin=HUB_ORIGIN,
        file_bytes=m.entry.size_bytes,
        bits_per_weight=0.0,
        devices=(),
        fits=None,
        gpu_layers=0,
        n_layers=0,
        n_cpu_moe=0,
        has_gpu=bool(hardware.gpus),
        decode_tok_per_s=0.0,
        prefill_tok_per_s=0.0,
        kld=None,
        kld_nearest=0.0,
        delta_ppl=None,
        quality_measured_on=None,
        needs_imatrix=False,
        error=error,
    )


def repo_rows(
    listing: RepoListing,
    models: Sequence[RemoteModel],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> list[CompareRow]:
    """Return one row per quant file of ``listing`` read into ``models``.

    Each row is :func:`option_row`'s with ``origin`` ``"hub"``, plus ``name`` (the file, a
    split model's first shard), ``files``, ``url`` and ``error`` (None, or why the file has
    no numbers: its header could not be read, or the estimator refused the settings).
    """
    options = hub_options(models)
    measured = [o for _m, o, _e in options if o is not None]
    rows = []
    for m, o, error in options:
        label = o.name if o is not None else m.entry.quant or m.entry.name.rsplit("/", 1)[-1]
        row: CompareRow
        if o is None:
            row = _error_row(m, label, error or "not read", hardware)
        else:
            try:
                row = option_row(o, measured, settings, hardware, factors, runner)
            except GGTuneError as err:  # one file's refusal must not hide the others
                row = _error_row(m, label, str(err), hardware)
            else:
                row = dataclasses.replace(row, origin=HUB_ORIGIN)
        row = dataclasses.replace(
            row,
            name=m.entry.name,
            files=tuple(f.path for f in m.entry.files),
            url=listing.url(m.entry.files[0]),
        )
        rows.append(row)
    return rows
