"""Compile throughput of the tuner's `prepare` by thread count, on a cold triton cache.

Usage (GPU host): python scripts/compile_probe.py [--shape 2048x2048x2048] [--count 16] [--workers 1,4,16]
Each worker count runs in a fresh subprocess with its own empty TRITON_CACHE_DIR, compiling and
verifying the first --count candidates of the tuner's space through GpuBenchmark.prepare (no deadline).
Prints the wall time and candidates per second, and when the first 1 / 4 / 8 in the tuner's order that
verified were ready (GpuBenchmark.ready, polled every 10 ms; failed candidates are counted apart): with
compiles serialized on the GIL, many threads finish everything late together.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time


def child(shape: str, count: int, workers: int) -> dict:
    import threading

    import torch

    from tritonblas.config import Problem
    from tritonblas.device import device_info
    from tritonblas.tuning import benchmark as bm
    from tritonblas.tuning.space import candidate_space

    m, n, k = (int(x) for x in shape.split("x"))
    problem = Problem(m, n, k, "bf16")
    device = device_info(torch.device("cuda"))
    space = candidate_space(problem, device, vendor=False)[:count]  # torch.mm compiles nothing
    bench = bm.GpuBenchmark(compile_workers=workers)
    bench.prepare([], problem, device)  # the inputs and the reference, outside the timed part
    ready_at: dict[int, float] = {}
    done = threading.Event()

    def watch() -> None:  # records when each candidate became ready (compiled and verified)
        while True:
            stop = done.is_set()  # one more look after prepare returned
            now = time.monotonic() - start
            for i, config in enumerate(space):
                if i not in ready_at and bench.ready(config):
                    ready_at[i] = now
            if stop:
                return
            done.wait(0.01)

    start = time.monotonic()
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    failures = bench.prepare(space, problem, device)
    wall = time.monotonic() - start
    done.set()
    watcher.join()
    verified = [i for i in range(len(space)) if space[i] not in failures]

    def first(j: int) -> float | None:  # when the first j candidates that verified were all ready
        head = verified[:j]
        return max(ready_at[i] for i in head) if len(head) == j and all(i in ready_at for i in head) else None

    return {"workers": workers, "count": len(space), "wall_s": wall, "per_s": len(space) / wall,
            "failures": len(failures), "first1_s": first(1), "first4_s": first(4), "first8_s": first(8)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="2048x2048x2048")
    ap.add_argument("--count", type=int, default=16)
    ap.add_argument("--workers", default="1,4,16")
    ap.add_argument("--child", type=int, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(child(args.shape, args.count, args.child)))
        return
    print(f"{'workers':>7} {'cands':>5} {'wall s':>7} {'per s':>6} {'first1':>7} {'first4':>7} {'first8':>7}")
    for w in (int(x) for x in args.workers.split(",")):
        with tempfile.TemporaryDirectory() as cache:
            env = {**os.environ, "TRITON_CACHE_DIR": cache}
            out = subprocess.run([sys.executable, __file__, "--shape", args.shape, "--count", str(args.count),
                                  "--child", str(w)], env=env, capture_output=True, text=True, check=False)
        if out.returncode:
            print(f"{w:>7} failed: {out.stderr[-400:]}")
            continue
        r = json.loads(out.stdout.strip().splitlines()[-1])

        def f(x):
            return "-" if x is None else f"{x:.2f}"

        print(f"{w:>7} {r['count']:>5} {r['wall_s']:7.2f} {r['per_s']:6.2f} {f(r['first1_s']):>7} "
              f"{f(r['first4_s']):>7} {f(r['first8_s']):>7}", flush=True)


if __name__ == "__main__":
    main()
