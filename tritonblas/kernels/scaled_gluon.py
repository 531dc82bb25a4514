"""Tensor- and row-wise scaled fp8 scaled_mm in Gluon (sm_90): accurate accumulation (each K block of 128
promoted to fp32) at the fast path's cost, torch._scaled_mm's default.

Why: the Triton kernels' accurate mode (`max_num_imprecise_acc`) stops the tensor cores for every promotion
(kernel-levers F2-F3); the block-scaled Gluon kernel (blockscaled_gluon.py) adds each K block's partial
while the next block's wgmma runs (F6-F7). Tensor- and row-wise scales are constant along K, so a partial
needs no scale of its own: it is added as it is, and the scales (scale_a[m] * scale_b[n], one value or a
vector each) multiply the fp32 sum once, in the epilogue, as common.epilogue does for the Triton kernels.
The ring, the producer, the tile order and the epilogue's bias, saturation, cast and TMA store are the
block kernel's (imported: Gluon cannot call the `@triton.jit` building blocks of common.py).

Launch (launch/blockscaled.scaled_gluon_plan): the block kernel's, persistent 128 x 128 x 128 tiles, A (M,
K) and W (N, K) K-major by TMA, a 1-warp producer and two 4-warp consumers of 64 rows each.
"""

from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait

from .blockscaled_gluon import CONSUMER_REGS, PRODUCER_REGS, epilogue, producer, tile_offsets


@gluon.jit
def issue(a_bufs, b_bufs, ready, zero, it, WG: gl.constexpr, HALF: gl.constexpr, STAGES: gl.constexpr):
    """Start ring position `it`'s K block of this warpgroup's rows into a fresh partial: its wgmma token."""
    s = it % STAGES
    mbarrier.wait(ready.index(s), (it // STAGES) & 1)
    return warpgroup_mma(a_bufs.index(s).slice(WG * HALF, HALF), b_bufs.index(s).permute((1, 0)), zero,
                         use_acc=False, is_async=True)


@gluon.jit
def retire(acc, token, empty, it, OUTSTANDING: gl.constexpr, STAGES: gl.constexpr):
    """Wait for ring position `it`'s partial (OUTSTANDING later ones may still run), free its stage and add
    it to the fp32 accumulator: the promotion."""
    part = warpgroup_mma_wait(num_outstanding=OUTSTANDING, deps=(token, ))
    mbarrier.arrive(empty.index(it % STAGES))
    return acc + part


@gluon.jit
def scaled(acc, sa_ptr, sb_ptr, M, N, stride_sa, stride_sb, off_m, off_n, layout: gl.constexpr,
           HALF: gl.constexpr, BLOCK_N: gl.constexpr):
    """acc * scale_a[rows] * scale_b[cols] in fp32 (a stride of 0 reads one value for every row or column);
    rows and columns past the edges read nothing (the store clips them)."""
    rows = off_m + gl.arange(0, HALF, layout=gl.SliceLayout(1, layout))
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    sa = gl.load(sa_ptr + rows * stride_sa, mask=rows < M, other=0.0)
    sb = gl.load(sb_ptr + cols * stride_sb, mask=cols < N, other=0.0)
    return acc * sa[:, None] * sb[None, :]


@gluon.jit
def consumer(c_desc, c_bufs, bias_ptr, sa_ptr, sb_ptr, a_bufs, b_bufs, ready, empty,
             M, N, stride_bn, stride_sa, stride_sb,
             pid, nprog, num_pid_m, num_pid_n, k_tiles,
             WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
             GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr):
    """Rows WG * 64 .. + 64 of every tile: K blocks alternate between two partials in fixed registers (as
    blockscaled_gluon.consumer, whose loop this is without the per-block scales), each added while the
    next one's wgmma runs."""
    HALF: gl.constexpr = BLOCK_M // 2
    layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                     instr_shape=[16, BLOCK_N, 32])
    zero = gl.zeros([HALF, BLOCK_N], gl.float32, layout)
    c_smem = c_bufs.index(WG)
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        acc = gl.zeros([HALF, BLOCK_N], gl.float32, layout)
        prev = issue(a_bufs, b_bufs, ready, zero, it, WG, HALF, STAGES)
        for _ in range(1, k_tiles - 1, 2):
            odd = issue(a_bufs, b_bufs, ready, zero, it + 1, WG, HALF, STAGES)
            acc = retire(acc, prev, empty, it, 1, STAGES)
            prev = issue(a_bufs, b_bufs, ready, zero, it + 2, WG, HALF, STAGES)
            acc = retire(acc, odd, empty, it + 1, 1, STAGES)
            it += 2
        if k_tiles % 2 == 0:
            odd = issue(a_bufs, b_bufs, ready, zero, it + 1, WG, HALF, STAGES)
            acc = retire(acc, prev, empty, it, 1, STAGES)
            acc = retire(acc, odd, empty, it + 1, 0, STAGES)
            it += 2
        else:
            acc = retire(acc, prev, empty, it, 0, STAGES)
            it += 1
        acc = scaled(acc, sa_ptr, sb_ptr, M, N, stride_sa, stride_sb, off_m + WG * HALF, off_n, layout, HALF,
                     BLOCK_N)
        epilogue(acc, c_desc, c_smem, bias_ptr, N, stride_bn, off_m + WG * HALF, off_n, layout, BLOCK_N,
                 HAS_BIAS)
    tma.store_wait(pendings=0)


@gluon.jit
def scaled_gluon_kernel(
    c_ptr, bias_ptr, sa_ptr, sb_ptr, a_desc, b_desc, c_desc,
    M, N, K,
    stride_bn, stride_sa, stride_sb,
    BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
    GROUP_M: gl.constexpr, HAS_BIAS: gl.constexpr,
):
    """C = (A @ W^T) * scale_a[m] * scale_b[n] (+ bias) in fp32, every K block of 128 promoted to fp32, cast
    once into C through c_desc (c_ptr: the same tensor, the launch's first argument); stride_sa / stride_sb
    0 for a tensor-wise scale. K > 0 (the launch runs K = 0 on the Triton kernels)."""
    # The block kernel's set-up, repeated: moving it into a helper both kernels call renamed uniform
    # registers in the block kernel's machine code under triton 3.9 (2026-12-04), which would turn the
    # block and grouped tables stale.
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
                    M, N, stride_bn, stride_sa, stride_sb,
                    pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    0, BLOCK_M, BLOCK_N, STAGES, GROUP_M, HAS_BIAS)),
        (consumer, (c_desc, c_bufs, bias_ptr, sa_ptr, sb_ptr, a_bufs, b_bufs, ready, empty,
                    M, N, stride_bn, stride_sa, stride_sb,
                    pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    1, BLOCK_M, BLOCK_N, STAGES, GROUP_M, HAS_BIAS)),
        (producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n, k_tiles,
                    BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])
