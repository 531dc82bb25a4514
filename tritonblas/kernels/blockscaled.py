"""scaled_mm with block-wise fp8 scales (DeepSeek-V3, transformers' FineGrainedFP8): A scaled per 1x128
block of a row, B per 128x128 block, one persistent launch over the output tiles.

The scales change every 128 elements of K, so they cannot wait for the epilogue as tensor- and row-wise
ones do: each K block of SCALE_BLOCK gets a fresh fp32 partial (common.k_loop_ptr over its BLOCK_K
steps; BLOCK_K divides SCALE_BLOCK, so a step never straddles two blocks), which is multiplied by
scale_a[rows, kb] and scale_b[kb, cols // SCALE_BLOCK] and added to the fp32 accumulator. The epilogue
is common.py's with no scale of its own (A_SCALE = B_SCALE = 0): the bias and the one cast. Persistent
scheduling only: a Stream-K segment would hand a partial sum to the fix-up that already mixes scales of
several K blocks (config.config_supports refuses it). Operands by pointers (no TMA). Checked in Triton's
interpreter and compiled for sm_90 on a CPU (tests/compile_sm90.py); not yet timed on a GPU (2026-12-03):
whether the per-block inner loop keeps triton's software pipelining is the first thing to measure there.
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop_ptr, tile_coords, widened


@triton.jit
def block_scales(sa_ptr, sb_ptr, kb, rm, rn, M, N, stride_sam, stride_sak, stride_sbk, stride_sbn,
                 SCALE_BLOCK: tl.constexpr):
    """The tile's scales of K block `kb`: one per row of A (its 1x128 block), one per column of the
    output (the 128x128 block of B the column falls in). Rows and columns past M, N read 0."""
    sa = tl.load(sa_ptr + rm * stride_sam + kb * stride_sak, mask=rm < M, other=0.0)
    sb = tl.load(sb_ptr + kb * stride_sbk + (rn // SCALE_BLOCK) * stride_sbn, mask=rn < N, other=0.0)
    return sa, sb


@triton.jit
def blockscaled_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, sa_ptr, sb_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, FAST_ACC: tl.constexpr,
    A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr,
    INT64: tl.constexpr, SCALE_BLOCK: tl.constexpr,
):
    """C = sum over K blocks kb of (A[:, kb] @ B[kb, :]) * scale_a[:, kb] * scale_b[kb, n // SCALE_BLOCK]
    (+ bias), in fp32, cast once."""
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    k_blocks = tl.cdiv(K, SCALE_BLOCK)
    steps: tl.constexpr = SCALE_BLOCK // BLOCK_K  # K steps of one scale block
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGS):
        pid_m, pid_n = tile_coords(
            tile_id=tile_id, M=M, N=N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, GROUP_M=GROUP_M,
        )
        rm = widened(idx=pid_m * BLOCK_M + tl.arange(0, BLOCK_M), INT64=INT64)
        rn = widened(idx=pid_n * BLOCK_N + tl.arange(0, BLOCK_N), INT64=INT64)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for kb in range(0, k_blocks):
            partial = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            partial = k_loop_ptr(
                acc=partial, a_ptr=a_ptr, b_ptr=b_ptr,
                M=M, N=N, K=K,
                stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
                pid_m=pid_m, pid_n=pid_n, iter_start=kb * steps, iter_end=min((kb + 1) * steps, iters),
                BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
                EVEN_K=EVEN_K, PRECISION="tf32", FAST_ACC=FAST_ACC, A_COL=A_COL, B_COL=B_COL,
                A_DIV=A_DIV, B_DIV=B_DIV, INT64=INT64,
            )
            sa, sb = block_scales(sa_ptr=sa_ptr, sb_ptr=sb_ptr, kb=kb, rm=rm, rn=rn, M=M, N=N,
                                  stride_sam=stride_sam, stride_sak=stride_sak, stride_sbk=stride_sbk,
                                  stride_sbn=stride_sbn, SCALE_BLOCK=SCALE_BLOCK)
            acc += partial * sa[:, None] * sb[None, :]
        epilogue(
            acc=acc, c_ptr=c_ptr, bias_ptr=bias_ptr, a_scale_ptr=None, b_scale_ptr=None,
            M=M, N=N,
            stride_cm=stride_cm, stride_cn=stride_cn, stride_biasm=stride_biasm, stride_biasn=stride_biasn,
            alpha=1.0, beta=1.0, pid_m=pid_m, pid_n=pid_n,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HAS_BIAS=HAS_BIAS, A_SCALE=0, B_SCALE=0, INT64=INT64,
        )
