"""Is a small GEMM bound by the GPU or by the host? Eager vs CUDA-graph replay, ours and torch.mm.

Usage (GPU host): python scripts/graph_probe.py [--shapes 1000x1000x1000,1024x1024x1024] [--dtype bf16]
Per shape (median of do_bench, us): tritonblas.matmul(out=) and torch.mm(out=) called eagerly, then
each captured in a CUDA graph of 20 calls and replayed (per call). Eager minus graph is the host's
share of the eager time; when ours is host-bound and torch's is not, launch cost is the lever.
"""

from __future__ import annotations

import argparse

CALLS = 20


def us(fn, per: int = 1) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=100) * 1000 / per


def graphed(fn):
    import torch

    fn()  # compile and warm up outside the capture
    torch.cuda.synchronize()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        for _ in range(CALLS):
            fn()
    return graph.replay


def measure(m: int, n: int, k: int, dtype) -> list[float | None]:
    import torch

    import tritonblas

    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    row: list[float | None] = []
    # backend="triton": our kernels (dispatch may give these shapes to torch.mm itself on an H200).
    for fn in (lambda: tritonblas.matmul(a, b, out=out, backend="triton"), lambda: torch.mm(a, b, out=out)):
        row.append(us(fn))
        try:
            row.append(us(graphed(fn), CALLS))
        except RuntimeError as exc:  # a call that cannot be captured: say so, keep going
            print(f"  capture failed: {exc}")
            row.append(None)
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1000x1000x1000,1024x1024x1024,768x2304x768,2048x2048x2048")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    args = ap.parse_args()
    import torch

    import tritonblas

    if not torch.cuda.is_available():
        raise SystemExit("graph_probe.py measures on a GPU; none is available")
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    print(f"{'shape':>16} {'ours eager':>10} {'ours graph':>10} {'torch eager':>11} {'torch graph':>11}  "
          "config")
    for shape in args.shapes.split(","):
        m, n, k = (int(x) for x in shape.split("x"))
        cells = " ".join("-".rjust(w) if t is None else f"{t:{w}.1f}"
                         for t, w in zip(measure(m, n, k, dtype), (10, 10, 11, 11), strict=True))
        sel = tritonblas.select(m, n, k, dtype, device=torch.device("cuda"), backend="triton")
        config = sel.config.short()
        print(f"{shape:>16} {cells}  {config}", flush=True)


if __name__ == "__main__":
    main()
