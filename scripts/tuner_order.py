"""How much does the tuner lose when a cold compile cache lets it time only its first N candidates?
Offline, from a tuning run's measurement rows (docs/benchmarks/h200-tune3-measurements.json).

For each problem: regret@N = (best time among the first N candidates of `candidate_space`'s order that
the run measured) / (best time the run measured), 1.0 = the first N held the best. Candidates of the
prefix that the run did not measure are skipped and counted, so the figure is optimistic where many are.

Usage: python scripts/tuner_order.py docs/benchmarks/h200-tune3-measurements.json [--first 6,8,12]
"""

from __future__ import annotations

import argparse
import json
import math

from heuristic_vs_sweep import problem_of, problems_from

from tritonblas.config import GemmConfig, device_for_arch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("rows")
    ap.add_argument("--first", default="6,8,12", help="prefix lengths N, comma-separated")
    args = ap.parse_args()
    from tritonblas.tuning.space import candidate_space

    device = device_for_arch("sm_90", "NVIDIA H200", 132)
    problems = problems_from(json.load(open(args.rows)))
    # The kernels' order (vendor=False): the rows hold no torch.mm measurement.
    spaces = {id(r): candidate_space(problem_of(r), device, vendor=False) for r in problems}
    for n in (int(x) for x in args.first.split(",")):
        regrets, unmeasured = [], 0
        for r in problems:
            times = {GemmConfig(**row["config"]): row["ms"] for row in r["rows"]}
            prefix = spaces[id(r)][:n]
            known = [times[c] for c in prefix if c in times]
            unmeasured += len(prefix) - len(known)
            regrets.append(min(known) / min(times.values()) if known else math.inf)
        finite = [x for x in regrets if math.isfinite(x)]
        geo = math.exp(sum(map(math.log, finite)) / len(finite))
        print(f"first {n:2d}: regret geomean {geo:.4f}, worst {max(regrets):.3f}, "
              f"{sum(x > 1.02 for x in regrets)} of {len(regrets)} problems more than 2% behind "
              f"({unmeasured} prefix candidates unmeasured)")


if __name__ == "__main__":
    main()
