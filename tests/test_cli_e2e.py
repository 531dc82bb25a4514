"""End to end in Triton's interpreter: tune a tiny shapes file into a temp DB, export, check, bench;
then the installed console scripts through subprocess, two worker processes included."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.shapes import load_problems
from tuning_db import TuningDB

DATA = Path(__file__).parent / "data"
TINY = DATA / "tiny.yaml"
BIN = Path(sys.executable).parent
runner = CliRunner()
interpreter_only = pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                                      reason="the CPU end-to-end run needs Triton's interpreter")


def _ok(result) -> str:
    assert result.exit_code == 0, result.output
    return result.output


@pytest.fixture(scope="module")
def tuned(tmp_path_factory):
    """tiny.yaml tuned once into a fresh DB, exported to configs/interpreter.json."""
    tmp = tmp_path_factory.mktemp("e2e")
    db = str(tmp / "tune.sqlite")
    out = _ok(runner.invoke(app, ["tune", "--shapes", str(TINY), "--db", db, "--budget-s", "0.3",
                                  "--export", str(tmp / "configs" / "{arch}.json")]))
    return tmp, db, out


@interpreter_only
def test_tune_fills_the_db_and_exports(tuned):
    tmp, db, out = tuned
    problems = load_problems(TINY)
    assert "done: 2 tuned, 0 already had a fresh winner" in out
    assert "exported 2 winners for interpreter to" in out
    # The summary table: one row per problem; what dispatch ran before, the heuristic, or for the second
    # problem the first one's fresh winner as its neighbour when that is a TMA config (which crosses
    # layouts; which config wins in the interpreter is chance).
    for p in problems:
        line = next(line for line in out.splitlines() if f"{p.m}x{p.n}x{p.k} {p.dtype} {p.layout}" in line
                    and "tuned" in line and ("heuristic" in line or "neighbor" in line))
        assert " grid=" in line and "x torch.mm" not in line  # a table row, not the log line
    with TuningDB(db) as d:
        stored = {Problem.from_key(w.key) for w in d.winners()}
    assert stored == set(problems)
    exported = json.loads((tmp / "configs" / "interpreter.json").read_text())
    assert exported["header"]["arch"] == "interpreter" and exported["header"]["count"] == 2
    again = tmp / "again.json"  # `db export` writes the same bytes as `tune --export`
    _ok(runner.invoke(app, ["db", "export", "--db", db, "--arch", "interpreter", "-o", str(again)]))
    assert again.read_bytes() == (tmp / "configs" / "interpreter.json").read_bytes()


@interpreter_only
def test_rerun_skips_fresh_winners(tuned):
    _, db, _ = tuned
    out = _ok(runner.invoke(app, ["tune", "--shapes", str(TINY), "--db", db, "--budget-s", "0.3"]))
    assert "done: 0 tuned, 2 already had a fresh winner" in out
    assert out.count("skipped") >= 2 and " db " in out


@interpreter_only
def test_check_passes_on_the_export_and_fails_on_a_bigger_suite(tuned, tmp_path):
    tmp, _, _ = tuned
    exported = str(tmp / "configs" / "interpreter.json")
    out = _ok(runner.invoke(app, ["db", "check", "--shapes", str(TINY), "--file", exported]))
    assert "all 2 problems have a fresh winner" in out
    bigger = tmp_path / "bigger.yaml"
    bigger.write_text(TINY.read_text() + "  - {m: 64, n: 64, k: 64}\n")
    result = runner.invoke(app, ["db", "check", "--shapes", str(bigger), "--file", exported])
    assert result.exit_code == 1 and "missing: 64x64x64 fp16 nn" in result.output


@interpreter_only
def test_bench_writes_json_and_png(tuned, tmp_path):
    _, db, _ = tuned
    js, png = tmp_path / "out" / "bench.json", tmp_path / "out" / "bench.png"
    out = _ok(runner.invoke(app, ["bench", "--shapes", str(TINY), "--db", db, "--json", str(js),
                                  "--plot", str(png)]))
    assert "geomean speedup over torch.mm" in out
    doc = json.loads(js.read_text())
    assert doc["arch"] == "interpreter" and doc["interpreter"] is True and doc["db"] == db
    assert [(r["m"], r["n"], r["k"], r["layout"], r["bias"]) for r in doc["rows"]] == [
        (32, 32, 32, "nn", "none"), (16, 48, 64, "nt", "row")]
    for r in doc["rows"]:
        assert r["status"] == "ok" and r["source"] == "db"  # through dispatch, from the tuned DB
        assert r["ms"] > 0 and r["torch_ms"] > 0 and r["speedup"] == pytest.approx(r["torch_ms"] / r["ms"])
        assert r["loop_ms"] > 0 and r["torch_loop_ms"] > 0  # the eager loop ran too (a token one here)
        assert r["rel_error"] < 1e-2
    speedups = [r["speedup"] for r in doc["rows"]]
    assert doc["geomean_speedup"] == pytest.approx((speedups[0] * speedups[1]) ** 0.5)
    data = png.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n") and len(data) > 5000


def _script(name: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    exe = BIN / name
    assert exe.exists(), f"{exe} missing: install the package (pip install -e .)"
    return subprocess.run([str(exe), *args], capture_output=True, text=True, timeout=600,
                          env={**os.environ, **(env or {})})


def test_console_script_help():
    proc = _script("tritonblas-tune", "--help")
    assert proc.returncode == 0 and "--shapes" in proc.stdout and "Examples" in proc.stdout


def test_console_script_no_gpu_message():
    # CUDA_VISIBLE_DEVICES="" hides any GPU, so this holds on a GPU host too.
    proc = _script("tritonblas-tune", "--shapes", str(TINY),
                   env={"TRITON_INTERPRET": "0", "CUDA_VISIBLE_DEVICES": ""})
    assert proc.returncode == 2
    assert proc.stderr.strip().splitlines() == [proc.stderr.strip()]  # one line
    assert "need a CUDA or ROCm GPU" in proc.stderr and "TRITON_INTERPRET=1" in proc.stderr


@interpreter_only
def test_console_scripts_two_workers_in_the_interpreter(tmp_path):
    """Real kernels in two spawned workers (the parent's TRITON_INTERPRET reaches them), then the
    other console script checks the database they both wrote."""
    db = str(tmp_path / "multi.sqlite")
    proc = _script("tritonblas-tune", "--shapes", str(TINY), "--db", db, "--devices", "0,1",
                   "--budget-s", "0.3", env={"TRITON_INTERPRET": "1"})
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "on 2 device(s)" in proc.stdout and "done: 2 tuned" in proc.stdout
    with TuningDB(db) as d:
        # One fresh-clone CI run (2026-11-30) found a winner missing here after "done: 2 tuned", not
        # reproduced in 60 reruns since: the message keeps what is needed to find out why.
        assert {Problem.from_key(w.key) for w in d.winners()} == set(load_problems(TINY)), \
            (proc.stdout[-3000:], d.stats(), [(w.key, w.config.short()) for w in d.winners()])
    proc = _script("tritonblas", "db", "check", "--shapes", str(TINY), "--db", db)
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_python_dash_m():
    proc = subprocess.run([sys.executable, "-m", "tritonblas", "--version"], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and proc.stdout.startswith("tritonblas ")
