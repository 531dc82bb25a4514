"""Storage faults: the tuning database locked past the busy timeout, read-only, full, corrupt, or of a
newer schema. Writing (the tuner) gets a clear error naming the file and changes nothing; a user's
matmul never fails: dispatch reads what it still can, or falls back to the shipped configs and the
heuristic after a single warning.

Every fault is real SQLite behaviour, not a mocked exception: a second connection holding the write
lock, a connection opened with mode=ro (root ignores file permissions, so chmod cannot make one),
PRAGMA max_page_count (SQLite's own "database or disk is full"), overwritten bytes, and a migration
row from the future.
"""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch
from helpers.db import newer_schema
from helpers.fakes import FakeBench, WorkerBench
from sqlalchemy import create_engine, event
from typer.testing import CliRunner

import tritonblas
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.cli import app
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tritonblas.tuning import benchmark as benchmark_module
from tritonblas.tuning.tuner import tune_problem
from tuning_db import (
    CorruptDatabaseError,
    DatabaseLockedError,
    EnvIdentity,
    ProblemKey,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    TuningDB,
    TuningDBError,
    Winner,
)
from tuning_db import engine as eng
from tuning_db.exchange import export_file
from tuning_db.migrations import migrate

# The problem the user multiplies; the DB's winner for it is not the heuristic's pick, so a read
# that worked is visible in the selection's source and config.
P = Problem(40, 24, 56, "fp32")
TUNED = GemmConfig(block_m=16, block_n=32, block_k=16, group_m=1, num_warps=2, num_stages=1, grid=3)
OTHER = Problem(24, 40, 32, "fp32")  # tuned after the fault: the write that must fail
FAR = Problem(128, 8, 8, "fp32")  # no tuned neighbour within reach: the heuristic's
SHIPPED = GemmConfig(block_m=32, block_n=16, block_k=16, group_m=2, num_warps=1, num_stages=2, grid=2)


def _winner(problem: Problem) -> Winner:
    return Winner(key=ProblemKey.from_problem(problem, INTERPRETER_DEVICE), config=TUNED, median_ms=0.01,
                  created_at=datetime(2026, 11, 30, tzinfo=timezone.utc), env=EnvIdentity.current())


def _dump(path: Path) -> list[str]:
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return list(conn.iterdump())


@contextmanager
def _write_lock(path: Path) -> Iterator[None]:
    """Another connection holds the write lock (BEGIN IMMEDIATE) for as long as the block runs."""
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        yield
    finally:
        holder.execute("ROLLBACK")
        holder.close()


def _engine_with(path: Path, on_connect: Callable | None = None, read_only: bool = False):
    """make_engine for `path`, with the library's own hooks, opened read-only or with a connect hook."""
    real = eng.make_engine

    def make(url: str):
        if eng.sqlite_path(url) != path:
            return real(url)
        if read_only:
            engine = create_engine("sqlite://", creator=lambda: sqlite3.connect(
                f"file:{path}?mode=ro", uri=True, check_same_thread=False))
            eng._sqlite_hooks(engine)
        else:
            engine = real(url)
        if on_connect is not None:
            event.listen(engine, "connect", on_connect)
        return engine

    return make


def _full(dbapi_conn, _record) -> None:
    """Allow no page beyond the file's current size: SQLite's own SQLITE_FULL on the next growth."""
    pages = dbapi_conn.execute("PRAGMA page_count").fetchone()[0]
    dbapi_conn.execute(f"PRAGMA max_page_count={pages}")


def _corrupt(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[:100] + bytes([0xA5]) * 4000 + data[4100:])  # the schema page overwritten


def _checkpoint(path: Path) -> None:
    conn = sqlite3.connect(path)
    try:
        conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        conn.close()


@dataclass(frozen=True)
class Fault:
    id: str
    what: str
    error: type[TuningDBError]
    match: str
    readable: bool  # dispatch can still read the winners (a read needs no write lock, no free page)


# `_fault` makes each one on a file holding P's winner (the older-schema file holds none).
FAULTS = [
    Fault("locked", "another process holds the write lock longer than the busy timeout",
          DatabaseLockedError, "database is locked", True),
    Fault("locked_needs_migration", "locked while the file is at an older schema that opening must migrate",
          DatabaseLockedError, "database is locked", False),
    Fault("read_only", "the file can only be opened read-only", ReadOnlyDatabaseError,
          "database is read-only", True),
    Fault("disk_full", "the disk is full (no page may be added)", TuningDBError, "database or disk is full",
          True),
    Fault("corrupt", "the schema page is overwritten", CorruptDatabaseError, "not a tuning database",
          False),
    Fault("newer_schema", "written by a newer tritonblas (schema LATEST + 1)", SchemaTooNewError,
          "schema version .* newer tritonblas", False),
]


