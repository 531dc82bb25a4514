"""tritonblas.scaled_mm with block-wise fp8 scales (issue 51 item 4): scale_a per 1x128 block of a's rows,
scale_b per 128x128 block of b, as DeepSeek-V3 and transformers' FineGrainedFP8 store them. Values against
the float64 product of the dequantized operands (ragged M, N, K; K over 2-3 blocks with a partial last
one; b as a weight's transpose or row-major; bias; output dtypes; e4m3 and e5m2), torch's backend, the
shapes where block and row-wise scales coincide, the argument checks, the dispatch key, the shapes file,
explain, the tuner's refusal and the kernel hashes."""

import json
from pathlib import Path

import pytest
import torch
from helpers.quant import E4M3, E5M2, MANTISSA, error, interpreter_fp8_rounding
from typer.testing import CliRunner

import tritonblas
from tritonblas import GemmConfig, identity, record
from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch
from tritonblas.call.scaled import plan_scaled
from tritonblas.cli import app
from tritonblas.config import config_supports
from tritonblas.problem import Problem, block_scale_shapes
from tritonblas.selection import dispatch
from tritonblas.shapes import ShapesError, load_problems
from tritonblas.tuning.benchmark import GpuBenchmark
from tuning_db import ProblemKey

BF16, FP16, FP32 = torch.bfloat16, torch.float16, torch.float32
H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
ROOT = Path(__file__).resolve().parent.parent

P16 = GemmConfig(block_m=16, block_n=32, block_k=64, num_warps=4, num_stages=2)
P32_K128 = GemmConfig(block_m=32, block_n=64, block_k=128, num_warps=4, num_stages=2)
WIDE_N = GemmConfig(block_m=16, block_n=256, block_k=32, num_warps=4, num_stages=2)  # 2 scale columns a tile

# (id, (m, n, k), a dtype, b dtype, a column-major, b the transpose of an (N, K) weight, scale strides,
#  bias dtype, out dtype, config (None: dispatch), backend)
CASES = [
    ("weight_t_3_blocks_fp32", (5, 33, 300), E4M3, E4M3, False, True, "contiguous", None, FP32, P16, None),
    ("e5m2_row_major_b_bias_bf16", (17, 130, 257), E5M2, E5M2, False, False, "contiguous", BF16, BF16,
     P32_K128, None),
    ("mixed_col_a_wide_tile_fp16", (33, 129, 200), E4M3, E5M2, True, True, "outer", FP32, FP16, WIDE_N, None),
    ("whole_blocks_dispatch", (3, 40, 256), E4M3, E4M3, False, True, "sliced", None, FP32, None, None),
    ("decode_one_row_bias_fp32", (1, 200, 130), E4M3, E4M3, False, True, "outer", FP16, FP32, P16, None),
    ("fp8_output", (9, 20, 140), E4M3, E4M3, False, True, "contiguous", BF16, E4M3, P16, None),
    ("torch_backend", (7, 150, 260), E4M3, E4M3, False, True, "sliced", BF16, BF16, None, "torch"),
]


def _strided(t: torch.Tensor, how: str) -> torch.Tensor:
    """The same values with other strides: "outer" column-major (torch's outer-dim-major scales),
    "sliced" every other column of a wider tensor."""
    if how == "outer":
        return t.t().contiguous().t()
    if how == "sliced":
        wide = torch.zeros(t.shape[0], 2 * t.shape[1])
        wide[:, ::2] = t
        return wide[:, ::2]
    return t


