"""The benchmark's inputs and calls for quantized problems (scaled_mm, issue 36): fp8 or int8 operands
with float32 scales, the fp64 reference of the dequantized operands, the candidate call through
`tritonblas.scaled_mm(..., config=...)` and the vendor call (torch._scaled_mm; torch._int_mm with the
scaling in fp32 for int8).

Scales are drawn around K^-1/2, so that products of N(0, 1) operands stay near 1 and an fp8 output does
not saturate. The allowance is that of plain problems: twice the error of the one-cast result (the fp32
product of the dequantized operands plus the bias, clamped to an fp8 output's finite range and cast
once, as scaled_mm computes it) plus one unit roundoff of the output dtype, and for fp8 operands
FP8_ACCUMULATION (`allowance`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from ..config import torch_blockwise_fits
from ..device import tensor_device_info
from ..launch.blockscaled import expanded_scales, vendor_blockscaled
from ..problem import SCALE_VECTORS, Problem, block_scale_shapes
from ..validate import TORCH_DTYPE_OF

# Hopper's fp8 tensor cores add the products of one MMA with about 14 bits kept (DeepSeek-V3's report;
# promoting to fp32 every 128 of K, as scaled_mm and cuBLAS do, bounds the loss, it does not remove it):
# 129x257x96 e4m3 x e5m2 -> fp32 read 4e-5 to 8e-5 against fp64 on the H200, where the fp32 one-cast
# result reads 2e-7. An fp8 problem is allowed this much more; int8 accumulates exactly.
FP8_ACCUMULATION = 2.0**-12


@dataclass
class ScaledOperands:
    a: torch.Tensor
    b: torch.Tensor
    scale_a: torch.Tensor
    scale_b: torch.Tensor
    bias: torch.Tensor | None
    out_dtype: torch.dtype
    ref: torch.Tensor  # fp64
    one_cast: torch.Tensor  # what a correct scaled_mm returns, up to the accumulation order
    block: bool = False  # block-wise scales (1x128, 128x128)
    torch_blockwise: bool = False  # torch's block-wise op takes the problem (config.torch_blockwise_fits)


def random_operand(rows: int, cols: int, transposed: bool, dtype: torch.dtype, device: torch.device,
                   gen: torch.Generator) -> torch.Tensor:
    """A rows x cols operand, row-major or (transposed) column-major, of any problem's operand dtype
    (benchmark's plain problems take it too): N(0,1) values, so never zeros; int8 in [-8, 8]."""
    shape = (cols, rows) if transposed else (rows, cols)
    if dtype == torch.int8:
        t = torch.randint(-8, 9, shape, generator=gen, dtype=torch.int8, device=device)
    else:
        t = torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype)
    return t.t() if transposed else t


def scale_shapes(problem: Problem) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """scale_a's and scale_b's shapes for the problem's scale mode (vocabulary.Scales)."""
    if problem.scales == "block":
        return block_scale_shapes(problem.m, problem.n, problem.k)
    rows, cols = SCALE_VECTORS[problem.scales]
    return ((problem.m, 1) if rows else ()), ((1, problem.n) if cols else ())


def bias_dtype(out: torch.dtype) -> torch.dtype:
    """A bias (N,) in the output dtype where that is a 16- or 32-bit one, else bf16."""
    return out if out.itemsize > 1 else torch.bfloat16


