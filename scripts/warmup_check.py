"""The first call of a shape in a fresh process, before and after `tritonblas warmup` (issue 18, part 3).

Usage: python scripts/warmup_check.py --shapes scripts/shapes.yaml [--limit 8] [--json out.json]

Every measurement is a fresh Python process that builds the operands, synchronizes, and times one
`tritonblas.matmul` / `addmm` through dispatch to the end of the GPU work: the cost a user sees on the
first call (triton's cache lookup and load, or a full compile; dispatch's first selection). Cold runs
each start from an empty triton cache (TRITON_CACHE_DIR, a new temporary folder per run); then
`tritonblas.warmup` fills another one (--cache-dir, default a temporary folder), which the warm runs
read. Target: warm first call <= 0.5 s (the issue's
figure; a compile took 3.0-5.1 s on the H200). Under TRITON_INTERPRET=1 it runs on CPU, where nothing is
compiled and the numbers only show that the flow works.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

TARGET_S = 0.5
# One first call, in a child process: prints the seconds it took.
CHILD = """
import sys, time, torch, tritonblas
m, n, k, dtype, layout, bias = sys.argv[1:7]
m, n, k = int(m), int(n), int(k)
dev = "cpu" if torch.cuda.device_count() == 0 else "cuda"
dt = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[dtype]
def operand(rows, cols, t):
    return torch.randn(cols, rows, device=dev).to(dt).t() if t else torch.randn(rows, cols, device=dev).to(dt)
a, b = operand(m, k, layout[0] == "t"), operand(k, n, layout[1] == "t")
shape = {"none": None, "scalar": (1, 1), "row": (n,), "column": (m, 1), "full": (m, n)}[bias]
c = None if shape is None else torch.randn(*shape, device=dev).to(dt)
sync = torch.cuda.synchronize if dev == "cuda" else (lambda: None)
sync()
backend = None if sys.argv[7] == "dispatch" else sys.argv[7]
if backend == "vendor-alone":  # torch's own first call: what any first GEMM of a process pays
    call = (lambda: torch.mm(a, b)) if c is None else (lambda: torch.addmm(c, a, b))
else:
    call = ((lambda: tritonblas.matmul(a, b, backend=backend)) if c is None
            else (lambda: tritonblas.addmm(c, a, b, backend=backend)))
profile = len(sys.argv) > 8 and sys.argv[8] == "profile"
if profile:
    import cProfile
    prof = cProfile.Profile()
    prof.enable()
t0 = time.perf_counter()
call()
sync()
took = time.perf_counter() - t0
if profile:
    import pstats
    prof.disable()
    pstats.Stats(prof, stream=sys.stderr).sort_stats("cumtime").print_stats(40)
print(took)
"""


def first_call_s(problem, cache: str, backend: str, profile: bool = False) -> float:
    env = {**os.environ, "TRITON_CACHE_DIR": cache}
    args = [str(problem.m), str(problem.n), str(problem.k), problem.dtype, problem.layout, problem.bias,
            backend, "profile" if profile else ""]
    out = subprocess.run([sys.executable, "-c", CHILD, *args], env=env, capture_output=True, text=True,
                         check=True, timeout=600)
    if profile:
        print(f"cProfile of the first call of {problem.short()}:\n{out.stderr}")
    return float(out.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shapes", type=Path, required=True, help="shapes.yaml of the problems")
    ap.add_argument("--limit", type=int, default=8, help="at most this many problems (each is 2 processes)")
    ap.add_argument("--cache-dir", help="triton cache to warm up and read (default: a new, empty one)")
    ap.add_argument("--json", type=Path, help="write the rows here")
    ap.add_argument("--backend", choices=["dispatch", "triton"], default="dispatch",
                    help="the first call through dispatch (torch.mm where it was chosen) or the kernels "
                         "alone (backend='triton'): what warm-up is for")
    ap.add_argument("--profile", action="store_true",
                    help="print a cProfile of the first problem's warm first call (where its time goes)")
    args = ap.parse_args()

    import tritonblas
    from tritonblas.shapes import load_problems

    problems = load_problems(args.shapes)[:args.limit]
    cold = [first_call_s(p, tempfile.mkdtemp(prefix="tritonblas-cold-"), args.backend) for p in problems]
    cache = args.cache_dir or tempfile.mkdtemp(prefix="tritonblas-warm-")
    os.environ["TRITON_CACHE_DIR"] = cache  # before triton is imported, for this process's warm-up
    backend = None if args.backend == "dispatch" else args.backend
    results = tritonblas.warmup(problems=problems, progress=False, backend=backend)
    warm = [first_call_s(p, cache, args.backend) for p in problems]
    if args.profile and problems:
        first_call_s(problems[0], cache, args.backend, profile=True)
    alone = [first_call_s(p, cache, "vendor-alone") for p in problems]
    rows = [{"problem": p.short(), "status": r.status, "config": r.config and r.config.short(),
             "cold_s": c, "warm_s": w, "torch_first_s": t}
            for p, r, c, w, t in zip(problems, results, cold, warm, alone, strict=True)]
    print(f"{'problem':30} {'warm-up':9} {'cold s':>8} {'warm s':>8} {'torch.mm s':>10}")
    for row in rows:
        print(f"{row['problem']:30} {row['status']:9} {row['cold_s']:8.3f} {row['warm_s']:8.3f} "
              f"{row['torch_first_s']:10.3f}")
    worst = max(warm, default=0.0)
    # torch.mm's own first call in a fresh process (cuBLAS and its workspace) is in every first GEMM.
    over = max((w - t for w, t in zip(warm, alone, strict=True)), default=0.0)
    print(f"warm first call: max {worst:.3f} s over {len(rows)} problems (target <= {TARGET_S} s): "
          f"{'met' if worst <= TARGET_S else 'NOT met'}; at most {over:.3f} s above torch.mm's own first "
          f"call; triton cache {cache}")
    if args.json:
        doc = {"target_s": TARGET_S, "cache": cache, "rows": rows}
        args.json.write_text(json.dumps(doc, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
