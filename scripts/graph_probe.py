"""Kernel time without the host: eager vs CUDA-graph replay, ours and torch's op, against the roofline.

Usage (GPU host):
    python scripts/graph_probe.py [--shapes 1000x1000x1000,1024x1024x1024] [--dtype bf16]
    python scripts/graph_probe.py --shapes scripts/classes/small.yaml --json small-graph.json
    python scripts/graph_probe.py --shapes scripts/classes/skinny.yaml --rotate-mb 256 --json skinny.json
Per problem (median of do_bench, us per call): tritonblas.matmul / addmm (out=) and torch.mm / addmm
(out=) called eagerly, then each captured in a CUDA graph of 20 calls and replayed. Eager minus graph
is the host's share of the eager time (and do_bench's L2 flush); graph time over the class README's
limit, max(FLOPs / 800 TFLOP/s, bytes / 4.3 TB/s), is how close a kernel runs to the chip.
--shapes takes "MxNxK,..." (with --dtype, layout nn, no bias) or a shapes.yaml file (its dtypes,
layouts and biases). --rotate-mb N cycles through copies of the operands that total at least N MB, so
that no call finds its operands in L2 (the H200's is 50 MB): the skinny class's bandwidth target asks
for that. --backend: our side's restriction (default "triton", the kernels; "dispatch": whatever
dispatch runs, torch.mm included).
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics

CALLS = 20
PEAK_TFLOPS, BANDWIDTH_TBS = 800.0, 4.3  # the class README's roofline (H200)


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


def problems_of(spec: str, dtype: str):
    from tritonblas import Problem
    from tritonblas.shapes import load_problems

    if spec.endswith((".yaml", ".yml")):
        return load_problems(spec)
    return [Problem(*(int(x) for x in s.split("x")), dtype) for s in spec.split(",")]


def operand_set(problem, device):
    """(a, b, bias or None, out) of the problem's dtype, layout and bias kind, random N(0, 1)."""
    import torch

    dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[problem.dtype]
    m, n, k = problem.m, problem.n, problem.k

    def operand(rows: int, cols: int, transposed: bool):
        if transposed:
            return torch.randn(cols, rows, device=device, dtype=dt).t()
        return torch.randn(rows, cols, device=device, dtype=dt)

    shape = {"none": None, "scalar": (1, 1), "row": (n,), "column": (m, 1), "full": (m, n)}[problem.bias]
    bias = None if shape is None else torch.randn(*shape, device=device, dtype=dt)
    return (operand(m, k, problem.layout[0] == "t"), operand(k, n, problem.layout[1] == "t"), bias,
            torch.empty(m, n, device=device, dtype=dt))


def limit_us(problem) -> float:
    elt = {"fp16": 2, "bf16": 2, "fp32": 4}[problem.dtype]
    m, n, k = problem.m, problem.n, problem.k
    return max(2 * m * n * k / (PEAK_TFLOPS * 1e6), elt * (m * k + k * n + m * n) / (BANDWIDTH_TBS * 1e6))


def measure(problem, rotate_mb: float, backend: str | None) -> dict:
    import torch

    import tritonblas

    first = operand_set(problem, "cuda")
    per_set = sum(t.numel() * t.element_size() for t in first if t is not None)
    sets = [first] + [operand_set(problem, "cuda") for _ in range(int(rotate_mb * 1e6 // per_set))]

    def ours(a, b, bias, out):
        if bias is None:
            return tritonblas.matmul(a, b, out=out, backend=backend)
        return tritonblas.addmm(bias, a, b, out=out, backend=backend)

    def theirs(a, b, bias, out):
        return torch.mm(a, b, out=out) if bias is None else torch.addmm(bias, a, b, out=out)

    row = {"problem": problem.short(), "m": problem.m, "n": problem.n, "k": problem.k,
           "dtype": problem.dtype, "layout": problem.layout, "bias": problem.bias, "copies": len(sets),
           "limit_us": limit_us(problem)}
    for side, call in (("ours", ours), ("torch", theirs)):
        cycle = itertools.cycle(sets)
        row[f"{side}_eager_us"] = us(lambda call=call, cycle=cycle: call(*next(cycle)))
        cycle = itertools.cycle(sets)
        try:
            row[f"{side}_graph_us"] = us(graphed(lambda call=call, cycle=cycle: call(*next(cycle))), CALLS)
        except RuntimeError as exc:  # a call that cannot be captured: say so, keep going
            print(f"  {side}: capture failed: {exc}")
            row[f"{side}_graph_us"] = None
    sel = tritonblas.select(problem.m, problem.n, problem.k, problem.dtype, layout=problem.layout,
                            bias=problem.bias, device=torch.device("cuda"), backend=backend)
    row["config"] = sel.config.short()
    return row


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", default="1000x1000x1000,1024x1024x1024,768x2304x768,2048x2048x2048",
                    help='"MxNxK,..." or a shapes.yaml file')
    ap.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16",
                    help="dtype of an MxNxK list (a shapes file has its own)")
    ap.add_argument("--rotate-mb", type=float, default=0.0,
                    help="cycle through operand copies totalling at least this many MB (0: one set)")
    ap.add_argument("--backend", choices=["triton", "dispatch"], default="triton")
    ap.add_argument("--json", help="write the rows here")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        raise SystemExit("graph_probe.py measures on a GPU; none is available")
    backend = None if args.backend == "dispatch" else args.backend
    print(f"{'problem':>28} {'ours eager':>10} {'ours graph':>10} {'torch eager':>11} {'torch graph':>11} "
          f"{'limit':>7} {'ours/lim':>8} {'torch/lim':>9}  config")
    rows = []
    for problem in problems_of(args.shapes, args.dtype):
        row = measure(problem, args.rotate_mb, backend)
        rows.append(row)
        cells = " ".join("-".rjust(w) if row[key] is None else f"{row[key]:{w}.1f}" for key, w in
                         (("ours_eager_us", 10), ("ours_graph_us", 10), ("torch_eager_us", 11),
                          ("torch_graph_us", 11), ("limit_us", 7)))
        frac = [None if row[f"{s}_graph_us"] is None else row["limit_us"] / row[f"{s}_graph_us"]
                for s in ("ours", "torch")]
        row["ours_fraction"], row["torch_fraction"] = frac
        fr = " ".join("-".rjust(w) if f is None else f"{f:{w}.2f}" for f, w in zip(frac, (8, 9), strict=True))
        print(f"{row['problem']:>28} {cells} {fr}  {row['config']}", flush=True)
    both = [r for r in rows if r["ours_graph_us"] and r["torch_graph_us"]]
    if both:
        print(f"graph replay, torch time over ours: geomean "
              f"{statistics.geometric_mean([r['torch_graph_us'] / r['ours_graph_us'] for r in both]):.3f}, "
              f"min {min(r['torch_graph_us'] / r['ours_graph_us'] for r in both):.3f} over {len(both)}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rotate_mb": args.rotate_mb, "backend": args.backend, "calls": CALLS, "rows": rows},
                      f, indent=1)


if __name__ == "__main__":
    main()