def _inputs(shape, a_dtype, b_dtype, a_col, b_weight, strides, bias_dtype, seed=0):  # noqa: ANN001, ANN202
    m, n, k = shape
    g = torch.Generator().manual_seed(seed)
    a = (torch.randn(k, m, generator=g) * 3).to(a_dtype).t() if a_col else \
        (torch.randn(m, k, generator=g) * 3).to(a_dtype)
    b = (torch.randn(n, k, generator=g) * 3).to(b_dtype).t() if b_weight else \
        (torch.randn(k, n, generator=g) * 3).to(b_dtype)
    shape_a, shape_b = block_scale_shapes(m, n, k)
    # scales of a few binades apart, so that a kernel applying a wrong block's scale is far off
    scale_a = _strided(2.0 ** torch.randint(-3, 3, shape_a, generator=g).float(), strides)
    scale_b = _strided(2.0 ** torch.randint(-3, 3, shape_b, generator=g).float() * 0.01, strides)
    bias = None if bias_dtype is None else (torch.randn(n, generator=g) * 10).to(bias_dtype)
    return a, b, scale_a, scale_b, bias


def _reference(a, b, scale_a, scale_b, bias) -> torch.Tensor:  # noqa: ANN001
    """The float64 sum over K blocks of each block's product times its scales (+ bias), written out
    block by block, independently of the library's expansion of the scales."""
    m, k = a.shape
    n = b.shape[1]
    ref = torch.zeros(m, n, dtype=torch.float64)
    cols = torch.arange(n) // 128
    for kb in range(-(-k // 128)):
        part = a[:, kb * 128:(kb + 1) * 128].double() @ b[kb * 128:(kb + 1) * 128].double()
        ref += part * scale_a[:, kb, None].double() * scale_b[kb, cols][None, :].double()
    return ref if bias is None else ref + bias.double()


def _assert_close(y: torch.Tensor, a, b, scale_a, scale_b, bias, out_dtype) -> None:  # noqa: ANN001
    """err(ours) <= 2 * err(the fp32 product cast once) + one rounding step of the output dtype, both
    against the float64 reference (the interpreter truncates bf16 and fp16 stores)."""
    assert y.dtype == out_dtype and y.shape == (a.shape[0], b.shape[1])
    ref = _reference(a, b, scale_a, scale_b, bias)
    if out_dtype in (E4M3, E5M2):
        ref = ref.clamp(-torch.finfo(out_dtype).max, torch.finfo(out_dtype).max)
    theirs = ref.float().to(out_dtype)
    eps = 2.0 ** -MANTISSA[out_dtype]
    assert torch.isfinite(y.float()).all()
    assert error(y, ref) <= 2 * error(theirs, ref) + eps, (error(y, ref), error(theirs, ref))


@pytest.fixture(autouse=True)
def fp8_rounding():
    with interpreter_fp8_rounding():
        yield


@pytest.mark.parametrize("shape, a_dtype, b_dtype, a_col, b_weight, strides, bias_dtype, out_dtype, config, "
                         "backend", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_block_scaled_mm(shape, a_dtype, b_dtype, a_col, b_weight, strides, bias_dtype, out_dtype, config,
                         backend):
    a, b, scale_a, scale_b, bias = _inputs(shape, a_dtype, b_dtype, a_col, b_weight, strides, bias_dtype)
    plan = plan_scaled(a, b, scale_a, scale_b, bias, out_dtype, False, None, backend, config)
    assert plan.problem.scales == "block"
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, config=config,
                             backend=backend)
    _assert_close(y, a, b, scale_a, scale_b, bias, out_dtype)
    # the stored plan, and out= (not contiguous)
    out = torch.full((shape[1], shape[0]), 7.0, dtype=out_dtype).t()
    tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out_dtype, config=config,
                         backend=backend, out=out)
    assert torch.equal(out.contiguous().view(torch.uint8), y.view(torch.uint8))


@pytest.mark.parametrize("block_n, a_col", [(32, False), (256, True)],
                         ids=["one_b_scale_a_tile", "scale_vector"])
def test_tma_operands(block_n, a_col):
    """The descriptor path (config.tma, both operands 16-byte aligned): K over 3 blocks, the last one
    partial (zero-filled by the copy engine), N over 2 column blocks, a tile's B scales one number
    (BLOCK_N <= 128) or a vector. launch_blockscaled directly: dispatch refuses tma on the interpreter's
    arch."""
    from tritonblas.launch.blockscaled import block_plan, launch_blockscaled

    a, b, scale_a, scale_b, bias = _inputs((32, 160, 288), E4M3, E4M3, a_col, True, "outer", BF16)
    config = GemmConfig(block_m=16, block_n=block_n, block_k=64, tma=True, num_warps=4, num_stages=2)
    out = torch.empty(32, 160, dtype=FP32)
    assert block_plan(a, b, out, None, scale_a, scale_b, config, 4).constexprs["USE_TMA"]
    launch_blockscaled(a, b, scale_a, scale_b, bias, out, config, 4)
    _assert_close(out, a, b, scale_a, scale_b, bias, FP32)
    # a view TMA cannot read (leading stride of 289 bytes) runs the same config by pointers
    wide = torch.zeros(32, 289, dtype=E4M3)
    wide[:, :288] = a
    view = wide[:, :288]
    assert not block_plan(view, b, out, None, scale_a, scale_b, config, 4).constexprs["USE_TMA"]
    launch_blockscaled(view, b, scale_a, scale_b, bias, out, config, 4)
    _assert_close(out, view, b, scale_a, scale_b, bias, FP32)


@pytest.mark.parametrize("backend", [None, "torch"])
def test_k_zero_gives_the_bias(backend):
    """No K block: scale_a (M, 0) and scale_b (0, ceil(N/128)), the result the bias alone."""
    a, b = torch.zeros(3, 0).to(E4M3), torch.zeros(0, 5).to(E4M3)
    bias = torch.arange(5.0)
    y = tritonblas.scaled_mm(a, b, torch.ones(3, 0), torch.ones(0, 1), bias=bias, out_dtype=FP32,
                             backend=backend)
    assert torch.equal(y, bias.expand(3, 5))


def test_fast_accumulation_stays_within_the_yardstick():
    a, b, scale_a, scale_b, bias = _inputs((9, 70, 300), E4M3, E4M3, False, True, "contiguous", FP32)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=FP32, use_fast_accum=True,
                             config=P32_K128)
    assert plan_scaled(a, b, scale_a, scale_b, bias, FP32, True, None, None, P32_K128).fast_acc
    _assert_close(y, a, b, scale_a, scale_b, bias, FP32)


