"""Persistent GEMM: at most NUM_PROGS programs, each looping over output tiles."""

import triton
import triton.language as tl

from .common import full_tiles, operand_sources


@triton.jit
def persistent_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host, a_scale_ptr, b_scale_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr, EVEN_K: tl.constexpr,
    PRECISION: tl.constexpr, FAST_ACC: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr,
    INT64: tl.constexpr, HOST_DESC: tl.constexpr,
):
    a_desc, b_desc = operand_sources(
        a_ptr=a_ptr, b_ptr=b_ptr, a_host=a_host, b_host=b_host,
        M=M, N=N, K=K,
        stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
        USE_TMA=USE_TMA, HOST_DESC=HOST_DESC, A_COL=A_COL, B_COL=B_COL,
    )
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    full_tiles(
        a_ptr=a_ptr, b_ptr=b_ptr, a_desc=a_desc, b_desc=b_desc, c_ptr=c_ptr, bias_ptr=bias_ptr,
        a_scale_ptr=a_scale_ptr, b_scale_ptr=b_scale_ptr,
        M=M, N=N, K=K,
        stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
        stride_cm=stride_cm, stride_cn=stride_cn, stride_biasm=stride_biasm, stride_biasn=stride_biasn,
        alpha=alpha, beta=beta, first_tile=tl.program_id(0), end_tile=num_tiles, tile_step=NUM_PROGS,
        iters=iters,
        BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K, GROUP_M=GROUP_M,
        HAS_BIAS=HAS_BIAS, A_SCALE=A_SCALE, B_SCALE=B_SCALE, EVEN_K=EVEN_K, PRECISION=PRECISION,
        FAST_ACC=FAST_ACC,
        USE_TMA=USE_TMA, A_COL=A_COL, B_COL=B_COL,
        A_DIV=A_DIV, B_DIV=B_DIV, FLATTEN=FLATTEN, INT64=INT64,
    )
