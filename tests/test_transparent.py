"""Transparent mode (issue 18): tritonblas.enable() routes torch's own mm / addmm / linear (nn.Linear,
F.linear, `@` on 2-D tensors) of fp16/bf16/fp32 through dispatch, and leaves everything else to torch.
Under TRITON_INTERPRET=1 CPU tensors are routed, so these run on CPU."""

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.quant import needs_cpu_rowwise
from helpers.shapes import assert_close, record_launches

import tritonblas
from tritonblas import native, transparent

f16 = torch.float16
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(autouse=True, params=["C++ kernels", "Python kernels"])
def _mechanism(request, monkeypatch):
    """Every test runs with each of the mode's two ways in: the C++ kernels (tritonblas.native, built
    here) and the Python ones (where nothing can be built)."""
    if request.param == "Python kernels":
        monkeypatch.setattr(native, "load", lambda: False)
    elif not native.load():
        pytest.skip(f"the C++ kernels do not build here: {native.why_not()}")
    yield
    tritonblas.disable()


@pytest.fixture
def launches(monkeypatch):
    return record_launches(monkeypatch)


def _t(*shape, dtype=f16, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(*shape, generator=g).to(dtype)


def _ref(fn, *tensors):
    """fn on float64 copies (not routed: float64 falls through)."""
    return fn(*(t.double() if isinstance(t, torch.Tensor) else t for t in tensors))


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("call", ["mm", "addmm", "linear", "linear_3d", "matmul_op", "nn_linear"])
def test_torch_gemms_run_through_dispatch(call, dtype, launches):
    a, b, w, bias, x3 = _t(33, 20, dtype=dtype), _t(20, 17, dtype=dtype, seed=1), \
        _t(17, 20, dtype=dtype, seed=2), _t(17, dtype=dtype, seed=3), _t(2, 5, 20, dtype=dtype, seed=4)
    lin = torch.nn.Linear(20, 17).to(dtype)
    calls = {
        "mm": (lambda a, b: torch.mm(a, b), (a, b)),
        "addmm": (lambda bias, a, b: torch.addmm(bias, a, b, beta=0.5, alpha=2.0), (bias, a, b)),
        "linear": (lambda a, w, bias: F.linear(a, w, bias), (a, w, bias)),
        "linear_3d": (lambda x, w, bias: F.linear(x, w, bias), (x3, w, bias)),
        "matmul_op": (lambda a, b: a @ b, (a, b)),
        "nn_linear": (lambda x, w, bias: F.linear(x, w, bias), (x3, lin.weight.detach(), lin.bias.detach())),
    }
    fn, args = calls[call]
    theirs = fn(*args)
    with tritonblas.enable():
        ours = fn(*args) if call != "nn_linear" else lin(x3)
    assert len(launches) == 1, call
    assert_close(ours, theirs, _ref(fn, *args), k=20)


def test_nn_linear_module_and_autograd(launches):
    """Forward and the backward's GEMMs (torch's own derivative formulas) all run through dispatch."""
    torch.manual_seed(0)
    lin = torch.nn.Linear(20, 17)
    x = torch.randn(3, 4, 20, requires_grad=True)
    ref_lin = torch.nn.Linear(20, 17).double()
    ref_lin.load_state_dict(lin.state_dict())
    x_ref = x.detach().double().requires_grad_()
    with tritonblas.enable():
        lin(x).square().sum().backward()
    ref_lin(x_ref).square().sum().backward()
    assert len(launches) == 3  # forward, grad of x, grad of the weight
    torch.testing.assert_close(x.grad, x_ref.grad.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(lin.weight.grad, ref_lin.weight.grad.float(), rtol=1e-3, atol=1e-3)
    torch.testing.assert_close(lin.bias.grad, ref_lin.bias.grad.float(), rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("case", ["float64", "int64", "bmm", "baddbmm", "mixed_dtypes", "no_interpreter"])
def test_everything_else_falls_through_to_torch(case, launches, monkeypatch):
    a, b = _t(6, 5), _t(5, 4, seed=1)
    calls = {
        "float64": lambda: torch.mm(a.double(), b.double()),
        "int64": lambda: torch.mm(a.long(), b.long()),
        "bmm": lambda: torch.bmm(a[None].float(), b[None].float()),
        "baddbmm": lambda: torch.baddbmm(torch.zeros(1, 6, 4), a[None].float(), b[None].float()),
        "mixed_dtypes": lambda: torch.addmm(torch.zeros(4, dtype=torch.float64), a.double(), b.double()),
        "no_interpreter": lambda: torch.mm(a.float(), b.float()),
    }
    expected = calls[case]()
    with tritonblas.enable():
        if case == "no_interpreter":
            monkeypatch.setenv("TRITON_INTERPRET", "0")
        got = calls[case]()
    assert not launches
    assert torch.equal(got, expected)


@pytest.mark.parametrize("pick", ["kernels", "torch", "fall through"])
@pytest.mark.parametrize("op", ["mm", "addmm"])
def test_a_routed_call_is_one_aten_op(op, pick, launches, request):
    """Issue 34: routed calls added an aten::mm of their own (the torch pick and the fall-through ran the
    out= overloads, a second trip through the dispatcher). Now each call is the one aten op torch's own
    call is, whoever runs it."""
    from torch.profiler import profile

    if pick == "torch":
        request.getfixturevalue("torch_picked")
    dtype = torch.float64 if pick == "fall through" else f16
    a, b, bias = _t(12, 8, dtype=dtype), _t(8, 4, dtype=dtype, seed=1), _t(4, dtype=dtype, seed=2)
    call = (lambda: torch.mm(a, b)) if op == "mm" else (lambda: torch.addmm(bias, a, b, beta=0.5))
    theirs = call()
    with tritonblas.enable():
        call()  # planned
        with profile() as prof:
            ours = call()
    names = [e.name for e in prof.events()]
    assert names.count(f"aten::{op}") == 1, names
    assert names.count("aten::mm") + names.count("aten::addmm") == 1, names
    assert len(launches) == (2 if pick == "kernels" else 0)
    torch.testing.assert_close(ours, theirs, rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("call, message", [
    (lambda a, b: torch.mm(a, b[:-1]), "cannot be multiplied"),
    (lambda a, b: torch.mm(a, b.double()), "dtype"),
    (lambda a, b: torch.addmm(torch.ones(3, 3, dtype=f16), a, b), "size"),
])
def test_torch_errors_stay_torch_errors(call, message, launches):
    a, b = _t(6, 5), _t(5, 4, seed=1)
    with pytest.raises(RuntimeError, match=message) as theirs:
        call(a, b)
    with tritonblas.enable(), pytest.raises(RuntimeError, match=message) as ours:
        call(a, b)
    assert type(ours.value) is type(theirs.value) and not launches


def test_enable_plain_call_context_manager_and_nesting(launches):
    a, b = _t(8, 8), _t(8, 8, seed=1)
    assert not transparent.is_enabled()
    with tritonblas.enable():
        assert transparent.is_enabled()
        with tritonblas.enable():
            torch.mm(a, b)
        assert transparent.is_enabled()  # the inner block restores the state before it: on
    assert not transparent.is_enabled()
    tritonblas.enable()
    torch.mm(a, b)
    with tritonblas.enable():
        pass
    assert transparent.is_enabled()  # enabled before the block: still enabled after it
    tritonblas.disable()
    torch.mm(a, b)
    assert not transparent.is_enabled() and len(launches) == 2


def test_other_threads_are_routed_too(launches):
    a, b = _t(8, 8), _t(8, 8, seed=1)
    with tritonblas.enable():
        t = threading.Thread(target=lambda: torch.mm(a, b))
        t.start()
        t.join()
    assert len(launches) == 1


def test_the_torch_backend_and_explicit_ops_do_not_recurse(launches):
    """The library's torch backend calls torch.mm / torch.addmm (out=): they must not come back here."""
    a, b, bias = _t(8, 6), _t(6, 5, seed=1), _t(5, seed=2)
    with tritonblas.enable():
        mm = tritonblas.matmul(a, b, backend="torch")
        add = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, backend="torch")
        lin = tritonblas.linear(a, b.t(), bias)
    assert len(launches) == 1  # the explicit linear; the torch backend launched no kernel
    torch.testing.assert_close(mm, torch.mm(a, b))
    torch.testing.assert_close(add, torch.addmm(bias, a, b, beta=0.5, alpha=2.0))
    torch.testing.assert_close(lin, F.linear(a, b.t(), bias), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_torch_compile_keeps_working(backend, launches):
    """Compiled code: backends that run the captured aten ops eagerly come through dispatch (Inductor
    generates its own GEMMs instead: tests/test_ops_compile.py keeps the explicit ops for it)."""
    torch._dynamo.reset()
    a, w, bias = _t(9, 12), _t(7, 12, seed=1), _t(7, seed=2)
    f = torch.compile(lambda a, w, bias: F.linear(a, w, bias).relu(), fullgraph=True, backend=backend)
    try:
        with tritonblas.enable():
            got = f(a, w, bias)
    finally:
        torch._dynamo.reset()
    assert len(launches) == 1
    torch.testing.assert_close(got, F.linear(a, w, bias).relu(), rtol=2e-3, atol=2e-3)


def _run(code: str, **env) -> subprocess.CompletedProcess:
    full = {**os.environ, "PYTHONPATH": str(ROOT), **env}
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=full, timeout=300)


def test_tritonblas_enabled_turns_it_on_at_import():
    code = ("import sys, torch, tritonblas\n"
            "from tritonblas.call import run as call_run\n"
            "n = []\n"
            "call_run.launch_gemm = lambda *a: n.append(1)\n"
            "torch.mm(torch.randn(4, 4), torch.randn(4, 4))\n"
            "print(sys.modules['tritonblas.transparent'].is_enabled(), len(n))")
    on = _run(code, TRITON_INTERPRET="1", TRITONBLAS_ENABLED="1")
    assert on.returncode == 0, on.stderr
    assert on.stdout.split() == ["True", "1"]
    loaded = "'tritonblas.transparent' in sys.modules"
    off = _run(code.replace("sys.modules['tritonblas.transparent'].is_enabled()", loaded),
               TRITON_INTERPRET="1", TRITONBLAS_ENABLED="0")
    assert off.returncode == 0, off.stderr
    assert off.stdout.split() == ["False", "0"]


# --- torch._scaled_mm (issue 36) ---------------------------------------------------------------------------
def _fp8(rows, cols, seed, transposed=False):
    t = _t(cols, rows, dtype=torch.float32, seed=seed) if transposed else _t(rows, cols, dtype=torch.float32,
                                                                            seed=seed)
    t = t.to(torch.float8_e4m3fn)
    return t.t() if transposed else t


@pytest.fixture
def scaled_runs(monkeypatch):
    """The scaled_mm plans transparent mode runs (spied before enable() binds call.run.run_scaled)."""
    import tritonblas.call.run
    import tritonblas.call.scaled  # noqa: F401  (explicit calls keep the real one, bound at its import)

    ran = []
    real = tritonblas.call.run.run_scaled

    def spy(plan, *args):
        ran.append(plan.problem)
        return real(plan, *args)

    monkeypatch.setattr(tritonblas.call.run, "run_scaled", spy)
    return ran


@pytest.mark.parametrize("pick", ["kernels", "torch"])
@pytest.mark.parametrize("scales", ["tensor", "row"])
def test_torch_scaled_mm_runs_through_dispatch(scales, pick, scaled_runs, request):
    needs_cpu_rowwise(scales == "row")
    if pick == "torch":
        request.getfixturevalue("torch_picked")
    m, n, k = 24, 32, 48
    a, b = _fp8(m, k, 0), _fp8(k, n, 1, transposed=True)  # torch._scaled_mm's layout: b column-major
    shape_a, shape_b = ((), ()) if scales == "tensor" else ((m, 1), (1, n))
    sa = torch.rand(shape_a, generator=torch.Generator().manual_seed(2)) + 0.5
    sb = torch.rand(shape_b, generator=torch.Generator().manual_seed(3)) + 0.5
    bias = _t(n, dtype=torch.bfloat16, seed=4)
    theirs = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    with tritonblas.enable():
        ours = torch._scaled_mm(a, b, sa, sb, bias=bias, out_dtype=torch.bfloat16)
    ran_kernel = pick == "kernels"
    assert [p.scales for p in scaled_runs] == ([scales] if ran_kernel else [])
    torch.testing.assert_close(ours.float(), theirs.float(), rtol=1e-2, atol=1e-2)


def test_scaled_mm_calls_it_does_not_take_stay_torchs(scaled_runs):
    a, b = _fp8(16, 32, 0), _fp8(32, 16, 1, transposed=True)
    one = torch.ones(())
    scale_result = torch.ones(())  # a scale of the result: torch's alone
    with tritonblas.enable():
        got = torch._scaled_mm(a, b, one, one, scale_result=scale_result, out_dtype=torch.float8_e4m3fn)
        with pytest.raises((RuntimeError, ValueError)) as theirs:  # a shape scaled_mm refuses: torch's error
            torch._scaled_mm(a, b, torch.ones(3, 1), one, out_dtype=torch.bfloat16)
    assert got.dtype == torch.float8_e4m3fn and not scaled_runs
    with pytest.raises((RuntimeError, ValueError)) as direct:
        torch._scaled_mm(a, b, torch.ones(3, 1), one, out_dtype=torch.bfloat16)
    assert type(theirs.value) is type(direct.value) and str(theirs.value) == str(direct.value)


def test_the_cpu_row_wise_probe_does_not_come_back_through_the_mode(scaled_runs):
    """config.cpu_scaled_mm_takes_rows asks torch's CPU op through the out= overload, which the mode does
    not intercept: asked inside a routed call (a torch winner's feasibility), it never re-enters dispatch."""
    from tritonblas.config import cpu_scaled_mm_takes_rows

    cpu_scaled_mm_takes_rows.cache_clear()
    try:
        with tritonblas.enable():
            cpu_scaled_mm_takes_rows()
    finally:
        cpu_scaled_mm_takes_rows.cache_clear()
    assert scaled_runs == []


def test_scaled_mms_torch_backend_does_not_come_back_through_the_mode(scaled_runs):
    """The vendor of an explicit scaled_mm (backend="torch") calls torch's out= overload, which the mode
    does not intercept: torch runs it, not a kernel planned again below (as the plain ops' vendor)."""
    needs_cpu_rowwise()
    a, b = _fp8(16, 32, 0), _fp8(32, 16, 1, transposed=True)
    sa, sb = torch.rand(16, 1) + 0.5, torch.rand(1, 16) + 0.5
    bias = _t(16, dtype=torch.float32, seed=2)
    theirs = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.float32) + bias
    for out_dtype in (torch.float32, torch.bfloat16, torch.float8_e4m3fn):
        with tritonblas.enable():
            got = tritonblas.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out_dtype, backend="torch")
        torch.testing.assert_close(got.float(), theirs.to(out_dtype).float(), rtol=2e-2, atol=2e-2)
    assert not scaled_runs  # (the spy sees what the mode runs): nothing was routed below the calls
