"""`tritonblas db ...`: thin typer commands over tuning_db (export, import, list, show, stats, prune, check).

Database and file errors end in one line on stderr naming the file (exit 1); bad arguments exit 2.
"""

from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.table import Table

from .cli_common import console, fail, problem_label, problems_from

app = typer.Typer(name="db", no_args_is_help=True, add_completion=False,
                  help="Inspect, export, import and check the tuning database.")

DB_HELP = "Database URL or SQLite file (default: $TRITONBLAS_DB, else ~/.cache/tritonblas/tuning.sqlite)."
DbOption = typer.Option(None, "--db", help=DB_HELP)


class Policy(str, enum.Enum):
    faster = "faster"
    file = "file"
    db = "db"


def _open(url: str | None, create: bool = False):
    """The database; only `import` may create it: a typo in --db must not leave an empty file behind."""
    from tuning_db import TuningDB, TuningDBError

    try:
        return TuningDB(url, create=create)
    except TuningDBError as e:
        fail(f"error: {e}", code=1)
    except ValueError as e:
        fail(f"error: {e}")


def _say(message: str) -> None:
    console.print(message, markup=False, soft_wrap=True, highlight=False)


def _guard(fn, *args, **kwargs):
    """Run a library call; its documented errors become one line on stderr instead of a traceback."""
    from tuning_db import TuningDBError

    try:
        return fn(*args, **kwargs)
    except TuningDBError as e:
        fail(f"error: {e}", code=1)
    except ValueError as e:  # includes ConfigFileError: a bad file or argument, named in the message
        fail(f"error: {e}", code=1)


def _single_arch(db, arch: str | None) -> str:
    if arch is not None:
        return arch
    archs = sorted(_guard(db.stats)["winners_by_arch"])
    if len(archs) != 1:
        fail(f"error: --arch is needed: the database holds winners for {len(archs)} archs "
             f"({', '.join(archs) or 'none'})")
    return archs[0]


@app.command("export")
def export_cmd(output: Path = typer.Option(..., "-o", "--output", help="File to write (configs/sm_90.json)."),
               arch: str = typer.Option(None, "--arch", help="Arch to export (default: the DB's only one)."),
               device: str = typer.Option(None, "--device", help="Device name, when the arch has several."),
               db_url: str = DbOption) -> None:
    """Write the fresh winners of one arch to a deterministic JSON file."""
    from tuning_db.exchange import export_file

    with _open(db_url) as db:
        cfg = _guard(export_file, db, output, _single_arch(db, arch), device_name=device)
    _say(f"wrote {cfg.header.count} winners for {cfg.header.arch} ({cfg.header.device_name}) "
                  f"to {output}")


@app.command("import")
def import_cmd(file: Path = typer.Argument(..., help="Config file written by `tritonblas db export`."),
               policy: Policy = typer.Option(Policy.faster, "--policy",
                                             help="On a clash: keep the faster, the file's, or the DB's."),
               db_url: str = DbOption) -> None:
    """Validate a config file, then import all of it in one transaction (nothing if any entry is bad)."""
    from tuning_db.exchange import import_config, load_config_file

    cfg = _guard(load_config_file, file)  # before the database is opened, let alone created
    with _open(db_url, create=True) as db:
        report = _guard(import_config, db, cfg, file, policy.value)
    note = (" (stale: another triton version or kernel hash; dispatch will not use them)"
            if report.stale else "")
    _say(f"imported {report.written} of {report.entries} entries from {file}; "
                  f"{report.kept} kept as they were{note}")


def _winner_table(winners, title: str) -> Table:
    table = Table(title=title)
    for col in ("problem", "device", "config", "ms", "speedup", "source", "host", "created", "state"):
        table.add_column(col, justify="right" if col in ("ms", "speedup") else "left")
    for w in winners:
        speed = "-" if w.speedup is None else f"{w.speedup:.2f}x"
        table.add_row(w.key.describe(), w.key.device_name, w.config.short(), f"{w.median_ms:.4f}", speed,
                      w.source, w.host, w.created_at.strftime("%Y-%m-%d %H:%M"),
                      "stale" if w.stale else "fresh")
    return table


@app.command("list")
def list_cmd(arch: str = typer.Option(None, "--arch", help="Only this arch."),
             stale: bool = typer.Option(False, "--stale", help="Only stale winners."),
             fresh: bool = typer.Option(False, "--fresh", help="Only fresh winners."),
             db_url: str = DbOption) -> None:
    """List stored winners, marking stale ones (another triton version or kernel hash)."""
    if stale and fresh:
        fail("error: --stale and --fresh exclude each other")
    with _open(db_url) as db:
        winners = _guard(db.winners, arch, include_stale=not fresh)
    winners = [w for w in winners if w.stale or not stale]
    if not winners:
        _say("no winners")
        return
    console.print(_winner_table(winners, f"{len(winners)} winners"))


