"""Multi-device tuning orchestration on CPU: real worker processes (spawned, in interpreter mode) and a
real database, with a fake benchmark so the test is about the orchestration, not the kernels."""

from __future__ import annotations

import pytest
from helpers.fakes import FAIL_M, WorkerBench
from typer.testing import CliRunner

from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.tuning import benchmark as benchmark_module
from tritonblas.tuning.run import Interrupted, run_tuning
from tuning_db import ProblemKey, TuningDB

# Distinct m per problem so a fake can single one out; tiny, since nothing real runs.
PROBLEMS = [Problem(m, 32, 32, "fp16") for m in (16, 17, 18, 19, 20, 21)]
CRASH_M = 18  # the worker tuning this problem dies (os._exit) in the crash test


def _winners(url: str) -> dict[Problem, object]:
    with TuningDB(url) as db:
        return {Problem.from_key(w.key): w for w in db.winners(include_stale=False)}


def test_two_workers_share_the_queue_and_write_one_db(tmp_path):
    url = str(tmp_path / "t.sqlite")
    TuningDB(url).close()
    (tmp_path / "meet").mkdir()
    events = []
    rows = run_tuning(PROBLEMS[:2] + PROBLEMS[4:], [0, 1], url, interpreter=True,
                      options={"budget_s": 30, "bench": WorkerBench(tmp_path / "meet")},
                      on_event=events.append)
    problems = PROBLEMS[:2] + PROBLEMS[4:]
    assert [r.problem for r in rows] == problems  # input order, whoever tuned them
    assert all(r.status == "tuned" and r.ok for r in rows), rows
    assert {r.device for r in rows} == {"cpu0", "cpu1"}
    assert all(r.speedup == pytest.approx(2.0 / r.median_ms) for r in rows)
    # Before its own tuning each problem had the heuristic, or a neighbour tuned earlier in the run.
    assert {r.previous for r in rows} <= {"heuristic", "neighbor"}
    assert sorted(e.index for e in events if e.kind == "start") == list(range(len(problems)))
    winners = _winners(url)
    assert set(winners) == set(problems)  # no lost rows
    with TuningDB(url) as db:
        for p in problems:
            assert db.measurements(ProblemKey.from_problem(p, INTERPRETER_DEVICE))


def test_a_crashed_worker_fails_only_its_problem(tmp_path):
    url = str(tmp_path / "t.sqlite")
    TuningDB(url).close()
    problems = [p for p in PROBLEMS if p.m != FAIL_M]
    rows = run_tuning(problems, [0, 1], url, interpreter=True,
                      options={"budget_s": 30, "bench": WorkerBench(crash_m=CRASH_M)})
    by_m = {r.problem.m: r for r in rows}
    assert len(rows) == len(problems)
    crashed = by_m[CRASH_M]
    assert crashed.status == "failed" and "died with exit code 3" in crashed.reason
    assert all(r.status == "tuned" for m, r in by_m.items() if m != CRASH_M)
    assert set(_winners(url)) == {p for p in problems if p.m != CRASH_M}


def test_workers_that_cannot_open_the_db_fail_every_problem_with_the_reason(tmp_path):
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("this is not a database")
    rows = run_tuning(PROBLEMS[:3], [0, 1], str(bad), interpreter=True,
                      options={"budget_s": 30, "bench": WorkerBench()})
    assert [r.status for r in rows] == ["failed"] * 3
    assert all("not tuned" in r.reason and "not-a-db.sqlite" in r.reason for r in rows), rows
    assert bad.read_text() == "this is not a database"


def test_in_process_interrupt_keeps_finished_problems_and_rerun_resumes(tmp_path):
    url = str(tmp_path / "t.sqlite")
    TuningDB(url).close()
    problems = PROBLEMS[:3]
    with pytest.raises(Interrupted) as stop:
        run_tuning(problems, [0], url, interpreter=True,
                   options={"budget_s": 30, "bench": WorkerBench(interrupt_m=problems[2].m)})
    assert [r.problem for r in stop.value.rows] == problems[:2]
    assert set(_winners(url)) == set(problems[:2])  # the interrupted problem wrote nothing
    rows = run_tuning(problems, [0], url, interpreter=True, options={"budget_s": 30, "bench": WorkerBench()})
    assert [r.status for r in rows] == ["skipped", "skipped", "tuned"]
    assert [r.previous for r in rows] == ["db", "db", "neighbor"]  # m=18 is next to the tuned m=16, 17


runner = CliRunner()


def _shapes(tmp_path, ms) -> str:
    path = tmp_path / "shapes.yaml"
    path.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: {list(ms)}, n: 32, k: 32}}\n")
    return str(path)


def test_cli_exits_1_naming_problems_without_a_verified_winner(tmp_path, fake_gpu_benchmark):
    db = str(tmp_path / "t.sqlite")
    result = runner.invoke(app, ["tune", "--shapes", _shapes(tmp_path, [16, FAIL_M]), "--db", db])
    assert result.exit_code == 1, result.output
    assert f"failed: {FAIL_M}x32x32 fp16 nn: none of" in result.stderr
    assert "1 of 2 problems have no verified winner" in result.stderr
    assert "no_winner" in result.stdout and "16x32x32 fp16 nn" in result.stdout  # the summary table
    assert set(_winners(db)) == {Problem(16, 32, 32, "fp16")}


def test_cli_ctrl_c_reports_what_was_saved(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: WorkerBench(interrupt_m=17))
    db = str(tmp_path / "t.sqlite")
    result = runner.invoke(app, ["tune", "--shapes", _shapes(tmp_path, [16, 17, 18]), "--db", db])
    assert result.exit_code == 130
    assert "interrupted: 1 new winner stored, 1 of 3 problems done; the same command resumes" in result.stderr
    assert set(_winners(db)) == {Problem(16, 32, 32, "fp16")}
