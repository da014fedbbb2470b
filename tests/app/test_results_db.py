"""The results database on real SQLite files in temporary folders.

A corrupt file is made for real (garbage bytes) and must be set aside with its contents
intact; a locked one (another process holding an exclusive lock) must be waited for and
then refused, never moved; a damaged row is skipped.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from app.errors import ResultsDBError
from app.measured.bench_result import (
    BenchPlan,
    BenchResult,
    MachineInfo,
    MemoryMeasured,
    MemorySnapshot,
    SpeedFigure,
    TtftFigure,
)
from app.measured.engine_report import BufferSize, EngineReport
from app.measured.results_db import (
    HASH_CHUNK_BYTES,
    MIGRATIONS,
    SCHEMA_VERSION,
    ResultsDB,
    default_db_path,
    hardware_fingerprint,
    quick_file_hash,
)
from app.settings import Settings

MIB = 1024 * 1024
FIXED_TIME = time.mktime((2026, 11, 29, 17, 30, 0, 0, 0, -1))
MACHINE = MachineInfo("AMD EPYC", 2, 2, 24 * 1024**3 - 12345, "Linux-6.18-x86_64", ())


def make_result(model_path: str, *, tg_seconds: float = 0.5) -> BenchResult:
    """A plausible result (figures of a real Gemma 3 270M run), without running anything."""
    settings = Settings(n_ctx=4096, swa_full=False)
    report = EngineReport(
        model_path=model_path,
        settings=settings,
        mode="alloc",
        model_size_bytes=246587904,
        model_n_params=268098176,
        model_desc="gemma3 270M Q4_K - Medium",
        n_layer=18,
        n_ctx_train=32768,
        n_ctx=4096,
        n_ctx_seq=4096,
        n_seq_max=1,
        n_batch=2048,
        n_ubatch=512,
        kv_unified=False,
        flash_attn=True,
        flash_attn_requested="auto",
        model_buffers=(BufferSize("CPU_Mapped", 235.16, 246583132),),
        kv_buffers=(BufferSize("CPU", 12.0, 12 * MIB),),
        rs_buffers=(),
        compute_buffers=(BufferSize("CPU", 514.5, 539492352),),
        output_buffers=(BufferSize("CPU", 1.0, MIB),),
        kv_caches=(),
        recurrent_caches=(),
        offloaded_layers=None,
        devices=(),
        system_info="CPU : AVX2 = 1",
        engine_version="llama-cpp-python 0.3.36",
        log=("load_tensors: CPU_Mapped model buffer size = 235.16 MiB",),
    )
    snap = MemorySnapshot(50 * MIB, 20 * MIB, 30 * MIB)
    return BenchResult(
        model_path=model_path,
        settings=settings,
        plan=BenchPlan.quick(),
        n_threads=2,
        use_mlock=False,
        engine=report,
        load_s=0.6,
        context_s=0.03,
        speeds=(
            SpeedFigure("pp", 512, 0, (1.25, 1.30)),
            SpeedFigure("tg", 32, 0, (tg_seconds, tg_seconds * 1.1)),
        ),
        ttft=TtftFigure(128, (0.45, 0.44)),
        memory=MemoryMeasured(snap, snap, 400 * MIB, 270 * MIB, 130 * MIB, (), "no NVML"),
        machine=MACHINE,
        started_at="2026-11-29T17:30:00+00:00",
        duration_s=12.7,
    )


@pytest.fixture
def model(tmp_path: Path) -> Path:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(range(256)) * 10_000)
    return path


def test_add_and_read_back(tmp_path: Path, model: Path) -> None:
    db = ResultsDB(tmp_path / "data" / "results.sqlite3")
    h = quick_file_hash(model)
    first = db.add(make_result(str(model)), model_hash=h)
    second = db.add(make_result(str(model), tg_seconds=0.25), model_hash=h)
    other = db.add(make_result(str(model)), model_hash="1:other")
    assert (first, second, other) == (1, 2, 3)
    runs = db.runs(model_hash=h)
    assert [r.id for r in runs] == [2, 1]  # newest first
    run = runs[0]
    assert run.tg_tok_per_s == pytest.approx((32 / 0.25 + 32 / 0.275) / 2)
    assert run.pp_tok_per_s == pytest.approx((512 / 1.25 + 512 / 1.30) / 2)
    assert run.ttft_s == pytest.approx(0.445)
    assert run.model_name == "gemma3 270M Q4_K - Medium"
    assert run.model_file == "model.gguf"
    assert run.model_size_bytes == model.stat().st_size
    assert run.settings["n_ctx"] == 4096
    assert run.backend == "CPU"
    assert run.mode == "quick"
    assert run.engine_version == "llama-cpp-python 0.3.36"
    assert run.hardware_fingerprint == hardware_fingerprint(MACHINE)
    assert run.result["speeds"][1]["name"] == "tg32"
    assert run.result["engine"]["model_buffer_bytes"] == {"CPU_Mapped": 246583132}
    assert len(db.runs()) == 3
    assert len(db.runs(limit=1)) == 1
    assert db.runs(hardware="0" * 16) == []
    assert db.schema_version() == SCHEMA_VERSION
    assert db.set_aside == []


def test_an_old_database_is_migrated_in_place(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    with sqlite3.connect(path) as conn:  # version 0: a database someone made, other data
        conn.execute("CREATE TABLE notes (text TEXT)")
        conn.execute("INSERT INTO notes VALUES ('keep me')")
    conn.close()
    db = ResultsDB(path)
    db.add(make_result(str(model)), model_hash="1:x")
    conn = sqlite3.connect(path)
    try:
        assert conn.execute("PRAGMA user_version").fetchone()[0] == len(MIGRATIONS)
        assert conn.execute("SELECT text FROM notes").fetchall() == [("keep me",)]
        assert conn.execute("SELECT COUNT(*) FROM runs").fetchone()[0] == 1
    finally:
        conn.close()
    assert db.set_aside == []


def test_a_corrupt_file_is_set_aside_not_lost(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    garbage = b"this is not a database, but someone's bytes\n" * 200
    path.write_bytes(garbage)
    db = ResultsDB(path, clock=lambda: FIXED_TIME)
    assert db.add(make_result(str(model)), model_hash="1:x") == 1
    assert len(db.set_aside) == 1
    moved = db.set_aside[0]
    assert moved.path.name == "results.sqlite3.corrupt-20261129-173000"
    assert moved.path.read_bytes() == garbage
    assert "damaged" in moved.reason
    assert [r.id for r in ResultsDB(path).runs()] == [1]


def test_a_damaged_page_is_found_and_set_aside(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    db = ResultsDB(path, clock=lambda: FIXED_TIME)
    for _ in range(30):
        db.add(make_result(str(model)), model_hash="1:x")
    data = bytearray(path.read_bytes())
    page = 4096
    assert len(data) > 3 * page
    data[2 * page : 3 * page] = b"\xff" * page  # wreck a page past the header
    path.write_bytes(bytes(data))
    runs = db.runs()
    assert runs == []  # a fresh database
    assert len(db.set_aside) == 1
    assert db.set_aside[0].path.read_bytes() == bytes(data)


_HOLDER = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], isolation_level=None)
conn.execute("BEGIN EXCLUSIVE")  # another program writing, and not letting go
cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)") if r[1] != "id"]
conn.execute(f"INSERT INTO runs ({', '.join(cols)}) SELECT {', '.join(cols)} FROM runs")
conn.execute("UPDATE runs SET model_hash = '1:theirs' WHERE id = 2")
print("locked", flush=True)
sys.stdin.readline()
conn.execute("COMMIT")
print("committed", flush=True)
"""


