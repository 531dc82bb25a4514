"""`tritonblas tune` (also `tritonblas-tune`): tune shapes files into the database, with live progress.

Thin over `tuning.run.run_tuning` (one device here, several through worker processes) and `tuning.shard`.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from .common import (
    CREATES_FOLDERS,
    DB_HELP,
    DTYPES_HELP,
    SHAPES_HELP,
    check_output,
    configure_console,
    console,
    err_console,
    fail,
    interpreter_mode,
    num,
    parse_devices,
    problems_from,
    say,
    shapes_label,
    version_option,
    winner_text,
)
from .tables import Col, fitted
from .targets import open_db
from .tune_grouped import grouped_entries, report_grouped, tune_grouped

if TYPE_CHECKING:  # the tuner (and torch) load when the command runs: `tritonblas db` needs neither
    from ..problem import Problem
    from ..tuning.run import TuneRow


def summary_table(rows: list[TuneRow]) -> Table:
    """The run's outcome, one row per problem; at 80 columns device, previous source and time leave."""
    from ..bench import torch_side

    versus = f"vs {torch_side([r.problem for r in rows])}"
    cols = [Col("problem"), Col("status"), Col("winner"), Col("TFLOP/s", right=True), Col(versus, right=True),
            Col("previous", drop=2), Col("device", drop=3), Col("time", right=True, drop=1)]
    return fitted(console, cols, ([r.problem.short(), r.status if r.ok else f"[red]{r.status}[/red]",
                                   winner_text(r), num(r.tflops, ".1f"),
                                   num(r.speedup, ".2f") + ("x" if r.speedup else ""), r.previous or "-",
                                   r.device, f"{r.elapsed_s:.1f}s"] for r in rows),
                  title=f"{len(rows)} problems")


def _export(db_url: str, pattern: Path, device: int) -> None:
    from tuning_db import TuningDBError
    from tuning_db.exchange import export_file

    from ..device import device_arch

    arch = device_arch(device, interpreter_mode())
    path = Path(str(pattern).replace("{arch}", arch))
    with open_db(db_url) as db:
        try:
            cfg = export_file(db, path, arch)
        except (TuningDBError, ValueError, OSError) as e:
            fail(f"error: --export {path}: {e}", code=1)
    say(f"exported {cfg.header.count} winners for {arch} to {path}")


def _check_options(budget_s: float, export: Path | None) -> None:
    if not budget_s > 0:
        fail(f"error: --budget-s must be a positive number of seconds, got {budget_s}")
    if export is not None and export.is_dir():
        fail(f"error: --export {export} is a directory; give a file such as configs/{{arch}}.json")
    check_output(export, "--export")


def _shard(problems: list[Problem], shard: str | None) -> tuple[list[Problem], str, bool]:
    """This host's part of the problems (`--shard`), how to say so, and whether it is shard 0 (the
    one that tunes the grouped entries)."""
    if shard is None:
        return problems, "", True
    from ..tuning.shard import parse_shard

    try:
        part = parse_shard(shard)
    except ValueError as e:
        fail(f"error: --shard: {e}")
    return part.take(problems), f" (shard {part} of {len(problems)})", part.index == 0


