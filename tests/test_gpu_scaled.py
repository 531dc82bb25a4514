"""GPU suite of `tritonblas.scaled_mm` (fp8 and int8 with tensor-wise and row-wise scales): every kernel
path at real sizes against an fp64 reference of the dequantized operands, within twice torch's own
error (the tuner's own inputs and allowance: tuning.scaled).

    TRITONBLAS_TEST_GPU=1 python -m pytest tests/test_gpu_scaled.py
"""

import pytest
import torch
from helpers.shapes import config_for_path

import tritonblas
from tritonblas.config import GemmConfig, config_supports
from tritonblas.device import interpreter_enabled, tensor_device_info
from tritonblas.problem import Problem
from tritonblas.tuning import scaled
from tritonblas.tuning.benchmark import UNIT_ROUNDOFF, rel_error

GPU = torch.cuda.is_available() and not interpreter_enabled()
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU, reason="needs a CUDA GPU and TRITONBLAS_TEST_GPU=1"),
              pytest.mark.filterwarnings("error:.*could not be compiled:RuntimeWarning")]

# (m, n, k, a, b, scales, layout, bias, out): fp8.yaml's kinds at sizes a test can afford, the ragged
# ones torch._scaled_mm refuses, every layout, mixed fp8 and int8.
PROBLEMS = [
    (1024, 1024, 1024, "e4m3", "e4m3", "row", "nt", "none", "bf16"),
    (1024, 2048, 512, "e4m3", "e4m3", "tensor", "nt", "row", "bf16"),
    (256, 768, 1024, "e5m2", "e4m3", "row_a", "nn", "row", "fp16"),
    (255, 1000, 1001, "e4m3", "e4m3", "row", "nt", "row", "bf16"),
    (129, 257, 96, "e4m3", "e5m2", "row_b", "tn", "none", "fp32"),
    (512, 512, 512, "e4m3", "e4m3", "tensor", "tt", "none", "e4m3"),
    (16, 6144, 4096, "e4m3", "e4m3", "row", "nt", "none", "bf16"),
    (1024, 1024, 1024, "int8", "int8", "row", "nt", "row", "bf16"),
    (300, 200, 1000, "int8", "int8", "tensor", "nn", "none", "fp32"),
    # for the Gluon kernel (layout nt, 16-byte rows): ragged M and N, mixed fp8 with row-wise B, fp8 out
    (1000, 1008, 2048, "e4m3", "e4m3", "row", "nt", "row", "bf16"),
    (512, 1024, 1152, "e5m2", "e4m3", "row_b", "nt", "none", "fp32"),
    (384, 640, 4096, "e4m3", "e4m3", "tensor", "nt", "row", "e4m3"),
]
PATHS = ("heuristic", "persistent", "persistent_tma", "sk_shared", "sk_mixed", "sk_reduce", "gluon")
# The Gluon kernel of tensor- and row-wise scales (kernels/scaled_gluon.py); its block-scaled twin's tests
# below use the same config.
GLUON = GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=4, num_stages=5, tma=True, gluon=True)


def _problem(case) -> Problem:
    m, n, k, a, b, scales, layout, bias, out = case
    return Problem(m, n, k, a, layout, bias, out, b_dtype=None if b == a else b, scales=scales)


def _config(path: str, p: Problem):
    if path == "gluon":
        return GLUON
    if path == "sk_reduce":
        cfg = config_for_path("sk_mixed", p.m, p.n, p.k, gpu=True)
        return cfg.model_copy(update={"reduce_kernel": True})
    return config_for_path(path, p.m, p.n, p.k, gpu=True)


