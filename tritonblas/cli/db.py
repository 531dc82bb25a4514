"""`tritonblas db ...`: thin commands over tuning_db (export, import, list, show, stats, prune, check).

Database and file errors end in one line on stderr naming the file (exit 1); bad arguments exit 2.
Only `import` creates a database: a typo in --db must not leave an empty file behind.
"""

from __future__ import annotations

import enum
from pathlib import Path

import typer
from rich.table import Table

from ..identity import SCALE_FAMILIES
from .common import (
    CREATES_FOLDERS,
    DB_HELP,
    DTYPES_HELP,
    HELP_NAMES,
    SIZE_ARGS,
    BDtypeOption,
    BiasChoice,
    BiasOption,
    DtypeOption,
    LayoutChoice,
    LayoutOption,
    OutDtypeOption,
    ScalesChoice,
    ScalesOption,
    SizeK,
    SizeM,
    SizeN,
    check_output,
    command,
    configure_console,
    console,
    fail,
    guard,
    num,
    parse_size,
    problem_of_args,
    problems_from,
    say,
)
from .tables import Col, fitted
from .targets import check_arch, open_db

app = typer.Typer(name="db", no_args_is_help=True, add_completion=False, rich_markup_mode="markdown",
                  context_settings=HELP_NAMES)
DbOption = typer.Option(None, "--db", help=DB_HELP)
FILE_HELP = "Config file written by `tritonblas db export` (e.g. configs/sm_90.json)."


@app.callback()
def db_group() -> None:
    """Inspect, export, import and check the tuning database.

    **Examples**

    ```
    tritonblas db stats
    tritonblas db export --db tune.sqlite --arch sm_90 -o configs/sm_90.json
    tritonblas db check --shapes shapes.yaml --file configs/sm_90.json
    ```
    """
    # Binds tuning_db to GemmConfig, its feasibility check and the running identity; nothing of torch.
    from .. import config  # noqa: F401

    configure_console()  # (also where `db` is the program, as tritonblas.cli.db.app)


class Policy(str, enum.Enum):
    faster = "faster"
    file = "file"
    db = "db"


FAMILY_HELP = ("Kernel family: gemm (every problem but those of a scale mode whose kernels are hashed apart: "
               "configs/ARCH.json), or that scale mode (" + ", ".join(SCALE_FAMILIES) + ": "
               "configs/MODE/ARCH.json). One kernel hash a file.")
# A config file's kernel family (one kernel hash a file): gemm, or a scale mode of identity.SCALE_FAMILIES.
Family = enum.Enum("Family", {name: name for name in ("gemm", *SCALE_FAMILIES)}, type=str)


def _single_arch(db, arch: str | None) -> str:
    """--arch, or the only arch the database holds winners for."""
    if check_arch(arch) is not None:
        return arch
    archs = sorted(guard(db.stats)["winners_by_arch"])
    if len(archs) != 1:
        fail(f"error: --arch is needed: the database holds winners for {len(archs)} archs "
             f"({', '.join(archs) or 'none'})")
    return archs[0]


@command(app, "export")
def export_cmd(output: Path = typer.Option(..., "-o", "--output", help="File to write, e.g. "
                                           "configs/sm_90.json. " + CREATES_FOLDERS),
               arch: str = typer.Option(None, "--arch", help="Arch to export (default: the DB's only one)."),
               device_name: str = typer.Option(None, "--device-name", help="Device name as stored (e.g. "
                                               "'NVIDIA H200'), when the arch has winners of several."),
               with_host: bool = typer.Option(False, "--with-host", help="Write the name of the host that "
                                              "tuned each winner (default: none, so a shipped file does not "
                                              "publish the tuning machines' names)."),
               family: Family = typer.Option(Family.gemm, "--family", help=FAMILY_HELP),
               db_url: str = DbOption) -> None:
    """Write the winners of one arch for the running kernels to a deterministic JSON file (what ships
    in configs/): one per problem and triton version, so rows tuned under another triton version ship
    beside the running version's. A file holds one kernel family (`--family`).

    Exporting the same data again gives a byte-identical file. The file is written whole or not at all.

    **Examples**

    ```
    tritonblas db export --db tune.sqlite --arch sm_90 -o configs/sm_90.json
    tritonblas db export --arch sm_90 --device-name "NVIDIA H200" --with-host -o h200.json
    tritonblas db export --db tune.sqlite --family block -o configs/block/sm_90.json
    ```
    """
    from tuning_db.exchange import export_file
    from tuning_db.schemas import version_key

    check_arch(arch)
    check_output(output, "-o")
    with open_db(db_url) as db:
        cfg = guard(export_file, db, output, _single_arch(db, arch), device_name=device_name,
                    with_host=with_host, family=family.value)
    versions = sorted({cfg.triton_of(e) for e in cfg.entries}, key=version_key)
    say(f"wrote {cfg.header.count} winners for {cfg.header.arch} ({cfg.header.device_name}; triton "
        f"{', '.join(versions)}) to {output}")


