"""Why a row that runs torch.addmm on both sides can read below 1.0x: the same vendor call, spelled
the ways the bench's two sides spell it, timed side by side (issue 17's decode F.linear rows).

Usage (GPU host):
    python scripts/vendor_probe.py [--json vendor.json]
Per problem (bf16, layout nt, row bias: F.linear's x @ W.T + b), median of do_bench (L2 flushed, as
the bench) over three alternating rounds, us per call:
    bench    torch.addmm(bias, a, b, out=o)                       the bench's torch side
    scalars  torch.addmm(bias, a, b, beta=1.0, alpha=1.0, out=o)   what our vendor path calls
    fresh    torch.addmm(bias, a, b)                               F.linear's call (a new output)
    ours     tritonblas.addmm(bias, a, b, out=o)                  dispatch, as the bench's our side
    pinned   tritonblas.addmm(..., backend="torch")
and the CUDA kernels one call of each launches (torch.profiler), to see whether the paths differ.
"""

from __future__ import annotations

import argparse
import json
import statistics

PROBLEMS = [(1, 4096, 4096), (1, 6144, 4096), (32, 4096, 4096), (1, 4096, 14336), (1024, 1024, 512)]
ROUNDS = 3


def variants(a, b, bias, out):
    import torch

    import tritonblas

    return {
        "bench": lambda: torch.addmm(bias, a, b, out=out),
        "scalars": lambda: torch.addmm(bias, a, b, beta=1.0, alpha=1.0, out=out),
        "fresh": lambda: torch.addmm(bias, a, b),
        "ours": lambda: tritonblas.addmm(bias, a, b, out=out),
        "pinned": lambda: tritonblas.addmm(bias, a, b, out=out, backend="torch"),
    }


def kernel_events(fn) -> list[tuple[str, float]]:
    """(name, CUDA time in us) of each kernel one call of `fn` launches, after a warm call (torch.profiler);
    scripts/vendor_kernels.py uses it too."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        fn()
        torch.cuda.synchronize()
    return [(e.name, e.device_time_total) for e in prof.events() if e.device_type.name == "CUDA"]


def kernels_of(fn) -> list[str]:
    return [name[:60] for name, _ in kernel_events(fn)]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    import torch
    import triton.testing

    rows = []
    for m, n, k in PROBLEMS:
        gen = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16, generator=gen)
        b = torch.randn(n, k, device="cuda", dtype=torch.bfloat16, generator=gen).t()
        bias = torch.randn(n, device="cuda", dtype=torch.bfloat16, generator=gen)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        fns = variants(a, b, bias, out)
        times = {name: [] for name in fns}
        for _ in range(ROUNDS):
            for name, fn in fns.items():
                times[name].append(triton.testing.do_bench(fn, warmup=25, rep=100) * 1e3)
        row = {"problem": f"{m}x{n}x{k}", **{name: statistics.median(t) for name, t in times.items()},
               "kernels": {name: kernels_of(fn) for name, fn in fns.items()}}
        rows.append(row)
        print(row["problem"], " ".join(f"{name} {row[name]:.1f}" for name in fns), flush=True)
        for name, ks in row["kernels"].items():
            print(f"    {name}: {ks}", flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
