"""The eager rules: which path an eager call of a plan runs where host time decides. A kernel pick whose
launch costs more host time than torch's op, or that wins by less than that, leaves eager calls to torch
and runs under graph capture (call.path.eager_torch_reason, Plan.eager_vendor); a torch pick whose tuning
run's kernel is host-bound and close runs that kernel in eager explicit calls and torch's op under
capture (call.path.eager_kernel_reason, Plan.capture_vendor); and which launches count as direct."""

import pytest
import torch
from helpers.quant import needs_cpu_rowwise
from helpers.shapes import ERROR_SHAPE, record_launches

import tritonblas
from tritonblas import native
from tritonblas.call import path as call_path
from tritonblas.call import run as call_run
from tritonblas.selection import dispatch

M, N, K = ERROR_SHAPE
f16 = torch.float16
SMALL = tritonblas.GemmConfig(block_m=16, block_n=16, block_k=16)


def _selection(time_us: float, device, backend: str = "triton", torch_us: float = 0.0):
    from tritonblas.problem import Problem

    config = SMALL if backend == "triton" else tritonblas.GemmConfig.vendor()
    return dispatch.Selection(config, "shipped", time_us / 1000, True, Problem(M, N, K, "fp16"), device,
                              torch_ms=torch_us / 1000)


ROUTED = call_path.TORCH_CALL_HOST_US + call_path.ROUTED_EXTRA_US  # a routed direct call's host time


@pytest.mark.parametrize("time_us, backend, on_gpu, direct, routed, leaves_eager_to_torch", [
    (call_path.KERNEL_HOST_US / 2, "triton", True, False, False, True),  # host-bound: its launch costs more
    (call_path.KERNEL_HOST_US * 2, "triton", True, False, False, False),  # the kernel hides its launch
    (call_path.KERNEL_HOST_US / 2, "triton", True, True, False, False),  # a direct launch: as cheap
    (call_path.KERNEL_HOST_US / 2, "torch", True, False, False, False),  # torch already
    (0.0, "triton", True, False, False, False),  # no time known (nothing to judge by)
    (call_path.KERNEL_HOST_US / 2, "triton", False, False, False, False),  # the interpreter: no host cost
    # routed (transparent mode), torch not timed: the trip into Python costs more than torch's whole call
    (ROUTED / 2, "triton", True, True, True, True),  # host-bound, even with a direct launch
    (ROUTED * 2, "triton", True, True, True, False),  # the kernel's time hides the host's
    (ROUTED * 2, "triton", True, False, True, True),  # not direct: the host's time is longer still
    (ROUTED / 2, "torch", True, False, True, False),
    (ROUTED / 2, "triton", False, False, True, False),
])
def test_a_kernel_pick_shorter_than_its_host_time_runs_only_under_capture(time_us, backend, on_gpu, direct,
                                                                          routed, leaves_eager_to_torch,
                                                                          monkeypatch):
    from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch

    device = device_for_arch("sm_90") if on_gpu else INTERPRETER_DEVICE
    launch = object()
    monkeypatch.setattr(call_path, "launches_directly", lambda plan: plan is launch and direct)
    selection = _selection(time_us, device, backend)
    assert call_path.eager_vendor(selection, launch, routed) is leaves_eager_to_torch


EXTRA, HOST = call_path.ROUTED_EXTRA_US, call_path.KERNEL_HOST_US
NOT_DIRECT = call_path.ROUTED_EXTRA_US + call_path.ROUTED_NOT_DIRECT_US


@pytest.mark.parametrize("torch_us, direct, routed, leaves_eager_to_torch", [
    (100 + EXTRA / 2, True, True, True),  # routed: wins by less than the host time it costs above torch's
    (100 + EXTRA * 2, True, True, False),
    (100 + NOT_DIRECT / 2, False, True, True),  # a routed launch that is not direct pays more
    (100 + NOT_DIRECT * 2, False, True, False),
    (100.5, True, False, False),  # an explicit direct launch costs torch's host time: any win counts
    (100 + HOST / 2, False, False, True),
    (100 + HOST * 2, False, False, False),
    (90.0, True, True, True),  # torch faster (a neighbour's tuning run, say)
    (0.0, True, True, False),  # torch not timed: the kernel's time is all there is
])
def test_a_kernel_that_wins_by_less_than_its_host_cost_runs_only_under_capture(torch_us, direct, routed,
                                                                              leaves_eager_to_torch,
                                                                              monkeypatch):
    from tritonblas.arch import device_for_arch

    launch = object()
    monkeypatch.setattr(call_path, "launches_directly", lambda plan: plan is launch and direct)
    selection = _selection(100.0, device_for_arch("sm_90"), torch_us=torch_us)
    assert call_path.eager_vendor(selection, launch, routed) is leaves_eager_to_torch


