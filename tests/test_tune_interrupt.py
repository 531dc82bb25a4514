"""Ctrl-C stops a tuning run (issue 33): a SIGINT sent from inside a garbage-collection callback, where
Python's own handler raises a KeyboardInterrupt that is printed and lost ("Exception ignored in"), as
once in SQLAlchemy's. The run keeps what it stored, says so in one line, and exits 130; the same
command resumes. A fake benchmark sends the signal, to its own process or, from a worker, to the parent
too (as a terminal sends Ctrl-C to the whole process group)."""

from __future__ import annotations

import os
import signal
import time

import pytest
from typer.testing import CliRunner

from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.tuning import benchmark as benchmark_module
from tritonblas.tuning import interrupt
from tritonblas.tuning.protocol import Benchmark, BenchResult
from tritonblas.tuning.run import Interrupted, run_tuning
from tuning_db import TuningDB

SIGINT_M = 17  # the problem during whose second candidate Ctrl-C comes


class _Collected:
    """Sends SIGINT to `pids` when garbage-collected, and lets the handler run there."""

    def __init__(self, pids: tuple[int, ...]) -> None:
        self.pids = pids

    def __del__(self) -> None:
        for pid in self.pids:
            os.kill(pid, signal.SIGINT)
        time.sleep(0.05)  # Python runs the signal handler here, inside the callback


class CtrlCBench(Benchmark):
    """Fake timings; Ctrl-C at problem `at_m`'s second candidate, from a GC callback. Picklable."""

    def __init__(self, at_m: int | None = SIGINT_M, to_parent: bool = False, sleep_s: float = 0.0) -> None:
        self.at_m, self.to_parent, self.sleep_s = at_m, to_parent, sleep_s
        self.calls = 0

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        time.sleep(self.sleep_s)
        if problem.m == self.at_m:
            self.calls += 1
            if self.calls == 2:
                _Collected((os.getppid(), os.getpid()) if self.to_parent else (os.getpid(),))
        ms = 1.0 + config.block_m / 1000 + config.num_stages / 100
        return BenchResult("ok", ms, ms, ms, 1e-3)

    def baseline(self, problem, device):
        return 2.0


def _winners(url: str) -> set[Problem]:
    with TuningDB(url) as db:
        return {Problem.from_key(w.key) for w in db.winners(include_stale=False)}


def _shapes(tmp_path, ms) -> str:
    path = tmp_path / "shapes.yaml"
    path.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: {list(ms)}, n: 32, k: 32}}\n")
    return str(path)


def test_cli_ctrl_c_in_a_gc_callback_stops_the_run_with_130_and_the_rerun_resumes(tmp_path, monkeypatch):
    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: CtrlCBench())
    db, shapes = str(tmp_path / "t.sqlite"), _shapes(tmp_path, [16, SIGINT_M, 18])
    handler = signal.getsignal(signal.SIGINT)
    result = CliRunner().invoke(app, ["tune", "--shapes", shapes, "--db", db])
    assert result.exit_code == 130, result.output
    lines = [line for line in result.stderr.splitlines() if line.startswith("interrupted")]
    assert lines == ["interrupted: 1 new winner stored, 1 of 3 problems done; the same command resumes the "
                     "run"]
    assert _winners(db) == {Problem(16, 32, 32, "fp16")}  # the interrupted problem stored nothing
    assert signal.getsignal(signal.SIGINT) is handler  # the run's handler is gone
    monkeypatch.setattr(benchmark_module, "GpuBenchmark", lambda **kw: CtrlCBench(at_m=None))
    again = CliRunner().invoke(app, ["tune", "--shapes", shapes, "--db", db])
    assert again.exit_code == 0, again.output
    assert "done: 2 tuned, 1 already had a fresh winner" in again.stdout
    assert _winners(db) == {Problem(m, 32, 32, "fp16") for m in (16, SIGINT_M, 18)}


def test_workers_stop_when_ctrl_c_reaches_the_parent(tmp_path):
    url = str(tmp_path / "t.sqlite")
    TuningDB(url).close()
    problems = [Problem(m, 32, 32, "fp16") for m in range(16, 26)]
    with pytest.raises(Interrupted) as stop:
        run_tuning(problems, [0, 1], url, interpreter=True,
                   options={"budget_s": 30, "bench": CtrlCBench(to_parent=True, sleep_s=0.02)})
    rows = stop.value.rows
    assert len(rows) < len(problems)
    assert all(r.status == "tuned" for r in rows)
    assert _winners(url) == {r.problem for r in rows}  # every stored winner reported, and only those


def test_a_second_ctrl_c_raises_at_once_and_the_run_leaves_no_trace():
    handler = signal.getsignal(signal.SIGINT)
    with interrupt.deferred():
        os.kill(os.getpid(), signal.SIGINT)
        time.sleep(0.05)
        assert interrupt.requested()
        with pytest.raises(KeyboardInterrupt):
            interrupt.check()
        with pytest.raises(KeyboardInterrupt):
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(0.05)
    assert signal.getsignal(signal.SIGINT) is handler
    assert not interrupt.requested()  # a tuning call after the run is not stopped by its Ctrl-C
    interrupt.check()
