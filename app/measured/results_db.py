"""The benchmark history: every run on the real engine, in a local SQLite database.

One file, ``results.sqlite3`` in the user data dir (``platformdirs.user_data_dir
("ggtune")``: ``~/.local/share/ggtune`` on Linux). Each row holds the hardware
fingerprint, the model's name and fast file hash, the settings, the llama.cpp build, the
headline figures (pp/tg tok/s, TTFT, peak RSS) as columns for queries, the whole
:func:`~app.measured.bench_result.result_to_dict` as JSON, and the date. It is the history users
compare runs with, and the data the speed model calibrates from.

Safety rules:

* **Versioned schema**: ``PRAGMA user_version`` holds the version; :data:`MIGRATIONS`
  step it up one version at a time, each in its own transaction. A file from a newer
  ggtune is left alone (:class:`~app.errors.ResultsDBError`).
* **Never lost silently**: a file that is not a database or is damaged is *set aside* —
  renamed to ``results.sqlite3.corrupt-YYYYmmdd-HHMMSS`` with its journal — and a new
  one is created; :attr:`ResultsDB.set_aside` reports each such move so the caller tells
  the user where the old file went.
* **A healthy file is never moved**: one that another program (a second ggtune, a SQLite
  browser) keeps locked is waited for ``timeout_s`` seconds, then the call fails with
  :class:`~app.errors.ResultsDBError` ("in use by another program") and the file and the
  other program's writes stay as they are.
* **A bad row is skipped, not fatal**: a stored run whose JSON or columns do not parse is
  left out of :meth:`ResultsDB.runs` and counted in :attr:`ResultsDB.skipped_rows`.
* **Writes in transactions** (``BEGIN IMMEDIATE`` … ``COMMIT``): a run is stored whole
  or not at all.

Example::

    db = ResultsDB()                                  # the user's database
    run_id = db.add(result, model_hash=quick_file_hash(result.model_path))
    for run in db.runs(limit=10):
        print(run.created_at, run.model_name, run.tg_tok_per_s)
    for moved in db.set_aside:
        print(f"{moved.reason}: kept as {moved.path}")
"""

from __future__ import annotations

import hashlib
import json
import os
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import closing, contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Final, TypeVar

from app.errors import ResultsDBError
from app.measured.bench_result import BenchResult, MachineInfo, result_to_dict
from app.measured.users_result import Slo, UsersResult, served_users, users_to_dict

T = TypeVar("T")

DB_NAME: Final = "results.sqlite3"

HASH_CHUNK_BYTES: Final = 1024 * 1024
"""The fast model hash reads this much from the start and from the end of the file."""

MIGRATIONS: Final[tuple[tuple[str, ...], ...]] = (
    # 0 -> 1
    (
        """CREATE TABLE runs (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            hardware_fingerprint TEXT NOT NULL,
            hardware_json TEXT NOT NULL,
            model_name TEXT NOT NULL,
            model_file TEXT NOT NULL,
            model_hash TEXT NOT NULL,
            model_size_bytes INTEGER NOT NULL,
            settings_json TEXT NOT NULL,
            n_threads INTEGER NOT NULL,
            engine_version TEXT NOT NULL,
            system_info TEXT NOT NULL,
            backend TEXT NOT NULL,
            mode TEXT NOT NULL,
            pp_tok_per_s REAL,
            pp_tok_per_s_sd REAL,
            tg_tok_per_s REAL,
            tg_tok_per_s_sd REAL,
            ttft_s REAL,
            peak_rss_bytes INTEGER,
            result_json TEXT NOT NULL
        )""",
        "CREATE INDEX runs_model ON runs (model_hash, hardware_fingerprint)",
    ),
    # 1 -> 2: the multi-user load tests (runner/load_test.py)
    (
        """CREATE TABLE users_runs (
            id INTEGER PRIMARY KEY,
            created_at TEXT NOT NULL,
            hardware_fingerprint TEXT NOT NULL,
            hardware_json TEXT NOT NULL,
            model_name TEXT NOT NULL,
            model_file TEXT NOT NULL,
            model_hash TEXT NOT NULL,
            settings_json TEXT NOT NULL,
            n_threads INTEGER NOT NULL,
            engine_version TEXT NOT NULL,
            max_users INTEGER NOT NULL,
            served_users INTEGER NOT NULL,
            slo_ttft_s REAL NOT NULL,
            slo_min_tok_per_s REAL NOT NULL,
            result_json TEXT NOT NULL
        )""",
        "CREATE INDEX users_runs_model ON users_runs (model_hash, hardware_fingerprint)",
    ),
)
"""``MIGRATIONS[i]`` takes the schema from version ``i`` to ``i + 1``. Append, never edit."""

SCHEMA_VERSION: Final = len(MIGRATIONS)

