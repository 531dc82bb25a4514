"""Quantized problems (scaled_mm, issue 36) on the command line: explain and db show take --scales,
--out-dtype and --b-dtype; db export/check handle quantized keys; tune, bench and warmup take shapes files
with quantized problems, timed through tritonblas.scaled_mm (here a stand-in with the op's contract,
helpers.fakes.fake_scaled_mm, until the op's branch is merged) and refused at once without it."""

from __future__ import annotations

import functools
import json
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch
from helpers.fakes import fake_scaled_mm
from typer.testing import CliRunner

import tritonblas
from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch
from tritonblas.cli import app
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tritonblas.shapes import load_problems
from tritonblas.tuning.benchmark import GpuBenchmark
from tuning_db import EnvIdentity, ProblemKey, TuningDB, Winner

QUANT = Path(__file__).parent / "data" / "quantized.yaml"
H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
CONFIG = GemmConfig(block_m=32, block_n=32, block_k=64, num_warps=4, num_stages=2)
runner = CliRunner()
interpreter_only = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                      reason="the CPU runs need Triton's interpreter")


def run(tmp_path: Path, *args: object, code: int = 0) -> str:
    env = {"COLUMNS": "300", "TRITONBLAS_DB": str(tmp_path / "default.sqlite")}  # never the user's DB
    result = runner.invoke(app, [str(a) for a in args], env=env)
    assert result.exit_code == code, result.output
    return result.output


@pytest.fixture
def with_op(monkeypatch):
    monkeypatch.setattr(tritonblas, "scaled_mm", fake_scaled_mm, raising=False)


SM90 = ("--arch", "sm_90")
# explain's arguments, its exit code, and what its output must say.
EXPLAIN_CASES = [
    (("4096", "4096", "4096", "--dtype", "e4m3", "--scales", "row", "--out-dtype", "bf16", "--layout", "nt"),
     0, ["4096x4096x4096 e4m3->bf16, layout nt, bias none, scales row", "heuristic ranking"]),
    (("64", "8192", "8192", "--dtype", "e4m3", "--b-dtype", "e5m2", "--scales", "tensor", "--out-dtype",
      "bf16", "--layout", "nt"), 0, ["64x8192x8192 e4m3xe5m2->bf16", "scales tensor"]),
    (("16", "6144", "4096", "--dtype", "int8", "--scales", "row_a", "--bias", "row"), 0,
     ["int8->bf16, layout nn, bias row, scales row_a"]),  # int8's default output
    (("4096", "4096", "4096", "--dtype", "e4m3", "--scales", "tensor", "--layout", "nt", "--backend",
      "torch"), 0, ["e4m3->e4m3", "torch (torch._scaled_mm, the vendor GEMM)"]),  # fp8's default output: A's
    # a shipped Gluon pick under both tritons (configs/sm_90.json): its fast-accumulation calls run torch's
    (("4096", "4096", "4096", "--dtype", "e4m3", "--scales", "tensor", "--out-dtype", "bf16", "--layout",
      "nt"), 0, ["tma gluon", "use_fast_accum=True calls run torch._scaled_mm's fast mode"]),
    (("16", "16", "16", "--dtype", "e4m3"), 2, ["dtype e4m3 is quantized: give its scales"]),
    (("16", "16", "16", "--out-dtype", "bf16"), 2, ["--out-dtype goes with --scales"]),
    (("16", "16", "16", "--b-dtype", "e5m2"), 2, ["--b-dtype goes with --scales"]),
    (("16", "16", "16", "--scales", "row"), 2, ["dtype must be one of e4m3, e5m2, int8"]),
    (("16", "16", "16", "--dtype", "e4m3", "--scales", "row", "--bias", "full"), 2, ["bias none or row"]),
    (("16", "16", "16", "--dtype", "int8", "--b-dtype", "e4m3", "--scales", "row"), 2,
     ["int8 operands go with int8 only"]),
    (("16", "16", "16", "--dtype", "e4m3", "--scales", "blockwise"), 2, ["--scales"]),
]


