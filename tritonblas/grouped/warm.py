"""Warming up grouped entries (`tritonblas warmup --shapes`): one grouped_mm call per entry through
dispatch, on operands of the entry's key (its experts, N, K, dtype and layout; rows per group at the
key's bucket, so m = E x rows: the kernel a full-size call selects, compiled on a fraction of its rows).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

import torch

from ..device import tensor_device_info
from ..shapes import GroupedEntry
from .op import grouped_mm
from .select import select
from .tune import entry_key, operands


@dataclass(frozen=True)
class GroupedWarm:
    """status: "compiled" (a kernel, on a GPU), "ran" (a kernel under the interpreter, which compiles
    nothing), "vendor" (torch's op selected: nothing to compile) or "failed" (`note` says why)."""

    entry: GroupedEntry
    status: str
    source: str = ""
    note: str = ""
    seconds: float = 0.0


def warm_entry(entry: GroupedEntry, device: str) -> GroupedWarm:
    """Run the config dispatch selects for `entry` once on `device` ("cuda:0"; "cpu" under the
    interpreter). Never raises for the entry's own failure: it is the result's note."""
    started = time.perf_counter()
    key = entry_key(entry)
    try:
        x, w, offs = operands(replace(entry, m=entry.groups * key.rows, group_sizes="balanced"), device)
        selection = select(key, tensor_device_info(x))
        grouped_mm(x, w, offs=offs)
        if x.is_cuda:
            torch.cuda.synchronize(x.device)
    except Exception as exc:  # noqa: BLE001 (one entry's failure is reported, the others go on)
        return GroupedWarm(entry, "failed", note=f"{type(exc).__name__}: {exc}",
                           seconds=time.perf_counter() - started)
    status = "vendor" if selection.config.is_vendor else "compiled" if x.is_cuda else "ran"
    return GroupedWarm(entry, status, selection.source, selection.config.short(),
                       time.perf_counter() - started)
