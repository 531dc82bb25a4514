"""Recorded shapes (issue 18): enable(record=...) / TRITONBLAS_RECORD add every new problem once to a
shapes.yaml that the tuner reads as it is; several processes recording into one file lose nothing."""

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

import tritonblas
from tritonblas import record
from tritonblas.config import Problem
from tritonblas.shapes import load_problems

ROOT = Path(__file__).resolve().parents[1]
f16 = torch.float16


@pytest.fixture(autouse=True)
def _fresh():
    record._state.__init__()
    yield
    tritonblas.disable()
    record._state.__init__()


def _t(*shape, dtype=f16):
    return torch.randn(*shape).to(dtype)


def test_every_new_problem_is_recorded_once_for_the_tuner(tmp_path):
    path = tmp_path / "shapes.yaml"
    a, b, w, bias = _t(33, 20), _t(20, 17), _t(17, 20), _t(17)
    with tritonblas.enable(record=path):
        for _ in range(3):
            torch.mm(a, b)  # transparent
            F.linear(a, w, bias)  # addmm with a row bias, B column-major
            tritonblas.matmul(a.float(), b.float())  # an explicit op is recorded too
            torch.addmm(torch.zeros(33, 1, dtype=f16), a, b)  # a column bias
            torch.mm(a[:0], b)  # an empty output: nothing to tune
        mtime = path.stat().st_mtime_ns
        torch.mm(a, b)
    assert path.stat().st_mtime_ns == mtime  # known problems do not touch the file
    assert sorted(load_problems(path), key=repr) == sorted([
        Problem(33, 17, 20, "fp16", "nn", "none"), Problem(33, 17, 20, "fp16", "nt", "row"),
        Problem(33, 17, 20, "fp32", "nn", "none"), Problem(33, 17, 20, "fp16", "nn", "column")], key=repr)
    assert oct(path.stat().st_mode & 0o777) == "0o644"


def test_problems_already_in_the_file_are_kept_and_not_added_again(tmp_path):
    path = tmp_path / "shapes.yaml"
    path.write_text("dtypes: [fp16]\nshapes:\n  - {m: [16, 32], n: 17, k: 20}\n")
    with tritonblas.enable(record=path):
        torch.mm(_t(16, 20), _t(20, 17))
        torch.mm(_t(48, 20), _t(20, 17))
    assert set(load_problems(path)) == {Problem(m, 17, 20, "fp16") for m in (16, 32, 48)}
    assert len(load_problems(path)) == 3


def test_plans_made_before_recording_started_are_recorded(tmp_path):
    a, b = _t(8, 8), _t(8, 8)
    tritonblas.matmul(a, b)
    tritonblas.matmul(a, b)  # a plan hit: no new planning
    path = tmp_path / "late.yaml"
    with tritonblas.enable(record=path):
        tritonblas.matmul(a, b)
    assert load_problems(path) == [Problem(8, 8, 8, "fp16")]


def test_a_file_that_is_not_a_shapes_file_is_never_overwritten(tmp_path):
    path = tmp_path / "notes.yaml"
    path.write_text("my notes: [1, 2\n")
    with tritonblas.enable(record=path), pytest.warns(RuntimeWarning, match="cannot record"):
        torch.mm(_t(8, 8), _t(8, 8))
        torch.mm(_t(16, 8), _t(8, 8))  # no second warning (pytest.warns would not tell; see below)
    assert path.read_text() == "my notes: [1, 2\n"
    assert record._state.refused == {path}


def test_tritonblas_record_from_the_environment(tmp_path):
    path = tmp_path / "env.yaml"
    code = ("import torch, tritonblas\n"
            "tritonblas.matmul(torch.randn(4, 6).half(), torch.randn(6, 5).half())\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "TRITONBLAS_RECORD": str(path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert load_problems(path) == [Problem(4, 5, 6, "fp16")]


WORKER = """
import sys, time
from pathlib import Path
from tritonblas import record
from tritonblas.config import Problem
path, worker, go = Path(sys.argv[1]), int(sys.argv[2]), Path(sys.argv[3])
record.start(path)
while not go.exists():
    time.sleep(0.001)
for i in range(40):
    # 20 problems of this worker's own, 20 every worker records
    m = 1000 + worker * 100 + i if i % 2 else 16 + i
    record.note(Problem(m, 64, 32, "bf16", "nt", "row"))
"""


def test_several_processes_recording_into_one_file_lose_nothing(tmp_path):
    path, go, workers = tmp_path / "shared.yaml", tmp_path / "go", 4
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    procs = [subprocess.Popen([sys.executable, "-c", WORKER, str(path), str(w), str(go)], env=env,
                              stderr=subprocess.PIPE, text=True) for w in range(workers)]
    time.sleep(1.0)  # let them import and wait at the line
    go.touch()
    for p in procs:
        assert p.wait(timeout=300) == 0, p.stderr.read()
    expected = {Problem(1000 + w * 100 + i if i % 2 else 16 + i, 64, 32, "bf16", "nt", "row")
                for w in range(workers) for i in range(40)}
    got = load_problems(path)
    assert len(got) == len(set(got)) == len(expected) == 20 + 20 * workers
    assert set(got) == expected
    assert not list(tmp_path.glob(".shared.yaml.*.tmp"))  # no temporary file left behind


def test_a_with_block_gives_back_the_recording_before_it(tmp_path):
    outer, inner = tmp_path / "outer.yaml", tmp_path / "inner.yaml"
    with tritonblas.enable(record=outer):
        with tritonblas.enable(record=inner):
            torch.mm(_t(8, 8), _t(8, 8))
        torch.mm(_t(16, 8), _t(8, 8))
    torch.mm(_t(24, 8), _t(8, 8))  # off: not recorded
    assert load_problems(inner) == [Problem(8, 8, 8, "fp16")]
    assert load_problems(outer) == [Problem(16, 8, 8, "fp16")]
    assert record.current() is None