_CORRUPT_WORDS: Final = ("not a database", "malformed", "corrupt", "disk image")
_LOCKED_WORDS: Final = ("locked", "busy")


def default_db_path() -> Path:
    """Return ``<user data dir>/ggtune/results.sqlite3`` (the folder is not created)."""
    import platformdirs

    return Path(platformdirs.user_data_dir("ggtune", appauthor=False)) / DB_NAME


def quick_file_hash(path: str | os.PathLike[str]) -> str:
    """Return a fast fingerprint of a model file: its size and a SHA-256 of both ends.

    Hashing a 20 GB file whole takes a minute; this reads 2 MiB: ``sha256(size as 8
    little-endian bytes + first MiB + last MiB)``, as ``"<size>:<hex>"``. Two files that
    differ only in the middle would collide; GGUF headers (first MiB) and the last
    tensors make that unlikely for real models, not impossible.
    """
    size = os.path.getsize(path)
    h = hashlib.sha256(size.to_bytes(8, "little"))
    with open(path, "rb") as f:
        h.update(f.read(HASH_CHUNK_BYTES))
        if size > HASH_CHUNK_BYTES:
            f.seek(max(HASH_CHUNK_BYTES, size - HASH_CHUNK_BYTES))
            h.update(f.read(HASH_CHUNK_BYTES))
    return f"{size}:{h.hexdigest()}"


def hardware_fingerprint(machine: MachineInfo) -> str:
    """Return 16 hex digits naming the machine: CPU model, cores, RAM in GiB, OS, GPUs.

    RAM is rounded to whole GiB so the same machine keeps its fingerprint when the
    kernel reserves a little more or less.
    """
    parts = {
        "cpu": machine.cpu_model,
        "cores": [machine.physical_cores, machine.logical_cores],
        "ram_gib": round(machine.ram_bytes / 1024**3),
        "os": machine.os.split("-")[0],
        "gpus": list(machine.gpus),
    }
    return hashlib.sha256(json.dumps(parts, sort_keys=True).encode()).hexdigest()[:16]


@dataclass(frozen=True, slots=True)
class SetAside:
    """A database file that was moved out of the way: where it is now, and why."""

    path: Path
    reason: str


@dataclass(frozen=True, slots=True)
class StoredRun:
    """One stored run: the query columns, and ``result`` (the full record as data)."""

    id: int
    created_at: str
    hardware_fingerprint: str
    model_name: str
    model_file: str
    model_hash: str
    model_size_bytes: int
    settings: dict[str, Any]
    n_threads: int
    engine_version: str
    backend: str
    mode: str
    pp_tok_per_s: float | None
    pp_tok_per_s_sd: float | None
    tg_tok_per_s: float | None
    tg_tok_per_s_sd: float | None
    ttft_s: float | None
    peak_rss_bytes: int | None
    result: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StoredUsersRun:
    """One stored load test: the query columns and ``result``
    (:func:`~app.measured.users_result.users_to_dict`)."""

    id: int
    created_at: str
    hardware_fingerprint: str
    model_file: str
    model_hash: str
    served_users: int
    result: dict[str, Any]


def _kind_of(error: sqlite3.DatabaseError) -> str | None:
    text = str(error).lower()
    if any(w in text for w in _LOCKED_WORDS):
        return "locked"
    if any(w in text for w in _CORRUPT_WORDS) or type(error) is sqlite3.DatabaseError:
        return "corrupt"
    # "unable to open database file", a constraint (IntegrityError), a bad statement: not
    # the file's fault, so it stays where it is
    return None


