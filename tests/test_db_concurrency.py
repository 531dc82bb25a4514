"""Several tuning processes on one database (issue 13).

A tuning worker holds two connections to the database at once (dispatch's reader and the tuner's
TuningDB) and reopens the reader before every problem. Opening must not disturb the locks SQLite holds
for the process: closing any descriptor of the file drops them all (POSIX), and another process then
checkpoints and resets the WAL under this one (sqlite.org/howtocorrupt.html, 2.2: lost winners,
"database disk image is malformed"). The stress test runs what the workers do, in several processes
and rounds, with a reader thread next to each, and counts what was lost.
"""

from __future__ import annotations

import multiprocessing as mp
import os
import queue
import subprocess
import sys
import threading
import time
import warnings
from pathlib import Path

import pytest
from helpers.db import PG_ENV, drop_everything, pg_url_or_skip
from typer.testing import CliRunner

from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tritonblas.tuning import benchmark as benchmark_module
from tritonblas.tuning.protocol import Benchmark, BenchResult
from tritonblas.tuning.run import run_tuning, work_loop
from tritonblas.tuning.space import candidate_space
from tuning_db import ProblemKey, TuningDB, TuningDBError
from tuning_db.exchange import export_file, import_file

# Another process (no connection of its own before): take the database file's EXCLUSIVE lock, which
# leaving WAL mode needs. It must be refused while any process holds a connection.
_TAKE_EXCLUSIVE = """
import sqlite3, sys
conn = sqlite3.connect(sys.argv[1], timeout=0, isolation_level=None)
try:
    print(conn.execute("PRAGMA journal_mode=DELETE").fetchone()[0])
except sqlite3.OperationalError as e:
    print(f"refused: {e}")
"""


def _other_process_takes_exclusive(path: Path) -> str:
    return subprocess.run([sys.executable, "-c", _TAKE_EXCLUSIVE, str(path)], capture_output=True,
                          text=True, timeout=60).stdout.strip()


def _open_reader(url: str) -> None:  # what dispatch does on its first miss after clear_cache()
    TuningDB(url, create=False, migrate=False).close()


def _open_tuner(url: str) -> None:  # what a tuning worker does once, next to dispatch's reader
    TuningDB(url).close()


def _dispatch_reads(url: str) -> None:
    with dispatch.using_database(url):
        dispatch.clear_cache()
        dispatch.select(16, 32, 32, "fp16", device=INTERPRETER_DEVICE)


@pytest.mark.parametrize("opener", [_open_reader, _open_tuner, _dispatch_reads],
                         ids=["reader", "tuner", "dispatch"])
def test_opening_the_database_again_keeps_the_locks_of_the_process(tmp_path, opener):
    """Fails on the check that read the file's header with open()/close(): after it, another process
    could take the EXCLUSIVE lock (and switch the file out of WAL) under a live connection."""
    path = tmp_path / "t.sqlite"
    _open_tuner(str(path))
    with TuningDB(str(path)) as held:
        held.winners()  # a pooled connection: in WAL mode SQLite keeps a SHARED lock on the file for it
        assert _other_process_takes_exclusive(path).startswith("refused: database is locked")
        opener(str(path))
        after = _other_process_takes_exclusive(path)
        assert after.startswith("refused: database is locked"), \
            f"another process took the EXCLUSIVE lock under a live connection: {after!r}"
        held.winners()
    assert _other_process_takes_exclusive(path) == "delete"  # all closed: now it may


