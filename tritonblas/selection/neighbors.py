"""The nearest tuned problem: how far a tuned key is from a new problem, and which tuned winners may
serve it. Pure functions over `Problem`s and tuning_db keys; dispatch's neighbour layer adds the
heuristic's checks on top (dispatch._from_neighbor)."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable

from ..config import GemmConfig
from ..problem import DTYPE_BYTES, Problem, rows_aligned

# A neighbour further than this (Euclidean distance in log2 M, N, K: 3.0 is e.g. 8x in one dimension)
# says little about the new shape; the heuristic is the better guess past it.
MAX_NEIGHBOR_DISTANCE = 3.0
# Penalties added to a neighbour's size distance. A different bias kind changes only the epilogue. A
# different layout changes how the pointer loop loads (which axis is contiguous, how wide a load is), so
# only TMA configs cross layouts, and only for 16-bit operands: a descriptor copies the same box of a
# tile whichever axis is contiguous (kernels/common.py: built in storage order, the tile transposed in
# shared memory, which Hopper's 16-bit MMA reads either way). Its 8-bit MMA (fp8, int8) reads K-major
# tiles only, so another layout of a quantized problem adds a transpose: no config crosses there.
BIAS_PENALTY = 0.25
LAYOUT_PENALTY = 0.5
# A neighbour whose tuning run found torch.mm fastest is followed only this close (1.0: a factor 2 in one
# dimension, or the same sizes in another bias kind or layout: torch takes them all). Further away it
# says that the kernels lost there, not what to run here (cuBLAS picks its kernel per shape): such a
# winner is left out of the pool, and the nearest kernel winner, or else the heuristic (which has its
# own vendor rule, heuristic.vendor_preferred), decides.
VENDOR_NEIGHBOR_DISTANCE = 1.0
# Nor across rows that are 16 bytes and rows that are not (problem.rows_aligned): cuBLAS's speed differs
# by 2x-7x between them, so its win at 8192x4096x28672 says nothing of 8192x4096x32001 (torch.mm 15.1 ms,
# the kernels' 32001x4096x8192 3.0 ms; h200-untuned-vocab-dispatch.json).


def distance(a: Problem, key) -> tuple[float, str]:
    """Distance of a tuned key from problem `a`: log2 sizes (Euclidean) plus the bias and layout
    penalties; and the sum spelled out, for explain."""
    size = math.dist([math.log2(max(x, 1)) for x in (a.m, a.n, a.k)],
                     [math.log2(max(x, 1)) for x in (key.m, key.n, key.k)])
    d, parts = size, [f"sizes {size:.2f}"]
    if key.bias != a.bias:
        d += BIAS_PENALTY
        parts.append(f"bias {key.bias} {BIAS_PENALTY}")
    if key.layout != a.layout:
        d += LAYOUT_PENALTY
        parts.append(f"layout {key.layout} {LAYOUT_PENALTY}")
    return d, " + ".join(parts)


def _problem(key) -> Problem:
    return Problem(key.m, key.n, key.k, key.a_dtype, key.layout, key.bias, key.out_dtype, key.b_dtype,
                   key.scales)


def crosses_layout(config: GemmConfig, problem: Problem) -> bool:
    """Whether a winner of another layout may serve `problem` (see LAYOUT_PENALTY); a torch winner
    always may (whether the vendor takes the layout is config_supports', checked by `usable`)."""
    sixteen_bit = DTYPE_BYTES[problem.dtype] == DTYPE_BYTES[problem.b] == 2
    return config.backend == "torch" or (config.tma and sixteen_bit)


def same_operands(problem: Problem, key) -> bool:
    """Whether a tuned key multiplies what `problem` does: A's, B's and C's dtypes and the scale mode
    (a neighbour's config says nothing across them: 1-byte tiles, another epilogue)."""
    return (key.a_dtype, key.b_dtype, key.out_dtype, key.scales) == (problem.dtype, problem.b, problem.out,
                                                                     problem.scales)


def nearest(problem: Problem, pool: Iterable[object], usable: Callable[[GemmConfig], bool]
            ) -> tuple[object, float, str] | None:
    """The winner of `pool` nearest to `problem` (ties: the key's sort order) among those of the same
    dtypes and scale mode (same_operands), a layout it may cross, a config `usable` here, within
    MAX_NEIGHBOR_DISTANCE (a torch winner within VENDOR_NEIGHBOR_DISTANCE); with its distance and the
    distance spelled out."""
    best = None
    for w in pool:
        k = w.key
        if not same_operands(problem, k):
            continue
        if k.layout != problem.layout and not crosses_layout(w.config, problem):
            continue
        if not usable(w.config):
            continue
        d, why = distance(problem, k)
        if w.config.backend == "torch" and (d > VENDOR_NEIGHBOR_DISTANCE
                                            or rows_aligned(_problem(k)) != rows_aligned(problem)):
            continue
        if d <= MAX_NEIGHBOR_DISTANCE and (best is None or (d, k.sort_key()) < best[0]):
            best = ((d, k.sort_key()), w, why)
    if best is None:
        return None
    (d, _), w, why = best
    return w, d, why
