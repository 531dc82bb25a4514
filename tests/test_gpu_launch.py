"""GPU: the call path's prepared launches after the first, which go through triton's C launcher directly
(launch.direct: pointers as integers, host descriptors encoded once per address), give every call its
own right result: fresh operands at new addresses, addresses reused with new contents, more addresses
than the descriptor cache keeps, every layout, a bias, fp32 under both tf32 settings, an N-D linear
and scaled_mm's scales.

    TRITONBLAS_TEST_GPU=1 python -m pytest tests/test_gpu_launch.py
"""

import pytest
import torch
from helpers.shapes import assert_close, operands, reference, rel_error

import tritonblas
from tritonblas.call import path as call_path
from tritonblas.config import GemmConfig
from tritonblas.device import interpreter_enabled
from tritonblas.launch import direct

GPU = torch.cuda.is_available() and not interpreter_enabled()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU, reason="needs a CUDA GPU and TRITONBLAS_TEST_GPU=1")]
# The launchers launch.direct knows (a later triton keeps `run`: results still right, launches slower).
KNOWN_TRITON = direct.expected() if GPU else False

POINTERS = GemmConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3)
HOST_TMA = GemmConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3, tma=True,
                      host_descriptors=True)
DEVICE_TMA = GemmConfig(block_m=16, block_n=64, block_k=128, num_warps=4, num_stages=3, tma=True)
CONFIGS = {"pointers": POINTERS, "host_tma": HOST_TMA, "device_tma": DEVICE_TMA}
# (op, m, n, k, layout, dtype, bias): decode's linear, the layouts, a bias, fp32.
CASES = [
    ("linear", 4, 2048, 2048, "nt", torch.bfloat16, False),
    ("linear", 8, 1024, 512, "nt", torch.float16, True),
    ("matmul", 64, 512, 256, "nn", torch.bfloat16, False),
    ("matmul", 64, 512, 256, "tn", torch.float16, False),
    ("addmm", 96, 256, 384, "tt", torch.bfloat16, True),
    ("matmul", 32, 256, 256, "nn", torch.float32, False),
]


def _call(op, a, b, bias, config):
    if op == "linear":
        return tritonblas.linear(a, b.t(), bias, config=config)
    if op == "addmm":
        return tritonblas.addmm(bias, a, b, config=config)
    return tritonblas.matmul(a, b, config=config)


def _torch(op, a, b, bias):
    if op == "linear":
        return torch.nn.functional.linear(a, b.t(), bias)
    return torch.addmm(bias, a, b) if op == "addmm" else torch.mm(a, b)


def _plan(op, a, b, bias, config):
    if op == "linear":
        return call_path.plans[call_path.signature("linear", None, None, config, a, b.t(), bias)]
    return call_path.plans[call_path.signature(op, None, None, config, a, b, bias)]


def _inputs(op, m, n, k, layout, dtype, with_bias, seed):
    a, b = operands(m, n, k, dtype, layout, "cuda", seed)
    bias = torch.randn(n, dtype=dtype, device="cuda") if with_bias else None
    return a, b, bias


@pytest.mark.parametrize("config", list(CONFIGS), ids=str)
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}x{c[2]}x{c[3]}-{c[4]}-{str(c[5])[6:]}")
def test_gpu_prepared_launches_every_call_right(case, config):
    op, m, n, k, layout, dtype, with_bias = case
    cfg = CONFIGS[config]
    for seed in range(4):  # the first compiles; the others launch prepared, at new addresses
        a, b, bias = _inputs(op, m, n, k, layout, dtype, with_bias, seed)
        got = _call(op, a, b, bias, cfg)
        assert_close(got, _torch(op, a, b, bias), reference(a, b, bias if op != "matmul" else None), k=k)
    plan = _plan(op, a, b, bias, cfg)
    assert plan.launch is not None
    if KNOWN_TRITON:
        assert plan.launch.state.direct is not None, "a prepared launch kept CompiledKernel.run"
    # The same addresses with new contents: nothing of the operands' values is kept.
    a.copy_(torch.randn_like(a))
    got = _call(op, a, b, bias, cfg)
    assert_close(got, _torch(op, a, b, bias), reference(a, b, bias if op != "matmul" else None), k=k)


def test_gpu_host_descriptors_past_the_cache(monkeypatch):
    """More activation addresses than a slot keeps: encodings start over, results stay right."""
    monkeypatch.setattr(direct, "DESCRIPTOR_CACHE", 2)
    w = torch.randn(1024, 512, dtype=torch.bfloat16, device="cuda")
    xs = [torch.randn(4, 512, dtype=torch.bfloat16, device="cuda") for _ in range(5)]
    for _ in range(2):
        for x in xs:
            assert_close(tritonblas.linear(x, w, config=HOST_TMA), torch.nn.functional.linear(x, w),
                         reference(x, w.t()), k=512)


def test_gpu_fp32_prepared_launch_follows_the_tf32_flag(monkeypatch):
    """One prepared plan, the flag flipped between calls: ieee accuracy with it off, tf32's with it on."""
    a, b = operands(64, 256, 512, torch.float32, "nn", "cuda", 0)
    ref = reference(a, b)
    for tf32 in (False, True, False, True):
        monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", tf32)
        for _ in range(2):
            err = rel_error(tritonblas.matmul(a, b, config=POINTERS), ref)
            if tf32:
                assert 1e-5 < err < 5e-3, f"tf32 on: rel. error {err:.3g}"
            else:
                assert err < 1e-5, f"tf32 off: rel. error {err:.3g}"