@command(app, "import")
def import_cmd(file: Path = typer.Option(..., "--file", help=FILE_HELP),
               policy: Policy = typer.Option(Policy.faster, "--policy",
                                             help="On a clash: keep the faster, the file's, or the DB's."),
               db_url: str = DbOption) -> None:
    """Validate a config file, then import all of it in one transaction (nothing if any entry is bad).

    The database is created if it does not exist, in a folder that exists (the default location's
    folder is created).

    **Examples**

    ```
    tritonblas db import --file configs/sm_90.json
    tritonblas db import --file colleague.json --db team.sqlite --policy file
    ```
    """
    from tuning_db.coverage import describe_other_triton
    from tuning_db.exchange import import_config, load_config_file

    cfg = guard(load_config_file, file)  # before the database is opened, let alone created
    with open_db(db_url, create=True) as db:
        report = guard(import_config, db, cfg, file, policy.value)
    note = " (stale: another kernel hash; dispatch will not use them)" if report.stale else ""
    say(f"imported {report.written} of {report.entries} entries from {file}; "
        f"{report.kept} kept as they were{note}")
    other = describe_other_triton(report.other_triton, _running_triton())
    if other:
        say(f"{other}: they serve until a tuning run under the running version replaces them")


def _winner_table(winners, title: str) -> Table:
    """At 80 columns the host, device, creation time, source and speedup leave, in that order."""
    cols = [Col("problem"), Col("device", drop=4), Col("config"), Col("ms", right=True),
            Col("speedup", right=True, drop=1), Col("source", drop=2), Col("host", drop=5),
            Col("created", drop=3), Col("state")]
    return fitted(console, cols, ([w.key.describe(), w.key.device_name, w.config.short(),
                                   f"{w.median_ms:.4f}", num(w.speedup, ".2f", "x"), w.source, w.host,
                                   w.created_at.strftime("%Y-%m-%d %H:%M"), _state(w)] for w in winners),
                  title=title)


# At 80 columns the quartiles, note, error and rate leave, in that order.
_MEASUREMENT_COLS = [Col("config"), Col("status"), Col("median ms", right=True),
                     Col("p20", right=True, drop=4), Col("p80", right=True, drop=5),
                     Col("TFLOP/s", right=True, drop=1), Col("rel err", right=True, drop=2),
                     Col("note", drop=3)]


def _state(w) -> str:
    """stale (other kernels: never used), triton X (another triton version's: serves), or fresh."""
    return "stale" if w.stale else f"triton {w.env.triton_version}" if w.other_triton else "fresh"


def _running_triton() -> str:
    from tuning_db import EnvIdentity

    return EnvIdentity.current().triton_version


@command(app, "list")
def list_cmd(arch: str = typer.Option(None, "--arch", help="Only this arch."),
             stale: bool = typer.Option(False, "--stale", help="Only stale winners (other kernel sources)."),
             fresh: bool = typer.Option(False, "--fresh", help="Only winners that serve (the running "
                                        "kernels, any triton version)."),
             db_url: str = DbOption) -> None:
    """List stored winners. The state column says `fresh` (the running code's), `triton X` (tuned
    under another triton version for the running kernels: serves after the running version's) or
    `stale` (other kernel sources: never used).

    **Examples**

    ```
    tritonblas db list
    tritonblas db list --arch sm_90 --stale --db tune.sqlite
    ```
    """
    if stale and fresh:
        fail("error: --stale and --fresh exclude each other")
    check_arch(arch)
    with open_db(db_url) as db:
        winners = guard(db.winners, arch, include_stale=not fresh)
    winners = [w for w in winners if w.stale or not stale]
    if not winners:
        say("no winners" + (f" for {arch}" if arch else ""))
        return
    console.print(_winner_table(winners, f"{len(winners)} winners"))


