"""`tritonblas warmup`: compile ahead every config dispatch would run; thin over `tritonblas.warm`."""

from __future__ import annotations

from pathlib import Path

import typer

from .common import (
    DB_HELP,
    DEVICE_HELP,
    DTYPES_HELP,
    SHAPES_HELP,
    err_console,
    fail,
    interpreter_mode,
    parse_device,
    parse_dtypes,
    say,
)
from .targets import check_db
from .tune_grouped import grouped_entries


def warmup(shapes: list[Path] = typer.Option(None, "--shapes", help=SHAPES_HELP),
           file: Path = typer.Option(None, "--file", help="A config file (e.g. configs/sm_90.json): warm up "
                                     "the problems of its entries."),
           dtypes: str = typer.Option(None, "--dtypes", help=DTYPES_HELP),
           db: str = typer.Option(None, "--db", help=DB_HELP + " Dispatch reads it."),
           device: int = typer.Option(0, "--device", help=DEVICE_HELP),
           workers: int = typer.Option(None, "--workers", min=1, help="Compiles at a time (threads; "
                                       "default: up to 16)."),
           ) -> None:
    """Compile every config dispatch would run for the given problems, in parallel, into triton's cache.

    The first call of a config in a fresh process compiles its kernel (seconds on a GPU); after a
    warm-up, a new process finds it in triton's cache (~/.triton/cache or $TRITON_CACHE_DIR; warm up
    where the cache will be read: the same machine or a shared cache directory). Each problem runs once
    through dispatch, as a user's call does (a quantized one through tritonblas.scaled_mm). Problems
    dispatch sends to the vendor (torch.mm, torch._scaled_mm) compile nothing. It also builds the
    library's C++ side once per torch (cached), whose front answers explicit calls that torch's op runs
    without the Python lookup, in this process and later ones. Grouped entries of a shapes file
    (`op: grouped`) run once each through tritonblas.grouped_mm on operands of their dispatch key (all
    experts, N and K; rows per group at the key's bucket), compiling the kernel dispatch selects (run
    under the interpreter). Exit code 1 if any problem fails to compile or run.

    **Examples**

    ```
    tritonblas warmup --shapes shapes.yaml
    tritonblas warmup --file configs/sm_90.json --device 1
    tritonblas warmup --shapes shapes.yaml --db tune.sqlite --workers 8
    ```
    """
    from ..selection import dispatch
    from ..shapes import ShapesError
    from ..warm import problems_of
    from ..warm import warmup as warm
    from .common import guard

    if not shapes and file is None:
        fail("error: give the problems with --shapes FILE or --file CONFIG_FILE")
    chosen = parse_dtypes(dtypes)
    try:
        problems = problems_of(shapes or None, None, dtypes=chosen)
    except ShapesError as e:
        fail(f"error: {e}")
    if file is not None:
        problems = list(dict.fromkeys(problems + guard(problems_of, None, file)))
    entries = grouped_entries(shapes, dtypes) if shapes else []
    parse_device(device)
    where = check_db(db)
    say(f"warming up {len(problems)} problems" + (f" and {len(entries)} grouped entries" if entries else "")
        + f" (dispatch reads {where})")
    with dispatch.using_database(db):
        results = warm(problems=problems, device=device, workers=workers) if problems or not entries else []
        failed = _warm_grouped(entries, device)
    counts = {s: sum(r.status == s for r in results) for s in ("compiled", "vendor", "selected", "failed")}
    for r in results:
        if r.status == "failed":
            err_console.print(f"failed: {r.problem.short()}: {r.note}", markup=False)
    say(f"done: {counts['compiled']} compiled, {counts['vendor']} run by torch.mm (nothing to compile)"
        + (f", {counts['selected']} only selected (the interpreter compiles nothing)" if counts["selected"]
           else "") + f", {counts['failed']} failed, in {sum(r.seconds for r in results):.1f} s of work")
    if counts["failed"] or failed:
        fail(f"{counts['failed'] + failed} of {len(results) + len(entries)} problems failed to warm up",
             code=1)


def _warm_grouped(entries: list, device: int) -> int:
    """Each grouped entry's selected kernel run once (tritonblas.grouped.warm), a line each; the
    number that failed."""
    if not entries:
        return 0
    from ..grouped.warm import warm_entry

    where = "cpu" if interpreter_mode() else f"cuda:{device}"
    results = [warm_entry(e, where) for e in entries]
    for r in results:
        if r.status == "failed":
            err_console.print(f"failed: grouped {r.entry.text()}: {r.note}", markup=False)
        else:
            say(f"grouped {r.entry.text()}: {r.status}, {r.note} from {r.source} in {r.seconds:.1f} s")
    return sum(r.status == "failed" for r in results)
