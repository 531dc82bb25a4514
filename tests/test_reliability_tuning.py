"""Faults in tuning: failing candidates through the real benchmark, a tuner killed mid-problem, and
several tuners writing one database at once (SQLite and PostgreSQL).

The kernels run in Triton's interpreter where a test needs real verification; elsewhere a fake,
deterministic benchmark keeps the test about the tuner and the database, not about timing.
"""

from __future__ import annotations

import multiprocessing
import os
import random
import signal
import sqlite3
import subprocess
import sys
import textwrap
import time
import zlib
from pathlib import Path

import pytest
import sqlalchemy as sa
import torch
from helpers.db import BACKENDS, empty_db
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

import tritonblas.call.run
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.problem import Problem
from tritonblas.tuning.benchmark import GpuBenchmark
from tritonblas.tuning.protocol import Benchmark, BenchResult
from tritonblas.tuning.run import tune_problems
from tritonblas.tuning.space import candidate_space
from tritonblas.tuning.tuner import tune_problem
from tuning_db import EnvIdentity, ProblemKey, TuningDB

ROOT = Path(__file__).resolve().parent.parent
FORK = multiprocessing.get_context("fork")


# --- failing candidates, verified for real ---

def _compile_error() -> CompilationError:
    import ast

    return CompilationError("def k(): ...", ast.parse("x").body[0], "injected: unsupported op")


def test_failing_candidates_through_the_real_benchmark_are_recorded_and_never_chosen(tmp_path, monkeypatch):
    """GpuBenchmark (interpreter) compiles, verifies against float64 and times each candidate; six of
    them fail in the six ways a GPU candidate can. Tuning goes on, records each failure with its
    status, and picks a winner among the rest that really is correct."""
    problem = Problem(32, 48, 40, "fp16")
    space = candidate_space(problem, INTERPRETER_DEVICE, top_k=4, neighbour_seeds=1)
    assert len(space) >= 8
    failing = dict(zip(space[:6], [
        ("out_of_resources", OutOfResources(300_000, 232_448, "shared memory")),
        ("out_of_resources", OutOfResources(320, 255, "registers")),
        ("compile_error", _compile_error()),
        ("launch_error", RuntimeError("CUDA error: an illegal memory access was encountered")),
        ("wrong_result", "corrupt"),
        ("timeout", "slow"),
    ], strict=True))
    real = tritonblas.call.run.launch_gemm

    def launch(a, b, c, bias, alpha, beta, config, *rest):
        what = failing.get(config, (None, None))[1]
        if isinstance(what, BaseException):
            raise what
        real(a, b, c, bias, alpha, beta, config, *rest)
        if what == "corrupt":
            c[0, 0] += 1000  # one wrong element: verification must see it
        elif what == "slow":
            time.sleep(1.2)

    monkeypatch.setattr(tritonblas.call.run, "launch_gemm", launch)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        out = tune_problem(problem, INTERPRETER_DEVICE, db, bench=GpuBenchmark(cpu_reps=1), top_k=4,
                           neighbour_seeds=1, budget_s=120, early_stop=False, candidate_timeout_s=1.0)
        rows = {m.config: m for m in db.measurements(out.key)}
        winner = db.get_winner(out.key)
    assert out.status == "tuned" and winner.config == out.winner.config
    assert winner.config not in failing and rows[winner.config].status == "ok"
    assert {c: rows[c].status for c in failing} == {c: s for c, (s, _) in failing.items()}
    assert all(rows[c].median_ms is None for c in failing)
    assert "illegal memory access" in rows[space[3]].note and "registers" in rows[space[1]].note
    assert rows[space[4]].rel_error > 0.01  # measured, not guessed
    assert len(rows) == len(space)  # tuning went on past every failure
    a, b = torch.randn(32, 40, dtype=torch.float16), torch.randn(40, 48, dtype=torch.float16)
    monkeypatch.undo()
    ours = tritonblas.matmul(a, b, config=winner.config)
    torch.testing.assert_close(ours, (a.double() @ b.double()).half(), atol=1e-2, rtol=1e-2)


# --- a tuner killed mid-problem ---

# Run by a fresh interpreter: the real `tritonblas tune` command with a fake benchmark that signals
# (a marker file) and then blocks at the chosen point of the chosen problem, waiting to be killed.
_KILLED_TUNER = textwrap.dedent("""
    import os, sys, time, zlib
    from pathlib import Path
    from tritonblas.cli import app
    from tritonblas.tuning import benchmark
    from tritonblas.tuning.protocol import Benchmark, BenchResult
    from tuning_db import TuningDB

    marker, kill_m, point, shapes, db = Path(sys.argv[1]), int(sys.argv[2]), *sys.argv[3:6]

    def block():
        marker.touch()
        time.sleep(300)

    class Bench(Benchmark):
        def __call__(self, config, problem, device, *, cutoff_ms=None):
            if point == "benchmark" and problem.m == kill_m:
                block()
            ms = 0.5 + zlib.crc32(config.short().encode()) % 1000 / 1000
            return BenchResult("ok", ms, ms, ms, 1e-3)

    benchmark.GpuBenchmark = lambda **kw: Bench()
    if point == "between_writes":  # measurements committed, the winner not yet written
        upsert = TuningDB.upsert_winner
        TuningDB.upsert_winner = lambda self, w: block() if w.key.m == kill_m else upsert(self, w)
    app(["tune", "--shapes", shapes, "--db", db, "--budget-s", "60"])
""")
KILL_MS = [16, 17, 18, 19]  # problems m x 32 x 32 fp16, tuned in this order; killed during m = 18


def _winners_by_m(db: TuningDB) -> dict[int, object]:
    return {w.key.m: w for w in db.winners()}


