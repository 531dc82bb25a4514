"""`tritonblas-tune --shard I/N` (issue 18, part 5): every problem of a shapes file in exactly one shard,
the shard read from Slurm or a Kubernetes Indexed Job with `auto`, and 3 shards x 2 worker processes
tuning one file into one database (SQLite and the CI PostgreSQL) once, with no problem tuned twice."""

from __future__ import annotations

import pytest
from helpers.fakes import WorkerBench
from typer.testing import CliRunner

from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.tuning.run import run_tuning
from tritonblas.tuning.shard import Shard, parse_shard
from tuning_db import TuningDB

runner = CliRunner()
PROBLEMS = [Problem(m, 32, 32, "fp16") for m in range(16, 39)]  # 23: no shard count divides it
WORKS = [p for p in PROBLEMS if p.m != 19]  # WorkerBench fails every candidate of m=19


@pytest.mark.parametrize("count", range(1, 8))
def test_shards_partition_the_problems_exactly(count):
    shards = [Shard(i, count).take(PROBLEMS) for i in range(count)]
    flat = [p for s in shards for p in s]
    assert sorted(flat, key=PROBLEMS.index) == PROBLEMS and len(flat) == len(set(flat))  # once each
    assert max(map(len, shards)) - min(map(len, shards)) <= 1
    assert shards == [Shard(i, count).take(list(PROBLEMS)) for i in range(count)]  # deterministic


@pytest.mark.parametrize("text, env, shard", [
    ("0/4", {}, Shard(0, 4)), ("3/4", {}, Shard(3, 4)), (" 1/2 ", {}, Shard(1, 2)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "2", "SLURM_ARRAY_TASK_COUNT": "3"}, Shard(2, 3)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "7", "SLURM_ARRAY_TASK_COUNT": "4", "SLURM_ARRAY_TASK_MIN": "5"},
     Shard(2, 4)),
    ("auto", {"SLURM_ARRAY_TASK_ID": "4", "SLURM_ARRAY_TASK_COUNT": "3", "SLURM_ARRAY_TASK_STEP": "2"},
     Shard(2, 3)),
    ("auto/3", {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, Shard(1, 3)),
    ("auto/5", {"JOB_COMPLETION_INDEX": "4"}, Shard(4, 5)),
])
def test_parse_shard(text, env, shard):
    assert parse_shard(text, env) == shard


@pytest.mark.parametrize("text, env, fragment", [
    ("4/4", {}, "index must be 0 to count - 1"), ("-1/4", {}, "index must be"), ("1/0", {}, "index must be"),
    ("1", {}, "expected I/N"), ("a/4", {}, "the shard index I in I/N must be an integer"),
    ("auto", {}, "needs SLURM_ARRAY_TASK_ID and SLURM_ARRAY_TASK_COUNT"),
    ("auto", {"JOB_COMPLETION_INDEX": "1"}, "--shard auto/N"),
    ("auto/4", {"SLURM_ARRAY_TASK_ID": "1", "SLURM_ARRAY_TASK_COUNT": "3"}, "SLURM_ARRAY_TASK_COUNT=3"),
    ("auto/2", {"JOB_COMPLETION_INDEX": "2"}, "index must be"),
])
def test_bad_shards_are_refused(text, env, fragment):
    with pytest.raises(ValueError, match=fragment.replace("(", r"\(")):
        parse_shard(text, env)


def _shapes(tmp_path, ms) -> str:
    path = tmp_path / "shapes.yaml"
    path.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: {list(ms)}, n: 32, k: 32}}\n")
    return str(path)


def _tuned(url: str) -> set[Problem]:
    with TuningDB(url) as db:
        return {Problem.from_key(w.key) for w in db.winners()}


def test_the_cli_tunes_its_shard_only(tmp_path, fake_gpu_benchmark, monkeypatch):
    shapes, db = _shapes(tmp_path, [16, 17, 18, 20, 21, 22, 23]), str(tmp_path / "t.sqlite")  # 19 fails
    result = runner.invoke(app, ["tune", "--shapes", shapes, "--db", db, "--shard", "1/3"])
    assert result.exit_code == 0, result.output
    assert "tuning 2 problems (shard 1/3 of 7)" in result.output
    assert _tuned(db) == {Problem(m, 32, 32, "fp16") for m in (17, 21)}
    monkeypatch.setenv("SLURM_ARRAY_TASK_ID", "0")
    monkeypatch.setenv("SLURM_ARRAY_TASK_COUNT", "3")
    assert runner.invoke(app, ["tune", "--shapes", shapes, "--db", db, "--shard", "auto"]).exit_code == 0
    assert _tuned(db) == {Problem(m, 32, 32, "fp16") for m in (16, 17, 20, 21, 23)}


@pytest.mark.parametrize("shard, fragment", [("3/3", "index must be 0 to count - 1"),
                                             ("auto", "needs SLURM_ARRAY_TASK_ID")])
def test_the_cli_refuses_a_bad_shard_in_one_line_and_writes_nothing(tmp_path, shard, fragment, monkeypatch):
    for var in ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT", "JOB_COMPLETION_INDEX"):
        monkeypatch.delenv(var, raising=False)
    db = tmp_path / "t.sqlite"
    result = runner.invoke(app, ["tune", "--shapes", _shapes(tmp_path, [16, 17]), "--db", str(db),
                                 "--shard", shard])
    assert result.exit_code == 2 and fragment in result.stderr
    assert result.stderr.startswith("error: --shard: ")
    assert len(result.stderr.strip().splitlines()) == 1 and not db.exists()


def test_three_shards_of_two_workers_tune_the_file_once(db_url):
    """As a Slurm array of 3 tasks, each `tritonblas-tune --shard auto --devices 0,1` into one
    database: every problem is tuned by exactly one task (none skipped as done by another, none
    missing), spread over both workers of each task."""
    TuningDB(db_url).close()
    problems = WORKS[:9]
    seen: dict[Problem, int] = {}
    for task in range(3):
        shard = parse_shard("auto", {"SLURM_ARRAY_TASK_ID": str(task), "SLURM_ARRAY_TASK_COUNT": "3"})
        mine = shard.take(problems)
        rows = run_tuning(mine, [0, 1], db_url, interpreter=True,
                          options={"budget_s": 30, "bench": WorkerBench()})
        assert [r.problem for r in rows] == mine and all(r.status == "tuned" for r in rows), rows
        for r in rows:
            seen[r.problem] = seen.get(r.problem, 0) + 1
    assert seen == dict.fromkeys(problems, 1)
    assert _tuned(db_url) == set(problems)
