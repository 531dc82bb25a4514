"""Stream-K GEMM with last-arriver fix-up: no program ever waits on another.

Tiles in full waves (num_tiles // NUM_PROGS * NUM_PROGS) run data-parallel. The K iterations of the
remaining tiles are split evenly over the NUM_PROGS programs: program p owns global iterations
[start(p), start(p+1)) with start(p) = p*q + min(p, r), q, r = divmod(total, NUM_PROGS).

A program that owns only part of a tile writes its fp32 partial to the workspace slot
2*p + (0 if the tile is the first one it touches else 1), then bumps the tile's counter. The program
whose bump completes the count (the last to arrive, whoever it is) sums the partials of all
contributors (its own read back too) in program order, so the result is bitwise the same run to run,
runs the shared epilogue and resets the counter to 0 for the next launch.
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop, make_operand_descs, tile_coords


@triton.jit
def _iter_start(p, q, r):
    return p * q + min(p, r)


@triton.jit
def _iter_owner(i, q, r):
    """The program that owns global Stream-K iteration i."""
    big = r * (q + 1)
    return tl.where(i < big, i // (q + 1), r + (i - big) // max(q, 1))


@triton.jit
def _slot(p, sk_tile, q, r, ITERS_PER_TILE):
    first_tile = _iter_start(p, q, r) // ITERS_PER_TILE
    return 2 * p + tl.where(sk_tile == first_tile, 0, 1)


@triton.jit
def streamk_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,
):
    a_desc, b_desc = a_ptr, b_ptr
    if USE_TMA:
        a_desc, b_desc = make_operand_descs(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                            stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, A_COL, B_COL)
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters_per_tile = tl.cdiv(K, BLOCK_K)
    dp_tiles = (num_tiles // NUM_PROGS) * NUM_PROGS

    for tile_id in range(pid, dp_tiles, NUM_PROGS):
        pid_m, pid_n = tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, 0, iters_per_tile, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K,
                     PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV)
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)

    total = (num_tiles - dp_tiles) * iters_per_tile
    q = total // NUM_PROGS
    r = total % NUM_PROGS
    it = _iter_start(pid, q, r)
    my_end = _iter_start(pid + 1, q, r)
    rm = tl.arange(0, BLOCK_M)
    rn = tl.arange(0, BLOCK_N)
    tile_offs = rm[:, None] * BLOCK_N + rn[None, :]
    while it < my_end:
        sk_tile = it // iters_per_tile
        tile_begin = sk_tile * iters_per_tile
        seg_end = min(my_end, tile_begin + iters_per_tile)
        pid_m, pid_n = tile_coords(dp_tiles + sk_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, it - tile_begin, seg_end - tile_begin,
                     BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION, USE_TMA, A_COL, B_COL,
                     A_DIV, B_DIV)
        first = _iter_owner(tile_begin, q, r)
        last = _iter_owner(tile_begin + iters_per_tile - 1, q, r)
        if first == last:
            epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                     alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)
        else:
            my_slot = _slot(pid, sk_tile, q, r, iters_per_tile)
            tl.store(ws_ptr + my_slot * BLOCK_M * BLOCK_N + tile_offs, acc, cache_modifier=".cg")
            # Every thread's partial must be written before the counter says so.
            tl.debug_barrier()
            arrived = tl.atomic_add(counter_ptr + sk_tile, 1, sem="acq_rel", scope="gpu")
            if arrived == last - first:
                # Every partial, this program's own included, is read back from the workspace: its
                # registers are then free, so the fix-up never holds two BLOCK_M x BLOCK_N fp32 tiles
                # (256 registers per thread for 128x256 on 8 warps, a sure spill).
                total_acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
                for p in range(first, last + 1):
                    slot = _slot(p, sk_tile, q, r, iters_per_tile)
                    total_acc += tl.load(ws_ptr + slot * BLOCK_M * BLOCK_N + tile_offs, cache_modifier=".cg")
                epilogue(total_acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm,
                         stride_biasn, alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)
                tl.atomic_xchg(counter_ptr + sk_tile, 0, sem="relaxed", scope="gpu")
        it = seg_end
