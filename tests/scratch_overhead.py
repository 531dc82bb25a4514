"""Host cost of launch_gemm's scratch handling: the padded-copy buffers and the Stream-K workspace.

Kept with the tests rather than in scripts/ because it stubs the private launcher (launch._launch),
which scripts/ may not reach (tests/test_scripts.py).

Usage: TRITON_INTERPRET=1 python tests/scratch_overhead.py [--calls 20000] [--trials 9] [--device cpu]
                                                            [--baseline old_launch.py]
A benchmark, not a test. Every kernel launch (pad copies and GEMM) is replaced by a no-op, so what is
timed is launch_gemm's Python: plan lookup, padded buffers, workspace, argument tuple. Rows, fp16:
  aligned P        1024x1024x1024 persistent: no scratch at all (the common path; must not change)
  aligned SK       1024x1024x1024 Stream-K (grid 100: a workspace and counters)
  copy P           127x1025x1023 aligned_copy persistent (two padded buffers)
  copy SK          127x1025x1023 aligned_copy Stream-K (two padded buffers and the workspace)
Median per call over --trials loops of --calls calls, the rows alternating within each trial, in this
thread's CPU time (--clock cpu, the default: time the host spent elsewhere while other processes ran
is not counted; --clock wall for wall-clock time). On a GPU
(--device cuda, TRITON_INTERPRET unset) the same rows include the CUDA stream and capture queries.
--baseline times another launch.py (e.g. `git show HEAD~1:tritonblas/launch.py > /tmp/old_launch.py`)
in the same process, alternating with this one row by row, so that the drift of a shared host lands on
both alike, and prints the median of the per-trial differences.
"""

from __future__ import annotations

import argparse
import importlib.util
import statistics
import sys
import time


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--trials", type=int, default=9)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--baseline", help="another launch.py to time alongside, e.g. the last commit's")
    ap.add_argument("--clock", choices=["cpu", "wall"], default="cpu")
    args = ap.parse_args()
    import torch

    from tritonblas import GemmConfig, launch

    modules = {"": launch}
    if args.baseline:
        spec = importlib.util.spec_from_file_location("tritonblas._baseline_launch", args.baseline)
        modules = {"baseline ": importlib.util.module_from_spec(spec), "": launch}
        sys.modules[spec.name] = modules["baseline "]  # dataclasses look their module up there
        spec.loader.exec_module(modules["baseline "])
    dev = torch.device(args.device)
    base = dict(block_m=64, block_n=64, block_k=32, num_warps=4, num_stages=2)
    persistent = GemmConfig(**base)
    streamk = GemmConfig(**base, streamk=True, grid=100)
    cases = {
        "aligned P": ((1024, 1024, 1024), persistent),
        "aligned SK": ((1024, 1024, 1024), streamk),
        "copy P": ((127, 1025, 1023), persistent.model_copy(update={"aligned_copy": True})),
        "copy SK": ((127, 1025, 1023), streamk.model_copy(update={"aligned_copy": True})),
    }
    fns = {}
    for name, ((m, n, k), config) in cases.items():
        a = torch.randn(m, k, device=dev, dtype=torch.float16)
        b = torch.randn(k, n, device=dev, dtype=torch.float16)
        c = torch.empty(m, n, device=dev, dtype=torch.float16)
        for prefix, module in modules.items():
            module._launch = lambda plan, tensors, floats: None  # the host cost alone
            fns[prefix + name] = (lambda a=a, b=b, c=c, config=config, module=module:
                                  module.launch_gemm(a, b, c, None, 1.0, 0.0, config, 132, "tf32"))
    for fn in fns.values():
        for _ in range(200):
            fn()
    clock = time.thread_time if args.clock == "cpu" else time.perf_counter
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(args.trials):
        for name, fn in fns.items():
            t0 = clock()
            for _ in range(args.calls):
                fn()
            runs[name].append((clock() - t0) / args.calls * 1e6)
    for name, r in runs.items():
        print(f"  {name:21s} {statistics.median(r):6.2f} us/call  (min {min(r):.2f}, max {max(r):.2f})")
    if args.baseline:  # each trial's two timings of a row ran back to back: their difference drifts least
        for name in cases:
            diffs = [new - old for new, old in zip(runs[name], runs["baseline " + name], strict=True)]
            print(f"  {name:12s} this - baseline: median {statistics.median(diffs):+.2f} us/call")


if __name__ == "__main__":
    main()