def test_a_wrong_block_scale_is_seen():
    """The yardstick has teeth: the scales of K blocks 0 and 1 swapped read far off."""
    a, b, scale_a, scale_b, bias = _inputs((5, 33, 300), E4M3, E4M3, False, True, "contiguous", None)
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32, config=P16)
    with pytest.raises(AssertionError):
        _assert_close(y, a, b, scale_a[:, [1, 0, 2]], scale_b, None, FP32)


def test_where_the_shapes_coincide_the_modes_agree():
    """K <= 128 (one K block): scale_a (M, 1) and scale_b (1, 1) (N <= 128) read as row-wise scales of a
    and one value for b, which is the block product; scale_b (1, ceil(N/128)) with N > 128 reads as
    block-wise, equal to row-wise scales of b repeated over each 128 columns."""
    a, b, scale_a, scale_b, _ = _inputs((9, 100, 120), E4M3, E4M3, False, True, "contiguous", None)
    assert plan_scaled(a, b, scale_a, scale_b, None, FP32, False).problem.scales == "row_a"
    y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32, config=P16)
    _assert_close(y, a, b, scale_a, scale_b, None, FP32)

    a, b, scale_a, scale_b, _ = _inputs((9, 200, 120), E4M3, E4M3, False, True, "contiguous", None)
    assert scale_b.shape == (1, 2)
    assert plan_scaled(a, b, scale_a, scale_b, None, FP32, False).problem.scales == "block"
    block = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32, config=P16)
    row_b = scale_b[:, torch.arange(200) // 128].contiguous()
    assert plan_scaled(a, b, scale_a, row_b, None, FP32, False).problem.scales == "row"
    row = tritonblas.scaled_mm(a, b, scale_a, row_b, out_dtype=FP32, config=P16)
    torch.testing.assert_close(block, row, rtol=1e-5, atol=1e-5)


# --- bad input ----------------------------------------------------------------------------------------

def _bad(**changes):
    """A good block-scaled call (9x150x260 e4m3, bf16 bias and output) with `changes` (callables get the
    argument's value, or the whole argument dict where the key is "args")."""
    a, b, scale_a, scale_b, bias = _inputs((9, 150, 260), E4M3, E4M3, False, True, "contiguous", BF16)
    args = dict(a=a, b=b, scale_a=scale_a, scale_b=scale_b, bias=bias, out_dtype=BF16)
    for name, change in changes.items():
        args[name] = change(args[name]) if callable(change) else change
    return args


BAD_INPUTS = [  # (id, changes, error, message)
    ("scale_a_one_block_short", dict(scale_a=lambda t: t[:, :2]), ValueError,
     r"scale_a must have shape \(\), \(1, 1\) or \(9, 1\).*or \(9, 3\)"),
    ("scale_b_one_column_more", dict(scale_b=lambda t: torch.cat([t, t[:, :1]], 1)), ValueError,
     r"scale_b must have shape .*or \(3, 2\).*got \(3, 3\)"),
    ("scale_b_row_wise_with_block_a", dict(scale_b=torch.ones(1, 150)), ValueError,
     "scale_b must have shape"),
    ("scale_a_row_wise_with_block_b", dict(scale_a=torch.ones(9, 1)), ValueError,
     "scale_a must have shape"),
    ("scale_a_transposed", dict(scale_a=lambda t: t.t()), ValueError, "scale_a must have shape"),
    ("scale_b_fp16", dict(scale_b=lambda t: t.half()), TypeError, "scale_b must be float32"),
    ("scale_a_bf16", dict(scale_a=lambda t: t.bfloat16()), TypeError, "scale_a must be float32"),
    ("int8_operands", dict(a=lambda t: torch.ones(t.shape, dtype=torch.int8),
                           b=lambda t: torch.ones(t.shape, dtype=torch.int8)), TypeError,
     "block-wise .* take fp8 operands"),
    ("config_streamk", dict(config=GemmConfig(block_m=16, block_n=32, block_k=64, streamk=True, grid=4)),
     ValueError, "persistent kernel only"),
    ("config_aligned_copy", dict(config=GemmConfig(block_m=16, block_n=32, block_k=64, aligned_copy=True)),
     ValueError, "in place"),
    ("config_block_k_256", dict(config=GemmConfig(block_m=16, block_n=32, block_k=256)), ValueError,
     "block_k dividing 128"),
]


@pytest.mark.parametrize("changes, error_type, message", [c[1:] for c in BAD_INPUTS],
                         ids=[c[0] for c in BAD_INPUTS])
def test_bad_input_names_the_argument_and_leaves_out_alone(changes, error_type, message):
    """Also after the good call's plan is stored: the scales' shapes, strides and dtypes are in the
    signature, so a bad call never finds the good one's plan."""
    good = _bad()
    plan_scaled(good["a"], good["b"], good["scale_a"], good["scale_b"], good["bias"], BF16, False)
    out = torch.full((9, 150), 7.0, dtype=BF16)
    with pytest.raises(error_type, match=message):
        tritonblas.scaled_mm(**_bad(**changes), out=out)
    assert (out == 7.0).all()


# --- the dispatch key, feasibility and the vendor -----------------------------------------------------

def test_a_block_problem_has_its_own_key_and_no_row_wise_winner(paths):
    block = Problem(16, 6144, 4096, "e4m3", "nt", out_dtype="bf16", scales="block")
    row = Problem(16, 6144, 4096, "e4m3", "nt", out_dtype="bf16", scales="row")
    assert block != row and hash(block) != hash(row)
    assert ProblemKey.from_problem(block, H200).scales == "block"
    assert ProblemKey.from_problem(block, H200) != ProblemKey.from_problem(row, H200)
    dispatch.set_shipped_dir(None)  # the shipped file holds this problem row-wise
    picked_row = tritonblas.select(16, 6144, 4096, "e4m3", scales="row", out_dtype="bf16", layout="nt",
                                   device=H200)
    assert picked_row.source == "shipped"
    dispatch.set_shipped_dir(paths[1])  # (an empty folder: no shipped block winner either)
    picked = tritonblas.select(16, 6144, 4096, "e4m3", scales="block", out_dtype="bf16", layout="nt",
                               device=H200)
    # torch's block-wise op takes it (config.torch_blockwise_fits): the heuristic prefers it
    assert picked.source == "heuristic" and picked.backend == "torch"
    assert "block-wise op" in picked.detail
    # with a bias (or N not a whole number of blocks) torch's op does not: the kernel
    picked = tritonblas.select(16, 6144, 4096, "e4m3", scales="block", out_dtype="bf16", layout="nt",
                               bias="row", device=H200)
    assert picked.source == "heuristic" and picked.backend == "triton"
    assert config_supports(picked.config, block, H200) is None
    assert not picked.config.streamk and picked.config.tma and 128 % picked.config.block_k == 0
    picked = tritonblas.select(16, 6144, 4096, "e4m3", scales="block", out_dtype="bf16", layout="nt",
                               backend="triton", device=H200)
    assert picked.backend == "triton" and picked.config.tma


def test_a_torch_pick_is_no_neighbour_for_a_block_problem_torchs_op_does_not_take():
    """The shipped file gives 512x7168x2048 to torch's block-wise op; the same shape with a bias (which that
    op does not take: torch's side would be the dequantized fp32 product, 20x slower on the H200) gets a
    kernel, not that neighbour's torch pick. Without the bias the shipped winner answers."""
    dispatch.set_shipped_dir(None)
    plain = tritonblas.select(512, 7168, 2048, "e4m3", scales="block", out_dtype="bf16", layout="nt",
                              device=H200)
    assert plain.source == "shipped" and plain.backend == "torch"
    biased = tritonblas.select(512, 7168, 2048, "e4m3", scales="block", out_dtype="bf16", layout="nt",
                               bias="row", device=H200)
    assert biased.backend == "triton" and biased.source in ("neighbor", "heuristic"), biased


def test_int8_takes_no_block_scales():
    with pytest.raises(ValueError, match="block-wise scales take fp8"):
        Problem(64, 64, 256, "int8", "nt", out_dtype="bf16", scales="block")


def test_torch_backend_takes_every_block_problem():
    """backend="torch" runs torch's block-wise op where it takes the call, else the dequantized product:
    no block problem is refused (layout nn, ragged N and K here)."""
    problem = Problem(5, 33, 300, "e5m2", "nn", "row", out_dtype="fp32", scales="block")
    assert config_supports(GemmConfig.vendor(), problem, H200) is None
    assert tritonblas.select(5, 33, 300, "e5m2", scales="block", out_dtype="fp32", bias="row",
                             backend="torch", device=H200).backend == "torch"


# --- shapes file, explain, tuner ----------------------------------------------------------------------

def test_a_block_call_is_recorded_and_read_back(tmp_path):
    path = tmp_path / "shapes.yaml"
    a, b, scale_a, scale_b, bias = _inputs((5, 33, 300), E4M3, E5M2, False, True, "contiguous", BF16)
    record.start(path)
    try:
        tritonblas.scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=FP32, config=P16)
    finally:
        record.start(None)
    assert "scales: block" in path.read_text()
    assert load_problems(path) == [Problem(5, 33, 300, "e4m3", "nt", "row", "fp32", "e5m2", "block")]