class _Inputs:
    """The tuner's inputs of a problem (tuning.scaled.make) and its allowance (scaled.allowance)."""

    def __init__(self, p: Problem):
        self.ops = scaled.make(p, torch.device("cuda"), torch.Generator(device="cuda").manual_seed(0))
        self.ref_norm = self.ops.ref.norm().item()
        self.tolerance = scaled.allowance(p, self.ops, self.ref_norm, UNIT_ROUNDOFF[p.out])
        self.info = tensor_device_info(self.ops.a)

    def error(self, got: torch.Tensor) -> float:
        return rel_error(got, self.ops.ref, self.ref_norm)

    def call(self, **kwargs) -> torch.Tensor:
        o = self.ops
        return tritonblas.scaled_mm(o.a, o.b, o.scale_a, o.scale_b, bias=o.bias, out_dtype=o.out_dtype,
                                    **kwargs)


@pytest.mark.parametrize("path", PATHS)
@pytest.mark.parametrize("case", PROBLEMS, ids=lambda c: "x".join(map(str, c[:3])) + "-" + "-".join(c[3:]))
def test_gpu_scaled_mm_every_path(case, path):
    p = _problem(case)
    inp = _Inputs(p)
    try:
        config = _config(path, p)
    except LookupError:
        pytest.skip(f"no config realizes {path} at {p.short()}")
    if config is not None and config_supports(config, p, inp.info) is not None:
        pytest.skip(f"{config.short()}: {config_supports(config, p, inp.info)}")
    out = inp.call(config=config)
    err = inp.error(out)
    assert err <= inp.tolerance, f"{p.short()} {path}: rel. error {err:.3g} > {inp.tolerance:.3g}"
    assert torch.isfinite(out.float()).all()


@pytest.mark.parametrize("case", [c for c in PROBLEMS if c[3] != "int8"][:4],
                         ids=lambda c: "x".join(map(str, c[:3])))
def test_gpu_scaled_mm_torch_backend_where_torch_takes_it(case):
    p = _problem(case)
    inp = _Inputs(p)
    if config_supports(GemmConfig.vendor(), p, inp.info) is not None:
        with pytest.raises(ValueError):
            inp.call(backend="torch")
        return
    assert inp.error(inp.call(backend="torch")) <= inp.tolerance


@pytest.mark.parametrize("out_dtype", [torch.float8_e4m3fn, torch.float8_e5m2])
@pytest.mark.parametrize("path", ["heuristic", "sk_mixed"])
def test_gpu_fp8_output_saturates(out_dtype, path):
    """Products past the output's range come out at its largest finite value, never inf or NaN."""
    m = n = 2048  # enough 128x128 tiles for data-parallel and split ones (sk_mixed)
    a = torch.full((m, 512), 448.0, device="cuda").to(torch.float8_e4m3fn)
    b = torch.full((n, 512), 448.0, device="cuda").to(torch.float8_e4m3fn).t()
    one = torch.ones((), device="cuda")
    config = config_for_path(path, m, n, 512, gpu=True)
    got = tritonblas.scaled_mm(a, b, one, -one, out_dtype=out_dtype, config=config)
    assert torch.equal(got.float(), torch.full_like(got.float(), -torch.finfo(out_dtype).max))


