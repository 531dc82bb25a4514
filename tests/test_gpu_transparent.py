"""GPU: transparent mode on CUDA tensors, with its C++ kernels (tritonblas.native, built on the GPU host
against its CUDA torch) and with its Python ones: routed mm / addmm / linear right whether dispatch picks
a kernel or torch, torch's answer kept by the C++ kernels, nn.Linear's backward through .backward(), and
routed calls captured in a CUDA graph and replayed on new contents (issue 34 items 2 and 3), and routed
kernel picks launched from C++ (launch records), torch._scaled_mm's among them.

    TRITONBLAS_TEST_GPU=1 python -m pytest tests/test_gpu_transparent.py
"""

import pytest
import torch
import torch.nn.functional as F
from helpers.quant import assert_scaled_close
from helpers.shapes import assert_close, record_launches

import tritonblas
from tritonblas import native, transparent
from tritonblas.device import interpreter_enabled

GPU = torch.cuda.is_available() and not interpreter_enabled()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU, reason="needs a CUDA GPU and TRITONBLAS_TEST_GPU=1")]
bf16 = torch.bfloat16


@pytest.fixture(autouse=True, params=["C++ kernels", "Python kernels"])
def kernels(request):
    if request.param == "C++ kernels" and not native.load():
        pytest.fail(f"the C++ kernels did not build on the GPU host: {native.why_not()}")
    yield request.param == "C++ kernels"
    tritonblas.disable()


def _t(*shape, dtype=bf16):
    return torch.randn(*shape, device="cuda", dtype=dtype)


def call_path_plan(x, w, b):
    """The plan transparent mode made for F.linear(x, w, b): its aten::addmm's."""
    from tritonblas.call import path as call_path

    shape = (x.shape[0], w.shape[0], x.shape[1])
    found = [p for key, p in call_path.plans.items() if key[0] == "aten::addmm" and (p.m, p.n, p.k) == shape]
    return found[0] if len(found) == 1 else None


def _ref(fn, *tensors):
    return fn(*(t.double() for t in tensors))


# (name, call, operand shapes): decode- and prefill-sized linears, an addmm with alpha/beta, fp32
CALLS = [
    ("linear decode", lambda x, w, b: F.linear(x, w, b), [(4, 2048), (2048, 2048), (2048,)], bf16),
    ("linear prefill", lambda x, w, b: F.linear(x, w, b), [(2, 256, 1024), (4096, 1024), (4096,)], bf16),
    ("mm", lambda a, b: torch.mm(a, b), [(96, 384), (384, 512)], torch.float16),
    ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0), [(512,), (96, 384), (384, 512)],
     bf16),
    ("mm fp32", lambda a, b: a @ b, [(64, 256), (256, 128)], torch.float32),
]
K = {"linear decode": 2048, "linear prefill": 1024, "mm": 384, "addmm": 384, "mm fp32": 256}


@pytest.mark.parametrize("pick", ["dispatch", "torch"])
@pytest.mark.parametrize("name, fn, shapes, dtype", CALLS, ids=[c[0] for c in CALLS])
def test_routed_calls_are_right(name, fn, shapes, dtype, pick, kernels, monkeypatch, request):
    if pick == "torch":
        request.getfixturevalue("torch_picked")
    launches = record_launches(monkeypatch)
    args = [_t(*s, dtype=dtype) for s in shapes]
    theirs = fn(*args)
    with tritonblas.enable(native=kernels):
        assert transparent.is_native() is kernels
        for _ in range(3):  # planned, then hits (the C++ kernels' kept answer for a torch pick)
            ours = fn(*args)
        if kernels and pick == "torch":
            assert native.ops().remembered() >= 1
    if pick == "torch":
        assert not launches
        assert torch.equal(ours, theirs)
    assert_close(ours, theirs, _ref(fn, *args), k=K[name])


