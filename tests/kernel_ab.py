"""Kernel time of fixed configs, to compare two trees' kernels on the same configs (issue 20: the 64-bit
offsets must leave problems that fit at their 32-bit speed). Run from each tree's root on a GPU:
    python tests/kernel_ab.py            # prints one line per (problem, config): median us
or this file against another tree's package (`bash scripts/h200_run.sh ab`); a config the tree does not
know (a field it lacks) prints "n/a". A benchmark, not a test (not collected: no test_ prefix).
"""

import sys

CASES = [  # (m, n, k, config fields): the persistent and Stream-K kernels, TMA and pointer loads
    (4096, 4096, 4096, dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True,
                            flatten=True)),
    (1024, 1024, 1024, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4)),
    (3000, 2000, 5000, dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)),
    (16, 4096, 14336, dict(block_m=16, block_n=64, block_k=256, num_warps=4, num_stages=5)),
    (512, 512, 32768, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, streamk=True,
                           tma=True)),
    (1920, 1920, 8192, dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, streamk=True)),
    # The tree fix-up (S = 33 splits of each of 4 tiles: G = 6, Q = 6): kernel-levers row 24.
    (256, 256, 65536, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, streamk=True,
                           tma=True)),
    # Host-built vs device-built descriptors on small problems: kernel-levers row 25.
    (512, 512, 512, dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True)),
    (512, 512, 512, dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True,
                         host_descriptors=True)),
    (1024, 1024, 1024, dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True)),
    (1024, 1024, 1024, dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True,
                            host_descriptors=True)),
]


def main() -> int:
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return 0
    import torch
    import triton.testing

    import tritonblas

    for m, n, k, fields in CASES:
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        try:
            cfg = tritonblas.GemmConfig(**fields)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            print(f"{m}x{n}x{k} {fields}: n/a ({str(exc).splitlines()[0]})", flush=True)
            continue
        tritonblas.matmul(a, b, config=cfg, out=out)
        ms = triton.testing.do_bench(lambda a=a, b=b, cfg=cfg, out=out: tritonblas.matmul(a, b, config=cfg,
                                                                                   out=out), rep=100)
        print(f"{m}x{n}x{k} {cfg.short()}: {ms * 1e3:.1f} us", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
