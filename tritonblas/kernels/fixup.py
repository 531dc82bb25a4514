"""The Stream-K fix-up: a split tile's fp32 partials summed in slot order, in row chunks, and written
through the shared epilogue; who sums what is settled by counters and claim bits, nobody waits
(kernels/streamk.py's docstring tells the whole scheme). kernels/reduce.py reuses sum_chunk and
chunk_epilogue, so its sums are these, bit for bit.
"""

import triton
import triton.language as tl

from .common import epilogue, tile_coords, widened

# A tile counter: arrivals below bit 20 (S <= NUM_PROGS <= config.MAX_GRID < 2**20), chunk c's claim at
# bit 20 + c (<= 8 chunks: launch.streamk.fixup_plan), so it stays a positive int32.
_CLAIM_BIT = tl.constexpr(20)
_ARRIVALS = tl.constexpr(1 << 20)


@triton.jit
def fixup_groups(splits):
    """(G, Q): segments per group, ceil(sqrt(S)), and groups, cdiv(S, G); one group below S = 12
    (launch.streamk.TREE_MIN_SPLITS: where the tree's second level pays, measured there).
    launch.streamk.fixup_groups is the host's copy (the workspace it sizes holds the Q group slots)."""
    group = splits
    if splits >= 12:
        group = tl.full((), 1, tl.int32)
        while group * group < splits:
            group += 1
    return group, tl.cdiv(splits, group)


