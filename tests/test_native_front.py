"""The explicit ops' C++ front (tritonblas/native/front.cpp, issue 34): an explicit call without options
whose key the Python path answered "torch's op" before runs torch's op from C++, without the Python
signature and lookup; anything else (another key, options, a tensor subclass, a torch function mode, the
interpreter turned off for CPU tensors, answers dropped) goes to the Python path as before."""

import shutil
import threading

import pytest
import torch
import torch.nn.functional as F
from helpers.quant import needs_cpu_rowwise
from helpers.shapes import record_launches

import tritonblas
from tritonblas import native
from tritonblas.call import ops
from tritonblas.call import path as call_path
from tritonblas.selection import dispatch

f16 = torch.float16


@pytest.fixture(autouse=True)
def _front_on():
    if not native.load() or native.front() is None:
        if shutil.which("c++") or shutil.which("g++"):
            pytest.fail(f"a C++ compiler is here, yet the front did not build: {native.why_not()}")
        pytest.skip(f"no C++ front here: {native.why_not()}")
    native.forget()  # no answer from another test
    yield
    native.forget()


def _lookups(monkeypatch, module) -> list:
    """A list that grows by one at each call.path.lookup `module` makes (a call on the Python path)."""
    seen = []
    real = call_path.lookup
    monkeypatch.setattr(module, "lookup", lambda *args: (seen.append(1), real(*args))[1])
    return seen


@pytest.fixture
def planned(monkeypatch):
    """The explicit matmul / addmm / linear calls that reached the Python path."""
    return _lookups(monkeypatch, ops)


def _t(*shape, seed=0, dtype=f16):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


# (name, the explicit call, torch's own call) on the tensors of `_tensors`
CALLS = [
    ("matmul", lambda t: tritonblas.matmul(t["a"], t["b"]), lambda t: torch.mm(t["a"], t["b"])),
    ("addmm", lambda t: tritonblas.addmm(t["bias"], t["a"], t["b"], beta=0.5, alpha=2),
     lambda t: torch.addmm(t["bias"], t["a"], t["b"], beta=0.5, alpha=2)),
    ("addmm beta 0", lambda t: tritonblas.addmm(t["bias"], t["a"], t["b"], beta=0),
     lambda t: torch.addmm(t["bias"], t["a"], t["b"], beta=0)),
    ("linear", lambda t: tritonblas.linear(t["x"], t["w"], t["bias"]),
     lambda t: F.linear(t["x"], t["w"], t["bias"])),
    ("linear no bias", lambda t: tritonblas.linear(t["x"], t["w"]), lambda t: F.linear(t["x"], t["w"])),
    ("linear 3-D", lambda t: tritonblas.linear(t["x3"], t["w"], t["bias"]),
     lambda t: F.linear(t["x3"], t["w"], t["bias"])),
]


def _tensors():
    return {"a": _t(12, 8), "b": _t(8, 6, seed=1), "bias": _t(6, seed=2), "x": _t(12, 8, seed=3),
            "w": _t(6, 8, seed=4), "x3": _t(2, 5, 8, seed=5)}


@pytest.mark.parametrize("call, theirs", [c[1:] for c in CALLS], ids=[c[0] for c in CALLS])
def test_a_torch_pick_is_answered_in_cpp_after_its_first_call(call, theirs, torch_picked, planned,
                                                              monkeypatch):
    launches = record_launches(monkeypatch)
    t = _tensors()
    first = call(t)
    assert len(planned) == 1 and native.ops().remembered() == 1
    for _ in range(3):
        got = call(t)
    assert len(planned) == 1 and not launches
    assert torch.equal(got, theirs(t)) and torch.equal(first, got)


def test_each_key_is_asked_once(torch_picked, planned):
    """Another shape, layout, dtype, bias or op is another key; alpha's and beta's values are not (but
    beta == 0, which drops the input term)."""
    a, b, bias = _t(12, 8), _t(8, 6, seed=1), _t(6, seed=2)
    calls = [lambda: tritonblas.matmul(a, b), lambda: tritonblas.matmul(a[:5], b),
             lambda: tritonblas.matmul(a, _t(6, 8).t()), lambda: tritonblas.matmul(a.float(), b.float()),
             lambda: tritonblas.addmm(bias, a, b), lambda: tritonblas.addmm(bias[None], a, b),
             lambda: tritonblas.addmm(bias, a, b, beta=0), lambda: tritonblas.linear(a, b.t())]
    for call in calls:
        call(), call()
    assert len(planned) == len(calls) and native.ops().remembered() == len(calls)
    tritonblas.addmm(bias, a, b, beta=3.0, alpha=-1)
    assert len(planned) == len(calls)


