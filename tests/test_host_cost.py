"""Host cost per call (issue 34 item 2), every kernel launch stubbed (launch.launch_plan, as
tests/ops_overhead.py does): the library's ops and transparent mode's routed calls against torch's own
ops timed in the same process, on 1x1x1 fp32 CPU tensors (torch's host cost: its kernels do next to
nothing there). Ours run 64^3 fp16 CPU tensors (the interpreter device) on the kernels' path; with the
launch stubbed their size does not matter.

Each bound is a ratio, loose enough for a loaded 2-core box (thread CPU time, the best of several
rounds, ours and torch's interleaved) and tight enough to fail at the costs before the one-cache call
path. tests/ops_overhead.py --baseline (5 rounds, 2026-12-01), ours over torch's, before -> after:
matmul 6.7x -> 3.7x torch.mm, addmm 3.2x -> 1.6x, linear 4.2x -> 1.9x, linear with a weight needing grad
19.5x -> 3.5x, and with --transparent a routed torch.mm 8.8x -> 4.3x, a routed F.linear 6.0x -> 2.9x.
The C++ kernels' trip into Python for a kernel pick without a launch record (every one on the CPU) read
6.3x-6.7x here and 7.1x-7.8x in CI against the bound 7.0; the output alone back through the dispatcher
(the answer said apart, native/route.cpp) and the interpreter flag read from os.environ's own mapping
made it 5.1x-5.4x (torch 2.13 and 2.14.1, 2026-12-05).
"""

import time

import pytest
import torch
import torch.nn.functional as F

import tritonblas
from tritonblas import native
from tritonblas.launch import gemm as launch

ROUNDS, CALLS, TRIES = 7, 1000, 3


def _step(y: torch.Tensor, weight: torch.Tensor) -> None:
    """A training step's backward of one linear: .backward() into the weight's .grad, then set to None."""
    y.sum().backward()
    weight.grad = None


def _ours():
    torch.manual_seed(0)
    a, b, w = (torch.randn(64, 64).half() for _ in range(3))
    bias = torch.randn(64).half()
    w_grad = w.clone().requires_grad_()
    return {
        "matmul": lambda: tritonblas.matmul(a, b, backend="triton"),
        "addmm": lambda: tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, backend="triton"),
        "linear": lambda: tritonblas.linear(a, w, bias, backend="triton"),
        "linear grad": lambda: tritonblas.linear(a, w_grad, bias, backend="triton"),
        "linear step": lambda: _step(tritonblas.linear(a, w_grad, bias, backend="triton"), w_grad),
        "routed mm": lambda: torch.mm(a, b),
        "routed F.linear": lambda: F.linear(a, w, bias),
        "torch.add, mode on": lambda: torch.add(a, b),
    }


def _torch():
    a, b, w = torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1)
    bias = torch.ones(1)
    w_grad = w.clone().requires_grad_()
    x, y = torch.randn(64, 64).half(), torch.randn(64, 64).half()
    return {
        "torch.mm": lambda: torch.mm(a, b),
        "torch.addmm": lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
        "F.linear": lambda: F.linear(a, w, bias),
        "F.linear grad": lambda: F.linear(a, w_grad, bias),
        "F.linear step": lambda: _step(F.linear(a, w_grad, bias), w_grad),
        "torch.add, mode off": lambda: torch.add(x, y),
    }


# (our row, torch's row, the bound on their ratio, transparent mode on for ours)
CASES = [
    ("matmul", "torch.mm", 5.5, False),
    ("addmm", "torch.addmm", 2.6, False),
    ("linear", "F.linear", 3.2, False),
    ("linear grad", "F.linear grad", 8.0, False),
    # forward + .backward(): with the backward's GEMM through the custom op's dispatch 2.3x, without 1.6x
    ("linear step", "F.linear step", 2.0, False),
    ("routed mm", "torch.mm", 7.0, True),
    ("routed F.linear", "F.linear", 4.5, True),
    ("torch.add, mode on", "torch.add, mode off", 1.3, True),  # an op the mode does not touch
]


