"""Concurrency and faults: parallel writers, a writer killed mid-transaction, corrupt and locked files."""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import threading
import time
import traceback
from pathlib import Path

import pytest
import sqlalchemy as sa
from helpers.db import BACKENDS, ENV, SMALL, empty_db, key, measurement, winner

from tritonblas.config import GemmConfig
from tuning_db import CorruptDatabaseError, DatabaseLockedError, TuningDB, TuningDBError
from tuning_db import engine as eng

WRITERS = 5
KEYS = 24
# Forked children start at once (spawned ones would each import torch through tritonblas, seconds on
# two cores); they share nothing with the parent's database: each opens its own TuningDB.
FORK = multiprocessing.get_context("fork")


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    yield from empty_db(request.param, tmp_path)


def _time(writer: int, i: int) -> float:
    """Each writer's time for key i: the fastest writer differs from key to key."""
    return 1.0 + ((writer * 7 + i * 3) % WRITERS) / 10


def _report(results, fn, *args) -> None:
    """Child body: run fn, send "ok" or the traceback to the parent, and exit without cleanup."""
    try:
        fn(*args)
        results.put("ok")
    except BaseException:
        results.put(traceback.format_exc())
    finally:
        results.close()
        results.join_thread()  # flush the queue's feeder thread: os._exit would drop what it holds
        os._exit(0)


def _writer(url: str, go, reading, w: int) -> None:
    """Opens the (maybe not yet created) database at the go signal, so all writers race on creation,
    migration and the same problem and environment rows; then one transaction per call. After the
    first key it waits until the reader has read once, so the reader surely reads during the writes
    (on a loaded machine the writers could otherwise finish before the reader starts)."""
    go.wait(30)
    config = GemmConfig(block_m=32, block_n=32, block_k=32, group_m=w + 1)
    with TuningDB(url) as db:
        for i in range(KEYS):
            k = key(m=16 * (i + 1))
            db.record_measurements(k, ENV, [measurement(config, _time(w, i))])
            db.upsert_winner(winner(k, ms=_time(w, i), config=config, host=f"writer-{w}"))
            if i == 0:
                reading.wait(30)


def test_parallel_writers_lose_nothing(db_url):
    go, reading, results = FORK.Event(), FORK.Event(), FORK.Queue()
    children = [FORK.Process(target=_report, args=(results, _writer, db_url, go, reading, w))
                for w in range(WRITERS)]
    for c in children:
        c.start()
    go.set()
    reads = 0
    with TuningDB(db_url) as db:
        while any(c.is_alive() for c in children):
            db.winners(env=ENV)  # a reader during the writes: never an error, never a wait
            reads += 1
            reading.set()
        for c in children:
            c.join(60)
        assert [results.get(timeout=10) for _ in children] == ["ok"] * WRITERS
        winners = db.winners(env=ENV)
        assert len(winners) == KEYS
        for i, w in enumerate(winners):
            assert w.median_ms == min(_time(x, i) for x in range(WRITERS)), i
            assert w.config.group_m - 1 in [x for x in range(WRITERS) if _time(x, i) == w.median_ms]
            assert len(db.measurements(w.key, ENV)) == WRITERS
        stats = db.stats(ENV)
        assert (stats["problems"], stats["environments"], stats["measurements"]) == (KEYS, 1, KEYS * WRITERS)
    assert reads > 0


def _opener(url: str, go) -> None:
    go.wait(30)
    with TuningDB(url) as db:
        db.upsert_winner(winner())


def test_processes_creating_one_new_file_together(tmp_path):
    # The race on a new file (creation, the switch to WAL, migration) is over in milliseconds; a few
    # rounds raise the odds of catching a regression (one round in ~40 failed before the WAL switch
    # retried).
    for round_ in range(4):
        url = str(tmp_path / f"new-{round_}.sqlite")
        go, results = FORK.Event(), FORK.Queue()
        children = [FORK.Process(target=_report, args=(results, _opener, url, go)) for _ in range(6)]
        for c in children:
            c.start()
        go.set()
        outcomes = [results.get(timeout=60) for _ in children]
        for c in children:
            c.join(30)
        assert outcomes == ["ok"] * 6, next(o for o in outcomes if o != "ok")
        with TuningDB(url) as db:
            assert len(db.winners(env=ENV)) == 1


def _killed_writer(url: str, inside) -> None:
    """Commits one winner, then writes more inside a transaction and waits there to be killed."""
    db = TuningDB(url)
    db.upsert_winner(winner(key(m=1)))

    def work(conn) -> None:
        for m in range(2, 40):
            TuningDB._put_winner(conn, winner(key(m=m)), "faster")
        inside.set()
        time.sleep(120)

    db._write(work)


