"""scripts/mlp_step.py (issue 17): --help without a GPU, and a tiny CPU run of the whole flow (eager
and torch.compile, forward + backward through tritonblas.linear, checked against the F.linear block)."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "mlp_step.py"


def _module():
    spec = importlib.util.spec_from_file_location("mlp_step", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_help_needs_no_gpu():
    out = subprocess.run([sys.executable, str(SCRIPT), "--help"], capture_output=True, text=True, check=True)
    assert "--m" in out.stdout and "F.linear" in out.stdout


def test_tiny_step_eager_and_compiled(tmp_path, capsys):
    # fp16: the interpreter's bf16 tl.dot is less accurate than the check allows (see the script).
    path = tmp_path / "mlp.json"
    code = _module().main(["--m", "16", "--d", "32", "--f", "64", "--reps", "1", "--dtype", "fp16",
                           "--compile-backend", "aot_eager", "--json", str(path)])
    assert code == 0
    doc = json.loads(path.read_text())
    assert [(r["m"], r["mode"], r["ok"]) for r in doc["rows"]] == [(16, "eager", True), (16, "compile", True)]
    assert all(r["ours_ms"] > 0 and r["torch_ms"] > 0 for r in doc["rows"])
    # Nine GEMMs of 2*M*d*f FLOPs a step (three forward, six backward).
    flops = 18 * 16 * 32 * 64
    assert all(r["ours_tflops"] == pytest.approx(flops / (r["ours_ms"] * 1e9)) for r in doc["rows"])
    assert [g["layout"] for g in doc["gemms"]["16"]] == ["nt", "nt", "nn", "nn", "tn", "tn"]
    assert "geomean eager" in capsys.readouterr().out