@pytest.mark.parametrize("data", ["normal", "positive"])
@pytest.mark.parametrize("k", [4096, 16384, 65536])
def test_gpu_gluon_accurate_error_no_larger_than_cublas(k, data):
    """The Gluon kernel's accumulation (each K block of 128 promoted to fp32) against torch._scaled_mm's
    accurate default (cuBLASLt), both against the float64 product, fp32 out (no output rounding to hide
    the accumulation's): no larger than cuBLAS's, 1% aside for the order of fp32 sums. Positive data
    makes the sums grow with K, where a longer promotion interval shows (kernel-levers F1)."""
    g = torch.Generator(device="cuda").manual_seed(k)
    draw = torch.rand if data == "positive" else torch.randn
    a = draw(256, k, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = draw(256, k, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.tensor(0.75, device="cuda"), torch.tensor(1.25, device="cuda")
    ref = (a.double() @ b.double()) * 0.75 * 1.25
    norm = ref.norm().item()
    ours = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32, config=GLUON)
    theirs = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
    ours_err, torch_err = rel_error(ours, ref, norm), rel_error(theirs, ref, norm)
    assert ours_err <= 1.01 * torch_err, (ours_err, torch_err)


def test_gpu_gluon_scaled_kernel_takes_a_view_it_cannot_read_by_tma_on_its_twin():
    """A row-wise call whose A starts one byte off (no TMA) runs the Gluon config's Triton twin, within
    the tuner's allowance; the aligned call runs the Gluon kernel, the same allowance."""
    from tritonblas.launch.blockscaled import gluon_ready

    inp = _Inputs(_problem(PROBLEMS[0]))
    o = inp.ops
    assert gluon_ready(o.a, o.b, torch.empty(o.a.shape[0], o.b.shape[1], device="cuda"))
    assert inp.error(inp.call(config=GLUON)) <= inp.tolerance
    shifted = torch.empty(o.a.numel() + 16, dtype=o.a.dtype, device="cuda")[1:1 + o.a.numel()].view(o.a.shape)
    shifted.copy_(o.a)
    y = tritonblas.scaled_mm(shifted, o.b, o.scale_a, o.scale_b, bias=o.bias, out_dtype=o.out_dtype,
                             config=GLUON)
    assert not gluon_ready(shifted, o.b, y) and inp.error(y) <= inp.tolerance


@pytest.mark.parametrize("scales", ["row", "tensor", "block"])
def test_gpu_gluon_later_launches_go_through_the_c_launcher_and_match_the_first(scales):
    """launch.gluon: the first call compiles through triton, later ones go through its C launcher
    (launch.direct, the descriptors encoded per address) where direct_verified says so; every call's
    result equals the first's bit for bit, a call on other buffers of the same plan too."""
    from tritonblas.launch import gemm
    from tritonblas.launch.gluon import direct_verified

    if scales == "block":
        a, b, scale_a, scale_b = _block_operands(384, 640, 2304, "nt")
    else:
        inp = _Inputs(_problem((384, 640, 2304, "e4m3", "e4m3", scales, "nt", "row", "bf16")))
        a, b, scale_a, scale_b = inp.ops.a, inp.ops.b, inp.ops.scale_a, inp.ops.scale_b
    gemm.plans.clear()
    outs = [tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON)
            for _ in range(3)]
    assert all(torch.equal(o, outs[0]) for o in outs)
    a2, b2 = a.clone(), b.t().clone().t()
    assert torch.equal(tritonblas.scaled_mm(a2, b2, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON),
                       outs[0])
    gluon_plans = [p for p in gemm.plans.values() if p.host_objects]
    assert len(gluon_plans) == 1
    assert (gluon_plans[0].state.direct is not None) == direct_verified()


def test_gpu_fast_accumulation_stays_close():
    inp = _Inputs(_problem(PROBLEMS[0]))
    assert inp.error(inp.call(use_fast_accum=True)) <= 2 * inp.tolerance


def test_gpu_transparent_mode_routes_torch_scaled_mm():
    """torch._scaled_mm under tritonblas.enable(): dispatch's pick runs, the result within the allowance."""
    p = _problem(PROBLEMS[6])  # 16x6144x4096 row-wise: a shape torch._scaled_mm takes
    inp = _Inputs(p)
    o = inp.ops
    with tritonblas.enable():
        got = torch._scaled_mm(o.a, o.b, o.scale_a, o.scale_b, bias=o.bias, out_dtype=o.out_dtype)
    assert inp.error(got) <= inp.tolerance


# Ragged one-byte operands the padded copies (launch.gemm._aligned: a word at a time) feed to TMA: rows
# starting at every byte of a word, both operands copied or one, int8 too.
RAGGED = [c for c in PROBLEMS if c[2] % 16] + [
    (300, 200, 1001, "int8", "int8", "row", "nn", "none", "bf16"),
    (97, 1003, 4095, "e5m2", "e4m3", "tensor", "tt", "row", "fp16"),
]


