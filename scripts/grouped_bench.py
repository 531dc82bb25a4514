"""Grouped GEMMs (MoE experts) against torch._grouped_mm, and the tuning run that ships their winners.

For each `op: grouped` entry of a shapes file: operands as a MoE layer holds them (tokens sorted by
expert, weights (E, N, K) row-major used transposed), counts balanced and Zipf-skewed; every candidate
config of tritonblas.grouped.tune timed with torch's op interleaved (CUDA events over back-to-back calls,
L2 not flushed: a layer's weights are read once per call and exceed L2 at every training size); the
winner checked against float64; TFLOP/s, the ratio to torch and, for decode, the time the active
experts' weights take to read at 4.8 TB/s. --tune writes the winners table dispatch reads.

    python scripts/grouped_bench.py --shapes scripts/classes/grouped.yaml --json out.json \
        [--tune configs/grouped/sm_90.json] [--quick]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from tritonblas.device import tensor_device_info
from tritonblas.grouped import tune
from tritonblas.grouped.op import grouped_mm
from tritonblas.grouped.select import key_of, select
from tritonblas.identity import grouped_kernel_hash, triton_version
from tritonblas.shapes import load_grouped

HBM_BYTES_PER_S = 4.8e12


def read_entries(path: Path) -> list[tune.GroupedEntry]:
    return load_grouped(path)


def timed_us(fn, reps: int) -> float:
    """Median time of one call over `reps` back-to-back calls, three rounds (CUDA events)."""
    fn()
    rounds = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1000 / reps)
    return statistics.median(rounds)


def reps_for(flops: float) -> int:
    return int(min(200, max(10, 2e12 / max(flops, 1))))


def run_entry(entry: tune.GroupedEntry, do_tune: bool, quick: bool) -> dict:
    draws = (
        {
            kind: tune.operands(tune.GroupedEntry(**{**entry.__dict__, "group_sizes": kind}), "cuda")
            for kind in ("balanced", "zipf")
        }
        if entry.group_sizes == "balanced"
        else {"zipf": tune.operands(entry, "cuda")}
    )
    x, w, offs = draws[next(iter(draws))]
    shape = tune.shape_of(x, w, offs)
    device = tensor_device_info(x)
    key = key_of(shape, x.dtype, False, True)
    flops = 2.0 * entry.m * entry.n * entry.k
    reps = reps_for(flops)
    torch_us = {
        k: timed_us(lambda d=d: torch._grouped_mm(d[0], d[1], offs=d[2]), reps) for k, d in draws.items()
    }
    configs = tune.candidates(key, device) if do_tune else [select(key, device).config]
    if quick:
        configs = configs[:6]
    rows = []
    for config in configs:
        us = {}
        try:
            for kind, (xx, ww, oo) in draws.items():
                us[kind] = timed_us(lambda xx=xx, ww=ww, oo=oo, c=config: _run(xx, ww, oo, c, shape), reps)
                # torch again right after: the two sides see the same clocks and temperature
                torch_us[kind] = min(
                    torch_us[kind],
                    timed_us(lambda xx=xx, ww=ww, oo=oo: torch._grouped_mm(xx, ww, offs=oo), reps),
                )
        except Exception as exc:  # noqa: BLE001 (a config triton refuses is skipped, and said)
            print(f"  skip {config.model_dump()}: {type(exc).__name__}: {str(exc)[:120]}", flush=True)
            continue
        rows.append((max(us[k] / torch_us[k] for k in us), config, us))
    rows.sort(key=lambda r: r[0])
    _, best, best_us = rows[0]
    out = _run(x, w, offs, best, shape)
    err = tune.reference_error(out, x, w, offs)
    torch_err = tune.reference_error(torch._grouped_mm(x, w, offs=offs), x, w, offs)
    active = int((torch.diff(offs, prepend=offs.new_zeros(1)) > 0).sum().item())
    weight_us = active * entry.n * entry.k * x.element_size() / HBM_BYTES_PER_S * 1e6
    result = {
        "entry": entry.text(),
        "key": key.__dict__,
        "config": best.model_dump(),
        "us": best_us,
        "torch_us": torch_us,
        "tflops": {k: flops / v / 1e6 for k, v in best_us.items()},
        "torch_tflops": {k: flops / v / 1e6 for k, v in torch_us.items()},
        "ratio": {k: torch_us[k] / best_us[k] for k in best_us},
        "error": err,
        "torch_error": torch_err,
        "weights_us": weight_us,
        "candidates": len(rows),
    }
    via_dispatch = timed_us(lambda: grouped_mm(x, w, offs=offs), reps)
    result["dispatch_us"] = via_dispatch
    return result


def _run(x, w, offs, config, shape):
    from tritonblas.grouped import launch as gl

    if config.is_vendor:  # dispatch's torch pick: what grouped_mm runs for it
        return grouped_mm(x, w, offs=offs, backend="torch")
    out = torch.empty(shape.out_shape, dtype=x.dtype, device=x.device)
    gl.run(x, w, out, None, offs, shape, config, tensor_device_info(x).sm_count, "tf32")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--shapes", type=Path, required=True)
    parser.add_argument("--json", type=Path)
    parser.add_argument(
        "--tune", type=Path, help="write the winners table here (configs/grouped/<arch>.json)"
    )
    parser.add_argument("--quick", action="store_true", help="the first 6 candidates only")
    args = parser.parse_args(argv)
    entries = read_entries(args.shapes)
    print(f"{len(entries)} grouped entries in {args.shapes}", flush=True)
    if not torch.cuda.is_available():
        print("grouped_bench: needs a CUDA GPU", file=sys.stderr)
        return 2
    results, winners = [], {}
    started = time.time()
    for entry in entries:
        r = run_entry(entry, args.tune is not None, args.quick)
        results.append(r)
        # torch's op wins a key where the best kernel is slower than it on either count draw
        best = tune.GemmConfig.model_validate(r["config"])
        winners[tune.GroupedKey(**r["key"])] = best if min(r["ratio"].values()) >= 1.0 else best.vendor()
        ratio = " ".join(f"{k} {v:.3f}x" for k, v in r["ratio"].items())
        tf = " ".join(f"{k} {v:.0f}/{r['torch_tflops'][k]:.0f}" for k, v in r["tflops"].items())
        print(
            f"{entry.text():<44} {ratio}  TF/s ours/torch {tf}  weights {r['weights_us']:.1f} us  "
            f"ours {min(r['us'].values()):.1f} us dispatch {r['dispatch_us']:.1f} us  err {r['error']:.2e} "
            f"(torch {r['torch_error']:.2e})  {time.time() - started:.0f}s",
            flush=True,
        )
    meta = {
        "triton": triton_version(),
        "torch": torch.__version__.split("+")[0],
        "kernel_hash": grouped_kernel_hash(),
        "device": torch.cuda.get_device_name(),
    }
    if args.json:
        args.json.write_text(json.dumps({**meta, "results": results}, indent=1))
    if args.tune:
        tune.write_table(args.tune, tensor_device_info(torch.empty(1, device="cuda")).arch, winners, meta)
    return 0


if __name__ == "__main__":
    sys.exit(main())
