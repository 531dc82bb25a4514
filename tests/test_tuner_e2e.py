"""End to end in Triton's interpreter: the real benchmark (random inputs, fp64 reference check) tunes
tiny shapes into a temporary DB, then matmul/addmm with enable_streamk=None run the DB winner."""

from __future__ import annotations

import pytest
import torch

import tritonblas
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.call import run as call_run
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tritonblas.tuning.benchmark import GpuBenchmark
from tritonblas.tuning.run import tune_problems
from tritonblas.tuning.space import candidate_space
from tuning_db import TuningDB

# Tiny shapes (each interpreter launch is ~0.1 s): a ragged fp16 one with partial tiles everywhere,
# and a transposed-A fp32 one with a row bias (the addmm path).
E2E = [Problem(33, 48, 40, "fp16"), Problem(40, 24, 72, "fp32", "tn", "row")]
# The smallest useful space: the two best distinct tiles, no neighbours.
SMALL = dict(top_k=2, neighbour_seeds=0, budget_s=120)
TORCH = {"fp16": torch.float16, "fp32": torch.float32}


@pytest.fixture
def url(tmp_path):
    path = str(tmp_path / "e2e.sqlite")
    dispatch.set_shipped_dir(tmp_path)  # no shipped files
    with dispatch.using_database(path):
        yield path
    dispatch.set_shipped_dir(None)


def operands(p: Problem):
    dt = TORCH[p.dtype]
    a = torch.randn(p.k, p.m, dtype=dt).t() if p.layout[0] == "t" else torch.randn(p.m, p.k, dtype=dt)
    b = torch.randn(p.k, p.n, dtype=dt)
    bias = torch.randn(p.n, dtype=dt) if p.bias == "row" else None
    return a, b, bias


def test_tune_then_matmul_runs_the_db_winner(url, monkeypatch):
    with TuningDB(url) as db:
        outcomes = tune_problems(E2E, INTERPRETER_DEVICE, db, bench=GpuBenchmark(), **SMALL)
        for o in outcomes:
            assert o.status == "tuned" and o.torch_ms is not None
            rows = db.measurements(o.key)
            assert len(rows) == o.candidates == len(candidate_space(o.problem, INTERPRETER_DEVICE,
                                                                    top_k=2, neighbour_seeds=0))
            assert all(r.status == "ok" and r.rel_error < 1e-2 for r in rows)
    dispatch.clear_cache()
    launched = []
    real = call_run.launch_gemm
    monkeypatch.setattr(call_run, "launch_gemm", lambda *a: launched.append(a[6]) or real(*a))
    for p, o in zip(E2E, outcomes, strict=True):
        s = dispatch.select(p.m, p.n, p.k, p.dtype, layout=p.layout, bias=p.bias)
        assert (s.source, s.config, s.time_ms) == ("db", o.winner.config, o.winner.median_ms)
        a, b, bias = operands(p)
        got = tritonblas.matmul(a, b) if bias is None else tritonblas.addmm(bias, a, b)
        ref = a.double() @ b.double() + (0 if bias is None else bias.double())
        assert launched[-1] == o.winner.config
        torch.testing.assert_close(got.double(), ref, rtol=2e-2, atol=2e-2)


def test_wrong_results_are_caught_by_the_real_benchmark(url, monkeypatch):
    p = E2E[0]
    space = candidate_space(p, INTERPRETER_DEVICE, **{k: SMALL[k] for k in ("top_k", "neighbour_seeds")})
    broken = space[0]
    real_call = GpuBenchmark._call

    def call(config, inp, out):
        run = real_call(config, inp, out)
        if config != broken:
            return run
        return lambda: (run(), out.mul_(1.01))  # 1% off: far above fp16's error

    monkeypatch.setattr(GpuBenchmark, "_call", staticmethod(call))
    with TuningDB(url) as db:
        out = tune_problems([p], INTERPRETER_DEVICE, db, bench=GpuBenchmark(), **SMALL)[0]
        status = {m.config: m for m in db.measurements(out.key)}
    assert status[broken].status == "wrong_result" and status[broken].rel_error > 5e-3
    assert out.winner.config != broken and status[out.winner.config].status == "ok"


def test_matmul_survives_a_corrupt_db(url):
    with open(url, "wb") as f:
        f.write(b"garbage" * 1000)
    dispatch.set_database(url)
    a, b, _ = operands(E2E[0])
    with pytest.warns(RuntimeWarning, match="tuning database cannot be used"):
        got = tritonblas.matmul(a, b)
    torch.testing.assert_close(got.double(), a.double() @ b.double(), rtol=2e-2, atol=2e-2)


def test_benchmark_times_dispatch_choice_and_stops_clear_losers_early(url):
    p = E2E[0]
    bench = GpuBenchmark()
    through_dispatch = bench(None, p, INTERPRETER_DEVICE)  # config=None: what matmul itself runs
    assert through_dispatch.status == "ok" and through_dispatch.rel_error < 1e-2
    config = candidate_space(p, INTERPRETER_DEVICE, top_k=1, neighbour_seeds=0)[0]
    quick = bench(config, p, INTERPRETER_DEVICE, cutoff_ms=1e-9)
    assert quick.status == "ok" and quick.note.startswith("stopped early")
    assert bench(config, p, INTERPRETER_DEVICE).note == ""
    assert bench.baseline(p, INTERPRETER_DEVICE) > 0
    bench.finish(p)


def test_prepare_stops_at_its_deadline(url):
    p = E2E[0]
    bench = GpuBenchmark()
    space = candidate_space(p, INTERPRETER_DEVICE, top_k=2, neighbour_seeds=0)
    assert bench.prepare(space, p, INTERPRETER_DEVICE, deadline=0.0) == {} and not bench._verified
    assert bench.prepare(space[:1], p, INTERPRETER_DEVICE) == {} and list(bench._verified) == space[:1]
    bench.finish(p)
