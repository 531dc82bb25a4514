"""Warm-up (issue 18, part 3): `tritonblas warmup` and `tritonblas.warmup` run every problem once through
dispatch, so the config dispatch selects is compiled into triton's cache. In the interpreter (CPU) there
is nothing to compile: small problems are launched once, larger ones only selected."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest
from helpers.db import key, winner
from typer.testing import CliRunner

import tritonblas
from tritonblas.call import run as call_run
from tritonblas.cli import app
from tritonblas.parallel import run_first_launches
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tuning_db import EnvIdentity, TuningDB

TINY = str(Path(__file__).parent / "data" / "tiny.yaml")
runner = CliRunner()


@pytest.fixture(autouse=True)
def empty_dispatch(tmp_path, monkeypatch):
    """No user database and no shipped file: the heuristic selects, the same in every run."""
    monkeypatch.setenv("TRITONBLAS_DB", str(tmp_path / "none.sqlite"))
    dispatch.set_shipped_dir(tmp_path)
    with dispatch.using_database(False):
        yield
    dispatch.set_shipped_dir(None)


@pytest.fixture
def launches(monkeypatch):
    """The configs the kernels were launched with (and still run)."""
    seen = []
    real = call_run.launch_gemm
    monkeypatch.setattr(call_run, "launch_gemm", lambda *a, **k: seen.append(a[6]) or real(*a, **k))
    return seen


def test_warmup_runs_what_dispatch_selects(launches):
    small = [Problem(32, 32, 32, "fp16"), Problem(16, 48, 64, "fp16", "nt", "row")]
    big = Problem(4096, 4096, 4096, "fp16")
    results = tritonblas.warmup(problems=[*small, big, small[0]], progress=False)
    assert [r.problem for r in results] == [*small, big]  # in order, each once
    assert [r.status for r in results] == ["compiled", "compiled", "selected"]
    for r in results:
        sel = dispatch.select(r.problem.m, r.problem.n, r.problem.k, r.problem.dtype, layout=r.problem.layout,
                              bias=r.problem.bias)
        assert (r.config, r.source) == (sel.config, sel.source) and r.seconds >= 0
    assert launches == [results[0].config, results[1].config]  # the big one was not launched


def test_warmup_reads_shapes_files_and_config_files(tmp_path):
    path = tmp_path / "t.sqlite"
    with TuningDB(str(path)) as db:
        db.upsert_winner(winner(key(16, 64, 32), env=EnvIdentity.current()))
    exported = tmp_path / "sm_90.json"
    assert runner.invoke(app, ["db", "export", "--db", str(path), "-o", str(exported)]).exit_code == 0
    results = tritonblas.warmup(TINY, file=exported, progress=False)
    assert [r.problem for r in results] == [
        Problem(32, 32, 32, "fp16"), Problem(16, 48, 64, "fp16", "nt", "row"), Problem(16, 64, 32, "fp16")]
    assert {r.status for r in results} == {"compiled"}


def test_a_failing_problem_does_not_stop_the_others(monkeypatch):
    real = call_run.launch_gemm

    def refuse(*args, **kwargs):
        if args[0].shape[0] == 17:
            raise RuntimeError("fake: no room")
        return real(*args, **kwargs)

    monkeypatch.setattr(call_run, "launch_gemm", refuse)
    results = tritonblas.warmup(problems=[Problem(17, 32, 32, "fp16"), Problem(32, 32, 32, "fp16")],
                                progress=False)
    assert [r.status for r in results] == ["failed", "compiled"]
    assert "fake: no room" in results[0].note


def test_first_launches_run_in_threads_with_a_deadline():
    """What warm-up and the tuner's prepare share: jobs in threads, in order, results by job; jobs not
    started by the deadline are dropped, and the running ones get the timeout to finish."""
    threads, done = set(), []

    def job(n: int) -> int:
        threads.add(threading.get_ident())
        time.sleep(0.2 if n < 4 else 0.0)
        return n * n

    results, pending = run_first_launches(list(range(4)), job, workers=4, on_done=lambda j, r: done.append(j))
    assert results == {0: 0, 1: 1, 2: 4, 3: 9} and pending == [] and sorted(done) == [0, 1, 2, 3]
    assert len(threads) == 4  # all four ran at once
    results, pending = run_first_launches(list(range(8)), job, workers=2, deadline=time.monotonic() + 0.1,
                                          timeout_s=5)
    assert set(results) == {0, 1} and pending == []  # the two started finish; the rest are dropped
    results, pending = run_first_launches([0, 1], job, workers=2, deadline=time.monotonic(), timeout_s=0.01)
    assert pending and not results  # still running after the timeout: reported, not waited for
    results, _ = run_first_launches(list(range(3)), job, workers=1)  # the interpreter's way: in order
    assert list(results) == [0, 1, 2]


def test_the_cli_warms_up_and_reports(launches):
    result = runner.invoke(app, ["warmup", "--shapes", TINY])
    assert result.exit_code == 0, result.output
    assert "warming up 2 problems" in result.output and "done: 2 compiled, 0 run by torch.mm" in result.output
    assert len(launches) == 2


def test_the_cli_needs_problems_and_fails_a_failed_problem(monkeypatch, tmp_path):
    result = runner.invoke(app, ["warmup"])
    assert result.exit_code == 2 and result.stderr.strip() == \
        "error: give the problems with --shapes FILE or --file CONFIG_FILE"
    missing = runner.invoke(app, ["warmup", "--file", str(tmp_path / "none.json")])
    assert missing.exit_code == 1 and "cannot read config file" in missing.stderr
    monkeypatch.setattr(call_run, "launch_gemm", lambda *a, **k: (_ for _ in ()).throw(RuntimeError("fake")))
    result = runner.invoke(app, ["warmup", "--shapes", TINY])
    assert result.exit_code == 1 and "2 of 2 problems failed to warm up" in result.stderr
    assert "failed: 32x32x32 fp16 nn: RuntimeError: fake" in result.stderr


def test_warmup_with_a_progress_bar(capsys):
    results = tritonblas.warmup(problems=[Problem(32, 32, 32, "fp16")], progress=True)
    assert results[0].status == "compiled"
    assert "warming up" in capsys.readouterr().err
