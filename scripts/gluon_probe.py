"""Prototype, outside tritonblas/kernels/ and not used by the library: a warp-specialized persistent GEMM
for Hopper (sm_90) written in Triton's Gluon dialect (triton 3.6), to compare later against cuBLAS.

C[M,N] = A[M,K] @ B[K,N], bf16/fp16 in and out, fp32 accumulation, A and B row-major. Each program of a
persistent grid (min(#SMs, #tiles)) walks tiles pid, pid + grid, ... in grouped order. A 1-warp producer
partition streams A/B tiles by TMA into a NUM_STAGES ring (ready/empty mbarriers per stage); the default
partition (one warpgroup, or two for 128x256) issues async wgmma with one in flight, frees each stage when
the wgmma that read it has retired, and TMA-stores the tile, draining during the next tile's mainloop.
Ragged edges: TMA zero-fills loads and clips stores. Status: compiles for sm_90 on a CPU box, and on one
H200 (2026-12-01, bf16, docs/benchmarks/h200-gluon-probe*.txt) gives torch.mm's error on every shape and
runs within -5%..+3% of the library's own Triton kernels on the large shapes (4096^3 184.9 us against
187.7, 16384x8192x1024 415.6 against 427.3, 4096x14336x4096 721.6 against 691.8): no faster yet. It
has no split, so the streamk class's partial-wave shapes run slower on it; its 160-wide tiles (two
accumulators, CONFIGS) ran 5% below its 128-wide rate a column. Kernel-levers rows 40-41: --diagnose
times the kernel without loads and with L2-hit loads (4096^3: 161.6 / 176.3 us against 204.1 real), which
puts a fifth of its time in feeding the MMA; row 42 (scripts/gluon_cluster_probe.py) found that a 2-CTA
cluster sharing B by TMA multicast does not buy it back.

    python scripts/gluon_probe.py --compile-only   # no GPU needed: compiles for sm_90, prints smem/regs/PTX
    python scripts/gluon_probe.py [--json rows.json]  # on an H200: correctness and timing vs torch.mm
    python scripts/gluon_probe.py --diagnose --shapes 4096x4096x4096 --configs "128x128x64 s4 w4"
"""

from __future__ import annotations

import sys

import torch
import triton

# scripts/ is this script's directory: the helpers the Gluon probes share.
from gluon_common import (
    GL_DTYPES,
    SHORT,
    compile_sm90,
    max_registers,
    mma_step,
    probe_main,
    report,
    shared_layouts,
    store_direct,
    tile_offsets,
    time_variant,
    timed_problem,
    write_rows,
)
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import (
    fence_async_shared,
    mbarrier,
    tma,
    warpgroup_mma,
    warpgroup_mma_wait,
)
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