@command(app, "show", context_settings=SIZE_ARGS)
def show_cmd(m: str = SizeM, n: str = SizeN, k: str = SizeK, dtype: str = DtypeOption,
             layout: LayoutChoice = LayoutOption, bias: BiasChoice = BiasOption,
             scales: ScalesChoice = ScalesOption, out_dtype: str = OutDtypeOption,
             b_dtype: str = BDtypeOption, arch: str = typer.Option(None, "--arch", help="Only this arch."),
             db_url: str = DbOption) -> None:
    """Show the winners and the measured candidates of one problem (a quantized one with --scales).

    **Examples**

    ```
    tritonblas db show 4096 4096 4096
    tritonblas db show 16 6144 4096 --dtype fp16 --layout nt --bias row --arch sm_90
    tritonblas db show 4096 4096 4096 --dtype e4m3 --scales row --out-dtype bf16 --layout nt
    ```
    """
    from tuning_db import GemmShape

    p = problem_of_args(parse_size(m, "M"), parse_size(n, "N"), parse_size(k, "K"), dtype, layout, bias,
                        scales, out_dtype, b_dtype)
    check_arch(arch)
    with open_db(db_url) as db:
        shape = GemmShape.from_problem(p).shape_key()
        winners = [w for w in guard(db.winners, arch) if w.key.shape_key() == shape]
        if not winners:
            fail(f"error: no winner stored for {p.short()}" + (f" on {arch}" if arch else "") + f" in "
                 f"{db.where}", code=1)
        console.print(_winner_table(winners, p.short()))
        for key in dict.fromkeys(w.key for w in winners):
            rows = guard(db.measurements, key)
            table = fitted(console, _MEASUREMENT_COLS, ([r.config.short(), r.status, *[num(v) for v in (
                r.median_ms, r.p20_ms, r.p80_ms, r.tflops, r.rel_error)], r.note] for r in rows),
                title=f"{len(rows)} fresh measurements on {key.device_name}")
            console.print(table)


@command(app, "stats")
def stats_cmd(db_url: str = DbOption) -> None:
    """Counts of problems, environments, measurements (by status) and winners (fresh, of another
    triton version, stale; by arch).

    `db_schema_version` is the version of the database's tables (upgraded in place when a newer
    tritonblas opens it); config files written by `db export` carry their own format version in their
    header (`schema_version`), independent of it.

    **Examples**

    ```
    tritonblas db stats
    tritonblas db stats --db postgresql://tuner@db.example.com/tritonblas
    ```
    """
    from tuning_db.exchange import FILE_SCHEMA_VERSION, ONE_TRITON_VERSION

    with open_db(db_url) as db:
        stats = guard(db.stats)
    stats["config_file_version"] = (f"{FILE_SCHEMA_VERSION} (the header schema_version of db export's files; "
                                    f"{ONE_TRITON_VERSION} where every entry is of one triton version)")
    for name, value in stats.items():
        if isinstance(value, dict):
            value = ", ".join(f"{k}={v}" for k, v in value.items()) or "-"
        say(f"{name}: {value}")


@command(app, "prune")
def prune_cmd(dry_run: bool = typer.Option(False, "--dry-run", help="Only count what would go."),
              db_url: str = DbOption) -> None:
    """Delete stale winners and measurements (other kernel sources). Rows of another triton version
    for the running kernels serve, and are kept.

    **Examples**

    ```
    tritonblas db prune --dry-run
    tritonblas db prune --db tune.sqlite
    ```
    """
    with open_db(db_url) as db:
        if dry_run:
            stats = guard(db.stats)
            say(f"would remove {stats['stale_winners']} stale winners (and their environments' "
                "measurements)")
            return
        removed = guard(db.prune)
    say(f"removed {removed} stale rows")


