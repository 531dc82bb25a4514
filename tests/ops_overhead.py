"""Host cost of the public ops on a repeated call (a cache hit), every kernel launch stubbed.

Kept with the tests rather than in scripts/ because --baseline imports another tree's private modules.

Usage: TRITON_INTERPRET=1 python tests/ops_overhead.py [--baseline DIR] [--rounds 7] [--trials 3]
                                                      [--calls 20000]
A benchmark, not a test. launch.gemm.launch_plan (the last Python before triton's C launcher, or the
interpreter) is replaced by a no-op, so what is timed is the Python of the call path: the cache lookup, the
per-call checks, the output allocation, the launch plan's lookup and the launch's arguments. 64x64x64 on CPU
tensors (the interpreter device), backend="triton" (the kernels' path; torch.mm would run for real).
Until 2026-12-01 the stub replaced call_path.launch_gemm, which left the launch plan's key out. Rows:
  matmul(out=)      tritonblas.matmul(a, b, out=out)
  matmul            tritonblas.matmul(a, b) (allocates the output)
  addmm             tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0)
  linear            tritonblas.linear(x, w, bias), 2-D x
  linear 3-D        tritonblas.linear(x, w, bias), x of shape (2, 32, 64)
  matmul fp32       tritonblas.matmul(a, b) in fp32 (the tf32 flag read per call)
  linear grad       tritonblas.linear(x, w, bias) with w.requires_grad: the custom op and autograd
  matmul config=    tritonblas.matmul(a, b, out=out, config=...): a pinned config, as the tuner calls
  torch.mm 1^3, torch.addmm 1^3, F.linear 1^3, F.linear grad 1^3: torch's own ops on 1x1x1 fp32 CPU
                    tensors (the weight needing grad in the last), whose kernels do next to nothing:
                    torch's host cost per call, the reference tests/test_host_cost.py bounds ours by
Each trial times every row in turn (thread CPU time: what other processes take of the host is not
counted). --transparent times transparent mode in this tree instead (tritonblas.enable()): torch.mm and
F.linear routed through dispatch next to the explicit ops (the difference is the mode's own cost), with
the C++ kernels and the Python ones (enable(native=False)), a 1x1x1 torch.mm dispatch gives to torch
(beside torch.mm with the mode off: what the C++ kernels add to a call torch runs), a
float64 mm falling through to torch with the mode on and off, and a torch.add with the mode on and off
(no other op is intercepted).
--baseline DIR times the tritonblas package under DIR (e.g. `mkdir /tmp/before; git archive HEAD
tritonblas tuning_db configs | tar -x -C /tmp/before`) in processes alternating with this tree's,
--rounds times, --trials trials each, and prints both medians and the median of the round-by-round
differences, so that the drift of a shared host lands on both alike.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parents[1]


def _launch_module():
    """The module whose launch_plan the ops call: tritonblas.launch.gemm, or tritonblas.launch in a
    --baseline tree from before the packages (issue 35)."""
    import importlib

    try:
        return importlib.import_module("tritonblas.launch.gemm")
    except ImportError:
        return importlib.import_module("tritonblas.launch")


def _stub_launches() -> None:
    """Every kernel launch replaced by a no-op: the host cost alone. A --baseline tree from before
    2026-12-03 names the launch _launch."""
    launch = _launch_module()
    setattr(launch, "launch_plan" if hasattr(launch, "launch_plan") else "_launch", lambda *args: None)


def child(root: str, trials: int, calls: int) -> dict[str, list[float]]:
    sys.path.insert(0, root)

    import tritonblas

    assert Path(tritonblas.__file__).resolve().is_relative_to(Path(root).resolve()), tritonblas.__file__
    _stub_launches()
    rows = {**op_rows(tritonblas), **torch_rows()}
    for fn in rows.values():
        for _ in range(200):
            fn()
    runs: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(trials):
        for name, fn in rows.items():
            t0 = time.thread_time()
            for _ in range(calls):
                fn()
            runs[name].append((time.thread_time() - t0) / calls * 1e6)
    return runs


def op_rows(tritonblas) -> dict:  # noqa: ANN001
    """The library's rows (see the module's docstring), on 64^3 fp16 CPU tensors."""
    import torch

    torch.manual_seed(0)
    f16, f32 = torch.float16, torch.float32
    a, b, w, bias = (torch.randn(64, 64, dtype=f16) for _ in range(4))
    bias = bias[0].clone()
    out = torch.empty(64, 64, dtype=f16)
    x3 = torch.randn(2, 32, 64, dtype=f16)
    a32, b32 = a.float(), b.float()
    w_grad = w.clone().requires_grad_()
    mm, addmm, linear = tritonblas.matmul, tritonblas.addmm, tritonblas.linear
    pinned = tritonblas.GemmConfig(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
    rows = {
        "matmul(out=)": lambda: mm(a, b, out=out, backend="triton"),
        "matmul": lambda: mm(a, b, backend="triton"),
        "addmm": lambda: addmm(bias, a, b, beta=0.5, alpha=2.0, backend="triton"),
        "linear": lambda: linear(a, w, bias, backend="triton"),
        "linear 3-D": lambda: linear(x3, w, bias, backend="triton"),
        "matmul fp32": lambda: mm(a32, b32, backend="triton"),
        "linear grad": lambda: linear(a, w_grad, bias, backend="triton"),
        "matmul config=": lambda: mm(a, b, out=out, config=pinned),
    }
    assert f32 is a32.dtype
    return rows


def torch_rows() -> dict:
    """torch's own ops on 1x1x1 fp32 CPU tensors: its host cost per call, next to no kernel work."""
    import torch
    import torch.nn.functional as F

    a, b, w, bias = (torch.ones(1, 1) for _ in range(4))
    bias = bias[0].clone()
    w_grad = w.clone().requires_grad_()
    return {
        "torch.mm 1^3": lambda: torch.mm(a, b),
        "torch.addmm 1^3": lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0),
        "F.linear 1^3": lambda: F.linear(a, w, bias),
        "F.linear grad 1^3": lambda: F.linear(a, w_grad, bias),
    }


