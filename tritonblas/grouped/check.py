"""Whether a table of grouped winners covers a shapes file's `op: grouped` entries: what `tritonblas db
check` says of them (the dense problems' check is tuning_db.coverage's).

A table's winners serve when it is of the arch asked for and of the running grouped kernel (its
`kernel_hash`, identity.grouped_kernel_hash); with `strict`, only when it was tuned under the running
triton too. A table holds one triton version (its header's), unlike the dense files' rows: the tables of
other versions ship beside it as <arch>-triton-<version>.json.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from ..shapes import GroupedEntry
from .tune import entry_key
from .usertable import read_doc


@dataclass(frozen=True)
class GroupedGap:
    entry: GroupedEntry
    reason: str

    def text(self) -> str:
        e = self.entry
        return f"grouped E={e.groups} {e.m}x{e.n}x{e.k} {e.dtype} {e.layout}: {self.reason}"


def grouped_gaps(entries: list[GroupedEntry], table: Path, arch: str, strict: bool) -> list[GroupedGap]:
    """The entries the table at `table` has no serving winner for, each with why. ValueError for a
    malformed table, or one of another arch."""
    from ..identity import grouped_kernel_hash, triton_version

    if not entries:
        return []
    if not table.is_file():
        return [GroupedGap(e, f"no grouped table at {table}") for e in entries]
    meta, winners = read_doc(table)
    if meta.get("arch") != arch:
        raise ValueError(f"grouped table {table} holds winners for {meta.get('arch')}, not {arch}")
    running_hash, running_triton = grouped_kernel_hash(), triton_version()
    if meta.get("kernel_hash") != running_hash:
        why = f"the table is stale (grouped kernel {meta.get('kernel_hash')}, running {running_hash})"
        return [GroupedGap(e, why) for e in entries]
    if strict and meta.get("triton") != running_triton:
        why = f"the table was tuned under triton {meta.get('triton')}, running {running_triton} (--strict)"
        return [GroupedGap(e, why) for e in entries]
    keys = {e: entry_key(e) for e in entries}
    return [GroupedGap(e, f"no winner for {key.text()}") for e, key in keys.items() if key not in winners]


def table_beside(config_file: Path, arch: str) -> Path:
    """The grouped table that ships beside a dense config file for the running triton: configs/grouped/
    <arch>-triton-<version>.json where there is one, else configs/grouped/<arch>.json (select.table_for)."""
    from ..identity import triton_version
    from .select import table_for

    return table_for(config_file.parent / "grouped", arch, triton_version())
