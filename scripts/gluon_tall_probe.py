"""Prototype, outside the library: tiles BM + BM2 rows tall (two accumulators stacked along M) in a
warp-specialized Gluon GEMM for sm_90 (triton 3.6), so that a tile can be 320 rows (256 + 64), cuBLAS's
one-wave 320x128 for 2176x2176x4096 (119 tiles), which triton's power-of-two tensors cannot hold in one.

Row 41 found that widening a tile by a second accumulator of 32 columns costs 19% a column, because the
n32 wgmma is inefficient. Stacking rows instead keeps every wgmma 128 columns wide: the 256-row
accumulator runs on two warpgroups (128 rows each), the 64-row one on the same two warpgroups split by
columns (64 each), so a k-step is 2 x (2 x m64n128) + 2 x m64n64 wgmmas. The output is stored from
registers (no shared memory for it), which leaves room for 4 stages of 56 KiB. Kernel-levers row 45.

    python scripts/gluon_tall_probe.py --compile-only                         # no GPU needed
    python scripts/gluon_tall_probe.py --shapes 2176x2176x4096 [--json rows.json]   # on an H200
"""

from __future__ import annotations

import sys

# scripts/ is this script's directory: the probes' shared helpers (tile order, register store, compile
# check, timing) and the one-consumer probe, timed beside.
import gluon_common
import gluon_probe
import torch
import triton
from gluon_common import mma_step, store_direct, tile_offsets
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# (name, BM, BM2, BN, BK, stages); 8 warps (two consumer warpgroups)
CONFIGS = [("tall (256+64)x128x64 s4", 256, 64, 128, 64, 4), ("tall (256+64)x128x64 s3", 256, 64, 128, 64, 3),
           ("tall 256x128x64 s4 (no second accumulator)", 256, 0, 128, 64, 4)]
SHAPES = [(2176, 2176, 4096), (4096, 4096, 4096), (1792, 1792, 8192)]
PRODUCER_REGS = gl.constexpr(24)
NUM_WARPS = 8


@gluon.jit
def _producer(a_desc, a2_desc, b_desc, a_bufs, a2_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m,
              num_pid_n, k_tiles, BM: gl.constexpr, BM2: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
              STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BM + BM2, BN, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            if BM2 > 0:
                mbarrier.expect(ready.index(s), nbytes + a2_desc.block_type.nbytes)
                # rows past M (the last row of tiles) come back as zeros
                tma.async_copy_global_to_shared(a2_desc, [off_m + BM, kk * BK], ready.index(s),
                                                a2_bufs.index(s))
            else:
                mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kk * BK], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [kk * BK, off_n], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(c_ptr, stride_cm, M, N, a_bufs, a2_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n,
              k_tiles, BM: gl.constexpr, BM2: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr):
    W: gl.constexpr = gl.num_warps()
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[W, 1],
                                                         instr_shape=[16, BN, 16])
    # 64 rows take one warpgroup's height: the other warpgroup takes half the columns instead.
    acc2_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, W // 4],
                                                          instr_shape=[16, BN // (W // 4), 16])
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BM + BM2, BN, GROUP_M)
        acc = gl.zeros([BM, BN], gl.float32, acc_layout)
        if BM2 > 0:
            acc2 = gl.zeros([BM2, BN], gl.float32, acc2_layout)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            if BM2 > 0:
                # both wgmmas in flight before the one wait (B is read by both: listed once in deps)
                acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
                acc2 = warpgroup_mma(a2_bufs.index(s), b_bufs.index(s), acc2, is_async=True)
                acc, acc2, _, _, _ = warpgroup_mma_wait(
                    num_outstanding=2, deps=(acc, acc2, a_bufs.index(s), a2_bufs.index(s), b_bufs.index(s)))
            else:
                acc = mma_step(a_bufs.index(s), b_bufs.index(s), acc, 1)
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            it += 1
        if BM2 > 0:
            acc, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc2))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        store_direct(acc, c_ptr, stride_cm, M, N, off_m, off_n, BM, BN, acc_layout)
        if BM2 > 0:
            store_direct(acc2, c_ptr, stride_cm, M, N, off_m + BM, off_n, BM2, BN, acc2_layout)


@gluon.jit
def tall_gemm_kernel(a_desc, a2_desc, b_desc, c_ptr, stride_cm, M, N, BM: gl.constexpr, BM2: gl.constexpr,
                     BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    num_pid_m = gl.cdiv(M, BM + BM2)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(a_desc.shape[1], BK)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    if BM2 > 0:
        a2_bufs = gl.allocate_shared_memory(a2_desc.dtype, [STAGES, BM2, BK], a2_desc.layout)
    else:
        a2_bufs = a_bufs
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    gl.warp_specialize([
        (_consumer, (c_ptr, stride_cm, M, N, a_bufs, a2_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m,
                     num_pid_n, k_tiles, BM, BM2, BN, STAGES, GROUP_M)),
        (_producer, (a_desc, a2_desc, b_desc, a_bufs, a2_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m,
                     num_pid_n, k_tiles, BM, BM2, BN, BK, STAGES, GROUP_M)),
    ], [1], [PRODUCER_REGS])


def _boxes(bm: int, bm2: int, bn: int, bk: int) -> list:
    return [[bm, bk], [bm2 or bm, bk], [bk, bn]]


def prepare(a: torch.Tensor, b: torch.Tensor, bm: int, bm2: int, bn: int, bk: int, stages: int):
    """(launch, c) on descriptors built once."""
    M, N = a.shape[0], b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    boxes = _boxes(bm, bm2, bn, bk)
    descs = [TensorDescriptor.from_tensor(t, box, layout) for t, box, layout in
             zip((a, a, b), boxes, gluon_common.shared_layouts(gl.bfloat16, boxes), strict=True)]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(sms, triton.cdiv(M, bm + bm2) * triton.cdiv(N, bn)), )

    def launch():
        tall_gemm_kernel[grid](*descs, c, c.stride(0), M, N, bm, bm2, bn, bk, stages, 8, num_warps=NUM_WARPS,
                               maxnreg=gluon_common.max_registers(NUM_WARPS))
        return c

    return launch, c


def compile_only() -> int:
    for name, bm, bm2, bn, bk, stages in CONFIGS:
        boxes = _boxes(bm, bm2, bn, bk)
        descs = {arg: (box, layout, torch.bfloat16) for arg, box, layout in
                 zip(("a_desc", "a2_desc", "b_desc"), boxes, gluon_common.shared_layouts(gl.bfloat16, boxes),
                     strict=True)}
        consts = dict(BM=bm, BM2=bm2, BN=bn, BK=bk, STAGES=stages, GROUP_M=8)
        scalars = dict(c_ptr="*bf16", stride_cm="i32", M="i32", N="i32")
        regs = gluon_common.max_registers(NUM_WARPS)
        compiled = gluon_common.compile_sm90(tall_gemm_kernel, descs, consts, scalars, NUM_WARPS, regs)
        gluon_common.report(name, compiled, regs)
    return 0


def bench(shapes: list[tuple[int, int, int]], args) -> int:
    def own_runs(a, b):
        return [(name, prepare(a, b, bm, bm2, bn, bk, st)) for name, bm, bm2, bn, bk, st in CONFIGS]

    return gluon_probe.bench_beside(shapes, args.json, own_runs)


if __name__ == "__main__":
    sys.exit(gluon_common.probe_main(__doc__, compile_only, bench, SHAPES))