@triton.jit
def _chunk_offsets(chunk, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, FIXUP_CHUNKS: tl.constexpr):
    """Offsets, within a BLOCK_M x BLOCK_N slot, of row chunk `chunk` of FIXUP_CHUNKS."""
    rows = chunk * (BLOCK_M // FIXUP_CHUNKS) + tl.arange(0, BLOCK_M // FIXUP_CHUNKS)
    return rows[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]


@triton.jit
def _slot_rows(ws_ptr, offs, slot, valid, INT64: tl.constexpr, SLOT: tl.constexpr):
    """Rows `offs` of workspace slot `slot`; -0.0 where not `valid`: x + -0.0 is x for every x, bit for
    bit, so an unrolled read past the last slot adds nothing."""
    # A mask of offs' shape: triton 3.9's interpreter refuses a scalar one; compiled, the same code.
    mask = tl.full(offs.shape, 1, tl.int1) & valid
    slot_ptr = ws_ptr + widened(idx=slot, INT64=INT64) * SLOT
    return tl.load(slot_ptr + offs, mask=mask, other=-0.0, cache_modifier=".cg")


@triton.jit
def _four_slots(ws_ptr, offs, slot, stride, j, count, INT64: tl.constexpr, SLOT: tl.constexpr):
    """Rows `offs` of the slots j .. j + 3 of `count` (slot, slot + stride, ...), loads issued together."""
    p0 = _slot_rows(ws_ptr=ws_ptr, offs=offs, slot=slot, valid=j < count, INT64=INT64, SLOT=SLOT)
    p1 = _slot_rows(ws_ptr=ws_ptr, offs=offs, slot=slot + stride, valid=j + 1 < count, INT64=INT64, SLOT=SLOT)
    p2 = _slot_rows(ws_ptr=ws_ptr, offs=offs, slot=slot + 2 * stride, valid=j + 2 < count, INT64=INT64,
                    SLOT=SLOT)
    p3 = _slot_rows(ws_ptr=ws_ptr, offs=offs, slot=slot + 3 * stride, valid=j + 3 < count, INT64=INT64,
                    SLOT=SLOT)
    return p0, p1, p2, p3


@triton.jit
def sum_chunk(
    ws_ptr,
    first, count, stride, chunk,
    SPEC: tl.constexpr,
):
    """The fp32 sum, in slot order, of one row chunk of `count` slots first, first + stride, ...

    Each read is a round trip, so as many slots' loads as registers allow are issued before the first
    add: a chunk of a tile of SPEC.FIXUP_CHUNKS holds at most 128 / FIXUP_CHUNKS values a thread (the
    accumulator rule, config_supports), so 8 slots at 8 chunks and 4 at 2-4 stay within 128; a whole
    tile (one chunk) is read a slot at a time."""
    offs = _chunk_offsets(chunk=chunk, BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N,
                          FIXUP_CHUNKS=SPEC.FIXUP_CHUNKS)
    total = tl.zeros((SPEC.BLOCK_M // SPEC.FIXUP_CHUNKS, SPEC.BLOCK_N), dtype=tl.float32)
    slot_size: tl.constexpr = SPEC.BLOCK_M * SPEC.BLOCK_N
    width: tl.constexpr = 8 if SPEC.FIXUP_CHUNKS >= 8 else (4 if SPEC.FIXUP_CHUNKS > 1 else 1)
    for j in range(0, count, width):
        slot = first + j * stride
        if width == 1:
            total += _slot_rows(ws_ptr=ws_ptr, offs=offs, slot=slot, valid=True, INT64=SPEC.INT64,
                                SLOT=slot_size)
        else:
            p0, p1, p2, p3 = _four_slots(
                ws_ptr=ws_ptr, offs=offs,
                slot=slot, stride=stride, j=j, count=count,
                INT64=SPEC.INT64, SLOT=slot_size,
            )
            if width == 8:
                p4, p5, p6, p7 = _four_slots(
                    ws_ptr=ws_ptr, offs=offs,
                    slot=slot + 4 * stride, stride=stride, j=j + 4, count=count,
                    INT64=SPEC.INT64, SLOT=slot_size,
                )
            total += p0
            total += p1
            total += p2
            total += p3
            if width == 8:
                total += p4
                total += p5
                total += p6
                total += p7
    return total


@triton.jit
def chunk_epilogue(total, chunk, out, pid_m, pid_n, SPEC: tl.constexpr):
    """The shared epilogue on row chunk `chunk` of tile (pid_m, pid_n): the tile of SPEC.BLOCK_M //
    SPEC.FIXUP_CHUNKS rows at row-tile index pid_m * SPEC.FIXUP_CHUNKS + chunk."""
    epilogue(
        acc=total, out=out, pid_m=pid_m * SPEC.FIXUP_CHUNKS + chunk, pid_n=pid_n,
        BLOCK_M=SPEC.BLOCK_M // SPEC.FIXUP_CHUNKS, BLOCK_N=SPEC.BLOCK_N, SPEC=SPEC,
    )


@triton.jit
def _arrive(counter, delta):
    """Add `delta` to `counter` once every thread's stores before it are done; the value it had."""
    tl.debug_barrier()
    return tl.atomic_add(counter, delta, sem="acq_rel", scope="gpu")


@triton.jit
def _write_chunks(claims, out, ws_ptr, pid_m, pid_n, first, count, stride, SPEC: tl.constexpr):
    """Sum, over every chunk whose claim bit is set in `claims`, the `count` slots first, first + stride,
    ... (a split tile's partials, or the tree's group slots), and write it."""
    for c in range(0, SPEC.FIXUP_CHUNKS):
        if (claims >> (_CLAIM_BIT + c)) & 1:
            total = sum_chunk(
                ws_ptr=ws_ptr,
                first=first, count=count, stride=stride, chunk=c,
                SPEC=SPEC,
            )
            chunk_epilogue(
                total=total, chunk=c, out=out, pid_m=pid_m, pid_n=pid_n,
                SPEC=SPEC,
            )


@triton.jit
def _claims(seg, splits, FIXUP_CHUNKS: tl.constexpr):
    """The claim bits of segment `seg`'s program: chunks c < FIXUP_CHUNKS with c mod S == seg."""
    bits = tl.zeros((), tl.int32)
    for c in range(seg, FIXUP_CHUNKS, splits):
        bits += tl.full((), _ARRIVALS, tl.int32) << c
    return bits


@triton.jit
def _settle(counter, before, delta, splits, out, ws_ptr, pid_m, pid_n, sk_tile, sk_tiles, SPEC: tl.constexpr):
    """After adding `delta` to a tile counter that held `before`: the chunks this event completes (all
    S arrived and claimed) are this program's to sum; the event that completes them all resets it."""
    after = before + delta
    if after % _ARRIVALS == splits:
        done = delta  # a claim after the last arrival: its own chunks
        if before % _ARRIVALS < splits:  # the last arrival: every chunk claimed so far, its own included
            done = after - splits
        _write_chunks(
            claims=done, out=out, ws_ptr=ws_ptr, pid_m=pid_m, pid_n=pid_n,
            first=sk_tile, count=splits, stride=sk_tiles,
            SPEC=SPEC,
        )
    if after == splits + ((tl.full((), 1, tl.int32) << SPEC.FIXUP_CHUNKS) - 1) * _ARRIVALS:
        tl.atomic_xchg(counter, 0, sem="relaxed", scope="gpu")


@triton.jit
def _tree_fix_up(
    out, ws_ptr, counter_ptr, pid_m, pid_n, sk_tile, sk_tiles, splits, seg, NUM_PROGS,
    SPEC: tl.constexpr,
):
    """The two-level fix-up of a split tile whose partial this program has just stored (S >= 12, not
    deferred: see the module docstring)."""
    group, groups = fixup_groups(splits=splits)
    q = seg // group
    first = q * group
    in_group = min(group, splits - first)
    group_counter = counter_ptr + sk_tiles + sk_tile * groups + q
    if _arrive(counter=group_counter, delta=1) == in_group - 1:
        group_slot = NUM_PROGS + sk_tile * groups + q
        for c in range(0, SPEC.FIXUP_CHUNKS):
            part = sum_chunk(
                ws_ptr=ws_ptr,
                first=first * sk_tiles + sk_tile, count=in_group, stride=sk_tiles, chunk=c,
                SPEC=SPEC,
            )
            tl.store(ws_ptr + widened(idx=group_slot, INT64=SPEC.INT64) * SPEC.BLOCK_M * SPEC.BLOCK_N
                     + _chunk_offsets(chunk=c, BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N,
                                      FIXUP_CHUNKS=SPEC.FIXUP_CHUNKS),
                     part, cache_modifier=".cg")
        tl.atomic_xchg(group_counter, 0, sem="relaxed", scope="gpu")
        tile_counter = counter_ptr + sk_tile
        if _arrive(counter=tile_counter, delta=1) == groups - 1:
            every_chunk = ((tl.full((), 1, tl.int32) << SPEC.FIXUP_CHUNKS) - 1) << _CLAIM_BIT
            _write_chunks(
                claims=every_chunk, out=out, ws_ptr=ws_ptr, pid_m=pid_m, pid_n=pid_n,
                first=NUM_PROGS + sk_tile * groups, count=groups, stride=1,
                SPEC=SPEC,
            )
            tl.atomic_xchg(tile_counter, 0, sem="relaxed", scope="gpu")


@triton.jit
def finish_segment(
    acc, out, ws_ptr, counter_ptr, pid_m, pid_n, slot, sk_tile, sk_tiles, splits, seg, NUM_PROGS,
    SPEC: tl.constexpr,
):
    """What follows a segment's K loop: the tile written whole when it is not split, else `acc` stored
    as the partial of workspace slot `slot` and summed as the module docstring says (deferred: arrive
    now, claim later; SPEC.REDUCE: by kernels/reduce.py after this kernel)."""
    if splits == 1:
        epilogue(
            acc=acc, out=out, pid_m=pid_m, pid_n=pid_n,
            BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N, SPEC=SPEC,
        )
    else:
        # Every partial is read back from its slot, this program's own included: its registers are
        # then free, so the fix-up never holds two BLOCK_M x BLOCK_N fp32 tiles.
        # Partials are fp32 sums: an int8 launch's int32 accumulator converts first (exact below 2**24,
        # rounded to fp32's 24 bits above; the fix-up then adds fp32 values, not integers).
        partial = acc.to(tl.float32)
        tile_offs = tl.arange(0, SPEC.BLOCK_M)[:, None] * SPEC.BLOCK_N + tl.arange(0, SPEC.BLOCK_N)[None, :]
        slot_ptrs = ws_ptr + widened(idx=slot, INT64=SPEC.INT64) * SPEC.BLOCK_M * SPEC.BLOCK_N + tile_offs
        if SPEC.DEFERRED:
            # Read back after the data-parallel tiles, whose operands would push it out to HBM: an L2
            # hint to keep it (the claims' reads then wait on L2, not HBM).
            tl.store(slot_ptrs, partial, eviction_policy="evict_last")
        else:
            tl.store(slot_ptrs, partial, cache_modifier=".cg")
        if not SPEC.REDUCE:  # (REDUCE: no counter, no fix-up here; splitk_reduce_kernel sums them next)
            if (fixup_groups(splits=splits)[1] > 1) & (not SPEC.DEFERRED):
                _tree_fix_up(
                    out=out, ws_ptr=ws_ptr, counter_ptr=counter_ptr, pid_m=pid_m, pid_n=pid_n,
                    sk_tile=sk_tile, sk_tiles=sk_tiles, splits=splits, seg=seg, NUM_PROGS=NUM_PROGS,
                    SPEC=SPEC,
                )
            else:
                delta = 1
                if not SPEC.DEFERRED:
                    delta += _claims(seg=seg, splits=splits, FIXUP_CHUNKS=SPEC.FIXUP_CHUNKS)
                counter = counter_ptr + sk_tile
                _settle(
                    counter=counter, before=_arrive(counter=counter, delta=delta), delta=delta,
                    splits=splits, out=out, ws_ptr=ws_ptr, pid_m=pid_m, pid_n=pid_n,
                    sk_tile=sk_tile, sk_tiles=sk_tiles,
                    SPEC=SPEC,
                )


@triton.jit
def claim_chunks(out, ws_ptr, counter_ptr, pid, dp_tiles, sk_tiles, splits, SPEC: tl.constexpr):
    """Deferred: claim this program's chunks of its split tile, and sum them if every partial is in."""
    _, _, _, _, M, N, _, _, _, _, _, _ = out
    sk_tile = pid % sk_tiles
    claims = _claims(seg=pid // sk_tiles, splits=splits, FIXUP_CHUNKS=SPEC.FIXUP_CHUNKS)
    if (claims != 0) & (splits > 1):  # (the host defers split tiles only: launch.streamk.fixup_deferred)
        pid_m, pid_n = tile_coords(tile_id=dp_tiles + sk_tile, M=M, N=N, SPEC=SPEC)
        counter = counter_ptr + sk_tile
        # Acquire only: a claim publishes nothing (this program's partial went out with its arrival), so
        # it need not wait for its data-parallel tiles' stores to drain as a release would.
        before = tl.atomic_add(counter, claims, sem="acquire", scope="gpu")
        _settle(
            counter=counter, before=before, delta=claims, splits=splits,
            out=out, ws_ptr=ws_ptr, pid_m=pid_m, pid_n=pid_n, sk_tile=sk_tile, sk_tiles=sk_tiles,
            SPEC=SPEC,
        )
