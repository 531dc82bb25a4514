"""Which problems the stored winners cover for the running code, and how many serve though another
triton version tuned them: `tritonblas db check` (the CI gate for shipped files) and `db import`'s report.

A winner serves when it was tuned for the running kernel sources (EnvIdentity.serves); one of another
triton version serves too, after any of the running version's. `strict` asks for the running version's.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from .schemas import GemmShape, Winner, version_key


def other_triton_counts(winners: Iterable[Winner]) -> dict[str, int]:
    """How many of `winners` serve though tuned under another triton version, by that version
    (oldest first)."""
    counts = Counter(w.env.triton_version for w in winners if w.other_triton and not w.stale)
    return {v: counts[v] for v in sorted(counts, key=version_key)}


def describe_other_triton(counts: dict[str, int], running: str) -> str:
    """E.g. "152 tuned under triton 3.6.0 (another version than the running 3.9.0)"; "" for none."""
    if not counts:
        return ""
    each = ", ".join(f"{n} tuned under triton {v}" for v, n in counts.items())
    return f"{each} (another version than the running {running})"


@dataclass(frozen=True)
class Gap:
    problem: Any  # as given to coverage_gaps
    reason: str


def coverage_gaps(problems: Iterable[Any], arch: str, winners: Iterable[Winner],
                  strict: bool = False) -> list[Gap]:
    """Problems (GemmShapes, or anything GemmShape.from_problem takes) with no winner that serves on
    `arch` (any device): the CI gate for shipped configs. A winner of another triton version serves
    (same kernels); `strict` asks for the running triton version's. Stale ones never do."""
    by_key: dict[tuple, list[Winner]] = {}
    for w in winners:
        by_key.setdefault(w.key.arch_key(), []).append(w)
    gaps = []
    for p in problems:
        shape = p if isinstance(p, GemmShape) else GemmShape.from_problem(p)
        found = by_key.get((arch, *shape.shape_key()), [])
        if not found:
            gaps.append(Gap(p, "no winner"))
        elif all(w.stale for w in found):
            envs = sorted({f"triton {w.env.triton_version}, kernels {w.env.kernel_hash}" for w in found})
            gaps.append(Gap(p, f"only stale winners ({'; '.join(envs)})"))
        elif strict and all(w.stale or w.other_triton for w in found):
            versions = sorted({w.env.triton_version for w in found if not w.stale}, key=version_key)
            gaps.append(Gap(p, f"only winners of another triton version ({', '.join(versions)}); "
                               "--strict wants the running version's"))
    return gaps
