"""Transparent mode's C++ kernels (tritonblas/native, issue 34): a call whose key was answered "torch" runs
torch's kernel without Python; every other call, and every call after the answers were dropped
(selections dropped, recording moved), asks the Python side again. tests/test_transparent.py runs the
mode's behaviour under both kinds of kernels; this file tests what only the C++ ones do."""

import logging
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch
from helpers.grouped import pick_grouped
from helpers.quant import needs_cpu_rowwise
from helpers.shapes import record_launches

import tritonblas
from tritonblas import native, transparent
from tritonblas.selection import dispatch

ROOT = Path(__file__).resolve().parents[1]
f16 = torch.float16


@pytest.fixture(autouse=True)
def _native_on():
    if not native.load():
        if shutil.which("c++") or shutil.which("g++"):
            pytest.fail(f"a C++ compiler is here, yet the C++ kernels did not build: {native.why_not()}")
        pytest.skip(f"no C++ kernels here: {native.why_not()}")
    native.ops().forget()  # answers outlive disable(): none from another test
    yield
    tritonblas.disable()


@pytest.fixture
def asked(monkeypatch):
    """The calls that reached the Python side (transparent._mm_plan / _addmm_plan), by op."""
    seen = []
    for name in ("_mm_plan", "_addmm_plan"):
        real = getattr(transparent, name)
        monkeypatch.setattr(transparent, name, lambda *args, _real=real, _name=name: (seen.append(_name),
                                                                                    _real(*args))[1])
    return seen