def test_a_routed_scaled_mm_with_block_scales_runs_the_block_kernel(monkeypatch):
    """Under tritonblas.enable(), torch._scaled_mm with scales of the block shapes (torch's own
    BlockWise1x128 x BlockWise128x128 on sm_90) runs the block kernel."""
    import tritonblas.call.run

    ran = []
    real = tritonblas.call.run.run_block

    def spy(plan, *args) -> torch.Tensor:  # noqa: ANN001
        ran.append(plan)
        return real(plan, *args)

    monkeypatch.setattr(tritonblas.call.run, "run_block", spy)
    a, b, scale_a, scale_b, _ = _inputs((5, 33, 300), E4M3, E4M3, False, True, "outer", None)
    with tritonblas.enable():
        y = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32)
    assert [p.problem.scales for p in ran] == ["block"]
    _assert_close(y, a, b, scale_a, scale_b, None, FP32)


def test_shapes_file_spells_block_scales(tmp_path):
    path = tmp_path / "block.yaml"
    path.write_text("shapes:\n  - {m: [1, 64], n: 7168, k: 2048, dtypes: [e4m3], layout: nt, scales: block, "
                    "out_dtype: bf16}\n")
    problems = load_problems(path)
    assert [p.scales for p in problems] == ["block", "block"] and problems[0].m == 1
    path.write_text("shapes:\n  - {m: 64, n: 64, k: 256, dtypes: [int8], scales: block}\n")
    with pytest.raises(ShapesError, match="block-wise scales take fp8"):
        load_problems(path)


