"""Prototype, outside the library: a ping-pong Gluon GEMM for sm_90 (triton 3.6), CUTLASS's other
warp-specialized schedule, against scripts/gluon_probe.py's one-consumer kernel and torch.mm.

Two consumer warpgroups take a program's tiles in turn (tiles 0, 2, 4, ... and 1, 3, 5, ...), each with a
whole BMxBN accumulator of its own, and run their mainloops strictly one after the other: a consumer
starts a tile's wgmmas only once the other has issued its previous tile's last ones (one `order` mbarrier
each). So the tensor cores see one mainloop at a time while the other warpgroup runs its epilogue (the
fp32 -> bf16 convert, the shared-memory store, the TMA store) under it, where the one-consumer kernel
stops its MMA for every epilogue. One 1-warp producer fills one ring for both, in tile order; a
consumer's k-step it of tile j sits at ring position j * k_tiles + it. Kernel-levers row 43.

    python scripts/gluon_pingpong_probe.py --compile-only        # no GPU needed
    python scripts/gluon_pingpong_probe.py --shapes 4096x4096x4096 [--json rows.json]   # on an H200
"""

from __future__ import annotations

import sys

# scripts/ is this script's directory: the probes' shared helpers (tile order, compile check, timing) and
# the one-consumer probe (its descriptors, and its kernel timed beside this one).
import gluon_common
import gluon_probe
import torch
import triton
from gluon_common import mma_step, tile_offsets
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma_wait,
)

# (name, block_m, block_n, block_k, stages): one consumer warpgroup a tile, so an accumulator of
# BM*BN/128 fp32 registers a thread (128 for 128x128).
CONFIGS = [("pingpong 128x128x64 s4", 128, 128, 64, 4), ("pingpong 128x128x64 s5", 128, 128, 64, 5)]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 8192), (6144, 1024, 8192),
          (2176, 2176, 4096)]
# Registers a thread of the worker consumer and of the producer get; the default consumer gets the rest of
# the 512 a thread slot has over the three warpgroups (256). With 240 the compiler asked for 256 + 240 + 24.
CONSUMER_REGS = gl.constexpr(232)
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n, k_tiles,
              BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_K: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr):
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(empty.index(s), ((it // STAGES) & 1) ^ 1)
            mbarrier.expect(ready.index(s), nbytes)
            tma.async_copy_global_to_shared(a_desc, [off_m, kk * BLOCK_K], ready.index(s), a_bufs.index(s))
            tma.async_copy_global_to_shared(b_desc, [kk * BLOCK_K, off_n], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, ready, empty, order, c_bufs, pid, nprog, num_pid_m, num_pid_n, k_tiles,
              WG: gl.constexpr, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[4, 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    c_smem = c_bufs.index(WG)
    n = 0  # this warpgroup's tiles so far; the program's tile index is j = 2 * n + WG
    for tile in range(pid + WG * nprog, num_pid_m * num_pid_n, 2 * nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N, GROUP_M)
        # The other warpgroup's mainloop before this one has been issued: for WG 1 the n-th of WG 0 (its
        # order barrier's phase n), for WG 0 the (n-1)-th of WG 1 (phase n - 1; n = 0 passes at once, an
        # mbarrier starting as if its phase -1 had completed).
        if WG == 0:
            mbarrier.wait(order.index(1), (n & 1) ^ 1)
        else:
            mbarrier.wait(order.index(0), n & 1)
        it = (2 * n + WG) * k_tiles
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = mma_step(a_bufs.index(s), b_bufs.index(s), acc, 1)
            mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES), pred=kk > 0)
            it += 1
        mbarrier.arrive(order.index(WG))  # every wgmma of this tile issued: the other may start its own
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        mbarrier.arrive(empty.index((it + STAGES - 1) % STAGES))
        tma.store_wait(pendings=0)  # this warpgroup's previous store has read c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
        n += 1
    tma.store_wait(pendings=0)


@gluon.jit
def pingpong_gemm_kernel(a_desc, b_desc, c_desc, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                         BLOCK_K: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr):
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N)
    k_tiles = gl.cdiv(a_desc.shape[1], BLOCK_K)
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    c_bufs = gl.allocate_shared_memory(c_desc.dtype, [2, BLOCK_M, BLOCK_N], c_desc.layout)
    ready = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [STAGES, 1], mbarrier.MBarrierLayout())
    order = gl.allocate_shared_memory(gl.int64, [2, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    for i in gl.static_range(2):
        mbarrier.init(order.index(i), count=1)
    gl.warp_specialize([
        (_consumer, (c_desc, a_bufs, b_bufs, ready, empty, order, c_bufs, pid, nprog, num_pid_m, num_pid_n,
                     k_tiles, 0, BLOCK_M, BLOCK_N, STAGES, GROUP_M)),
        (_consumer, (c_desc, a_bufs, b_bufs, ready, empty, order, c_bufs, pid, nprog, num_pid_m, num_pid_n,
                     k_tiles, 1, BLOCK_M, BLOCK_N, STAGES, GROUP_M)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, pid, nprog, num_pid_m, num_pid_n, k_tiles,
                     BLOCK_M, BLOCK_N, BLOCK_K, STAGES, GROUP_M)),
    ], [4, 1], [CONSUMER_REGS, PRODUCER_REGS])


def max_registers() -> int:
    """maxnreg over the three warpgroups (the default consumer, the worker consumer, the producer's)."""
    return 65536 // (12 * 32) // 8 * 8


def prepare(a: torch.Tensor, b: torch.Tensor, block_m: int, block_n: int, block_k: int, stages: int):
    """(launch, c) on descriptors built once, as gluon_probe.prepare."""
    M, N = a.shape[0], b.shape[1]
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    descs = gluon_probe.descriptors(a, b, c, block_m, block_n, block_k)[:3]
    sms = torch.cuda.get_device_properties(a.device).multi_processor_count
    grid = (min(sms, triton.cdiv(M, block_m) * triton.cdiv(N, block_n)), )

    def launch():
        pingpong_gemm_kernel[grid](*descs, block_m, block_n, block_k, stages, 8, num_warps=4,
                                   maxnreg=max_registers())
        return c

    return launch, c


def compile_only() -> int:
    for name, bm, bn, bk, stages in CONFIGS:
        boxes = [[bm, bk], [bk, bn], [bm, bn]]
        descs = {arg: (box, layout, torch.bfloat16) for arg, box, layout in
                 zip(("a_desc", "b_desc", "c_desc"), boxes, gluon_common.shared_layouts(gl.bfloat16, boxes),
                     strict=True)}
        consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, STAGES=stages, GROUP_M=8)
        compiled = gluon_common.compile_sm90(pingpong_gemm_kernel, descs, consts, {}, 4, max_registers())
        gluon_common.report(name, compiled, max_registers())
    return 0


def bench(shapes: list[tuple[int, int, int]], args) -> int:
    def own_runs(a, b):
        return [(name, prepare(a, b, bm, bn, bk, st)) for name, bm, bn, bk, st in CONFIGS]

    return gluon_probe.bench_beside(shapes, args.json, own_runs)


if __name__ == "__main__":
    sys.exit(gluon_common.probe_main(__doc__, compile_only, bench, SHAPES))