# Persistent, and Stream-K with fewer tiles than programs (split K loops, the fix-up), both on TMA
COPY_CONFIGS = {
    "persistent": GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, grid=132),
    "streamk": GemmConfig(block_m=64, block_n=64, block_k=64, num_warps=4, num_stages=3, grid=132,
                          streamk=True),
}


@pytest.mark.parametrize("path", list(COPY_CONFIGS))
@pytest.mark.parametrize("case", RAGGED, ids=lambda c: "x".join(map(str, c[:3])) + "-" + "-".join(c[3:]))
def test_gpu_scaled_mm_padded_copies(case, path):
    p = _problem(case)
    inp = _Inputs(p)
    config = COPY_CONFIGS[path].model_copy(update={"tma": True, "aligned_copy": True})
    assert config_supports(config, p, inp.info) is None
    err = inp.error(inp.call(config=config))
    assert err <= inp.tolerance, f"{p.short()} {path}: rel. error {err:.3g} > {inp.tolerance:.3g}"


@pytest.fixture
def planned_with_front(pick_torch, monkeypatch) -> list:
    """Dispatch picking torch's op for every problem, the C++ front built and its answers dropped: a list
    that grows by one at each scaled_mm call that reaches the Python path's plan lookup."""
    from tritonblas import native
    from tritonblas.call import path as call_path
    from tritonblas.call import scaled as call_scaled

    if not native.load() or native.front() is None:
        pytest.fail(f"the C++ front did not build on the GPU host: {native.why_not()}")
    pick_torch(lambda problem: True)
    native.forget()
    planned = []
    real = call_path.lookup
    monkeypatch.setattr(call_scaled, "lookup", lambda *args: (planned.append(1), real(*args))[1])
    return planned


def test_gpu_a_scaled_mm_torch_pick_is_answered_by_the_cpp_front(planned_with_front):
    """Dispatch's torch._scaled_mm pick on CUDA: from the second call on the C++ front (tritonblas/native)
    runs torch._scaled_mm itself, never planned again; results equal torch's own call."""
    a = torch.randn(256, 512, device="cuda").to(torch.float8_e4m3fn)
    b = torch.randn(1024, 512, device="cuda").to(torch.float8_e4m3fn).t()
    scale_a, scale_b = torch.rand(256, 1, device="cuda") + 0.5, torch.rand(1, 1024, device="cuda") + 0.5
    bias = torch.randn(1024, device="cuda", dtype=torch.bfloat16)
    want = torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.bfloat16)
    for _ in range(4):
        got = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=torch.bfloat16)
    assert len(planned_with_front) == 1 and torch.equal(got, want)


# Block-wise scales: (m, n, k, layout, config: None for dispatch's kernel pick). K over 32, 128 and 512 blocks
# against torch's block-wise op; a ragged problem by pointers; an unaligned view through a TMA config.
BLOCK_CASES = [
    (256, 1024, 4096, "nt", None),
    (256, 1024, 16384, "nt", None),
    (64, 512, 65536, "nt", None),
    (100, 300, 1000, "nn", None),
    (512, 576, 7168, "nt", GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=8, num_stages=4,
                                      tma=True)),
    (16, 2048, 7168, "nt", GemmConfig(block_m=64, block_n=256, block_k=64, num_warps=8, num_stages=3,
                                      tma=True)),
    # the Gluon kernel: ragged N (576), ragged M, long K (an odd number of K blocks too)
    (512, 576, 7168, "nt", GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=4, num_stages=5,
                                      tma=True, gluon=True)),
    (200, 1024, 4224, "nt", GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=4, num_stages=6,
                                       tma=True, gluon=True)),
    (64, 512, 65536, "nt", GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=4, num_stages=4,
                                      tma=True, gluon=True)),
]