def laid_out_scales(problem: Problem,
                    make: Callable[[tuple[int, ...]], torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """scale_a and scale_b, each `make(shape)`, in the layout the tuner times: block-wise ones
    outer-dim-major (stride 1 along M, and along K blocks for b's), as torch's block-wise op takes them
    and as a weight's (N/128, K/128) scales used transposed are, so neither side is timed with a layout
    copy the other is spared (and warm-up compiles the kernel those strides specialize)."""
    outer = problem.scales == "block"
    made = (make(s[::-1] if outer else s) for s in scale_shapes(problem))
    return tuple(t.t() if outer else t for t in made)


def random_scales(problem: Problem, device: torch.device,
                  gen: torch.Generator) -> tuple[torch.Tensor, ...]:
    """scale_a and scale_b, uniform around 1/sqrt(K), laid out as `laid_out_scales` says."""
    size = max(problem.k, 1) ** -0.5
    return laid_out_scales(problem, lambda shape: size * (0.5 + torch.rand(
        shape, generator=gen, dtype=torch.float32, device=device)))


def make(problem: Problem, device: torch.device, gen: torch.Generator) -> ScaledOperands:
    a_col, b_col = problem.layout[0] == "t", problem.layout[1] == "t"
    a = random_operand(problem.m, problem.k, a_col, TORCH_DTYPE_OF[problem.dtype], device, gen)
    b = random_operand(problem.k, problem.n, b_col, TORCH_DTYPE_OF[problem.b], device, gen)
    sa, sb = random_scales(problem, device, gen)
    out = TORCH_DTYPE_OF[problem.out]
    bias = None
    if problem.bias == "row":
        bias = torch.randn(problem.n, generator=gen, dtype=torch.float32, device=device).to(bias_dtype(out))
    ea, eb = elementwise_scales(problem, sa, sb)
    ref = (a.double() * ea.double()) @ (b.double() * eb.double())
    fp32 = (a.float() * ea) @ (b.float() * eb)
    if bias is not None:
        ref, fp32 = ref + bias.double(), fp32 + bias.float()
    if out.itemsize == 1:  # scaled_mm saturates an fp8 output to its finite range
        fp32 = fp32.clamp(torch.finfo(out).min, torch.finfo(out).max)
    arch = tensor_device_info(a).arch if a.is_cuda else ""
    return ScaledOperands(a, b, sa, sb, bias, out, ref, fp32.to(out), problem.scales == "block",
                          torch_blockwise_fits(problem, arch))


def elementwise_scales(problem: Problem, sa: torch.Tensor,
                       sb: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The scales as factors that broadcast over A (M, K) and B (K, N): tensor- and row-wise ones as they
    are, block-wise ones repeated over their blocks (the partial last block cut)."""
    if problem.scales != "block":
        return sa, sb
    return expanded_scales(sa, sb, problem.k, problem.n)


def op_call(ops: ScaledOperands, out: torch.Tensor, config, backend: str | None) -> Callable[[], object]:
    """The candidate: tritonblas.scaled_mm with `config` (None: through dispatch, `backend`), into `out`;
    block-wise problems into a tensor of the call's own, as users call them (see vendor_call)."""
    import tritonblas

    into = None if ops.block else out
    return lambda: tritonblas.scaled_mm(ops.a, ops.b, ops.scale_a, ops.scale_b, bias=ops.bias,
                                        out_dtype=ops.out_dtype, out=into, config=config, backend=backend)


def vendor_call(ops: ScaledOperands, out: torch.Tensor) -> Callable[[], object]:
    """torch's own call of the problem: torch._scaled_mm for fp8 (a scale of one value broadcast to a
    vector where the other operand's is row-wise: torch takes both or neither), torch._int_mm then the
    scaling and the bias in fp32 for int8; for block-wise scales launch.blockscaled.vendor_blockscaled
    (torch's block-wise op, else the dequantized fp32 product) returning its own tensor: torch's op has
    no out=, and a copy into `out` timed with it made the tuner pick kernels that ran at 0.55x-0.95x torch's
    op in scripts/block_bench.py (2026-12-04, H200). Raises where torch refuses the problem when called."""
    if ops.block:
        return lambda: vendor_blockscaled(ops.a, ops.b, ops.scale_a, ops.scale_b, ops.bias, None, out.dtype,
                                          ops.torch_blockwise)
    if ops.a.dtype == torch.int8:
        def int8() -> torch.Tensor:
            acc = torch._int_mm(ops.a, ops.b).float() * ops.scale_a * ops.scale_b
            return out.copy_(acc if ops.bias is None else acc + ops.bias.float())
        return int8
    sa, sb = ops.scale_a, ops.scale_b
    if sa.dim() != sb.dim():
        sa = sa.expand(ops.a.shape[0], 1).contiguous() if sa.dim() == 0 else sa
        sb = sb.expand(1, ops.b.shape[1]).contiguous() if sb.dim() == 0 else sb
    return lambda: torch._scaled_mm(ops.a, ops.b, sa, sb, bias=ops.bias, out_dtype=ops.out_dtype, out=out)


def bf16_call(ops: ScaledOperands) -> Callable[[], object]:
    """bf16 torch.mm of the problem's shapes and layouts: the comparison where torch refuses the quantized
    problem (torch._scaled_mm wants K and N multiples of 16), made once so that a call only multiplies."""
    a, b = (t.to(torch.bfloat16) for t in (ops.a, ops.b))  # (.to keeps each operand's layout)
    out = torch.empty(a.shape[0], b.shape[1], dtype=torch.bfloat16, device=a.device)
    return lambda: torch.mm(a, b, out=out)


def allowance(problem: Problem, ops: ScaledOperands, ref_norm: float, unit: float) -> float:
    """The error a correct candidate may have (relative, Frobenius, against ops.ref, whose norm is
    `ref_norm`): twice the one-cast result's, the output's unit roundoff `unit`, and for fp8 operands
    FP8_ACCUMULATION."""
    one_cast = (ops.one_cast.double() - ops.ref).norm().item() / max(ref_norm, 1e-300)
    fp8 = problem.dtype != "int8"
    return 2 * one_cast + unit + (FP8_ACCUMULATION if fp8 else 0.0)
