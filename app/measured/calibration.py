"""Speed factors fitted to this machine's stored benchmark runs.

Both faces (``ggtune compare``/``recommend``/``plan`` and the desktop's speed line) call
:func:`machine_factors` so they quote the same speeds. Reads the results database and
probes the host: blocking I/O, so the desktop calls it on the job pool.
"""

from __future__ import annotations

import os
from dataclasses import replace

from app.errors import GGTuneError
from app.hardware.devices import Hardware
from app.measured.users_result import measurements_from_users_record
from app.model.gguf_reader import read_model
from app.model.spec import ModelSpec, model_spec
from app.predict.speed import SpeedFactors, SpeedMeasurement, calibrate, measurements_from_record
from app.units import GIB


def machine_factors(
    spec: ModelSpec, hardware: Hardware, *, db_path: str | os.PathLike[str] | None = None
) -> SpeedFactors:
    """Return speed factors fitted to the stored runs of this machine (defaults without).

    A stored run is this machine's when its CPU model, core counts, RAM (whole GiB) and
    number of GPUs match (the fingerprint's GPU names come from llama.cpp, which is not
    started for this). Runs of ``spec``'s own file also fit a per-model correction.
    """
    from app.hardware.host import probe_host
    from app.measured.results_db import ResultsDB

    plain = SpeedFactors(source=uncalibrated_source(hardware))
    try:
        db = ResultsDB(db_path) if db_path else ResultsDB()
        if not db.path.exists():
            return plain
        runs = db.runs(limit=200)
        users_runs = db.users_runs(limit=50)
    except (GGTuneError, OSError):
        return plain
    host = probe_host()
    here = (
        host.cpu_model,
        host.physical_cores,
        host.logical_cores,
        round((host.ram_total_bytes or 0) / GIB),
        len(hardware.gpus),
    )
    measurements: list[SpeedMeasurement] = []
    specs: dict[str, ModelSpec] = {}
    n_runs = 0
    records = [(r.result, r.model_file, False) for r in runs]
    records += [(r.result, r.model_file, True) for r in users_runs]
    for result, model_file, users in records:
        try:
            found = _measurements(result, model_file, here, hardware, specs, users=users)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            continue  # a stored record that is not what a run writes: leave it out
        n_runs += 1 if found else 0
        measurements.extend(found)
    if not measurements:
        return plain
    own = os.path.basename(spec.path)
    fitted = calibrate(measurements, model_key=own or None)
    own_runs = sum(1 for _r, f, _u in records if f == own)
    note = f", {own_runs} of them of this file" if own_runs else ""
    return replace(
        fitted,
        source=f"calibrated on {n_runs} run(s) of this machine{note} "
        f"({len(measurements)} measured speeds)",
    )


def uncalibrated_source(hardware: Hardware) -> str:
    """Return where an uncalibrated prediction for ``hardware`` comes from, in words."""
    rates = hardware.host.kernels
    if rates is not None:
        return (
            f"not calibrated: this CPU's kernels timed at {rates.n_threads} thread(s) "
            f"({rates.measured_at[:10]}), GPU figures from published ratios"
            if hardware.gpus
            else f"not calibrated: this CPU's kernels timed at {rates.n_threads} thread(s) "
            f"({rates.measured_at[:10]})"
        )
    return SpeedFactors().source


def _measurements(
    record: dict[str, object],
    model_file: str,
    here: tuple[object, ...],
    hardware: Hardware,
    specs: dict[str, ModelSpec],
    *,
    users: bool = False,
) -> list[SpeedMeasurement]:
    """Return the measurements of one stored run if it is this machine's (else none).

    Where the host's kernels price the prediction, only runs with the thread count they
    were timed at count (a run on fewer threads says nothing about these rates)."""
    m = record.get("machine", {})
    if not isinstance(m, dict):
        raise TypeError("machine is not an object")
    ram = m.get("ram_bytes", 0)
    gpus = m.get("gpus", ())
    there = (
        m.get("cpu_model"),
        m.get("physical_cores"),
        m.get("logical_cores"),
        round(int(ram) / GIB) if isinstance(ram, int | float) else None,
        len(gpus) if isinstance(gpus, list | tuple) else None,
    )
    if there != here:
        return []
    rates = hardware.host.kernels
    if rates is not None and record.get("n_threads") != rates.n_threads:
        return []
    path = str(record.get("model_path", ""))
    if path not in specs:
        try:
            specs[path] = model_spec(read_model(path))
        except (GGTuneError, OSError):
            return []
    if users:
        return list(
            measurements_from_users_record(record, specs[path], hardware, model_key=model_file)
        )
    return list(measurements_from_record(record, specs[path], hardware, model_key=model_file))