NATIVE = call_path.ROUTED_NATIVE_EXTRA_US


@pytest.mark.parametrize("torch_us, direct, leaves_eager_to_torch", [
    (100 + EXTRA / 2, True, False),  # no trip into Python: a win the Python launch would lose runs
    (100 + NATIVE / 2, True, True),  # ... but not one smaller than what the C++ launch costs
    (100 + NATIVE * 2, True, False),
    (90.0, True, True),
    (0.0, True, False),
    (10.0, True, True),  # torch faster by far: a recorded launch changes nothing there
    (100 + NOT_DIRECT / 2, False, True),  # with scratch (copies, Stream-K): charged the trip still
    (100 + NOT_DIRECT * 2, False, False),
])
def test_a_routed_kernel_launched_from_cpp_pays_no_trip_into_python(torch_us, direct, leaves_eager_to_torch,
                                                                      monkeypatch):
    """A routed plan whose launch gets a record (launch/native.py) is launched by transparent mode's C++
    kernels: a direct one's host cost above torch's is ROUTED_NATIVE_EXTRA_US, not the trip into Python;
    one with scratch is charged the trip (what it cost inside a model's step)."""
    from tritonblas.arch import device_for_arch

    launch = object()
    monkeypatch.setattr(call_path, "launches_directly", lambda plan: plan is launch and direct)
    selection = _selection(100.0, device_for_arch("sm_90"), torch_us=torch_us)
    assert call_path.eager_vendor(selection, launch, True, True) is leaves_eager_to_torch


EXPLICIT_HOST, EXPLICIT_EXTRA = call_path.EXPLICIT_TORCH_HOST_US, call_path.EXPLICIT_TORCH_EXTRA_US


@pytest.mark.parametrize("kernel_us, torch_us, direct, runs_kernel", [
    (EXPLICIT_HOST - 1, EXPLICIT_HOST - 2, True, True),  # host-bound, loses by less than its launch saves
    (EXPLICIT_HOST / 2, EXPLICIT_HOST / 2 + 1, True, True),  # faster anyway
    (EXPLICIT_HOST - 1, EXPLICIT_HOST - 1 - EXPLICIT_EXTRA * 2, True, False),  # loses by more
    (EXPLICIT_HOST * 2, EXPLICIT_HOST * 2 - 1, True, False),  # the GPU sets the pace: torch's is shorter
    (EXPLICIT_HOST - 1, EXPLICIT_HOST - 2, False, False),  # not a direct launch: no host time saved
    (0.0, EXPLICIT_HOST - 2, True, False),  # a time unknown: nothing to judge by
    (EXPLICIT_HOST - 1, 0.0, True, False),
])
def test_a_torch_pick_close_to_its_kernel_leaves_eager_explicit_calls_to_it(kernel_us, torch_us, direct,
                                                                           runs_kernel):
    from tritonblas.arch import device_for_arch

    device = device_for_arch("sm_90")
    torch_pick, kernel = _selection(torch_us, device, "torch"), _selection(kernel_us, device)
    assert (call_path.eager_kernel_reason(torch_pick, kernel, direct) is not None) is runs_kernel


def test_the_kernel_beside_a_torch_pick_is_its_tuning_runs_fastest(monkeypatch):
    """eager_kernel asks dispatch for the kernels only (the same tuning run: the same source, measured);
    none for a kernel pick, a guess (a neighbour's torch.mm), or the interpreter."""
    from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch

    device = device_for_arch("sm_90")
    monkeypatch.setattr(call_path, "config_launches_directly", lambda config: True)
    monkeypatch.setattr(native, "front", lambda: None)  # (the rule holds without the C++ front)
    asked = []

    def select_problem(problem, **kwargs):
        asked.append(kwargs)
        return _selection(EXPLICIT_HOST - 1, kwargs["device"])

    monkeypatch.setattr(dispatch, "select_problem", select_problem)
    torch_pick = _selection(EXPLICIT_HOST - 2, device, "torch")
    assert call_path.eager_kernel(torch_pick).config == SMALL
    assert asked == [{"device": device, "backend": "triton"}]
    assert call_path.eager_kernel(_selection(EXPLICIT_HOST - 2, device)) is None  # a kernel pick
    guessed = dispatch.Selection(tritonblas.GemmConfig.vendor(), "neighbor", 0.0, False, torch_pick.problem,
                                 device)
    assert call_path.eager_kernel(guessed) is None
    assert call_path.eager_kernel(_selection(EXPLICIT_HOST - 2, INTERPRETER_DEVICE, "torch")) is None
    assert len(asked) == 1


