"""tritonblas.scaled_mm (issue 36): every operand dtype pair, scale mode, bias dtype, output dtype, layout
and ragged size, on the persistent kernel, Stream-K (fix-up in the kernel and in the reduce kernel) and
TMA, against the float64 reference of the dequantized operands with torch's own error as the yardstick;
the vendor backend; fp8 saturation; the argument checks; the feasibility rules."""

import pytest
import torch
from helpers.quant import (
    E4M3,
    E5M2,
    INT8,
    assert_scaled_close,
    interpreter_fp8_rounding,
    needs_cpu_rowwise,
    quantized,
    scales,
)

import tritonblas
from tritonblas import GemmConfig
from tritonblas.arch import device_for_arch
from tritonblas.config import config_supports
from tritonblas.launch import gemm as launch
from tritonblas.problem import Problem

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
H200 = device_for_arch("sm_90")

PERSISTENT = GemmConfig(block_m=32, block_n=32, block_k=32)
STREAMK = GemmConfig(block_m=32, block_n=32, block_k=32, streamk=True, grid=12)  # tiles split 3 ways
REDUCE = GemmConfig(block_m=32, block_n=32, block_k=32, streamk=True, grid=12, reduce_kernel=True)
TMA = GemmConfig(block_m=32, block_n=32, block_k=32, tma=True)
COPY_TMA = GemmConfig(block_m=32, block_n=32, block_k=32, tma=True, aligned_copy=True)
TMA_STREAMK = GemmConfig(block_m=32, block_n=32, block_k=64, tma=True, host_descriptors=True, streamk=True,
                         grid=8)

# (id, (m, n, k), a dtype, b dtype, layout, scales, single-scale shape, bias dtype, out dtype, config, fast)
CASES = [
    ("e4m3_tensor_nt_bf16", (64, 48, 96), E4M3, E4M3, "nt", "tensor", (), None, BF16, PERSISTENT, False),
    ("e4m3xe5m2_row_nn_bias_bf16", (33, 40, 128), E4M3, E5M2, "nn", "row", (), BF16, BF16, STREAMK, False),
    ("e5m2xe4m3_rowa_tn_fp16", (33, 40, 128), E5M2, E4M3, "tn", "row_a", (1, 1), FP16, FP16, REDUCE, False),
    ("e5m2_rowb_tt_fp32", (40, 33, 100), E5M2, E5M2, "tt", "row_b", (), FP32, FP32, PERSISTENT, False),
    ("e4m3_fast_acc", (48, 64, 160), E4M3, E4M3, "nt", "row", (), None, BF16, PERSISTENT, True),
    ("e4m3_fast_acc_streamk", (33, 40, 128), E4M3, E4M3, "tn", "tensor", (), FP32, BF16, STREAMK, True),
    ("e4m3_to_e4m3", (33, 40, 64), E4M3, E4M3, "nt", "row", (), BF16, E4M3, PERSISTENT, False),
    ("e4m3_to_e5m2_reduce", (33, 40, 128), E4M3, E5M2, "nn", "row_b", (1, 1), FP16, E5M2, REDUCE, False),
    ("int8_row_nt_bf16", (64, 48, 96), INT8, INT8, "nt", "row", (), BF16, BF16, PERSISTENT, False),
    ("int8_tensor_nn_fp32", (33, 40, 128), INT8, INT8, "nn", "tensor", (1, 1), None, FP32, STREAMK, False),
    ("int8_rowa_tt_fp16", (33, 40, 128), INT8, INT8, "tt", "row_a", (), FP16, FP16, REDUCE, False),
    ("int8_rowb_tn_e4m3", (40, 33, 64), INT8, INT8, "tn", "row_b", (), FP32, E4M3, PERSISTENT, False),
    # ragged sizes: one row, one column, K of 1 and 17, 129 (past a 128 tile)
    ("ragged_m1", (1, 17, 100), E4M3, E4M3, "nn", "row", (), BF16, BF16, PERSISTENT, False),
    ("ragged_n1", (129, 1, 17), E4M3, E5M2, "tn", "row", (), FP32, FP32, PERSISTENT, False),
    ("ragged_k1", (17, 129, 1), INT8, INT8, "nt", "row", (), BF16, BF16, PERSISTENT, False),
    ("ragged_100_129", (100, 100, 129), E4M3, E4M3, "tt", "tensor", (), None, FP16, STREAMK, False),
    ("ragged_int8_streamk", (17, 100, 129), INT8, INT8, "nn", "row", (), FP16, FP32, REDUCE, False),
    # TMA (aligned leading dims: multiples of 16 one-byte elements)
    ("tma_e4m3_nt", (48, 64, 96), E4M3, E4M3, "nt", "row", (), BF16, BF16, TMA, False),
    ("tma_e5m2xe4m3_tn", (48, 48, 64), E5M2, E4M3, "tn", "tensor", (), None, E4M3, TMA, False),
    ("tma_int8_tt_streamk", (48, 64, 256), INT8, INT8, "tt", "row_b", (), FP16, FP16, TMA_STREAMK, False),
    # leading dims of 70 and 40 bytes: copied to padded buffers (kernels/copy.py) for TMA
    ("aligned_copy_tma", (33, 40, 70), E4M3, E5M2, "nn", "row", (), BF16, BF16, COPY_TMA, False),
    # dispatch's own choice (no config)
    ("dispatch_e4m3", (33, 48, 64), E4M3, E4M3, "nt", "row", (), BF16, BF16, None, False),
    ("dispatch_int8", (48, 33, 64), INT8, INT8, "nn", "tensor", (), None, None, None, False),
]