def test_nn_linear_backward_accumulates_right(kernels):
    torch.manual_seed(0)
    lin = torch.nn.Linear(1024, 2048, device="cuda", dtype=bf16)
    ref = torch.nn.Linear(1024, 2048, device="cuda", dtype=torch.float64)
    ref.load_state_dict(lin.state_dict())
    x = _t(8, 64, 1024)
    with tritonblas.enable(native=kernels):
        for _ in range(2):  # gradients accumulate over two steps
            lin(x).float().square().mean().backward()
    for _ in range(2):
        ref(x.double()).square().mean().backward()
    assert lin.weight.grad.stride() == lin.weight.stride()
    for ours, want in ((lin.weight.grad, ref.weight.grad), (lin.bias.grad, ref.bias.grad)):
        err = ((ours.double() - want).norm() / want.norm()).item()
        assert err < 2e-2, err


@pytest.mark.parametrize("pick", ["kernel", "torch"])
def test_routed_linear_captures_and_replays(pick, kernels, monkeypatch, request):
    """A decode-sized linear: where dispatch picks a kernel shorter than a routed call's host time, eager
    calls run torch's kernel (but the first, which compiles and loads the kernel) and the captured call
    the kernel (call.path.eager_vendor, call.run.eager_torch); torch's pick runs torch's everywhere."""
    if pick == "torch":
        request.getfixturevalue("torch_picked")
    else:
        request.getfixturevalue("pick_kernel")(lambda problem: (problem.m, problem.n) == (8, 4096), 0.010)
    ran = []
    real_run = transparent.run
    monkeypatch.setattr(transparent, "run", lambda plan, *args: (ran.append(plan), real_run(plan, *args))[1])
    x, w, b = _t(8, 2048), _t(4096, 2048), _t(4096)
    with tritonblas.enable(native=kernels):
        F.linear(x, w, b)  # planned (and compiled) before capture
        torch.cuda.synchronize()
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            F.linear(x, w, b)
        torch.cuda.current_stream().wait_stream(stream)
        eager_runs = len(ran)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = F.linear(x, w, b)
    plan = call_path_plan(x, w, b)
    kernel_pick = plan is not None and plan.config is not None and plan.config.backend != "torch"
    if pick == "kernel":
        assert kernel_pick and plan.eager_vendor, plan
        assert eager_runs == 1 and len(ran) == 2  # the first eager call, then the captured one
    else:
        assert not ran
    for _ in range(2):  # new contents, same addresses: the replay reads them
        x.copy_(_t(8, 2048))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(y, F.linear(x, w, b), F.linear(x.double(), w.double(), b.double()), k=2048)


def test_explicit_linear_replays_right_under_reduce_overhead(kernels):
    """torch.compile(mode="reduce-overhead"): CUDA graphs of a function calling tritonblas.linear (the
    custom op, kept whole by the compiler), replayed on new inputs with transparent mode on."""
    torch._dynamo.reset()
    w, b = _t(1024, 512), _t(1024)
    compiled = torch.compile(lambda x: tritonblas.linear(x, w, b).relu(), mode="reduce-overhead")
    try:
        with tritonblas.enable(native=kernels):
            for _ in range(4):  # warm-up, recording, then replays
                x = _t(8, 512)
                got = compiled(x).clone()  # (the graph's output memory is reused by the next replay)
                ref = F.linear(x.double(), w.double(), b.double()).relu()
                assert_close(got, F.linear(x, w, b).relu(), ref, k=512)
    finally:
        torch._dynamo.reset()


