"""The MoE forward's grouped GEMM in Gluon (sm_90): tokens sorted by expert (A, rows cut by `offs`) times
each expert's weight stored (E, N, K) and used transposed, as nn.Linear does.

Why Gluon: the Triton grouped kernel (grouped.py) loads from the same warps that multiply and keeps its
MMA warps in step, so at fine-grained expert shapes (a few hundred rows an expert, short K loops) every
tile's epilogue and the next tile's first loads leave the tensor cores idle. Here a producer warp group
streams every tile's K blocks through an mbarrier ring to two consumer warp groups, which either share
each tile (64 rows each: "cooperative") or take the program's tiles in turn (PINGPONG: one stores while
the other multiplies). Gluon cannot call the `@triton.jit` building blocks, so the group table below is
grouped.group_table's and the epilogue common.epilogue's contract for this kernel's case (bias in fp32,
here the accumulator's start; one cast; rows of other groups never written); the GPU tests hold both
kernels to the same float64 reference.

Shape of the launch (grouped/gluon.gluon_plan): persistent programs over every group's output tiles,
numbered one group after another (the tail past the last group end last: zeros); A (rows, K) and the
weights (E * N, K) K-major through 2-D TMA descriptors over their storage; a consumer's rows wholly inside
their group leave by TMA store, rows that cross the group end by a masked store.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)

from .blockscaled_gluon import tile_offsets, tma_load, tma_store

# Registers a thread: a consumer holds a 64 x 256 (or 128 x 128) fp32 accumulator (128) and the group table
# (E_PAD / 128 values of four vectors), the producer the table: 2 x 128 x 224 + 128 x 64 = the register file.
CONSUMER_REGS = gl.constexpr(224)
PRODUCER_REGS = gl.constexpr(64)


@gluon.jit
def _add(x, y):
    return x + y


@gluon.jit
def group_table(offs_ptr, E, total, N, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                E_PAD: gl.constexpr, LAYOUT: gl.constexpr):
    """grouped.group_table for rows cut by offs: each group's first row, rows, and where its tiles start and
    end in the one numbering of all tiles (group E is the tail past the last end). Ends clamped into
    [start, total], so bad offsets never reach outside the operands."""
    gi = gl.arange(0, E_PAD, layout=LAYOUT)
    starts = gl.load(offs_ptr + gi - 1, mask=(gi > 0) & (gi <= E), other=0)
    starts = gl.where(gi > E, total, starts)
    ends = gl.load(offs_ptr + gi, mask=gi < E, other=total)
    starts = gl.minimum(gl.maximum(starts, 0), total)
    ends = gl.minimum(gl.maximum(ends, starts), total)
    sizes = ends - starts
    tiles = gl.cdiv(sizes, BLOCK_M) * gl.cdiv(N, BLOCK_N)
    ends = gl.associative_scan(tiles, 0, _add)
    return gi, starts, sizes, ends - tiles, ends


@gluon.jit
def pick(values, gi, g):
    """values[g] of a vector in registers."""
    return gl.sum(gl.where(gi == g, values, 0), axis=0)


@gluon.jit
def locate(tile, gi, starts, sizes, firsts, ends, N, K, E, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
           BLOCK_K: gl.constexpr, GROUP_M: gl.constexpr):
    """Tile `tile`'s group g, its first row, its rows left in the group from there, its first column and
    its K blocks (none for the tail)."""
    g = gl.sum((ends <= tile).to(gl.int32), axis=0)
    size = pick(sizes, gi, g)
    local = tile - pick(firsts, gi, g)
    off_m, off_n = tile_offsets(local, gl.cdiv(size, BLOCK_M), gl.cdiv(N, BLOCK_N), BLOCK_M, BLOCK_N,
                                GROUP_M)
    k_tiles = gl.where(g < E, gl.cdiv(K, BLOCK_K), 0)
    return g, pick(starts, gi, g) + off_m, size - off_m, off_n, k_tiles


@gluon.jit
def producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, offs_ptr, E, N, K, total, pid, nprog,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
             GROUP_M: gl.constexpr, E_PAD: gl.constexpr):
    """Stream every tile's K blocks of A and its expert's weights into the ring, in the consumers' order.
    A box running past the group's rows reads the next group's (their products are never stored); one
    past K or past the last row is zero-filled by the copy engine."""
    table: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gi, starts, sizes, firsts, ends = group_table(offs_ptr, E, total, N, BLOCK_M, BLOCK_N, E_PAD, table)
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for tile in range(pid, gl.max(ends, axis=0), nprog):
        g, row, rows, off_n, k_tiles = locate(tile, gi, starts, sizes, firsts, ends, N, K, E, BLOCK_M,
                                              BLOCK_N, BLOCK_K, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma_load(a_desc, [row, kk * BLOCK_K], ready.index(s), a_bufs.index(s))
            tma_load(b_desc, [g * N + off_n, kk * BLOCK_K], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def first_acc(g, off_n, E, N, bias_ptr, stride_bg, stride_bn, layout: gl.constexpr, HALF: gl.constexpr,
              BLOCK_N: gl.constexpr, HAS_BIAS: gl.constexpr):
    """The accumulator's start: bias[g] in fp32 broadcast over the rows (none for the tail), so the
    epilogue holds no second register tile (with one, ptxas spilled the 64 x 256 accumulator)."""
    acc = gl.zeros([HALF, BLOCK_N], gl.float32, layout)
    if HAS_BIAS:
        cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        bias = gl.load(bias_ptr + g.to(gl.int64) * stride_bg + cols * stride_bn, mask=(cols < N) & (g < E),
                       other=0.0)
        acc = acc + bias.to(gl.float32)[None, :]
    return acc


@gluon.jit
def epilogue(acc, c_desc, c_smem, c_ptr, row, rows, off_n, N, stride_cm, layout: gl.constexpr,
             HALF: gl.constexpr, BLOCK_N: gl.constexpr, C_SPLIT: gl.constexpr):
    """acc cast once; `rows` of this half tile's HALF belong to its group. A whole half leaves by TMA
    store (clipped at N by the copy engine; it drains under the next tile's K loop), in C_SPLIT column
    pieces through a buffer of one (C_SPLIT 2: half the shared memory, so the ring holds a stage more);
    a partial one by a masked store: the rows past its group are the next group's."""
    out = acc.to(c_desc.dtype)
    if rows >= HALF:
        tma.store_wait(pendings=0)  # this warpgroup's previous tile has left c_smem
        if C_SPLIT == 1:
            c_smem.store(out)
            fence_async_shared()
            tma_store(c_desc, [row, off_n], c_smem)
        else:
            left, right = out.reshape([HALF, 2, BLOCK_N // 2]).permute([0, 2, 1]).split()
            c_smem.store(left)
            fence_async_shared()
            tma_store(c_desc, [row, off_n], c_smem)
            tma.store_wait(pendings=0)
            c_smem.store(right)
            fence_async_shared()
            tma_store(c_desc, [row, off_n + BLOCK_N // 2], c_smem)
    elif rows > 0:
        r = gl.arange(0, HALF, layout=gl.SliceLayout(1, layout))
        cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        ptrs = c_ptr + (row + r).to(gl.int64)[:, None] * stride_cm + cols[None, :]
        gl.store(ptrs, out, mask=(r < rows)[:, None] & (cols < N)[None, :])


@gluon.jit
def issue_k_blocks(acc, a_bufs, b_bufs, ready, empty, it, k_tiles, ROW0: gl.constexpr, ROWS: gl.constexpr,
                   SLICED: gl.constexpr, STAGES: gl.constexpr):
    """A tile's K blocks from ring position `it` into acc (A's rows ROW0 .. + ROWS of each block where
    SLICED): one wgmma in flight while the one before it retires and frees its stage. Returns acc with
    the last wgmma still running (retire_last) and the next ring position."""
    for kk in range(k_tiles):
        s = it % STAGES
        mbarrier.wait(ready.index(s), (it // STAGES) & 1)
        a = a_bufs.index(s)
        if SLICED:
            a = a.slice(ROW0, ROWS)
        acc = warpgroup_mma(a, b_bufs.index(s).permute((1, 0)), acc, is_async=True)
        acc = warpgroup_mma_wait(num_outstanding=1, deps=(acc, ))
        if kk > 0:
            mbarrier.arrive(empty.index((it - 1) % STAGES))
        it += 1
    return acc, it


@gluon.jit
def retire_last(acc, empty, it, k_tiles, STAGES: gl.constexpr):
    """Wait for a tile's last wgmma and free its stage (ring position it - 1)."""
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    if k_tiles > 0:
        mbarrier.arrive(empty.index((it - 1) % STAGES))
    return acc


@gluon.jit
def consumer(c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty,
             E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
             WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
             STAGES: gl.constexpr, GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr, E_PAD: gl.constexpr,
             C_SPLIT: gl.constexpr):
    """Rows WG * 64 .. + 64 of every tile: one wgmma in flight while the one before it retires and frees
    its stage."""
    HALF: gl.constexpr = BLOCK_M // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BLOCK_N, 16])
    table: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gi, starts, sizes, firsts, ends = group_table(offs_ptr, E, total, N, BLOCK_M, BLOCK_N, E_PAD, table)
    c_smem = c_bufs.index(WG)
    it = 0
    for tile in range(pid, gl.max(ends, axis=0), nprog):
        g, row, rows, off_n, k_tiles = locate(tile, gi, starts, sizes, firsts, ends, N, K, E, BLOCK_M,
                                              BLOCK_N, BLOCK_K, GROUP_M)
        acc = first_acc(g, off_n, E, N, bias_ptr, stride_bg, stride_bn, layout, HALF, BLOCK_N, HAS_BIAS)
        acc, it = issue_k_blocks(acc, a_bufs, b_bufs, ready, empty, it, k_tiles, WG * HALF, HALF, True,
                                 STAGES)
        acc = retire_last(acc, empty, it, k_tiles, STAGES)
        epilogue(acc, c_desc, c_smem, c_ptr, row + WG * HALF, rows - WG * HALF, off_n, N, stride_cm, layout,
                 HALF, BLOCK_N, C_SPLIT)
    tma.store_wait(pendings=0)


@gluon.jit
def consumer_pingpong(c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty, order,
                      E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
                      WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr,
                      STAGES: gl.constexpr, GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr,
                      E_PAD: gl.constexpr):
    """Every other tile of the program whole (WG 0 the even ones): one consumer's epilogue runs while the
    other multiplies. The ring holds the tiles' K blocks in the program's order, so tile j's first block
    is ring position j * its K blocks (the tail's tiles, which have none, come last). The consumers take
    turns through the `order` barriers: one waiting on a ring position two rounds ahead would read its
    barrier's parity from the round before (an mbarrier wait sees only the phase's parity)."""
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BLOCK_N, 16])
    table: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])
    gi, starts, sizes, firsts, ends = group_table(offs_ptr, E, total, N, BLOCK_M, BLOCK_N, E_PAD, table)
    c_smem = c_bufs.index(WG)
    kt = gl.cdiv(K, BLOCK_K)
    j = WG
    for tile in range(pid + WG * nprog, gl.max(ends, axis=0), 2 * nprog):
        g, row, rows, off_n, k_tiles = locate(tile, gi, starts, sizes, firsts, ends, N, K, E, BLOCK_M,
                                              BLOCK_N, BLOCK_K, GROUP_M)
        acc = first_acc(g, off_n, E, N, bias_ptr, stride_bg, stride_bn, layout, BLOCK_M, BLOCK_N, HAS_BIAS)
        it = j * kt
        mbarrier.wait(order.index(WG), ((j // 2) & 1) ^ (1 - WG))  # the other's K loop is issued
        acc, it = issue_k_blocks(acc, a_bufs, b_bufs, ready, empty, it, k_tiles, 0, BLOCK_M, False, STAGES)
        mbarrier.arrive(order.index(1 - WG))
        acc = retire_last(acc, empty, it, k_tiles, STAGES)
        epilogue(acc, c_desc, c_smem, c_ptr, row, rows, off_n, N, stride_cm, layout, BLOCK_M, BLOCK_N, 1)
        j += 2
    tma.store_wait(pendings=0)


@gluon.jit
def grouped_gluon_kernel(
    c_ptr, bias_ptr, offs_ptr, a_desc, b_desc, c_desc,
    E, N, K, total,
    stride_cm, stride_bg, stride_bn,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr, E_PAD: gl.constexpr, PINGPONG: gl.constexpr,
    C_SPLIT: gl.constexpr,
):
    """C[offs[g-1]:offs[g]] = A[offs[g-1]:offs[g]] @ W[g]^T (+ bias[g]) for the E groups, the rows past the
    last group end zeros; c_ptr: c_desc's tensor (total, N). K > 0 (the launch runs K = 0 on the Triton
    kernel)."""
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    # a consumer's output box: its half of the tile, or with PINGPONG its whole tile
    C_ROWS: gl.constexpr = BLOCK_M if PINGPONG else BLOCK_M // 2
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2, C_ROWS, BLOCK_N // C_SPLIT], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1 if PINGPONG else 2)  # who releases a stage
    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(2):
        mbarrier.init(order.index(i), count=1)
    # Each partition's arguments written out: triton 3.6's Gluon builds no tuples of them.
    if PINGPONG:
        gl.warp_specialize([
            (consumer_pingpong, (c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty,
                                 order, E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
                                 0, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, HAS_BIAS, E_PAD)),
            (consumer_pingpong, (c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty,
                                 order, E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
                                 1, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, HAS_BIAS, E_PAD)),
            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, offs_ptr, E, N, K, total, pid, nprog,
                        BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, E_PAD)),
        ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
    else:
        gl.warp_specialize([
            (consumer, (c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty,
                        E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
                        0, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, HAS_BIAS, E_PAD, C_SPLIT)),
            (consumer, (c_desc, c_bufs, c_ptr, bias_ptr, offs_ptr, a_bufs, b_bufs, ready, empty,
                        E, N, K, total, stride_cm, stride_bg, stride_bn, pid, nprog,
                        1, BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, HAS_BIAS, E_PAD, C_SPLIT)),
            (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, offs_ptr, E, N, K, total, pid, nprog,
                        BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M, E_PAD)),
        ], [4, 4], [CONSUMER_REGS, PRODUCER_REGS])
