"""Persistent GEMM: at most NUM_PROGS programs, each looping over output tiles."""

import triton
import triton.language as tl

from .common import epilogue, k_loop, operand_sources, tile_coords


@triton.jit
def persistent_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,
    INT64: tl.constexpr, HOST_DESC: tl.constexpr,
):
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, a_host, b_host, M, N, K, stride_am, stride_ak,
                                     stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA, HOST_DESC,
                                     A_COL, B_COL)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters = tl.cdiv(K, BLOCK_K)
    # flatten lets the pipeliner prefetch the next tile's first K blocks during this tile's epilogue.
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGS, flatten=FLATTEN,
                            warp_specialize=WARP_SPEC):
        pid_m, pid_n = tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, 0, iters, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION,
                     USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64)
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