# Routed kernel picks launched from C++ (launch/native.py, native/launch.cpp): configs whose launch gets a
# record (pointer loads; device-side descriptors, which take global scratch; host descriptors, encoded per
# call in C++; Stream-K, whose partials and zeroed counters the C++ side allocates, with its reduce kernel
# or not; pad copies of misaligned operands into buffers, host descriptors on those), and calls of each
# kind, with K aligned and not (383: A's rows, and a linear's weight's, are not 16 bytes: copied).
RECORDED = {
    "pointers": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3),
    "device descriptors": tritonblas.GemmConfig(block_m=64, block_n=128, block_k=64, num_stages=3, tma=True),
    "host descriptors": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, tma=True,
                                              host_descriptors=True),
    "Stream-K": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, streamk=True),
    "Stream-K reduce": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, streamk=True,
                                             reduce_kernel=True),
    "copies": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, tma=True,
                                    host_descriptors=True, aligned_copy=True),
    "Stream-K copies": tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, num_stages=3, streamk=True,
                                             tma=True, host_descriptors=True, aligned_copy=True),
}
RECORDED_CALLS = [
    (f"{name} K {k}", fn, shapes(k), dtype) for k in (384, 383) for name, fn, shapes, dtype in [
        ("mm", lambda a, b: torch.mm(a, b), lambda k: [(96, k), (k, 512)], torch.float16),
        ("addmm", lambda c, a, b: torch.addmm(c, a, b, beta=0.5, alpha=2.0),
         lambda k: [(512,), (96, k), (k, 512)], bf16),
        ("addmm beta 0", lambda c, a, b: torch.addmm(c, a, b, beta=0.0),
         lambda k: [(96, 512), (96, k), (k, 512)], bf16),
        ("linear", lambda x, w, b: F.linear(x, w, b), lambda k: [(8, k), (512, k), (512,)], bf16),
    ]]


def _pick(monkeypatch, config) -> None:
    """Dispatch selecting `config` for every problem, timed at 1 ms and torch not timed (eager calls run
    it under either rule)."""
    from helpers.picks import _pick_where

    from tritonblas.selection import dispatch

    _pick_where(monkeypatch, lambda problem: True,
                lambda problem, device: dispatch.Selection(config, "db", 1.0, True, problem, device))


@pytest.mark.parametrize("config", list(RECORDED))
@pytest.mark.parametrize("name, fn, shapes, dtype", RECORDED_CALLS, ids=[c[0] for c in RECORDED_CALLS])
def test_routed_kernel_calls_launch_from_cpp(config, name, fn, shapes, dtype, kernels, monkeypatch):
    """After a key's first calls (planned, compiled, launched directly once), its routed calls are launched
    by the C++ kernel from the launch record, with no Python: right on new contents, bit for bit the
    Python launch's output, on another stream, under graph capture and replay, and back through Python
    where an operand's address is not 16-byte aligned (the compiled kernel assumed it was)."""
    if not kernels:
        pytest.skip("the C++ kernels' launch")
    _pick(monkeypatch, RECORDED[config])
    asked = []
    for op in ("_routed_mm", "_routed_addmm"):
        real = getattr(transparent, op)
        monkeypatch.setattr(transparent, op, lambda *args, real=real: (asked.append(1), real(*args))[1])
    args = [_t(*s, dtype=dtype) for s in shapes]
    fresh = [_t(*s, dtype=dtype) for s in shapes]
    with tritonblas.enable():
        first = [fn(*args) for _ in range(2)]  # planned and compiled, then launched directly: answered
        python_calls = len(asked)
        later = [fn(*args) for _ in range(3)]
        assert len(asked) == python_calls <= 2, asked
        ours_fresh = fn(*fresh)
        other = torch.cuda.Stream()
        other.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(other):  # a stream of its own: its own kept buffers
            ours_other = [fn(*fresh), fn(*args)]
        torch.cuda.current_stream().wait_stream(other)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = fn(*args)
        for t, src in zip(args, fresh, strict=True):  # new contents, same addresses
            t.copy_(src * 0.5)
        graph.replay()
        torch.cuda.synchronize()
        assert len(asked) == python_calls, "a call went through Python"
        shifted = [_t(t.numel() + 1, dtype=dtype)[1:].view(t.shape) for t in args]  # 2 bytes off
        for t, src in zip(shifted, args, strict=True):
            t.copy_(src)
        ours_shifted = fn(*shifted)
        assert len(asked) == python_calls + 1
    for out in later + ours_other[1:]:
        assert torch.equal(out, first[0])
    assert torch.equal(ours_other[0], ours_fresh)
    for ours, tensors in ((ours_fresh, fresh), (y, args), (ours_shifted, shifted)):
        assert_close(ours, fn(*tensors), _ref(fn, *tensors), k=384)