def test_a_kernel_pick_is_never_answered(planned):
    a, b = _t(12, 8), _t(8, 6, seed=1)
    tritonblas.matmul(a, b), tritonblas.matmul(a, b)
    assert len(planned) == 2 and native.ops().remembered() == 0


def test_calls_with_options_take_the_python_path(torch_picked, planned):
    a, b = _t(12, 8), _t(8, 6, seed=1)
    tritonblas.matmul(a, b)
    tritonblas.matmul(a, b, backend="torch"), tritonblas.matmul(a, b, enable_streamk=False)
    tritonblas.matmul(a, b, config=tritonblas.GemmConfig.vendor())
    assert len(planned) == 4


@pytest.mark.parametrize("op", ["matmul", "addmm"])
def test_out_calls_are_answered_and_overlaps_still_refused(op, torch_picked, planned):
    """out= is part of the key; the result is out itself, as torch's; an out overlapping an input is
    refused (by the Python path, as before) and leaves out as it was."""
    a, b, bias = _t(12, 8), _t(8, 6, seed=1), _t(6, seed=2)
    out = torch.empty(12, 6, dtype=f16)
    call = (lambda o: tritonblas.matmul(a, b, out=o)) if op == "matmul" else \
        (lambda o: tritonblas.addmm(bias, a, b, beta=0.5, out=o))
    want = torch.mm(a, b) if op == "matmul" else torch.addmm(bias, a, b, beta=0.5)
    for _ in range(3):
        assert call(out) is out
    assert len(planned) == 1 and torch.equal(out, want)
    big = torch.zeros(12 * 6 + 12 * 8, dtype=f16)
    a.data = big[72:].view(12, 8).copy_(a)  # a now lies right after an out of 72 elements
    call(big[:72].view(12, 6))
    kept = big.clone()
    with pytest.raises(ValueError, match="overlap"):
        call(big[1:73].view(12, 6))
    assert torch.equal(big, kept)


def test_a_weight_needing_grad_gets_torchs_autograd(torch_picked, planned):
    """A grad call is its own key (as call.path.signature marks it); the front's output carries torch's
    own autograd node, and .backward() accumulates the gradients F.linear's would."""
    x, w, bias = _t(12, 8).float(), _t(6, 8, seed=1).float().requires_grad_(), _t(6, seed=2).float()
    w2 = w.detach().clone().requires_grad_()
    for _ in range(3):
        tritonblas.linear(x, w, bias).square().sum().backward()
        F.linear(x, w2, bias).square().sum().backward()
    assert len(planned) == 1
    y = tritonblas.linear(x, w, bias)
    assert type(y.grad_fn) is type(F.linear(x, w2, bias).grad_fn)
    assert torch.equal(w.grad, w2.grad) and w.grad.stride() == w2.grad.stride()
    with torch.no_grad():
        assert not tritonblas.linear(x, w, bias).requires_grad
    assert len(planned) == 2  # no grad: another key


class _Seen(torch.overrides.TorchFunctionMode):
    def __init__(self):
        super().__init__()
        self.funcs = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        self.funcs.append(func)
        return func(*args, **(kwargs or {}))


class _Sub(torch.Tensor):
    pass


def test_what_torchs_binding_would_dispatch_otherwise_takes_the_python_path(torch_picked, planned):
    """A torch function mode sees the call (torch's op, from the Python path); a tensor subclass is
    planned by its own type; a Parameter is a tensor to torch's bindings, and to the front."""
    x, w = _t(12, 8), _t(6, 8, seed=1)
    tritonblas.linear(x, w), tritonblas.linear(x, w)
    assert len(planned) == 1
    with _Seen() as seen:
        tritonblas.linear(x, w)
    assert len(planned) == 2 and F.linear in seen.funcs
    tritonblas.linear(x.as_subclass(_Sub), w)
    assert len(planned) == 3
    tritonblas.linear(x, torch.nn.Parameter(w, requires_grad=False))
    assert len(planned) == 3


