"""Persistent GEMM: at most NUM_PROGS programs, each looping over output tiles."""

import triton
import triton.language as tl

from .common import epilogue, k_loop, operand_sources, tile_coords


@triton.jit
def persistent_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
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
    # flatten lets the pipeliner prefetch the next tile's first K blocks during this tile's epilogue.
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGS, flatten=FLATTEN):
        pid_m, pid_n = tile_coords(
            tile_id=tile_id, M=M, N=N, BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, GROUP_M=GROUP_M,
        )
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(
            acc=acc, a_ptr=a_ptr, b_ptr=b_ptr, a_desc=a_desc, b_desc=b_desc,
            M=M, N=N, K=K,
            stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
            pid_m=pid_m, pid_n=pid_n, iter_start=0, iter_end=iters,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, BLOCK_K=BLOCK_K,
            EVEN_K=EVEN_K, PRECISION=PRECISION, USE_TMA=USE_TMA, A_COL=A_COL,
            B_COL=B_COL, A_DIV=A_DIV, B_DIV=B_DIV, INT64=INT64,
        )
        epilogue(
            acc=acc, c_ptr=c_ptr, bias_ptr=bias_ptr,
            M=M, N=N,
            stride_cm=stride_cm, stride_cn=stride_cn, stride_biasm=stride_biasm, stride_biasn=stride_biasn,
            alpha=alpha, beta=beta, pid_m=pid_m, pid_n=pid_n,
            BLOCK_M=BLOCK_M, BLOCK_N=BLOCK_N, HAS_BIAS=HAS_BIAS, INT64=INT64,
        )
