"""Logging (issue 18): logging.getLogger("tritonblas") gets each dispatch decision at DEBUG once per
problem, fallbacks and database trouble at WARNING (still RuntimeWarnings too); TRITONBLAS_LOG turns it
on from the environment, read on first use."""

import logging
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from triton.runtime.errors import OutOfResources

import tritonblas
from tritonblas.call import run as call_run
from tritonblas.selection import dispatch

ROOT = Path(__file__).resolve().parents[1]
NO_DB = "/nonexistent/tritonblas-test.sqlite"  # absent: dispatch skips it


def _records(caplog, level=logging.DEBUG):
    return [r for r in caplog.records if r.name == "tritonblas" and r.levelno == level]


def test_each_decision_is_logged_once_at_debug(fresh_dispatch, caplog):
    a, b = torch.randn(24, 40).half(), torch.randn(40, 8).half()
    with caplog.at_level(logging.DEBUG, logger="tritonblas"):
        for _ in range(3):
            tritonblas.matmul(a, b)
        tritonblas.select(24, 8, 40, "fp16")  # the same decision: not logged again
    (rec,) = _records(caplog)
    sel = tritonblas.select(24, 8, 40, "fp16")
    msg = rec.getMessage()
    assert "24x8x40 fp16 layout=nn bias=none" in msg and "triton-interpreter" in msg
    assert f"backend={sel.backend}" in msg and f"source={sel.source}" in msg and sel.config.short() in msg
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger="tritonblas"):
        dispatch.clear_cache()  # a new decision after the selections are dropped
        tritonblas.matmul(a, b)
        tritonblas.matmul(a, b, enable_streamk=True)  # another restriction: another decision
    assert len(_records(caplog)) == 2 and "(Stream-K only)" in _records(caplog)[1].getMessage()


def test_a_fallback_is_a_warning_record_and_a_runtime_warning(fresh_dispatch, monkeypatch, caplog):
    a, b = torch.randn(33, 40).half(), torch.randn(40, 17).half()
    first = tritonblas.select(33, 17, 40, "fp16").config
    real = call_run.launch_gemm

    def launch(*args):
        if args[6] == first:
            raise OutOfResources(300000, 232448, "shared memory")
        return real(*args)

    monkeypatch.setattr(call_run, "launch_gemm", launch)
    with caplog.at_level(logging.WARNING, logger="tritonblas"), \
            pytest.warns(RuntimeWarning, match="could not be compiled"):
        tritonblas.matmul(a, b)
    (rec,) = _records(caplog, logging.WARNING)
    assert "could not be compiled for 33x17x40 fp16" in rec.getMessage() and first.short() in rec.getMessage()


def test_database_trouble_is_a_warning_record(fresh_dispatch, tmp_path, caplog):
    bad = tmp_path / "broken.sqlite"
    bad.write_bytes(b"this is not a database" * 100)
    dispatch.set_database(str(bad))
    with caplog.at_level(logging.WARNING, logger="tritonblas"), \
            pytest.warns(RuntimeWarning, match="tuning database cannot be used"):
        tritonblas.select(64, 64, 64, "fp16")
    (rec,) = _records(caplog, logging.WARNING)
    assert "tuning database cannot be used" in rec.getMessage()


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {**{k: v for k, v in os.environ.items() if k != "TRITONBLAS_LOG"}, "PYTHONPATH": str(ROOT),
            "TRITON_INTERPRET": "1", **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)


MATMUL = ("import torch, tritonblas\n"
          "tritonblas.matmul(torch.randn(8, 16).half(), torch.randn(16, 24).half())\n"
          "tritonblas.matmul(torch.randn(8, 16).half(), torch.randn(16, 24).half())\n")


def test_tritonblas_log_from_the_environment():
    debug = _run(MATMUL, TRITONBLAS_LOG="debug", TRITONBLAS_DB=NO_DB)
    assert debug.returncode == 0, debug.stderr
    lines = [line for line in debug.stderr.splitlines() if line.startswith("tritonblas DEBUG: dispatch")]
    assert len(lines) == 1 and "8x24x16 fp16" in lines[0]
    quiet = _run(MATMUL, TRITONBLAS_DB=NO_DB)
    assert quiet.returncode == 0 and "tritonblas" not in quiet.stderr
    info = _run(MATMUL, TRITONBLAS_LOG="info", TRITONBLAS_DB=NO_DB)
    assert info.returncode == 0 and "DEBUG" not in info.stderr


def test_tritonblas_log_is_read_on_first_use_not_at_import():
    bogus = _run("import tritonblas\nprint('imported')\n" + MATMUL.split("\n", 1)[1].replace(
        "torch.", "__import__('torch')."), TRITONBLAS_LOG="loud", TRITONBLAS_DB=NO_DB)
    assert bogus.returncode == 0, bogus.stderr
    assert bogus.stdout.strip() == "imported"
    assert bogus.stderr.count("TRITONBLAS_LOG must be one of") == 1  # one warning, at the first decision
