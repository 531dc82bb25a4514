"""A Llama-style MLP block, forward + backward, through tritonblas.linear against F.linear (issue 17).

    y = down(silu(gate(x)) * up(x)),  gate/up: d -> f,  down: f -> d,  no bias (Llama)

One step is the forward and `y.backward(dy)` with a fixed upstream gradient, the gradients of x and the
three weights accumulating into .grad and set to None after each step, as a training loop's (issue 34: a
gradient in another layout than its weight's costs a copy there, which torch.autograd.grad never shows):
3 GEMMs forward (layout nt: F.linear's x @ W.T) and 6 backward (dX in nn, dW in tn). Both sides run the
same code with only the linear swapped, eager and under torch.compile(fullgraph=True) (forward compiled,
backward through the compiled graph's autograd), on the same inputs. Our output and each gradient are
checked as the tuner checks a candidate: relative error against the block in float64 at most twice the
F.linear block's, plus one rounding of the dtype. On a GPU the two steps are timed side by side, their
calls interleaved (median, cold L2: the protocol of `tritonblas bench`); on CPU (Triton's interpreter,
TRITON_INTERPRET=1) with the wall clock, where the times mean nothing (and bf16 fails the check there:
the interpreter's bf16 tl.dot is ~3x less accurate; use --dtype fp16).

    python scripts/mlp_step.py                                  # M 2048 and 8192, d 4096, f 14336, bf16
    python scripts/mlp_step.py --m 4096 --d 2048 --f 8192 --json mlp.json
    python scripts/mlp_step.py --backend triton                 # the kernels only, never torch.mm
    TRITON_INTERPRET=1 python scripts/mlp_step.py --m 16 --d 32 --f 64 --reps 1 --dtype fp16  # CPU smoke
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from datetime import datetime, timezone


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--m", type=int, nargs="+", default=[2048, 8192],
                   help="tokens per step (default 2048 8192)")
    p.add_argument("--d", type=int, default=4096, help="model dim (default 4096)")
    p.add_argument("--f", type=int, default=14336, help="MLP hidden dim (default 14336)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default="bf16")
    p.add_argument("--backend", choices=("triton", "torch"), default=None,
                   help="tritonblas' backend= (default: dispatch decides, as users call it)")
    p.add_argument("--modes", nargs="+", choices=("eager", "compile"), default=["eager", "compile"])
    p.add_argument("--compile-backend", default="inductor",
                   help="torch.compile backend (default inductor; aot_eager compiles fast on CPU)")
    p.add_argument("--rep-ms", type=float, default=200.0, help="GPU: timed calls per side, in ms of calls")
    p.add_argument("--reps", type=int, default=3, help="CPU: timed runs per side (median)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    if min(args.m) < 1 or args.d < 1 or args.f < 1:
        p.error("--m, --d and --f must be positive")
    return args


def make_block(linear):
    """The MLP block on a given linear (tritonblas.linear or F.linear)."""
    import torch.nn.functional as F

    def block(x, w_gate, w_up, w_down):
        return linear(F.silu(linear(x, w_gate)) * linear(x, w_up), w_down)

    return block


def make_step(block, inputs, dy):
    """One training step of the block as a training loop runs it: forward, `y.backward(dy)` (the
    gradients of x and the weights accumulate into their .grad, where AccumulateGrad copies any whose
    layout differs from its tensor's), then read and set to None."""

    def step():
        y = block(*inputs)
        y.backward(dy)
        grads = tuple(t.grad for t in inputs)
        for t in inputs:
            t.grad = None
        return (y, *grads)

    return step


def rel_error(x, ref) -> float:
    diff = (x.double() - ref.double()).norm().item()
    scale = ref.double().norm().item()
    return diff / scale if scale > 0 else diff


def timer(fns: list, device, rep_ms: float, reps: int) -> list[float]:
    """Median ms of each step. On a GPU their calls are interleaved one by one, L2 flushed before each
    (tuning.benchmark.interleaved_ms, as `tritonblas bench` times ours against torch): timed in separate
    do_bench runs, the block with every GEMM on torch.mm on both sides read 0.96x-1.02x (M 8192 eager
    13.68 vs 13.15 ms, `git show 016dd08:docs/benchmarks/h200-mlp-tune8.json`), the clock drifting
    between the runs. On CPU the wall clock over `reps` runs each."""
    if device.type == "cuda":
        from tritonblas.tuning.benchmark import interleaved_ms

        return [statistics.median(t) for t in interleaved_ms(fns, rep_ms, max(rep_ms / 4, 25))]
    out = []
    for fn in fns:
        times = []
        for _ in range(max(reps, 1)):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1e3)
        out.append(statistics.median(times))
    return out