def _cli(tmp_path: Path, *args: str) -> object:
    env = {"COLUMNS": "300", "TRITONBLAS_DB": str(tmp_path / "default.sqlite")}  # never the user's DB
    return CliRunner().invoke(app, list(args), env=env)


def test_explain_spells_block_scales(tmp_path):
    result = _cli(tmp_path, "explain", "64", "4096", "7168", "--dtype", "e4m3", "--scales", "block",
                  "--out-dtype", "bf16", "--layout", "nt", "--arch", "sm_90")
    assert result.exit_code == 0, result.output
    assert "64x4096x7168 e4m3->bf16, layout nt, bias none, scales block" in result.output
    assert "torch.nn.functional.scaled_mm predicted faster" in result.output  # (where torch has the op)
    result = _cli(tmp_path, "explain", "64", "4096", "7168", "--dtype", "e4m3", "--scales", "block",
                  "--out-dtype", "bf16", "--layout", "nt", "--arch", "sm_90", "--backend", "triton")
    assert result.exit_code == 0, result.output
    assert " SK " not in result.output and "grid=sms tma" in result.output  # persistent TMA configs only
    assert "no Stream-K" in result.output


def test_the_benchmark_checks_block_problems_against_the_dequantized_product(monkeypatch):
    """What bench and a later tuner time: the candidate verified against the float64 product of the
    dequantized blocks (a call that gives every column block of b the first one's scales is refused),
    and torch's side (here the dequantized product) timed."""
    problem = Problem(5, 200, 300, "e4m3", "nt", "row", out_dtype="bf16", scales="block")
    real = tritonblas.scaled_mm

    def first_column_block(a, b, scale_a, scale_b, **kwargs):  # noqa: ANN001, ANN202
        return real(a, b, scale_a, scale_b[:, :1].expand_as(scale_b).contiguous(), **kwargs)

    bench = GpuBenchmark()
    monkeypatch.setattr(tritonblas, "scaled_mm", first_column_block, raising=False)
    assert bench(P16, problem, INTERPRETER_DEVICE).status == "wrong_result"
    monkeypatch.setattr(tritonblas, "scaled_mm", real)
    result = bench(P16, problem, INTERPRETER_DEVICE)
    assert result.status == "ok" and result.rel_error <= bench._inputs.tolerance
    ops = bench._inputs.scaled
    assert ops.block and ops.scale_a.shape == (5, 3) and ops.scale_b.shape == (3, 2)
    assert bench.baseline(problem, INTERPRETER_DEVICE) > 0