def test_answers_are_dropped_with_the_selections_and_a_new_recording(torch_picked, planned, tmp_path):
    """After dispatch's selections change, or recording moves to another file, each key is planned (and
    noted into the file) again; stopping the recording drops nothing."""
    a, b = _t(8, 16), _t(16, 4, seed=1)
    tritonblas.matmul(a, b), tritonblas.matmul(a, b)
    dispatch.clear_cache()
    tritonblas.matmul(a, b), tritonblas.matmul(a, b)
    assert len(planned) == 2
    with tritonblas.enable(record=tmp_path / "one.yaml"):
        tritonblas.matmul(a, b)
    tritonblas.matmul(a, b)
    assert len(planned) == 3
    assert "{m: 8, n: 4, k: 16" in (tmp_path / "one.yaml").read_text()


def test_cpu_keys_are_not_answered_with_the_interpreter_off(torch_picked, planned, monkeypatch):
    """The Python path refuses CPU tensors without triton's interpreter: so does the front."""
    a, b = _t(8, 8), _t(8, 8, seed=1)
    tritonblas.matmul(a, b), tritonblas.matmul(a, b)
    assert len(planned) == 1
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises((RuntimeError, ValueError)):
        tritonblas.matmul(a, b)
    assert len(planned) == 2


def test_a_capture_only_kernel_is_answered_after_its_first_launch(capture_only, planned, monkeypatch):
    """A kernel that wins under graph capture only: its first eager call launches it (so that a capture
    finds it loaded), later eager calls run torch's op, answered in C++ from the third on."""
    launches = record_launches(monkeypatch)
    a, b = _t(12, 8), _t(8, 6, seed=1)
    for _ in range(4):
        got = tritonblas.matmul(a, b)
    assert len(launches) == 1 and len(planned) == 2
    assert torch.equal(got, torch.mm(a, b))


def test_threads_share_the_answers(torch_picked, planned):
    a, b = _t(12, 8), _t(8, 6, seed=1)
    want = torch.mm(a, b)
    tritonblas.matmul(a, b)
    wrong = []

    def work():
        for _ in range(50):
            if not torch.equal(tritonblas.matmul(a, b), want):
                wrong.append(1)

    threads = [threading.Thread(target=work) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not wrong and len(planned) == 1


@pytest.fixture
def planned_scaled(monkeypatch):
    """The scaled_mm calls that reached the Python path."""
    from tritonblas.call import scaled

    return _lookups(monkeypatch, scaled)


def _fp8_operands(rows: bool):
    a = _t(12, 32, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = _t(16, 32, seed=1, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    if rows:
        return a, b, torch.rand(12, 1) + 0.5, torch.rand(1, 16) + 0.5
    return a, b, torch.tensor(0.7), torch.tensor(1.3)


@pytest.mark.parametrize("out_dtype, bias_dtype, rows", [(torch.bfloat16, None, False),
                                                         (torch.float16, torch.float16, True)])
def test_a_scaled_mm_torch_pick_is_answered_in_cpp(out_dtype, bias_dtype, rows, torch_picked, planned_scaled):
    """torch._scaled_mm's own case (fp8 operands, a bf16 or fp16 output, a bias of its dtype): from the
    second call on the front runs it; out= (the result is out itself) and use_fast_accum are other keys."""
    needs_cpu_rowwise(rows)
    a, b, scale_a, scale_b = _fp8_operands(rows)
    bias = None if bias_dtype is None else _t(16, seed=2, dtype=bias_dtype)
    want = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    for _ in range(3):
        got = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype)
    assert len(planned_scaled) == 1 and torch.equal(got, want)
    out = torch.empty_like(want)
    for _ in range(3):
        assert tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out=out) is out
    assert len(planned_scaled) == 2 and torch.equal(out, want)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=True)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=True)
    assert len(planned_scaled) == 3


@pytest.mark.parametrize("out_dtype", [None, torch.float32, torch.float8_e4m3fn])
def test_scaled_mm_outputs_finished_in_python_are_never_answered(out_dtype, torch_picked, planned_scaled):
    """An fp8 output (saturated after torch's fp32 result: a's dtype by default) or an fp32 one with its
    bias added in fp32 is not torch._scaled_mm's result alone: the Python path runs every call."""
    a, b, scale_a, scale_b = _fp8_operands(False)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=out_dtype)
    assert len(planned_scaled) == 2 and native.ops().remembered() == 0


