"""Per-process costs on a first GEMM that are not ours to compile (issue 18, warm-up): registering a
torch custom op, importing triton, and triton's `triton_key()` (the hash of its own files that precedes
every compile-cache lookup), each timed in this fresh process.
    python scripts/custom_op_probe.py
A probe, not a test."""

import argparse
import time

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    if torch.cuda.is_available():
        torch.zeros(1, device="cuda")
        torch.cuda.synchronize()
    t0 = time.perf_counter()

    @torch.library.custom_op("probe::f", mutates_args=())
    def f(x: torch.Tensor) -> torch.Tensor:
        return x.clone()

    t1 = time.perf_counter()
    print(f"custom_op registration {t1 - t0:.3f} s")
    import triton  # noqa: F401

    t2 = time.perf_counter()
    print(f"import triton {t2 - t1:.3f} s")
    from triton.runtime.cache import triton_key

    triton_key()
    print(f"triton_key {time.perf_counter() - t2:.3f} s")


if __name__ == "__main__":
    main()
