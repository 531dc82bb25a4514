"""Prototype, outside the library: split-K reduced through distributed shared memory inside a cluster
(DeepGEMM's sm90 answer, issue 15's anchor), built with triton 3.9's Gluon here and run on the H200's
triton 3.6 through scripts/gluon_cluster_probe.py's bridge (cubins launched by the CUDA driver).

A cluster of S CTAs computes one BMxBN output tile; CTA r runs the K range [r K/S, (r+1) K/S) with the
warp-specialized TMA + async wgmma loop of the other probes (a 1-warp producer, one consumer warpgroup)
and keeps its fp32 partial in its own shared memory. After a cluster barrier each CTA reads BM/S rows of
all S partials from the other CTAs' shared memory (ld.shared::cluster), adds them in CTA order 0..S-1 in
each thread (a fixed order: bitwise the same run after run), casts and stores its rows; a last cluster
barrier keeps every CTA's shared memory alive until the others have read it. No fp32 partial goes through
global memory and there is no second kernel: the two costs kernel-levers rows 35 and 38 left on the
split-K problems (~3 us of partial stores a program, a reduce kernel and its launch).

How the partials cross CTAs in Gluon's cluster model: the accumulator's layout is "broadcast" over the
cluster (each CTA's registers hold the whole tile, by the model the same values, in fact its own partial),
stored into a [BM, BN] buffer with a broadcast layout; that buffer is reinterpreted as an [S, BM, BN]
buffer split over the CTAs along its first dimension (CTA r's shared memory holds slice r, which is
physically what it wrote) and loaded with a layout that splits the rows over the CTAs instead, which
triton lowers to loads from the other CTAs' shared memory. Requires K to be a multiple of S * BK, and
(tiles x S) CTAs resident at once. Kernel-levers row 44. Measured: right, the reduction costs ~2-3 us,
but at most 120 CTAs in clusters of 4 or 8 are resident on the H200, so 512x512x32768 ran at S 4 on 64
CTAs in 50.5 us (torch.mm 35.3, the shipped Triton kernels 39.9); clusters of 2 fill the GPU only with
tiles too small to run fast (64x64: 59.2 us).

    PYTHONPATH=/tmp/t39 python scripts/gluon_splitk_probe.py --build .cubin        # here (triton 3.9)
    python scripts/gluon_splitk_probe.py --run .cubin --shapes 512x512x32768        # on the H200
"""

from __future__ import annotations

import ctypes
import sys
from pathlib import Path

# scripts/ is this script's directory: the bridge (driver, saving and loading cubins, parameters) and the
# probes' shared timing helpers.
import gluon_cluster_probe as bridge
import gluon_common
import torch
import triton
from gluon_common import mma_step
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import mbarrier, tma, warpgroup_mma_wait