# --- kernel hashes ------------------------------------------------------------------------------------

def test_the_block_kernel_is_a_family_of_its_own():
    """The dense and grouped hashes are the shipped files' (the block kernel is in neither), and an edit
    to the block kernel changes its own hash only."""
    dense = json.loads((ROOT / "configs" / "sm_90.json").read_text())["header"]["kernel_hash"]
    grouped = json.loads((ROOT / "configs" / "grouped" / "sm_90.json").read_text())["kernel_hash"]
    assert identity.kernel_hash() == dense and identity.grouped_kernel_hash() == grouped
    kernels, _ = identity.sources()
    assert "blockscaled.py" not in kernels and "common.py" in kernels
    texts = {name: (identity._KERNEL_DIR / name).read_text() for name in identity.BLOCKSCALED_KERNELS}
    planning = {m: (identity._PACKAGE / m).read_text() for m in identity.BLOCKSCALED_PLANNING}
    same = identity.code_hash(texts, planning, identity.BLOCKSCALED_PLANNING)
    assert same == identity.blockscaled_kernel_hash() not in (dense, grouped)
    shipped = json.loads((ROOT / "configs" / "block" / "sm_90.json").read_text())["header"]["kernel_hash"]
    assert shipped == same, "configs/block/sm_90.json is stale: tune scripts/classes/fp8_block.yaml again"
    edited = texts["blockscaled.py"].replace("(sa * tl.load(sb_ptrs + kb * stride_sbk))[:, None]",
                                             "sa[:, None]")
    assert edited != texts["blockscaled.py"]
    texts["blockscaled.py"] = edited
    assert identity.code_hash(texts, planning, identity.BLOCKSCALED_PLANNING) != same