def test_writer_killed_mid_transaction_leaves_a_consistent_database(db_url):
    inside = FORK.Event()
    child = FORK.Process(target=_killed_writer, args=(db_url, inside))
    child.start()
    assert inside.wait(60)
    os.kill(child.pid, signal.SIGKILL)
    child.join(30)
    assert child.exitcode == -signal.SIGKILL
    with TuningDB(db_url) as db:
        if eng.sqlite_path(db.url) is not None:
            with db._engine.connect() as conn:
                assert conn.execute(sa.text("PRAGMA integrity_check")).scalar() == "ok"
        assert [w.key.m for w in db.winners(env=ENV)] == [1]  # nothing of the killed transaction
        start = time.monotonic()
        assert db.upsert_winner(winner(key(m=2)))  # and its lock is gone
        assert time.monotonic() - start < 5
        assert [w.key.m for w in db.winners(env=ENV)] == [1, 2]


def _hold_write(url: str, entered: threading.Event, release: threading.Event) -> threading.Thread:
    """A thread that writes a winner and keeps its transaction open until `release` is set."""
    def run() -> None:
        with TuningDB(url) as db:
            def work(conn) -> None:
                TuningDB._put_winner(conn, winner(key(m=999)), "faster")
                entered.set()
                release.wait(30)
            db._write(work)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    assert entered.wait(30)
    return thread


def test_reader_never_waits_for_a_writer(db_url):
    with TuningDB(db_url) as db:
        db.upsert_winner(winner(key(m=1)))
        entered, release = threading.Event(), threading.Event()
        thread = _hold_write(db_url, entered, release)
        try:
            start = time.monotonic()
            assert [w.key.m for w in db.winners(env=ENV)] == [1]  # committed data only
            assert db.get_winner(key(m=1), ENV) is not None
            # Waiting would mean the busy timeout (30 s); 5 s leaves room for a loaded CI machine.
            assert time.monotonic() - start < 5.0
        finally:
            release.set()
            thread.join(30)
        assert [w.key.m for w in db.winners(env=ENV)] == [1, 999]


def test_writer_waits_then_reports_a_lock_naming_the_file(tmp_path, monkeypatch):
    monkeypatch.setattr(eng, "BUSY_TIMEOUT_S", 0.3)
    url = str(tmp_path / "locked.sqlite")
    with TuningDB(url) as db:
        entered, release = threading.Event(), threading.Event()
        thread = _hold_write(url, entered, release)
        try:
            with pytest.raises(DatabaseLockedError, match=f"{url}: database is locked"):
                db.record_measurements(key(), ENV, [measurement(SMALL)])
        finally:
            release.set()
            thread.join(30)
        db.record_measurements(key(), ENV, [measurement(SMALL)])
        assert len(db.measurements(key(), ENV)) == 1


def _real_db(path: Path) -> bytes:
    with TuningDB(str(path)) as db:
        db.upsert_winner(winner())
    return path.read_bytes()


def _overwrite(data: bytes, start: int, stop: int) -> bytes:
    return data[:start] + bytes([0xA5]) * (stop - start) + data[stop:]


# Damaged or foreign files, each with how it came to be.
CORRUPT = [
    ("text", lambda p: b"name,value\nnot,a database\n"),  # a CSV given by mistake
    ("random", lambda p: random.Random(0).randbytes(8192)),
    ("header-then-garbage", lambda p: b"SQLite format 3\x00" + random.Random(1).randbytes(4080)),
    ("schema-page-overwritten", lambda p: _overwrite(_real_db(p), 100, 4096)),
    ("half-a-header", lambda p: b"SQLite form"),
]


@pytest.mark.parametrize("name,make", CORRUPT, ids=[c[0] for c in CORRUPT])
def test_corrupt_file_is_refused_by_name_and_not_modified(tmp_path, name, make):
    path = tmp_path / "tuning.sqlite"
    data = make(path)
    for extra in path.parent.glob("tuning.sqlite-*"):
        extra.unlink()
    path.write_bytes(data)
    with pytest.raises(CorruptDatabaseError, match=str(path)):
        TuningDB(str(path))
    assert path.read_bytes() == data
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tuning.sqlite"]


def test_directory_is_not_a_database(tmp_path):
    with pytest.raises(TuningDBError, match=f"{tmp_path}: is a directory"):
        TuningDB(str(tmp_path))
