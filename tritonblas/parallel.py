"""First launches (which compile) in a pool of threads: what the tuner's `prepare` and `warmup` share.

Triton's compiler releases the GIL in its passes and in ptxas, so compiles in threads overlap. Triton's
interpreter patches `triton.language` globally while a kernel runs, so there (`workers` 1) the jobs run
one at a time in the calling thread.
"""

from __future__ import annotations

import concurrent.futures as cf
import contextlib
import time
from collections.abc import Callable, Hashable, Sequence
from typing import TypeVar

J = TypeVar("J", bound=Hashable)
R = TypeVar("R")


def run_first_launches(jobs: Sequence[J], run: Callable[[J], R], *, workers: int, cuda_device=None,
                       deadline: float | None = None, timeout_s: float = 300.0,
                       on_done: Callable[[J, R], None] | None = None) -> tuple[dict[J, R], list[J]]:
    """`run(job)` for each job, in order, in `workers` threads (each with `cuda_device` current).

    Jobs not started by `deadline` (a time.monotonic() value; None: no deadline) are dropped; those
    running then get `timeout_s` more to finish, so that none overlaps what the caller does next.
    Returns the results of the finished jobs, and the jobs still running after that (their threads
    are left to finish in the background). `on_done(job, result)` is called as each one finishes.
    """
    if workers <= 1:
        done: dict[J, R] = {}
        for job in jobs:
            if deadline is not None and time.monotonic() >= deadline:
                break
            done[job] = run(job)
            if on_done is not None:
                on_done(job, done[job])
        return done, []

    def job_in_thread(job: J) -> R:
        context = contextlib.nullcontext()
        if cuda_device is not None:
            import torch

            context = torch.cuda.device(cuda_device)
        with context:
            result = run(job)
        if on_done is not None:
            on_done(job, result)
        return result

    pool = cf.ThreadPoolExecutor(max_workers=min(workers, len(jobs) or 1))
    futures = {pool.submit(job_in_thread, job): job for job in jobs}
    until = timeout_s if deadline is None else max(0.0, deadline - time.monotonic())
    cf.wait(futures, timeout=until)
    for f in futures:  # past the deadline: drop what has not started
        f.cancel()
    finished, pending = cf.wait(futures, timeout=timeout_s)
    pool.shutdown(wait=not pending, cancel_futures=True)
    return ({futures[f]: f.result() for f in finished if not f.cancelled()},
            [futures[f] for f in pending])