def test_export_and_import_refuse_the_database_file_itself(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningDB(str(path)) as db:
        db.winners()
        before = path.stat()
        for target in (path, Path(f"{path}-wal"), Path(f"{path}-shm")):
            with pytest.raises(TuningDBError, match="is the tuning database .* itself"):
                export_file(db, target, "interpreter")
            with pytest.raises(TuningDBError, match="is the tuning database .* itself"):
                import_file(db, target)
        assert path.stat().st_mtime_ns == before.st_mtime_ns
        assert _other_process_takes_exclusive(path).startswith("refused")


# ---- read-back: "tuned" only for winners the database holds ------------------------------------------


class FastBench(Benchmark):
    """Instant, config-dependent fake timings (picklable: it travels to spawned workers)."""

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        ms = 1.0 + config.block_m / 1000 + config.num_stages / 100 + config.block_n / 1e5
        return BenchResult("ok", ms, ms, ms, 1e-3)

    def baseline(self, problem, device):
        return 2.0


LOST_M = 17


@pytest.fixture
def lost_winner(monkeypatch):
    """A database that silently drops the winner of the problem with m == LOST_M: the write
    returns as if stored."""
    real = TuningDB.upsert_winner

    def upsert(self, winner):
        return True if winner.key.m == LOST_M else real(self, winner)

    monkeypatch.setattr(TuningDB, "upsert_winner", upsert)


def test_a_winner_that_is_not_stored_fails_its_row(tmp_path, lost_winner):
    url = str(tmp_path / "t.sqlite")
    problems = [Problem(m, 32, 32, "fp16") for m in (16, LOST_M)]
    rows = run_tuning(problems, [0], url, interpreter=True, options={"budget_s": 30, "bench": FastBench()})
    assert [r.status for r in rows] == ["tuned", "failed"]
    assert "was written, but reading it back" in rows[1].reason and "it was lost" in rows[1].reason
    assert str(tmp_path / "t.sqlite") in rows[1].reason


def test_a_winner_lost_after_its_worker_read_it_back_fails_its_row(tmp_path):
    """The parent reads every winner back once the workers are done: a loss after the worker's own
    read-back (as another process resetting the WAL would cause) is caught there."""
    url = str(tmp_path / "t.sqlite")
    problems = [Problem(m, 32, 32, "fp16") for m in (16, LOST_M)]

    def lose(ev):
        if ev.kind == "done" and ev.row.problem.m == LOST_M:
            import sqlalchemy as sa

            engine = sa.create_engine(f"sqlite:///{url}")
            with engine.begin() as conn:
                conn.execute(sa.text("DELETE FROM winners"))  # m=16's too: both were read back already
            engine.dispose()

    rows = run_tuning(problems, [0], url, interpreter=True, on_event=lose,
                      options={"budget_s": 30, "bench": FastBench()})
    assert [r.status for r in rows] == ["failed", "failed"]
    assert all("finds no winner: it was lost" in r.reason for r in rows), rows


def test_tune_cli_exits_1_naming_a_winner_it_cannot_read_back(tmp_path, monkeypatch, lost_winner):
    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: FastBench())
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: [16, {LOST_M}], n: 32, k: 32}}\n")
    db = tmp_path / "t.sqlite"
    result = CliRunner().invoke(app, ["tune", "--shapes", str(shapes), "--db", str(db)])
    assert result.exit_code == 1, result.output
    stderr = " ".join(result.stderr.split())  # rich wraps long lines
    assert f"failed: {LOST_M}x32x32 fp16 nn: winner " in stderr
    assert f"reading it back from {db} finds no winner: it was lost" in stderr
    assert "done: 1 tuned, 0 already had a fresh winner, 1 failed" in result.stdout
    assert "1 of 2 problems have no verified winner" in stderr
    with TuningDB(str(db)) as d:
        assert [w.key.m for w in d.winners()] == [16]


# ---- stress: tuning workers in several processes, each with a reader thread --------------------------

PROCESSES = 4
ROUNDS = 3
BACKENDS = ("sqlite-fresh", "sqlite-precreated", "postgresql")
# A smaller candidate space than the CLI's (16 candidates instead of ~52): the same writes, fewer rows.
OPTIONS = {"budget_s": 60, "top_k": 3, "neighbour_seeds": 1}


def _problems(rnd: int, worker: int) -> list[Problem]:
    """Distinct problems per round and worker; worker w tunes 1 + w of them, so the workers finish
    (and close their connections) while the others still write."""
    first = 16 + rnd * 16 + sum(1 + w for w in range(worker))
    return [Problem(first + j, 32, 32, "fp16") for j in range(1 + worker)]


def _watch(url: str, stop: threading.Event, errors: list[str]) -> int:
    """A reader thread: reopen the database (as dispatch does after clear_cache) and read every winner,
    again and again; a winner once seen must never be gone. Returns the number of reads."""
    seen: set = set()
    reads = 0
    while not stop.wait(0.02):
        try:
            with TuningDB(url, create=False, migrate=False) as db:
                now = {w.key for w in db.winners()}
        except TuningDBError as exc:
            errors.append(f"reader thread: {exc}")
            return reads
        reads += 1
        if seen - now:
            errors.append(f"reader thread: {len(seen - now)} winner(s) seen before are gone")
        seen |= now
    return reads


def _one_round(url: str, rnd: int, worker: int, rows: list, errors: list[str]) -> int:
    """What a tuning worker does (tuning.run.work_loop: dispatch reading, the tuner writing, in one
    process), with a reader thread next to it; after each problem dispatch must select the new winner
    from the database. Returns the reader thread's reads."""
    pending = list(enumerate(_problems(rnd, worker)))
    stop = threading.Event()
    reads: list[int] = []
    reader = threading.Thread(target=lambda: reads.append(_watch(url, stop, errors)))

    def emit(ev):
        if ev.kind == "start" and reader.ident is None:
            reader.start()  # once this process's TuningDB has created or migrated the file
        if ev.kind != "done":
            return
        row, p = ev.row, ev.row.problem
        rows.append((rnd, p, row.status, row.config, row.reason))
        dispatch.clear_cache()
        sel = dispatch.select(p.m, p.n, p.k, p.dtype, device=INTERPRETER_DEVICE)
        if (sel.source, sel.config) != ("db", row.config):
            errors.append(f"dispatch read back {sel.source} {sel.config.short()} for {p}")

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RuntimeWarning)
        try:
            work_loop(lambda: pending.pop(0) if pending else None, emit, 0, True, url,
                      {**OPTIONS, "bench": FastBench()})
        except Exception as exc:  # a failed tuner
            errors.append(f"worker {worker} round {rnd}: {type(exc).__name__}: {exc}")
    stop.set()
    if reader.ident is not None:
        reader.join(60)
    errors.extend(f"dispatch: {w.message}" for w in caught if "tuning database" in str(w.message))
    return sum(reads)


