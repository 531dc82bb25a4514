"""Probe for issue 15 (small problems): what do device-built TMA descriptors cost a small GEMM's kernel?

The kernels build their tensor descriptors on the device (`tl.make_tensor_descriptor`: each program
writes two descriptors to global scratch and fences before the first load). Host-built descriptors
(`triton.tools.tensor_descriptor.TensorDescriptor`, passed as kernel arguments) skip that. This times
one minimal kernel (one output tile per program, the same K loop) three ways: descriptors built on the
device, built on the host, and plain pointer loads; in CUDA-graph replay (kernel time without the host),
next to torch.mm, bf16. Prints a table; writes JSON with --json.
    python scripts/tma_desc_probe.py [--json out.json]
A probe, not a test: the winner's way moves into tritonblas/kernels/ with the next re-tune.
"""

from __future__ import annotations

import argparse
import json

import triton
import triton.language as tl

SHAPES = [(512, 512, 512), (768, 768, 768), (1000, 1000, 1000), (1024, 1024, 1024), (256, 4096, 4096),
          (2048, 2048, 2048)]
TILES = [(128, 128, 64, 4, 3), (64, 128, 64, 4, 4), (128, 256, 64, 8, 3)]
CALLS = 20


@triton.jit
def _tile_loop(a_src, b_src, a_ptr, b_ptr, M, N, K, stride_am, stride_bk, off_m, off_n,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, MODE: tl.constexpr):
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    rm = (off_m + tl.arange(0, BLOCK_M)) % M
    rn = (off_n + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if MODE == 2:  # pointers
            kk = k * BLOCK_K + rk
            a = tl.load(a_ptr + rm[:, None] * stride_am + kk[None, :], mask=kk[None, :] < K, other=0.0)
            b = tl.load(b_ptr + kk[:, None] * stride_bk + rn[None, :], mask=kk[:, None] < K, other=0.0)
        else:
            a = a_src.load([off_m, k * BLOCK_K])
            b = b_src.load([k * BLOCK_K, off_n])
        acc = tl.dot(a, b, acc)
    return acc


@triton.jit
def probe_gemm_kernel(a_ptr, b_ptr, c_ptr, a_host, b_host, M, N, K, stride_am, stride_bk, stride_cm,
                      BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                      MODE: tl.constexpr):
    """MODE 0: descriptors built here (as tritonblas' kernels do); 1: host-built (a_host, b_host);
    2: pointer loads."""
    pid = tl.program_id(0)
    grid_n = tl.cdiv(N, BLOCK_N)
    off_m = (pid // grid_n) * BLOCK_M
    off_n = (pid % grid_n) * BLOCK_N
    if MODE == 0:
        a_src = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
        b_src = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    else:
        a_src, b_src = a_host, b_host
    acc = _tile_loop(a_src, b_src, a_ptr, b_ptr, M, N, K, stride_am, stride_bk, off_m, off_n,
                     BLOCK_M, BLOCK_N, BLOCK_K, MODE)
    rm = off_m + tl.arange(0, BLOCK_M)
    rn = off_n + tl.arange(0, BLOCK_N)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    tl.store(c_ptr + rm[:, None] * stride_cm + rn[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


def launch(a, b, c, tile, mode):
    from triton.tools.tensor_descriptor import TensorDescriptor

    bm, bn, bk, warps, stages = tile
    m, k = a.shape
    n = b.shape[1]
    a_host = TensorDescriptor.from_tensor(a, [bm, bk]) if mode == 1 else None
    b_host = TensorDescriptor.from_tensor(b, [bk, bn]) if mode == 1 else None
    grid = (triton.cdiv(m, bm) * triton.cdiv(n, bn),)
    probe_gemm_kernel[grid](a, b, c, a_host, b_host, m, n, k, a.stride(0), b.stride(0), c.stride(0),
                            BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, MODE=mode, num_warps=warps,
                            num_stages=stages)


def graph_us(fn) -> float:
    import torch
    from triton.testing import do_bench

    fn()
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    return do_bench(graph.replay, warmup=10, rep=100) * 1000 / CALLS


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("tma_desc_probe.py measures on a GPU; none is available")

    def alloc(size: int, alignment: int, stream) -> torch.Tensor:
        return torch.empty(size, dtype=torch.int8, device="cuda")

    triton.set_allocator(alloc)  # device-built descriptors live in global scratch
    rows = []
    print(f"{'shape':>14} {'torch':>7} {'device':>7} {'host':>7} {'pointer':>7}  (us per call, graph replay)")
    for m, n, k in SHAPES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        c = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        ref = (a.float() @ b.float())
        row = {"m": m, "n": n, "k": k, "torch_us": graph_us(lambda a=a, b=b: torch.mm(a, b))}
        for mode, name in ((0, "device"), (1, "host"), (2, "pointer")):
            best = None
            for tile in TILES:
                try:
                    launch(a, b, c, tile, mode)
                    err = ((c.float() - ref).norm() / ref.norm()).item()
                    us = graph_us(lambda a=a, b=b, c=c, tile=tile, mode=mode: launch(a, b, c, tile, mode))
                except Exception as exc:  # noqa: BLE001 (a probe: report and go on)
                    print(f"  {name} {tile}: {type(exc).__name__}: {str(exc)[:80]}")
                    continue
                if err < 1e-2 and (best is None or us < best[0]):
                    best = (us, tile)
            row[f"{name}_us"], row[f"{name}_tile"] = best if best else (None, None)
        rows.append(row)
        cells = " ".join("-".rjust(7) if row[f"{x}_us"] is None else f"{row[f'{x}_us']:7.2f}"
                         for x in ("device", "host", "pointer"))
        print(f"{m}x{n}x{k:<5} {row['torch_us']:7.2f} {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