@app.command("show")
def show_cmd(m: int = typer.Argument(..., min=0), n: int = typer.Argument(..., min=0),
             k: int = typer.Argument(..., min=0),
             dtype: str = typer.Option("fp16", "--dtype", help="Operand dtype."),
             layout: str = typer.Option("nn", "--layout", help="nn, nt, tn or tt."),
             bias: str = typer.Option("none", "--bias", help="none, scalar, row, column or full."),
             arch: str = typer.Option(None, "--arch", help="Only this arch."),
             db_url: str = DbOption) -> None:
    """Show the winners and the measured candidates of one problem."""
    from .cli_common import check_dtype
    from .config import Problem
    from .shapes import BIAS_KINDS, LAYOUTS

    if layout not in LAYOUTS:
        fail(f"error: --layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    if bias not in BIAS_KINDS:
        fail(f"error: --bias must be one of {', '.join(BIAS_KINDS)}, got {bias!r}")
    p = Problem(m, n, k, check_dtype(dtype), layout, bias)
    with _open(db_url) as db:
        winners = [w for w in _guard(db.winners, arch) if w.key.arch_key()[1:] == (
            p.m, p.n, p.k, p.dtype, p.dtype, p.out, p.layout, p.bias)]
        if not winners:
            fail(f"no winner stored for {problem_label(p)}", code=1)
        console.print(_winner_table(winners, problem_label(p)))
        for key in dict.fromkeys(w.key for w in winners):
            rows = _guard(db.measurements, key)
            table = Table(title=f"{len(rows)} fresh measurements on {key.device_name}")
            for col in ("config", "status", "median ms", "p20", "p80", "TFLOP/s", "rel err", "note"):
                table.add_column(col)
            for r in rows:
                table.add_row(r.config.short(), r.status, *[_num(v) for v in (
                    r.median_ms, r.p20_ms, r.p80_ms, r.tflops, r.rel_error)], r.note)
            console.print(table)


def _num(v: float | None) -> str:
    return "-" if v is None else f"{v:.4g}"


@app.command("stats")
def stats_cmd(db_url: str = DbOption) -> None:
    """Counts of problems, environments, measurements (by status) and winners (fresh/stale, by arch)."""
    with _open(db_url) as db:
        stats = _guard(db.stats)
    for name, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        _say(f"{name}: {value}")


@app.command("prune")
def prune_cmd(dry_run: bool = typer.Option(False, "--dry-run", help="Only count what would go."),
              db_url: str = DbOption) -> None:
    """Delete stale winners and measurements (another triton version or kernel hash)."""
    with _open(db_url) as db:
        if dry_run:
            stats = _guard(db.stats)
            _say(f"would remove {stats['stale_winners']} stale winners (and their "
                          "environments' measurements)")
            return
        removed = _guard(db.prune)
    _say(f"removed {removed} stale rows")


@app.command("check")
def check_cmd(shapes: list[Path] = typer.Option(..., "--shapes", help="shapes.yaml listing the problems; "
                                               "repeat for several files."),
              file: Path = typer.Option(None, "--file", help="Check this config file instead of a DB."),
              arch: str = typer.Option(None, "--arch", help="Arch to check (default: the DB's only one)."),
              dtypes: str = typer.Option(None, "--dtypes", help="Replace the file's dtypes, e.g. fp16,bf16."),
              db_url: str = DbOption) -> None:
    """Exit 1 listing every problem of --shapes without a fresh winner: the CI gate for shipped configs.

    With --file, the file is checked against its own arch and the running code's kernel hash and triton
    version (no GPU needed). A winner from any device of the arch counts."""
    from tuning_db.exchange import coverage_gaps, load_config_file

    if file is not None and db_url is not None:
        fail("error: give --db or --file, not both")
    problems = problems_from(shapes, dtypes)
    if file is not None:
        cfg = _guard(load_config_file, file)
        if arch is not None and arch != cfg.header.arch:
            fail(f"error: --arch {arch} but {file} holds configs for {cfg.header.arch}")
        arch, winners, source = cfg.header.arch, cfg.winners(), str(file)
    else:
        with _open(db_url) as db:
            arch = _single_arch(db, arch)
            winners, source = _guard(db.winners, arch), db.where
    gaps = coverage_gaps(problems, arch, winners)
    if gaps:
        for g in gaps:
            _say(f"missing: {problem_label(g.problem)} on {arch}: {g.reason}")
        fail(f"{len(gaps)} of {len(problems)} problems have no fresh winner in {source}", code=1)
    _say(f"all {len(problems)} problems have a fresh winner for {arch} in {source}")
