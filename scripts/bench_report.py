"""A markdown table (and optionally the PNG bar chart) from a `tritonblas bench --json` file.

Usage: python scripts/bench_report.py docs/benchmarks/h200-suite-dispatch.json [--png out.png]
       python scripts/bench_report.py a.json b.json --by-file scripts/shapes.yaml scripts/classes/*.yaml
Columns: TFLOP/s ours and torch.mm, ratio, the eager loop's ratio (host time included; "-" in files written
before the bench timed it), and our fraction of the roofline
(max(FLOPs / peak, bytes / bandwidth), tritonblas.selection.heuristic's figures for the file's arch). The last
line counts run-time fallbacks (RuntimeWarnings of configs triton refused to compile, issue 21) and
names their problems; files written before the count have none recorded ("not recorded").
--by-file: one summary line per shapes file instead (the rows of every JSON given whose problem the file
lists): geomean vs torch, the lowest row and the backend that ran it, rows below 0.97x, rows torch.mm
ran, and the geomeans of roofline time over ours and over torch's.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from tritonblas.arch import device_for_arch
from tritonblas.bench import BenchRow, fallback_count, geomean, write_plot
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tritonblas.selection.heuristic import roofline_us
from tritonblas.shapes import load_problems


def rows_from(data: dict) -> list[BenchRow]:
    rows = []
    for r in data["rows"]:
        scales = r.get("scales", "none")  # quantized rows carry their full key (BenchRow.to_json)
        quantized = (r["out_dtype"], r["b_dtype"], scales) if scales != "none" else ()
        problem = Problem(r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["bias"], *quantized)
        config = GemmConfig(**r["config"]) if r.get("config") else None
        rows.append(BenchRow(problem, r["status"], r.get("source", ""), config, r.get("ms"),
                             r.get("torch_ms"), r.get("rel_error"), r.get("note", ""), r.get("fallbacks", 0),
                             r.get("loop_ms"), r.get("torch_loop_ms")))
    return rows


def table(rows: list[BenchRow], arch: str) -> str:
    device = device_for_arch(arch)
    lines = ["| problem | ours TFLOP/s | torch.mm TFLOP/s | ratio | loop ratio | roofline fraction (ours) "
             "| source | config |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        frac = roofline_us(r.problem, device) / (r.ms * 1e3) if r.ms else None
        cells = [r.problem.short(), _f(r.tflops, ".0f"), _f(r.torch_tflops, ".0f"),
                 _f(r.speedup, ".2f", "x"), _f(r.loop_speedup, ".2f", "x"), _f(frac, ".2f"), r.source,
                 f"`{r.config.short()}`" if r.config else r.status]
        lines.append("| " + " | ".join(cells) + " |")
    gm = geomean([r.speedup for r in rows if r.speedup])
    lines.append("")
    lines.append(f"geomean speedup over torch.mm: {_f(gm, '.3f', 'x')} over {len(rows)} problems; "
                 f"lowest {_f(min((r.speedup for r in rows if r.speedup), default=None), '.2f', 'x')}")
    loops = [r.loop_speedup for r in rows if r.loop_speedup]
    if loops:  # (files written before `tritonblas bench` timed the eager loop have none)
        lines.append(f"in an eager loop of back-to-back calls: {geomean(loops):.3f}x over {len(loops)} "
                     f"problems; lowest {min(loops):.2f}x")
    return "\n".join(lines)


def by_file(rows: list[BenchRow], arch: str, files: list[Path]) -> str:
    """One line per shapes file over the rows of the problems it lists."""
    device = device_for_arch(arch)
    lines = ["| file | problems | geomean vs torch | min (problem, backend that ran) | below 0.97x "
             "| torch.mm ran | ours / limit | torch / limit |", "|---|---|---|---|---|---|---|---|"]
    for path in files:
        wanted = set(load_problems(path))
        mine = [r for r in rows if r.problem in wanted and r.speedup]
        if not mine:
            lines.append(f"| `{path}` | 0 | - | - | - | - | - | - |")
            continue
        low = min(mine, key=lambda r: r.speedup)
        limit = {id(r): roofline_us(r.problem, device) for r in mine}
        ran = "torch" if low.config and low.config.is_vendor else "triton"
        cells = [f"`{path}`", str(len(mine)), _f(geomean([r.speedup for r in mine]), ".3f", "x"),
                 f"{low.speedup:.2f}x ({low.problem.short()}, {ran})",
                 str(sum(r.speedup < 0.97 for r in mine)),
                 str(sum(bool(r.config and r.config.is_vendor) for r in mine)),
                 _f(geomean([limit[id(r)] / (r.ms * 1e3) for r in mine]), ".2f"),
                 _f(geomean([limit[id(r)] / (r.torch_ms * 1e3) for r in mine]), ".2f")]
        lines.append("| " + " | ".join(cells) + " |")
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
    ap.add_argument("json", type=Path, nargs="+")
    ap.add_argument("--png", type=Path)
    ap.add_argument("--by-file", type=Path, nargs="+", metavar="SHAPES")
    args = ap.parse_args()
    files = [json.loads(p.read_text()) for p in args.json]
    data = files[0]
    rows = [row for d in files for row in rows_from(d)]
    if args.by_file:
        print(by_file(rows, data["arch"], args.by_file))
    else:
        print(table(rows, data["arch"]))
    print(fallbacks_line(rows, "fallback_warnings" in data))
    if args.png:
        write_plot(args.png, rows, f"tritonblas vs torch.mm on {data['device']} ({data['created_at'][:10]})")


if __name__ == "__main__":
    main()