def _inputs(shape, a_dtype, b_dtype, layout, mode, one_shape, bias_dtype, seed=0):  # noqa: ANN001, ANN202
    m, n, k = shape
    g = torch.Generator().manual_seed(seed)
    a = quantized(m, k, a_dtype, layout[0] == "t", g)
    b = quantized(k, n, b_dtype, layout[1] == "t", g)
    scale_a, scale_b = scales(mode, m, n, g, one_shape)
    if a_dtype == INT8:  # keep int8 products at the size of the fp8 ones
        scale_a, scale_b = scale_a * 0.03, scale_b * 0.03
    bias = None if bias_dtype is None else (torch.randn(n, generator=g) * 10).to(bias_dtype)
    return a, b, scale_a, scale_b, bias


@pytest.fixture(autouse=True)
def fp8_rounding():
    with interpreter_fp8_rounding():
        yield


@pytest.mark.parametrize(
    "shape, a_dtype, b_dtype, layout, mode, one_shape, bias_dtype, out_dtype, config, fast",
    [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_scaled_mm(shape, a_dtype, b_dtype, layout, mode, one_shape, bias_dtype, out_dtype, config, fast):
    a, b, scale_a, scale_b, bias = _inputs(shape, a_dtype, b_dtype, layout, mode, one_shape, bias_dtype)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=fast,
                             config=config)
    expected_out = out_dtype or (BF16 if a_dtype == INT8 else a_dtype)
    assert_scaled_close(y, a, b, scale_a, scale_b, bias, expected_out)
    # a second call takes the stored plan (a prepared launch where it has one): the same bits
    again = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, use_fast_accum=fast,
                                 config=config)
    assert torch.equal(y.view(torch.uint8), again.view(torch.uint8))


def test_tma_cases_take_the_descriptor_loop(monkeypatch):
    seen = []
    real = launch.make_plan

    def spy(*args, **kwargs):
        plan = real(*args, **kwargs)
        seen.append(plan.constexprs)
        return plan

    monkeypatch.setattr(launch, "make_plan", spy)
    # (a signature no other test stores a plan for)
    a, b, scale_a, scale_b, bias = _inputs((48, 64, 128), E4M3, E4M3, "nt", "row", (), BF16)
    tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=BF16, config=TMA)
    assert seen and seen[-1]["USE_TMA"] and (seen[-1]["A_SCALE"], seen[-1]["B_SCALE"]) == (2, 2)


@pytest.mark.parametrize("out_dtype, limit", [(E4M3, 448.0), (E5M2, 57344.0)], ids=["e4m3", "e5m2"])
@pytest.mark.parametrize("config", [PERSISTENT, STREAMK], ids=["persistent", "streamk"])
def test_fp8_output_saturates(out_dtype, limit, config):
    m, n, k = 33, 40, 128
    a = torch.full((m, k), 2.0).to(E4M3)
    b = torch.full((k, n), 2.0).to(E4M3)
    b[:, :3] = -2.0
    big = torch.tensor(limit / 100)  # every sum 512 * limit / 100: far past the finite range
    y = tritonblas.scaled_mm(a, b, big, torch.tensor(1.0), out_dtype=out_dtype, config=config).float()
    assert torch.isfinite(y).all()
    assert (y[:, 3:] == limit).all() and (y[:, :3] == -limit).all()


