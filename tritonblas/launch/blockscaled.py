"""The launch of the block-scaled scaled_mm (kernels/blockscaled.py), and its vendor.

One place for what the kernels are given: a launch as launch.gemm's Plan (`block_plan` for the Triton
kernel, `gluon_plan` for the Gluon one a `gluon` config asks for: grid, integer arguments, constexprs;
hashed into the block family's kernel hash, identity.BLOCKSCALED_PLANNING), the
launch itself (`launch_blockscaled`: the one plan cache and launch.gemm.launch_plan, triton's C launcher
once compiled; no C++ record yet), and torch's side
(`vendor_blockscaled`): torch.nn.functional.scaled_mm with BlockWise1x128 / BlockWise128x128 scaling where
the running torch and device take the call (config.torch_blockwise_fits), else the dequantized operands'
fp32 product.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import replace

import torch

from ..config import GemmConfig
from ..problem import SCALE_BLOCK
from .arguments import block_args, gluon_block_args
from .gemm import Plan, cached_plan, launch_plan, needs_int64, tma_ready
from .gluon import launch_gluon
from .streamk import program_count

# fp8 outputs saturate to their finite range (as kernels/common.saturated and torch's saturated casts).
_FP8_MAX = {torch.float8_e4m3fn: 448.0, torch.float8_e5m2: 57344.0}


@functools.cache
def _kernel():
    from ..kernels.blockscaled import blockscaled_gemm_kernel

    return blockscaled_gemm_kernel


@functools.cache
def _gluon_kernel():
    from ..kernels.blockscaled_gluon import blockscaled_gluon_kernel

    return blockscaled_gluon_kernel


# The Gluon kernel's tile (kernels/blockscaled_gluon.py, config.gluon_refusal): 128 x 128 x 128, two 4-warp
# consumers and a 1-warp producer, at one CTA an SM. Both Gluon kernels (this one and grouped_gluon.py)
# launch three warp groups (12 warps), setmaxnreg moving registers between them: maxnreg is the register
# file over 12 warps.
GLUON_TILE = 128
GLUON_MAXNREG = 65536 // (12 * 32) // 8 * 8


def gluon_ready(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> bool:
    """Whether the Gluon kernel takes these tensors: on CUDA, K > 0, A row-major and b column-major (both
    K-major, as fp8 wgmma reads them) and `out` row-major, each TMA-ready (16-byte aligned base and
    leading stride). Elsewhere a Gluon config runs on the Triton kernel (gluon_twin)."""
    return (a.is_cuda and a.shape[1] > 0 and a.stride(1) == 1 and b.stride(0) == 1 and out.stride(1) == 1
            and tma_ready(a)[0] and tma_ready(b)[0] and tma_ready(out)[0])


@functools.cache  # (a call's hot path: the config built once per config, not per call)
def gluon_twin(config: GemmConfig) -> GemmConfig:
    """The Triton block kernel's config that runs a Gluon config's call where gluon_ready says no: the
    same tile on 8 warps (the heuristic's first block tile)."""
    return GemmConfig(block_m=GLUON_TILE, block_n=GLUON_TILE, block_k=GLUON_TILE, group_m=config.group_m,
                      num_warps=8, num_stages=4, tma=True)


# Gluon's names of the dtypes its descriptors carry (Gluon imported where used: the db commands load this
# module without it). The grouped Gluon launch takes its layouts from shared_layout too.
_GL_NAMES = {torch.float8_e4m3fn: "float8e4nv", torch.float8_e5m2: "float8e5", torch.bfloat16: "bfloat16",
             torch.float16: "float16", torch.float32: "float32"}


@functools.cache
def shared_layout(box: tuple[int, int], dtype: torch.dtype):
    from triton.experimental.gluon import language as gl

    return gl.NVMMASharedLayout.get_default_for(list(box), getattr(gl, _GL_NAMES[dtype]))


def gluon_geometry(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> tuple:
    """(shape, strides, box) of the Gluon kernels' descriptors of A (M, K), W = b.T (N, K) and out (M, N),
    as gluon_descriptors builds them: what a direct launch encodes from (launch.gluon)."""
    (m, k), n = a.shape, b.shape[1]
    return (([m, k], [a.stride(0), 1], [GLUON_TILE, GLUON_TILE]),
            ([n, k], [b.stride(1), 1], [GLUON_TILE, GLUON_TILE]),
            ([m, n], [out.stride(0), 1], [GLUON_TILE // 2, GLUON_TILE]))


def gluon_descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> tuple:
    """The Gluon kernels' TMA descriptors of gluon_geometry over A, W = b.T and out (a first launch's:
    triton compiles from their layouts); built each call (they hold the tensors' addresses)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return tuple(TensorDescriptor(t, shape, strides, box, shared_layout(tuple(box), t.dtype))
                 for t, (shape, strides, box) in zip((a, b.t(), out), gluon_geometry(a, b, out), strict=True))


def gluon_plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
               scale_a: torch.Tensor, scale_b: torch.Tensor, config: GemmConfig, sm_count: int) -> Plan:
    """One launch of the Gluon block kernel as launch.gemm's Plan (the integer arguments after c, bias (or
    c), scale_a, scale_b and the three descriptors); `bias` the (M, N) view of the (N,) bias, or None."""
    m, k = a.shape
    n = b.shape[1]
    constexprs = dict(BLOCK_M=GLUON_TILE, BLOCK_N=GLUON_TILE, BLOCK_K=GLUON_TILE, STAGES=config.num_stages,
                      GROUP_M=config.group_m, SCALE_BLOCK=SCALE_BLOCK, HAS_BIAS=bias is not None)
    progs = min(sm_count, -(-m // GLUON_TILE) * -(-n // GLUON_TILE))
    ints = (m, n, k, 0 if bias is None else bias.stride(1), *scale_a.stride(), *scale_b.stride())
    return Plan(_gluon_kernel(), progs, ints, constexprs, 4, config.num_stages, None, maxnreg=GLUON_MAXNREG,
                host_objects=True)


@functools.cache
def _scaled_gluon_kernel():
    from ..kernels.scaled_gluon import scaled_gluon_kernel

    return scaled_gluon_kernel


def scaled_gluon_plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                      scale_a: torch.Tensor, scale_b: torch.Tensor, config: GemmConfig,
                      sm_count: int) -> Plan:
    """One launch of the tensor- and row-wise Gluon kernel (kernels/scaled_gluon.py) as launch.gemm's Plan,
    gluon_plan's grid and ring: the integer arguments after c, bias (or c), scale_a, scale_b and the three
    descriptors; the scales contiguous fp32 vectors of one value (stride 0) or one a row of A / a column of
    B (stride 1)."""
    m, k = a.shape
    n = b.shape[1]
    constexprs = dict(BLOCK_M=GLUON_TILE, BLOCK_N=GLUON_TILE, BLOCK_K=GLUON_TILE, STAGES=config.num_stages,
                      GROUP_M=config.group_m, HAS_BIAS=bias is not None)
    progs = min(sm_count, -(-m // GLUON_TILE) * -(-n // GLUON_TILE))
    ints = (m, n, k, 0 if bias is None else bias.stride(1), int(scale_a.numel() > 1),
            int(scale_b.numel() > 1))
    return Plan(_scaled_gluon_kernel(), progs, ints, constexprs, 4, config.num_stages, None,
                maxnreg=GLUON_MAXNREG, host_objects=True)


def launch_scaled_gluon(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                        bias: torch.Tensor | None, out: torch.Tensor, config: GemmConfig,
                        sm_count: int) -> bool:
    """out = (a @ b) * scale_a * scale_b (+ bias (N,)) through the Gluon kernel of tensor- and row-wise
    scales (scale_vector's vectors), planned and launched as launch_blockscaled's Gluon launches; False,
    with nothing launched, where the kernel cannot take the tensors (gluon_ready: the caller runs
    gluon_twin on the Triton kernels)."""
    if not gluon_ready(a, b, out):
        return False
    bias2d = None if bias is None else torch.broadcast_to(bias, out.shape)
    _launch_fp8_gluon("scaled_gluon", scaled_gluon_plan, a, b, scale_a, scale_b, bias2d, out, config,
                      sm_count)
    return True


def _launch_fp8_gluon(kind: str, make: Callable[..., Plan], a: torch.Tensor, b: torch.Tensor,
                      scale_a: torch.Tensor, scale_b: torch.Tensor, bias2d: torch.Tensor | None,
                      out: torch.Tensor, config: GemmConfig, sm_count: int) -> None:
    """One launch of a Gluon fp8 kernel (`make`: gluon_plan or scaled_gluon_plan), its plan kept in
    launch.gemm's one plan cache under `kind` and everything it reads, with its descriptors' geometry
    (launch.gluon's direct launches encode from it); `bias2d` the (M, N) view of the bias, or None."""
    key = _plan_key(kind, config, sm_count, a, b, out, scale_a, scale_b, bias2d)
    plan = cached_plan(key, lambda: replace(make(a, b, out, bias2d, scale_a, scale_b, config, sm_count),
                                            descs=gluon_geometry(a, b, out)))
    leading = (out, out if bias2d is None else bias2d, scale_a, scale_b)
    launch_gluon(plan, gluon_block_args, leading, (a, b, out), lambda: gluon_descriptors(a, b, out))


def _divisor(t: torch.Tensor, wrapped_dim: int) -> int:
    """The kernel's A_DIV / B_DIV (see kernels/common.k_loop_ptr): the largest power of two, at most 16,
    dividing the operand's leading stride and, where its contiguous axis is the one the kernel wraps at
    the edge (M of A: dim 0, N of B: dim 1), that axis' size too."""
    col = t.stride(1) != 1 and t.stride(0) == 1
    values = [t.stride(1) if col else t.stride(0)]
    if (0 if col else 1) == wrapped_dim:
        values.append(t.shape[wrapped_dim])
    div = 16
    for v in values:
        while div > 1 and v % div:
            div //= 2
    return div


def block_plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
               scale_a: torch.Tensor, scale_b: torch.Tensor, config: GemmConfig, sm_count: int) -> Plan:
    """One launch of the block kernel as launch.gemm's Plan (kernel, grid, the integer arguments after
    the six tensors a, b, c, bias (or c), scale_a, scale_b, constexprs); `bias` the (M, N) view of the
    (N,) bias, or None. TMA where the config asks for it and both operands suit it (else pointers: a
    config tuned on aligned operands still runs a strided view)."""
    m, k = a.shape
    n = b.shape[1]
    use_tma = config.tma and tma_ready(a)[0] and tma_ready(b)[0]
    constexprs = dict(
        BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k, GROUP_M=config.group_m,
        HAS_BIAS=bias is not None, EVEN_K=k % config.block_k == 0, USE_TMA=use_tma,
        A_COL=a.stride(1) != 1 and a.stride(0) == 1, B_COL=b.stride(1) != 1 and b.stride(0) == 1,
        A_DIV=_divisor(a, 0), B_DIV=_divisor(b, 1),
        INT64=needs_int64((a, b, c, bias, scale_a, scale_b)), SCALE_BLOCK=SCALE_BLOCK,
    )
    progs = program_count(config, m, n, k, sm_count)
    sbm, sbn = bias.stride() if bias is not None else (0, 0)
    ints = (m, n, k, progs, *a.stride(), *b.stride(), *c.stride(), sbm, sbn, *scale_a.stride(),
            *scale_b.stride())
    return Plan(_kernel(), progs, ints, constexprs, config.num_warps, config.num_stages, None, tma=use_tma)


def _facts(t: torch.Tensor) -> tuple:
    return t.shape, t.stride(), t.dtype, t.data_ptr() % 16 == 0


def _plan_key(kind: str, config: GemmConfig, sm_count: int, *tensors: torch.Tensor | None) -> tuple:
    """A scaled launch's key in launch.gemm's plan cache: everything its plan reads (shapes, strides,
    dtypes, 16-byte alignment of each tensor, device, config)."""
    return (kind, config, sm_count, tensors[0].device, *(None if t is None else _facts(t) for t in tensors))


def launch_blockscaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                       bias: torch.Tensor | None, out: torch.Tensor, config: GemmConfig,
                       sm_count: int) -> None:
    """out = the block-scaled product (+ bias (N,)) through the kernel; scales as the caller has them
    (any strides: the kernel reads them through theirs). No use_fast_accum here: the kernel promotes to
    fp32 at every K step (kernels/blockscaled.py). The plan is kept in launch.gemm's one plan cache under
    everything it depends on (shapes, strides, dtypes, 16-byte alignment, device, config), and launched
    as the dense kernels' are (launch.gemm.launch_plan: triton's C launcher once compiled)."""
    m, n = out.shape
    if m == 0 or n == 0:
        return
    bias2d = None if bias is None else torch.broadcast_to(bias, (m, n))
    if config.gluon and gluon_ready(a, b, out):
        _launch_fp8_gluon("blockscaled", gluon_plan, a, b, scale_a, scale_b, bias2d, out, config, sm_count)
        return
    if config.gluon:
        config = gluon_twin(config)
    key = _plan_key("blockscaled", config, sm_count, a, b, out, scale_a, scale_b, bias2d)
    plan = cached_plan(key, lambda: block_plan(a, b, out, bias2d, scale_a, scale_b, config, sm_count))
    launch_plan(plan, block_args(a, b, out, out if bias2d is None else bias2d, scale_a, scale_b), ())


def dequantized_product(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                        scale_b: torch.Tensor) -> torch.Tensor:
    """The fp32 product of the operands dequantized block by block (each scale repeated over its block,
    the partial last block cut): what the kernel computes, up to the order of the fp32 sums."""
    sa, sb = expanded_scales(scale_a.float(), scale_b.float(), a.shape[1], b.shape[1])
    return (a.float() * sa) @ (b.float() * sb)


def expanded_scales(scale_a: torch.Tensor, scale_b: torch.Tensor, k: int,
                    n: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Block-wise scales as one factor per element of A (M, K) and of B (K, N): each repeated over its
    block, the partial last block cut."""
    sa = scale_a.repeat_interleave(SCALE_BLOCK, dim=1)[:, :k]
    sb = scale_b.repeat_interleave(SCALE_BLOCK, dim=0).repeat_interleave(SCALE_BLOCK, dim=1)[:k, :n]
    return sa, sb


def torch_blockwise(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                    scale_b: torch.Tensor) -> torch.Tensor:
    """torch.nn.functional.scaled_mm with BlockWise1x128 x BlockWise128x128 scaling and a bf16 result;
    raises where this torch build or cuBLASLt refuses the call (cuBLASLt 13 refused M = 1 on the H200)."""
    F = torch.nn.functional
    # cuBLASLt wants both scales outer-dim-major (stride 1 along M, along K blocks for B): a copy where the
    # caller's are not (one more kernel a call).
    return F.scaled_mm(a, b, _outer_major(scale_a), F.ScalingType.BlockWise1x128, _outer_major(scale_b),
                       F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)


def vendor_blockscaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                       bias: torch.Tensor | None, out: torch.Tensor | None, out_dtype: torch.dtype,
                       torch_takes: bool) -> torch.Tensor:
    """torch's side of a block-scaled call: torch_blockwise where `torch_takes`
    (config.torch_blockwise_fits), its own result returned where out is None (no copy); else, or where
    that torch refuses, the dequantized fp32 product, biased in fp32, saturated for an fp8 output, cast
    once into out (allocated where None)."""
    if torch_takes:
        try:
            y = torch_blockwise(a, b, scale_a, scale_b)
            return y if out is None else out.copy_(y)
        except (RuntimeError, ValueError, NotImplementedError):
            pass  # (this torch build refuses the call: the product below)
    if out is None:
        out = a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)
    store_fp32(dequantized_product(a, b, scale_a, scale_b), bias, out)
    return out


def _outer_major(scale: torch.Tensor) -> torch.Tensor:
    return scale if scale.stride(0) == 1 else scale.t().contiguous().t()


def store_fp32(y: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> None:
    """out = y + bias, both in fp32, saturated for an fp8 output, cast once: the kernels' epilogue on
    torch's side (the vendors' fp32 results)."""
    if bias is not None:
        y = y + bias.float()
    limit = _FP8_MAX.get(out.dtype)
    if limit is not None:
        y = y.clamp(-limit, limit)
    out.copy_(y)