@pytest.mark.parametrize("args, code, fragments", EXPLAIN_CASES, ids=lambda x: " ".join(x)
                         if isinstance(x, tuple) else None)
def test_explain_a_quantized_problem(tmp_path, args, code, fragments):
    out = run(tmp_path, "explain", *args, *SM90, code=code)
    for fragment in fragments:
        assert fragment in out, out


@pytest.mark.parametrize("command", [("explain",), ("db", "show")])
def test_help_shows_the_quantized_options_with_an_example(tmp_path, command):
    out = run(tmp_path, *command, "--help")
    for fragment in ("--scales", "--out-dtype", "--b-dtype", "--dtype e4m3 --scales row"):
        assert fragment in out, out


def _winner(problem: Problem) -> Winner:
    return Winner(key=ProblemKey.from_problem(problem, H200), config=CONFIG, median_ms=0.01,
                  created_at=datetime(2026, 12, 1, tzinfo=timezone.utc), env=EnvIdentity.current())


def test_db_export_check_and_show_handle_quantized_keys(tmp_path):
    first, second = load_problems(QUANT)
    db = tmp_path / "tune.sqlite"
    with TuningDB(str(db)) as opened:
        opened.upsert_winner(_winner(first))
    run(tmp_path, "db", "export", "--db", db, "-o", tmp_path / "sm_90.json")
    entries = json.loads((tmp_path / "sm_90.json").read_text())["entries"]
    assert [(e["a_dtype"], e["out_dtype"], e["scales"], e["bias"]) for e in entries] == [
        ("e4m3", "bf16", "row", "row")]
    out = run(tmp_path, "db", "check", "--shapes", QUANT, "--file", tmp_path / "sm_90.json", code=1)
    assert f"missing: {second.short()} on sm_90: no winner" in out and "1 of 2 problems" in out
    assert first.short() not in out
    out = run(tmp_path, "db", "show", "32", "48", "64", "--dtype", "e4m3", "--scales", "row", "--out-dtype",
              "bf16", "--layout", "nt", "--bias", "row", "--db", db)
    assert "32x48x64 e4m3->bf16 nt bias=row scales=row sm_90" in out
    run(tmp_path, "db", "show", "32", "48", "64", "--dtype", "e4m3", "--scales", "tensor", "--out-dtype",
        "bf16", "--layout", "nt", "--bias", "row", "--db", db, code=1)  # another scale mode: not stored


@pytest.fixture(params=["stand-in", "op"])
def scaled_mm_op(request, monkeypatch):
    """The contract stand-in, and tritonblas.scaled_mm itself where this tritonblas has it (the kernels
    in the interpreter)."""
    if request.param == "stand-in":
        monkeypatch.setattr(tritonblas, "scaled_mm", fake_scaled_mm, raising=False)


@interpreter_only
def test_tune_and_bench_time_quantized_problems_through_scaled_mm(tmp_path, scaled_mm_op):
    db = tmp_path / "tune.sqlite"
    out = run(tmp_path, "tune", "--shapes", QUANT, "--db", db, "--budget-s", "0.2")
    assert "done: 2 tuned" in out and "vs torch " in out  # the table's column: torch's op of each
    with TuningDB(str(db)) as opened:
        assert {Problem.from_key(w.key) for w in opened.winners()} == set(load_problems(QUANT))
    out = run(tmp_path, "bench", "--shapes", QUANT, "--db", db, "--json", tmp_path / "bench.json")
    assert "tritonblas vs torch on" in out and "geomean speedup over torch:" in out  # not torch.mm
    rows = json.loads((tmp_path / "bench.json").read_text())["rows"]
    assert [(r["dtype"], r["scales"], r["status"], r["source"]) for r in rows] == [
        ("e4m3", "row", "ok", "db"), ("int8", "tensor", "ok", "db")]
    assert all(r["torch_ms"] for r in rows)  # torch._scaled_mm and torch._int_mm run on the CPU


