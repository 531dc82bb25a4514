"""Hand sweep of configs against torch.mm on the GPU: correctness first, then median do_bench times.

Usage (GPU host): python scripts/sweep.py [--shapes scripts/shapes.yaml] [--dtype bf16]
                  [--json out.json] [--only 1000x1000x1000,...]
Prints per shape: torch.mm TFLOP/s, best config and its ratio, the heuristic's pick and its ratio.
A measurement tool for choosing kernel levers and checking the heuristic; not a test.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import time

from tritonblas import heuristic
from tritonblas.config import GemmConfig, Problem, config_supports

TILES = [(128, 256, 64, 8, 3), (256, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 128, 64, 8, 4),
         (64, 128, 64, 4, 4), (64, 64, 128, 4, 4), (32, 64, 128, 4, 4), (16, 64, 256, 4, 3),
         (64, 64, 256, 4, 3)]
# (streamk, tma, flatten, warp_specialize, grid multiple of the SM count)
VARIANTS = [(False, False, False, False, 1), (False, True, False, False, 1), (False, True, True, False, 1),
            (False, True, False, True, 1), (False, True, True, True, 1), (True, False, False, False, 1),
            (True, True, False, False, 1), (True, True, False, False, 2)]


def rel_err(x, ref) -> float:
    return ((x.double() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def bench(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=40, return_mode="median")


def shapes_from(path: str) -> list[tuple[int, int, int]]:
    """The distinct (m, n, k) of a shapes file, in file order (grids expanded; dtypes come from --dtype)."""
    from tritonblas.shapes import load_problems

    return list(dict.fromkeys((p.m, p.n, p.k) for p in load_problems(path)))


def sweep_shape(m, n, k, dtype, info):
    import torch

    import tritonblas

    torch_dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[dtype]
    a = torch.randn(m, k, device="cuda", dtype=torch_dtype)
    b = torch.randn(k, n, device="cuda", dtype=torch_dtype)
    ref = a.double() @ b.double()
    torch_out = torch.mm(a, b)
    tol = 2 * rel_err(torch_out, ref) + 1e-5
    t_torch = bench(lambda: torch.mm(a, b))
    flops = 2 * m * n * k
    problem = Problem(m, n, k, dtype)
    rows = []
    for (bm, bn, bk, w, s), (sk, tma, flat, ws, mult) in itertools.product(TILES, VARIANTS):
        cfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, streamk=sk,
                         tma=tma, flatten=flat, warp_specialize=ws, grid=mult * info.sm_count)
        if config_supports(cfg, problem, info) is not None:
            continue
        try:
            out = tritonblas.matmul(a, b, config=cfg)
            err = rel_err(out, ref)
            t = bench(lambda c=cfg: tritonblas.matmul(a, b, config=c)) if err <= tol else float("nan")
        except Exception as e:  # noqa: BLE001 - a sweep records failures and goes on
            err, t = float("nan"), float("nan")
            print(f"  FAIL {cfg.short()}: {type(e).__name__}: {str(e)[:200]}")
        rows.append({"config": cfg.model_dump(), "short": cfg.short(), "ms": t, "err": err, "tol": tol})
    heur = heuristic.choose(problem, info)
    t_heur = bench(lambda: tritonblas.matmul(a, b, config=heur))
    ok = [r for r in rows if not math.isnan(r["ms"])]
    best = min(ok, key=lambda r: r["ms"])
    bad = [r for r in rows if not (r["err"] <= r["tol"])]
    return {"m": m, "n": n, "k": k, "dtype": dtype, "torch_ms": t_torch,
            "torch_tflops": flops / t_torch / 1e9, "best": best, "heuristic": heur.short(),
            "heuristic_ms": t_heur, "wrong": [r["short"] for r in bad], "rows": rows}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="scripts/shapes.yaml", help="a shapes file; its m, n, k are swept")
    p.add_argument("--dtype", choices=["bf16", "fp16", "fp32"], default="bf16")
    p.add_argument("--json", default=None, help="write every measured config here")
    p.add_argument("--only", default="", help="MxNxK,... instead of the shapes file")
    args = p.parse_args()
    import torch

    from tritonblas.device import device_info

    if not torch.cuda.is_available():
        raise SystemExit("sweep.py measures on a GPU; none is available")
    info = device_info(torch.device("cuda"))
    shapes = shapes_from(args.shapes)
    if args.only:
        shapes = [tuple(int(x) for x in s.split("x")) for s in args.only.split(",")]
    results = []
    t0 = time.time()
    for m, n, k in shapes:
        r = sweep_shape(m, n, k, args.dtype, info)
        results.append(r)
        print(f"{m}x{n}x{k} {args.dtype}: torch {r['torch_tflops']:.0f} TF/s | best {r['best']['short']} "
              f"x{r['torch_ms'] / r['best']['ms']:.2f} | heur {r['heuristic']} "
              f"x{r['torch_ms'] / r['heuristic_ms']:.2f}"
              f" | wrong {len(r['wrong'])} | {time.time() - t0:.0f}s", flush=True)
    best = [r["torch_ms"] / r["best"]["ms"] for r in results]
    heur = [r["torch_ms"] / r["heuristic_ms"] for r in results]
    gm = lambda xs: math.exp(sum(map(math.log, xs)) / len(xs))  # noqa: E731
    print(f"geomean speedup: best-of-sweep {gm(best):.3f}  heuristic {gm(heur):.3f}")
    if args.json:
        json.dump(results, open(args.json, "w"), indent=1)


if __name__ == "__main__":
    main()