def _per_call_us(fn) -> float:
    for _ in range(50):  # planned, warmed
        fn()
    t0 = time.thread_time()
    for _ in range(CALLS):
        fn()
    return (time.thread_time() - t0) / CALLS * 1e6


@pytest.fixture
def stubbed(monkeypatch):
    monkeypatch.setattr(launch, "launch_plan", lambda *args: None)
    yield
    tritonblas.disable()


def _best_of_rounds(ours, theirs, mode: bool) -> tuple[float, float]:
    """The best per-call host time of `ours` (transparent mode on where `mode`) and of `theirs` (torch's
    own op, the mode off: under it, its CPU GEMMs are routed too), timed in turn ROUNDS times."""
    best_ours = best_torch = float("inf")
    for _ in range(ROUNDS):
        tritonblas.enable() if mode else None
        best_ours = min(best_ours, _per_call_us(ours))
        tritonblas.disable()
        best_torch = min(best_torch, _per_call_us(theirs))
    return best_ours, best_torch


def _assert_costs_at_most(bound: float, ours, theirs, what: str, mode: bool = False,
                          extra_us: float = 0.0) -> None:
    """Ours over torch's within `bound` (ours at most bound x torch's + `extra_us`), timed up to TRIES
    times: a shared box now and then slows every round of one measurement (12 repeats of the addmm case
    read 1.97-2.14x and once 2.67x against its 2.6 bound in CI), while a cost that really grew exceeds
    the bound every time."""
    ratios = []
    for _ in range(TRIES):
        best_ours, best_torch = _best_of_rounds(ours, theirs, mode)
        ratios.append((best_ours - extra_us) / best_torch)
        if ratios[-1] <= bound:
            return
    less = f" less {extra_us} us" if extra_us else ""
    raise AssertionError(f"{what}: ours{less} over torch's {', '.join(f'{r:.2f}x' for r in ratios)} "
                         f"in {TRIES} measurements, each above the bound {bound}x "
                         f"(last: {best_ours:.2f} us against {best_torch:.2f} us)")


@pytest.mark.parametrize("ours, theirs, bound, mode", CASES, ids=[c[0] for c in CASES])
def test_host_cost_against_torchs_own_op(ours, theirs, bound, mode, stubbed):
    _assert_costs_at_most(bound, _ours()[ours], _torch()[theirs], f"{ours} against {theirs}", mode)


def test_a_routed_call_that_torch_runs_costs_torchs_own(torch_picked, stubbed):
    """Transparent mode's C++ kernels: a routed call dispatch gives to torch costs what torch's own call
    does (CPU box: 1.08 us against 1.03 for torch.mm of 1x1 fp32; the Python kernels 4.94: ops_overhead.py
    --transparent)."""
    if not native.load():
        pytest.skip(f"no C++ kernels here: {native.why_not()}")
    a, b = torch.ones(1, 1), torch.ones(1, 1)
    _assert_costs_at_most(1.5, lambda: torch.mm(a, b), lambda: torch.mm(a, b), "routed torch.mm", mode=True)


@pytest.mark.parametrize("why", ["torch picked", "kernel under capture only"])
def test_a_linear_needing_grad_that_torch_runs_costs_about_torchs(why, stubbed, request):
    """Dispatch's torch pick for a linear whose weight needs grad, or a kernel it leaves to graph capture
    (eager calls after the first run torch's), runs F.linear with torch's own autograd node
    (call.ops._torch_op), not our autograd.Function: a training step's forward and
    .backward() cost about torch's (CPU box: 35 us against 33; through our Function 58-69, 2.0x; one CI
    run read 1.34x, hence the bound)."""
    request.getfixturevalue("torch_picked" if why == "torch picked" else "capture_only")
    a, w, bias = torch.ones(1, 1), torch.ones(1, 1).requires_grad_(), torch.ones(1)
    _assert_costs_at_most(1.6, lambda: _step(tritonblas.linear(a, w, bias), w),
                          lambda: _step(F.linear(a, w, bias), w), "linear step")


