"""matmul/addmm/linear against float64 and torch over every kernel path, layout, dtype, bias and
beta/alpha, as pairwise covering sets (tests/helpers/shapes.py), with each Stream-K split checked to
happen."""

import pytest
import torch
from helpers.shapes import (
    BIAS_SHAPES,
    DTYPES,
    EDGE_SHAPES,
    LINEAR_X_SHAPES,
    MID_SHAPE,
    PATHS,
    SHAPES,
    assert_close,
    bias_cases,
    case_id,
    check_matrix_case,
    config_for_path,
    make_bias,
    matrix_cases,
    op_reference,
    operands,
    path_feasible,
    record_launches,
    reference,
    run_op,
)

import tritonblas
from tritonblas import GemmConfig

PATH_CASES = matrix_cases(list(DTYPES), PATHS, SHAPES, lambda c: path_feasible(c["path"], *c["shape"]))
BIAS_CASES = bias_cases(list(DTYPES), BIAS_SHAPES, lambda c: path_feasible(c["path"], *c["shape"]))


@pytest.fixture
def launches(monkeypatch):
    return record_launches(monkeypatch)


@pytest.mark.parametrize("case", PATH_CASES, ids=case_id)
def test_paths_layouts_dtypes(case, launches):
    check_matrix_case(case, launches)


@pytest.mark.parametrize("case", BIAS_CASES, ids=case_id)
def test_addmm_bias_and_scales(case, launches):
    check_matrix_case(case, launches)


EDGE_CONFIGS = {
    "heuristic": None,
    "persistent": GemmConfig(block_m=16, block_n=16, block_k=16, grid=3),
    "streamk": GemmConfig(block_m=16, block_n=16, block_k=16, grid=3, streamk=True),
}


@pytest.mark.parametrize("family", list(EDGE_CONFIGS))
@pytest.mark.parametrize("op", ["matmul", "addmm", "linear"])
@pytest.mark.parametrize("shape", EDGE_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_degenerate_sizes(shape, op, family):
    m, n, k = shape
    a, b = operands(m, n, k, torch.float16, "nn")
    bias = make_bias("row", m, n, torch.float16)
    ours, theirs = run_op(op, a, b, bias, 0.5, 2.0, config=EDGE_CONFIGS[family])
    assert_close(ours, theirs, op_reference(op, a, b, bias, 0.5, 2.0))
    if k == 0:
        # No K: exactly beta * bias (or zeros), as torch gives.
        assert torch.equal(ours, theirs)


@pytest.mark.parametrize("enable_streamk", [None, False, True])
def test_enable_streamk_picks_family(enable_streamk, launches):
    a, b = operands(33, 17, 100, torch.float16, "nn")
    ours, theirs = run_op("matmul", a, b, None, enable_streamk=enable_streamk)
    assert_close(ours, theirs, reference(a, b))
    if enable_streamk is not None:
        assert launches[0].config.streamk is enable_streamk


@pytest.mark.parametrize("where", ["a", "b"])
@pytest.mark.parametrize("value", [float("nan"), float("inf")])
@pytest.mark.parametrize("path", ["persistent", "sk_shared"])
def test_nan_inf_in_operands_propagate_like_torch(where, value, path):
    m, n, k = 33, 17, 100
    a, b = operands(m, n, k, torch.float32, "nn")
    (a if where == "a" else b)[3, 5] = value
    ours, theirs = run_op("matmul", a, b, None, config=config_for_path(path, m, n, k))
    assert torch.equal(ours.isnan(), theirs.isnan())
    assert torch.equal(ours.isinf(), theirs.isinf())
    assert ours.isnan().any() or ours.isinf().any()
    finite = ours.isfinite()
    assert_close(ours[finite], theirs[finite], reference(a, b)[finite])


@pytest.fixture(params=[False, True], ids=["ieee", "tf32"])
def allow_tf32(request):
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = request.param
    yield request.param
    torch.backends.cuda.matmul.allow_tf32 = saved


def test_fp32_honours_allow_tf32(allow_tf32, launches):
    a, b = operands(33, 17, 100, torch.float32, "tn")
    ours, theirs = run_op("matmul", a, b, None)
    # The interpreter computes tf32 dots in full fp32, so both settings must match torch's accuracy.
    assert_close(ours, theirs, reference(a, b))
    assert launches[0].precision == ("tf32" if allow_tf32 else "ieee")
    ours16, _ = run_op("matmul", a.half(), b.half(), None)
    assert launches[1].precision == "tf32"  # fp16 inputs are exact in any dot precision


@pytest.mark.parametrize("x_shape", LINEAR_X_SHAPES, ids=str)
def test_linear_input_ranks(x_shape):
    import torch.nn.functional as F

    w, bias = torch.randn(17, 33).half(), torch.randn(17).half()
    if x_shape == "transposed":
        x = torch.randn(5, 3, 33).half().transpose(0, 1)
    else:
        x = torch.randn(x_shape).half()
    ours, theirs = tritonblas.linear(x, w, bias), F.linear(x, w, bias)
    assert ours.shape == theirs.shape
    ref = x.double() @ w.double().t() + bias.double()
    assert_close(ours.reshape(-1, 17), theirs.reshape(-1, 17), ref.reshape(-1, 17))


@pytest.mark.parametrize("path", ["persistent", "sk_shared", "heuristic"])
@pytest.mark.parametrize("op", ["matmul", "addmm", "linear"])
def test_bf16_in_the_interpreter(op, path):
    # triton 3.6's interpreter truncates fp32 to bf16 (twice the rounding cast's error); results must
    # still be within the bf16 check.
    m, n, k = MID_SHAPE
    a, b = operands(m, n, k, torch.bfloat16, "tn")
    bias = make_bias("row", m, n, torch.bfloat16)
    ours, theirs = run_op(op, a, b, bias, 0.5, 2.0, config=config_for_path(path, m, n, k))
    assert_close(ours, theirs, op_reference(op, a, b, bias, 0.5, 2.0))