class ResultsDB:
    """The results database at ``path`` (default: :func:`default_db_path`).

    Each call opens its own connection (SQLite files are cheap to open; no connection
    outlives a call, so the object can move between threads). ``timeout_s`` is how long
    to wait for another program's lock before setting the file aside. ``clock`` gives the
    timestamp used in set-aside names (tests pass a fixed one).
    """

    def __init__(
        self,
        path: str | os.PathLike[str] | None = None,
        *,
        timeout_s: float = 5.0,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.path = Path(path) if path is not None else default_db_path()
        self.timeout_s = timeout_s
        self._clock = clock
        self.set_aside: list[SetAside] = []
        """Files moved out of the way by this object, oldest first (report them)."""
        self.skipped_rows = 0
        """Stored runs left out of the last :meth:`runs` because they did not parse."""

    # --- public ---

    def add(self, result: BenchResult, *, model_hash: str) -> int:
        """Store ``result`` in one transaction; return its id."""
        record = result_to_dict(result)
        pp = result.speed("pp")
        tg = result.speed("tg")
        row = {
            "created_at": result.started_at,
            "hardware_fingerprint": hardware_fingerprint(result.machine),
            "hardware_json": json.dumps(asdict(result.machine)),
            "model_name": result.model_name,
            "model_file": os.path.basename(result.model_path),
            "model_hash": model_hash,
            "model_size_bytes": int(model_hash.split(":")[0]),
            "settings_json": json.dumps(asdict(result.settings)),
            "n_threads": result.n_threads,
            "engine_version": result.engine.engine_version,
            "system_info": result.engine.system_info,
            "backend": result.backend,
            "mode": result.plan.mode,
            "pp_tok_per_s": pp.tok_per_s.mean if pp else None,
            "pp_tok_per_s_sd": pp.tok_per_s.sd if pp else None,
            "tg_tok_per_s": tg.tok_per_s.mean if tg else None,
            "tg_tok_per_s_sd": tg.tok_per_s.sd if tg else None,
            "ttft_s": result.ttft.stat.mean,
            "peak_rss_bytes": result.memory.peak_rss_bytes,
            "result_json": json.dumps(record),
        }
        sql = f"INSERT INTO runs ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"
        return self._with_retry(lambda conn: self._insert(conn, sql, row))

    def add_users(self, result: UsersResult, *, model_hash: str, slo: Slo) -> int:
        """Store a load test in one transaction; return its id (``users_runs`` table)."""
        summaries = result.summaries(slo)
        row = {
            "created_at": result.started_at,
            "hardware_fingerprint": hardware_fingerprint(result.machine),
            "hardware_json": json.dumps(asdict(result.machine)),
            "model_name": result.model_name,
            "model_file": os.path.basename(result.model_path),
            "model_hash": model_hash,
            "settings_json": json.dumps(asdict(result.settings)),
            "n_threads": result.n_threads,
            "engine_version": result.engine.engine_version,
            "max_users": result.plan.max_users,
            "served_users": served_users(summaries)[0],
            "slo_ttft_s": slo.ttft_s,
            "slo_min_tok_per_s": slo.min_tok_per_s,
            "result_json": json.dumps(users_to_dict(result, slo)),
        }
        sql = (
            f"INSERT INTO users_runs ({', '.join(row)}) VALUES ({', '.join(':' + k for k in row)})"
        )
        return self._with_retry(lambda conn: self._insert(conn, sql, row))

    def users_runs(self, *, model_hash: str | None = None, limit: int = 50) -> list[StoredUsersRun]:
        """Return stored load tests, newest first, optionally of one model."""
        where = " WHERE model_hash = ?" if model_hash is not None else ""
        args: tuple[object, ...] = (model_hash,) if model_hash is not None else ()
        sql = f"SELECT * FROM users_runs{where} ORDER BY id DESC LIMIT ?"

        def query(conn: sqlite3.Connection) -> list[StoredUsersRun]:
            conn.row_factory = sqlite3.Row
            out = []
            for row in conn.execute(sql, (*args, limit)):
                try:
                    out.append(
                        StoredUsersRun(
                            id=_int(row["id"]),
                            created_at=_text(row["created_at"]),
                            hardware_fingerprint=_text(row["hardware_fingerprint"]),
                            model_file=_text(row["model_file"]),
                            model_hash=_text(row["model_hash"]),
                            served_users=_int(row["served_users"]),
                            result=_dict(row["result_json"]),
                        )
                    )
                except (ValueError, TypeError, KeyError, RecursionError):
                    self.skipped_rows += 1
            return out

        return self._with_retry(query)

    def runs(
        self,
        *,
        model_hash: str | None = None,
        hardware: str | None = None,
        limit: int = 50,
    ) -> list[StoredRun]:
        """Return stored runs, newest first, optionally of one model and/or machine."""
        where, args = [], []
        if model_hash is not None:
            where.append("model_hash = ?")
            args.append(model_hash)
        if hardware is not None:
            where.append("hardware_fingerprint = ?")
            args.append(hardware)
        clause = f" WHERE {' AND '.join(where)}" if where else ""
        sql = f"SELECT * FROM runs{clause} ORDER BY id DESC LIMIT ?"

        def query(conn: sqlite3.Connection) -> list[StoredRun]:
            conn.row_factory = sqlite3.Row
            out = []
            self.skipped_rows = 0
            for row in conn.execute(sql, (*args, limit)):
                try:
                    out.append(_stored(row))
                except (ValueError, TypeError, KeyError, RecursionError):
                    self.skipped_rows += 1  # a damaged or hand-edited row
            return out

        return self._with_retry(query)

    def schema_version(self) -> int:
        """Return the file's ``PRAGMA user_version`` (after any migration)."""
        return self._with_retry(lambda conn: int(conn.execute("PRAGMA user_version").fetchone()[0]))

    # --- internals ---

    @staticmethod
    def _insert(conn: sqlite3.Connection, sql: str, row: dict[str, Any]) -> int:
        with _transaction(conn):
            cursor = conn.execute(sql, row)
        assert cursor.lastrowid is not None, "INSERT gave no row id"
        return cursor.lastrowid

    def _with_retry(self, action: Callable[[sqlite3.Connection], T]) -> T:
        """Run ``action`` on an open, migrated connection; set a bad file aside once."""
        for attempt in range(2):
            try:
                with closing(self._connect()) as conn:
                    return action(conn)
            except sqlite3.DatabaseError as err:
                kind = _kind_of(err)
                if kind == "locked":
                    raise ResultsDBError(
                        f"the results database is in use by another program (still locked "
                        f"after {self.timeout_s:g} s); try again when it is done",
                        path=self.path,
                    ) from err
                if kind is None or attempt == 1:
                    raise ResultsDBError(
                        f"cannot use the results database: {err}", path=self.path
                    ) from err
                self._set_aside(kind, str(err))
            except OSError as err:  # the folder cannot be made, a read-only disk
                raise ResultsDBError(
                    f"cannot use the results database: {err.strerror or err}", path=self.path
                ) from err
        raise AssertionError("unreachable")

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=self.timeout_s, isolation_level=None)
        try:
            version = int(conn.execute("PRAGMA user_version").fetchone()[0])
            if version > SCHEMA_VERSION:
                raise ResultsDBError(
                    f"written by a newer ggtune (schema {version}, this one knows "
                    f"{SCHEMA_VERSION}); left as it is",
                    path=self.path,
                )
            check = conn.execute("PRAGMA quick_check").fetchone()[0]
            if check != "ok":
                raise sqlite3.DatabaseError(f"database disk image is malformed: {check}")
            if version < SCHEMA_VERSION:
                with _transaction(conn):
                    # read again under the write lock: another connection (a second thread
                    # of this app, another ggtune) may have migrated the file meanwhile
                    version = int(conn.execute("PRAGMA user_version").fetchone()[0])
                    for target in range(version + 1, SCHEMA_VERSION + 1):
                        for statement in MIGRATIONS[target - 1]:
                            conn.execute(statement)
                        conn.execute(f"PRAGMA user_version = {target}")
        except BaseException:
            conn.close()
            raise
        return conn

    def _set_aside(self, kind: str, why: str) -> None:
        stamp = time.strftime("%Y%m%d-%H%M%S", time.localtime(self._clock()))
        target = self.path.with_name(f"{self.path.name}.{kind}-{stamp}")
        n = 1
        while target.exists():
            n += 1
            target = self.path.with_name(f"{self.path.name}.{kind}-{stamp}-{n}")
        try:
            os.replace(self.path, target)
            for suffix in ("-journal", "-wal", "-shm"):
                side = self.path.with_name(self.path.name + suffix)
                if side.exists():
                    os.replace(side, target.with_name(target.name + suffix))
        except OSError as err:
            raise ResultsDBError(
                f"the database is {kind} ({why}) and could not be set aside: {err}", path=self.path
            ) from err
        self.set_aside.append(SetAside(target, f"the results database was damaged ({why})"))


