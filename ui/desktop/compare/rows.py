"""The Compare tab's rows, pure: no Qt (they are worked out on the job pool).

:func:`compare_table` gives one :class:`~app.planning.compare.CompareRow` per quant of the
open model (the file on disk and the levels :func:`app.model.quant.simulate_quant` derives
from it, :func:`compare_options`) at the settings, as ``ggtune compare`` does;
:func:`read_repo` lists a Hugging Face repo and reads every quant file's header over HTTP
(nothing downloaded) and :func:`repo_table` makes its rows; :func:`what_to_do` says what to
do about the selected row.
"""

from __future__ import annotations

from dataclasses import dataclass

from app.hardware.devices import Hardware
from app.model.spec import ModelSpec
from app.planning.compare import HUB_ORIGIN, CompareRow, RunnerChoice, compare_rows, repo_rows
from app.planning.options import COMPARE_QUANTS, QuantOption, quant_options
from app.predict.speed import SpeedFactors
from app.settings import Settings
from app.sources.hf import (
    RemoteModel,
    RepoListing,
    list_repo,
    read_models,
)
from app.sources.refs import RepoRef, parse_repo
from ui.desktop.shared.estimate_controller import EstimateState
from ui.desktop.shared.speed import model_file_bytes


@dataclass(frozen=True, slots=True)
class CompareResult:
    """The rows for one model, settings and hardware, and where the speeds come from."""

    model_path: str
    settings: Settings
    device_names: tuple[str, ...]
    rows: tuple[CompareRow, ...]
    speed_source: str
    repo: str | None = None

    @property
    def errors(self) -> tuple[str, ...]:
        """Return "file: why" for each row without numbers (a header not read)."""
        return tuple(f"{r.name or r.quant}: {r.error}" for r in self.rows if r.error)


def runner_choice(state: EstimateState) -> RunnerChoice:
    """Return the plan every row follows: the runner chosen and the settings pinned."""
    requested = state.requested or state.settings
    given = tuple(sorted((f, getattr(requested, f)) for f in state.pinned))
    return RunnerChoice(state.runner, given)


def compare_table(
    spec: ModelSpec,
    options: tuple[QuantOption, ...],
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> CompareResult:
    """Return the rows of ``ggtune compare`` at ``settings`` as dataclasses (pure); with
    ``runner`` each quant as that runner would run it (the Memory view's plan)."""
    rows = compare_rows(spec, options, settings, hardware, factors, runner)
    return CompareResult(
        model_path=spec.path,
        settings=settings,
        device_names=tuple(d.name for d in hardware.devices),
        rows=tuple(rows),
        speed_source=factors.source,
    )


@dataclass(frozen=True, slots=True)
class RepoHeaders:
    """A repo listed and its quant files' headers read (pool): what hub rows come from."""

    text: str
    listing: RepoListing
    models: tuple[RemoteModel, ...]


def read_repo(text: str) -> RepoHeaders:
    """List the repo ``text`` names and read every quant file's header over HTTP (pool).

    Raise :class:`~app.errors.RemoteError` subclasses (no such repo, offline, no access);
    a file whose header cannot be read carries its error instead.
    """
    ref: RepoRef = parse_repo(text)
    listing = list_repo(ref)
    entries = [listing.find(ref.selector)] if ref.selector else list(listing.models)
    return RepoHeaders(text, listing, tuple(read_models(listing, entries)))


def repo_table(
    headers: RepoHeaders,
    settings: Settings,
    hardware: Hardware,
    factors: SpeedFactors,
    runner: RunnerChoice | None = None,
) -> CompareResult:
    """Return one hub row per quant file of ``headers`` at ``settings`` (pure)."""
    rows = repo_rows(headers.listing, headers.models, settings, hardware, factors, runner)
    return CompareResult(
        model_path=f"{headers.listing.endpoint}/{headers.listing.repo_id}",
        settings=settings,
        device_names=tuple(d.name for d in hardware.devices),
        rows=tuple(rows),
        speed_source=factors.source,
        repo=headers.listing.repo_id,
    )


def compare_options(spec: ModelSpec) -> tuple[QuantOption, ...]:
    """Return the file's own quant and every simulated level (reads the file size; pool)."""
    return quant_options(spec, names=COMPARE_QUANTS, file_bytes=model_file_bytes(spec))


def what_to_do(row: CompareRow, spec: ModelSpec | None, repo: str | None = None) -> str:
    """Return, in plain words, how to get the quant of ``row`` (the selected row's hint)."""
    if row.origin == HUB_ORIGIN:
        where = repo or "the repo"
        if row.error:
            return f"{row.name or row.quant} of {where}: its header could not be read: {row.error}"
        return (
            f"{row.quant} is {row.name} in {where}; only its header was read. Download it "
            f"with the Download button below, or with: ggtune hf {where} --download {row.name}"
        )
    if row.on_disk:
        return f"{row.quant} is the file you have open: nothing to download."
    base = (spec.name if spec is not None else None) or "the model"
    imatrix = " --imatrix imatrix.dat" if row.needs_imatrix else ""
    note = (
        " It needs an importance matrix (llama-imatrix) to keep its quality."
        if row.needs_imatrix
        else ""
    )
    return (
        f"{row.quant} is simulated: its numbers come from llama.cpp's quantization rules, "
        f"not from a file. Download a {row.quant} GGUF of {base} (e.g. from Hugging Face), "
        f"or make one from the F16/BF16 file with "
        f"llama-quantize{imatrix} MODEL-F16.gguf MODEL-{row.quant}.gguf {row.quant}.{note}"
    )