@pytest.mark.parametrize("point", ["benchmark", "between_writes"])
def test_killed_tuner_leaves_a_consistent_database_and_a_rerun_resumes(tmp_path, point):
    shapes = tmp_path / "shapes.yaml"
    shapes.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: {KILL_MS}, n: 32, k: 32}}\n")
    db_path, marker, script = tmp_path / "t.sqlite", tmp_path / "inside", tmp_path / "tuner.py"
    script.write_text(_KILLED_TUNER)
    # The child runs the triton this suite runs (an overlay on PYTHONPATH too): its rows must be this one's.
    path = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": path}
    args = [str(script), str(marker), "18", point, str(shapes), str(db_path)]
    child = subprocess.Popen([sys.executable, *args], env=env, stdout=subprocess.DEVNULL,
                             stderr=subprocess.PIPE)
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert child.poll() is None, child.stderr.read().decode()[-2000:]
            assert time.monotonic() < deadline, "the tuner never reached problem m=18"
            time.sleep(0.05)
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(30)
    assert child.returncode == -signal.SIGKILL
    with sqlite3.connect(db_path) as conn:
        assert conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"
    with TuningDB(str(db_path)) as db:
        assert sorted(_winners_by_m(db)) == [16, 17]
        killed_key = ProblemKey.from_problem(Problem(18, 32, 32, "fp16"), INTERPRETER_DEVICE)
        kept = db.measurements(killed_key)
        # killed while benchmarking: its transaction never began; between the two writes: the
        # measurements committed on their own, and no winner
        assert (len(kept) > 0) == (point == "between_writes")
        stats = db.stats()
        assert stats["winners"] == 2
        problems = [Problem(m, 32, 32, "fp16") for m in KILL_MS]
        outcomes = tune_problems(problems, INTERPRETER_DEVICE, db, bench=_DeterministicBench(),
                             budget_s=60, top_k=10)
        assert [o.status for o in outcomes] == ["skipped", "skipped", "tuned", "tuned"]
        winners = _winners_by_m(db)
        assert sorted(winners) == KILL_MS and db.stats()["winners"] == len(KILL_MS)
        remeasured = db.measurements(killed_key)
        assert len(remeasured) == len({m.config for m in remeasured})  # a rerun replaces, never duplicates


class _DeterministicBench(Benchmark):
    """Every process agrees on every time: the fastest config of a problem is the same for all.
    `slow`: problems whose candidates take 50 ms each, so that tuners meet on them."""

    def __init__(self, slow: tuple[Problem, ...] = ()) -> None:
        self.slow = slow

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        if problem in self.slow:
            time.sleep(0.05)
        ms = 0.5 + zlib.crc32(config.short().encode()) % 1000 / 1000
        return BenchResult("ok", ms, ms, ms, 1e-3)


# --- several tuners on one database ---

TUNERS = 5
CONCURRENT = [Problem(16 * (i + 1), 32 + 8 * (i % 3), 64, "fp16", "nn" if i % 2 else "nt") for i in range(12)]


@pytest.fixture(params=BACKENDS)
def db_url(request, tmp_path):
    yield from empty_db(request.param, tmp_path)


def _tuner(url: str, seed: int, log: Path) -> None:
    """One tuning process: all the problems, the first one first and the rest in its own order, against
    the same database; logs the problems it tuned (rather than found tuned)."""
    rest = CONCURRENT[1:]
    random.Random(seed).shuffle(rest)
    with TuningDB(url) as db:
        outcomes = tune_problems([CONCURRENT[0], *rest], INTERPRETER_DEVICE, db, budget_s=60, top_k=4,
                             neighbour_seeds=1, bench=_DeterministicBench(slow=(CONCURRENT[0],)))
    log.write_text("\n".join(repr(o.problem) for o in outcomes if o.status == "tuned"))


def test_concurrent_tuners_lose_and_duplicate_no_winner(db_url, tmp_path):
    TuningDB(db_url).close()  # created and migrated first, as `tritonblas tune` does before its workers
    logs = [tmp_path / f"tuner-{s}.log" for s in range(TUNERS)]
    # Forked workers start at once; a failure in one comes back here with its traceback.
    with FORK.Pool(TUNERS) as pool:
        pool.starmap(_tuner, [(db_url, s, logs[s]) for s in range(TUNERS)])
    tuned = [line for log in logs for line in log.read_text().splitlines()]
    # they met: several tuned the first problem at once (each found no winner yet), and all their
    # writes for it landed in one winner row
    assert tuned.count(repr(CONCURRENT[0])) >= 2, tuned
    env = EnvIdentity.current()
    with TuningDB(db_url) as db:
        winners = db.winners(include_stale=False)
        assert len(winners) == len(CONCURRENT)  # none lost
        assert {Problem.from_key(w.key) for w in winners} == set(CONCURRENT)  # none duplicated
        for w in winners:
            space = candidate_space(Problem.from_key(w.key), INTERPRETER_DEVICE, top_k=4, neighbour_seeds=1)
            assert w.config == min(space, key=lambda c: (_ms(c), space.index(c))), w.key.describe()
            assert len(db.measurements(w.key, env)) == len(space)  # each candidate once
        engine = sa.create_engine(db.url)
        try:
            with engine.connect() as conn:  # straight from the tables, past any API de-duplication
                rows = conn.execute(sa.text("SELECT count(*), count(DISTINCT problem_id) FROM winners")).one()
        finally:
            engine.dispose()
        assert tuple(rows) == (len(CONCURRENT), len(CONCURRENT))


def _ms(config) -> float:
    return _DeterministicBench()(config, None, None).median_ms