# (CTAs a cluster = K splits, BM, BN, BK, stages)
VARIANTS = [(ctas, 128, 128, 64, stages) for ctas in (2, 4, 8) for stages in (4, 6)]
# Smaller tiles in clusters of 2 (the only clusters that fill all 132 SMs here): 512x512x32768 as 64 tiles
# of 64x64 split in 2 is 128 CTAs; 256x2048x28672 as 64 tiles of 64x128.
VARIANTS += [(2, 64, 64, 64, 8), (2, 64, 128, 64, 6), (2, 64, 128, 64, 8)]
SHAPES = [(512, 512, 32768), (1024, 1024, 16384), (256, 2048, 28672)]
PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _cta_rank():
    return gl.inline_asm_elementwise("mov.u32 $0, %cluster_ctarank;", "=r", [], dtype=gl.int32, is_pure=True,
                                     pack=1)


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, k0, k_tiles, BK: gl.constexpr,
              STAGES: gl.constexpr):
    for kk in range(k_tiles):
        s = kk % STAGES
        mbarrier.wait(empty.index(s), ((kk // STAGES) & 1) ^ 1)
        mbarrier.expect(ready.index(s), a_desc.nbytes_per_cta + b_desc.nbytes_per_cta)
        tma.async_load(a_desc, [off_m, k0 + kk * BK], ready.index(s), a_bufs.index(s))
        tma.async_load(b_desc, [k0 + kk * BK, off_n], ready.index(s), b_bufs.index(s))


@gluon.jit
def _consumer(a_bufs, b_bufs, ready, empty, k_tiles, BM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr,
              CGA: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16], cga_layout=CGA)
    acc = gl.zeros([BM, BN], gl.float32, acc_layout)
    for kk in range(k_tiles):
        s = kk % STAGES
        mbarrier.wait(ready.index(s), (kk // STAGES) & 1)
        acc = mma_step(a_bufs.index(s), b_bufs.index(s), acc, 1)
        mbarrier.arrive(empty.index((kk + STAGES - 1) % STAGES), pred=kk > 0)
    acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
    mbarrier.arrive(empty.index((k_tiles + STAGES - 1) % STAGES))
    return acc


@gluon.jit
def splitk_cluster_kernel(a_desc, b_desc, c_ptr, stride_cm, BM: gl.constexpr, BN: gl.constexpr,
                          BK: gl.constexpr, STAGES: gl.constexpr, CGA: gl.constexpr, SHARD0: gl.constexpr,
                          ROWS: gl.constexpr):
    # CGA: the broadcast bases (all zero) of a [BM, BN] tile; SHARD0 and ROWS: an [S, BM, BN] view split over
    # the CTAs along its first dimension, and along its rows.
    S: gl.constexpr = gl.num_ctas()
    M = a_desc.shape[0]
    K = a_desc.shape[1]
    N = b_desc.shape[1]
    num_pid_n = gl.cdiv(N, BN)
    tile = gl.program_id(0)  # the cluster's tile
    off_m = (tile // num_pid_n) * BM
    off_n = (tile % num_pid_n) * BN
    k_per = K // S
    k0 = _cta_rank() * k_per
    k_tiles = k_per // BK
    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, BM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty = mbarrier.allocate_mbarrier(batch=STAGES)
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty.index(i), count=1)
    acc = gl.warp_specialize([
        (_consumer, (a_bufs, b_bufs, ready, empty, k_tiles, BM, BN, STAGES, CGA)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty, off_m, off_n, k0, k_tiles, BK, STAGES)),
    ], [1], [PRODUCER_REGS])
    # Cross-CTA operations stay outside warp_specialize (they need every warp of the CTA).
    part = gl.allocate_shared_memory(gl.float32, [BM, BN], gl.SwizzledSharedLayout(1, 1, 1, [1, 0],
                                                                                    cga_layout=CGA))
    part.store(acc)
    gl.barrier(cluster=True)  # every CTA's partial is in its shared memory
    parts = part.reinterpret(shape=[S, BM, BN], layout=gl.SwizzledSharedLayout(1, 1, 1, [2, 1, 0],
                                                                               cga_layout=SHARD0))
    rows_layout: gl.constexpr = gl.BlockedLayout([1, 1, 4], [1, 4, 8], [1, gl.num_warps(), 1], [2, 1, 0],
                                                 cga_layout=ROWS)
    total = gl.sum(parts.load(rows_layout), axis=0)  # each thread adds partials 0..S-1 in order
    out_layout: gl.constexpr = gl.SliceLayout(0, rows_layout)
    rows = off_m + gl.arange(0, BM, gl.SliceLayout(1, out_layout))
    cols = off_n + gl.arange(0, BN, gl.SliceLayout(0, out_layout))
    mask = (rows < M)[:, None] & (cols < N)[None, :]
    gl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], total.to(c_ptr.dtype.element_ty), mask=mask)
    gl.barrier(cluster=True)  # no CTA leaves while another still reads its shared memory


def _cga_bases(ctas: int) -> tuple[tuple, tuple, tuple]:
    """(broadcast [BM, BN], [S, BM, BN] split along dim 0, split along the rows) for `ctas` CTAs."""
    bits = range(ctas.bit_length() - 1)
    return (tuple((0, 0) for _ in bits), tuple((1 << i, 0, 0) for i in bits),
            tuple((0, 1 << i, 0) for i in bits))


def build(out_dir: Path) -> int:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    if not hasattr(tma, "async_load"):
        sys.exit(f"--build needs triton 3.9 (Gluon's cluster layouts), not {triton.__version__}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = splitk_cluster_kernel.arg_names
    for ctas, bm, bn, bk, stages in VARIANTS:
        cga, shard0, rows = _cga_bases(ctas)
        sig = {}
        for arg, box in (("a_desc", [bm, bk]), ("b_desc", [bk, bn])):
            layout = gl.NVMMASharedLayout.get_default_for(box, gl.bfloat16, cga_layout=[list(b) for b in cga])
            sig[arg] = mangle_type(TensorDescriptor.from_tensor(torch.empty(1024, 1024, dtype=torch.bfloat16),
                                                                box, layout))
        consts = dict(BM=bm, BN=bn, BK=bk, STAGES=stages, CGA=cga, SHARD0=shard0, ROWS=rows)
        sig.update({k: "constexpr" for k in consts}, c_ptr="*bf16", stride_cm="i32")
        src = GluonASTSource(splitk_cluster_kernel, sig,
                             constexprs={(names.index(k), ): v for k, v in consts.items()})
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128),
                                  options=dict(num_warps=4, num_ctas=ctas, maxnreg=256))
        bridge.save_variant(out_dir, f"splitk S{ctas} {bm}x{bn}x{bk} s{stages}", compiled,
                            consts=dict(BM=bm, BN=bn, BK=bk, STAGES=stages))
    return 0


