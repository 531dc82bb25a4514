"""Which cuBLAS kernel torch.mm launches for each problem, and its time (one call under torch.profiler):
tile shape, split-K or not, and whether a reduce kernel follows, to read what the vendor does where our
kernels lose (docs/benchmarks/h200.md, ninth session).

Usage (GPU host): python scripts/vendor_kernels.py [--shapes scripts/classes/streamk.yaml] [--dtype bf16]
Prints one line per problem: m n k, then (kernel name, its CUDA time in us) for each kernel launched.
"""

from __future__ import annotations

import argparse

# The streamk and small classes' problems (scripts/classes/), as the ninth session ran them.
PROBLEMS = [(1024, 1024, 16384), (512, 512, 32768), (2048, 2048, 8192), (1792, 1792, 8192), (768, 3072, 8192),
            (2176, 2176, 4096), (6144, 1024, 8192), (256, 2048, 28672), (768, 768, 768), (1024, 1024, 512),
            (128, 128, 8192), (512, 1024, 256)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", help="a shapes file instead of the built-in problems (layout nn)")
    parser.add_argument("--dtype", default="bf16", choices=["bf16", "fp16"])
    args = parser.parse_args()
    import torch
    from vendor_probe import kernel_events  # scripts/ is this script's directory

    problems = PROBLEMS
    if args.shapes:
        from tritonblas.shapes import load_problems

        problems = sorted({(p.m, p.n, p.k) for p in load_problems(args.shapes)})
    dtype = torch.bfloat16 if args.dtype == "bf16" else torch.float16
    for m, n, k in problems:
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        kernels = [(name[:110], round(us, 1)) for name, us in kernel_events(lambda a=a, b=b: torch.mm(a, b))]
        print(m, n, k, kernels, flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
