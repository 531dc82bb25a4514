"""Selection of quantized problems (scaled_mm, issue 36): the heuristic's rates, bytes and candidates for
1-byte operands, the shared-memory model, neighbours of the same operands and scales only, and dispatch's
layers (user DB, shipped file, neighbour, heuristic) with the vendor only where config_supports allows."""

from __future__ import annotations

import pytest
from helpers.db import TUNED
from helpers.dispatch import put, ship, winner

from tritonblas.arch import device_for_arch
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import DTYPE_BYTES, Problem
from tritonblas.selection import dispatch, heuristic, neighbors
from tritonblas.smem import smem_bytes

H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
VENDOR = GemmConfig.vendor()
KERNEL = GemmConfig(block_m=128, block_n=256, block_k=128, num_warps=8, num_stages=3, tma=True)
HALF = KERNEL.model_copy(update={"block_k": 64})  # the same bytes per stage in 16 bits


def quant(m: int, n: int, k: int, scales: str = "row", a: str = "e4m3", b: str | None = None,
          out: str = "bf16", layout: str = "nt", bias: str = "none") -> Problem:
    return Problem(m, n, k, a, layout, bias, out, b, scales)


def plain(p: Problem, dtype: str = "bf16") -> Problem:
    """The same sizes, layout and bias as a plain GEMM."""
    return Problem(p.m, p.n, p.k, dtype, p.layout, p.bias)


Q = quant(4096, 4096, 4096)
# Quantized problems of every operand kind and scale mode, aligned and ragged, compute- and memory-bound.
QUANT_PROBLEMS = [Q, quant(8192, 8192, 8192, "tensor"), quant(16, 6144, 4096),
                  quant(64, 8192, 8192, b="e5m2"), quant(1000, 1000, 1001, "row_a", a="int8", out="fp16"),
                  quant(2048, 6144, 4096, bias="row"), quant(4095, 4095, 4095, "row_b", a="e5m2", out="e5m2",
                                                             layout="nn")]


def _scale_bytes(p: Problem) -> int:
    return 4 * ((p.m if p.scales in ("row", "row_a") else 1) + (p.n if p.scales in ("row", "row_b") else 1))


@pytest.mark.parametrize("p", QUANT_PROBLEMS, ids=Problem.short)
def test_the_roofline_moves_one_byte_operands_at_the_8_bit_rate(p):
    bf16 = plain(p)
    flops_us = 2 * p.m * p.n * p.k / (heuristic._PEAK_TFLOPS["sm_90"][p.dtype] * 1e6)
    moved = p.m * p.k + p.k * p.n + DTYPE_BYTES[p.out] * p.m * p.n + _scale_bytes(p)
    bytes_us = moved / (heuristic._BANDWIDTH_TBS["sm_90"] * 1e6)
    assert heuristic.roofline_us(p, H200) == pytest.approx(max(flops_us, bytes_us))
    assert heuristic.roofline_us(p, H200) < heuristic.roofline_us(bf16, H200)


@pytest.mark.parametrize("p", QUANT_PROBLEMS, ids=Problem.short)
def test_candidates_of_one_byte_operands_take_block_k_64_to_256_and_are_feasible(p):
    found = heuristic.candidates(p, H200)
    assert found and {c.block_k for c in found} == {64, 128, 256}
    assert all(config_supports(c, p, H200) is None for c in found)
    ranked = heuristic.rank(p, H200)
    assert ranked[0].total_us >= heuristic.roofline_us(p, H200)


def test_a_k_step_of_one_byte_operands_counts_as_half_a_16_bit_one():
    # The same bytes per stage: a 128-deep fp8 step hides a load as a 64-deep bf16 one does.
    assert heuristic.tile_efficiency(KERNEL, "e4m3") == heuristic.tile_efficiency(HALF, "bf16")
    # On a compute-bound problem the same tile computes at the rate the kernels reach with 8-bit operands.
    fp8, bf16 = heuristic.estimate(KERNEL, Q, H200), heuristic.estimate(HALF, plain(Q), H200)
    speed = heuristic._kernel_rate(Q, "sm_90") / heuristic._kernel_rate(plain(Q), "sm_90")
    assert fp8.compute_us == pytest.approx(bf16.compute_us / speed)


@pytest.mark.parametrize("config", [KERNEL, KERNEL.model_copy(update={"tma": False, "num_stages": 4}),
                                    GemmConfig(block_m=64, block_n=128, block_k=256, num_stages=5)])
def test_shared_memory_counts_the_bytes_of_a_and_b_each(config):
    def operands(p: Problem) -> int:
        return smem_bytes(config, p) - 1024

    assert operands(Q) * 2 == operands(plain(Q))  # every tile at half the bytes (no output tile here)
    assert operands(quant(4096, 4096, 4096, b="e5m2")) == operands(Q)
    # 1-byte A with fp32 B is no problem anyone runs, but the model must price B at B's bytes.
    assert smem_bytes(config, plain(Q, "fp32")) - 1024 == 2 * operands(plain(Q))