def gemms(m: int, d: int, f: int, dtype: str, backend: str | None, device) -> list[dict]:
    """What dispatch runs for each GEMM of the step (tritonblas' ops call it with these layouts)."""
    from tritonblas.selection import dispatch

    roles = [("fwd gate/up", m, f, d, "nt"), ("fwd down", m, d, f, "nt"),
             ("dX of gate/up", m, d, f, "nn"), ("dX of down", m, f, d, "nn"),
             ("dW of gate/up", f, d, m, "tn"), ("dW of down", d, f, m, "tn")]
    out = []
    for role, gm, gn, gk, layout in roles:
        sel = dispatch.select(gm, gn, gk, dtype, layout=layout, device=device, backend=backend)
        out.append({"gemm": role, "m": gm, "n": gn, "k": gk, "layout": layout, "backend": sel.backend,
                    "source": sel.source, "config": sel.config.short(), "detail": sel.detail})
    return out


def run(args: argparse.Namespace) -> dict:
    import torch
    import torch.nn.functional as F

    import tritonblas
    from tritonblas.device import device_info, interpreter_enabled

    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}[args.dtype]
    on_gpu = torch.cuda.is_available() and not interpreter_enabled()
    device = torch.device("cuda" if on_gpu else "cpu")
    unit = {"bf16": 2.0**-8, "fp16": 2.0**-11, "fp32": 2.0**-24}[args.dtype]

    def ours_linear(x, w, bias=None):
        return tritonblas.linear(x, w, bias, backend=args.backend)

    gen = torch.Generator(device=device).manual_seed(args.seed)

    def rand(*shape, scale=1.0):
        return (torch.randn(shape, generator=gen, device=device) * scale).to(dtype)

    # Weights scaled as a trained layer's (1/sqrt(fan_in)): activations stay O(1) through the block.
    d, f = args.d, args.f
    weights = [rand(f, d, scale=d ** -0.5), rand(f, d, scale=d ** -0.5), rand(d, f, scale=f ** -0.5)]
    rows = []
    for m in args.m:
        x = rand(m, d)
        dy = rand(m, d)
        inputs = [t.requires_grad_() for t in (x, *[w.detach().clone() for w in weights])]
        exact = [t.detach().double().requires_grad_() for t in inputs]
        ref = make_step(make_block(F.linear), exact, dy.double())()  # the block in float64
        for mode in args.modes:
            blocks = {"ours": make_block(ours_linear), "torch": make_block(F.linear)}
            if mode == "compile":
                torch._dynamo.reset()
                blocks = {k: torch.compile(b, fullgraph=True, backend=args.compile_backend)
                          for k, b in blocks.items()}
            steps = {k: make_step(b, inputs, dy) for k, b in blocks.items()}
            got, theirs = steps["ours"](), steps["torch"]()  # first calls compile; then the check
            names = ("y", "dx", "dw_gate", "dw_up", "dw_down")
            errors = {n: rel_error(g, r) for n, g, r in zip(names, got, ref, strict=True)}
            torch_errors = {n: rel_error(t, r) for n, t, r in zip(names, theirs, ref, strict=True)}
            ok = all(errors[n] <= 2 * torch_errors[n] + unit for n in names)
            del got, theirs
            ours_ms, torch_ms = timer([steps["ours"], steps["torch"]], device, args.rep_ms, args.reps)
            # 3 GEMMs of 2*m*d*f FLOPs forward, twice that backward (dX and dW); it counted twice this
            # before commit 25030e6, 2026-11-30 (1275 TFLOP/s on an H200 read above the chip's peak).
            flops = 3 * (3 * 2 * m * d * f)
            rows.append({"m": m, "d": d, "f": f, "mode": mode, "ours_ms": ours_ms, "torch_ms": torch_ms,
                         "ratio": torch_ms / ours_ms, "ours_tflops": flops / (ours_ms * 1e9),
                         "torch_tflops": flops / (torch_ms * 1e9), "max_rel_error": max(errors.values()),
                         "torch_max_rel_error": max(torch_errors.values()), "errors": errors,
                         "torch_errors": torch_errors, "ok": ok})
            print(f"M {m:6} {mode:8} ours {ours_ms:9.3f} ms  F.linear {torch_ms:9.3f} ms  "
                  f"{torch_ms / ours_ms:5.3f}x  max rel. error {max(errors.values()):.2e} (F.linear "
                  f"{max(torch_errors.values()):.2e})" + ("" if ok else "  WRONG"), flush=True)
        del ref, exact, inputs
        if args.modes:
            torch._dynamo.reset()
    info = device_info(device)
    return {"script": "scripts/mlp_step.py", "argv": sys.argv[1:], "device": info.name, "arch": info.arch,
            "interpreter": not on_gpu, "dtype": args.dtype, "d": args.d, "f": args.f, "backend": args.backend,
            "compile_backend": args.compile_backend,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "geomean_ratio": {mode: _geomean([r["ratio"] for r in rows if r["mode"] == mode])
                              for mode in args.modes},
            "rows": rows,
            "gemms": {m: gemms(m, args.d, args.f, args.dtype, args.backend, info) for m in args.m}}