@command(app, "check")
def check_cmd(shapes: list[Path] = typer.Option(..., "--shapes", help="shapes.yaml listing the problems; "
                                               "repeat for several files."),
              file: Path = typer.Option(None, "--file", help="Check this config file instead of a DB. "
                                        + FILE_HELP),
              arch: str = typer.Option(None, "--arch", help="Arch to check (default: the DB's only one)."),
              dtypes: str = typer.Option(None, "--dtypes", help=DTYPES_HELP),
              strict: bool = typer.Option(False, "--strict", help="Count only winners tuned under the "
                                          "running triton version (default: any version, same kernels)."),
              db_url: str = DbOption) -> None:
    """Exit 1 listing every problem of --shapes without a winner that serves: the CI gate for shipped
    configs.

    With --file, the file is checked against its own arch and the running code's kernel hash (no GPU
    needed). A winner from any device of the arch counts, and so does one tuned under another triton
    version for the same kernels (dispatch uses it; the output counts them); --strict asks for the
    running triton version's. A winner of other kernel sources is stale and never counts.

    Grouped entries (`op: grouped`) are checked against the grouped table beside the file
    (`grouped/<arch>.json` in its folder), or the user's `grouped-<arch>.json` beside the database.

    **Examples**

    ```
    tritonblas db check --shapes scripts/shapes.yaml --file configs/sm_90.json
    tritonblas db check --shapes shapes.yaml --db tune.sqlite --arch sm_90 --strict
    ```
    """
    from tuning_db.exchange import load_config_file

    if file is not None and db_url is not None:
        fail("error: give --db or --file, not both")
    check_arch(arch)
    problems = problems_from(shapes, dtypes)
    if file is not None:
        cfg = guard(load_config_file, file)
        if arch is not None and arch != cfg.header.arch:
            fail(f"error: --arch {arch} but {file} holds configs for {cfg.header.arch}")
        arch, winners, source = cfg.header.arch, cfg.winners(), str(file)
    else:
        with open_db(db_url) as db:
            arch = _single_arch(db, arch)
            winners, source = guard(db.winners, arch), db.where
    winners = [w for w in winners if w.key.arch == arch]
    grouped, missing = _grouped_check(shapes, dtypes, file, arch, strict, db_url)
    if problems or not grouped:
        _check_report(problems, arch, winners, strict, source)
    if missing:
        fail(f"{missing} of {grouped} grouped entries have no winner that serves", code=1)


def _grouped_check(shapes, dtypes, file: Path | None, arch: str, strict: bool, db_url) -> tuple[int, int]:
    """Say what the grouped table has for the shapes files' grouped entries: (entries, those it lacks)."""
    from .tune_grouped import grouped_entries

    entries = grouped_entries(shapes, dtypes)
    if not entries:
        return 0, 0  # (before the grouped modules, which load torch: db commands start without it)
    from ..grouped.check import grouped_gaps, table_beside
    from ..grouped.usertable import user_table_path

    table = table_beside(file, arch) if file is not None else user_table_path(arch, db_url)
    gaps = guard(grouped_gaps, entries, table, arch, strict)
    for gap in gaps:
        say(f"missing: {gap.text()}")
    if not gaps:
        say(f"all {len(entries)} grouped entries have a winner for {arch} in {table}")
    return len(entries), len(gaps)


def _check_report(problems, arch: str, winners, strict: bool, source: str) -> None:
    """db check's output. What the source holds (all its winners of the arch, problems beyond the
    shapes files' included) is said apart from what the checked problems have, so that counting the
    source's winners of another triton version never reads as the checked problems relying on them."""
    from tuning_db.coverage import coverage_gaps, describe_other_triton, other_triton_counts

    running = _running_triton()
    serving = [w for w in winners if not w.stale]
    other = describe_other_triton(other_triton_counts(serving), running)
    if other:  # said whether or not the check passes
        held = len({w.key.shape_key() for w in serving})
        say(f"{source} holds {len(serving)} winners for {arch} that serve ({held} problems); {other}: "
            "they serve where the running version has none; --strict does not count them")
    gaps = coverage_gaps(problems, arch, winners, strict)
    fresh_gaps = gaps if strict else coverage_gaps(problems, arch, winners, True)
    borrowed = len(fresh_gaps) - len(gaps)  # problems whose only serving winners are another version's
    fresh = f"fresh winner (of the running triton {running})"
    where = f"for {arch} in {source}"
    if gaps:
        for g in gaps:
            say(f"missing: {g.problem.short()} on {arch}: {g.reason}")
        more = f"; {borrowed} more have only another triton version's" if borrowed else ""
        fail(f"{len(gaps)} of {len(problems)} problems have no {fresh if strict else 'winner that serves'} "
             f"{where}{more}", code=1)
    if borrowed:
        say(f"all {len(problems)} problems have a winner {where}: {len(problems) - borrowed} a {fresh}, "
            f"{borrowed} only one of another triton version")
    else:
        say(f"all {len(problems)} problems have a {fresh} {where}")
