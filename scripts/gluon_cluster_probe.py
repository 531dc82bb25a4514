"""Prototype, outside the library: does TMA multicast across a 2-CTA cluster make a Gluon GEMM beat cuBLAS
on the H200, whose image has triton 3.6 (no multicast, kernel-levers row 41)?

Built here, run there. `--build DIR` (a CPU box with triton >= 3.9 importable, no GPU needed) compiles
the kernel below for sm_90 and writes each variant's cubin and launch facts (kernel name, warps, CTAs per
cluster, shared memory, the TMA boxes, the PTX parameter list) into DIR. `--run DIR` (on the H200, any
triton) loads those cubins through the CUDA driver (ctypes: cuModuleLoadData, cuTensorMapEncodeTiled,
cuLaunchKernelEx with a cluster dimension), so it needs neither triton 3.9 nor its launcher, and times
each variant against torch.mm on the same inputs, with the relative error against an fp32 product.

The kernel: persistent, warp-specialized (a 1-warp TMA producer, one consumer partition running async
wgmma with one in flight), grouped tile order; a cluster of two CTAs computes two vertically adjacent
BMxBN tiles (a 2BMxBN cluster tile) that read the same B tile. MULTICAST: CTA 0 loads that B tile once
and the copy engine writes it into both CTAs' shared memory; otherwise each CTA loads it itself (the
same cluster schedule without the sharing: the A/B comparison). Before CTA 0 multicasts into a ring
stage, both CTAs' consumers must have released it: a two-CTA mbarrier (both arrive, CTA 0 waits) beside
each CTA's own one. A and B row-major bf16, M a multiple of 2BM, N of BN, K of BK (a probe, not a
library kernel: no masks beyond what TMA clips).

Measured (kernel-levers row 42, docs/benchmarks/h200-gluon-cluster-*.txt): right on every shape, and the
multicast gains nothing (4096^3 2x128x256: 190.2 us without, 189.3 with; 2x128x128 201.6 and 206.8).

    pip install --target /tmp/t39 --no-deps triton==3.9.0                                 # here, once
    echo /.cubin/ >> .git/info/exclude
    PYTHONPATH=/tmp/t39 python scripts/gluon_cluster_probe.py --build .cubin               # here
    python scripts/gluon_cluster_probe.py --run .cubin --shapes 4096x4096x4096              # on the H200
                                                                   # (device call: carry [".whl", ".cubin"])
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import sys
from pathlib import Path

# scripts/ is this script's directory: the probes' shared helpers (the grouped tile order, here over
# cluster tiles: BLOCK_M = the cluster tile's 2 * BM rows) and the single-CTA probe, timed beside.
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

# (name, constexprs, warps of the consumer partition); cluster tiles are 2 * BM rows.
VARIANTS = [
    ("2x128x128x64 s4 w4 mc", dict(BM=128, BN=128, BK=64, STAGES=4, GROUP_M=8, MULTICAST=True), 4),
    ("2x128x128x64 s4 w4", dict(BM=128, BN=128, BK=64, STAGES=4, GROUP_M=8, MULTICAST=False), 4),
    ("2x128x256x64 s3 w8 mc", dict(BM=128, BN=256, BK=64, STAGES=3, GROUP_M=8, MULTICAST=True), 8),
    ("2x128x256x64 s3 w8", dict(BM=128, BN=256, BK=64, STAGES=3, GROUP_M=8, MULTICAST=False), 8),
]
SHAPES = [(4096, 4096, 4096), (8192, 8192, 8192), (2048, 2048, 8192), (6144, 1024, 8192)]
CLUSTER = 2


PRODUCER_REGS = gl.constexpr(24)


@gluon.jit
def _producer(a_desc, b_desc, a_bufs, b_bufs, ready, empty_own, empty_pair, pid, nprog, num_pid_m, num_pid_n,
              k_tiles, CM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr, STAGES: gl.constexpr,
              GROUP_M: gl.constexpr, MULTICAST: gl.constexpr):
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, CM, BN, GROUP_M)
        for kk in range(k_tiles):
            s = it % STAGES
            phase = ((it // STAGES) & 1) ^ 1
            mbarrier.wait(empty_own.index(s), phase)  # this CTA's consumer is done with stage s
            if MULTICAST:
                # Only CTA 0 waits here (a two-CTA barrier): both consumers are done with stage s, so the
                # multicast may overwrite it in both CTAs.
                mbarrier.wait(empty_pair.index(s), phase)
            mbarrier.expect(ready.index(s), a_desc.nbytes_per_cta + b_desc.nbytes_per_cta)
            tma.async_load(a_desc, [off_m, kk * BK], ready.index(s), a_bufs.index(s))
            tma.async_load(b_desc, [kk * BK, off_n], ready.index(s), b_bufs.index(s), multicast=MULTICAST)
            it += 1


@gluon.jit
def _consumer(c_desc, a_bufs, b_bufs, ready, empty_own, empty_pair, c_smem, pid, nprog, num_pid_m, num_pid_n,
              k_tiles, CM: gl.constexpr, BN: gl.constexpr, STAGES: gl.constexpr, GROUP_M: gl.constexpr,
              MULTICAST: gl.constexpr):
    acc_layout: gl.constexpr = gl.NVMMADistributedLayout(version=[3, 0], warps_per_cta=[gl.num_warps(), 1],
                                                         instr_shape=[16, BN, 16], cga_layout=[[1, 0]])
    it = 0
    for tile in range(pid, num_pid_m * num_pid_n, nprog):
        off_m, off_n = tile_offsets(tile, num_pid_m, num_pid_n, CM, BN, GROUP_M)
        acc = gl.zeros([CM, BN], gl.float32, acc_layout)
        for kk in range(k_tiles):
            s = it % STAGES
            mbarrier.wait(ready.index(s), (it // STAGES) & 1)
            acc = mma_step(a_bufs.index(s), b_bufs.index(s), acc, 1)
            prev = (it + STAGES - 1) % STAGES  # the step before has retired: its stage goes back
            mbarrier.arrive(empty_own.index(prev), pred=kk > 0)
            if MULTICAST:
                mbarrier.arrive(empty_pair.index(prev), pred=kk > 0)
            it += 1
        acc = warpgroup_mma_wait(num_outstanding=0, deps=(acc, ))
        last = (it + STAGES - 1) % STAGES
        mbarrier.arrive(empty_own.index(last))
        if MULTICAST:
            mbarrier.arrive(empty_pair.index(last))
        tma.store_wait(pendings=0)  # the previous tile's store has read c_smem
        c_smem.store(acc.to(c_desc.dtype))
        fence_async_shared()
        tma.async_store(c_desc, [off_m, off_n], c_smem)
    tma.store_wait(pendings=0)


@gluon.jit
def cluster_gemm_kernel(a_desc, b_desc, c_desc, BM: gl.constexpr, BN: gl.constexpr, BK: gl.constexpr,
                        STAGES: gl.constexpr, GROUP_M: gl.constexpr, MULTICAST: gl.constexpr):
    CM: gl.constexpr = 2 * BM
    M = c_desc.shape[0]
    N = c_desc.shape[1]
    K = a_desc.shape[1]
    num_pid_m = gl.cdiv(M, CM)
    num_pid_n = gl.cdiv(N, BN)
    k_tiles = gl.cdiv(K, BK)
    pid = gl.program_id(0)  # the cluster's index
    nprog = gl.num_programs(0)

    a_bufs = gl.allocate_shared_memory(a_desc.dtype, [STAGES, CM, BK], a_desc.layout)
    b_bufs = gl.allocate_shared_memory(b_desc.dtype, [STAGES, BK, BN], b_desc.layout)
    c_smem = gl.allocate_shared_memory(c_desc.dtype, [CM, BN], c_desc.layout)
    ready = mbarrier.allocate_mbarrier(batch=STAGES)
    empty_own = mbarrier.allocate_mbarrier(batch=STAGES)
    if MULTICAST:
        empty_pair = mbarrier.allocate_mbarrier(batch=STAGES, two_ctas=True)
    else:  # (unused)
        empty_pair = empty_own
    for i in gl.static_range(STAGES):
        mbarrier.init(ready.index(i), count=1)
        mbarrier.init(empty_own.index(i), count=1)
        if MULTICAST:
            mbarrier.init(empty_pair.index(i), count=1)  # times the 2 CTAs of the group, on CTA 0

    gl.warp_specialize([
        (_consumer, (c_desc, a_bufs, b_bufs, ready, empty_own, empty_pair, c_smem, pid, nprog, num_pid_m,
                     num_pid_n, k_tiles, CM, BN, STAGES, GROUP_M, MULTICAST)),
        (_producer, (a_desc, b_desc, a_bufs, b_bufs, ready, empty_own, empty_pair, pid, nprog, num_pid_m,
                     num_pid_n, k_tiles, CM, BN, BK, STAGES, GROUP_M, MULTICAST)),
    ], [1], [PRODUCER_REGS])


def _layouts(bm: int, bn: int, bk: int):
    """Shared layouts of the A, B and C boxes of a cluster tile: A and C split by rows between the two
    CTAs (cga basis [1, 0]), B the same in both (basis [0, 0]: broadcast, what multicast fills)."""
    cm = CLUSTER * bm
    return [([cm, bk], gl.NVMMASharedLayout.get_default_for([cm, bk], gl.bfloat16, cga_layout=[[1, 0]])),
            ([bk, bn], gl.NVMMASharedLayout.get_default_for([bk, bn], gl.bfloat16, cga_layout=[[0, 0]])),
            ([cm, bn], gl.NVMMASharedLayout.get_default_for([cm, bn], gl.bfloat16, cga_layout=[[1, 0]]))]


def max_registers(consumer_warps: int) -> int:
    return min(256, 65536 // ((consumer_warps + 4) * 32) // 8 * 8)


def save_variant(out_dir: Path, label: str, compiled, **extra) -> dict:
    """Write a compiled variant's cubin, PTX and launch facts (kernel name, warps, CTAs per cluster, shared
    memory, the TMA boxes, the PTX parameter kinds, and `extra`) into out_dir; print a line; return the
    facts."""
    ptx = compiled.asm["ptx"]
    entry = re.search(r"\.entry\s+(\w+)\s*\((.*?)\)", ptx, re.S)
    params = re.findall(r"\.param\s+(.*?)\s+\w+_param_\d+", entry.group(2))
    meta = compiled.metadata
    stem = re.sub(r"[^0-9a-zA-Z]+", "_", label)
    (out_dir / f"{stem}.cubin").write_bytes(compiled.asm["cubin"])
    (out_dir / f"{stem}.ptx").write_text(ptx)
    facts = dict(label=label, name=entry.group(1), num_warps=meta.num_warps, num_ctas=meta.num_ctas,
                 shared=meta.shared, tensordesc_meta=meta.tensordesc_meta, params=params,
                 multicast_copies=len(re.findall(r"multicast::cluster", ptx)),
                 cluster_loads=len(re.findall(r"ld\.shared::cluster", ptx)), **extra)
    (out_dir / f"{stem}.json").write_text(json.dumps(facts, indent=1))
    print(f"{label}: shared {meta.shared} B, {meta.num_warps} warps x {meta.num_ctas} CTAs, "
          f"{len(params)} params, multicast copies {facts['multicast_copies']}, "
          f"loads from other CTAs {facts['cluster_loads']}, "
          f"boxes {[m['block_size'] for m in meta.tensordesc_meta]}")
    return facts


def build(out_dir: Path) -> int:
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor
    from triton.runtime.jit import mangle_type

    if not hasattr(tma, "async_load"):
        sys.exit(f"--build needs triton 3.9+ (Gluon's multicast tma.async_load), not {triton.__version__}")
    out_dir.mkdir(parents=True, exist_ok=True)
    names = cluster_gemm_kernel.arg_names
    for label, consts, warps in VARIANTS:
        sig = {}
        for arg, (box, layout) in zip(("a_desc", "b_desc", "c_desc"), _layouts(consts["BM"], consts["BN"],
                                                                               consts["BK"]), strict=True):
            fake = TensorDescriptor.from_tensor(torch.empty(1024, 1024, dtype=torch.bfloat16), box, layout)
            sig[arg] = mangle_type(fake)
        sig.update({k: "constexpr" for k in consts})
        constexprs = {(names.index(k), ): v for k, v in consts.items()}
        src = GluonASTSource(cluster_gemm_kernel, sig, constexprs=constexprs)
        options = dict(num_warps=warps, num_ctas=CLUSTER, maxnreg=max_registers(warps))
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128), options=options)
        save_variant(out_dir, label, compiled, consts=consts)
    return 0


class _LaunchAttrValue(ctypes.Union):
    _fields_ = [("cluster_dim", ctypes.c_uint * 3), ("pad", ctypes.c_char * 64)]


class _LaunchAttr(ctypes.Structure):
    _fields_ = [("id", ctypes.c_int), ("pad", ctypes.c_char * 4), ("value", _LaunchAttrValue)]


class _LaunchConfig(ctypes.Structure):
    _fields_ = [("grid", ctypes.c_uint * 3), ("block", ctypes.c_uint * 3), ("shared", ctypes.c_uint),
                ("stream", ctypes.c_void_p), ("attrs", ctypes.POINTER(_LaunchAttr)),
                ("num_attrs", ctypes.c_uint)]


_CLUSTER_DIMENSION = 4  # CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION
_MAX_DYNAMIC_SHARED = 8  # CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
_TMA_BF16 = 9  # CU_TENSOR_MAP_DATA_TYPE_BFLOAT16
_L2_PROMOTION_128B = 2


class Driver:
    """The few CUDA driver calls a launch needs, on the context torch made current."""

    def __init__(self) -> None:
        self.cuda = ctypes.CDLL("libcuda.so.1")
        torch.cuda.init()
        torch.empty(1, device="cuda")  # makes the primary context current on this thread

    def check(self, result: int, what: str) -> None:
        if result != 0:
            msg = ctypes.c_char_p()
            self.cuda.cuGetErrorString(result, ctypes.byref(msg))
            raise RuntimeError(f"{what}: CUDA error {result} ({msg.value.decode() if msg.value else '?'})")

    def load(self, cubin: bytes, name: str, shared: int) -> ctypes.c_void_p:
        module, fn = ctypes.c_void_p(), ctypes.c_void_p()
        self.check(self.cuda.cuModuleLoadData(ctypes.byref(module), cubin), "cuModuleLoadData")
        self.check(self.cuda.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()),
                   "cuModuleGetFunction")
        self.check(self.cuda.cuFuncSetAttribute(fn, _MAX_DYNAMIC_SHARED, ctypes.c_int(shared)),
                   "cuFuncSetAttribute")
        return fn

    l2_promotion = _L2_PROMOTION_128B  # triton's choice (driver.c); --l2-promotion changes it

    def tensor_map(self, t: torch.Tensor, box: list[int], swizzle: int) -> ctypes.Array:
        """A CUtensorMap (128 bytes, 64-byte aligned) for a row-major 2-D tensor and a [rows, cols] box."""
        raw = ctypes.create_string_buffer(128 + 64)
        aligned = (ctypes.addressof(raw) + 63) // 64 * 64
        dims = (ctypes.c_uint64 * 2)(t.shape[1], t.shape[0])
        strides = (ctypes.c_uint64 * 1)(t.stride(0) * t.element_size())
        boxes = (ctypes.c_uint32 * 2)(box[1], box[0])
        ones = (ctypes.c_uint32 * 2)(1, 1)
        self.check(self.cuda.cuTensorMapEncodeTiled(
            ctypes.c_void_p(aligned), _TMA_BF16, 2, ctypes.c_void_p(t.data_ptr()), dims, strides, boxes, ones,
            0, swizzle, self.l2_promotion, 0), "cuTensorMapEncodeTiled")
        out = (ctypes.c_uint8 * 128).from_address(aligned)
        out._keep = raw  # the buffer must outlive the view
        return out

    @staticmethod
    def _config(grid: int, facts: dict, stream: int) -> _LaunchConfig:
        attr = _LaunchAttr(id=_CLUSTER_DIMENSION)
        attr.value.cluster_dim[:] = [facts["num_ctas"], 1, 1]
        cfg = _LaunchConfig(shared=facts["shared"], stream=stream, attrs=ctypes.pointer(attr), num_attrs=1)
        cfg.grid[:] = [grid * facts["num_ctas"], 1, 1]
        cfg.block[:] = [32 * facts["num_warps"], 1, 1]
        cfg._attr = attr
        return cfg

    def max_clusters(self, fn, facts: dict) -> int:
        """How many clusters can be resident at once: a persistent grid larger than this runs a second
        wave (two SMs of one GPC per cluster; not every GPC has an even number of SMs free)."""
        count = ctypes.c_int()
        cfg = self._config(1, facts, 0)
        self.check(self.cuda.cuOccupancyMaxActiveClusters(ctypes.byref(count), fn, ctypes.byref(cfg)),
                   "cuOccupancyMaxActiveClusters")
        return count.value

    def launch(self, fn, grid: int, facts: dict, params: list, stream: int) -> None:
        cfg = self._config(grid, facts, stream)
        ptrs = (ctypes.c_void_p * len(params))(*[ctypes.addressof(p) for p in params])
        self.check(self.cuda.cuLaunchKernelEx(ctypes.byref(cfg), fn, ptrs, None), "cuLaunchKernelEx")


def kernel_params(drv: Driver, facts: dict, descs: list[torch.Tensor], scalars: list) -> list:
    """The kernel's parameters in PTX order: per descriptor (descs: the tensors, in argument order) its
    CUtensorMap, shape (u32) and strides (u64); then the other arguments (ctypes values); then triton's
    two scratch pointers (null: these kernels use none). Checked against the PTX's parameter kinds."""
    params = []
    for t, meta in zip(descs, facts["tensordesc_meta"], strict=True):
        params.append(drv.tensor_map(t, meta["block_size"], meta["swizzle"]))
        params += [ctypes.c_uint32(t.shape[0]), ctypes.c_uint32(t.shape[1]),
                   ctypes.c_uint64(t.stride(0)), ctypes.c_uint64(1)]
    params += [*scalars, ctypes.c_uint64(0), ctypes.c_uint64(0)]
    kinds = ["b8" if isinstance(p, ctypes.Array) else ("u32" if isinstance(p, ctypes.c_uint32) else "u64")
             for p in params]
    expected = ["b8" if "b8" in p else ("u32" if "u32" in p else "u64") for p in facts["params"]]
    if kinds != expected:
        raise RuntimeError(f"{facts['label']}: parameters {kinds} do not match the PTX's {expected}")
    return params


