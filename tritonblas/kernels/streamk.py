"""Stream-K GEMM with a K-aligned split and last-arriver fix-up: no program ever waits on another.

Tiles in full waves (num_tiles // NUM_PROGS * NUM_PROGS) run data-parallel. Each of the T remaining
tiles has its K loop cut into S = min(NUM_PROGS // T, K iterations) even segments: program p < S*T runs
segment p // T of tile p % T, so at any moment the programs work on the same K range of different
tiles and share A and B through L2, as the data-parallel loop does. Splitting each program's range
evenly over the whole iteration space instead (classic Stream-K) staggers the programs along K: on the
H200 that ran the split part at ~0.45 of the data-parallel rate (512x1024x32768, 128x128x64 tiles:
101 us vs 66 us K-aligned; the retired streamk probe, docs/notes/streamk-split.md, 2026-11-30). The
programs left over (NUM_PROGS - S*T < T) have no segment.

A split tile's programs write their fp32 partials to workspace slot p and bump the tile's counter. The
program whose bump completes the count (the last to arrive, whoever it is) sums the S partials in
segment order (its own read back too), so the result is bitwise the same run to run, runs the shared
epilogue and resets the counter to 0 for the next launch.
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop, operand_sources, tile_coords, widened


@triton.jit
def _fix_up(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
            stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, sk_tiles, splits,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, INT64: tl.constexpr):
    """Publish this segment's partial; the last of the tile's `splits` programs to arrive sums them all
    (program order: slot j*sk_tiles + sk_tile for segment j) and writes the tile."""
    tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    tl.store(ws_ptr + widened(pid, INT64) * BLOCK_M * BLOCK_N + tile_offs, acc, cache_modifier=".cg")
    # Every thread's partial must be written before the counter says so.
    tl.debug_barrier()
    arrived = tl.atomic_add(counter_ptr + sk_tile, 1, sem="acq_rel", scope="gpu")
    if arrived == splits - 1:
        # Every partial, this program's own included, is read back: its registers are then free, so
        # the fix-up never holds two BLOCK_M x BLOCK_N fp32 tiles (256 registers per thread for
        # 128x256 on 8 warps, a sure spill).
        total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for j in range(0, splits):
            slot = widened(j * sk_tiles + sk_tile, INT64)
            total += tl.load(ws_ptr + slot * BLOCK_M * BLOCK_N + tile_offs,
                             cache_modifier=".cg")
        epilogue(total, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
        tl.atomic_xchg(counter_ptr + sk_tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def streamk_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,
    INT64: tl.constexpr,
):
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                                     BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA, A_COL, B_COL)
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters_per_tile = tl.cdiv(K, BLOCK_K)
    dp_tiles = (num_tiles // NUM_PROGS) * NUM_PROGS

    # The data-parallel loop is the persistent kernel's, with its levers (see persistent.py).
    for tile_id in tl.range(pid, dp_tiles, NUM_PROGS, flatten=FLATTEN, warp_specialize=WARP_SPEC):
        pid_m, pid_n = tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, 0, iters_per_tile, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K,
                     PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64)
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)

    sk_tiles = num_tiles - dp_tiles
    splits = min(NUM_PROGS // max(sk_tiles, 1), iters_per_tile)
    if pid < splits * sk_tiles:
        sk_tile = pid % sk_tiles
        seg = pid // sk_tiles
        pid_m, pid_n = tile_coords(dp_tiles + sk_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, seg * iters_per_tile // splits,
                     (seg + 1) * iters_per_tile // splits, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION,
                     USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64)
        if splits == 1:
            epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                     alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
        else:
            _fix_up(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
                    stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, sk_tiles, splits,
                    BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