# Winners for near problems (1.5x in M), with what the neighbour layer makes of them for Q.
NEIGHBOUR_CASES = [
    (quant(6144, 4096, 4096), True),
    (quant(6144, 4096, 4096, bias="row"), True),  # another bias kind still counts
    (quant(6144, 4096, 4096, "tensor"), False),  # another scale mode
    (quant(6144, 4096, 4096, b="e5m2"), False),  # another B dtype
    (quant(6144, 4096, 4096, out="fp16"), False),  # another output dtype
    (quant(6144, 4096, 4096, layout="nn"), False),  # a TMA config crosses layouts for 16-bit only
    (plain(quant(6144, 4096, 4096)), False),  # a plain GEMM
]


@pytest.mark.parametrize("tuned, used", NEIGHBOUR_CASES, ids=lambda x: getattr(x, "short", lambda: x)())
def test_a_neighbour_has_the_same_operand_dtypes_scales_and_output(tuned, used):
    found = neighbors.nearest(Q, [winner(tuned, H200, KERNEL, 0.1)], lambda c: True)
    assert (found is not None) == used
    # The same pair in 16-bit: a TMA config crosses layouts there.
    if tuned.layout != Q.layout and tuned.quantized:
        assert neighbors.nearest(plain(Q), [winner(plain(tuned), H200, KERNEL, 0.1)], lambda c: True)


def _vendor_rule(reason: str | None):
    """config_supports answering `reason` for the vendor of every quantized problem (None: torch takes
    them all; a text: torch refuses, as the op's predicate does e.g. for torch._scaled_mm on dims that are
    not multiples of 16); every other answer is the real predicate's."""
    def supports(config, problem, device):
        if config.backend == "torch" and problem.quantized:
            return reason
        return config_supports(config, problem, device)
    return supports


RAGGED = quant(4095, 4095, 4095, "tensor")


# N not a multiple of 16: torch._scaled_mm refuses it, so the kernels answer in every layer (on aligned
# compute-bound problems the heuristic sends untuned fp8 to torch: test_untuned_fp8_goes_to_torch...).
FLOW = quant(4096, 4100, 4096)


@pytest.mark.parametrize("layer", ["db", "shipped", "neighbor", "heuristic"])
def test_a_quantized_problem_flows_through_every_layer(paths, layer):
    url, shipped = paths
    # A neighbour's config must be one the model puts near its own pick (dispatch.NEIGHBOR_SLACK).
    tuned, config = (quant(6144, 4100, 4096), KERNEL) if layer == "neighbor" else (FLOW, TUNED)
    if layer in ("db", "neighbor"):
        put(url, winner(tuned, H200, config, 0.1), winner(plain(FLOW), H200, HALF, 0.1))
    elif layer == "shipped":
        ship(shipped, H200, winner(tuned, H200, config, 0.1), winner(plain(FLOW), H200, HALF, 0.1))
    s = dispatch.select(FLOW.m, FLOW.n, FLOW.k, "e4m3", scales="row", out_dtype="bf16", layout="nt",
                        device=H200)
    assert (s.source, s.problem) == (layer, FLOW)
    assert s.config == (heuristic.rank(FLOW, H200)[0].config if layer == "heuristic" else config) != HALF


@pytest.mark.parametrize("refused", [False, True])
def test_the_vendor_answers_only_where_config_supports_allows(paths, monkeypatch, refused):
    rule = _vendor_rule("K and N must be multiples of 16" if refused else None)
    for module in (dispatch, heuristic):  # the predicate as both of them call it
        monkeypatch.setattr(module, "config_supports", rule)
    # The model puts its best kernel far from the roofline on the ragged problem: its vendor rule answers
    # where torch takes the problem.
    preferred = heuristic.vendor_preferred(RAGGED, H200, heuristic.rank(RAGGED, H200)[0])
    assert (preferred is None) == refused
    s = dispatch.select(4095, 4095, 4095, "e4m3", scales="tensor", out_dtype="bf16", layout="nt", device=H200)
    assert s.backend == ("triton" if refused else "torch") and s.source == "heuristic"
    if not refused:
        assert "torch._scaled_mm predicted faster" in s.detail
    url, _ = paths
    put(url, winner(RAGGED, H200, VENDOR, 0.1))  # a stored vendor winner is skipped where torch refuses
    s = dispatch.select(4095, 4095, 4095, "e4m3", scales="tensor", out_dtype="bf16", layout="nt", device=H200)
    assert (s.source, s.backend) == ("heuristic", "triton") if refused else ("db", "torch")
    if refused:
        with pytest.raises(ValueError, match="backend='torch': torch._scaled_mm cannot run 4095x4095x4095 "
                                             "e4m3->bf16 nt tensor.*multiples of 16"):
            dispatch.select(4095, 4095, 4095, "e4m3", scales="tensor", out_dtype="bf16", layout="nt",
                            device=H200, backend="torch")


