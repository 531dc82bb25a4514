"""GPU correctness smoke: the seed's failing shapes and misaligned N/K on every path, vs float64.

Usage (GPU host): python scripts/gpu_smoke.py
Every shape x dtype x (Persistent, Stream-K) x (pointers, TMA) that a 64x64x64 config supports runs
through tritonblas.addmm(config=...) twice (the first call compiles through triton's launcher, the
second takes the cached fast path); each result must be within twice torch's own error of a float64
reference, and the two calls bitwise equal. Exit code 1 when any case fails.
"""

from __future__ import annotations

import argparse
import itertools

SHAPES = [(12, 12, 512), (15, 17, 512), (19, 13, 512), (127, 4097, 4095), (1000, 1000, 1000),
          (33, 4097, 1000)]
DTYPES = ["bf16", "fp16", "fp32"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.parse_args()
    import torch

    import tritonblas
    from tritonblas import GemmConfig, Problem, config_supports
    from tritonblas.device import device_info

    if not torch.cuda.is_available():
        raise SystemExit("gpu_smoke.py runs on a GPU; none is available")
    torch_dtypes = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
    failures = 0
    cases = 0
    for (m, n, k), name, sk, tma in itertools.product(SHAPES, DTYPES, (False, True), (False, True)):
        dtype = torch_dtypes[name]
        a = torch.randn(m, k, device="cuda", dtype=dtype)
        b = torch.randn(k, n, device="cuda", dtype=dtype)
        bias = torch.randn(n, device="cuda", dtype=dtype)
        ref = torch.addmm(bias.double(), a.double(), b.double(), beta=0.5, alpha=2.0)
        err_t = ((torch.addmm(bias, a, b, beta=0.5, alpha=2.0).double() - ref).norm() / ref.norm()).item()
        cfg = GemmConfig(block_m=64, block_n=64, block_k=64, streamk=sk, tma=tma, grid=None)
        if config_supports(cfg, Problem(m, n, k, name), device_info(a.device)):
            continue
        # Twice: the first call compiles through triton's launcher, the second takes the cached fast path.
        out = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=cfg)
        again = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=cfg)
        torch.cuda.synchronize()
        err = ((out.double() - ref).norm() / ref.norm()).item()
        cases += 1
        if not err <= 2 * err_t + 1e-5 or not torch.equal(out, again):
            failures += 1
            print(f"WRONG {m}x{n}x{k} {name} sk={sk} tma={tma}: err {err:.2e} torch {err_t:.2e}")
    print(f"gpu_smoke: {cases - failures} passed, {failures} failed")
    if failures:
        raise SystemExit(1)


if __name__ == "__main__":
    main()
