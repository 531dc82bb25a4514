"""Host time of a Stream-K call with its fix-up in the kernel and in a reduce kernel of its own
(GemmConfig.reduce_kernel: one launch more), on a problem whose kernel takes a few microseconds.

    python scripts/reduce_host_probe.py [--profile]    # one GPU; TRITONBLAS_DB=/tmp/none.sqlite

Per config: the host time of a call (1000 calls enqueued back to back, then one synchronize), the
eager median of triton.testing.do_bench (three runs) and its minimum; --profile adds cProfile's top
entries of 500 calls. H200, 2026-12-01, 128x128x8192 bf16 (32x32x128 tiles, S 8): host 31 -> 48 us a
call, eager median 16-18 -> 23-66 us, where graph replay read 8.10 -> 7.78 (tests/kernel_ab.py
--reduce): why tuning/space._canonical keeps small problems on the in-kernel fix-up.
"""

import argparse
import sys


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--profile", action="store_true", help="cProfile's top entries of 500 calls")
    args = parser.parse_args()
    import cProfile
    import pstats
    import time

    import torch
    from triton.testing import do_bench

    import tritonblas
    from tritonblas import GemmConfig

    a = torch.randn(128, 8192, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(8192, 128, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(128, 128, device="cuda", dtype=torch.bfloat16)
    for reduce in (False, True):
        cfg = GemmConfig(block_m=32, block_n=32, block_k=128, num_warps=4, num_stages=5, streamk=True,
                         reduce_kernel=reduce)

        def call(cfg=cfg):
            return tritonblas.matmul(a, b, config=cfg, out=out)

        call()
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(1000):
            call()
        host_us = (time.perf_counter() - start) / 1000 * 1e6
        torch.cuda.synchronize()
        medians = [do_bench(call, rep=100) * 1e3 for _ in range(3)]
        low = do_bench(call, rep=100, return_mode="min") * 1e3
        print(f"{cfg.short()}: host {host_us:.1f} us a call, eager median "
              f"{', '.join(f'{m:.1f}' for m in medians)} us, min {low:.1f}", flush=True)
        if args.profile:
            profile = cProfile.Profile()
            profile.enable()
            for _ in range(500):
                call()
            profile.disable()
            torch.cuda.synchronize()
            pstats.Stats(profile).sort_stats("tottime").print_stats(8)
    return 0


if __name__ == "__main__":
    sys.exit(main())
