"""Host overhead of a dispatch hit: tritonblas.matmul vs launching the same kernel directly.

Usage: python scripts/dispatch_overhead.py [--m 64 --n 64 --k 64] [--dtype fp16] [--calls 5000]
A benchmark, not a test. On a GPU it times, per call (median of --trials loops of --calls calls, host
wall clock; the problem is tiny so the GPU keeps up and the host is the bottleneck):
  direct        launch.launch_gemm with the selected config (what any Triton caller pays)
  matmul(out=)  tritonblas.matmul(a, b, out=out): argument checks + dispatch hit + launch
  matmul        tritonblas.matmul(a, b): the same plus allocating the output
  select        tritonblas.select for the same problem (argument checks + the cached dispatch lookup)
  matmul(out=, config=)  the same call pinned to the selected config, as the tuner and users who pin
and, with the kernel launch replaced by a no-op (call_path's binding of launch.launch_gemm), the pure Python
cost of the public path. The figure the issue asks for is "matmul(out=) - direct" (<= 5 us). Without a
GPU only the select and no-op rows are run (in Triton's interpreter).
"""

from __future__ import annotations

import argparse
import os
import statistics
import time


def per_call_us(fns: dict, calls: int, trials: int, sync) -> dict[str, float]:
    """Median per-call time of each fn; trials alternate between the fns, so slow drift of the host
    (clock, other load) lands on all of them alike rather than on the difference."""
    for fn in fns.values():
        for _ in range(100):
            fn()
    sync()
    runs: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(trials):
        for name, fn in fns.items():
            t0 = time.perf_counter()
            for _ in range(calls):
                fn()
            sync()
            runs[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(r) for name, r in runs.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--m", type=int, default=64)
    ap.add_argument("--n", type=int, default=64)
    ap.add_argument("--k", type=int, default=64)
    ap.add_argument("--dtype", choices=["fp16", "bf16", "fp32"], default="fp16")
    ap.add_argument("--calls", type=int, default=5000)
    ap.add_argument("--trials", type=int, default=15)
    args = ap.parse_args()
    import torch

    gpu = torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET", "0") in ("", "0")
    if not gpu:
        os.environ["TRITON_INTERPRET"] = "1"  # before triton loads: CPU tensors run in the interpreter
    from sqlalchemy.engine import make_url

    import tritonblas
    import tuning_db
    from tritonblas import call_path, launch
    from tritonblas.device import device_info

    dtype = {"fp16": torch.float16, "bf16": torch.bfloat16, "fp32": torch.float32}[args.dtype]
    dev = torch.device("cuda" if gpu else "cpu")
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    a = torch.randn(args.m, args.k, device=dev, dtype=dtype)
    b = torch.randn(args.k, args.n, device=dev, dtype=dtype)
    out = torch.empty(args.m, args.n, device=dev, dtype=dtype)
    info = device_info(dev)
    # backend="triton" throughout: the kernels' path (on an H200 dispatch gives a problem this small to
    # torch.mm, heuristic.vendor_preferred; its overhead is torch's).
    sel = tritonblas.select(args.m, args.n, args.k, args.dtype, device=dev, backend="triton")
    precision = "tf32" if dtype != torch.float32 or torch.backends.cuda.matmul.allow_tf32 else "ieee"
    print(f"{args.m}x{args.n}x{args.k} {args.dtype} on {info.name}: {sel.describe()}")
    print(f"dispatch db: {make_url(tuning_db.default_url()).render_as_string(hide_password=True)}")
    rows: dict[str, float] = {}
    if gpu:
        cfg = sel.config
        rows.update(per_call_us({
            "direct": lambda: launch.launch_gemm(a, b, out, None, 1.0, 0.0, cfg, info.sm_count, precision),
            "matmul(out=)": lambda: tritonblas.matmul(a, b, out=out, backend="triton"),
            "matmul": lambda: tritonblas.matmul(a, b, backend="triton"),
            "matmul(out=, config=)": lambda: tritonblas.matmul(a, b, out=out, config=cfg),
        }, args.calls, args.trials, sync))
    select = lambda: tritonblas.select(args.m, args.n, args.k, args.dtype, device=info,  # noqa: E731
                                       backend="triton")
    rows.update(per_call_us({"select": select}, args.calls, args.trials, sync))
    if not hasattr(call_path, "launch_gemm"):
        raise SystemExit("call_path.launch_gemm is gone: point the no-launch stub below at the launch the "
                         "public ops make now")
    real = call_path.launch_gemm
    call_path.launch_gemm = lambda *x: None  # the pure host cost of the public path, kernel launch excluded
    try:
        rows.update(per_call_us({
            "matmul(out=), no launch": lambda: tritonblas.matmul(a, b, out=out, backend="triton"),
            "matmul, no launch": lambda: tritonblas.matmul(a, b, backend="triton"),
        }, args.calls, args.trials, lambda: None))
    finally:
        call_path.launch_gemm = real
    for name, us in rows.items():
        print(f"  {name:26s} {us:8.2f} us/call")
    if gpu:
        over = rows['matmul(out=)'] - rows['direct']
        print(f"overhead of matmul(out=) over the direct launch: {over:.2f} us"
              f"/call; of allocating matmul: {rows['matmul'] - rows['direct']:.2f} us/call")


if __name__ == "__main__":
    main()
