# ruff: noqa: B023  (each lambda is timed by do_bench in the iteration that makes it)
"""Probe for issue 16: how fast can a split-K kernel stream the weights of a skinny GEMM (M <= 64)?

Times, per problem, torch.mm, dispatch as shipped, the existing Stream-K kernel with small tiles and
split grids, and a prototype split-K kernel (below) over a small space: tl.dot tiles, or FMA for M = 1,
with the K split chosen so that 1, 2, 4 or 8 programs per SM run. Prints a table and writes JSON.
    python scripts/skinny_probe.py --json out.json
A probe, not a test; the prototype moves into tritonblas/kernels/ if it wins.
"""

import argparse
import json
import statistics
import sys

import torch
import triton
import triton.language as tl


@triton.jit
def splitk_probe_kernel(a_ptr, b_ptr, c_ptr, ws_ptr, cnt_ptr, M, N, K, SPLIT_K, ITERS_PER_SPLIT,
                        stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                        BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                        USE_DOT: tl.constexpr, STAGES: tl.constexpr):
    pid_n = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_m = tl.program_id(2)
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    it0 = pid_k * ITERS_PER_SPLIT
    it1 = min(it0 + ITERS_PER_SPLIT, tl.cdiv(K, BLOCK_K))
    rm_c = rm % M
    rn_c = rn % N
    a_ptrs = a_ptr + rm_c[:, None] * stride_am + (it0 * BLOCK_K + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + (it0 * BLOCK_K + rk)[:, None] * stride_bk + rn_c[None, :] * stride_bn
    if USE_DOT:
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    else:
        acc2 = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for it in tl.range(it0, it1, num_stages=STAGES):
        kmask = (it * BLOCK_K + rk) < K
        a = tl.load(a_ptrs, mask=kmask[None, :], other=0.0)
        b = tl.load(b_ptrs, mask=kmask[:, None], other=0.0)
        if USE_DOT:
            acc = tl.dot(a, b, acc)
        else:
            acc2 += tl.reshape(a, (BLOCK_K,)).to(tl.float32)[:, None] * b.to(tl.float32)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not USE_DOT:
        acc = tl.reshape(tl.sum(acc2, axis=0), (BLOCK_M, BLOCK_N))
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if SPLIT_K == 1:
        tl.store(c_ptrs, acc.to(c_ptr.dtype.element_ty), mask=mask)
    else:
        tile = pid_m * tl.num_programs(0) + pid_n
        tile_offs = tl.arange(0, BLOCK_M)[:, None] * BLOCK_N + tl.arange(0, BLOCK_N)[None, :]
        slot = (tile * SPLIT_K + pid_k).to(tl.int64)
        tl.store(ws_ptr + slot * BLOCK_M * BLOCK_N + tile_offs, acc, cache_modifier=".cg")
        tl.debug_barrier()
        arrived = tl.atomic_add(cnt_ptr + tile, 1, sem="acq_rel", scope="gpu")
        if arrived == SPLIT_K - 1:
            total = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
            for j in range(0, SPLIT_K):
                s = (tile * SPLIT_K + j).to(tl.int64)
                total += tl.load(ws_ptr + s * BLOCK_M * BLOCK_N + tile_offs, cache_modifier=".cg")
            tl.store(c_ptrs, total.to(c_ptr.dtype.element_ty), mask=mask)
            tl.atomic_xchg(cnt_ptr + tile, 0, sem="relaxed", scope="gpu")


def probe_launch(a, b, c, ws, cnt, bm, bn, bk, warps, stages, split, use_dot):
    m, k = a.shape
    n = b.shape[1]
    iters = triton.cdiv(k, bk)
    per = triton.cdiv(iters, split)
    split = triton.cdiv(iters, per)
    grid = (triton.cdiv(n, bn), split, triton.cdiv(m, bm))
    splitk_probe_kernel[grid](a, b, c, ws, cnt, m, n, k, split, per, a.stride(0), a.stride(1),
                              b.stride(0), b.stride(1), c.stride(0), c.stride(1), BLOCK_M=bm, BLOCK_N=bn,
                              BLOCK_K=bk, USE_DOT=use_dot, STAGES=stages, num_warps=warps)
    return split


PROBLEMS = [  # (m, n, k, layout): skinny.yaml's, the decode of F.linear (nt), misaligned skinny ones
    (1, 4096, 4096, "nn"), (32, 4096, 4096, "nn"), (16, 14336, 4096, "nn"), (48, 4096, 14336, "nn"),
    (1, 32000, 4096, "nn"), (1, 4096, 14336, "nt"), (32, 6144, 4096, "nt"), (1, 50257, 768, "nn"),
    (100, 30522, 1023, "nn"), (8192, 16, 4096, "nn"), (16384, 64, 2048, "nn"),
]

TILES = [(64, 256, 4), (128, 128, 4), (32, 256, 4), (128, 256, 8), (256, 64, 8), (64, 128, 4)]


def operands(m, n, k, layout, dtype):
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(n, k, device="cuda", dtype=dtype).t() if layout == "nt" else \
        torch.randn(k, n, device="cuda", dtype=dtype)
    return a, b


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", default="skinny_probe.json")
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    from triton.testing import do_bench

    import tritonblas

    dtype = torch.bfloat16
    rows = []
    ws = torch.empty(64 * 1024 * 1024, device="cuda", dtype=torch.float32)
    cnt = torch.zeros(1 << 20, device="cuda", dtype=torch.int32)
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    for m, n, k, layout in PROBLEMS:
        a, b = operands(m, n, k, layout, dtype)
        transpose = n < m  # N is the small side: C^T = B^T A^T
        ref = (a.double() @ b.double())
        torch_ms = do_bench(lambda: torch.mm(a, b), rep=100)
        disp_ms = do_bench(lambda: tritonblas.matmul(a, b), rep=100)
        best = None
        pa, pb = (b.t(), a.t()) if transpose else (a, b)
        pm, pn = pa.shape[0], pb.shape[1]
        c = torch.empty(pm, pn, device="cuda", dtype=dtype)
        bms = [1, 16] if pm == 1 else [min(64, max(16, triton.next_power_of_2(pm)))]
        for bm in bms:
            for bk, bn, warps in TILES:
                use_dot = bm >= 16
                if not use_dot and bk * bn > 16384:
                    bk = 16384 // bn
                for stages in (1, 3, 5):
                    tiles = triton.cdiv(pn, bn) * triton.cdiv(pm, bm)
                    for per_sm in (1, 2, 4, 8):
                        split = max(1, round(per_sm * sms / tiles))
                        try:
                            got = probe_launch(pa, pb, c, ws, cnt, bm, bn, bk, warps, stages, split, use_dot)
                            out = c.t() if transpose else c
                            err = ((out.double() - ref).norm() / ref.norm()).item()
                            ms = do_bench(lambda: probe_launch(pa, pb, c, ws, cnt, bm, bn, bk, warps, stages,
                                                               split, use_dot), rep=50)
                        except Exception as exc:  # noqa: BLE001 (a probe: report and go on)
                            print(f"  {bm}x{bn}x{bk} w{warps} s{stages}: {type(exc).__name__}", flush=True)
                            break
                        row = dict(m=m, n=n, k=k, layout=layout, bm=bm, bn=bn, bk=bk, warps=warps,
                                   stages=stages, split=got, us=ms * 1e3, err=err)
                        rows.append(row)
                        if err < 1e-2 and (best is None or ms < best[0]):
                            best = (ms, row)
                    if args.quick:
                        break
        sk_best = None
        for bk, bn, warps in ((256, 64, 4), (128, 128, 4), (64, 256, 8)):
            bm = min(64, max(16, triton.next_power_of_2(min(m, n))))
            tiles = triton.cdiv(pm, bm) * triton.cdiv(pn, bn)
            for mult in (2, 4, 8):
                cfg = dict(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=4,
                           streamk=True, grid=min(tiles * mult, 4 * sms))
                try:
                    config = tritonblas.GemmConfig(**cfg)
                    ms = do_bench(lambda: tritonblas.matmul(a, b, config=config), rep=50)
                except Exception as exc:  # noqa: BLE001
                    print(f"  SK {cfg}: {type(exc).__name__}: {str(exc)[:100]}", flush=True)
                    continue
                if sk_best is None or ms < sk_best[0]:
                    sk_best = (ms, config.short())
        print(f"  existing Stream-K best: {sk_best}", flush=True)
        lim_us = max(2 * m * n * k / 800e12, (m * k + k * n + m * n) * 2 / 4.3e12) * 1e6
        b_ms, b_row = best
        print(f"{m}x{n}x{k} {layout}: torch {torch_ms*1e3:.1f} us, dispatch {disp_ms*1e3:.1f}, probe best "
              f"{b_ms*1e3:.1f} ({b_row['bm']}x{b_row['bn']}x{b_row['bk']} w{b_row['warps']} "
              f"s{b_row['stages']} split {b_row['split']}) -> {torch_ms/b_ms:.2f}x torch, "
              f"{lim_us/(b_ms*1e3):.2f} of limit ({lim_us:.1f} us)", flush=True)
        rows.append(dict(m=m, n=n, k=k, layout=layout, torch_us=torch_ms * 1e3, dispatch_us=disp_ms * 1e3,
                         best_us=b_ms * 1e3, limit_us=lim_us,
                         sk_us=sk_best[0] * 1e3 if sk_best else None, sk=sk_best and sk_best[1]))
    json.dump(rows, open(args.json, "w"), indent=1)
    print("geomean best/torch:", statistics.geometric_mean(
        [r["torch_us"] / r["best_us"] for r in rows if "best_us" in r]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
