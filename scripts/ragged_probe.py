"""Which ragged dimension makes a GEMM slow: the same configs on 1024^3 and on shapes that change one
dimension at a time to a size that is not a multiple of 16 (or of the tile), next to torch.mm.

Usage (GPU host): python scripts/ragged_probe.py [--dtype bf16] [--json out.json]
A benchmark, not a test: median of triton.testing.do_bench, random data. Found with it: 1000^3 ran
10x slower than 1024^3 with the same config (tuning run of 2026-11-30).
"""

from __future__ import annotations

import argparse
import json

from tritonblas import GemmConfig

SHAPES = [(1024, 1024, 1024), (1000, 1024, 1024), (1024, 1000, 1024), (1024, 1024, 1000),
          (1008, 1008, 1008), (1000, 1000, 1000)]
CONFIGS = {
    "ptr 128x64x128": GemmConfig(block_m=128, block_n=64, block_k=128, num_warps=4, num_stages=3),
    "tma 128x128x64": GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=4, tma=True),
}


def median_ms(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=5, rep=30, return_mode="median")


def probe(m: int, n: int, k: int, dtype) -> dict:
    import torch

    import tritonblas

    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    row = {"shape": [m, n, k], "torch_us": 1e3 * median_ms(lambda: torch.mm(a, b, out=out))}
    for name, cfg in CONFIGS.items():
        try:
            row[name] = 1e3 * median_ms(lambda cfg=cfg: tritonblas.matmul(a, b, out=out, config=cfg))
        except Exception as exc:  # an infeasible config for this shape is a row entry, not a crash
            row[name] = f"{type(exc).__name__}"
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dtype", choices=["fp16", "bf16"], default="bf16")
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("ragged_probe.py measures on a GPU; none is available")
    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16}[args.dtype]
    rows = []
    print(f"{'shape':>16} {'torch us':>9} " + " ".join(f"{name:>16}" for name in CONFIGS))
    for m, n, k in SHAPES:
        row = probe(m, n, k, dtype)
        rows.append(row)
        cells = " ".join(f"{row[name]:16.1f}" if isinstance(row[name], float) else f"{row[name]:>16}"
                         for name in CONFIGS)
        print(f"{'x'.join(map(str, (m, n, k))):>16} {row['torch_us']:9.1f} {cells}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)


if __name__ == "__main__":
    main()