def test_with_the_cpp_front_a_torch_pick_keeps_torchs_op(monkeypatch):
    """Through the C++ front (tritonblas.native) an explicit call of a torch pick costs torch's own op: no
    kernel takes its eager calls (dispatch is not even asked for one)."""
    from tritonblas.arch import device_for_arch

    monkeypatch.setattr(call_path, "config_launches_directly", lambda config: True)
    monkeypatch.setattr(native, "front", lambda: object())
    monkeypatch.setattr(dispatch, "select_problem", lambda problem, **kwargs: pytest.fail("asked"))
    assert call_path.eager_kernel(_selection(EXPLICIT_HOST - 2, device_for_arch("sm_90"), "torch")) is None


@pytest.fixture
def eager_kernel(monkeypatch, torch_picked):
    """Every torch pick has a kernel its explicit eager calls run (as call.path.eager_kernel finds for a
    host-bound small problem); every prepared launch counts as direct."""
    monkeypatch.setattr(call_path, "eager_kernel", lambda selection: dispatch.Selection(
        SMALL, "shipped", 1e-3, True, selection.problem, selection.device))
    monkeypatch.setattr(call_path, "launches_directly", lambda launch: launch is not None)
    dispatch.clear_cache()
    return SMALL


def test_explicit_eager_calls_of_such_a_pick_run_the_kernel_and_torch_under_capture(x, eager_kernel,
                                                                                      monkeypatch):
    launches = record_launches(monkeypatch)
    ref = torch.mm(x.a.float(), x.b.float()).to(f16)
    for call in (lambda: tritonblas.matmul(x.a, x.b), lambda: tritonblas.matmul(x.a, x.b, out=x.out),
                 lambda: tritonblas.linear(x.a, x.b.t())):
        for _ in range(2):
            torch.testing.assert_close(call(), ref, rtol=2e-3, atol=2e-3)
    assert [launch.config for launch in launches] == [eager_kernel] * 6
    monkeypatch.setattr(call_run, "capturing", lambda: True)  # torch's op under graph capture
    torch.testing.assert_close(tritonblas.matmul(x.a, x.b), ref, rtol=2e-3, atol=2e-3)
    monkeypatch.setattr(call_run, "capturing", lambda: False)
    # transparent mode's calls keep torch's own kernel (cheaper: the C++ kernels answer them), and so do
    # calls that need grad (torch's own autograd node) and calls that pin a backend
    with tritonblas.enable(native=False):
        torch.mm(x.a, x.b)
    w = x.b.t().clone().requires_grad_(True)
    tritonblas.linear(x.a, w).sum().backward()
    tritonblas.matmul(x.a, x.b, backend="torch")
    assert len(launches) == 6


def test_which_prepared_launches_go_direct(monkeypatch):
    """Pointer, host-descriptor and device-descriptor launches (their scratch pooled) on a known triton;
    a plan with padded copies (launches of their own), no prepared launch, or a triton whose launcher is
    unknown: not."""
    from tritonblas.launch import direct
    from tritonblas.launch import gemm as launch

    monkeypatch.setattr(direct, "expected", lambda: True)
    assert direct.launches_directly(launch.Plan(None, 1, (), {}, 4, 2, None, tma=False))
    assert direct.launches_directly(launch.Plan(None, 1, (), {}, 4, 2, None, tma=True))
    assert not direct.launches_directly(launch.Plan(None, 1, (), {}, 4, 2, None, copies=(None, object())))
    assert not direct.launches_directly(None)
    monkeypatch.setattr(direct, "expected", lambda: False)
    assert not direct.launches_directly(launch.Plan(None, 1, (), {}, 4, 2, None, tma=False))


@pytest.mark.parametrize("fields, direct", [
    ({}, True), ({"tma": True, "host_descriptors": True}, True), ({"tma": True}, True),
    ({"streamk": True, "grid": 132}, False),
    ({"tma": True, "aligned_copy": True, "host_descriptors": True}, False),
])
def test_which_configs_launch_directly(fields, direct, monkeypatch):
    """What explain can say without tensors: a config needing no padded copies or Stream-K workspace."""
    from tritonblas.launch import direct as launch_direct
    from tritonblas.launch import prepared

    monkeypatch.setattr(launch_direct, "expected", lambda: True)
    config = tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, **fields)
    assert prepared.config_launches_directly(config) is direct
    monkeypatch.setattr(launch_direct, "expected", lambda: False)
    assert not prepared.config_launches_directly(config)