# (name, kwargs of gluon_matmul): 128x256 needs two consumer warpgroups, else its fp32 accumulator alone
# would be 256 registers a thread.
# Tiles block_n + block_n2 wide: a second accumulator and a second wgmma a k-step, so that a tile can be
# 160 columns wide (triton's tensors are powers of two): 768x3072x8192 in one wave of 120 tiles, cuBLAS's
# 128x160 schedule (kernel-levers row 33), and 2176x2176x4096 in 126 tiles of 256x160. Measured on 4 warps
# (H200, h200-gluon-probe-wide.txt): right; a 160-wide k-step took 0.525 us where a 128-wide one took 0.400
# (4096^3: 235.4 us for 7 tiles of 64 steps on the busiest program, 204.8 for 8), 5% more a column, so
# 768x3072x8192's one wave took 67.6 us (Triton Stream-K 63.9, torch.mm 56.1; cuBLAS's 128x160 kernel
# 52.7, 0.41 us a step); 256x160 at the 2 stages that fit ran 2-4x slower. Run in the thirteenth session
# (h200-gluon-probe-coop.txt, -diagnose.txt): 128x160 on 8 warps, two warpgroups of 64 rows side by side
# (cuBLAS's cooperative schedule), 67.5 us, no better than 4 warps; with no loads at all 4 warps take 59.7,
# so the 32-column wgmma, not the warpgroup count, holds it above cuBLAS. The "st" configs store the output
# tile from registers (no shared memory for it: 256x160 at 3 stages, 128x160 at 5): slower on every shape.
CONFIGS = [
    ("128x128x64 s4 w4", dict(block_m=128, block_n=128, block_k=64, stages=4, group_m=8, num_warps=4)),
    ("128x256x64 s3 w8", dict(block_m=128, block_n=256, block_k=64, stages=3, group_m=8, num_warps=8)),
    ("128x(128+32)x64 s4 w4", dict(block_m=128, block_n=128, block_n2=32, block_k=64, stages=4, group_m=8,
                                   num_warps=4)),
    ("128x(128+32)x64 s4 w8", dict(block_m=128, block_n=128, block_n2=32, block_k=64, stages=4, group_m=8,
                                   num_warps=8)),
    ("256x(128+32)x64 s2 w8", dict(block_m=256, block_n=128, block_n2=32, block_k=64, stages=2, group_m=8,
                                   num_warps=8)),
    # Stored from registers, no shared memory for the output tile: room for 3 stages of 256x160.
    ("256x(128+32)x64 s3 w8 st", dict(block_m=256, block_n=128, block_n2=32, block_k=64, stages=3,
                                      group_m=8, num_warps=8, tma_store=False)),
    ("128x(128+32)x64 s5 w8 st", dict(block_m=128, block_n=128, block_n2=32, block_k=64, stages=5,
                                      group_m=8, num_warps=8, tma_store=False)),
    # Deeper rings (thirteenth session): the diagnostics put a fifth of 4096^3's time in feeding the MMA,
    # two thirds of that L2 misses; more k-steps in flight may hide them. Stored from registers to make
    # room: 10-40% slower on every shape (h200-gluon-probe-rings.txt).
    ("128x128x64 s6 w4 st", dict(block_m=128, block_n=128, block_k=64, stages=6, group_m=8, num_warps=4,
                                 tma_store=False)),
    ("128x256x64 s4 w8 st", dict(block_m=128, block_n=256, block_k=64, stages=4, group_m=8, num_warps=8,
                                 tma_store=False)),
    # Deeper rings with the output staged for TMA (6 stages of 128x128 and the output tile: 224 KiB), and
    # other tile orders: is the feed's loss latency (more k-steps in flight) or L2 reuse (the order)?
    # Measured (h200-gluon-probe-order.txt): 5-6 stages -7% on 2176x2176x4096, -1% on 4096^3; groups of
    # 4 or 16 no better than 8.
    ("128x128x64 s5 w4", dict(block_m=128, block_n=128, block_k=64, stages=5, group_m=8, num_warps=4)),
    ("128x128x64 s6 w4", dict(block_m=128, block_n=128, block_k=64, stages=6, group_m=8, num_warps=4)),
    ("128x128x64 s4 w4 g4", dict(block_m=128, block_n=128, block_k=64, stages=4, group_m=4, num_warps=4)),
    ("128x128x64 s4 w4 g16", dict(block_m=128, block_n=128, block_k=64, stages=4, group_m=16, num_warps=4)),
    ("128x256x64 s3 w8 g4", dict(block_m=128, block_n=256, block_k=64, stages=3, group_m=4, num_warps=8)),
    ("128x256x64 s3 w8 g16", dict(block_m=128, block_n=256, block_k=64, stages=3, group_m=16, num_warps=8)),
    # Two k-steps of wgmma in flight (a stage goes back two steps later), one more stage to cover it.
    # Measured slower everywhere (h200-gluon-probe-depth.txt: 4096^3 199.0 -> 203.2 us at 5 stages).
    ("128x128x64 s5 w4 d2", dict(block_m=128, block_n=128, block_k=64, stages=5, group_m=8, num_warps=4,
                                 mma_depth=2)),
    ("128x256x64 s3 w8 d2", dict(block_m=128, block_n=256, block_k=64, stages=3, group_m=8, num_warps=8,
                                 mma_depth=2)),
]
# Diagnostics (loads=0: no loads, the MMA and barrier rate alone; loads=2: every k-step loads the same
# k-step-0 tiles, the bytes to the SM unchanged but all L2 hits), run by --diagnose, not by default.
DIAGNOSTICS = [(f"{name} {tag}", dict(cfg, loads=loads)) for name, cfg in CONFIGS[:3]
               for tag, loads in (("noload", 0), ("l2only", 2))]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (768, 3072, 8192), (2176, 2176, 4096),
          (1792, 1792, 8192), (6144, 1024, 8192), (1024, 1024, 1024), (1000, 1000, 1000)]
PRODUCER_REGS = gl.constexpr(24)  # the fewest setmaxnreg allows; the producer only holds scalars


