"""`tritonblas bench`: ours (through dispatch, as users call it) against torch.mm; thin over `bench`."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from .common import (
    CREATES_FOLDERS,
    DB_HELP,
    DEVICE_HELP,
    DTYPES_HELP,
    SHAPES_HELP,
    BackendChoice,
    check_output,
    console,
    err_console,
    fail,
    interpreter_mode,
    num,
    parse_device,
    problems_from,
    say,
)
from .tables import Col, fitted
from .targets import check_db

if TYPE_CHECKING:  # tritonblas.bench (and torch) load when the command runs: `tritonblas db` needs neither
    from ..bench import BenchRow


def bench_table(rows: list[BenchRow], title: str) -> Table:
    """Both sides per problem and the geomeans; at 80 columns the times, source and config leave."""
    from ..bench import fallback_count, geomean, torch_side

    cols = [Col("problem"), Col("ours TFLOP/s", right=True), Col("torch TFLOP/s", right=True),
            Col("ratio", right=True), Col("ours ms", right=True, drop=5), Col("torch ms", right=True, drop=6),
            Col("loop ratio", right=True, drop=1), Col("source", drop=3), Col("config", drop=4)]
    cells = ([r.problem.short(), num(r.tflops, ".1f"), num(r.torch_tflops, ".1f"),
              num(r.speedup, ".2f", "x") if r.status == "ok" else f"[red]{r.status}[/red]",
              num(r.ms, ".4f"), num(r.torch_ms, ".4f"), num(r.loop_speedup, ".2f", "x"), r.source or "-",
              "-" if r.config is None else r.config.short()] for r in rows)
    gm = geomean([r.speedup for r in rows if r.speedup])
    loop = geomean([r.loop_speedup for r in rows if r.loop_speedup])
    side = torch_side([r.problem for r in rows])
    return fitted(console, cols, cells, title=title, caption=(
        f"geomean speedup over {side}: {num(gm, '.3f', 'x')} (each call alone, L2 flushed); "
        f"{num(loop, '.3f', 'x')} in an eager loop of back-to-back calls (host time included); run-time "
        f"fallbacks (configs triton refused): {fallback_count(rows)}"))


def require_matplotlib() -> None:
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        fail("error: --plot needs matplotlib: pip install 'tritonblas[plot]'")


def bench(shapes: list[Path] = typer.Option(..., "--shapes", help=SHAPES_HELP),
          db: str = typer.Option(None, "--db", help=DB_HELP + " Dispatch reads it."),
          dtypes: str = typer.Option(None, "--dtypes", help=DTYPES_HELP),
          device: int = typer.Option(0, "--device", help=DEVICE_HELP),
          json_out: Path = typer.Option(None, "--json", help="Write every number to this JSON file. "
                                        + CREATES_FOLDERS),
          plot: Path = typer.Option(None, "--plot", help="Write a PNG bar chart of speedup per problem. "
                                    + CREATES_FOLDERS),
          backend: BackendChoice = typer.Option(None, "--backend", help="What our side may run: triton (the "
                                                "kernels only) or torch (torch.mm pinned); default: "
                                                "dispatch decides, as users call it."),
          ) -> None:
    """Benchmark tritonblas (through dispatch, as users call it) against torch.mm, side by side.

    Prints TFLOP/s of both, the ratio per problem and the geomean; checks our results against an fp64
    reference. Each call is timed alone after an L2 flush (the ratio), then in an eager loop of
    back-to-back calls (the loop ratio: where a call's host time exceeds its kernel's, as in a decode
    step, it shows there and not in the first). Quantized problems (`scales` in the shapes file) run
    tritonblas.scaled_mm against torch._scaled_mm (torch._int_mm and the scaling for int8; bf16
    torch.mm of the same shape where torch refuses the problem). The outputs are checked before
    anything runs. Exit code 1 if any problem gives a wrong result or fails to run.

    **Examples**

    ```
    tritonblas bench --shapes shapes.yaml
    tritonblas bench --shapes shapes.yaml --db tuned.sqlite --json bench.json --plot bench.png
    tritonblas bench --shapes shapes.yaml --backend triton    # the kernels alone, never torch.mm
    tritonblas bench --shapes scripts/classes/fp8.yaml        # scaled_mm against torch._scaled_mm
    ```
    """
    from ..bench import run_bench, torch_side, write_json, write_plot

    problems = problems_from(shapes, dtypes)
    parse_device(device)
    check_output(json_out, "--json")
    check_output(plot, "--plot")
    if plot is not None:
        require_matplotlib()
    db_where = check_db(db)
    restriction = None if backend is None else backend.value

    def show(row: BenchRow) -> None:
        ratio = num(row.speedup, ".2f", "x") if row.status == "ok" else row.status
        say(f"{row.problem.short():28} {ratio}")

    info, rows = run_bench(problems, device, db, show, restriction)
    title = (f"tritonblas vs {torch_side(problems)} on {info.name}"
             + (" (interpreter)" if interpreter_mode() else "")
             + ("" if backend is None else f", backend={restriction}"))
    console.print(bench_table(rows, title))
    try:
        if json_out is not None:
            write_json(json_out, rows, info, db_where, restriction)
            say(f"wrote {json_out}")
        if plot is not None:
            write_plot(plot, rows, title)
            say(f"wrote {plot}")
    except OSError as e:
        fail(f"error: cannot write {e.filename}: {e.strerror}", code=1)
    bad = [r for r in rows if r.status != "ok"]
    for r in bad:
        err_console.print(f"failed: {r.problem.short()}: {r.status} {r.note}".rstrip(), markup=False)
    if bad:
        fail(f"{len(bad)} of {len(rows)} problems did not run correctly", code=1)
