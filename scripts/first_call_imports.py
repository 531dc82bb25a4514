"""Where a warm first call's host time goes before any kernel runs (issue 18): in this fresh process,
after CUDA is up (as in scripts/warmup_check.py's child), time `import tritonblas.ops` (the custom op
registration), `import triton`, and the callers of Python's `compile` during both (bytecode compiled
on import where no .pyc is found, or triton parsing kernel sources).
    python scripts/first_call_imports.py [--no-gc]
A probe, not a test."""

import argparse
import cProfile
import gc
import io
import pstats
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--no-gc", action="store_true", help="disable garbage collection first")
    args = ap.parse_args()
    torch.randn(64, 64, device="cuda" if torch.cuda.is_available() else "cpu")
    if args.no_gc:  # is the time of a heavy line a garbage collection that fell into it?
        gc.disable()
    prof = cProfile.Profile()
    t0 = time.perf_counter()
    prof.enable()
    import tritonblas.ops  # noqa: F401

    t1 = time.perf_counter()
    import triton  # noqa: F401

    t2 = time.perf_counter()
    prof.disable()
    print(f"import tritonblas.ops {t1 - t0:.3f} s, then import triton {t2 - t1:.3f} s")
    out = io.StringIO()
    stats = pstats.Stats(prof, stream=out)
    stats.sort_stats("tottime").print_stats(12)
    stats.print_callers("builtins.compile")
    print(out.getvalue()[-6000:])


if __name__ == "__main__":
    main()