# Routed torch._scaled_mm kernel picks launched from C++: the record passes the call's scales (tensor- or
# row-wise, contiguous); (scales, bias, out dtype) per call.
SCALED_CALLS = {
    "tensor-wise": ("tensor", False, bf16),
    "row-wise bias": ("row", True, bf16),
    "row-wise fp32": ("row", False, torch.float32),
}
SCALED_RECORDED = ("pointers", "host descriptors", "Stream-K reduce")


def _fp8_operands(scales: str, bias: bool, m: int = 96, n: int = 512, k: int = 384) -> tuple:
    a = _t(m, k).to(torch.float8_e4m3fn)
    b = _t(n, k).to(torch.float8_e4m3fn).t()  # column-major, as torch._scaled_mm takes it
    if scales == "row":
        scale_a, scale_b = torch.rand(m, 1, device="cuda") + 0.5, torch.rand(1, n, device="cuda") + 0.5
    else:
        scale_a, scale_b = torch.tensor(0.7, device="cuda"), torch.tensor(1.3, device="cuda")
    return a, b, scale_a, scale_b, _t(n) if bias else None


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """A copy of t whose address is 4 bytes off 16."""
    shifted = torch.empty(t.numel() + 1, device=t.device, dtype=t.dtype)[1:].view(t.shape)
    return shifted.copy_(t)


@pytest.mark.parametrize("config", SCALED_RECORDED)
@pytest.mark.parametrize("call", list(SCALED_CALLS))
def test_routed_scaled_mm_kernel_calls_launch_from_cpp(config, call, kernels, monkeypatch):
    """A routed torch._scaled_mm whose kernel runs is launched by the C++ kernel from its record after the
    key's first calls: right on new scales, bit for bit the Python launch's output, under graph capture
    and replay; a scale not 16-byte aligned goes back through Python, and a key with a scale that is not
    contiguous asks every call (the kernels read a copy)."""
    if not kernels:
        pytest.skip("the C++ kernels' launch")
    _pick(monkeypatch, RECORDED[config])
    asked = []
    real = transparent._routed_scaled
    monkeypatch.setattr(transparent, "_routed_scaled", lambda *args: (asked.append(1), real(*args))[1])
    scales, bias, out_dtype = SCALED_CALLS[call]
    a, b, scale_a, scale_b, bias_t = _fp8_operands(scales, bias)

    def fn(scale_a: torch.Tensor) -> torch.Tensor:
        return torch._scaled_mm(a, b, scale_a, scale_b, bias=bias_t, out_dtype=out_dtype)

    fresh, first_scale = scale_a * 1.5, scale_a.clone()
    with tritonblas.enable():
        first = [fn(scale_a) for _ in range(2)]
        python_calls = len(asked)
        later = [fn(scale_a) for _ in range(3)]
        ours_fresh = fn(fresh)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            y = fn(scale_a)
        scale_a.copy_(fresh)
        graph.replay()
        torch.cuda.synchronize()
        assert len(asked) == python_calls <= 2, asked
        ours_shifted = fn(_misaligned(fresh))
        assert len(asked) == python_calls + 1
        if scales == "row":
            strided = torch.empty(scale_a.shape[0], 2, device="cuda")[:, :1].copy_(fresh)
            assert not strided.is_contiguous()
            ours_strided = [fn(strided) for _ in range(2)]
            assert len(asked) == python_calls + 3
            assert all(torch.equal(out, ours_fresh) for out in ours_strided)
    for out in later:
        assert torch.equal(out, first[0])
    for out in (y, ours_shifted):
        assert torch.equal(out, ours_fresh)
    for ours, scale in ((first[0], first_scale), (ours_fresh, fresh)):
        assert_scaled_close(ours, a, b, scale, scale_b, bias_t, out_dtype)