@gluon.jit
def _producer(a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pid, nprog, num_pid_m,
              num_pid_n, k_tiles, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr, BLOCK_N2: gl.constexpr,
              BLOCK_K: gl.constexpr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, LOADS: gl.constexpr):
    nbytes: gl.constexpr = a_desc.block_type.nbytes + b_desc.block_type.nbytes
    it = 0  # k-steps issued over all tiles: the ring position and phase continue across tiles
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N + BLOCK_N2, GROUP_M)
        for kk in range(k_tiles):
            s = it % NUM_STAGES
            # An mbarrier starts as if phase 1 had just completed, so the first lap's waits (parity 1) pass
            # at once and the producer fills the whole ring before the consumer frees anything.
            mbarrier.wait(empty.index(s), ((it // NUM_STAGES) & 1) ^ 1)
            # LOADS (diagnostic): 1 loads each k-step's tiles; 0 hands the stage over unfilled, so the
            # consumer's MMA rate shows alone; 2 loads k-step 0's tiles every time (same bytes to the SM,
            # all L2 hits).
            k_off = kk * BLOCK_K if LOADS == 1 else 0
            if LOADS == 0:
                mbarrier.arrive(ready.index(s))
            elif BLOCK_N2 > 0:
                mbarrier.expect(ready.index(s), nbytes + b2_desc.block_type.nbytes)
                tma.async_copy_global_to_shared(b2_desc, [k_off, off_n + BLOCK_N], ready.index(s),
                                                b2_bufs.index(s))
            else:
                mbarrier.expect(ready.index(s), nbytes)
            if LOADS != 0:
                tma.async_copy_global_to_shared(a_desc, [off_m, k_off], ready.index(s), a_bufs.index(s))
                tma.async_copy_global_to_shared(b_desc, [k_off, off_n], ready.index(s), b_bufs.index(s))
            it += 1


@gluon.jit
def _consumer(c_desc, c2_desc, c_ptr, stride_cm, a_bufs, b_bufs, b2_bufs, ready, empty, c_smem, c2_smem, pid,
              nprog, num_pid_m, num_pid_n, k_tiles, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
              BLOCK_N2: gl.constexpr, NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr,
              TMA_STORE: gl.constexpr, MMA_DEPTH: gl.constexpr):
    # One wgmma instruction covers 16 rows x the whole BLOCK_N (n <= 256), k = 16 for 16-bit inputs; warps
    # stack along M (4 warps = 64 rows a warpgroup), which BLOCK_M = 128 allows for 4 or 8 warps.
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BLOCK_N, 16])
    if BLOCK_N2 > 0:
        acc2_layout: gl.constexpr = gl.NVMMADistributedLayout(
            version=[3, 0], warps_per_cta=[gl.num_warps(), 1], instr_shape=[16, BLOCK_N2, 16])
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M, BLOCK_N + BLOCK_N2, GROUP_M)
        acc = gl.zeros([BLOCK_M, BLOCK_N], gl.float32, acc_layout)
        if BLOCK_N2 > 0:
            acc2 = gl.zeros([BLOCK_M, BLOCK_N2], gl.float32, acc2_layout)
        for kk in range(k_tiles):
            s = it % NUM_STAGES
            mbarrier.wait(ready.index(s), (it // NUM_STAGES) & 1)
            # Keep this k-step's wgmma(s) in flight; the step before has now retired, so its stage goes
            # back to the producer (none before a tile's first k-step: that one was freed after the last).
            if BLOCK_N2 > 0:
                # (not gluon_common's mma_step twice: both wgmmas go in flight before the one wait)
                acc = warpgroup_mma(a_bufs.index(s), b_bufs.index(s), acc, is_async=True)
                acc2 = warpgroup_mma(a_bufs.index(s), b2_bufs.index(s), acc2, is_async=True)
                acc, acc2, _, _, _ = warpgroup_mma_wait(
                    num_outstanding=2, deps=(acc, acc2, a_bufs.index(s), b_bufs.index(s), b2_bufs.index(s)))
            else:
                acc = mma_step(a_bufs.index(s), b_bufs.index(s), acc, MMA_DEPTH)
            # MMA_DEPTH k-steps of wgmma stay in flight: the stage MMA_DEPTH steps back has been read.
            mbarrier.arrive(empty.index((it + NUM_STAGES - MMA_DEPTH) % NUM_STAGES), pred=kk >= MMA_DEPTH)
            it += 1
        if BLOCK_N2 > 0:
            acc, acc2 = warpgroup_mma_wait(num_outstanding=0, deps=(acc, acc2))
        else:
            acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        for d in gl.static_range(MMA_DEPTH):  # the tile's last MMA_DEPTH stages (those it has)
            mbarrier.arrive(empty.index((it + NUM_STAGES - MMA_DEPTH + d) % NUM_STAGES),
                            pred=k_tiles + d >= MMA_DEPTH)
        if TMA_STORE:
            # The previous tile's TMA store was left to drain during this tile's mainloop; c_smem is
            # rewritten only once it has finished reading it.
            tma.store_wait(pendings=0)
            c_smem.store(acc.to(c_desc.dtype))
            if BLOCK_N2 > 0:
                c2_smem.store(acc2.to(c_desc.dtype))
            fence_async_shared()  # order the generic-proxy smem writes before the async-proxy TMA read
            tma.async_copy_shared_to_global(c_desc, [off_m, off_n], c_smem)
            if BLOCK_N2 > 0:  # past N (the last column of tiles) the copy engine clips the box
                tma.async_copy_shared_to_global(c2_desc, [off_m, off_n + BLOCK_N], c2_smem)
        else:
            M = c_desc.shape[0]
            N = c_desc.shape[1]
            store_direct(acc, c_ptr, stride_cm, M, N, off_m, off_n, BLOCK_M, BLOCK_N, acc_layout)
            if BLOCK_N2 > 0:
                store_direct(acc2, c_ptr, stride_cm, M, N, off_m, off_n + BLOCK_N, BLOCK_M, BLOCK_N2,
                              acc2_layout)
    if TMA_STORE:
        tma.store_wait(pendings=0)


@gluon.jit
def gluon_gemm_kernel(a_desc, b_desc, c_desc, b2_desc, c2_desc, c_ptr, stride_cm, BLOCK_M: gl.constexpr,
                      BLOCK_N: gl.constexpr, BLOCK_N2: gl.constexpr, BLOCK_K: gl.constexpr,
                      NUM_STAGES: gl.constexpr, GROUP_M: gl.constexpr, TMA_STORE: gl.constexpr,
                      LOADS: gl.constexpr, MMA_DEPTH: gl.constexpr):
    # BLOCK_N2 > 0: tiles BLOCK_N + BLOCK_N2 wide, their last BLOCK_N2 columns read through b2_desc and
    # written through c2_desc; BLOCK_N2 == 0: b2_desc and c2_desc are b_desc and c_desc, unused.
    # TMA_STORE: tiles written by TMA from shared memory (c_desc, c2_desc), else from registers through
    # c_ptr (C row-major, leading stride stride_cm).
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    K = a_desc.shape[1]
    num_pid_m = gl.cdiv(M, BLOCK_M)
    num_pid_n = gl.cdiv(N, BLOCK_N + BLOCK_N2)
    k_tiles = gl.cdiv(K, BLOCK_K)  # the last k-step reads past K: TMA fills zeros, adding nothing
    pid = gl.program_id(0)
    nprog = gl.num_programs(0)

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [NUM_STAGES, BLOCK_M, BLOCK_K], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [NUM_STAGES, BLOCK_K, BLOCK_N], b_desc.layout)
    if BLOCK_N2 > 0:
        b2_bufs = gl.allocate_shared_memory(b2_desc.dtype, [NUM_STAGES, BLOCK_K, BLOCK_N2], b2_desc.layout)
    else:
        b2_bufs = b_bufs
    if TMA_STORE:
        c_smem = gl.allocate_shared_memory(c_desc.dtype, [BLOCK_M, BLOCK_N], c_desc.layout)
        if BLOCK_N2 > 0:
            c2_smem = gl.allocate_shared_memory(c2_desc.dtype, [BLOCK_M, BLOCK_N2], c2_desc.layout)
        else:
            c2_smem = c_smem
    else:  # (unused: the consumer stores from registers)
        c_smem = b_bufs
        c2_smem = b_bufs
    ready = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    empty = gl.allocate_shared_memory(gl.int64, [NUM_STAGES, 1], mbarrier.MBarrierLayout())
    for i in gl.static_range(NUM_STAGES):
        # ready: one arrival (the producer's expect) plus the TMA bytes; empty: one consumer arrival.
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)

    gl.warp_specialize([
        (_consumer, (c_desc, c2_desc, c_ptr, stride_cm, a_bufs, b_bufs, b2_bufs, ready, empty, c_smem,
                     c2_smem, pid, nprog, num_pid_m, num_pid_n, k_tiles, BLOCK_M, BLOCK_N, BLOCK_N2,
                     NUM_STAGES, GROUP_M, TMA_STORE, MMA_DEPTH)),
        (_producer, (a_desc, b_desc, b2_desc, a_bufs, b_bufs, b2_bufs, ready, empty, pid, nprog, num_pid_m,
                     num_pid_n, k_tiles, BLOCK_M, BLOCK_N, BLOCK_N2, BLOCK_K, NUM_STAGES, GROUP_M, LOADS)),
    ], [1], [PRODUCER_REGS])

    for i in gl.static_range(NUM_STAGES):
        mbarrier.invalidate(ready.index(i))
        mbarrier.invalidate(empty.index(i))


