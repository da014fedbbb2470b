"""Speed factors fitted to this machine's stored benchmark runs.

Both faces (``ggtune compare``/``recommend``/``plan`` and the desktop's speed line) call
:func:`machine_factors` so they quote the same speeds. Reads the results database and
probes the host: blocking I/O, so the desktop calls it on the job pool.
"""

from __future__ import annotations

import os

from app.errors import GGTuneError
from app.hardware.devices import Hardware
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

    try:
        db = ResultsDB(db_path) if db_path else ResultsDB()
        if not db.path.exists():
            return SpeedFactors()
        runs = db.runs(limit=200)
    except (GGTuneError, OSError):
        return SpeedFactors()
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
    for run in runs:
        try:
            found = _measurements(run.result, run.model_file, here, hardware, specs)
        except (ValueError, TypeError, KeyError, AttributeError, OverflowError):
            continue  # a stored record that is not what a run writes: leave it out
        measurements.extend(found)
    own = os.path.basename(spec.path)
    return calibrate(measurements, model_key=own or None)


def _measurements(
    record: dict[str, object],
    model_file: str,
    here: tuple[object, ...],
    hardware: Hardware,
    specs: dict[str, ModelSpec],
) -> list[SpeedMeasurement]:
    """Return the measurements of one stored run if it is this machine's (else none)."""
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
    path = str(record.get("model_path", ""))
    if path not in specs:
        try:
            specs[path] = model_spec(read_model(path))
        except (GGTuneError, OSError):
            return []
    return list(measurements_from_record(record, specs[path], hardware, model_key=model_file))