def load_variants(drv: Driver, in_dir: Path, pattern: str = "*.json") -> list[tuple[dict, ctypes.c_void_p]]:
    """Every variant saved in in_dir (save_variant): its facts, with how many of its clusters can be
    resident at once, and its loaded function."""
    variants = []
    for path in sorted(in_dir.glob(pattern)):
        facts = json.loads(path.read_text())
        fn = drv.load(path.with_suffix(".cubin").read_bytes(), facts["name"], facts["shared"])
        facts["max_clusters"] = drv.max_clusters(fn, facts)
        print(f"{facts['label']}: at most {facts['max_clusters']} clusters of {facts['num_ctas']} resident")
        variants.append((facts, fn))
    return variants


def run(in_dir: Path, shapes: list[tuple[int, int, int]], args: argparse.Namespace) -> int:
    drv = Driver()
    drv.l2_promotion = args.l2_promotion
    variants = load_variants(drv, in_dir, "2x*.json")
    torch.manual_seed(0)
    rows = []
    for M, N, K in shapes:
        a, b, ref, _, torch_ms = gluon_common.timed_problem(M, N, K)
        for name, cfg in gluon_probe.CONFIGS[:2]:
            launch, c = gluon_probe.prepare(a, b, **cfg)
            rows.append(gluon_common.time_variant(f"1 CTA {name}", (M, N, K), launch, c, ref, torch_ms))
        stream = torch.cuda.current_stream().cuda_stream
        for facts, fn in variants:
            tiles = triton.cdiv(M, CLUSTER * facts["consts"]["BM"]) * triton.cdiv(N, facts["consts"]["BN"])
            grid = min(facts["max_clusters"], tiles)
            c = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
            params = kernel_params(drv, facts, [a, b, c], [])

            def launch(fn=fn, grid=grid, facts=facts, params=params, stream=stream):
                drv.launch(fn, grid, facts, params, stream)

            rows.append(gluon_common.time_variant(facts["label"], (M, N, K), launch, c, ref, torch_ms))
    gluon_common.write_rows(args.json, rows)
    return 0


