"""One shard of a shapes file, so that many hosts tune one file into one database (`--shard I/N`).

The problems of the shapes files (in file order, each once) are dealt round-robin: problem j belongs to
shard j mod N. Every host that reads the same files with the same `--dtypes` computes the same list, so
the N shards partition it exactly: every problem in one shard, none in two, sizes within one of each
other, large and small problems mixed in every shard.

`--shard auto` takes the shard from the scheduler: a Slurm job array (SLURM_ARRAY_TASK_ID, counted
from SLURM_ARRAY_TASK_MIN in steps of SLURM_ARRAY_TASK_STEP, of SLURM_ARRAY_TASK_COUNT tasks) or a
Kubernetes Indexed Job (JOB_COMPLETION_INDEX; the Job's completions are not in the pod's environment,
so the count is given: `--shard auto/N`).
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TypeVar

T = TypeVar("T")
SLURM_VARS = ("SLURM_ARRAY_TASK_ID", "SLURM_ARRAY_TASK_COUNT")
K8S_VAR = "JOB_COMPLETION_INDEX"


@dataclass(frozen=True)
class Shard:
    """Shard `index` (from 0) of `count`."""

    index: int
    count: int

    def __post_init__(self) -> None:
        if not (self.count >= 1 and 0 <= self.index < self.count):
            raise ValueError(f"shard {self.index}/{self.count}: the index must be 0 to count - 1 "
                             f"(0/{max(self.count, 1)} .. {max(self.count, 1) - 1}/{max(self.count, 1)})")

    def take(self, problems: Sequence[T]) -> list[T]:
        """This shard's problems, in their order."""
        return [p for j, p in enumerate(problems) if j % self.count == self.index]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


def _int(text: str, what: str) -> int:
    try:
        return int(text.strip())
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {text!r}") from None


def parse_shard(text: str, environ: Mapping[str, str] | None = None) -> Shard:
    """`I/N`, `auto` or `auto/N` (see the module docstring); ValueError says what is wrong."""
    env = os.environ if environ is None else environ
    head, sep, tail = text.strip().partition("/")
    count = _int(tail, "the shard count N in I/N") if sep else None
    if head != "auto":
        if count is None:
            raise ValueError(f"expected I/N (e.g. 0/4), auto or auto/N, got {text!r}")
        return Shard(_int(head, "the shard index I in I/N"), count)
    if all(v in env for v in SLURM_VARS):
        task = _int(env["SLURM_ARRAY_TASK_ID"], "SLURM_ARRAY_TASK_ID")
        first = _int(env.get("SLURM_ARRAY_TASK_MIN", "0"), "SLURM_ARRAY_TASK_MIN")
        step = _int(env.get("SLURM_ARRAY_TASK_STEP", "1"), "SLURM_ARRAY_TASK_STEP")
        tasks = _int(env["SLURM_ARRAY_TASK_COUNT"], "SLURM_ARRAY_TASK_COUNT")
        if count is not None and count != tasks:
            raise ValueError(f"auto/{count}, but the Slurm array has SLURM_ARRAY_TASK_COUNT={tasks} tasks")
        if step < 1 or (task - first) % step:
            raise ValueError(f"SLURM_ARRAY_TASK_ID={task} is not in the array {first}, {first + step}, ...")
        return Shard((task - first) // step, tasks)
    if K8S_VAR in env:
        if count is None:
            raise ValueError(f"{K8S_VAR} is set (a Kubernetes Indexed Job), which gives no count: use "
                             "--shard auto/N with N the Job's completions")
        return Shard(_int(env[K8S_VAR], K8S_VAR), count)
    raise ValueError(f"--shard auto needs {' and '.join(SLURM_VARS)} (a Slurm job array) or {K8S_VAR} "
                     "(a Kubernetes Indexed Job) in the environment; neither is set")