# op: (our call, torch's, bound on ours over torch's), on 1x1 fp32 CPU tensors. CPU box, best of 7 rounds,
# capture only: matmul 3.13 us against torch.mm's 1.03 (3.0x), addmm 4.83 / 1.91 (2.5x), linear 4.61 /
# 1.96 (2.4x); through run's out= route before: 3.9x, 3.1x, 3.1x. Right after the whole suite on the same
# box: linear 3.2x and 3.7x, matmul 3.65x (2026-12-02), hence the bounds' room.
TORCH_RUNS = {
    "matmul": (lambda a, w, bias: tritonblas.matmul(a, w), lambda a, w, bias: torch.mm(a, w), 4.2),
    "addmm": (lambda a, w, bias: tritonblas.addmm(bias, a, w, beta=0.5),
              lambda a, w, bias: torch.addmm(bias, a, w, beta=0.5), 3.6),
    "linear": (lambda a, w, bias: tritonblas.linear(a, w, bias),
               lambda a, w, bias: F.linear(a, w, bias), 3.9),
}


@pytest.mark.parametrize("why", ["torch picked", "kernel under capture only"])
@pytest.mark.parametrize("op", TORCH_RUNS)
def test_an_explicit_call_that_torch_runs_costs_its_lookup_more(op, why, stubbed, request, monkeypatch):
    """An explicit call whose GEMM is torch's calls torch's op as the caller would (call.ops._torch_op):
    its lookup on top, not run's out= route (an output allocated, the 2-D views, torch.mm(out=)). The
    C++ front, where another test loaded it, is set aside: this is the path without it."""
    from tritonblas.call import front

    for name in ("mm", "addmm", "linear", "_remember"):
        monkeypatch.setattr(front, name, None)
    monkeypatch.setattr(native, "front", lambda: None)
    request.getfixturevalue("torch_picked" if why == "torch picked" else "capture_only")
    a, w, bias = torch.ones(1, 1), torch.ones(1, 1), torch.ones(1)
    ours, theirs, bound = TORCH_RUNS[op]
    ours(a, w, bias)  # (the first call of a capture-only plan runs the kernel)
    _assert_costs_at_most(bound, lambda: ours(a, w, bias), lambda: theirs(a, w, bias), op)


# The same calls answered by the C++ front, bounds on ours over torch's. CPU box, best of 7 rounds: matmul
# 1.60 us against torch.mm's 1.03 (1.56x), addmm 2.23 / 1.89 (1.18x), linear 2.64 / 1.98 (1.33x); through
# the Python lookup (above) 3.0x, 2.5x, 2.4x.
FRONT_BOUNDS = {"matmul": 2.1, "addmm": 1.7, "linear": 1.8}


@pytest.mark.parametrize("why", ["torch picked", "kernel under capture only"])
@pytest.mark.parametrize("op", TORCH_RUNS)
def test_an_explicit_call_the_cpp_front_answers_costs_about_torchs_op(op, why, stubbed, request):
    """Where the library's C++ front is built (tritonblas/native/front.cpp), the same calls skip the
    lookup once answered: torch's op run from C++ after a few checks and one hash lookup."""
    if not native.load() or native.front() is None:
        pytest.skip(f"no C++ front here: {native.why_not()}")
    request.getfixturevalue("torch_picked" if why == "torch picked" else "capture_only")
    native.forget()
    a, w, bias = torch.ones(1, 1), torch.ones(1, 1), torch.ones(1)
    ours, theirs, _ = TORCH_RUNS[op]
    for _ in range(3):  # planned (a capture-only plan's first call runs the kernel), then answered
        ours(a, w, bias)
    _assert_costs_at_most(FRONT_BOUNDS[op], lambda: ours(a, w, bias), lambda: theirs(a, w, bias), op)


# scaled_mm (issue 51 item 2): an explicit or routed call costs torch._scaled_mm's host time + 2 us at
# most, whichever backend runs; on this box 1.1x of it + 2 us (a loaded 2-core box). torch's CPU op
# itself dequantizes and multiplies in fp32 (12.7-14.3 us a call at 1x16x16, its aten::mm routed too
# while the mode is on), so these bound what the library adds to it; best of 5 rounds (CPU box): the C++
# front 13.2 us and the C++ route 14.4 against 13.2-14.3, an explicit kernel call 10.1; through the
# Python kernels (enable(native=False)) a routed torch pick took 33.9.
SCALED_EXTRA_US, SCALED_BOUND = 2.0, 1.1