@contextmanager
def _fault(fault: Fault, path: Path, monkeypatch) -> Iterator[None]:
    monkeypatch.setattr(eng, "BUSY_TIMEOUT_S", 0.3)
    if fault.id == "locked_needs_migration":
        path.unlink()
        engine = eng.make_engine(eng.normalize_url(str(path)))
        migrate(engine, str(path), target=1)
        engine.dispose()
    else:
        with TuningDB(str(path)) as db:
            db.upsert_winner(_winner(P))
    if fault.id == "corrupt":
        _corrupt(path)
    elif fault.id == "newer_schema":
        newer_schema(str(path))
        _checkpoint(path)  # its sqlite3 connection may stay open: move its commit into the file now
    elif fault.id == "read_only":
        monkeypatch.setattr(eng, "make_engine", _engine_with(path, read_only=True))
    elif fault.id == "disk_full":
        monkeypatch.setattr(eng, "make_engine", _engine_with(path, on_connect=_full))
    if fault.id.startswith("locked"):
        with _write_lock(path):
            yield
    else:
        yield


@pytest.fixture
def user_db(tmp_path):
    """A SQLite file dispatch reads, and a shipped configs/interpreter.json with P tuned to SHIPPED;
    dispatch is reset afterwards."""
    with TuningDB(str(tmp_path / "ship.sqlite")) as ship:
        ship.upsert_winner(_winner(P).model_copy(update={"config": SHIPPED}))
        export_file(ship, tmp_path / "configs" / "interpreter.json", "interpreter")
    path = tmp_path / "tuning.sqlite"
    TuningDB(str(path)).close()
    dispatch.set_shipped_dir(tmp_path / "configs")
    with dispatch.using_database(str(path)):
        yield path
    dispatch.set_shipped_dir(None)


def _matmuls() -> tuple[list[str], int]:
    """Four user matmuls (three problems, one twice): the sources dispatch chose, and the warnings."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("ignore")  # numpy's deprecation notes from the interpreter
        warnings.simplefilter("always", RuntimeWarning)
        sources = []
        for p in (P, OTHER, FAR, P):
            a, b = torch.randn(p.m, p.k), torch.randn(p.k, p.n)
            torch.testing.assert_close(tritonblas.matmul(a, b), a @ b)
            sources.append(dispatch.select(p.m, p.n, p.k, "fp32").source)
    return sources, sum("tuning database cannot be used" in str(w.message) for w in caught)


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.id)
def test_write_fails_clearly_file_unchanged_and_matmul_falls_back(user_db, monkeypatch, fault):
    path = user_db
    with _fault(fault, path, monkeypatch):
        before_bytes = path.read_bytes()
        before = _dump(path) if fault.id != "corrupt" else None
        with pytest.raises(fault.error, match=f"{path}: .*{fault.match}"):
            with TuningDB(str(path)) as db:
                # the whole candidate space: enough rows that the full disk needs a new page
                tune_problem(OTHER, INTERPRETER_DEVICE, db, bench=FakeBench())
        dispatch.clear_cache()
        sources, warned = _matmuls()
        # Readable: P's winner in the DB; else the shipped one. OTHER: P's as the nearest neighbour.
        first = "db" if fault.readable else "shipped"
        assert sources == [first, "neighbor", "heuristic", first]
        assert warned == (0 if fault.readable else 1)
        assert dispatch.select(P.m, P.n, P.k, "fp32").config == (TUNED if fault.readable else SHIPPED)
        assert path.read_bytes() == before_bytes
        if before is not None:
            assert _dump(path) == before


runner = CliRunner()


CLI_FAULTS = ("locked", "read_only", "disk_full", "corrupt")


@pytest.mark.parametrize("fault", [f for f in FAULTS if f.id in CLI_FAULTS], ids=lambda f: f.id)
def test_tune_cli_reports_the_fault_and_exits_1(user_db, tmp_path, monkeypatch, fault):
    """`tritonblas tune` on a database it cannot write: exit 1 and a message naming the file, no
    traceback, nothing written."""
    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: WorkerBench())
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("dtypes: [fp32]\nshapes:\n  - {m: 24, n: 40, k: 32}\n")
    path = user_db
    with _fault(fault, path, monkeypatch):
        before = path.read_bytes()
        result = runner.invoke(app, ["tune", "--shapes", str(shapes), "--db", str(path)])
        assert result.exit_code == 1, result.output
        assert isinstance(result.exception, SystemExit), result.exception
        assert str(path) in result.output and fault.match.split(" .*")[0] in result.output, result.output
        assert path.read_bytes() == before


def test_tune_stops_benchmarking_once_the_database_cannot_take_results(user_db, tmp_path, monkeypatch):
    """The first problem's write fails (read-only file): the remaining problems fail with the same reason
    without being benchmarked, instead of spending the GPU on results that cannot be stored."""
    seen: list[int] = []

    class Counting(WorkerBench):
        def __call__(self, config, problem, device, *, cutoff_ms=None):
            seen.append(problem.m)
            return super().__call__(config, problem, device, cutoff_ms=cutoff_ms)

    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: Counting())
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text("dtypes: [fp32]\nshapes:\n  - {m: [24, 40, 56], n: 40, k: 32}\n")
    read_only = next(f for f in FAULTS if f.id == "read_only")
    with _fault(read_only, user_db, monkeypatch):
        result = runner.invoke(app, ["tune", "--shapes", str(shapes), "--db", str(user_db)])
    assert result.exit_code == 1, result.output
    assert set(seen) == {24}, seen
    assert result.output.count("database is read-only") >= 3, result.output
