"""Stream-K GEMM with a K-aligned split and last-arriver fix-up: no program ever waits on another.

Tiles in full waves (num_tiles // NUM_PROGS * NUM_PROGS) run data-parallel. Each of the T remaining
tiles has its K loop cut into S = min(NUM_PROGS // T, K iterations) even segments: program p < S*T runs
segment p // T of tile p % T, so at any moment the programs work on the same K range of different
tiles and share A and B through L2, as the data-parallel loop does. Splitting each program's range
evenly over the whole iteration space instead (classic Stream-K) staggers the programs along K: on the
H200 that ran the split part at ~0.45 of the data-parallel rate (512x1024x32768, 128x128x64 tiles:
101 us vs 66 us K-aligned; the retired streamk probe, docs/notes/streamk-split.md, 2026-11-30). The
programs left over (NUM_PROGS - S*T < T) have no segment.

A split tile's programs write their fp32 partials to workspace slot p. The fix-up is a two-level tree
when S >= 12: segment j belongs to group j // G (G = ceil(sqrt(S)), Q = cdiv(S, G) groups); each program
bumps its group's counter, the last of a group to arrive sums the group's partials in segment order into
a group slot (after the NUM_PROGS program slots) and bumps the tile's counter, and the last group to
finish sums the Q group partials in group order and runs the shared epilogue. So the longest chain of
reads is G + Q (12 for S = 33) instead of S: one program reading 33 partials of 64 KB was ~28 of 66 us
on 256x256x65536 (docs/notes/kernel-levers.md, row 18). With S < 12 there is one group (Q = 1) and the
tile's counter is bumped directly, as before. The sum order is fixed either way (segments in order
within a group, groups in order), so the result is bitwise the same run to run, whoever arrives last;
each last arriver resets the counter it completed to 0 for the next launch. Nobody ever waits.

Workspace (sized by the host, launch.streamk_workspace): NUM_PROGS + T * Q slots of BLOCK_M x BLOCK_N
fp32; counters: T tile counters, then T * Q group counters.
"""

import triton
import triton.language as tl

from ..arith import PIPELINED_FIXUP_STAGES
from .common import epilogue, k_loop, operand_sources, tile_coords, widened

_PIPELINED_FIXUP_STAGES = tl.constexpr(PIPELINED_FIXUP_STAGES)


@triton.jit
def fixup_groups(splits):
    """(G, Q): segments per group, ceil(sqrt(S)), and groups, cdiv(S, G); one group below S = 12
    (arith.TREE_MIN_SPLITS: where the tree's second level pays, measured there). arith.fixup_groups is
    the host's copy (the workspace it sizes holds the Q group slots)."""
    group = splits
    if splits >= 12:
        group = tl.full((), 1, tl.int32)
        while group * group < splits:
            group += 1
    return group, tl.cdiv(splits, group)


@triton.jit
def _sum_slots(ws_ptr, tile_offs, first, count, stride, INT64: tl.constexpr,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FIXUP_STAGES: tl.constexpr):
    """The fp32 sum, in slot order, of `count` workspace slots first, first + stride, ...

    FIXUP_STAGES (1, or arith.PIPELINED_FIXUP_STAGES) > 1 pipelines the reads (cp.async into shared
    memory the mainloop no longer uses, two partials in flight); the host chooses it
    (config.fixup_stages) from what the
    H200 measured: read one by one, each 64 KB partial paid a full round trip (0.85-1.5 us on one SM),
    and pipelined the fix-up took 256x256x65536 from 58.8 to 49.2 us, 128x128x8192 58.8 -> 38.7 and
    512x512x32768 59.9 -> 52.6 with 128x128 tiles on 4 warps, while 128x128 tiles on 8 warps ran
    1.6-2.6% slower (kernel-levers row 30)."""
    total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    if FIXUP_STAGES > 1:  # tl.range's num_stages must be a literal int to the compiler, not a parameter
        for j in tl.range(0, count, num_stages=_PIPELINED_FIXUP_STAGES):
            slot = widened(first + j * stride, INT64)
            total += tl.load(ws_ptr + slot * BLOCK_M * BLOCK_N + tile_offs, cache_modifier=".cg")
    else:
        for j in range(0, count):
            slot = widened(first + j * stride, INT64)
            total += tl.load(ws_ptr + slot * BLOCK_M * BLOCK_N + tile_offs, cache_modifier=".cg")
    return total


