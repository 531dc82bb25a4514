"""The Stream-K fix-up as a kernel of its own (GemmConfig.reduce_kernel), planned with the Stream-K launch
(launch.gemm._reduce_plan: specs.ReduceSpec) and passed launch.arguments.reduce_args.

streamk_gemm_kernel with REDUCE stores every split tile's fp32 partials and nothing else (no counter,
no fix-up); this kernel, launched next on the same stream (so every partial is in), runs one program per
row chunk of each split tile: it sums the tile's S partials in slot order (the in-kernel fix-up's
order and code, so the same bits) and writes the chunk through the shared epilogue. Nobody waits or
counts, and the reads are spread over all the SMs instead of one program per tile: on the H200 the
last arrival of a tile with no data-parallel work to hide behind spent 6-10 us summing it
(256x2048x28672, 1024x1024x16384, 512x512x32768: tests/streamk_timeline.py), where cuBLAS runs split-K
and then a reduce kernel of 2.7-4.5 us (016dd08:scripts/vendor_kernels.py).
"""

import triton
import triton.language as tl

from .common import tile_coords
from .fixup import chunk_epilogue, sum_chunk


@triton.jit
def splitk_reduce_kernel(
    ws_ptr, c_ptr, bias_ptr,
    M, N,
    stride_cm, stride_cn, stride_biasm, stride_biasn,
    dp_tiles, sk_tiles, splits, alpha, beta, a_scale_ptr, b_scale_ptr,
    SPEC: tl.constexpr,  # specs.ReduceSpec: the Stream-K launch's tile, epilogue and row chunks
):
    """Program p: row chunk p % SPEC.FIXUP_CHUNKS of split tile p // SPEC.FIXUP_CHUNKS, whose segment j's
    partial is in workspace slot j * sk_tiles + tile (streamk_gemm_kernel's program of that segment)."""
    pid = tl.program_id(0)
    sk_tile = pid // SPEC.FIXUP_CHUNKS
    chunk = pid % SPEC.FIXUP_CHUNKS
    pid_m, pid_n = tile_coords(tile_id=dp_tiles + sk_tile, M=M, N=N, SPEC=SPEC)
    total = sum_chunk(
        ws_ptr=ws_ptr,
        first=sk_tile, count=splits, stride=sk_tiles, chunk=chunk,
        SPEC=SPEC,
    )
    out = (c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
           alpha, beta)
    chunk_epilogue(total=total, chunk=chunk, out=out, pid_m=pid_m, pid_n=pid_n, SPEC=SPEC)