def _block_operands(m: int, n: int, k: int, layout: str) -> tuple:
    from tritonblas.problem import block_scale_shapes

    g = torch.Generator(device="cuda").manual_seed(m + n + k)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = w.t() if layout == "nt" else w.t().contiguous()
    shape_a, shape_b = block_scale_shapes(m, n, k)
    scale_a = (torch.rand(shape_a, device="cuda", generator=g) + 0.5) / 64
    scale_b = ((torch.rand(shape_b[::-1], device="cuda", generator=g) + 0.5) / 64).t()
    return a, b, scale_a, scale_b


@pytest.mark.parametrize("case", BLOCK_CASES, ids=lambda c: "x".join(map(str, c[:3])) + f"_{c[3]}"
                         + ("" if c[4] is None else "_" + c[4].short().replace(" ", "_")))
def test_gpu_block_scaled_error_within_torchs(case):
    """Against the float64 product of the dequantized blocks: within twice the error of torch's own
    block-wise op (cuBLASLt) where it takes the problem, else of the fp32 product cast once."""
    from tritonblas.config import torch_blockwise_fits
    from tritonblas.launch.blockscaled import dequantized_product

    m, n, k, layout, config = case
    a, b, scale_a, scale_b = _block_operands(m, n, k, layout)
    # backend "triton": dispatch's kernel pick (its default for most of these is torch's op)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=config,
                             backend="triton" if config is None else None)
    sa = scale_a.double().repeat_interleave(128, 1)[:, :k]
    sb = scale_b.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    ref = (a.double() * sa) @ (b.double() * sb)
    if torch_blockwise_fits(Problem(m, n, k, "e4m3", layout, out_dtype="bf16", scales="block"), "sm_90"):
        F = torch.nn.functional
        theirs = F.scaled_mm(a, b, scale_a.t().contiguous().t(), F.ScalingType.BlockWise1x128,
                             scale_b.t().contiguous().t(), F.ScalingType.BlockWise128x128,
                             output_dtype=torch.bfloat16)
    else:
        theirs = dequantized_product(a, b, scale_a, scale_b).to(torch.bfloat16)
    norm = ref.norm().item()
    ours_err, torch_err = rel_error(y, ref, norm), rel_error(theirs, ref, norm)
    assert ours_err <= 2 * torch_err + UNIT_ROUNDOFF["bf16"], (ours_err, torch_err)


OUT_NAMES = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float8_e4m3fn: "e4m3"}


@pytest.mark.parametrize("out_dtype", list(OUT_NAMES))
def test_gpu_gluon_block_kernel_outputs_bias_and_its_triton_twin(out_dtype):
    """The Gluon kernel with a bias into each output dtype against the float64 product (+ bias, saturated
    for fp8), within twice the error of the Triton block kernel (the same tensor-core partials a K block:
    an fp32 output shows their rounding, not the cast's); a view it cannot take by TMA (a base one byte
    off) runs that Triton twin, within the same bound."""
    from tritonblas.launch.blockscaled import gluon_ready, gluon_twin

    m, n, k = 300, 640, 2304
    a, b, scale_a, scale_b = _block_operands(m, n, k, "nt")
    bias = torch.randn(n, device="cuda").to(torch.bfloat16 if out_dtype == torch.float8_e4m3fn else out_dtype)
    sa = scale_a.double().repeat_interleave(128, 1)[:, :k]
    sb = scale_b.double().repeat_interleave(128, 0).repeat_interleave(128, 1)[:k, :n]
    ref = (a.double() * sa) @ (b.double() * sb) + bias.double()
    if out_dtype == torch.float8_e4m3fn:
        ref = ref.clamp(-448, 448)
    triton_kernel = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype,
                                         config=gluon_twin(GLUON))
    norm = ref.norm().item()
    bound = 2 * rel_error(triton_kernel, ref, norm) + UNIT_ROUNDOFF[OUT_NAMES[out_dtype]]
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, config=GLUON)
    assert gluon_ready(a, b, y) and rel_error(y, ref, norm) <= bound, (rel_error(y, ref, norm), bound)
    wide = torch.empty(m, k + 16, device="cuda", dtype=a.dtype)
    shifted = wide[:, 1:k + 1]
    shifted.copy_(a)
    twin = tritonblas.scaled_mm(shifted, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, config=GLUON)
    assert not gluon_ready(shifted, b, twin) and rel_error(twin, ref, norm) <= bound


