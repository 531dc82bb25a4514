"""The best eager speedup over torch a kernel could reach on memory-bound problems, from a graph probe.

Usage:
    python scripts/eager_bound.py docs/benchmarks/h200-graph-skinny.json [--efficiency 1.0 0.9 0.8]
A graph probe's row (scripts/graph_probe.py) holds torch's eager and CUDA-graph times and the roofline
limit. Eager minus graph is what every eager call carries besides the kernel (launch, event timing),
the same for both libraries (the rows show it: ours and torch's differ by < 1 us). A kernel that ran at
`efficiency` of the limit would take that fixed part plus limit / efficiency, so torch's eager time over
that is the most any kernel could gain. Prints the geomean of the bound over the file's rows per
efficiency, and with --rows each row's bound and the ratio measured now.
"""

from __future__ import annotations

import argparse
import json
import math


def bound(row: dict, efficiency: float) -> float:
    """torch's eager time over (its fixed eager cost + the limit at `efficiency`)."""
    fixed = row["torch_eager_us"] - row["torch_graph_us"]
    return row["torch_eager_us"] / (fixed + row["limit_us"] / efficiency)


def geomean(values: list[float]) -> float:
    return math.exp(sum(map(math.log, values)) / len(values))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("json_file", help="a scripts/graph_probe.py --json output")
    parser.add_argument("--efficiency", type=float, nargs="+", default=[1.0, 0.95, 0.9, 0.85, 0.8],
                        help="fractions of the roofline limit to evaluate")
    parser.add_argument("--rows", action="store_true", help="print every row's bound at efficiency 1.0")
    args = parser.parse_args()
    with open(args.json_file) as f:
        doc = json.load(f)
    rows = doc["rows"] if isinstance(doc, dict) else doc
    if args.rows:
        for r in rows:
            now = r["torch_eager_us"] / r["ours_eager_us"]
            print(f"{r['problem']:28s} limit {r['limit_us']:7.1f} us  bound {bound(r, 1.0):.2f}x  "
                  f"now {now:.2f}x")
    for eff in args.efficiency:
        print(f"efficiency {eff:.2f}: geomean bound {geomean([bound(r, eff) for r in rows]):.3f}x "
              f"over {len(rows)} rows")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
