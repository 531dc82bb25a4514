"""`tritonblas tune`'s grouped entries (`op: grouped` in a shapes file): tuned after the dense problems,
one at a time on the first device, by tritonblas.grouped.tuner.tune_entry; each winner merged into the
user table `grouped-<arch>.json` next to the database as soon as it is known (an interrupted run keeps
what it finished), where dispatch reads it before the shipped table."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from rich.table import Table

from .common import console, err_console, fail, interpreter_mode, num, parse_dtypes, say
from .tables import Col, fitted

if TYPE_CHECKING:
    from ..grouped.tuner import TunedRow
    from ..shapes import GroupedEntry


def grouped_entries(shapes: Sequence[Path], dtypes: str | None) -> list[GroupedEntry]:
    """Every `op: grouped` entry of the shapes files, in file order, each once."""
    from ..shapes import ShapesError, load_grouped

    chosen = parse_dtypes(dtypes)
    try:
        return list(dict.fromkeys(e for path in shapes for e in load_grouped(path, chosen)))
    except ShapesError as e:
        fail(f"error: {e}")


def _fresh(path: Path) -> dict:
    """The keys the table at `path` holds from this triton and grouped kernel: a rerun skips them."""
    from ..grouped.tune import table_meta
    from ..grouped.usertable import read_doc

    if not path.is_file():
        return {}
    try:
        meta, winners = read_doc(path)
    except ValueError:
        return {}  # rewritten on the first winner (merge_table says so)
    now = table_meta("cpu")
    same = all(meta.get(f) == now[f] for f in ("triton", "kernel_hash"))
    return winners if same else {}


def tune_grouped(entries: list[GroupedEntry], url: str, device_id: int, force: bool) -> list[TunedRow]:
    """Tune each entry on device `device_id` (the CPU under the interpreter), merging each winner into
    the user table next to the database at `url`; entries whose key the table holds from this triton
    and kernel are skipped unless `force`."""
    from ..device import device_arch
    from ..grouped.tune import entry_key, table_meta
    from ..grouped.tuner import TunedRow, tune_entry
    from ..grouped.usertable import merge_table, user_table_path

    interpreter = interpreter_mode()
    device = "cpu" if interpreter else f"cuda:{device_id}"
    arch = device_arch(device_id, interpreter)
    path = user_table_path(arch, url)
    held = {} if force else _fresh(path)
    say(f"tuning {len(entries)} grouped entries on {device} into {path}"
        + (" (Triton interpreter: timings are meaningless)" if interpreter else ""))
    rows = []
    for i, entry in enumerate(entries, 1):
        key = entry_key(entry)
        if key in held:
            row = TunedRow(entry, key, "skipped", winner=held[key])
        else:
            try:
                row = tune_entry(entry, device)
            except Exception as exc:  # noqa: BLE001 (an entry that cannot run fails alone, said below)
                row = TunedRow(entry, key, "failed", notes=[f"{type(exc).__name__}: {exc}"])
            if row.winner is not None:
                merge_table(path, arch, {key: row.winner}, table_meta(device))
        rows.append(row)
        say(f"grouped {i}/{len(entries)}: {entry.text()}: {row.status}"
            + (f", {row.winner.short()}" if row.winner is not None else ""))
    return rows


def grouped_summary(rows: list[TunedRow]) -> Table:
    """One row per grouped entry: its winner and the kernel's time against torch._grouped_mm's (the
    worse of the balanced and zipf draws)."""
    cols = [Col("grouped entry"), Col("status"), Col("winner"), Col("vs torch._grouped_mm", right=True),
            Col("time", right=True, drop=1)]
    return fitted(console, cols, ([r.entry.text(), r.status if r.ok else f"[red]{r.status}[/red]",
                                   "-" if r.winner is None else r.winner.short(),
                                   num(r.worst_ratio, ".3g") + ("x" if r.worst_ratio else ""),
                                   f"{r.elapsed_s:.1f}s"] for r in rows),
                  title=f"{len(rows)} grouped entries")


def report_grouped(rows: list[TunedRow]) -> int:
    """Print the outcome; the number of entries without a winner."""
    console.print(grouped_summary(rows))
    bad = [r for r in rows if not r.ok]
    for r in bad:
        err_console.print(f"failed: {r.entry.text()}: {'; '.join(r.notes)}", markup=False)
    counts = {s: sum(r.status == s for r in rows) for s in ("tuned", "torch", "skipped")}
    console.print(f"grouped: {counts['tuned']} tuned, {counts['torch']} won by torch._grouped_mm, "
                  f"{counts['skipped']} already in the table" + (f", {len(bad)} failed" if bad else ""),
                  markup=False)
    return len(bad)