_SM_COUNT: dict[int, int] = {}


def _boxes(block_m, block_n, block_n2, block_k):
    """The TMA boxes of a_desc, b_desc, c_desc, b2_desc, c2_desc (the last two: b_desc's and c_desc's when
    block_n2 is 0)."""
    n2 = block_n2 or block_n
    return [block_m, block_k], [block_k, block_n], [block_m, block_n], [block_k, n2], [block_m, n2]


def descriptors(a, b, c, block_m: int, block_n: int, block_k: int, block_n2: int = 0) -> list:
    """Host-built TMA descriptors of A, B, C, then B's and C's last block_n2 columns (B's and C's own
    when block_n2 is 0), with the shared layouts the kernels allocate their buffers with."""
    boxes = _boxes(block_m, block_n, block_n2, block_k)
    return [TensorDescriptor.from_tensor(t, box, layout) for t, box, layout in
            zip((a, b, c, b, c), boxes, shared_layouts(GL_DTYPES[a.dtype], boxes), strict=True)]


def prepare(a, b, block_m=128, block_n=128, block_k=64, stages=4, group_m=8, num_warps=4, block_n2=0,
            tma_store=True, loads=1, mma_depth=1):
    """(launch, c): a closure launching the kernel on descriptors built once, so that benchmarks time the
    kernel launch and not the host-side descriptor construction."""
    assert a.dtype == b.dtype and a.dtype in GL_DTYPES and a.dim() == b.dim() == 2
    (M, K), (K2, N) = a.shape, b.shape
    assert K == K2, f"inner dimensions differ: {K} vs {K2}"
    a, b = a.contiguous(), b.contiguous()
    c = torch.empty(M, N, dtype=a.dtype, device=a.device)
    descs = descriptors(a, b, c, block_m, block_n, block_k, block_n2)
    dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
    if dev not in _SM_COUNT:
        _SM_COUNT[dev] = torch.cuda.get_device_properties(dev).multi_processor_count
    grid = (min(_SM_COUNT[dev], triton.cdiv(M, block_m) * triton.cdiv(N, block_n + block_n2)), )

    def launch():
        gluon_gemm_kernel[grid](*descs, c, c.stride(0), block_m, block_n, block_n2, block_k, stages, group_m,
                                tma_store, loads, mma_depth, num_warps=num_warps,
                                maxnreg=max_registers(num_warps))
        return c

    return launch, c


