"""Does host time reach the bench's measured time? The same torch.mm timed as itself, through
tritonblas (dispatch picks torch.mm on these shapes), and behind a host-side busy wait of 5, 20 and
60 us, both in separate do_bench runs and interleaved call by call (tuning.benchmark.interleaved_ms).

Usage (GPU host):
    python scripts/host_leak_probe.py [--json leak.json]
If the flushed L2 before each call (do_bench's 256 MB memset) kept the GPU busy while the host
enqueues the next call, every column would read the same time; a column that grows with the wait
shows the host's time in the measurement.
"""

from __future__ import annotations

import argparse
import json
import statistics
import time

PROBLEMS = [(1024, 1024, 512), (8, 4096, 4096), (128, 128, 8192), (4096, 4096, 4096)]
WAITS_US = (5, 20, 60)


def busy_wait(us: float) -> None:
    end = time.perf_counter() + us * 1e-6
    while time.perf_counter() < end:
        pass


def calls(m: int, n: int, k: int) -> dict:
    """The calls timed for one problem, each writing its own output."""
    import torch

    import tritonblas

    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    outs = [torch.empty(m, n, device="cuda", dtype=torch.bfloat16) for _ in range(3 + len(WAITS_US))]
    fns = {"torch": lambda: torch.mm(a, b, out=outs[0]),
           "torch_again": lambda: torch.mm(a, b, out=outs[1]),
           "ours": lambda: tritonblas.matmul(a, b, out=outs[2])}
    for i, w in enumerate(WAITS_US):
        fns[f"wait{w}"] = lambda w=w, o=outs[3 + i]: (busy_wait(w), torch.mm(a, b, out=o))
    return fns


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", default=None, help="write the rows here")
    args = parser.parse_args()
    import triton.testing

    from tritonblas.tuning.benchmark import interleaved_ms

    rows = []
    for m, n, k in PROBLEMS:
        fns = calls(m, n, k)
        separate = {name: triton.testing.do_bench(fn, rep=100, return_mode="median") * 1e3
                    for name, fn in fns.items()}
        together = interleaved_ms(list(fns.values()), 100, 25)
        row = {"problem": f"{m}x{n}x{k}", "separate_us": separate,
               "interleaved_us": {name: statistics.median(t) * 1e3
                                  for name, t in zip(fns, together, strict=True)}}
        rows.append(row)
        for how in ("separate_us", "interleaved_us"):
            times = " ".join(f"{name} {us:.1f}" for name, us in row[how].items())
            print(row["problem"], how, times, flush=True)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
