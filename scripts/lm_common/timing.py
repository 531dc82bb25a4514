"""The interleaved timer of scripts/model_bench.py: each side's call in its own mode, the sides
alternating round by round, host time counted (the GPU synchronized around every timed call)."""

from __future__ import annotations

import contextlib
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass
class Side:
    """One side of a comparison: its mode (a context manager factory), an untimed setup per call
    (a fresh KV cache, a prefill) and the timed call, which gets the setup's result."""

    name: str
    mode: Callable[[], contextlib.AbstractContextManager]
    run: Callable[[Any], Any]
    setup: Callable[[], Any] = lambda: None
    times_ms: list[float] = field(default_factory=list)
    result: Any = None  # the last timed call's


def call_order(rep: int, sides: list[Side]) -> list[Side]:
    """Alternate the order round by round, so neither side always runs right after the other."""
    return sides if rep % 2 == 0 else sides[::-1]


def interleaved(sides: list[Side], reps: int, warmup: int, sync: Callable[[], None] = lambda: None,
                clock: Callable[[], float] = time.perf_counter, settle: int = 0) -> dict[str, float]:
    """Median ms of each side's timed call over `reps` rounds after `warmup` untimed ones; each call in
    its side's mode, synchronized before and after (host time counts), after `settle` untimed calls in
    that same mode: a user's loop runs call after call in one mode, and the first call after switching
    (the other side's call, the switch's own Python) runs slower on a host-bound model whichever side it
    is (H200, a BERT prefill after a gc.collect(): 1.5 -> 3.5 ms), which would charge the side whose
    switch does more (transparent mode's enable()) for what no user's loop pays."""
    for rep in range(warmup + reps):
        for side in call_order(rep, sides):
            with side.mode():
                for _ in range(settle):
                    side.run(side.setup())
                state = side.setup()
                sync()
                start = clock()
                out = side.run(state)
                sync()
                elapsed = (clock() - start) * 1e3
            if rep >= warmup:
                side.times_ms.append(elapsed)
                side.result = out
    return {s.name: statistics.median(s.times_ms) for s in sides}


def paired_speedup(first: Side, second: Side) -> tuple[float, float, float]:
    """The median over rounds of `first`'s time over `second`'s in the same round, and the quartiles of
    those ratios: the two calls of a round run seconds apart, so a drift of the host's speed (slower
    minutes, another process) moves both alike, where a ratio of the two medians takes it whole."""
    ratios = [a / b for a, b in zip(first.times_ms, second.times_ms, strict=True)]
    if len(ratios) < 2:
        return ratios[0], ratios[0], ratios[0]
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    return statistics.median(ratios), q1, q3
