"""The results database on real SQLite files in temporary folders.

A corrupt file and a locked one are made for real (garbage bytes; another connection
holding an exclusive lock) and must be set aside with their contents intact.
"""

from __future__ import annotations

import dataclasses
import json
import sqlite3
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


def test_a_locked_file_is_set_aside_and_its_runs_kept(tmp_path: Path, model: Path) -> None:
    path = tmp_path / "results.sqlite3"
    ResultsDB(path).add(make_result(str(model)), model_hash="1:old")
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another program writing, and not letting go
    try:
        db = ResultsDB(path, timeout_s=0.2, clock=lambda: FIXED_TIME)
        assert db.add(make_result(str(model)), model_hash="1:new") == 1
        assert len(db.set_aside) == 1
        moved = db.set_aside[0]
        assert moved.path.name == "results.sqlite3.locked-20261129-173000"
        assert "locked" in moved.reason
    finally:
        holder.execute("ROLLBACK")
        holder.close()
    old = sqlite3.connect(moved.path)
    try:
        assert old.execute("SELECT model_hash FROM runs").fetchall() == [("1:old",)]
    finally:
        old.close()
    assert [r.model_hash for r in ResultsDB(path).runs()] == ["1:new"]


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