@interpreter_only
def test_the_benchmark_checks_scaled_mm_against_the_dequantized_product(monkeypatch):
    problem = load_problems(QUANT)[0]
    bench = GpuBenchmark()
    wrong = functools.partial(fake_scaled_mm, drop_scale_b=True)
    monkeypatch.setattr(tritonblas, "scaled_mm", wrong, raising=False)
    assert bench(CONFIG, problem, INTERPRETER_DEVICE).status == "wrong_result"
    bench.finish(problem)
    monkeypatch.setattr(tritonblas, "scaled_mm", fake_scaled_mm)
    result = bench(CONFIG, problem, INTERPRETER_DEVICE)
    assert result.status == "ok" and result.rel_error <= bench._inputs.tolerance
    assert bench.baseline(problem, INTERPRETER_DEVICE) > 0


@interpreter_only
def test_warmup_runs_quantized_problems_through_scaled_mm(tmp_path, with_op, monkeypatch):
    calls = []
    def recorded(*args, **kwargs):
        calls.append((args, kwargs))
        return fake_scaled_mm(*args, **kwargs)

    monkeypatch.setattr(tritonblas, "scaled_mm", recorded)
    out = run(tmp_path, "warmup", "--shapes", QUANT)
    assert "done: 2 compiled" in out and "0 failed" in out
    (a, b, scale_a, scale_b), kw = calls[0]
    assert (a.dtype, b.dtype, tuple(scale_a.shape), tuple(scale_b.shape)) == (
        torch.float8_e4m3fn, torch.float8_e4m3fn, (32, 1), (1, 48))
    # Layout nt: B column-major (its K axis contiguous), as torch._scaled_mm takes it.
    assert (kw["out_dtype"], tuple(kw["bias"].shape), b.stride()) == (torch.bfloat16, (48,), (1, 64))


@interpreter_only
def test_where_torch_refuses_the_problem_it_is_timed_against_bf16_torch_mm(monkeypatch):
    """On CUDA torch._scaled_mm refuses K or N not a multiple of 16: the comparison is then bf16 torch.mm
    of the same shapes and layouts (the CPU's torch takes every size, so the refusal is simulated)."""
    from tritonblas.tuning import scaled

    def refusing(ops, out):
        def call():
            raise RuntimeError("Expected trailing dimension of mat1 to be divisible by 16")
        return call

    monkeypatch.setattr(scaled, "vendor_call", refusing)
    mms = []
    real_mm = torch.mm
    monkeypatch.setattr(torch, "mm", lambda a, b, **kw: mms.append((a.dtype, b.dtype, b.stride()))
                        or real_mm(a, b, **kw))
    problem = load_problems(QUANT)[0]
    bench = GpuBenchmark()
    assert bench.baseline(problem, INTERPRETER_DEVICE) > 0
    assert mms and mms[-1] == (torch.bfloat16, torch.bfloat16, (1, problem.k))


@pytest.mark.parametrize("layout, says", [
    ("nt", "explicit calls run torch._scaled_mm (it beats torch's op by 5.0 us"),
    ("nt", "transparent mode's calls run torch._scaled_mm (it beats torch's op by 5.0 us"),
    ("nn", "calls run the kernel (torch refuses the problem"),
])
def test_explain_says_what_eager_quantized_calls_run(tmp_path, layout, says):
    """scaled_mm's plans take the plain ops' rules for eager calls, explicit and routed, where torch takes
    the problem at all (a Stream-K launch has no direct launch: charged on both)."""
    from helpers.dispatch import put, winner

    streamk = GemmConfig(block_m=64, block_n=64, block_k=64, streamk=True, grid=132)
    problem = Problem(2048, 2048, 2048, "e4m3", layout, "none", "bf16", None, "row")
    url = str(tmp_path / "db.sqlite")
    put(url, winner(problem, H200, streamk, 0.100, torch_ms=0.105))
    out = run(tmp_path, "explain", "2048", "2048", "2048", "--dtype", "e4m3", "--scales", "row",
              "--out-dtype", "bf16", "--layout", layout, *SM90, "--db", url)
    assert says in " ".join(out.split()), out