def tune(shapes: list[Path] = typer.Option(..., "--shapes", help=SHAPES_HELP),
         db: str = typer.Option(None, "--db", help=DB_HELP),
         dtypes: str = typer.Option(None, "--dtypes", help=DTYPES_HELP),
         devices: str = typer.Option(None, "--devices", help="GPU indices, e.g. 0,1: one worker process "
                                     "each, all writing the same database (default: GPU 0)."),
         budget_s: float = typer.Option(10.0, "--budget-s", help="Timing budget per problem, seconds."),
         force: bool = typer.Option(False, "--force",
                                    help="Retune problems that already have a fresh winner."),
         shard: str = typer.Option(None, "--shard", help="Tune only shard I of N of the problems (I from "
                                   "0; every problem is in exactly one shard), e.g. 0/4; 'auto' reads a "
                                   "Slurm array's SLURM_ARRAY_TASK_ID/COUNT, 'auto/N' also a Kubernetes "
                                   "Indexed Job's JOB_COMPLETION_INDEX."),
         export: Path = typer.Option(None, "--export", help="Afterwards write the arch's winners to this "
                                     "file; {arch} in it becomes the arch, e.g. configs/{arch}.json. "
                                     + CREATES_FOLDERS),
         version: bool = version_option()) -> None:
    """Tune every problem of a shapes file and store the winners in the tuning database.

    Each problem's candidates are compiled, checked against an fp64 reference and timed next to
    torch.mm; the fastest correct one is stored. Quantized problems of a shapes file (`scales`:
    tritonblas.scaled_mm) are timed through scaled_mm next to torch._scaled_mm (torch._int_mm for
    int8), against the fp64 product of the dequantized operands. On a GPU torch.mm itself is one of
    the candidates (config `torch`), so a problem where it is fastest stores it as the winner and
    dispatch runs it there. Problems that already have a fresh winner are skipped, so an interrupted
    run resumes where it stopped. Every winner is read back from the database before it is reported.
    Exit code 1 if any problem ends without a verified winner, or with one the database does not hold.

    Grouped entries (`op: grouped`: tritonblas.grouped_mm) are tuned after the dense problems, one at
    a time on the first of --devices: every candidate timed on balanced and Zipf-skewed counts next to
    torch._grouped_mm, the fastest that passes the fp64 check wins, torch's op where that one is slower
    on either draw. Their winners go to `grouped-<arch>.json` in the database file's folder (the default
    database's folder for a server URL), which dispatch reads before the shipped table; keys it holds
    from the same triton and kernel are skipped unless --force. --budget-s does not limit them, --shard
    gives them all to shard 0, and --export writes the dense winners only.

    Block-wise scaled entries (scales: block) are timed against torch's block-wise op and stored under the
    block kernel's own hash; --export leaves them out (`tritonblas db export --family block` writes them).

    **Examples**

    ```
    tritonblas tune --shapes shapes.yaml
    tritonblas tune --shapes shapes.yaml --dtypes bf16 --devices 0,1 --budget-s 20
    tritonblas tune --shapes shapes.yaml --shapes classes/linear.yaml   # several files, one run
    tritonblas tune --shapes scripts/classes/fp8.yaml   # quantized: through tritonblas.scaled_mm
    tritonblas tune --shapes scripts/classes/grouped.yaml   # MoE experts: tritonblas.grouped_mm
    tritonblas tune --shapes shapes.yaml --db postgresql://tuner@db/tb --export configs/{arch}.json
    tritonblas tune --shapes shapes.yaml --db "$TB_URL" --shard auto   # one task of a Slurm array
    TRITON_INTERPRET=1 tritonblas tune --shapes tiny.yaml --db /tmp/t.sqlite  # CPU dry run
    ```
    """
    from ..tuning.run import Interrupted
    from .progress import run_with_progress

    configure_console()
    problems = problems_from(shapes, dtypes)
    problems, part, first = _shard(problems, shard)
    entries = grouped_entries(shapes, dtypes) if first else []
    device_ids = parse_devices(devices)
    _check_options(budget_s, export)
    with open_db(db, create=True) as opened:  # created and migrated once here, before workers race to
        url = opened.url
    options = {"budget_s": budget_s, "force": force}
    rows, failed = [], 0
    if problems or not entries:
        say(f"tuning {len(problems)} problems{part} from {shapes_label(shapes)} on {len(device_ids)} "
            f"device(s) into {opened.where}"
            + (" (Triton interpreter: timings are meaningless)" if interpreter_mode() else ""))
        try:
            rows = run_with_progress(problems, device_ids, url, options)
        except Interrupted as stop:
            console.print(summary_table(stop.rows))
            fail(interrupted_line(stop.rows, len(problems)), code=130)
        console.print(summary_table(rows))
        failed = _report_failures(rows)
    if entries:
        grouped = tune_grouped(entries, url, device_ids[0], force)
        failed += report_grouped(grouped)
        rows = [*rows, *grouped]
    if export is not None:
        _export(url, export, device_ids[0])
    if failed:
        fail(f"{failed} of {len(rows)} problems have no verified winner", code=1)


def interrupted_line(rows: list[TuneRow], total: int) -> str:
    """What an interrupted run kept, and how to go on, in one line."""
    tuned = sum(r.status == "tuned" and r.ok for r in rows)
    return (f"interrupted: {tuned} new winner{'s' * (tuned != 1)} stored, {len(rows)} of {total} problems "
            "done; the same command resumes the run")


def _report_failures(rows: list[TuneRow]) -> int:
    """Print the outcome; the number of problems without a verified winner."""
    bad = [r for r in rows if not r.ok]
    for r in bad:
        err_console.print(f"failed: {r.problem.short()}: {r.reason or r.status}", markup=False)
    tuned = sum(r.status == "tuned" for r in rows)
    skipped = sum(r.status == "skipped" for r in rows)
    console.print(f"done: {tuned} tuned, {skipped} already had a fresh winner"
                  + (f", {len(bad)} failed" if bad else ""), markup=False)
    return len(bad)
