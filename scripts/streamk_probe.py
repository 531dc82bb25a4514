"""Where Stream-K loses its time: the shipped (K-aligned) Stream-K kernel next to the classic tile-major
split it replaced, the persistent kernel with the same tiles, and torch.mm, with each compiled
kernel's registers and spills.

Variants (same signature as the shipped kernel, launched through launch.py's plans):
  shipped    tritonblas/kernels/streamk.py: each leftover tile's K range cut into programs // tiles
             segments, programs running the same K range of different tiles at the same time
  tilemajor  classic Stream-K, shipped until 2026-11-30: program p owns global iterations
             [p*q + min(p, r), ...) of the leftover tiles in tile-major order, so programs are
             staggered along K
  nofix      tilemajor where every segment only stores its partial: no counters, no fix-up (wrong
             results; the split loop's own cost)
Also measured on 2026-11-30 and dropped: tilemajor's split part as a `while` (as shipped then) vs a
`for` over tiles, and a fix-up reading two partials per step (all within 3%).
Usage (GPU host): python scripts/streamk_probe.py [--json out.json]. A benchmark, not a test.
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
import triton.testing

from tritonblas import GemmConfig, launch
from tritonblas.kernels.common import epilogue, k_loop, make_operand_descs, tile_coords


@triton.jit
def _iter_start(p, q, r):
    return p * q + min(p, r)


@triton.jit
def _iter_owner(i, q, r):
    """The program that owns global Stream-K iteration i (tile-major split)."""
    big = r * (q + 1)
    return tl.where(i < big, i // (q + 1), r + (i - big) // max(q, 1))


@triton.jit
def _slot(p, sk_tile, q, r, ITERS_PER_TILE):
    first_tile = _iter_start(p, q, r) // ITERS_PER_TILE
    return 2 * p + tl.where(sk_tile == first_tile, 0, 1)


@triton.jit
def _fixup(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
           stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, tile_begin, iters_per_tile, q, r,
           tile_offs, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr,
           FIX: tl.constexpr):
    first = _iter_owner(tile_begin, q, r)
    last = _iter_owner(tile_begin + iters_per_tile - 1, q, r)
    if FIX == 0:
        tl.store(ws_ptr + _slot(pid, sk_tile, q, r, iters_per_tile) * BLOCK_M * BLOCK_N + tile_offs, acc)
    elif first == last:
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)
    else:
        my_slot = _slot(pid, sk_tile, q, r, iters_per_tile)
        tl.store(ws_ptr + my_slot * BLOCK_M * BLOCK_N + tile_offs, acc, cache_modifier=".cg")
        tl.debug_barrier()
        arrived = tl.atomic_add(counter_ptr + sk_tile, 1, sem="acq_rel", scope="gpu")
        if arrived == last - first:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for p in range(first, last + 1):
                s = _slot(p, sk_tile, q, r, iters_per_tile)
                total += tl.load(ws_ptr + s * BLOCK_M * BLOCK_N + tile_offs, cache_modifier=".cg")
            epilogue(total, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                     alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)
            tl.atomic_xchg(counter_ptr + sk_tile, 0, sem="relaxed", scope="gpu")


@triton.jit
def _variant(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS,
             stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
             alpha, beta, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
             GROUP_M: tl.constexpr, HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
             USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr,
             B_DIV: tl.constexpr, FIX: tl.constexpr):
    a_desc, b_desc = a_ptr, b_ptr
    if USE_TMA:
        a_desc, b_desc = make_operand_descs(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk,
                                            stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, A_COL, B_COL)
    pid = tl.program_id(0)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters_per_tile = tl.cdiv(K, BLOCK_K)
    dp_tiles = (num_tiles // NUM_PROGS) * NUM_PROGS
    for tile_id in range(pid, dp_tiles, NUM_PROGS):
        pid_m, pid_n = tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, 0, iters_per_tile, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K,
                     PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV)
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS)
    total = (num_tiles - dp_tiles) * iters_per_tile
    q = total // NUM_PROGS
    r = total % NUM_PROGS
    it = _iter_start(pid, q, r)
    my_end = _iter_start(pid + 1, q, r)
    tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
    first_tile = it // iters_per_tile
    end_tile = tl.where(my_end > it, tl.cdiv(my_end, iters_per_tile), first_tile)
    for sk_tile in range(first_tile, end_tile):
        tile_begin = sk_tile * iters_per_tile
        seg_start = max(it, tile_begin)
        seg_end = min(my_end, tile_begin + iters_per_tile)
        pid_m, pid_n = tile_coords(dp_tiles + sk_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, seg_start - tile_begin, seg_end - tile_begin,
                     BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV)
        _fixup(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
               stride_biasn, alpha, beta, pid, pid_m, pid_n, sk_tile, tile_begin, iters_per_tile, q, r,
               tile_offs, BLOCK_M, BLOCK_N, HAS_BIAS, FIX)


@triton.jit
def sk_tilemajor(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS, stride_am, stride_ak,
                 stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn, alpha, beta,
                 BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
                 HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
                 A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr,
                 FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr):
    _variant(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS, stride_am, stride_ak,
             stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn, alpha, beta, BLOCK_M,
             BLOCK_N, BLOCK_K, GROUP_M, HAS_BIAS, EVEN_K, PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV, 1)


@triton.jit
def sk_nofix(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS, stride_am, stride_ak,
             stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn, alpha, beta,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
             HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
             A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr,
             FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr):
    _variant(a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS, stride_am, stride_ak,
             stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn, alpha, beta, BLOCK_M,
             BLOCK_N, BLOCK_K, GROUP_M, HAS_BIAS, EVEN_K, PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV, 0)


CASES = [  # (m, n, k, [configs]); persistent configs get "P", Stream-K ones every variant
    (256, 256, 65536, ["SK 128x64x128 w8 s4", "SK 128x128x64 w8 s3", "SK 128x128x128 w8 s3",
                       "SK 256x128x64 w8 s3"]),
    (512, 1024, 32768, ["P 64x64x128 w4 s5", "SK 128x128x64 w8 s3", "SK 128x128x64 w8 s4 tma",
                        "SK 128x256x64 w8 s3"]),
    (1536, 1536, 12288, ["SK 128x128x64 w4 s5", "SK 128x256x64 w8 s3", "SK 128x256x64 w8 s3 tma"]),
    (1920, 1920, 8192, ["P 128x256x64 w8 s3", "SK 128x256x64 w8 s3 tma"]),
    (3000, 2000, 5000, ["SK 128x256x64 w8 s3 tma", "P 128x256x64 w8 s3 tma"]),
    (512, 6144, 4096, ["P 128x256x64 w8 s4 tma", "SK 128x128x64 w8 s4 tma"]),
]


def parse(text: str) -> GemmConfig:
    fam, blocks, warps, stages, *flags = text.split()
    bm, bn, bk = map(int, blocks.split("x"))
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=int(warps[1:]),
                      num_stages=int(stages[1:]), streamk=fam == "SK", tma="tma" in flags)


def time_case(a, b, c, cfg: GemmConfig, sm_count: int) -> tuple[float, float, int, int]:
    """(median us, relative error vs torch.mm, registers, spills) of one launch path."""
    launch._plans.clear()
    m, k = a.shape
    n = b.shape[1]
    # The tile-major variants write up to two partials per program: twice the shipped kernel's scratch
    # (the workspace grows, never shrinks, so the launch reuses this one).
    launch._workspace(c.device, 2 * launch.program_count(cfg, m, n, k, sm_count) * cfg.block_m * cfg.block_n,
                      -(-m // cfg.block_m) * -(-n // cfg.block_n))
    fn = lambda: launch.launch_gemm(a, b, c, None, 1.0, 0.0, cfg, sm_count, "tf32")  # noqa: E731
    fn()
    if c.is_cuda:
        torch.cuda.synchronize()
    ref = torch.mm(a.float(), b.float())
    err = ((c.float() - ref).norm() / ref.norm()).item()
    us = 1e3 * triton.testing.do_bench(fn, warmup=10, rep=60, return_mode="median")
    compiled = next(iter(launch._plans.values())).compiled
    return us, err, getattr(compiled, "n_regs", -1), getattr(compiled, "n_spills", -1)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json")
    args = ap.parse_args()
    sm_count = torch.cuda.get_device_properties(0).multi_processor_count
    persistent, shipped_sk = launch._kernels()
    variants = {"shipped": shipped_sk, "tilemajor": sk_tilemajor, "nofix": sk_nofix}
    rows = []
    print(f"{'shape':>16} {'config':>26} {'variant':>8} {'us':>8} {'TFLOP/s':>8} {'vs mm':>6} "
          f"{'regs':>5} {'spill':>5} {'err':>8}")
    for m, n, k, configs in CASES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        mm_us = 1e3 * triton.testing.do_bench(lambda a=a, b=b, c=c: torch.mm(a, b, out=c), warmup=10, rep=60,
                                              return_mode="median")
        flops = 2 * m * n * k
        rows.append({"shape": [m, n, k], "config": "torch.mm", "variant": "", "us": mm_us})
        print(f"{m}x{n}x{k:>6} {'torch.mm':>26} {'':>8} {mm_us:8.1f} {flops / mm_us / 1e6:8.1f}")
        for text in configs:
            cfg = parse(text)
            for name in (["shipped", "tilemajor", "nofix"] if cfg.streamk else ["P"]):
                # The variant stays in place for this config's launches only (plans are cleared).
                launch._kernels = (lambda v=variants.get(name, shipped_sk): (persistent, v))
                try:
                    us, err, regs, spills = time_case(a, b, c, cfg, sm_count)
                except Exception as exc:  # a config triton refuses is a row, not a crash
                    print(f"{m}x{n}x{k:>6} {text:>26} {name:>8} {type(exc).__name__}: {str(exc)[:80]}")
                    continue
                rows.append({"shape": [m, n, k], "config": text, "variant": name, "us": us, "err": err,
                             "regs": regs, "spills": spills, "vs_mm": mm_us / us})
                print(f"{m}x{n}x{k:>6} {text:>26} {name:>8} {us:8.1f} {flops / us / 1e6:8.1f} "
                      f"{mm_us / us:6.2f} {regs:5d} {spills:5d} {err:8.1e}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