def _t(*shape, seed=0, dtype=f16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


def test_enable_installs_the_cpp_kernels():
    with tritonblas.enable():
        assert transparent.is_native()
    assert not transparent.is_native()
    with tritonblas.enable(native=False):
        assert transparent.is_enabled() and not transparent.is_native()
    with pytest.raises(TypeError, match="native"):
        tritonblas.enable(native="yes")
    assert not transparent.is_enabled()


def test_a_torch_answer_holds_for_its_key_only(monkeypatch, pick_torch, asked):
    """torch picked for row-major operands only: their second call never reaches Python; a transposed
    operand, another shape, addmm with and without its input term each ask once."""
    pick_torch(lambda problem: problem.layout == "nn")
    launches = record_launches(monkeypatch)
    a, b, bias = _t(12, 8), _t(8, 6, seed=1), _t(6, seed=2)
    bt = _t(6, 8, seed=3).t()
    want = (a.double() @ b.double()).half()
    want_addmm = (0.5 * bias.double() + 2 * a.double() @ b.double()).half()
    with tritonblas.enable():
        for _ in range(3):
            y = torch.mm(a, b)
        assert asked == ["_mm_plan"] and not launches and native.ops().remembered() == 1
        torch.testing.assert_close(y, want, rtol=2e-3, atol=2e-3)
        torch.mm(a, bt), torch.mm(a, bt)  # a kernel's pick: asked every call
        assert asked.count("_mm_plan") == 3 and len(launches) == 2
        torch.mm(a[:5], b)
        torch.addmm(bias, a, b), torch.addmm(bias, a, b, beta=0), torch.addmm(bias, a, b, beta=0, alpha=3)
        assert asked.count("_mm_plan") == 4 and asked.count("_addmm_plan") == 2
        assert native.ops().remembered() == 4
        got = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
    torch.testing.assert_close(got, want_addmm, rtol=2e-3, atol=2e-3)


def test_threads_routing_at_once_keep_their_own_answers(monkeypatch, pick_torch, asked):
    """The Python side says a key's answer through a thread-local the C++ kernel reads after the call:
    threads routing a torch pick and a kernel pick at once each keep their own (the torch pick's key
    remembered, its outputs right; the kernel's asked and launched every call). The kernel launches are
    stubbed: triton's interpreter runs one program at a time."""
    import threading

    from tritonblas.launch import gemm as launch

    launched = []
    monkeypatch.setattr(launch, "launch_plan", lambda *args: launched.append(1))
    pick_torch(lambda problem: problem.layout == "nn")
    a, b, bt = _t(12, 8), _t(8, 6, seed=1), _t(6, 8, seed=3).t()
    want = (a.double() @ b.double()).half()
    wrong = []

    def work(rhs):
        for _ in range(20):
            y = torch.mm(a, rhs)
            if rhs is b and not torch.allclose(y, want, rtol=2e-3, atol=2e-3):
                wrong.append(y)

    with tritonblas.enable():
        threads = [threading.Thread(target=work, args=(rhs,)) for rhs in (b, bt, b, bt)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert not wrong and native.ops().remembered() == 1 and len(launched) == 40
        assert 41 <= asked.count("_mm_plan") <= 42  # the kernel pick's 40, the torch pick's first (a thread)


def test_answers_are_dropped_with_the_selections(torch_picked, asked):
    a, b = _t(8, 8), _t(8, 8, seed=1)
    with tritonblas.enable():
        torch.mm(a, b), torch.mm(a, b)
        dispatch.clear_cache()  # (as a new tuning database or a compile failure does)
        assert native.ops().remembered() == 0
        torch.mm(a, b)
    assert asked == ["_mm_plan", "_mm_plan"]


def test_answers_outlive_disable(torch_picked, asked, tmp_path):
    """A with-block around every forward asks once per key; what changes selections or the recording
    file while transparent mode is off still drops the answers."""
    a, b = _t(8, 8), _t(8, 8, seed=1)
    for _ in range(3):
        with tritonblas.enable():
            torch.mm(a, b)
    assert asked == ["_mm_plan"] and native.ops().remembered() == 1
    dispatch.clear_cache()
    assert native.ops().remembered() == 0
    with tritonblas.enable():
        torch.mm(a, b)
    with tritonblas.enable(record=tmp_path / "r.yaml"):  # a new file: asked again, and noted there
        torch.mm(a, b)
    with tritonblas.enable():  # recording stopped: nothing more to note, the answer holds
        torch.mm(a, b)
    assert asked == ["_mm_plan"] * 3 and native.ops().remembered() == 1
    assert "{m: 8, n: 8, k: 8" in (tmp_path / "r.yaml").read_text()


def test_a_torch_answer_is_recorded_into_each_new_file(torch_picked, tmp_path):
    a, b = _t(8, 16), _t(16, 4, seed=1)
    with tritonblas.enable(record=tmp_path / "one.yaml"):
        torch.mm(a, b), torch.mm(a, b)
    with tritonblas.enable(record=tmp_path / "two.yaml"):
        torch.mm(a, b)
    for name in ("one.yaml", "two.yaml"):
        assert "{m: 8, n: 4, k: 16" in (tmp_path / name).read_text(), name


def test_what_later_calls_of_a_key_are_told(monkeypatch):
    """A kernel that wins under graph capture only (eager_vendor): torch's kernel in eager calls, asked
    under capture; a kernel: launched from C++ where its launch has a record (KERNEL, with the record),
    else asked every call (its launch is Python's); torch's pick and calls not routed: torch's kernel
    for good, but CPU calls while the interpreter is off (it may come back)."""
    from tritonblas import GemmConfig

    cpu, cuda = SimpleNamespace(is_cpu=True), SimpleNamespace(is_cpu=False)
    kernel, vendor = GemmConfig(block_m=16, block_n=16, block_k=16), GemmConfig.vendor()
    later, none = transparent._later, transparent._NO_RECORD
    assert later(SimpleNamespace(eager_vendor=True, config=kernel), cuda) == (transparent.EAGER_TORCH, none)
    plan = SimpleNamespace(eager_vendor=False, capture_vendor=False, config=kernel, launch=None, fp32=False)
    assert later(plan, cuda) == (transparent.ASK, none)
    monkeypatch.setattr(transparent, "native_record", lambda plan, contiguous_scales: [1, 2, 3])
    assert later(plan, cuda) == (transparent.KERNEL, [1, 2, 3])
    plan.config = vendor
    assert later(plan, cuda) == (transparent.TORCH, none)
    assert later(None, cuda) == later(None, cpu) == (transparent.TORCH, none)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    assert later(None, cpu) == (transparent.ASK, none)


def test_other_dtypes_are_answered_once(asked):
    a, b = _t(6, 5, dtype=torch.float64), _t(5, 4, seed=1, dtype=torch.float64)
    with tritonblas.enable():
        torch.mm(a, b), torch.mm(a, b)
    assert asked == ["_mm_plan"]  # (which answers at once: float64 is not routed)
    assert torch.equal(torch.mm(a, b), a @ b)


def test_without_a_compiler_the_python_kernels_route(tmp_path):
    code = ("import torch, tritonblas\n"
            "from tritonblas import transparent\n"
            "from tritonblas.call import run as call_run\n"
            "n = []\n"
            "call_run.launch_gemm = lambda *a: n.append(1)\n"
            "tritonblas.enable()\n"
            "torch.mm(torch.randn(4, 4), torch.randn(4, 4))\n"
            "print(transparent.is_enabled(), transparent.is_native(), len(n))")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TRITON_INTERPRET": "1", "CXX": str(tmp_path / "no-c++"),
           "XDG_CACHE_HOME": str(tmp_path)}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["True", "False", "1"]
    assert "could not be built" in done.stderr and "no-c++" in done.stderr
    assert not any(tmp_path.joinpath("tritonblas", "native").glob("*.so"))


def _fake_compiler(tmp_path: Path) -> str:
    """A compiler that only writes its output file (the argument after -o)."""
    cxx = tmp_path / "fake-c++"
    cxx.write_text('#!/bin/sh\nwhile [ "$1" != "-o" ]; do shift; done\ntouch "$2"\n')
    cxx.chmod(0o755)
    return str(cxx)


def test_a_build_says_what_it_builds_and_how_long_it_took(tmp_path, caplog):
    """The first enable() with a cold cache compiles for tens of seconds: one line before, one after."""
    target = tmp_path / "native" / "tritonblas_native-x.so"
    with caplog.at_level("WARNING", logger="tritonblas"):
        native._compile(_fake_compiler(tmp_path), [], [], [], target)
    assert target.exists()
    before, after = (r.getMessage() for r in caplog.records if r.name == "tritonblas")
    assert f"building transparent mode's C++ kernels for torch {torch.__version__}" in before
    assert f"cached under {target.parent}" in before
    assert re.search(r"built transparent mode's C\+\+ kernels in \d+ s", after)


def test_a_build_is_said_on_stderr_where_logging_shows_nothing(tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setattr(logging.getLogger("tritonblas"), "handlers", [logging.NullHandler()])
    native._compile(_fake_compiler(tmp_path), [], [], [], tmp_path / "lib.so")
    err = capsys.readouterr().err
    assert "building transparent mode's C++ kernels" in err and "built transparent mode's" in err


def test_a_failed_install_leaves_the_python_kernels(monkeypatch, asked):
    """The library loaded but its kernels refused by torch's dispatcher: one warning, the Python kernels,
    nothing of the C++ side left registered."""
    launches = record_launches(monkeypatch)

    def refuse(cpu):
        raise RuntimeError("refused")

    monkeypatch.setattr(native, "ops", lambda: SimpleNamespace(install=refuse, forget=lambda: None))
    a, b = _t(6, 5), _t(5, 4, seed=1)
    with pytest.warns(RuntimeWarning, match="could not be installed"), tritonblas.enable():
        assert transparent.is_enabled() and not transparent.is_native()
        torch.mm(a, b)
    assert len(launches) == 1 and asked == ["_mm_plan"]
    monkeypatch.undo()
    with tritonblas.enable():  # the same process installs them later
        assert transparent.is_native()


# --- torch._scaled_mm (issue 51 item 2) ---------------------------------------------------------------------
@pytest.fixture
def asked_scaled(monkeypatch):
    """The torch._scaled_mm calls that reached the Python side (transparent._routed_scaled)."""
    seen = []
    real = transparent._routed_scaled
    monkeypatch.setattr(transparent, "_routed_scaled", lambda *args: (seen.append(1), real(*args))[1])
    return seen


def _fp8_call(rows: bool, bias_dtype=None):
    """torch._scaled_mm's operands (a row-major, b column-major, K and N multiples of 16) and scales."""
    a = _t(12, 32, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = _t(16, 32, seed=1, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    scales = (torch.rand(12, 1) + 0.5, torch.rand(1, 16) + 0.5) if rows else \
        (torch.tensor(0.7), torch.tensor(1.3))
    bias = None if bias_dtype is None else _t(16, seed=2, dtype=bias_dtype)
    return a, b, *scales, bias


@pytest.mark.parametrize("rows, bias_dtype, out_dtype", [(False, None, torch.bfloat16),
                                                         (True, torch.float16, torch.float16),
                                                         (False, None, torch.float32)])
def test_a_scaled_mm_torch_pick_is_answered_in_cpp(rows, bias_dtype, out_dtype, torch_picked, asked_scaled,
                                                   monkeypatch):
    """From its second call a routed torch._scaled_mm that dispatch gives to torch runs torch's kernel in
    C++, with torch's own result; use_fast_accum and out_dtype are other keys."""
    needs_cpu_rowwise(rows)
    launches = record_launches(monkeypatch)
    a, b, scale_a, scale_b, bias = _fp8_call(rows, bias_dtype)
    want = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    with tritonblas.enable():
        for _ in range(3):
            got = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
        assert len(asked_scaled) == 1 and torch.equal(got, want)
        assert native.ops().remembered() >= 1 and not launches
        for _ in range(2):
            torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=True)
            torch._scaled_mm(a, b, scale_a, scale_b, bias=bias)
    assert len(asked_scaled) == 3


def test_a_scaled_mm_kernel_pick_asks_every_call(asked_scaled, monkeypatch):
    """On the CPU a key whose kernel runs goes to the Python side each call (the interpreter launches it,
    never directly: no launch record; tests/test_gpu_transparent.py has the C++ launch of its record),
    and a call with a scale of the result, torch's alone, is never keyed."""
    from tritonblas.launch import gemm as launch

    monkeypatch.setattr(launch, "launch_plan", lambda *args: None)
    a, b, scale_a, scale_b, _ = _fp8_call(False)
    with tritonblas.enable():
        for _ in range(2):
            torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
            torch._scaled_mm(a, b, scale_a, scale_b, scale_result=torch.ones(()),
                             out_dtype=torch.float8_e4m3fn)
    assert len(asked_scaled) == 4 and native.ops().remembered() == 0


def test_a_scaled_mm_torch_answer_is_dropped_for_a_new_recording(torch_picked, asked_scaled, tmp_path):
    needs_cpu_rowwise()
    a, b, scale_a, scale_b, _ = _fp8_call(True)
    with tritonblas.enable(record=tmp_path / "one.yaml"):
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    with tritonblas.enable(record=tmp_path / "two.yaml"):
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert len(asked_scaled) == 2
    for name in ("one.yaml", "two.yaml"):
        assert "{m: 12, n: 16, k: 32, dtypes: [e4m3], layout: nt, bias: none, scales: row" in \
            (tmp_path / name).read_text(), name


def test_scaled_mm_calls_torch_refuses_raise_torchs_error_every_time(torch_picked, asked_scaled):
    """A call scaled_mm's checks refuse is answered "torch" (torch's kernel has the last word): from C++
    later, with torch's own error each time."""
    a, b, _, scale_b, _ = _fp8_call(False)
    with pytest.raises((RuntimeError, ValueError)) as direct:
        torch._scaled_mm(a, b, torch.ones(3, 1), scale_b, out_dtype=torch.bfloat16)
    with tritonblas.enable():
        for _ in range(2):
            with pytest.raises((RuntimeError, ValueError)) as routed:
                torch._scaled_mm(a, b, torch.ones(3, 1), scale_b, out_dtype=torch.bfloat16)
            assert type(routed.value) is type(direct.value) and str(routed.value) == str(direct.value)
    assert len(asked_scaled) == 1


# --- aten::_grouped_mm ------------------------------------------------------------------------------------


@pytest.fixture
def grouped_asked(monkeypatch):
    """The routed grouped calls that reached the Python side (grouped.route.routed's checks)."""
    from tritonblas.grouped import route

    seen = []
    real = route.known_call
    monkeypatch.setattr(route, "known_call",
                        lambda *args, **kw: (seen.append(args[0].shape), real(*args, **kw))[1])
    return seen


def _grouped_operands(rows=(5, 0, 7), n=8, k=16, dtype=f16):
    a = _t(sum(rows) + 2, k, dtype=dtype)  # two rows past the last group end: what they get is unspecified
    w = _t(len(rows), n, k, seed=1, dtype=dtype)
    return a, w.transpose(1, 2), torch.tensor(rows, dtype=torch.int32).cumsum(0, dtype=torch.int32)


@pytest.mark.parametrize("pick", ["torch", "kernel"])
def test_a_grouped_torch_pick_is_answered_in_cpp(pick, monkeypatch, grouped_asked):
    """torch's pick: the key's later calls run torch's kernel without Python; a kernel's: every call asks
    (its launch is Python's); both right."""
    from helpers.grouped import POINTERS

    from tritonblas.config import GemmConfig
    from tritonblas.grouped import launch as grouped_launch

    pick_grouped(monkeypatch, GemmConfig(backend="torch") if pick == "torch" else POINTERS)
    launched = []
    real = grouped_launch.launch
    monkeypatch.setattr(grouped_launch, "launch", lambda spec: (launched.append(spec), real(spec))[1])
    a, b, offs = _grouped_operands()
    want = torch._grouped_mm(a, b, offs=offs)
    with tritonblas.enable():
        outs = [torch._grouped_mm(a, b, offs=offs) for _ in range(3)]
        torch._grouped_mm(a[:10], b, offs=offs)  # another key: asked
    assert len(grouped_asked) == (2 if pick == "torch" else 4)
    assert len(launched) == (0 if pick == "torch" else 4)
    for out in outs:
        torch.testing.assert_close(out[:12], want[:12], rtol=2e-3, atol=2e-3)
    assert (native.ops().remembered() == 2) == (pick == "torch")


def test_grouped_calls_torch_refuses_raise_torchs_error_every_time(grouped_asked):
    a, b, offs = _grouped_operands()
    with pytest.raises(RuntimeError) as own:
        torch._grouped_mm(a, b, offs=offs.long())
    with tritonblas.enable():
        for _ in range(2):
            with pytest.raises(type(own.value)):
                torch._grouped_mm(a, b, offs=offs.long())
    assert len(grouped_asked) == 1


def test_grouped_answers_are_dropped_with_the_selections(monkeypatch, grouped_asked):
    from tritonblas.config import GemmConfig

    pick_grouped(monkeypatch, GemmConfig(backend="torch"))
    a, b, offs = _grouped_operands()
    with tritonblas.enable():
        torch._grouped_mm(a, b, offs=offs), torch._grouped_mm(a, b, offs=offs)
        dispatch.clear_cache()
        torch._grouped_mm(a, b, offs=offs)
    assert len(grouped_asked) == 2


def test_a_grouped_torch_answer_is_recorded_into_each_new_file(monkeypatch, tmp_path):
    """A key answered torch in C++ reaches Python again once recording moves to another file, so that the
    new file gets the problem too."""
    from tritonblas.config import GemmConfig
    from tritonblas.shapes import GroupedEntry, load_grouped

    pick_grouped(monkeypatch, GemmConfig(backend="torch"))
    a, b, offs = _grouped_operands()
    with tritonblas.enable(record=tmp_path / "one.yaml"):
        torch._grouped_mm(a, b, offs=offs), torch._grouped_mm(a, b, offs=offs)
    with tritonblas.enable(record=tmp_path / "two.yaml"):
        torch._grouped_mm(a, b, offs=offs)
    want = [GroupedEntry(groups=3, m=14, n=8, k=16, dtype="fp16", layout="nt")]
    assert [load_grouped(tmp_path / name) for name in ("one.yaml", "two.yaml")] == [want, want]


@pytest.mark.parametrize("native_kernels", [True, False])
def test_grouped_mms_torch_backend_runs_torchs_own_kernel_in_transparent_mode(native_kernels, monkeypatch,
                                                                              grouped_asked):
    """grouped_mm(backend="torch") and a torch pick's explicit call run torch's own kernel, not the
    routed one (which would run a kernel where dispatch picks one for the key)."""
    from helpers.grouped import POINTERS

    from tritonblas.grouped import launch as grouped_launch

    pick_grouped(monkeypatch, POINTERS)
    launched = []
    monkeypatch.setattr(grouped_launch, "launch", lambda spec: launched.append(spec))
    a, b, offs = _grouped_operands()
    with tritonblas.enable(native=native_kernels):
        out = tritonblas.grouped_mm(a, b, offs=offs, backend="torch")
    assert not launched and not grouped_asked
    torch.testing.assert_close(out[:12], torch._grouped_mm(a, b, offs=offs)[:12])  # (the rest: unspecified)