def gluon_matmul(a, b, block_m=128, block_n=128, block_k=64, stages=4, group_m=8, num_warps=4,
                 block_n2=0, tma_store=True) -> torch.Tensor:
    return prepare(a, b, block_m, block_n, block_k, stages, group_m, num_warps, block_n2, tma_store)[0]()


def compile_only() -> int:
    """Compile every (config, dtype) for sm_90 without a GPU and report each (compile_sm90, report)."""
    failures = 0
    for (name, cfg), tdt in ((c, d) for c in CONFIGS + DIAGNOSTICS for d in GL_DTYPES):
        bm, bn, bn2, bk = cfg["block_m"], cfg["block_n"], cfg.get("block_n2", 0), cfg["block_k"]
        boxes = _boxes(bm, bn, bn2, bk)
        descs = {arg: (box, layout, tdt) for arg, box, layout in
                 zip(("a_desc", "b_desc", "c_desc", "b2_desc", "c2_desc"), boxes,
                     shared_layouts(GL_DTYPES[tdt], boxes), strict=True)}
        consts = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_N2=bn2, BLOCK_K=bk, NUM_STAGES=cfg["stages"],
                      GROUP_M=cfg["group_m"], TMA_STORE=cfg.get("tma_store", True),
                      LOADS=cfg.get("loads", 1), MMA_DEPTH=cfg.get("mma_depth", 1))
        warps = cfg["num_warps"]
        label = f"{name} {tdt}".replace("torch.", "")
        try:
            scalars = dict(c_ptr=f"*{SHORT[tdt]}", stride_cm="i32")
            compiled = compile_sm90(gluon_gemm_kernel, descs, consts, scalars, warps, max_registers(warps))
        except Exception as e:  # report every variant, then fail at the end
            failures += 1
            print(f"{label}: FAILED {type(e).__name__}: {e}")
            continue
        report(label, compiled, max_registers(warps))
    return 1 if failures else 0