def test_gpu_gluon_block_kernel_launches_from_a_fresh_thread():
    """A thread that has made no CUDA runtime call yet (the tuner's compile threads) launches the Gluon
    kernel: its host-built descriptors need the device's context current there (launch.gluon
    .context_current); the result equals the main thread's."""
    import threading

    a, b, scale_a, scale_b = _block_operands(256, 1024, 4096, "nt")
    want = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON)
    got, errors = [], []

    def call():
        try:
            got.append(tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON))
            torch.cuda.synchronize()
        except Exception as exc:  # (re-raised below, in the test's thread)
            errors.append(exc)

    thread = threading.Thread(target=call)
    thread.start()
    thread.join()
    assert not errors and torch.equal(got[0], want)


def _fp8_operands(scales: str, seed: int) -> tuple:
    """256 x 1024 x 4096 e4m3 operands (b column-major) and their block-wise or row-wise scales."""
    if scales == "block":
        return _block_operands(256, 1024, 4096 + seed, "nt")
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = torch.randn(256, 4096, device="cuda", generator=g).to(torch.float8_e4m3fn)
    b = torch.randn(1024, 4096, device="cuda", generator=g).to(torch.float8_e4m3fn).t()
    scale_a = torch.rand(256, 1, device="cuda", generator=g) + 0.5
    return a, b, scale_a, torch.rand(1, 1024, device="cuda", generator=g) + 0.5


@pytest.mark.parametrize("scales", ["block", "row"])
def test_gpu_gluon_kernels_capture_and_replay_in_a_cuda_graph(scales):
    """Captured once, replayed on new operands and scales copied into the captured tensors: the Gluon
    kernels' descriptors (encoded at capture, the captured tensors' addresses) read the new values."""
    a, b, scale_a, scale_b = _fp8_operands(scales, 0)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON)  # compiled first
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON)
    a2, _, sa2, _ = _fp8_operands(scales, 128)
    a.copy_(a2[:, :4096])
    scale_a.copy_(sa2[:, :scale_a.shape[1]])
    graph.replay()
    want = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, config=GLUON)
    assert torch.equal(y, want)


def test_gpu_a_block_scaled_torch_pick_is_answered_by_the_cpp_front(planned_with_front):
    """Dispatch's pick of torch's block-wise op: from the second call the C++ front runs it
    (aten::_scaled_mm_v2, as F.scaled_mm does), never planned again; results equal F.scaled_mm's bit for
    bit. A call with a bias, or with scales that are not outer-dim-major, keeps the Python path."""
    a, b, scale_a, scale_b = _block_operands(256, 1024, 4096, "nt")
    scale_a = scale_a.t().contiguous().t()  # outer-dim-major, as torch's op takes them
    F = torch.nn.functional
    want = F.scaled_mm(a, b, scale_a, F.ScalingType.BlockWise1x128, scale_b, F.ScalingType.BlockWise128x128,
                       output_dtype=torch.bfloat16)
    for _ in range(4):
        got = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.bfloat16)
    assert len(planned_with_front) == 1 and torch.equal(got, want)
    row_major = scale_a.contiguous()
    for _ in range(2):
        tritonblas.scaled_mm(a, b, row_major, scale_b, out_dtype=torch.bfloat16)
    assert len(planned_with_front) == 3
