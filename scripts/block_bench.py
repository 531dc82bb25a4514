"""scaled_mm with block-wise fp8 scales against torch's block-wise op (torch.nn.functional.scaled_mm,
BlockWise1x128 x BlockWise128x128: cuBLASLt), as a user calls them.

For each problem of a shapes file (`scales: block`): a (M, K) e4m3 with its (M, K/128) scales, b the
transpose of an (N, K) weight with its (N/128, K/128) scales transposed (a view), the same tensors to
tritonblas.scaled_mm (dispatch: tuned, shipped or the heuristic) and to torch's op. Both scales are
outer-dim-major (stride 1 along M; along K blocks for b's), the layout torch's op takes: a row-major
scale_a costs torch's side a copy a call (the kernel reads either). Two times
each, calls of the three (dispatch's pick, the kernel pinned by backend="triton", torch's op) interleaved in
one process: the GPU's (CUDA events around one call) and the eager
loop's (wall time of back-to-back calls: what a decode step pays, host included). --accuracy adds the
error against float64 of both at K = 4096, 16384 and 65536.

    python scripts/block_bench.py --shapes scripts/classes/fp8_block.yaml --json out.json [--accuracy]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import torch

import tritonblas
from tritonblas.problem import SCALE_BLOCK, Problem, block_scale_shapes
from tritonblas.shapes import load_problems

E4M3 = torch.float8_e4m3fn


def operands(m: int, n: int, k: int, seed: int = 0) -> dict:
    g = torch.Generator(device="cuda").manual_seed(seed)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(E4M3)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(E4M3)
    shape_a, shape_b = block_scale_shapes(m, n, k)
    scale_a = ((torch.rand(shape_a[::-1], device="cuda", generator=g) + 0.5) / 64).t()  # stride 1 along M
    w_scale = (torch.rand(shape_b[::-1], device="cuda", generator=g) + 0.5) / 64  # (N/128, K/128), stored
    return {"a": a, "b": w.t(), "scale_a": scale_a, "scale_b": w_scale.t()}


def torch_takes(m: int, n: int, k: int) -> bool:
    return hasattr(torch.nn.functional, "ScalingType") and n % SCALE_BLOCK == 0 and k % SCALE_BLOCK == 0


def ours(ops: dict) -> torch.Tensor:
    return tritonblas.scaled_mm(ops["a"], ops["b"], ops["scale_a"], ops["scale_b"], out_dtype=torch.bfloat16)


def kernel(ops: dict) -> torch.Tensor:
    return tritonblas.scaled_mm(ops["a"], ops["b"], ops["scale_a"], ops["scale_b"], out_dtype=torch.bfloat16,
                                backend="triton")


def theirs(ops: dict) -> torch.Tensor:
    F = torch.nn.functional
    return F.scaled_mm(ops["a"], ops["b"], ops["scale_a"], F.ScalingType.BlockWise1x128,
                       ops["scale_b"], F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)


def gpu_us(fns: dict, ops: dict, reps: int) -> dict:
    times = {name: [] for name in fns}
    for _ in range(reps):
        for name, fn in fns.items():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn(ops)
            end.record()
            end.synchronize()
            times[name].append(start.elapsed_time(end) * 1e3)
    return {name: statistics.median(t) for name, t in times.items()}


def loop_us(fns: dict, ops: dict, calls: int, rounds: int = 5) -> dict:
    times = {name: [] for name in fns}
    for _ in range(rounds):
        for name, fn in fns.items():
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(calls):
                fn(ops)
            torch.cuda.synchronize()
            times[name].append((time.perf_counter() - t0) / calls * 1e6)
    return {name: statistics.median(t) for name, t in times.items()}


def bench(problem: Problem) -> dict:
    m, n, k = problem.m, problem.n, problem.k
    ops = operands(m, n, k)
    fns = {"ours": ours, "kernel": kernel}
    if torch_takes(m, n, k):
        fns["torch"] = theirs
    for fn in fns.values():  # compile, plan, warm
        fn(ops)
    flops = 2.0 * m * n * k
    reps = 20 if flops > 1e11 else 50
    gpu = gpu_us(fns, ops, reps)
    loop = loop_us(fns, ops, calls=10 if flops > 1e11 else 50)
    row = {"problem": problem.short(), "m": m, "n": n, "k": k, "gpu_us": gpu, "loop_us": loop,
           "tflops": {x: flops / us / 1e6 for x, us in gpu.items()}}
    if "torch" in gpu:
        row["gpu_ratio"] = gpu["torch"] / gpu["ours"]
        row["loop_ratio"] = loop["torch"] / loop["ours"]
        row["kernel_gpu_ratio"] = gpu["torch"] / gpu["kernel"]
    return row


def accuracy(k: int) -> dict:
    m, n = 256, 1024
    ops = operands(m, n, k, seed=1)
    a, b = ops["a"].double(), ops["b"].double()
    sa = ops["scale_a"].double().repeat_interleave(SCALE_BLOCK, 1)[:, :k]
    sb = ops["scale_b"].double().repeat_interleave(SCALE_BLOCK, 0).repeat_interleave(SCALE_BLOCK, 1)[:k, :n]
    ref = (a * sa) @ (b * sb)
    out = {"k": k}
    for name, fn in (("ours", ours), ("torch", theirs)):
        y = fn(ops).double()
        out[name] = ((y - ref).norm() / ref.norm()).item()
    out["cast"] = ((ref.to(torch.bfloat16).double() - ref).norm() / ref.norm()).item()
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--shapes", type=Path, default=Path("scripts/classes/fp8_block.yaml"))
    parser.add_argument("--json", type=Path, default=None)
    parser.add_argument("--accuracy", action="store_true")
    args = parser.parse_args()
    rows = []
    print(f"{'problem':38s} {'dispatch':30s} {'ours TF/s':>9s} {'kernel':>7s} {'torch':>7s} {'gpu x':>6s} "
          f"{'loop x':>6s} {'kern x':>6s}")
    for problem in load_problems(args.shapes):
        row = bench(problem)
        sel = tritonblas.select(problem.m, problem.n, problem.k, "e4m3", scales="block", out_dtype="bf16",
                                layout="nt")
        row["config"] = sel.config.short()
        row["source"] = sel.source
        rows.append(row)
        tf, nan = row["tflops"], float("nan")
        print(f"{row['problem']:38s} {row['config']:30s} {tf['ours']:9.0f} {tf['kernel']:7.0f} "
              f"{tf.get('torch', nan):7.0f} {row.get('gpu_ratio', nan):6.3f} "
              f"{row.get('loop_ratio', nan):6.3f} {row.get('kernel_gpu_ratio', nan):6.3f}", flush=True)
    result = {"device": torch.cuda.get_device_name(), "torch": torch.__version__,
              "triton": __import__("triton").__version__, "rows": rows}
    if args.accuracy:
        result["accuracy"] = [accuracy(k) for k in (4096, 16384, 65536)]
        for acc in result["accuracy"]:
            print(f"K={acc['k']}: error ours {acc['ours']:.3e}, torch {acc['torch']:.3e}, "
                  f"bf16 cast {acc['cast']:.3e}")
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))


if __name__ == "__main__":
    main()