def test_a_torch_pick_that_torch_refuses_runs_the_kernel_from_then_on(monkeypatch, fresh_dispatch):
    """Dispatch picks torch's block-wise op where config.torch_blockwise_fits; where cuBLASLt refuses the
    call anyway (M = 1 on the H200), the call warns once, runs the kernel, and later calls never try
    torch's op again."""
    import tritonblas.call.run
    import tritonblas.call.scaled
    import tritonblas.selection.heuristic

    tried = []

    def refuse(*args, **kwargs) -> torch.Tensor:  # noqa: ANN002, ANN003
        tried.append(1)
        raise RuntimeError("CUDA error: CUBLAS_STATUS_NOT_SUPPORTED")

    for module in (tritonblas.call.scaled, tritonblas.selection.heuristic):
        monkeypatch.setattr(module, "torch_blockwise_fits", lambda problem, arch: True)
    monkeypatch.setattr(tritonblas.call.run, "torch_blockwise", refuse)
    a, b, scale_a, scale_b, _ = _inputs((1, 130, 256), E4M3, E4M3, False, True, "outer", None)
    assert plan_scaled(a, b, scale_a, scale_b, None, BF16, False).config.backend == "torch"
    with pytest.warns(RuntimeWarning, match="refused the call"):
        y = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32)
    _assert_close(y, a, b, scale_a, scale_b, None, FP32)
    again = tritonblas.scaled_mm(a, b, scale_a, scale_b, out_dtype=FP32)
    assert tried == [1] and torch.equal(again, y)
    assert plan_scaled(a, b, scale_a, scale_b, None, FP32, False).config.backend == "triton"


@pytest.mark.parametrize("m, takes", [(1, False), (3, False), (4, True), (16, True), (17, False),
                                     (4096, True)])
def test_torch_takes_block_problems_of_whole_blocks_and_m_a_multiple_of_4(m, takes):
    from tritonblas.config import torch_blockwise_fits

    assert torch_blockwise_fits(Problem(m, 1536, 7168, "e4m3", "nt", out_dtype="bf16", scales="block"),
                                "sm_90") is takes
    assert not torch_blockwise_fits(Problem(m, 576, 7168, "e4m3", "nt", out_dtype="bf16", scales="block"),
                                    "sm_90")  # N not whole blocks
    assert not torch_blockwise_fits(Problem(m, 1536, 4224, "e4m3", "nt", out_dtype="bf16", scales="block"),
                                    "sm_90")  # K not a whole number of 4 blocks
    assert not torch_blockwise_fits(Problem(m, 1536, 7168, "e4m3", "nt", "row", out_dtype="bf16",
                                            scales="block"), "sm_90")  # a bias