def _stress_worker(plan: dict[str, list[str]], worker: int, barrier, out) -> None:
    """One process: every backend's rounds in turn, each round started in all processes together."""
    found = {}
    for backend, urls in plan.items():
        rows: list = []
        errors: list[str] = []
        reads = 0
        for rnd, url in enumerate(urls):
            barrier.wait(timeout=300)
            reads += _one_round(url, rnd, worker, rows, errors)
        found[backend] = (rows, errors, reads)
    out.put(found)


def _stress(plan: dict[str, list[str]]) -> dict[str, dict]:
    ctx = mp.get_context("spawn")
    barrier, out = ctx.Barrier(PROCESSES), ctx.Queue()
    procs = [ctx.Process(target=_stress_worker, args=(plan, w, barrier, out)) for w in range(PROCESSES)]
    for p in procs:
        p.start()
    results = []
    try:
        deadline = time.monotonic() + 600
        while len(results) < PROCESSES and time.monotonic() < deadline:
            try:
                results.append(out.get(timeout=1))
            except queue.Empty:
                if all(p.exitcode is not None for p in procs) and out.empty():
                    break
    finally:
        for p in procs:
            p.join(30)
            if p.is_alive():
                p.terminate()
    assert len(results) == PROCESSES, f"{PROCESSES - len(results)} worker process(es) died: " \
        f"exit codes {[p.exitcode for p in procs]}"
    return {b: {"rows": [r for found in results for r in found[b][0]],
                "errors": [e for found in results for e in found[b][1]],
                "reads": sum(found[b][2] for found in results)} for b in plan}


@pytest.fixture(scope="module")
def stress(tmp_path_factory):
    """Every backend at hand, run once by one set of processes (each pays torch's import once)."""
    tmp = tmp_path_factory.mktemp("stress")
    plan = {"sqlite-fresh": [str(tmp / f"fresh{r}.sqlite") for r in range(ROUNDS)],  # none exists yet
            "sqlite-precreated": [str(tmp / "shared.sqlite")] * ROUNDS}
    TuningDB(plan["sqlite-precreated"][0]).close()
    pg = os.environ.get(PG_ENV, "").strip()
    if pg:
        drop_everything(pg)  # round 0 on an empty database: the workers race to create the schema
        plan["postgresql"] = [pg] * ROUNDS
    start = time.monotonic()
    try:
        yield plan, _stress(plan), time.monotonic() - start
    finally:
        if pg:
            drop_everything(pg)


def _stored(urls: list[str]) -> tuple[dict[Problem, object], int]:
    """Winners (problem -> config) and the number of measurement rows in the databases of `urls`."""
    stored, measurements = {}, 0
    for url in dict.fromkeys(urls):
        with TuningDB(url) as db:
            stored.update({Problem.from_key(w.key): w.config for w in db.winners()})
            measurements += db.stats()["measurements"]
            if not url.startswith("postgresql"):
                with db._engine.connect() as conn:
                    assert conn.exec_driver_sql("PRAGMA integrity_check").scalar() == "ok"
    return stored, measurements


@pytest.mark.parametrize("backend", BACKENDS)
def test_concurrent_tuning_workers_lose_nothing(stress, backend):
    plan, results, elapsed = stress
    if backend not in plan:
        pg_url_or_skip()
    got = results[backend]
    expected = {(r, p) for r in range(ROUNDS) for w in range(PROCESSES) for p in _problems(r, w)}
    failed = [r for r in got["rows"] if r[2] != "tuned"]
    assert not failed and not got["errors"], (failed, got["errors"][:10])
    assert {(r[0], r[1]) for r in got["rows"]} == expected
    reported = {r[1]: r[3] for r in got["rows"]}
    stored, measurements = _stored(plan[backend])
    lost = set(reported) - set(stored)
    assert not lost, f"{len(lost)} winners lost: {sorted(p.m for p in lost)}"
    assert stored == reported  # every winner read back, as reported
    want = sum(len(candidate_space(p, INTERPRETER_DEVICE, top_k=OPTIONS["top_k"],
                                   neighbour_seeds=OPTIONS["neighbour_seeds"])) for _, p in expected)
    assert measurements == want, f"{want - measurements} measurement rows lost"
    print(f"\n{backend}: {PROCESSES} processes x {ROUNDS} rounds, {len(expected)} winners and "
          f"{measurements} measurements written, {got['reads']} reader-thread reads; failed 0, lost 0, "
          f"every winner read back (all backends: {elapsed:.1f} s)")


def test_stress_problems_are_distinct():
    all_problems = [p for r in range(ROUNDS) for w in range(PROCESSES) for p in _problems(r, w)]
    assert len(set(all_problems)) == len(all_problems)
    assert all(ProblemKey.from_problem(p, INTERPRETER_DEVICE) for p in all_problems)
