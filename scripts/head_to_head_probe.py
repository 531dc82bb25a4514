"""The bench's side-by-side timing on rows where both sides run the same cuBLAS call: how far from
1.0 does ours/torch read, and does it repeat? (the small torch-vs-torch rows below 0.97x).

Usage (GPU host):
    python scripts/head_to_head_probe.py [--repeats 3] [--json h2h.json]
Per problem (bf16, nn, no bias) and backend (None: dispatch, which picks torch.mm on these shapes in
the shipped file; "torch": pinned), `--repeats` fresh GpuBenchmark.head_to_head runs, as `tritonblas
bench` times a row (interleaved calls, L2 flushed before each), printing torch's median over ours.
"""

from __future__ import annotations

import argparse
import json

PROBLEMS = [(8, 4096, 4096), (128, 128, 8192), (1000, 1000, 1001), (1024, 1024, 512), (4096, 4096, 4096)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="head_to_head runs per problem and backend")
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    import torch

    from tritonblas.config import Problem
    from tritonblas.device import device_info
    from tritonblas.tuning.benchmark import GpuBenchmark

    info = device_info(torch.device("cuda"))
    rows = []
    for m, n, k in PROBLEMS:
        problem = Problem(m, n, k, "bf16")
        for backend in (None, "torch"):
            ratios = []
            for _ in range(args.repeats):
                bench = GpuBenchmark(backend=backend)
                ours, torch_ms = bench.head_to_head(None, problem, info)
                bench.finish(problem)
                ratios.append(torch_ms / ours.median_ms)
            rows.append({"problem": f"{m}x{n}x{k}", "backend": backend, "ratios": ratios})
            print(f"{m}x{n}x{k} backend={backend}: torch/ours " + " ".join(f"{r:.3f}" for r in ratios),
                  flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
