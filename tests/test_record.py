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
from tritonblas.problem import Problem
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
from tritonblas.problem import Problem
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


# Issue 34 item 5: a file gets every problem that runs while it is recorded, whether it was planned
# before recording started (a warm-up, another file) or not. The ways a problem reaches dispatch, each
# run with transparent mode on (its routed calls need it; explicit ops run the same either way).
E4M3, ONE = torch.float8_e4m3fn, torch.ones(())


def _fp8_operands(a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp8 operands of a scaled route for a (m, 8) @ (8, 8) call: (m, 16) and (16, 16), b column-major
    (torch._scaled_mm's layout; it wants K and N multiples of 16)."""
    return a.repeat(1, 2).to(E4M3), b.repeat(2, 2).t().contiguous().to(E4M3).t()


ROUTES = {
    "explicit matmul": lambda a, b: tritonblas.matmul(a, b),
    "explicit linear": lambda a, b: tritonblas.linear(a, b.t(), b[0]),
    "routed mm": lambda a, b: torch.mm(a, b),
    "routed linear": lambda a, b: F.linear(a, b.t(), b[0]),
    "explicit scaled_mm": lambda a, b: tritonblas.scaled_mm(*_fp8_operands(a, b), ONE, ONE,
                                                            out_dtype=torch.bfloat16),
    "routed _scaled_mm": lambda a, b: torch._scaled_mm(*_fp8_operands(a, b), ONE, ONE,
                                                       out_dtype=torch.bfloat16),
}
EXPECTED = {  # what each route records for a (m, 8) @ (8, 8) fp16 call
    "explicit matmul": lambda m: Problem(m, 8, 8, "fp16"),
    "explicit linear": lambda m: Problem(m, 8, 8, "fp16", "nn", "row"),
    "routed mm": lambda m: Problem(m, 8, 8, "fp16"),
    "routed linear": lambda m: Problem(m, 8, 8, "fp16", "nn", "row"),
    "explicit scaled_mm": lambda m: Problem(m, 16, 16, "e4m3", "nt", "none", "bf16", scales="tensor"),
    "routed _scaled_mm": lambda m: Problem(m, 16, 16, "e4m3", "nt", "none", "bf16", scales="tensor"),
}


def _run(route: str, *ms: int, times: int = 2) -> None:
    b = _t(8, 8)
    for m in ms:
        a = _t(m, 8)
        for _ in range(times):  # the second call of each is a plan hit
            ROUTES[route](a, b)


def _count_writes(monkeypatch) -> list[int]:
    """The size of each problem set written to a file from now on."""
    writes: list[int] = []
    real = record._write
    monkeypatch.setattr(record, "_write", lambda path, problems: (writes.append(len(problems)),
                                                                   real(path, problems))[1])
    return writes


@pytest.mark.parametrize("route", ROUTES)
def test_a_problem_planned_before_recording_is_recorded(route, tmp_path):
    path = tmp_path / "late.yaml"
    with tritonblas.enable():
        _run(route, 40)  # warm-up: planned, not recorded
    with tritonblas.enable(record=path):
        _run(route, 40, 48)
    expected = [EXPECTED[route](40), EXPECTED[route](48)]
    assert sorted(load_problems(path), key=repr) == sorted(expected, key=repr)


@pytest.mark.parametrize("route", ROUTES)
def test_each_file_of_a_sequence_gets_all_it_saw(route, tmp_path):
    """A first model, then a second in the same process: the second file gets the problems both share,
    each met once while it is recorded."""
    paths = [tmp_path / f"model{i}.yaml" for i in range(3)]
    for i, path in enumerate(paths):
        with tritonblas.enable(record=path):
            _run(route, 56, 64 + i, times=1)
    for i, path in enumerate(paths):
        assert sorted(load_problems(path), key=repr) == sorted([EXPECTED[route](56), EXPECTED[route](64 + i)],
                                                               key=repr), path.name


def test_a_problem_known_to_the_file_is_not_written_again_on_a_hit(tmp_path, monkeypatch):
    path = tmp_path / "once.yaml"
    writes = _count_writes(monkeypatch)
    with tritonblas.enable(record=path):
        _run("routed mm", 72, times=5)
    with tritonblas.enable(record=path):  # the same file again: the hit notes it, the file holds it
        _run("routed mm", 72, times=5)
    assert writes == [1]
    assert load_problems(path) == [Problem(72, 8, 8, "fp16")]


@pytest.mark.parametrize("pick", ["kernels", "torch"])
@pytest.mark.parametrize("route", ROUTES)
def test_a_problem_called_once_is_recorded(route, pick, tmp_path, request):
    """A problem a run meets once is in the file (the tuner sees it), whether a kernel or torch's op
    runs it: noted when it is planned, before the call answers."""
    if pick == "torch":
        request.getfixturevalue("torch_picked")
    path = tmp_path / "once.yaml"
    with tritonblas.enable(record=path):
        _run(route, 104, times=1)
    expected = EXPECTED[route](104)
    # (torch's CPU _scaled_mm multiplies fp32 copies with aten::mm, which the mode routes on the CPU
    # under the interpreter: that problem is recorded too here, never on CUDA)
    assert [p for p in load_problems(path) if p.quantized == expected.quantized] == [expected]


@pytest.mark.parametrize("route", ["explicit matmul", "routed mm", "explicit scaled_mm", "routed _scaled_mm"])
def test_threads_recording_the_same_problems_write_each_once(route, tmp_path, monkeypatch):
    import threading

    from tritonblas.launch import gemm as launch

    path = tmp_path / "threads.yaml"
    written = _count_writes(monkeypatch)
    monkeypatch.setattr(launch, "launch_plan", lambda *args: None)  # triton's interpreter is not thread-safe
    ms = (80, 88, 96)
    with tritonblas.enable():
        _run(route, ms[0])  # one of them planned before recording starts
    go = threading.Barrier(4)
    errors = []

    def worker() -> None:
        try:
            go.wait(30)
            _run(route, *ms, times=3)
        except Exception as exc:  # noqa: BLE001 (reported by the assertion below)
            errors.append(exc)

    with tritonblas.enable(record=path):
        threads = [threading.Thread(target=worker) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
    assert not errors
    assert sorted(written) == [1, 2, 3]  # each problem written once, one at a time
    assert sorted(load_problems(path), key=repr) == sorted([EXPECTED[route](m) for m in ms], key=repr)


SEQUENCE = """
import sys, torch, tritonblas
a, b = torch.randn(8, 8).half(), torch.randn(8, 8).half()
with tritonblas.enable():
    torch.mm(a, b)
for path in sys.argv[1:]:
    with tritonblas.enable(record=path):
        torch.mm(a, b)
print("ops imported:", "tritonblas.call.ops" in sys.modules)
"""


def test_a_process_using_transparent_mode_alone_records_into_every_file(tmp_path):
    """The issue's report as it happened: a model under transparent mode only (the explicit ops never
    imported), warmed up, then recorded into two files in turn."""
    paths = [tmp_path / "first.yaml", tmp_path / "second.yaml"]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1"}
    done = subprocess.run([sys.executable, "-c", SEQUENCE, *map(str, paths)], capture_output=True, text=True,
                          env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "ops imported: False" in done.stdout
    for path in paths:
        assert load_problems(path) == [Problem(8, 8, 8, "fp16")], path.name


# Problems scaled_mm plans (noted as any planned call is), with a plain one beside them.
RECORDED_QUANTIZED = [
    Problem(64, 8192, 8192, "e4m3", "nt", "none", "bf16", scales="row"),
    Problem(64, 8192, 8192, "e4m3", "nt", "none", "bf16", scales="tensor"),
    Problem(16, 6144, 4096, "e4m3", "nt", "row", "fp32", "e5m2", "row_a"),
    Problem(33, 17, 20, "int8", "tn", "none", "bf16", scales="row_b"),
    Problem(64, 8192, 8192, "bf16", "nt", "row"),
]


def test_quantized_problems_are_recorded_in_the_shapes_format_and_read_back(tmp_path):
    path = tmp_path / "shapes.yaml"
    record.start(path)
    try:
        for p in RECORDED_QUANTIZED + RECORDED_QUANTIZED[:2]:
            record.note(p)
    finally:
        record.start(None)
    assert sorted(load_problems(path), key=repr) == sorted(RECORDED_QUANTIZED, key=repr)
    text = path.read_text()
    assert "dtypes: [e4m3], layout: nt, bias: row, b_dtype: e5m2, scales: row_a, out_dtype: fp32}" in text
    assert "{m: 64, n: 8192, k: 8192, dtypes: [bf16], layout: nt, bias: row}\n" in text  # as before