def _geomean(values: list[float]) -> float | None:
    return math.exp(statistics.fmean(math.log(v) for v in values)) if values else None


def table(doc: dict) -> str:
    backend = "" if doc["backend"] is None else f" backend={doc['backend']}"
    head = (f"MLP step (d {doc['d']}, f {doc['f']}, {doc['dtype']}) on {doc['device']}: "
            f"tritonblas.linear{backend} vs F.linear, forward + backward")
    lines = [head, f"{'M':>6} {'mode':8} {'ours ms':>10} {'F.linear ms':>12} {'ratio':>7} "
                   f"{'ours TFLOP/s':>13} {'F.linear TFLOP/s':>17} {'rel err (F.linear)':>20}"]
    for r in doc["rows"]:
        lines.append(f"{r['m']:>6} {r['mode']:8} {r['ours_ms']:>10.3f} {r['torch_ms']:>12.3f} "
                     f"{r['ratio']:>6.3f}x {r['ours_tflops']:>13.1f} {r['torch_tflops']:>17.1f} "
                     f"{r['max_rel_error']:>9.2e} ({r['torch_max_rel_error']:.2e})"
                     + ("" if r["ok"] else "  WRONG"))
    for mode, gm in doc["geomean_ratio"].items():
        if gm is not None:
            lines.append(f"geomean {mode}: {gm:.3f}x F.linear")
    for m, rows in doc["gemms"].items():
        lines.append(f"M {m}: " + "; ".join(f"{g['gemm']} {g['m']}x{g['n']}x{g['k']} {g['layout']}: "
                                             f"{g['config']} ({g['source']})" for g in rows))
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    import warnings

    from tritonblas.bench import is_fallback_warning

    args = parse_args(argv)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        doc = run(args)
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    # Issue 21: configs dispatch selected that triton refused to compile (zero expected).
    doc["fallback_warnings"] = sum(map(is_fallback_warning, caught))
    print(table(doc))
    print(f"run-time fallbacks (configs triton refused): {doc['fallback_warnings']}")
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"wrote {args.json}")
    return 0 if all(r["ok"] for r in doc["rows"]) else 1


if __name__ == "__main__":
    sys.exit(main())