def test_a_database_another_process_holds_is_waited_for_never_moved(
    tmp_path: Path, model: Path
) -> None:
    path = tmp_path / "results.sqlite3"
    ResultsDB(path).add(make_result(str(model)), model_hash="1:old")
    inode = path.stat().st_ino
    holder = subprocess.Popen(
        [sys.executable, "-c", _HOLDER, str(path)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "locked"
        db = ResultsDB(path, timeout_s=0.3, clock=lambda: FIXED_TIME)
        with pytest.raises(ResultsDBError, match="in use by another program") as caught:
            db.add(make_result(str(model)), model_hash="1:new")
        assert "\n" not in str(caught.value)
        assert db.set_aside == []
        assert path.stat().st_ino == inode
        assert sorted(p.name for p in tmp_path.iterdir()) == [
            "model.gguf",
            "results.sqlite3",
            "results.sqlite3-journal",
        ]
        holder.stdin.write("go\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "committed"
    finally:
        if holder.poll() is None:
            holder.kill()
        holder.wait(timeout=10)
    assert [r.model_hash for r in ResultsDB(path).runs()] == ["1:theirs", "1:old"]


def test_a_database_on_a_read_only_path_is_one_line(tmp_path: Path, model: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    with pytest.raises(ResultsDBError) as caught:
        ResultsDB(blocker / "results.sqlite3").add(make_result(str(model)), model_hash="1:x")
    assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("column", "value"),
    [
        ("result_json", "{not json"),
        ("result_json", "[1, 2]"),
        ("settings_json", "null"),
        ("tg_tok_per_s", "fast"),
        ("model_size_bytes", "big"),
        ("result_json", "[" * 100_000 + "]" * 100_000),
    ],
)
def test_a_damaged_row_is_skipped_not_fatal(
    tmp_path: Path, model: Path, column: str, value: str
) -> None:
    path = tmp_path / "results.sqlite3"
    db = ResultsDB(path)
    db.add(make_result(str(model)), model_hash="1:good")
    db.add(make_result(str(model)), model_hash="1:bad")
    conn = sqlite3.connect(path)
    with conn:
        conn.execute(f"UPDATE runs SET {column} = ? WHERE model_hash = '1:bad'", (value,))
    conn.close()
    assert [r.model_hash for r in db.runs()] == ["1:good"]
    assert db.skipped_rows == 1


def test_a_newer_schema_is_left_alone(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    conn = sqlite3.connect(path)
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.close()
    before = path.read_bytes()
    with pytest.raises(ResultsDBError, match="newer ggtune"):
        ResultsDB(path).add(make_result(str(model)), model_hash="1:x")
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["model.gguf", "results.sqlite3"]


def test_a_failed_write_stores_nothing(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    db = ResultsDB(path)
    db.add(make_result(str(model)), model_hash="1:x")
    bad = dataclasses.replace(make_result(str(model)), started_at=None)  # type: ignore[arg-type]
    with pytest.raises(ResultsDBError):
        db.add(bad, model_hash="1:x")  # NOT NULL created_at: the transaction rolls back
    assert len(db.runs()) == 1
    assert db.set_aside == []


def test_quick_hash_reads_the_ends_only(tmp_path: Path) -> None:
    size = 3 * HASH_CHUNK_BYTES + 17
    base = bytearray(b"\x01" * size)
    a, b, c = tmp_path / "a", tmp_path / "b", tmp_path / "c"
    a.write_bytes(bytes(base))
    middle = bytearray(base)
    middle[size // 2] = 2
    b.write_bytes(bytes(middle))
    end = bytearray(base)
    end[-1] = 2
    c.write_bytes(bytes(end))
    assert quick_file_hash(a) == quick_file_hash(b)  # by design: the middle is not read
    assert quick_file_hash(a) != quick_file_hash(c)
    assert quick_file_hash(a).startswith(f"{size}:")
    small = tmp_path / "small"
    small.write_bytes(b"GGUF")
    assert quick_file_hash(small).split(":")[0] == "4"


def test_hardware_fingerprint_is_stable_and_rounds_ram() -> None:
    fp = hardware_fingerprint(MACHINE)
    assert len(fp) == 16
    assert fp == hardware_fingerprint(dataclasses.replace(MACHINE, ram_bytes=24 * 1024**3))
    assert fp != hardware_fingerprint(dataclasses.replace(MACHINE, physical_cores=4))
    assert fp != hardware_fingerprint(dataclasses.replace(MACHINE, gpus=("NVIDIA H200",)))


def test_default_path_is_in_the_user_data_dir() -> None:
    path = default_db_path()
    assert path.name == "results.sqlite3"
    assert "ggtune" in path.parts[-2]


def test_result_json_is_plain_data(tmp_path: Path, model: Path) -> None:
    db = ResultsDB(tmp_path / "r.sqlite3")
    db.add(make_result(str(model)), model_hash="1:x")
    stored = db.runs()[0].result
    assert json.loads(json.dumps(stored)) == stored
    assert stored["memory"]["engine_rss_bytes"] == 350 * MIB


def test_many_threads_opening_a_new_file_at_once_all_succeed(tmp_path: Path) -> None:
    """The desktop app reads the history on the job pool while a benchmark opens the same
    new file: the migration must run once, whoever comes second sees it done (this raced:
    "table runs already exists")."""
    import threading

    for round_ in range(20):
        db = ResultsDB(tmp_path / f"r{round_}.sqlite3")
        start = threading.Barrier(6)
        errors: list[BaseException] = []

        def read(
            db: ResultsDB = db,
            start: threading.Barrier = start,
            errors: list[BaseException] = errors,
        ) -> None:
            start.wait()
            try:
                assert db.runs() == []
            except BaseException as err:  # collected for the assert below
                errors.append(err)

        threads = [threading.Thread(target=read) for _ in range(6)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert errors == []
        assert db.schema_version() == SCHEMA_VERSION
        assert db.set_aside == []


def test_calibration_skips_runs_whose_record_is_damaged(
    tmp_path: Path, model: Path, smollm_path: Path
) -> None:
    from app.hardware.probe import local_hardware
    from app.measured.calibration import machine_factors, uncalibrated_source
    from app.model.gguf_reader import read_model
    from app.model.spec import model_spec
    from app.predict.speed import SpeedFactors

    path = tmp_path / "results.sqlite3"
    db = ResultsDB(path)
    damaged = ('{"machine": null}', '{"machine": [1]}', '{"machine": {"ram_bytes": "x"}}', "[]")
    for bad in damaged:
        db.add(make_result(str(model)), model_hash="1:x")
        conn = sqlite3.connect(path)
        with conn:
            conn.execute(
                "UPDATE runs SET result_json = ? WHERE id = (SELECT max(id) FROM runs)", (bad,)
            )
        conn.close()
    spec = model_spec(read_model(smollm_path))
    hardware = local_hardware()
    plain = SpeedFactors(source=uncalibrated_source(hardware))
    assert machine_factors(spec, hardware, db_path=path) == plain