VENDOR_CASES = [  # (id, shape, a, b, scales, bias, out): problems torch takes on CUDA (layout nt)
    ("e4m3_tensor_bf16", (24, 32, 48), E4M3, E4M3, "tensor", BF16, BF16),
    ("e4m3xe5m2_row_fp32_bias", (24, 32, 48), E4M3, E5M2, "row", None, BF16),
    ("e4m3_tensor_fp32_out_bias", (24, 32, 48), E4M3, E4M3, "tensor", FP32, FP32),
    ("e4m3_to_e4m3", (24, 32, 48), E4M3, E4M3, "tensor", BF16, E4M3),
    ("int8_row_bf16", (24, 32, 48), INT8, INT8, "row", FP16, BF16),
]


@pytest.mark.parametrize("shape, a_dtype, b_dtype, mode, bias_dtype, out_dtype",
                         [c[1:] for c in VENDOR_CASES], ids=[c[0] for c in VENDOR_CASES])
def test_vendor_backend(shape, a_dtype, b_dtype, mode, bias_dtype, out_dtype):
    needs_cpu_rowwise(mode == "row" and a_dtype != INT8)
    a, b, scale_a, scale_b, bias = _inputs(shape, a_dtype, b_dtype, "nt", mode, (), bias_dtype)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, backend="torch")
    assert_scaled_close(y, a, b, scale_a, scale_b, bias, out_dtype)


@pytest.mark.parametrize("column_major", [False, True], ids=["out_row_major", "out_column_major"])
def test_vendor_backend_writes_out(column_major):
    needs_cpu_rowwise()
    a, b, scale_a, scale_b, bias = _inputs((24, 32, 48), E4M3, E4M3, "nt", "row", (), BF16)
    out = torch.empty(32, 24, dtype=BF16).t() if column_major else torch.empty(24, 32, dtype=BF16)
    assert tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out=out, backend="torch") is out
    assert_scaled_close(out, a, b, scale_a, scale_b, bias, BF16)


@pytest.mark.parametrize("layout, vendor_takes", [("nt", True), ("nn", False)])
def test_a_kernel_left_to_graph_capture_runs_eager_calls_on_the_vendor(layout, vendor_takes, capture_only,
                                                                         monkeypatch):
    """As the plain ops: where the kernel wins only under graph capture, eager calls after the first (which
    loads the kernel) run torch's scaled GEMM, where torch takes the problem at all (layout nt here)."""
    needs_cpu_rowwise(vendor_takes)
    a, b, scale_a, scale_b, bias = _inputs((24, 32, 48), E4M3, E4M3, layout, "row", (), BF16)
    gemms, real = [], launch.launch_plan

    def watch(plan, tensors, floats):
        gemms.extend([plan] if len(tensors) > 2 else [])  # (a padded copy has two)
        real(plan, tensors, floats)

    monkeypatch.setattr(launch, "launch_plan", watch)
    for _ in range(3):
        y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=BF16)
        assert_scaled_close(y, a, b, scale_a, scale_b, bias, BF16)
    assert len(gemms) == (1 if vendor_takes else 3)


def test_vendor_backend_refuses_what_torch_refuses():
    a, b, scale_a, scale_b, _ = _inputs((24, 32, 48), E4M3, E4M3, "nn", "tensor", (), None)
    with pytest.raises(ValueError, match="layout nt"):
        tritonblas.scaled_mm(a, b, scale_a, scale_b, backend="torch")


def test_out_is_written_and_returned():
    a, b, scale_a, scale_b, bias = _inputs((33, 40, 64), E4M3, E4M3, "nt", "row", (), BF16)
    out = torch.empty(33, 40, dtype=FP16)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out=out, config=PERSISTENT)
    assert y is out
    assert_scaled_close(out, a, b, scale_a, scale_b, bias, FP16)


def test_scales_are_part_of_the_signature():
    # Same operands, other scale shapes: another plan (row-wise vs tensor-wise), not the stored one.
    a, b, scale_a, scale_b, _ = _inputs((33, 40, 64), E4M3, E4M3, "nt", "row", (), None)
    row = tritonblas.scaled_mm(a, b, scale_a, scale_b, config=PERSISTENT)
    one = tritonblas.scaled_mm(a, b, scale_a[:1, :1].clone(), scale_b[:, :1].clone(), config=PERSISTENT)
    assert_scaled_close(row, a, b, scale_a, scale_b, None, E4M3)
    assert_scaled_close(one, a, b, scale_a[:1, :1], scale_b[:, :1], None, E4M3)


