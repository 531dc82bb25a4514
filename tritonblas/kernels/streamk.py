"""Stream-K GEMM with a K-aligned split and a fixed-order fix-up: no program ever waits on another.

Tiles in full waves (num_tiles // NUM_PROGS * NUM_PROGS) run data-parallel. Each of the T remaining
tiles has its K loop cut into S = min(NUM_PROGS // T, K iterations) even segments: program p < S*T runs
segment p // T of tile p % T, so at any moment the programs work on the same K range of different
tiles and share A and B through L2, as the data-parallel loop does. Splitting each program's range
evenly over the whole iteration space instead (classic Stream-K) staggers the programs along K: on the
H200 that ran the split part at ~0.45 of the data-parallel rate (512x1024x32768, 128x128x64 tiles:
101 us vs 66 us K-aligned; the retired streamk probe, docs/notes/streamk-split.md, 2026-11-30). The
programs left over (NUM_PROGS - S*T < T) have no segment.

A split tile's programs write their fp32 partials to workspace slot p, and the tile is summed in slot
order in FIXUP_CHUNKS row chunks (launch.streamk.fixup_plan), eight or four partials' chunks in flight
at a time (fixup.sum_chunk), or whole (one chunk) a partial at a time: each read is a round trip (0.85-1.5
us for a 64 KB partial on one SM, kernel-levers row 18), and a whole 128x128 tile is as many values as
a thread can keep in flight. Who sums a chunk is settled by one counter per split tile, arrivals in
its low 20 bits and a claim bit per chunk above; nobody waits:
- DEFERRED (the host's config.fixup_plan: data-parallel tiles, many splits, big tiles): every
  program runs its segment first and its data-parallel tiles after; chunk c is claimed by the program
  of segment c mod S after its data-parallel tiles, by when the partials are long in, so the fix-up on
  the critical path is a chunk's S reads, not the tile's on one program; the partials are stored with
  an L2 keep hint, so those reads come from L2. Whichever of chunk c's claim and the tile's last
  arrival comes later sums the chunk.
- Else the data-parallel tiles run first, and each program claims its chunks as it arrives, so the last
  to arrive sums every chunk; from S >= 12 as a two-level tree instead: segment j belongs to group
  j // G (G = ceil(sqrt(S)), Q = cdiv(S, G) groups), the last of a group to arrive sums the group's
  partials in segment order into a group slot (after the NUM_PROGS program slots) and arrives at the
  tile's counter, and the last group sums the Q group slots in group order. The longest chain of reads
  is then G + Q (12 for S = 33) instead of S (256x256x65536: 85.8 -> 58.7 us, row 24).
- REDUCE (GemmConfig.reduce_kernel): no counter and no fix-up here; kernels/reduce.py, launched next
  on the same stream, sums every split tile's partials in chunks over all the SMs.
The sum order is fixed either way, so the result is bitwise the same run to run, whoever sums; the
event that completes a counter resets it to 0 for the next launch.

Workspace (sized by the host, launch.streamk.streamk_workspace): NUM_PROGS + T * Q slots of BLOCK_M x BLOCK_N
fp32 (no group slots unless the tree runs); counters: T tile counters, then T * Q group counters.

Launched by launch.gemm as the persistent kernel is (`make_plan`: the grid, integers and specs.GemmSpec,
its fix-up fields from launch.streamk.fixup_plan; launch.arguments.gemm_args with the workspace).
"""

import triton
import triton.language as tl

from .common import full_tiles, k_loop, operand_sources, tile_coords
from .fixup import claim_chunks, finish_segment


@triton.jit
def _split_segment(ab, out, ws_ptr, counter_ptr, NUM_PROGS, pid, dp_tiles, sk_tiles, splits, iters_per_tile,
                   SPEC: tl.constexpr):
    """Program `pid`'s K segment of its leftover tile (segment pid // T of tile pid % T), then
    finish_segment with workspace slot `pid` (`ab`: common.k_loop's, `out`: common.epilogue's)."""
    a_ptr, _, _, _, M, N, _, _, _, _, _ = ab
    sk_tile = pid % sk_tiles
    seg = pid // sk_tiles
    pid_m, pid_n = tile_coords(tile_id=dp_tiles + sk_tile, M=M, N=N, SPEC=SPEC)
    acc = tl.zeros((SPEC.BLOCK_M, SPEC.BLOCK_N),
                   dtype=tl.int32 if a_ptr.dtype.element_ty == tl.int8 else tl.float32)
    acc = k_loop(
        acc=acc, ab=ab, pid_m=pid_m, pid_n=pid_n,
        iter_start=seg * iters_per_tile // splits, iter_end=(seg + 1) * iters_per_tile // splits,
        SPEC=SPEC,
    )
    finish_segment(
        acc=acc, out=out, ws_ptr=ws_ptr, counter_ptr=counter_ptr, pid_m=pid_m, pid_n=pid_n,
        slot=pid, sk_tile=sk_tile, sk_tiles=sk_tiles, splits=splits, seg=seg, NUM_PROGS=NUM_PROGS,
        SPEC=SPEC,
    )


@triton.jit
def streamk_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host, a_scale_ptr, b_scale_ptr,
    SPEC: tl.constexpr,  # specs.GemmSpec: the tile, K loop, reads of A and B, epilogue, fix-up
):
    ab = operand_sources(
        a_ptr=a_ptr, b_ptr=b_ptr, a_host=a_host, b_host=b_host,
        M=M, N=N, K=K,
        stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
        SPEC=SPEC,
    )
    out = (c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
           alpha, beta)
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, SPEC.BLOCK_M) * tl.cdiv(N, SPEC.BLOCK_N)
    iters_per_tile = tl.cdiv(K, SPEC.BLOCK_K)
    dp_tiles = (num_tiles // NUM_PROGS) * NUM_PROGS
    sk_tiles = num_tiles - dp_tiles
    splits = min(NUM_PROGS // max(sk_tiles, 1), iters_per_tile)
    in_split = pid < splits * sk_tiles

    # DEFERRED (the host's launch.streamk.fixup_deferred): the segment first (phase 0), so that the
    # fix-up's chunks are claimed after the data-parallel tiles; else the data-parallel tiles first. The
    # two phases are unrolled at compile time: the code is that of two ifs, with the segment's call
    # written once.
    segment_phase: tl.constexpr = 0 if SPEC.DEFERRED else 1
    for phase in tl.static_range(2):
        if phase == segment_phase:
            if in_split:
                _split_segment(
                    ab=ab, out=out, ws_ptr=ws_ptr, counter_ptr=counter_ptr, NUM_PROGS=NUM_PROGS, pid=pid,
                    dp_tiles=dp_tiles, sk_tiles=sk_tiles, splits=splits, iters_per_tile=iters_per_tile,
                    SPEC=SPEC,
                )
        else:
            # The data-parallel tiles: the persistent kernel's loop, with its lever.
            full_tiles(ab=ab, out=out, first_tile=pid, end_tile=dp_tiles, tile_step=NUM_PROGS,
                       iters=iters_per_tile, SPEC=SPEC)

    if SPEC.DEFERRED:
        if in_split:
            claim_chunks(
                out=out, ws_ptr=ws_ptr, counter_ptr=counter_ptr,
                pid=pid, dp_tiles=dp_tiles, sk_tiles=sk_tiles, splits=splits,
                SPEC=SPEC,
            )