def run(in_dir: Path, shapes: list[tuple[int, int, int]], args) -> int:
    from triton.testing import do_bench

    import tritonblas

    drv = bridge.Driver()
    variants = bridge.load_variants(drv, in_dir, "splitk_*.json")
    torch.manual_seed(0)
    rows = []
    for M, N, K in shapes:
        a, b, ref, out, torch_ms = gluon_common.timed_problem(M, N, K)
        ours_ms = do_bench(lambda a=a, b=b, out=out: tritonblas.matmul(a, b, out=out, backend="triton"),
                           return_mode="median")
        print(f"{M}x{N}x{K} tritonblas (triton backend, shipped config) {ours_ms * 1e3:8.1f} us | torch.mm "
              f"{torch_ms * 1e3:8.1f} us | torch/tritonblas {torch_ms / ours_ms:.3f}x")
        stream = torch.cuda.current_stream().cuda_stream
        for facts, fn in variants:
            consts, ctas = facts["consts"], facts["num_ctas"]
            tiles = triton.cdiv(M, consts["BM"]) * triton.cdiv(N, consts["BN"])
            if K % (ctas * consts["BK"]) or tiles > facts["max_clusters"]:
                continue  # K does not split evenly, or the clusters would not all be resident at once
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            params = bridge.kernel_params(drv, facts, [a, b], [ctypes.c_uint64(c.data_ptr()),
                                                               ctypes.c_uint32(c.stride(0))])

            def launch(fn=fn, tiles=tiles, facts=facts, params=params, stream=stream):
                drv.launch(fn, tiles, facts, params, stream)

            rows.append(gluon_common.time_variant(facts["label"], (M, N, K), launch, c, ref, torch_ms))
            rows[-1]["tritonblas_us"] = ours_ms * 1e3
    gluon_common.write_rows(args.json, rows)
    return 0


if __name__ == "__main__":
    sys.exit(bridge.bridge_main(__doc__, build, run, SHAPES))