def test_gpu_linear_of_3d_input_prepared():
    w = torch.randn(768, 256, dtype=torch.bfloat16, device="cuda")
    for seed in range(3):
        x = torch.randn(2, 5, 256, dtype=torch.bfloat16, device="cuda", generator=None) + seed
        got = tritonblas.linear(x, w, config=POINTERS)
        assert got.shape == (2, 5, 768)
        ref = reference(x.reshape(10, 256), w.t()).reshape(2, 5, 768)
        assert_close(got, torch.nn.functional.linear(x, w), ref, k=256)


def test_gpu_scaled_mm_prepared_launches_with_new_scales():
    """Row-wise fp8: new operands and new scale vectors each call (their pointers go in as integers)."""
    m, n, k = 64, 512, 256
    for seed in range(4):
        g = torch.Generator(device="cuda").manual_seed(seed)
        a = torch.randn(m, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b = torch.randn(n, k, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
        sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
        sb = torch.rand(1, n, device="cuda", generator=g) + 0.5
        got = tritonblas.scaled_mm(a, b, sa, sb, out_dtype=torch.float32, config=POINTERS)
        ref = (a.double() * sa.double()) @ (b.double() * sb.double())
        err = ((got.double() - ref).norm() / ref.norm()).item()
        assert err < 1e-5, f"seed {seed}: rel. error {err:.3g}"


def test_gpu_device_descriptors_in_a_graph_and_beside_it():
    """A prepared launch with device-side descriptors takes its global scratch from the pool in eager
    calls and allocates its own under capture: replays interleaved with eager calls of the same plan, on
    the graph's stream and another, all give right results."""
    from tritonblas.launch import scratch

    w = torch.randn(1024, 512, dtype=torch.bfloat16, device="cuda")
    x = torch.randn(8, 512, dtype=torch.bfloat16, device="cuda")
    for _ in range(3):  # compiled, then direct
        tritonblas.linear(x, w, config=DEVICE_TMA)
    if KNOWN_TRITON:
        assert any(key[0] == "descriptors" for key in scratch.free_lists)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tritonblas.linear(x, w, config=DEVICE_TMA)
    other = torch.cuda.Stream()
    for _ in range(4):
        x.copy_(torch.randn_like(x))
        graph.replay()
        with torch.cuda.stream(other):
            z = torch.randn(8, 512, dtype=torch.bfloat16, device="cuda")
            eager = tritonblas.linear(z, w, config=DEVICE_TMA)
        torch.cuda.synchronize()
        assert_close(y, torch.nn.functional.linear(x, w), reference(x, w.t()), k=512)
        assert_close(eager, torch.nn.functional.linear(z, w), reference(z, w.t()), k=512)


def test_gpu_a_torch_pick_runs_its_kernel_eagerly_and_torch_in_a_graph(pick_torch, monkeypatch):
    """A torch pick whose kernel runs eager explicit calls (call.path.eager_kernel, forced here): eager
    calls launch the kernel directly, a captured call records torch's op, and both give right results."""
    from tritonblas.selection import dispatch

    pick_torch(lambda problem: True)
    kernel = GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3)
    monkeypatch.setattr(call_path, "eager_kernel", lambda selection: dispatch.Selection(
        kernel, "shipped", 0.005, True, selection.problem, selection.device))
    a, b = operands(512, 256, 384, torch.bfloat16, "nn", "cuda")
    ref = reference(a, b)
    for _ in range(3):  # compiled, then direct
        assert_close(tritonblas.matmul(a, b), torch.mm(a, b), ref, k=384)
    (plan,) = [p for p in call_path.plans.values() if p.m == 512 and p.n == 256]
    assert plan.capture_vendor and plan.config == kernel
    assert direct.launches_directly(plan.launch) or not KNOWN_TRITON

    def kernels(fn) -> set[str]:
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            fn()
            torch.cuda.synchronize()
        return {e.name for e in prof.events() if e.device_type == torch.autograd.DeviceType.CUDA}

    assert "persistent_gemm_kernel" in kernels(lambda: tritonblas.matmul(a, b))
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tritonblas.matmul(a, b)
    assert "persistent_gemm_kernel" not in kernels(graph.replay)
    assert_close(y, torch.mm(a, b), ref, k=384)


def test_gpu_the_cpp_front_answers_eager_calls_and_leaves_captures_to_python(pick_kernel, monkeypatch):
    """A kernel that wins under graph capture only, on CUDA with the C++ front (tritonblas/native): its
    first eager call launches the kernel, the next runs torch's op and is remembered, later eager calls
    are answered in C++ (never planned again); a captured call goes to the Python path, which captures
    the kernel. Every result right."""
    from tritonblas import native
    from tritonblas.call import ops

    if not native.load() or native.front() is None:
        pytest.fail(f"the C++ front did not build on the GPU host: {native.why_not()}")
    pick_kernel(lambda problem: True, 0.005)
    monkeypatch.setattr(call_path, "eager_vendor", lambda *args: True)
    native.forget()
    planned = []
    real = call_path.lookup
    monkeypatch.setattr(ops, "lookup", lambda *args: (planned.append(1), real(*args))[1])
    x, w = operands(8, 1024, 512, torch.bfloat16, "nt", "cuda")
    w = w.t()
    ref = reference(x, w.t())
    for _ in range(5):
        assert_close(tritonblas.linear(x, w), torch.nn.functional.linear(x, w), ref, k=512)
    assert len(planned) == 2 and native.ops().remembered() == 1
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tritonblas.linear(x, w)
    assert len(planned) == 3
    x.copy_(torch.randn_like(x))
    graph.replay()
    torch.cuda.synchronize()
    assert_close(y, torch.nn.functional.linear(x, w), reference(x, w.t()), k=512)