def bridge_main(doc: str, build_fn, run_fn, default_shapes: list, add_arguments=None) -> int:
    """The command line of a bridged probe: --build DIR here (triton 3.9), --run DIR on the H200 with
    --shapes and --json; add_arguments(parser) adds a probe's own options; run_fn(in_dir, shapes, args)."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--build", metavar="DIR", help="compile the variants for sm_90 into DIR (triton 3.9)")
    parser.add_argument("--run", metavar="DIR", help="time DIR's cubins against torch.mm (on the H200)")
    parser.add_argument("--shapes", metavar="MxNxK,...", help="bf16 problems for --run (default: SHAPES)")
    parser.add_argument("--json", metavar="PATH", help="write --run's rows to PATH")
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: Gluon kernels do not run in the interpreter")
    if args.build:
        return build_fn(Path(args.build))
    if args.run:
        return run_fn(Path(args.run), gluon_common.parse_shapes(args.shapes, default_shapes), args)
    parser.error("give --build DIR or --run DIR")
    return 2


def _l2_promotion_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--l2-promotion", type=int, default=_L2_PROMOTION_128B, choices=range(4),
                        help="CU_TENSOR_MAP_L2_PROMOTION of the descriptors (0 none, 3 256B; triton: 2)")


if __name__ == "__main__":
    sys.exit(bridge_main(__doc__, build, run, SHAPES, _l2_promotion_option))
