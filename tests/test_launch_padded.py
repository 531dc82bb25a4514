"""A prepared launch with padded copies (aligned_copy configs, launch/prepared.py): after the plan's first
call, which goes through launch_gemm and makes the copies' plans, every call copies and multiplies
through the plan alone, with launch_gemm's results, and its buffers go back to the pool."""

import pytest
import torch
from helpers.shapes import rel_error

import tritonblas
from tritonblas import GemmConfig
from tritonblas.launch import direct, prepared, scratch
from tritonblas.launch import gemm as launch
from tritonblas.selection import dispatch

COPY = GemmConfig(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2, grid=2, tma=True,
                  aligned_copy=True)
M, N = 13, 17


def _t(*shape, dtype=torch.float32):
    return torch.randn(*shape).to(dtype)


# name -> (a, b) of the GEMM: which operand's leading dim is not a multiple of 16 bytes, and its order
OPERANDS = {
    "A": lambda: (_t(M, 9), _t(9, 16)),  # fp32 K 9: A's rows are 36 bytes
    "B": lambda: (_t(M, 8), _t(8, N)),  # N 17: B's rows are 68 bytes
    "both": lambda: (_t(M, 9), _t(9, N)),
    "column-major B": lambda: (_t(M, 9), _t(N, 9).t()),  # a weight's transpose: leading dim 9
    "A without unit stride": lambda: (_t(M, 18)[:, ::2], _t(9, 16)),
    "fp16": lambda: (_t(M, 9, dtype=torch.float16), _t(9, N, dtype=torch.float16)),
}
OPS = {
    "matmul": lambda a, b, bias: tritonblas.matmul(a, b, config=COPY),
    "matmul out=": lambda a, b, bias: tritonblas.matmul(
        a, b, out=torch.empty(a.shape[0], b.shape[1], dtype=a.dtype), config=COPY),
    "addmm": lambda a, b, bias: tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=COPY),
    "linear": lambda a, b, bias: tritonblas.linear(a, b.t(), bias, config=COPY),
}
REFERENCE = {
    "matmul": lambda a, b, bias: a.double() @ b.double(),
    "matmul out=": lambda a, b, bias: a.double() @ b.double(),
    "addmm": lambda a, b, bias: 0.5 * bias.double() + 2.0 * (a.double() @ b.double()),
    "linear": lambda a, b, bias: a.double() @ b.double() + bias.double(),
}


@pytest.fixture
def answers(monkeypatch):
    """What prepared.launch_with_scratch answered, call by call (True: the plan ran; False: launch_gemm took
    the call)."""
    got, real = [], prepared.launch_with_scratch
    dispatch.clear_cache()  # the call path's plans (their copies' plans found) ...
    monkeypatch.setattr(launch, "plans", {})  # ... and launch_gemm's: made by each test's first call
    monkeypatch.setattr(scratch, "free_lists", {})

    def spy(*args):
        got.append(real(*args))
        return got[-1]

    monkeypatch.setattr(prepared, "launch_with_scratch", spy)
    return got


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("operands", OPERANDS)
def test_the_plan_copies_and_multiplies_after_its_first_call(operands, op, answers):
    a, b = OPERANDS[operands]()
    bias = _t(b.shape[1], dtype=a.dtype)
    tolerance = 2e-3 if a.dtype == torch.float16 else 1e-5
    for _ in range(3):
        got = OPS[op](a, b, bias)
        assert rel_error(got, REFERENCE[op](a, b, bias)) < tolerance
    assert answers == [False, True, True]


def test_a_plan_with_copies_is_not_a_direct_one(monkeypatch):
    """Its copies are launches of their own: dearer on the host than torch's op (call.path's eager rule)."""
    a, b = OPERANDS["both"]()
    plan = prepared.prepare_launch(a, b, torch.empty(M, N), None, COPY, 2, "tf32")
    assert plan.copies[0] is not None and plan.copies[1] is not None
    monkeypatch.setattr(direct, "expected", lambda: True)
    assert not direct.launches_directly(plan)


def test_aligned_operands_take_no_copy():
    """A strided view that happens to be aligned (the layout the predicate saw was not): a plain plan."""
    a, b = _t(M, 16), _t(16, N + 3)[:, :16]
    plan = prepared.prepare_launch(a, b, torch.empty(M, 16), None, COPY, 2, "tf32")
    assert plan.copies is None


def test_the_buffers_go_back_to_the_pool(answers):
    a, b = OPERANDS["both"]()
    for _ in range(3):
        tritonblas.matmul(a, b, config=COPY)
    assert answers[-1]
    kept = [free for key, free in scratch.free_lists.items() if key[:2] in ((0, M), (1, 9))]
    assert len(kept) == 2 and all(len(free) == 1 for free in kept)  # A's buffer and B's, given back


def test_a_launch_that_raises_drops_its_buffers(answers, monkeypatch):
    """As launch_gemm's: a copy may be half done, so the buffers are not given back (launch/scratch.py)."""
    a, b = OPERANDS["both"]()
    tritonblas.matmul(a, b, config=COPY)
    scratch.free_lists.clear()  # (the first call's buffers)
    real = launch.launch_plan

    def fail_the_gemm(plan, tensors, floats):
        if len(tensors) > 2:
            raise RuntimeError("stopped")
        real(plan, tensors, floats)

    monkeypatch.setattr(launch, "launch_plan", fail_the_gemm)
    with pytest.raises(RuntimeError, match="stopped"):
        tritonblas.matmul(a, b, config=COPY)
    assert answers == [False]  # (the second call raised inside the plan's launch)
    assert not any(scratch.free_lists.values())