def test_scaled_mm_operands_needing_grad_are_never_answered(torch_picked, planned_scaled):
    a, b, scale_a, scale_b = _fp8_operands(False)
    scale_a.requires_grad_()
    for _ in range(2):
        y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert len(planned_scaled) == 2 and y.requires_grad
    with pytest.raises(RuntimeError, match="not implemented"):
        y.float().sum().backward()


def test_torch_func_transforms_over_an_answered_key(torch_picked):
    """vmap's wrapped tensors have the logical shape of a key answered before: torch's op runs either
    way (from C++ or from the Python path), as it must under a transform."""
    w, xs = _t(6, 8, seed=1), _t(3, 12, 8, seed=2)
    tritonblas.linear(xs[0], w), tritonblas.linear(xs[0], w)  # (12, 8) x (6, 8): answered
    assert native.ops().remembered() == 1
    assert torch.equal(torch.func.vmap(lambda x: tritonblas.linear(x, w))(xs), F.linear(xs, w))


def test_a_block_wise_key_answered_torch_runs_torchs_block_op_from_cpp(planned_scaled):
    """A block-wise call answered with torch's block-wise op (call.front.remember_block: op
    SCALED_MM_BLOCK) is run by the front through aten::_scaled_mm_v2; this CPU torch refuses block-wise
    scales, so the front gives the call back and the Python path runs it, every call, right. The same key
    under SCALED_MM (row-wise's op) is another answer. (The GPU runs it: tests/test_gpu_scaled.py.)"""
    from tritonblas.contract import SCALED_MM_BLOCK, TORCH

    front = native.front()
    if not front.BLOCKWISE:
        pytest.skip("this torch has no aten::_scaled_mm_v2")
    a = _t(4, 256, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = _t(128, 256, seed=1, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.rand(2, 4).t(), torch.rand(2, 1)  # outer-dim-major blocks
    want = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert native.ops().remembered() == 0  # (not torch's pick on the CPU)
    front.remember_scaled(a, b, scale_a, scale_b, None, torch.bfloat16, False, None, TORCH, SCALED_MM_BLOCK)
    assert native.ops().remembered() == 1
    assert front.scaled_mm(a, b, scale_a, scale_b, None, torch.bfloat16, False, None) is None
    got = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert torch.equal(got, want) and len(planned_scaled) == 2


BLOCK_REMEMBERED = [("torch's block-wise op", True), ("row-major scale_a", False),
                    ("torch's op does not take it", False), ("a kernel pick", False),
                    ("backend pinned", False)]


@pytest.mark.parametrize("case, remembered", BLOCK_REMEMBERED)
def test_a_block_wise_call_is_remembered_only_as_the_front_runs_it(case, remembered, monkeypatch):
    """call.front.remember_block tells the front a block-wise key only where its call ran torch's
    block-wise op as dispatch's pick (its torch and the call taking it) on outer-dim-major scales, which
    the front passes on as they are."""
    from types import SimpleNamespace

    from tritonblas import GemmConfig
    from tritonblas.call import front
    from tritonblas.contract import SCALED_MM_BLOCK, TORCH

    told = []
    monkeypatch.setattr(front, "_remember_scaled", lambda *args: told.append(args[-2:]))
    monkeypatch.setattr(front, "_blockwise", True)
    plan = SimpleNamespace(config=GemmConfig.vendor(), restriction=(None, None), user_config=False,
                           torch_blockwise=True)
    a = _t(4, 256, dtype=torch.float32).to(torch.float8_e4m3fn)
    b = _t(128, 256, seed=1, dtype=torch.float32).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.rand(2, 4).t(), torch.rand(2, 1)
    if case == "row-major scale_a":
        scale_a = scale_a.contiguous()
    elif case == "torch's op does not take it":
        plan.torch_blockwise = False
    elif case == "a kernel pick":
        plan.config = GemmConfig(block_m=64, block_n=64, block_k=128)
    elif case == "backend pinned":
        plan.restriction = (None, "torch")
    front.remember_block(plan, a, b, scale_a, scale_b, torch.bfloat16, False)
    assert told == ([(TORCH, SCALED_MM_BLOCK)] if remembered else [])