def _fp8_call():
    a = torch.ones(1, 16).to(torch.float8_e4m3fn)
    b = torch.ones(16, 16).to(torch.float8_e4m3fn).t()
    return a, b, torch.ones(()), torch.ones(())


# (routed, why): a routed kernel pick is not among them: on the CPU the interpreter launches it, never
# directly, so it has no launch record and takes the trip into Python (on the GPU its record launches from
# C++: `python scripts/dispatch_overhead.py --fp8`).
SCALED_CASES = [(False, "torch picked"), (False, "kernel under capture only"), (False, "kernel"),
                (True, "torch picked"), (True, "kernel under capture only")]


@pytest.mark.parametrize("routed, why", SCALED_CASES,
                         ids=[f"{'routed' if r else 'explicit'}, {why}" for r, why in SCALED_CASES])
def test_a_scaled_mm_call_costs_about_torchs_op(routed, why, stubbed, request):
    """tritonblas.scaled_mm (its torch picks answered by the C++ front) and a routed torch._scaled_mm
    (answered by transparent mode's C++ kernel) against torch._scaled_mm itself."""
    if not native.load() or native.front() is None:
        pytest.skip(f"no C++ side here: {native.why_not()}")
    if why != "kernel":
        request.getfixturevalue("torch_picked" if why == "torch picked" else "capture_only")
    native.forget()
    a, b, scale_a, scale_b = _fp8_call()
    ours = (lambda: torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)) if routed else \
        (lambda: tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16))
    _assert_costs_at_most(SCALED_BOUND, ours, lambda: torch._scaled_mm(a, b, scale_a, scale_b,
                                                                       out_dtype=torch.bfloat16),
                          f"{'routed' if routed else 'explicit'} scaled_mm, {why}", mode=routed,
                          extra_us=SCALED_EXTRA_US)


def test_a_grouped_call_needing_grad_costs_little_more_than_one_without(monkeypatch):
    """tritonblas.grouped_mm with a weight needing grad (a training step's forward) against the same call
    without: the autograd node's cost on top of the call's (CPU: 1.6x; through the custom op's dispatch,
    what ran before, 3.5x; on the H200 that was +129 us against torch._grouped_mm's 36)."""
    from tritonblas.grouped import launch as grouped_launch

    monkeypatch.setattr(grouped_launch, "run", lambda *args: None)
    x, w = torch.randn(16, 32).half(), torch.randn(4, 32, 32).half()
    w_grad = w.clone().requires_grad_()
    offs = torch.tensor([4, 8, 12, 16], dtype=torch.int32)
    _assert_costs_at_most(
        2.2,
        lambda: tritonblas.grouped_mm(x, w_grad.mT, offs=offs, backend="triton"),
        lambda: tritonblas.grouped_mm(x, w.mT, offs=offs, backend="triton"),
        "grouped_mm needing grad against without",
    )


def test_a_routed_grouped_call_that_torch_runs_costs_torchs_own(monkeypatch):
    """Transparent mode's C++ aten::_grouped_mm: a key answered "torch" (dispatch's torch pick) runs
    torch's kernel without Python (CPU box: 6.6 us against 6.6 for torch._grouped_mm of 3 rows over 2
    experts of 16x16; the Python kernel 23.9)."""
    if not native.load():
        pytest.skip(f"no C++ kernels here: {native.why_not()}")
    from helpers.grouped import pick_grouped

    from tritonblas.config import GemmConfig

    pick_grouped(monkeypatch, GemmConfig(backend="torch"))
    a, w = torch.ones(3, 16).half(), torch.ones(2, 16, 16).half().transpose(1, 2)
    offs = torch.tensor([1, 3], dtype=torch.int32)
    _assert_costs_at_most(1.1, lambda: torch._grouped_mm(a, w, offs=offs),
                          lambda: torch._grouped_mm(a, w, offs=offs), "routed torch._grouped_mm", mode=True,
                          extra_us=1.0)
