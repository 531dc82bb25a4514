"""Block-scaled fp8 scaled_mm in Gluon (sm_90): the promotion of each K block's product to fp32 runs on the
CUDA cores while the tensor cores compute the next block's.

Why Gluon: the Triton kernel (blockscaled.py) must wait for a K block's wgmma before its fp32 add, and
triton keeps both MMA warpgroups of a CTA in step (a CTA barrier around every TMA issue), so the tensor
cores idle during every promotion; this kernel issues block i+1's wgmma before adding block i's partial
(two partials in fixed registers, wait(1)), with TMA loads from a producer warp synchronised by mbarriers
only (kernel-levers, fp8 promotion rows). Gluon cannot call the `@triton.jit` building blocks
(common.py), so the epilogue below repeats common.epilogue's contract for this kernel's one case: fp32
acc + bias in fp32, an fp8 output saturated, one cast, stores clipped at the edges; the GPU tests hold
both kernels to the same float64 reference (tests/test_gpu_scaled.py).

Shape of the launch (launch/blockscaled.gluon_plan): persistent programs over 128 x 128 output tiles in
grouped order; A (M, K) and W (N, K) K-major through TMA boxes of 128 x 128 (ragged edges zero-filled),
one K block = one scale block of 128; a 1-warp producer and two 4-warp consumers, each owning 64 rows of
the tile; output by TMA store (the launch runs other operands and outputs on the Triton kernel).
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

# triton 3.9 renamed the TMA copies (its old names raise); 3.6 has only the old ones.
tma_load = getattr(tma, "async_load", None) or tma.async_copy_global_to_shared
tma_store = getattr(tma, "async_store", None) or tma.async_copy_shared_to_global
# Registers a thread: a consumer holds the accumulator and two partials (3 x 64 of 64 x 128 fp32 tiles);
# the producer only scalars. setmaxnreg moves them from the producer's warpgroup to the consumers'.
CONSUMER_REGS = gl.constexpr(232)
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 GROUP_M: gl.constexpr):
    """common.tile_coords' grouped order, as element offsets."""
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_rows = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_per_group) % group_rows
    pid_n = (tile % tiles_per_group) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n, k_tiles,
             BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
             GROUP_M: gl.constexpr):
    """Stream every tile's K blocks of A and W into the ring, in the consumers' order."""
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma_load(a_desc, [off_m, kk * BLOCK_K], ready.index(s), a_bufs.index(s))
            tma_load(b_desc, [off_n, kk * BLOCK_K], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def issue(a_bufs, b_bufs, ready, zero, sa_rows, sb_tile, kb, stride_sak, stride_sbk, it, WG: gl.constexpr,
          HALF: gl.constexpr, STAGES: gl.constexpr):
    """Start K block `kb` (ring position `it`) of this warpgroup's rows into a fresh partial. Returns its
    wgmma token and the block's scales, loaded now so that their latency passes under the wgmma:
    scale_a[rows, kb] in the loads' own layout (one register a thread) and scale_b[kb, column block]."""
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    part = warpgroup_mma(a_bufs.index(s).slice(WG * HALF, HALF), b_bufs.index(s).permute((1, 0)), zero,
                         use_acc=False, is_async=True)
    return part, gl.load(sa_rows + kb * stride_sak), gl.load(sb_tile + kb * stride_sbk)


@gluon.jit
def retire(acc, token, row_scale, col_scale, empty, it, LAYOUT: gl.constexpr, OUTSTANDING: gl.constexpr,
           STAGES: gl.constexpr):
    """Wait for ring position `it`'s partial (OUTSTANDING later ones may still run), free its stage, and
    add it to the fp32 accumulator times its scales. The row scales reach the accumulator's rows through
    shared memory here: held in the accumulator's slice layout across the wgmma, ptxas spilled and
    serialized every wgmma (sm_90, triton 3.6)."""
    part = warpgroup_mma_wait(num_outstanding=OUTSTANDING, deps=(token, ))
    mbarrier.arrive(empty.index(it % STAGES))
    factor = gl.convert_layout(row_scale, gl.SliceLayout(1, LAYOUT)) * col_scale
    # one FMA an element: a separate product would hold a fourth register tile (ptxas then spills)
    return gl.fma(part, factor[:, None], acc)


@gluon.jit
def saturated(out, limit: gl.constexpr):
    """common.saturated: clamped to +-limit, NaN kept (gluon has no clamp with NaN propagation)."""
    return gl.where(out == out, gl.minimum(gl.maximum(out, -limit), limit), out)


@gluon.jit
def epilogue(acc, c_desc, c_smem, bias_ptr, N, stride_bn, off_m, off_n, layout: gl.constexpr,
             BLOCK_N: gl.constexpr, HAS_BIAS: gl.constexpr):
    """out = acc + bias in fp32, saturated to an fp8 output's finite range, cast once, stored by TMA (the
    copy engine clips the box at the edges; the store drains under the next tile's K loop)."""
    out = acc
    if HAS_BIAS:
        cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
        out = out + gl.load(bias_ptr + cols * stride_bn, mask=cols < N, other=0.0).to(gl.float32)[None, :]
    if c_desc.dtype == gl.float8e4nv:
        out = saturated(out, 448.0)
    elif c_desc.dtype == gl.float8e5:
        out = saturated(out, 57344.0)
    tma.store_wait(pendings=0)  # this warpgroup's previous tile has left c_smem
    c_smem.store(out.to(c_desc.dtype))
    fence_async_shared()
    tma_store(c_desc, [off_m, off_n], c_smem)


@gluon.jit
def consumer(c_desc, c_bufs, bias_ptr, sa_ptr, sb_ptr, a_bufs, b_bufs, ready, empty,
             M, N, stride_bn, stride_sam, stride_sak, stride_sbk, stride_sbn,
             pid, nprog, num_pid_m, num_pid_n, k_tiles,
             WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             GROUP_M: gl.constexpr, SCALE_BLOCK: gl.constexpr, HAS_BIAS: gl.constexpr):
    """Rows WG * 64 .. + 64 of every tile: K blocks alternate between two partials in fixed registers (a
    loop-carried one would be moved while its wgmma runs, and ptxas then serializes every wgmma), each
    added while the next one's wgmma runs."""
    HALF: gl.constexpr = BLOCK_M // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BLOCK_N, 32])
    ROWS: gl.constexpr = gl.BlockedLayout([1], [32], [4], [0])  # the row scales' loads (see issue)
    zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout)
    c_smem = c_bufs.index(WG)
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        # Rows past M read row M - 1's scales (in bounds, no mask to keep live): the store clips them.
        rows = gl.minimum(off_m + WG * HALF + gl.arange(0, HALF, layout=ROWS), M - 1)
        sa_rows = sa_ptr + rows * stride_sam
        sb_tile = sb_ptr + (off_n // SCALE_BLOCK) * stride_sbn
        acc = gl.zeros([HALF, BLOCK_N], gl.float32, layout)
        prev, ra_prev, rb_prev = issue(a_bufs, b_bufs, ready, zero, sa_rows, sb_tile, 0, stride_sak,
                                       stride_sbk, it, WG, HALF, STAGES)
        for kb in range(1, k_tiles - 1, 2):
            odd, ra_odd, rb_odd = issue(a_bufs, b_bufs, ready, zero, sa_rows, sb_tile, kb, stride_sak,
                                        stride_sbk, it + 1, WG, HALF, STAGES)
            acc = retire(acc, prev, ra_prev, rb_prev, empty, it, layout, 1, STAGES)
            prev, ra_prev, rb_prev = issue(a_bufs, b_bufs, ready, zero, sa_rows, sb_tile, kb + 1, stride_sak,
                                           stride_sbk, it + 2, WG, HALF, STAGES)
            acc = retire(acc, odd, ra_odd, rb_odd, empty, it + 1, layout, 1, STAGES)
            it += 2
        if k_tiles % 2 == 0:
            odd, ra_odd, rb_odd = issue(a_bufs, b_bufs, ready, zero, sa_rows, sb_tile, k_tiles - 1,
                                        stride_sak, stride_sbk, it + 1, WG, HALF, STAGES)
            acc = retire(acc, prev, ra_prev, rb_prev, empty, it, layout, 1, STAGES)
            acc = retire(acc, odd, ra_odd, rb_odd, empty, it + 1, layout, 0, STAGES)
            it += 2
        else:
            acc = retire(acc, prev, ra_prev, rb_prev, empty, it, layout, 0, STAGES)
            it += 1
        epilogue(acc, c_desc, c_smem, bias_ptr, N, stride_bn, off_m + WG * HALF, off_n, layout, BLOCK_N,
                 HAS_BIAS)
    tma.store_wait(pendings=0)


@gluon.jit
def blockscaled_gluon_kernel(
    c_ptr, bias_ptr, sa_ptr, sb_ptr, a_desc, b_desc, c_desc,
    M, N, K,
    stride_bn, stride_sam, stride_sak, stride_sbk, stride_sbn,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, SCALE_BLOCK: gl.constexpr, HAS_BIAS: gl.constexpr,
):
    """C = sum over K blocks kb of (A[:, kb] @ W[:, kb]^T) * scale_a[:, kb] * scale_b[kb, n // 128] (+ bias),
    in fp32, cast once into C through c_desc (c_ptr: the same tensor, the launch's first argument). K > 0
    (the launch runs K = 0 on the Triton kernel)."""
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(K, BLOCK_K)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_N, BLOCK_K], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2, BLOCK_M // 2, BLOCK_N], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=2)  # both consumers release a stage
    gl.warp_specialize([
        (consumer, (c_desc, c_bufs, bias_ptr, sa_ptr, sb_ptr, a_bufs, b_bufs, ready, empty,
                    M, N, stride_bn, stride_sam, stride_sak, stride_sbk, stride_sbn,
                    pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    0, BLOCK_M, BLOCK_N, STAGES, GROUP_M, SCALE_BLOCK, HAS_BIAS)),
        (consumer, (c_desc, c_bufs, bias_ptr, sa_ptr, sb_ptr, a_bufs, b_bufs, ready, empty,
                    M, N, stride_bn, stride_sam, stride_sak, stride_sbk, stride_sbn,
                    pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    1, BLOCK_M, BLOCK_N, STAGES, GROUP_M, SCALE_BLOCK, HAS_BIAS)),
        (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