@pytest.mark.parametrize("kwargs, match", [
    (dict(dtype="e4m3"), "dtype e4m3 is quantized: give its scales"),
    (dict(dtype="bf16", scales="row"), "dtype must be one of e4m3, e5m2, int8"),
    (dict(dtype="e4m3", scales="blockwise"), "scales must be None or one of"),
    (dict(dtype="e4m3", scales="row", bias="column"), "bias none or row"),
    (dict(dtype="int8", scales="row", b_dtype="e4m3"), "int8 operands go with int8 only"),
    (dict(dtype="e4m3", scales="row", out_dtype="int8"), "out_dtype must be one of bf16, fp16, fp32, e4m3"),
    (dict(dtype="fp16", b_dtype="bf16"), "b_dtype is for quantized problems"),
])
def test_select_refuses_quantized_arguments_that_do_not_go_together(paths, kwargs, match):
    with pytest.raises(ValueError, match=match):
        dispatch.select(64, 64, 64, device=H200, **kwargs)


def test_select_takes_torch_fp8_dtypes_and_scaled_mms_default_output():
    import torch

    s = dispatch.select(64, 64, 64, torch.float8_e4m3fn, scales="row", b_dtype=torch.float8_e5m2, device=H200)
    assert s.problem == quant(64, 64, 64, b="e5m2", out="e4m3", layout="nn")
    assert dispatch.select(64, 64, 64, torch.int8, scales="row", device=H200).problem.out == "bf16"


FP8_ROW = Problem(256, 256, 256, "e4m3", "nt", "none", "bf16", scales="row")
INT8_ROW = Problem(256, 256, 256, "int8", "nt", "none", "bf16", scales="row")


@pytest.mark.parametrize("arch, fp8_runs", [("sm_80", False), ("sm_86", False), ("gfx942", False),
                                            ("sm_89", True), ("sm_90", True)])
def test_fp8_needs_an_arch_with_fp8_tensor_cores_and_int8_runs_everywhere(arch, fp8_runs):
    device = device_for_arch(arch)
    kernel = GemmConfig(block_m=64, block_n=64, block_k=64)
    for config in (kernel, GemmConfig.vendor()):
        reason = config_supports(config, FP8_ROW, device)
        assert (reason is None or "sm_89" not in reason) == fp8_runs, reason
    assert config_supports(kernel, INT8_ROW, device) is None


def test_scaled_mm_on_a_gpu_without_fp8_says_so(monkeypatch):
    import torch

    import tritonblas
    from tritonblas.call import scaled

    monkeypatch.setattr(scaled, "tensor_device_info", lambda t: device_for_arch("sm_80"))
    a = torch.ones(16, 32).to(torch.float8_e4m3fn)
    b = torch.ones(16, 32).to(torch.float8_e4m3fn).t()
    one = torch.ones(())
    with pytest.raises(RuntimeError, match="fp8 operands need an sm_89 or newer NVIDIA GPU.*sm_80"):
        tritonblas.scaled_mm(a, b, one, one, out_dtype=torch.bfloat16)


@pytest.mark.parametrize("shape, vendor", [
    ((8192, 8192, 8192), True), ((4096, 4096, 4096), True), ((2048, 6144, 4096), True),  # compute-bound
    ((16, 6144, 4096), False), ((1, 8192, 8192), False),  # decode: the weight's bytes bound it
])
def test_untuned_fp8_goes_to_torch_where_its_kernels_beat_ours(shape, vendor):
    """The fp8 class measured: torch._scaled_mm 1.3x-1.7x the kernels on compute-bound problems, the
    kernels 1.3x torch's at M = 16 (M = 64: 1.11x under triton 3.6.0, 0.81x under 3.9.0, so either may
    answer there). With no tuned winner the heuristic follows that."""
    m, n, k = shape
    p = Problem(m, n, k, "e4m3", "nt", "none", "bf16", scales="row")
    best = heuristic.rank(p, H200)[0]
    assert (heuristic.vendor_preferred(p, H200, best) is not None) == vendor


def test_a_fast_accumulation_call_of_a_gluon_pick_runs_torchs_fast_mode(monkeypatch):
    """The shipped Gluon winners were timed as accurate calls; a use_fast_accum=True call of such a problem
    (where torch._scaled_mm takes it) runs torch's fast mode, which the accurate Gluon kernel trails
    (kernel-levers F8); the accurate call keeps the Gluon pick, and so does an explicit backend."""
    import torch

    from tritonblas import caches
    from tritonblas.call import scaled

    monkeypatch.setattr(scaled, "tensor_device_info", lambda t: H200)
    # 4096^3 tensor-wise: a Gluon winner under triton 3.6.0 and 3.9.0 (configs/sm_90.json)
    a = torch.empty(4096, 4096).to(torch.float8_e4m3fn)
    b = torch.empty(4096, 4096).to(torch.float8_e4m3fn).t()
    sa, sb = torch.ones(()), torch.ones(())

    def planned(fast: bool, backend=None):
        return scaled.plan_scaled(a, b, sa, sb, None, torch.bfloat16, fast, None, backend, None).config

    try:
        assert planned(False).gluon
        assert planned(True).backend == "torch"
        assert planned(True, "triton").gluon
    finally:
        caches.invalidate()  # (plans of CPU tensors made for an H200: no other test may meet them)