@contextmanager
def _transaction(conn: sqlite3.Connection) -> Iterator[None]:
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


def _dict(text: object) -> dict[str, Any]:
    """Parse a JSON column that must hold an object; raise ValueError otherwise."""
    if not isinstance(text, str):
        raise ValueError("not text")
    value = json.loads(text)
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    return value


def _number(value: object) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float) or value != value:
        raise ValueError(f"not a number: {value!r}")
    return float(value)


def _int(value: object) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"not an integer: {value!r}")
    return value


def _text(value: object) -> str:
    if not isinstance(value, str):
        raise ValueError(f"not text: {value!r}")
    return value


def _stored(row: sqlite3.Row) -> StoredRun:
    """Return the run in ``row``; raise ValueError/TypeError when a column is damaged."""
    peak = row["peak_rss_bytes"]
    return StoredRun(
        id=_int(row["id"]),
        created_at=_text(row["created_at"]),
        hardware_fingerprint=_text(row["hardware_fingerprint"]),
        model_name=_text(row["model_name"]),
        model_file=_text(row["model_file"]),
        model_hash=_text(row["model_hash"]),
        model_size_bytes=_int(row["model_size_bytes"]),
        settings=_dict(row["settings_json"]),
        n_threads=_int(row["n_threads"]),
        engine_version=_text(row["engine_version"]),
        backend=_text(row["backend"]),
        mode=_text(row["mode"]),
        pp_tok_per_s=_number(row["pp_tok_per_s"]),
        pp_tok_per_s_sd=_number(row["pp_tok_per_s_sd"]),
        tg_tok_per_s=_number(row["tg_tok_per_s"]),
        tg_tok_per_s_sd=_number(row["tg_tok_per_s_sd"]),
        ttft_s=_number(row["ttft_s"]),
        peak_rss_bytes=None if peak is None else _int(peak),
        result=_dict(row["result_json"]),
    )