@pytest.mark.parametrize("native", [True, False])
def test_an_eager_vendor_plan_runs_torch_explicit_and_routed(native, x, capture_only, monkeypatch):
    """Where the plan leaves eager calls to torch, an explicit call runs torch.mm (out=) and a routed one
    torch's own kernel, but for each plan's first call, which launches the kernel (compiled and loaded
    then, a graph capture can launch it); an explicit restriction keeps the kernels."""
    launches = record_launches(monkeypatch)
    ref = torch.mm(x.a, x.b)
    for _ in range(3):
        torch.testing.assert_close(tritonblas.matmul(x.a, x.b), ref, rtol=2e-3, atol=2e-3)
        with tritonblas.enable(native=native):
            torch.testing.assert_close(torch.mm(x.a, x.b), ref, rtol=2e-3, atol=2e-3)
    assert len(launches) == 2  # the explicit plan's first call and the routed plan's
    tritonblas.matmul(x.a, x.b, backend="triton")  # restricted: not judged
    assert len(launches) == 3


def test_a_routed_scaled_mm_kernel_pick_is_charged_the_trip_into_python_without_a_record(monkeypatch):
    """A scaled_mm kernel pick that beats torch._scaled_mm by less than a routed call's trip into Python
    runs in explicit eager calls (a direct launch) and in transparent mode's where its launch has a
    record (the C++ kernels launch it), but leaves them to torch where Python launches it
    (Plan.routed_eager_vendor: without a record, with one)."""
    from tritonblas.arch import device_for_arch
    from tritonblas.problem import Problem

    h200 = device_for_arch("sm_90", "NVIDIA H200", 132)
    problem = Problem(16, 6144, 4096, "e4m3", "nt", out_dtype="bf16", scales="row")
    margin = call_path.ROUTED_EXTRA_US / 2
    pick = dispatch.Selection(SMALL, "shipped", 0.030, True, problem, h200, torch_ms=0.030 + margin / 1000)
    assert call_path.eager_torch_reason(pick, direct=True) is None
    assert call_path.eager_torch_reason(pick, direct=True, routed=True) is not None
    assert call_path.eager_torch_reason(pick, direct=True, routed=True, recorded=True) is None
    plan = call_path.ScaledPlan(problem.m, problem.n, problem.k, problem, h200, SMALL, (None, None), False,
                                False, (0, 0, 0, 0), launched=True, routed_eager_vendor=(True, False))
    assert call_run.routed_eager_torch(plan, recorded=False)
    assert not call_run.routed_eager_torch(plan, recorded=True)
    plan.launched = False  # the first call launches the kernel (compiled before any capture)
    assert not call_run.routed_eager_torch(plan, recorded=False)


def test_routed_scaled_mm_calls_of_such_a_pick_run_torch_after_the_first(monkeypatch):
    """Transparent mode's eager calls of a scaled_mm kernel pick charged the routed trip run the kernel
    once (compiled and loaded for a later capture), then torch's op; explicit calls keep the kernel."""
    needs_cpu_rowwise()
    launches = []
    real = call_run.launch_prepared

    def spy(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        if len(args) > 7 and args[7] is not None:  # scaled_mm's (torch's CPU op runs a routed mm inside)
            launches.append(1)
        return real(*args, **kwargs)

    # the prepared launch (the one scaled_mm's plans take once compiled), watched without replacing
    # launch_gemm (which would turn prepared launches off)
    monkeypatch.setattr(call_run, "launch_prepared", spy)
    monkeypatch.setattr(call_path, "eager_vendor", lambda selection, launch, routed=False, recorded=False:
                        routed)
    dispatch.clear_cache()
    g = torch.Generator().manual_seed(0)
    a = torch.randn(16, 64, generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(32, 64, generator=g).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.rand(16, 1, generator=g) + 0.5, torch.rand(1, 32, generator=g) + 0.5
    ref = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
    with tritonblas.enable(native=False):
        for _ in range(3):
            y = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
            torch.testing.assert_close(y, ref, rtol=1e-5, atol=1e-4)
    assert len(launches) == 1
    for _ in range(2):
        tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
    assert len(launches) == 3
