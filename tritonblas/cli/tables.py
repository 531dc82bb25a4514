"""Tables fitted to the console: readable at 80 columns.

rich shares out a width that is too small by squeezing every column, down to zero width or a header
cut to `probl…`. A table here is built from column specs instead: the columns that matter least
(`Col.drop`) leave first until the table fits, and the rest wrap between words, never inside one
(a cell is at least its longest word wide), so a number or a problem's sizes stay whole.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from rich.console import Console
from rich.measure import Measurement
from rich.table import Table

# As wide as any table can be: the width a table takes when nothing has to wrap.
_UNBOUNDED = 1 << 16


@dataclass(frozen=True)
class Col:
    """One column. `drop`: 0 is always shown; where the table is too wide, the highest goes first."""

    header: str
    right: bool = False
    drop: int = 0


def fitted(console: Console, cols: Sequence[Col], rows: Iterable[Sequence[str]], **table_options) -> Table:
    """A Table of `rows` (one cell per column of `cols`, rich markup allowed) that fits `console`'s
    width: columns dropped as `Col.drop` orders them while the table would have to wrap, then cells
    wrapped between words. `table_options` go to Table (title, caption, box, ...)."""
    rows = [list(r) for r in rows]
    shown = list(range(len(cols)))
    leaving = sorted((i for i, c in enumerate(cols) if c.drop), key=lambda i: (-cols[i].drop, -i))
    while True:
        table = Table(**table_options)
        for i in shown:
            table.add_column(cols[i].header, justify="right" if cols[i].right else "left", overflow="fold")
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        if not leaving or natural_width(console, table) <= console.width:
            return table
        shown.remove(leaving.pop(0))


def natural_width(console: Console, table: Table) -> int:
    """The width `table` takes when no cell wraps."""
    return Measurement.get(console, console.options.update_width(_UNBOUNDED), table).maximum