def bench_beside(shapes: list[tuple[int, int, int]], json_path: str | None, own_runs) -> int:
    """Time a sibling probe's kernels (own_runs(a, b): [(name, (launch, c))]) beside this probe's two
    first configs ("one consumer") and torch.mm, on the same inputs, in one process."""
    torch.manual_seed(0)
    rows = []
    for M, N, K in shapes:
        a, b, ref, _, torch_ms = timed_problem(M, N, K)
        runs = own_runs(a, b) + [(f"one consumer {name}", prepare(a, b, **cfg)) for name, cfg in CONFIGS[:2]]
        for name, (launch, c) in runs:
            rows.append(time_variant(name, (M, N, K), launch, c, ref, torch_ms))
    write_rows(json_path, rows)
    return 0


def bench(json_path: str | None, shapes: list[tuple[int, int, int]], configs: list) -> int:
    from triton.testing import do_bench

    import tritonblas

    torch.manual_seed(0)
    rows = []
    for M, N, K in shapes:
        a, b, ref, out, torch_ms = timed_problem(M, N, K)
        # The library's own Triton kernels on their shipped (or heuristic) config, for the same shape.
        ours_ms = do_bench(lambda a=a, b=b, out=out: tritonblas.matmul(a, b, out=out, backend="triton"),
                           return_mode="median")
        flops = 2.0 * M * N * K
        print(f"{M}x{N}x{K} tritonblas (triton backend): {ours_ms * 1e3:9.1f} us | torch/tritonblas "
              f"{torch_ms / ours_ms:.3f}x")
        for name, cfg in configs:
            row = dict(m=M, n=N, k=K, dtype="bf16", config=name, torch_us=torch_ms * 1e3,
                       tritonblas_us=ours_ms * 1e3)
            try:
                launch, c = prepare(a, b, **cfg)
                launch()
                torch.cuda.synchronize()
                diff = (c.float() - ref).abs()
                row.update(max_abs_err=diff.max().item(), rel_err=(diff.norm() / ref.norm()).item())
                # bf16 output rounding alone is ~2e-3 relative; a wrong tile or stage shows far above 1e-2.
                row["ok"] = row["rel_err"] < 1e-2 or cfg.get("loads", 1) != 1  # diagnostics compute junk
                ms = do_bench(launch, return_mode="median")
                row.update(us=ms * 1e3, tflops=flops / ms * 1e-9, torch_tflops=flops / torch_ms * 1e-9,
                           ratio=torch_ms / ms)
                print(f"{M}x{N}x{K} {name}: {row['us']:9.1f} us {row['tflops']:7.1f} TFLOP/s | torch.mm "
                      f"{row['torch_us']:9.1f} us {row['torch_tflops']:7.1f} TFLOP/s | torch/ours "
                      f"{row['ratio']:.3f}x | max abs err {row['max_abs_err']:.3g} rel {row['rel_err']:.2e}"
                      f"{'' if row['ok'] else ' MISMATCH'}")
            except Exception as e:  # one config failing must not hide the others
                # The last line: a CompilationError's first lines are only the source position.
                row["error"] = f"{type(e).__name__}: {(str(e).strip().splitlines() or [''])[-1]}"
                print(f"{M}x{N}x{K} {name}: skipped ({row['error']})")
            rows.append(row)
    write_rows(json_path, rows)
    return 0


def _options(parser) -> None:
    parser.add_argument("--diagnose", action="store_true",
                        help="time DIAGNOSTICS too (no loads; L2-hit loads): MMA rate apart from feed")
    parser.add_argument("--configs", metavar="TEXT,...", help="only configs whose names contain one of these")


def _bench_selected(shapes: list[tuple[int, int, int]], args) -> int:
    configs = CONFIGS[:3] + DIAGNOSTICS if args.diagnose else CONFIGS
    if args.configs:
        configs = [c for c in configs if any(text in c[0] for text in args.configs.split(","))]
    return bench(args.json, shapes, configs)


if __name__ == "__main__":
    sys.exit(probe_main(__doc__, compile_only, _bench_selected, SHAPES, _options))