def transparent_rows() -> dict:
    import torch
    import torch.nn.functional as F

    import tritonblas

    _stub_launches()
    torch.manual_seed(0)
    a, b, w = (torch.randn(64, 64, dtype=torch.float16) for _ in range(3))
    bias = torch.randn(64, dtype=torch.float16)
    a64, b64 = torch.randn(8, 8, dtype=torch.float64), torch.randn(8, 8, dtype=torch.float64)
    x, y = torch.randn(64, 64), torch.randn(64, 64)
    a1, b1, w1, bias1 = torch.ones(1, 1), torch.ones(1, 1), torch.ones(1, 1), torch.ones(1)
    _torch_picks_one_by_one()
    off = tritonblas.disable  # each row's lambda runs with the mode as its name says (set per row)
    on, python_kernels = tritonblas.enable, lambda: tritonblas.enable(native=False)
    return {
        "tritonblas.matmul": (off, lambda: tritonblas.matmul(a, b)),
        "torch.mm, routed": (on, lambda: torch.mm(a, b)),
        "torch.mm, routed, Python kernels": (python_kernels, lambda: torch.mm(a, b)),
        "tritonblas.linear": (off, lambda: tritonblas.linear(a, w, bias)),
        "F.linear, routed": (on, lambda: F.linear(a, w, bias)),
        "mm fp64 8^3, off": (off, lambda: torch.mm(a64, b64)),
        "mm fp64 8^3, on": (on, lambda: torch.mm(a64, b64)),
        "torch.add, off": (off, lambda: torch.add(x, y)),
        "torch.add, on": (on, lambda: torch.add(x, y)),
        "torch.mm 1^3 fp32, off": (off, lambda: torch.mm(a1, b1)),
        "torch.mm 1^3 fp32, routed, torch's pick": (on, lambda: torch.mm(a1, b1)),
        "the same, Python kernels": (python_kernels, lambda: torch.mm(a1, b1)),
        "F.linear 1^3 fp32, off": (off, lambda: F.linear(a1, w1, bias1)),
    }, off


def _torch_picks_one_by_one() -> None:
    """Dispatch picks torch.mm for 1x1x1 problems (the rows' routed torch.mm 1^3: what a call dispatch
    gives to torch costs in transparent mode)."""
    import pytest
    from helpers.picks import pick_torch_where

    pick_torch_where(pytest.MonkeyPatch(), lambda problem: (problem.m, problem.n, problem.k) == (1, 1, 1))


def time_transparent(trials: int, calls: int) -> None:
    rows, off = transparent_rows()
    runs: dict[str, list[float]] = {name: [] for name in rows}
    for _ in range(trials):
        for name, (mode, fn) in rows.items():
            off()
            mode()
            for _ in range(200):
                fn()
            t0 = time.thread_time()
            for _ in range(calls):
                fn()
            runs[name].append((time.thread_time() - t0) / calls * 1e6)
    off()
    print(f"us per call, median of {trials} trials x {calls} calls (transparent mode)")
    for name, r in runs.items():
        print(f"{name:40s}{statistics.median(r):10.2f}")


def run_child(root: Path, trials: int, calls: int) -> dict[str, list[float]]:
    env = {**os.environ, "TRITON_INTERPRET": "1", "PYTHONPATH": str(root)}
    out = subprocess.run([sys.executable, __file__, "--child", str(root), "--trials", str(trials),
                          "--calls", str(calls)], capture_output=True, text=True, env=env, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--baseline", help="a directory holding another tree's tritonblas package")
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--trials", type=int, default=3)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--transparent", action="store_true", help="time transparent mode in this tree")
    args = ap.parse_args()
    if args.transparent:
        time_transparent(args.trials * args.rounds, args.calls)
        return
    if args.child:
        print(json.dumps(child(args.child, args.trials, args.calls)))
        return
    trees = {"after": HERE} if not args.baseline else {"before": Path(args.baseline), "after": HERE}
    runs: dict[str, dict[str, list[float]]] = {t: {} for t in trees}
    for r in range(args.rounds):
        order = list(trees) if r % 2 == 0 else list(reversed(trees))
        for tree in order:
            for name, values in run_child(trees[tree], args.trials, args.calls).items():
                runs[tree].setdefault(name, []).append(statistics.median(values))
    names = list(runs["after"])
    head = f"{'row':14s}" + "".join(f"{t:>10s}" for t in trees) + ("  after-before" if args.baseline else "")
    print(f"us per call, median of {args.rounds} rounds x {args.trials} trials x {args.calls} calls")
    print(head)
    for name in names:
        line = f"{name:14s}" + "".join(f"{statistics.median(runs[t][name]):10.2f}" for t in trees)
        if args.baseline:
            diff = statistics.median(x - y for x, y in zip(runs["after"][name], runs["before"][name],
                                                          strict=True))
            line += f"  {diff:+12.2f}"
        print(line)


if __name__ == "__main__":
    main()