@triton.jit
def _publish(ws_ptr, tile_offs, slot, partial, counter, INT64: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """Store `partial` in `slot`, then bump `counter`: the value it had (arrivals before this one)."""
    tl.store(ws_ptr + widened(slot, INT64) * BLOCK_M * BLOCK_N + tile_offs, partial, cache_modifier=".cg")
    # Every thread's partial must be written before the counter says so.
    tl.debug_barrier()
    return tl.atomic_add(counter, 1, sem="acq_rel", scope="gpu")


@triton.jit
def _fix_up(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
            stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, sk_tiles, splits, seg, NUM_PROGS,
            BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr, INT64: tl.constexpr,
            FIXUP_STAGES: tl.constexpr):
    """Publish this segment's partial; the last arrivals sum them (see the module docstring) and the
    last of all writes the tile. Every partial, this program's own included, is read back: its
    registers are then free, so the fix-up never holds two BLOCK_M x BLOCK_N fp32 tiles (256 registers
    per thread for 128x256 on 8 warps, a sure spill)."""
    tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    group, groups = fixup_groups(splits)
    tile_counter = counter_ptr + sk_tile
    if groups == 1:
        if _publish(ws_ptr, tile_offs, pid, acc, tile_counter, INT64, BLOCK_M, BLOCK_N) == splits - 1:
            total = _sum_slots(ws_ptr, tile_offs, sk_tile, splits, sk_tiles, INT64, BLOCK_M, BLOCK_N,
                               FIXUP_STAGES)
            _write_tile(total, c_ptr, bias_ptr, tile_counter, M, N, stride_cm, stride_cn, stride_biasm,
                        stride_biasn, alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
    else:
        q = seg // group
        first = q * group
        group_counter = counter_ptr + sk_tiles + sk_tile * groups + q
        in_group = min(group, splits - first)
        if _publish(ws_ptr, tile_offs, pid, acc, group_counter, INT64, BLOCK_M, BLOCK_N) == in_group - 1:
            part = _sum_slots(ws_ptr, tile_offs, first * sk_tiles + sk_tile, in_group, sk_tiles, INT64,
                              BLOCK_M, BLOCK_N, FIXUP_STAGES)
            tl.atomic_xchg(group_counter, 0, sem="relaxed", scope="gpu")
            group_slots = NUM_PROGS + sk_tile * groups
            if _publish(ws_ptr, tile_offs, group_slots + q, part, tile_counter, INT64, BLOCK_M,
                        BLOCK_N) == groups - 1:
                total = _sum_slots(ws_ptr, tile_offs, group_slots, groups, 1, INT64, BLOCK_M, BLOCK_N,
                                   FIXUP_STAGES)
                _write_tile(total, c_ptr, bias_ptr, tile_counter, M, N, stride_cm, stride_cn,
                            stride_biasm, stride_biasn, alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N,
                            HAS_BIAS, INT64)


@triton.jit
def _write_tile(total, c_ptr, bias_ptr, tile_counter, M, N, stride_cm, stride_cn, stride_biasm,
                stride_biasn, alpha, beta, pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                HAS_BIAS: tl.constexpr, INT64: tl.constexpr):
    """The shared epilogue on the summed tile; then the tile's counter back to 0 for the next launch."""
    epilogue(total, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
             alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
    tl.atomic_xchg(tile_counter, 0, sem="relaxed", scope="gpu")


@triton.jit
def streamk_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,
    INT64: tl.constexpr, HOST_DESC: tl.constexpr, FIXUP_STAGES: tl.constexpr = 1,
):
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, a_host, b_host, M, N, K, stride_am, stride_ak,
                                     stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA, HOST_DESC,
                                     A_COL, B_COL)
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
                    stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, sk_tiles, splits, seg, NUM_PROGS,
                    BLOCK_M, BLOCK_N, HAS_BIAS, INT64, FIXUP_STAGES)
