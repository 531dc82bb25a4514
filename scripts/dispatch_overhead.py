"""Host time per call: each public op and each routed torch op against the torch op it replaces.

Usage: python scripts/dispatch_overhead.py [--m 4 --n 2048 --k 2048] [--dtype bf16] [--calls 2000]
       python scripts/dispatch_overhead.py --groups 128 --m 64 --n 1536 --k 2048   # grouped (MoE) rows
       python scripts/dispatch_overhead.py --fp8 --m 8 --n 4096 --k 4096            # scaled_mm rows
A benchmark, not a test. Decode runs GEMMs this small one after another, so the host, not the GPU, sets
the pace: the wall time per call of a loop of calls (the GPU synchronized once at its end) is what a
user's step pays. Each row times ours and torch's loops interleaved, trial by trial (median), in one
process, on the same random operands:
  linear                  tritonblas.linear(x, w)        vs F.linear(x, w)
  linear, w grad          the same with w.requires_grad  (every linear of a training step's forward)
  matmul                  tritonblas.matmul(a, b)        vs torch.mm(a, b)
  linear, no C++ front    tritonblas.linear(x, w) with the C++ front set aside (tritonblas/native/front.cpp:
                          it answers calls that torch's op runs; the other rows have it, built first)
  routed F.linear         F.linear under tritonblas.enable() vs with the mode off
  routed F.linear, w grad the same with w.requires_grad
  routed, Python kernels  routed F.linear through transparent mode's Python kernels (no C++ compiler)
  add, not routed         torch.add under the mode       vs with the mode off (an op the mode leaves alone)
With --groups E, the MoE forward instead (m rows split evenly over E experts' (n, k) weights, used
transposed as nn.Linear stores them):
  grouped_mm              tritonblas.grouped_mm(x, w.mT, offs=offs) vs torch._grouped_mm(...)
  grouped_mm, w grad      the same with w.requires_grad  (a training step's forward)
  routed _grouped_mm      torch._grouped_mm under tritonblas.enable() vs with the mode off
  routed _grouped_mm, w grad  the same with w.requires_grad
With --fp8, scaled_mm instead (e4m3 operands, the weight (n, k) used transposed, row-wise scales, bf16
out, as an fp8 linear layer calls it):
  scaled_mm               tritonblas.scaled_mm(xq, wq.t(), sx, sw) vs torch._scaled_mm(...)
  routed _scaled_mm       torch._scaled_mm under tritonblas.enable() vs with the mode off
Dispatch decides what runs (shipped configs, neighbour, heuristic, torch.mm); `--backend triton` pins the
kernels. Without a GPU the same rows run in Triton's interpreter (the times then say little).
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import os
import statistics
import time


def per_call_us(pairs: dict, calls: int, trials: int, sync) -> dict[str, tuple[float, float]]:
    """{row: (torch us, ours us)}: median per-call wall time of `calls` calls, the two sides' loops
    alternating trial by trial so that drift of the host lands on both alike. A side is (context, fn)."""
    def loop(side) -> float:
        ctx, fn = side
        with ctx():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            return (time.perf_counter() - t0) / calls * 1e6

    out = {}
    for name, sides in pairs.items():
        for side in sides:  # warm-up: plans, compiles, torch's own caches
            loop(side)
        runs: tuple[list[float], list[float]] = ([], [])
        for trial in range(trials):
            order = (0, 1) if trial % 2 == 0 else (1, 0)
            for i in order:
                runs[i].append(loop(sides[i]))
        out[name] = (statistics.median(runs[0]), statistics.median(runs[1]))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=4)
    ap.add_argument("--n", type=int, default=2048)
    ap.add_argument("--k", type=int, default=2048)
    ap.add_argument("--groups", type=int, default=None, help="time the grouped (MoE) rows over this many "
                    "experts")
    ap.add_argument("--fp8", action="store_true", help="time the scaled_mm rows (e4m3, row-wise scales)")
    ap.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="bf16")
    ap.add_argument("--calls", type=int, default=2000)
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--backend", choices=["triton", "torch"], default=None,
                    help="pin our side's explicit calls (default: dispatch decides)")
    ap.add_argument("--json", default=None, help="write the rows to this JSON file")
    args = ap.parse_args()
    import torch

    gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton loads: CPU tensors run in the interpreter
    import torch.nn.functional as F

    import tritonblas

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    dev = torch.device("cuda" if gpu else "cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    x = torch.randn(args.m, args.k, device=dev, dtype=dtype)
    w = torch.randn(args.n, args.k, device=dev, dtype=dtype)
    wg = w.clone().requires_grad_(True)
    b = w.t()
    from tritonblas import native
    from tritonblas.call import front

    native.load()
    off, on = contextlib.nullcontext, tritonblas.enable

    @contextlib.contextmanager
    def no_front():
        kept = front.linear
        front.linear = None
        try:
            yield
        finally:
            front.linear = kept

    python_kernels = functools.partial(tritonblas.enable, native=False)  # (what runs where nothing builds)
    kw = {} if args.backend is None else {"backend": args.backend}
    pairs = {
        "linear": ((off, lambda: F.linear(x, w)), (off, lambda: tritonblas.linear(x, w, **kw))),
        "linear, w grad": ((off, lambda: F.linear(x, wg)), (off, lambda: tritonblas.linear(x, wg, **kw))),
        "matmul": ((off, lambda: torch.mm(x, b)), (off, lambda: tritonblas.matmul(x, b, **kw))),
        "linear, no C++ front": ((off, lambda: F.linear(x, w)),
                                 (no_front, lambda: tritonblas.linear(x, w, **kw))),
        "routed F.linear": ((off, lambda: F.linear(x, w)), (on, lambda: F.linear(x, w))),
        "routed F.linear, w grad": ((off, lambda: F.linear(x, wg)), (on, lambda: F.linear(x, wg))),
        "routed, Python kernels": ((off, lambda: F.linear(x, w)), (python_kernels, lambda: F.linear(x, w))),
        "add, not routed": ((off, lambda: torch.add(x, x)), (on, lambda: torch.add(x, x))),
    }
    sel = tritonblas.select(args.m, args.n, args.k, args.dtype, layout="nt", device=dev, **kw)
    described = sel.describe()
    if args.groups is not None:
        pairs, described = grouped_pairs(args, dtype, dev, kw)
    elif args.fp8:
        pairs, described = fp8_pairs(args, dev, kw)
    name = torch.cuda.get_device_name(dev) if gpu else "CPU (Triton's interpreter)"
    dtype_name = "e4m3" if args.fp8 else args.dtype
    print(f"{args.m}x{args.n}x{args.k} {dtype_name} on {name}, torch {torch.__version__}: {described}; "
          f"C++ front {'loaded' if native.front() is not None else 'absent: ' + native.why_not()}")
    rows = per_call_us(pairs, args.calls, args.trials, sync)
    print(f"  {'call':26s} {'torch':>9s} {'ours':>9s} {'ours-torch':>11s}")
    for row, (t, o) in rows.items():
        print(f"  {row:26s} {t:9.2f} {o:9.2f} {o - t:+11.2f} us/call")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"problem": [args.m, args.n, args.k, args.dtype], "groups": args.groups, "device": name,
                       "torch": torch.__version__, "selection": described, "calls": args.calls,
                       "trials": args.trials, "rows": {r: {"torch_us": t, "ours_us": o}
                                                       for r, (t, o) in rows.items()}}, f, indent=1)


def grouped_pairs(args, dtype, dev, kw: dict) -> tuple[dict, str]:
    """The --groups rows (the MoE forward, rows split evenly over the experts) and what grouped dispatch
    runs for them."""
    import torch

    import tritonblas

    if args.groups < 1:
        raise SystemExit("--groups must be positive")
    x = torch.randn(args.m, args.k, device=dev, dtype=dtype)
    w = torch.randn(args.groups, args.n, args.k, device=dev, dtype=dtype)
    wg = w.clone().requires_grad_(True)
    ends = [(g + 1) * args.m // args.groups for g in range(args.groups)]
    offs = torch.tensor(ends, device=dev, dtype=torch.int32)
    off, on = contextlib.nullcontext, tritonblas.enable

    def theirs(weight):
        return lambda: torch._grouped_mm(x, weight.mT, offs=offs)

    def ours(weight):
        return lambda: tritonblas.grouped_mm(x, weight.mT, offs=offs, **kw)

    from tritonblas.grouped.op import known_call

    shape, selection = known_call(x, w.mT, offs, None, None, kw.get("backend"))
    config = "torch._grouped_mm" if selection is None or selection.backend == "torch" else \
        selection.config.short()
    described = f"{args.groups} groups, {shape.m} rows: {config} ({selection and selection.source})"
    return {
        "grouped_mm": ((off, theirs(w)), (off, ours(w))),
        "grouped_mm, w grad": ((off, theirs(wg)), (off, ours(wg))),
        "routed _grouped_mm": ((off, theirs(w)), (on, theirs(w))),
        "routed _grouped_mm, w grad": ((off, theirs(wg)), (on, theirs(wg))),
    }, described


def fp8_pairs(args, dev, kw: dict) -> tuple[dict, str]:
    """The --fp8 rows (an fp8 linear layer's scaled_mm, row-wise scales) and what dispatch runs for them."""
    import torch

    import tritonblas

    e4m3 = torch.float8_e4m3fn
    x = torch.randn(args.m, args.k, device=dev).to(e4m3)
    w = torch.randn(args.n, args.k, device=dev).to(e4m3)
    sx = torch.rand(args.m, 1, device=dev) + 0.5
    sw = torch.rand(1, args.n, device=dev) + 0.5
    off, on = contextlib.nullcontext, tritonblas.enable

    def theirs():
        return torch._scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16)

    def ours():
        return tritonblas.scaled_mm(x, w.t(), sx, sw, out_dtype=torch.bfloat16, **kw)

    sel = tritonblas.select(args.m, args.n, args.k, "e4m3", layout="nt", device=dev, scales="row",
                            out_dtype="bf16", **kw)
    return {
        "scaled_mm": ((off, theirs), (off, ours)),
        "routed _scaled_mm": ((off, theirs), (on, theirs)),
    }, f"e4m3 row-wise -> bf16: {sel.describe()}"


if __name__ == "__main__":
    main()
