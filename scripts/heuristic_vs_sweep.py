"""How good is the heuristic's pick among measured configs? Offline, from scripts/sweep.py JSON files
or a tuning run's measurements (docs/benchmarks/h200-tune-measurements.json: one row per candidate).

For each problem of a sweep, the heuristic ranks the configs the sweep measured (those feasible now);
the ratio is (best measured time) / (measured time of the heuristic's first choice), 1.0 = it picked the
best. Problems bound by host time (under --min-us for the best config) are reported but left out of the
geomean, since there the kernel choice hardly matters.

Usage: python scripts/heuristic_vs_sweep.py docs/benchmarks/h200-sweep1-bf16.json [--min-us 30]
       python scripts/heuristic_vs_sweep.py docs/benchmarks/h200-tune-measurements.json --min-us 0
"""

from __future__ import annotations

import argparse
import json
import math

from tritonblas import heuristic
from tritonblas.config import GemmConfig, Problem, config_supports, device_for_arch


def problems_from(data: list[dict]) -> list[dict]:
    """Sweep JSON as is; tuning-run rows grouped per problem into the sweep's shape (ok rows only)."""
    if not data or "rows" in data[0]:
        return data
    grouped: dict[tuple, dict] = {}
    for row in data:
        # Runs before the layout and bias fields (h200-tune3/4) were all nn without bias.
        layout, bias = row.get("layout", "nn"), row.get("bias", "none")
        key = (row["m"], row["n"], row["k"], row["dtype"], layout, bias)
        entry = grouped.setdefault(key, {"m": row["m"], "n": row["n"], "k": row["k"], "dtype": row["dtype"],
                                         "layout": layout, "bias": bias, "rows": []})
        # The kernels only: torch.mm's candidate row (backend torch) is not a config the model ranks.
        if row["status"] == "ok" and "stopped early" not in (row["note"] or "") and \
                row["config"].get("backend", "triton") == "triton":
            entry["rows"].append({"config": row["config"], "ms": row["median_ms"]})
    return [g for g in grouped.values() if g["rows"]]


def problem_of(entry: dict) -> Problem:
    """The problem a grouped entry (or a sweep's, nn without bias) stands for."""
    return Problem(entry["m"], entry["n"], entry["k"], entry["dtype"], entry.get("layout", "nn"),
                   entry.get("bias", "none"))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("sweeps", nargs="+")
    ap.add_argument("--min-us", type=float, default=30.0)
    args = ap.parse_args()
    device = device_for_arch("sm_90", "NVIDIA H200", 132)
    for path in args.sweeps:
        ratios = []
        for r in problems_from(json.load(open(path))):
            problem = problem_of(r)
            measured = []
            for row in r["rows"]:
                if math.isnan(row["ms"]):
                    continue
                cfg = GemmConfig(**row["config"])
                if config_supports(cfg, problem, device) is None:
                    measured.append((heuristic.estimate(cfg, problem, device).total_us, row["ms"], cfg))
            pred_us, pick_ms, pick = min(measured, key=lambda t: (t[0], t[2].short()))
            best_ms = min(t[1] for t in measured)
            host_bound = best_ms * 1000 < args.min_us
            if not host_bound:
                ratios.append(best_ms / pick_ms)
            note = "  (host-bound)" if host_bound else ""
            print(f"{r['m']}x{r['n']}x{r['k']}: pick {pick.short():44s} {pick_ms * 1000:8.1f} us, best "
                  f"{best_ms * 1000:8.1f} us, ratio {best_ms / pick_ms:.2f}{note}")
        print(f"{path}: geomean {math.exp(sum(map(math.log, ratios)) / len(ratios)):.3f} over {len(ratios)} "
              "problems that are not host-bound")


if __name__ == "__main__":
    main()
