"""A markdown table (and optionally the PNG bar chart) from a `tritonblas bench --json` file.

Usage: python scripts/bench_report.py docs/benchmarks/h200-bench-shipped.json [--png out.png]
Columns: TFLOP/s ours and torch.mm, ratio, and our fraction of the roofline
(max(FLOPs / peak, bytes / bandwidth), tritonblas.heuristic's figures for the file's arch). The last
line counts run-time fallbacks (RuntimeWarnings of configs triton refused to compile, issue 21) and
names their problems; files written before the count have none recorded ("not recorded").
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tritonblas.bench import BenchRow, fallback_count, geomean, write_plot
from tritonblas.config import GemmConfig, Problem, device_for_arch
from tritonblas.heuristic import roofline_us


def rows_from(data: dict) -> list[BenchRow]:
    rows = []
    for r in data["rows"]:
        problem = Problem(r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["bias"])
        config = GemmConfig(**r["config"]) if r.get("config") else None
        rows.append(BenchRow(problem, r["status"], r.get("source", ""), config, r.get("ms"),
                             r.get("torch_ms"), r.get("rel_error"), r.get("note", ""), r.get("fallbacks", 0)))
    return rows


def table(rows: list[BenchRow], arch: str) -> str:
    device = device_for_arch(arch)
    lines = ["| problem | ours TFLOP/s | torch.mm TFLOP/s | ratio | roofline fraction (ours) | source "
             "| config |", "|---|---|---|---|---|---|---|"]
    for r in rows:
        frac = roofline_us(r.problem, device) / (r.ms * 1e3) if r.ms else None
        cells = [r.problem.short(), _f(r.tflops, ".0f"), _f(r.torch_tflops, ".0f"),
                 _f(r.speedup, ".2f", "x"), _f(frac, ".2f"), r.source,
                 f"`{r.config.short()}`" if r.config else r.status]
        lines.append("| " + " | ".join(cells) + " |")
    gm = geomean([r.speedup for r in rows if r.speedup])
    lines.append("")
    lines.append(f"geomean speedup over torch.mm: {_f(gm, '.3f', 'x')} over {len(rows)} problems; "
                 f"lowest {_f(min((r.speedup for r in rows if r.speedup), default=None), '.2f', 'x')}")
    return "\n".join(lines)


def fallbacks_line(rows: list[BenchRow], recorded: bool = True) -> str:
    """The run-time fallbacks of a bench file: their count and the problems that took them."""
    if not recorded:
        return "run-time fallbacks (configs triton refused): not recorded"
    hit = [f"{r.problem.short()} ({r.fallbacks})" for r in rows if r.fallbacks]
    return (f"run-time fallbacks (configs triton refused): {fallback_count(rows)}"
            + (f" in {', '.join(hit)}" if hit else ""))


def _f(v: float | None, spec: str, suffix: str = "") -> str:
    return "-" if v is None else format(v, spec) + suffix


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("json", type=Path)
    ap.add_argument("--png", type=Path)
    args = ap.parse_args()
    data = json.loads(args.json.read_text())
    rows = rows_from(data)
    print(table(rows, data["arch"]))
    print(fallbacks_line(rows, "fallback_warnings" in data))
    if args.png:
        write_plot(args.png, rows, f"tritonblas vs torch.mm on {data['device']} ({data['created_at'][:10]})")


if __name__ == "__main__":
    main()