def test_parameter_scales_of_another_shape_take_another_plan():
    # Scales held as nn.Parameter (a quantized layer's): their shapes are in the signature too.
    a, b, scale_a, scale_b, _ = _inputs((33, 40, 64), E4M3, E4M3, "nt", "row", (), None)
    row = torch.nn.Parameter(scale_a, requires_grad=False), torch.nn.Parameter(scale_b, requires_grad=False)
    one = torch.nn.Parameter(scale_a[:1, :1].clone(), requires_grad=False), \
        torch.nn.Parameter(scale_b[:, :1].clone(), requires_grad=False)
    for sa, sb in (row, one):
        assert_scaled_close(tritonblas.scaled_mm(a, b, sa, sb, out_dtype=FP32, config=PERSISTENT),
                            a, b, sa, sb, None, FP32)


def test_strided_scales():
    # A row of scales that is a column of a wider tensor: the kernels get a contiguous copy of it.
    a, b, scale_a, scale_b, bias = _inputs((33, 40, 64), E4M3, E4M3, "nt", "row", (), BF16)
    wide_a, wide_b = torch.rand(33, 3) + 0.5, torch.rand(2, 40) + 0.5
    for config in (PERSISTENT, STREAMK):
        y = tritonblas.scaled_mm(a, b, wide_a[:, 1:2], wide_b[1:], bias=bias, out_dtype=FP32, config=config)
        assert_scaled_close(y, a, b, wide_a[:, 1:2], wide_b[1:], bias, FP32)


def test_empty_and_k_zero():
    a, b = torch.empty(0, 32).to(E4M3), torch.empty(32, 8).to(E4M3)
    assert tritonblas.scaled_mm(a, b, torch.tensor(1.0), torch.tensor(1.0)).shape == (0, 8)
    a, b = torch.empty(4, 0).to(E4M3), torch.empty(0, 8).to(E4M3)
    bias = torch.arange(8, dtype=BF16)
    y = tritonblas.scaled_mm(a, b, torch.tensor(2.0), torch.tensor(1.0), bias=bias, config=PERSISTENT)
    assert torch.equal(y, bias.expand(4, 8).to(E4M3))


def test_no_derivative():
    a, b, scale_a, scale_b, bias = _inputs((33, 40, 64), E4M3, E4M3, "nt", "tensor", (), BF16)
    bias.requires_grad_(True)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=BF16, config=PERSISTENT)
    assert y.requires_grad
    with pytest.raises(RuntimeError, match="derivative"):
        y.float().sum().backward()
    with pytest.raises(RuntimeError, match="out="):
        tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out=torch.empty(33, 40, dtype=BF16))


def _bad(**changes):
    """The arguments of a good call (33x40x64 e4m3, row scales, bf16 bias, bf16 out) with `changes`."""
    a, b, scale_a, scale_b, bias = _inputs((33, 40, 64), E4M3, E4M3, "nt", "row", (), BF16)
    args = dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=BF16)
    for name, change in changes.items():
        args[name] = change(args[name]) if callable(change) else change
    return args


BAD_INPUTS = [  # (id, changes, error, message)
    ("a_fp16", dict(a=lambda t: t.half()), TypeError, "a has dtype"),
    ("a_not_tensor", dict(a=[[1.0]]), TypeError, "a must be a torch.Tensor"),
    ("a_3d", dict(a=lambda t: t.unsqueeze(0)), ValueError, "a must be 2-D"),
    ("b_int8_with_fp8_a", dict(b=lambda t: t.to(torch.int8)), TypeError, "int8 multiplies int8"),
    ("inner_dims", dict(b=lambda t: t[:32]), ValueError, "inner dimensions"),
    ("scale_a_fp16", dict(scale_a=lambda t: t.half()), TypeError, "scale_a must be float32"),
    ("scale_a_shape", dict(scale_a=lambda t: t.view(-1)), ValueError, r"scale_a must have shape"),
    ("scale_b_column", dict(scale_b=lambda t: t.t()), ValueError, r"scale_b must have shape"),
    ("scale_b_not_tensor", dict(scale_b=1.0), TypeError, "scale_b must be a torch.Tensor"),
    ("bias_int", dict(bias=lambda t: t.int()), TypeError, "bias must be bfloat16"),
    ("bias_2d", dict(bias=lambda t: t.view(1, -1)), ValueError, "bias must have shape"),
    ("out_dtype_int8", dict(out_dtype=torch.int8), ValueError, "out_dtype must be"),
    ("out_dtype_string", dict(out_dtype="bf16"), TypeError, "out_dtype must be a torch.dtype"),
    ("fast_acc_int", dict(use_fast_accum=1), TypeError, "use_fast_accum"),
    ("backend", dict(backend="cublas"), ValueError, "backend must be"),
    ("config_block_k_16", dict(config=GemmConfig(block_m=32, block_n=32, block_k=16)), ValueError,
     "block_k >= 32"),
]


