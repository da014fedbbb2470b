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
    from app.hardware.probe import probe_host
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
        m = run.result.get("machine", {})
        there = (
            m.get("cpu_model"),
            m.get("physical_cores"),
            m.get("logical_cores"),
            round(int(m.get("ram_bytes", 0)) / GIB),
            len(m.get("gpus", ())),
        )
        if there != here:
            continue
        path = str(run.result.get("model_path", ""))
        if path not in specs:
            try:
                specs[path] = model_spec(read_model(path))
            except (GGTuneError, OSError):
                continue
        measurements.extend(
            measurements_from_record(run.result, specs[path], hardware, model_key=run.model_file)
        )
    own = os.path.basename(spec.path)
    return calibrate(measurements, model_key=own or None)
