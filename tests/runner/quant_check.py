"""Compare the quant simulation (app/model/quant.py) with files llama.cpp's quantizer wrote.

Shared by tests/runner/test_quant_agreement.py and bench/bench_quant.py. The expected
side is llama.cpp's output file read back with app.model.gguf_reader (every tensor's type and
byte size, the file size); never ggtune's own numbers.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from app.errors import UnknownTensorTypeError
from app.model.gguf_reader import read_model
from app.model.quant import (
    FILE_TYPES,
    FileType,
    QuantError,
    QuantFailure,
    QuantResult,
    file_type,
    simulate_quant,
)
from app.model.spec import ModelSpec, model_spec
from runner.quantize import ImatrixMode, QuantizeOutcome, quantize_many

FILE_TOLERANCE: Final = 0.001
"""File size within 0.1% of the simulation (the header may differ by a few keys)."""

_TENSOR_LINE: Final = re.compile(r"^\[\s*\d+/\s*\d+\]\s+(\S+)\s+- .*type =\s+(\w+),")


@dataclass(frozen=True, slots=True)
class Agreement:
    """One file type on one model: the simulation beside what llama.cpp did."""

    file_type: FileType
    imatrix: ImatrixMode
    simulated: QuantResult | QuantFailure
    error: str | None  # llama.cpp's refusal, None when it wrote the file
    mismatches: tuple[str, ...]  # tensors whose type or size differ
    file_bytes: int | None  # of llama.cpp's file
    seconds: float
    sizes_from: str  # "file" (types and bytes read back) or "log" (types only)

    @property
    def file_error(self) -> float:
        """Return the relative file size error of the simulation (0 when refused)."""
        if self.file_bytes is None or not isinstance(self.simulated, QuantResult):
            return 0.0
        return (self.simulated.file_bytes - self.file_bytes) / self.file_bytes

    @property
    def agrees(self) -> bool:
        """Return whether llama.cpp did what the simulation predicted, to the byte."""
        sim = self.simulated
        if isinstance(sim, QuantFailure):
            return self.error is not None and "no tensor type fallback" in self.error
        refused = sim.needs_imatrix and self.imatrix == "none"
        if refused:
            return self.error is not None and "requires an imatrix" in self.error
        return self.error is None and not self.mismatches and abs(self.file_error) <= FILE_TOLERANCE


def _types_from_log(log: Sequence[str]) -> dict[str, str]:
    """Tensor name -> type name from the quantizer's per-tensor log lines."""
    types: dict[str, str] = {}
    current: tuple[str, str] | None = None
    for line in log:
        m = _TENSOR_LINE.match(line.strip())
        if m:
            current = (m.group(1), m.group(2))
        elif current and line.startswith("converting to "):
            types[current[0]] = line.split()[2].rstrip(".").upper()
            current = None
        elif current and line.startswith("size ="):
            types[current[0]] = current[1].upper()
            current = None
    return types


def compare(spec: ModelSpec, header_bytes: int, outcome: QuantizeOutcome) -> Agreement:
    """Check one quantizer outcome against the simulation of the same job."""
    try:
        simulated: QuantResult | QuantFailure = simulate_quant(
            spec,
            outcome.file_type,
            imatrix=outcome.imatrix == "ones",
            header_bytes=header_bytes,
        )
    except QuantError as err:
        simulated = QuantFailure(outcome.file_type, str(err))
    mismatches: list[str] = []
    file_bytes = None
    sizes_from = "file"
    if outcome.error is None and isinstance(simulated, QuantResult):
        file_bytes = os.path.getsize(outcome.output_path)
        try:
            written = read_model(outcome.output_path).tensors
            got = {t.name: (t.type_name, t.n_bytes) for t in written}
        except UnknownTensorTypeError:
            # gguf-py 0.19 lacks a type llama.cpp wrote (Q2_0): types from the log; the
            # sizes are then checked all together through the file size.
            sizes_from = "log"
            types = _types_from_log(outcome.log)
            got = {p.name: (types.get(p.name, "?"), p.n_bytes) for p in simulated.tensors}
        expected = {p.name: (p.target.name, p.n_bytes) for p in simulated.tensors}
        for name in sorted(expected.keys() | got.keys()):
            want, have = expected.get(name), got.get(name)
            if want != have:
                mismatches.append(f"{name}: simulated {want}, llama.cpp {have}")
    return Agreement(
        file_type=outcome.file_type,
        imatrix=outcome.imatrix,
        simulated=simulated,
        error=outcome.error,
        mismatches=tuple(mismatches),
        file_bytes=file_bytes,
        seconds=outcome.seconds,
        sizes_from=sizes_from,
    )


def run_matrix(
    model_path: Path,
    out_dir: Path,
    quants: Sequence[str | FileType] = FILE_TYPES,
    *,
    with_imatrix: bool = True,
    nthread: int = 2,
    batch: int = 6,
) -> list[Agreement]:
    """Quantize ``model_path`` to every quant and compare each with the simulation.

    With ``with_imatrix``, the types the simulation says need an importance matrix are
    quantized a second time with one (ones everywhere). ``batch`` jobs share one child;
    their files are compared and deleted before the next batch (a 270M model at F32 is
    1 GiB).
    """
    model = read_model(model_path)
    spec = model_spec(model)
    header_bytes = model.shards[0].data_offset
    jobs: list[tuple[Path, FileType, ImatrixMode]] = []
    for q in quants:
        ft = file_type(q)
        jobs.append((out_dir / f"{model_path.stem}-{ft.name}.gguf", ft, "none"))
        if with_imatrix:
            try:
                needs = simulate_quant(spec, ft).needs_imatrix
            except QuantError:
                needs = False
            if needs:
                jobs.append((out_dir / f"{model_path.stem}-{ft.name}-imatrix.gguf", ft, "ones"))
    results = []
    for first in range(0, len(jobs), batch):
        for outcome in quantize_many(model_path, jobs[first : first + batch], nthread=nthread):
            results.append(compare(spec, header_bytes, outcome))
            if os.path.exists(outcome.output_path):
                os.unlink(outcome.output_path)
    return results