@pytest.mark.parametrize("changes, error, message", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_names_the_argument_and_leaves_out_alone(changes, error, message):
    args = _bad(**changes)
    out = None if "out_dtype" in changes else torch.full((33, 40), 7.0, dtype=BF16)  # (a bad out_dtype alone)
    with pytest.raises(error, match=message):
        tritonblas.scaled_mm(**args, out=out)
    assert out is None or (out == 7.0).all()


def test_out_dtype_must_match_out():
    args = _bad()
    out = torch.full((33, 40), 7.0, dtype=FP16)
    with pytest.raises(TypeError, match="out has dtype"):
        tritonblas.scaled_mm(**args, out=out)
    assert (out == 7.0).all()


# --- feasibility ------------------------------------------------------------------------------------------

VENDOR_RULES = [  # (problem, what the refusal says; None: torch takes it on CUDA)
    (Problem(64, 64, 64, "e4m3", "nt", out_dtype="bf16", scales="tensor"), None),
    (Problem(1, 64, 64, "e4m3", "nt", "row", out_dtype="fp32", b_dtype="e5m2", scales="tensor"), None),
    (Problem(64, 64, 64, "e4m3", "nt", out_dtype="e4m3", scales="tensor"), None),
    (Problem(64, 64, 64, "e4m3", "nt", out_dtype="bf16", scales="row"), None),
    (Problem(64, 64, 60, "e4m3", "nt", out_dtype="bf16", scales="tensor"), "K and N multiples of 16"),
    (Problem(64, 60, 64, "e4m3", "nt", out_dtype="bf16", scales="tensor"), "K and N multiples of 16"),
    (Problem(64, 64, 64, "e4m3", "nn", out_dtype="bf16", scales="tensor"), "layout nt"),
    (Problem(64, 64, 64, "e5m2", "nt", out_dtype="bf16", scales="tensor"), "two e5m2"),
    (Problem(64, 64, 64, "e4m3", "nt", out_dtype="bf16", scales="row_a"), "not row_a"),
    (Problem(64, 64, 64, "e4m3", "nt", out_dtype="e5m2", scales="row"), None),  # (via an fp32 result)
    (Problem(17, 64, 64, "int8", "nt", out_dtype="bf16", scales="row"), None),
    (Problem(32, 64, 64, "int8", "nn", out_dtype="bf16", scales="row"), "layout nt"),
    (Problem(16, 64, 64, "int8", "nt", out_dtype="bf16", scales="row"), "M > 16"),
    (Problem(64, 64, 60, "int8", "nt", out_dtype="bf16", scales="tensor"), "multiples of 8"),
]


@pytest.mark.parametrize("problem, refusal", VENDOR_RULES,
                         ids=lambda v: v.short() if isinstance(v, Problem) else "")
def test_vendor_feasibility(problem, refusal):
    reason = config_supports(GemmConfig.vendor(), problem, H200)
    assert (reason is None) if refusal is None else (refusal in reason)


def test_kernels_need_block_k_32_for_8_bit_operands():
    problem = Problem(64, 64, 64, "e4m3", "nt", out_dtype="bf16", scales="row")
    assert "block_k >= 32" in config_supports(GemmConfig(block_m=64, block_n=64, block_k=16), problem, H200)
    assert config_supports(GemmConfig(block_m=64, block_n=64, block_k=32), problem, H200) is None
    plain = Problem(64, 64, 64, "bf16", "nt")
    assert config_supports(GemmConfig(block_m=64, block_n=64, block_k=16), plain, H200) is None
