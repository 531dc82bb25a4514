"""Every measured candidate of a tuning database as one JSON list, the rows scripts/heuristic_vs_sweep.py
and scripts/tuner_order.py read (docs/benchmarks/h200-tune*-measurements.json).

Usage: python scripts/export_measurements.py tune.sqlite out.json [--arch sm_90]
One row per (problem, candidate) of each stored winner's problem on `--arch`: the problem's fields, the
config, status, median_ms, rel_error and note. Measures nothing and runs on a CPU.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path


def rows_of(db_path: str, arch: str) -> list[dict]:
    # Importing the config binds GemmConfig into tuning_db's validation of stored configs.
    from tritonblas.config import GemmConfig  # noqa: F401
    from tuning_db import TuningDB

    rows = []
    with TuningDB(db_path, create=False, migrate=False) as db:
        for w in db.winners(arch=arch):
            k = w.key
            for m in db.measurements(k):
                rows.append({"m": k.m, "n": k.n, "k": k.k, "dtype": k.a_dtype, "layout": k.layout,
                             "bias": k.bias, "config": m.config.model_dump(mode="json"), "status": m.status,
                             "median_ms": m.median_ms, "rel_error": m.rel_error, "note": m.note})
    return rows


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("db", help="a tuning database (SQLite file)")
    ap.add_argument("out", type=Path, help="the JSON file to write")
    ap.add_argument("--arch", default="sm_90", help="the arch whose problems to export (default sm_90)")
    args = ap.parse_args()
    rows = rows_of(args.db, args.arch)
    args.out.write_text(json.dumps(rows, indent=0, sort_keys=True) + "\n")
    problems = {(r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["bias"]) for r in rows}
    print(f"wrote {len(rows)} measurements of {len(problems)} problems to {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
