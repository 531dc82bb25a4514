"""Persistent GEMM: at most NUM_PROGS programs, each looping over output tiles.

Launched by launch.gemm: `make_plan` chooses the grid, the integer arguments and the `SPEC` fields
(specs.GemmSpec), `launch_plan` passes the arguments in launch.arguments.gemm_args's order.
"""

import triton
import triton.language as tl

from .common import full_tiles, operand_sources


@triton.jit
def persistent_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host, a_scale_ptr, b_scale_ptr,
    SPEC: tl.constexpr,  # specs.GemmSpec: the tile, the K loop, how A and B are read, the epilogue
):
    ab = operand_sources(
        a_ptr=a_ptr, b_ptr=b_ptr, a_host=a_host, b_host=b_host,
        M=M, N=N, K=K,
        stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
        SPEC=SPEC,
    )
    out = (c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
           alpha, beta)
    num_tiles = tl.cdiv(M, SPEC.BLOCK_M) * tl.cdiv(N, SPEC.BLOCK_N)
    iters = tl.cdiv(K, SPEC.BLOCK_K)
    full_tiles(ab=ab, out=out, first_tile=tl.program_id(0), end_tile=num_tiles, tile_step=NUM_PROGS,
               iters=iters, SPEC=SPEC)
