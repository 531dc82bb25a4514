"""The tuner's search space: which configs are measured for a problem, in which order.

The heuristic's best distinct tiles (seeds), the first seed's neighbours (one lever moved at a time), the
other seeds, then neighbours and grid variants of the best few; every candidate canonicalized (one config
per schedule) and pruned by `config_supports`. On a GPU torch.mm (`GemmConfig.vendor()`) comes first.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable

from ..arch import DeviceInfo
from ..arith import cdiv
from ..config import GemmConfig, config_supports
from ..launch.streamk import STREAMK_SPLITS, program_count, splits_tiles
from ..problem import Problem
from ..selection import heuristic

# How many of the heuristic's best configs get neighbours and grid variants added.
NEIGHBOUR_SEEDS = 4
# Seeds timed before the first seed's neighbours (candidate_space).
SEEDS_FIRST = 5


def _with(cfg: GemmConfig, **changes) -> GemmConfig:
    """A validated copy (model_copy would skip validation)."""
    return GemmConfig.model_validate({**cfg.model_dump(), **changes})


def _neighbours(cfg: GemmConfig) -> Iterable[GemmConfig]:
    """One lever moved at a time, in the order their moves won: of the 44 winners of the tuning run of
    2026-11-30 (016dd08:docs/benchmarks/h200-tune3-measurements.json), 28 were a seed and 16 a seed's
    neighbour, 12 of those of the first seed; by lever: stages 9, group 2, tma 2, warp specialization 2,
    block_k 1. So: stages +-1, tma, flatten, group, halved/doubled blocks, the other warp count, an aligned
    copy of misaligned operands. Not warp specialization: on 8 warps triton 3.6 compiles the same sm_90 code
    with or without it, so its two "wins" were draws between one kernel timed twice, and 267 of the 3837
    kernels timed in the tuning run of commit e414319 (2026-12-01) were such twins; on 4 warps, where it takes
    effect, it gave wrong results (kernel-levers row 37)."""
    for s in (cfg.num_stages + 1, cfg.num_stages - 1):
        if 1 <= s <= 8:
            yield _with(cfg, num_stages=s)
    # TMA with host-built descriptors first: 1.1-2.3 us less a small kernel
    # (016dd08:scripts/tma_desc_probe.py), 1.0-6.6 us less a Stream-K one, whose every program builds its own
    # (graph replay, H200, the same config device- -> host-built: 512x512x32768 36.2 -> 34.8,
    # 016dd08:docs/benchmarks/h200-hdesc-ab11.txt; branch next/overlap's configs 1792x1792x8192 93.3 -> 86.7,
    # 2176x2176x4096 73.5 -> 70.8, 016dd08:docs/benchmarks/h200-kernel-ab-overlap.txt). Offered on TMA seeds
    # only before commit 22376dd (2026-12-01): a tuning run timed none on the streamk class.
    if cfg.tma:
        yield _with(cfg, host_descriptors=not cfg.host_descriptors)
        yield _with(cfg, tma=False, host_descriptors=False)
    else:
        yield _with(cfg, tma=True, host_descriptors=True)
        yield _with(cfg, tma=True)
    yield _with(cfg, flatten=not cfg.flatten)
    for g in (4, 16, 8):
        yield _with(cfg, group_m=g)
    for name in ("block_k", "block_m", "block_n"):
        for v in (getattr(cfg, name) // 2, getattr(cfg, name) * 2):
            if 16 <= v <= 256:
                yield _with(cfg, **{name: v})
    if cfg.streamk:  # the fix-up in the kernel or in a reduce kernel of its own
        yield _with(cfg, reduce_kernel=not cfg.reduce_kernel)
    yield _with(cfg, num_warps=8 if cfg.num_warps == 4 else 4)
    yield _with(cfg, aligned_copy=not cfg.aligned_copy, tma=True)  # a padded copy is TMA-ready


def _grids(cfg: GemmConfig, problem: Problem, device: DeviceInfo) -> Iterable[GemmConfig]:
    """Grid variants. Persistent: one program per SM, or two (a second resident CTA hides latency).
    Stream-K: the same, plus grids that split each tile into exactly s pieces when tiles < SMs."""
    sms = device.sm_count
    tiles = cdiv(problem.m, cfg.block_m) * cdiv(problem.n, cfg.block_n)
    grids = [None, 2 * sms]
    if cfg.streamk and tiles < sms:
        grids += [tiles * s for s in STREAMK_SPLITS if tiles * s <= 2 * sms]
    for g in grids:
        yield _with(cfg, grid=g)


def _canonical(cfg: GemmConfig, problem: Problem, device: DeviceInfo,
               enable_streamk: bool | None = None) -> GemmConfig:
    """One config per schedule (dedup): a Stream-K config that splits no tile is its persistent twin
    (unless the family is forced), a small problem's reduce kernel is the in-kernel fix-up and its
    host-built descriptors device-built ones, and a grid that launches as many programs as the default
    one is the default one. In a cold-cache run of 016dd08:scripts/tune_quality.py (2026-11-30),
    4096x1024x512's tuned winner was a Stream-K config splitting nothing, timed in place of the
    flattened persistent twin that won the exhaustive search by 6%."""
    args = (problem.m, problem.n, problem.k, device.sm_count)
    if cfg.streamk and enable_streamk is None and not splits_tiles(cfg, problem,
                                                                              program_count(cfg, *args)):
        cfg = _with(cfg, streamk=False, reduce_kernel=False)
    if problem.small and (cfg.reduce_kernel or cfg.host_descriptors):
        # Per-call host work an eager call pays and a graph replay (how small problems are timed) hides.
        # The reduce kernel's second launch: 128x128x8192 bf16 by config=, H200, 32x32x128 Stream-K:
        # replay 8.10 -> 7.78 us with it, host 31 -> 48 us a call, eager median 16-18 -> 23-66
        # (016dd08:scripts/reduce_host_probe.py). Descriptors built and encoded on the host at every
        # call: timed eager, 90 pairs of a tuning run, host-built / device-built 1.02 geomean (0.72-1.49;
        # row 25).
        cfg = _with(cfg, reduce_kernel=False, host_descriptors=False)
    if cfg.grid is None:
        return cfg
    if program_count(cfg, *args) == program_count(_with(cfg, grid=None), *args):
        return _with(cfg, grid=None)
    return cfg


def _seeds(ranked: list[GemmConfig], top_k: int) -> list[GemmConfig]:
    """The best config of each of the top_k best distinct tiles (block sizes and family), a third of
    them from each family: the model's near-ties (stages, warps) come back as neighbours."""
    firsts: dict[tuple, GemmConfig] = {}
    for cfg in ranked:
        firsts.setdefault((cfg.block_m, cfg.block_n, cfg.block_k, cfg.streamk), cfg)
    tiles = list(firsts.values())
    chosen = [c for fam in (False, True) for c in [t for t in tiles if t.streamk == fam][:top_k // 3]]
    for cfg in tiles:
        if len(chosen) >= top_k:
            break
        if cfg not in chosen:
            chosen.append(cfg)
    return [c for c in tiles if c in set(chosen)]


def vendor_candidate(device: DeviceInfo, enable_streamk: bool | None = None,
                     vendor: bool | None = None) -> bool:
    """Whether torch.mm (GemmConfig.vendor()) is a candidate. vendor None: yes on a GPU when no kernel
    family is asked for; not in Triton's interpreter, where torch.mm runs natively and the kernels are
    emulated, so it would win every CPU tuning run and hide the kernels from the tests that tune
    through them (vendor=True times it there too)."""
    if enable_streamk is not None:
        return False
    return device.arch != "interpreter" if vendor is None else vendor


def candidate_space(problem: Problem, device: DeviceInfo, *, top_k: int = 10, exhaustive: bool = False,
                    enable_streamk: bool | None = None, neighbour_seeds: int = NEIGHBOUR_SEEDS,
                    vendor: bool | None = None) -> list[GemmConfig]:
    """Feasible, deduplicated candidates in heuristic order: the best SEEDS_FIRST distinct tiles, the
    first one's neighbours, the other tiles, then neighbours and grid variants of the best few.

    The vendor GEMM (see vendor_candidate) comes first in the space, so a kernel that ties it exactly
    loses the tie (_pick: earlier first); the tuner times it after the kernels, always and never cut
    short (tuner._timing_order says why).

    exhaustive: every config of the heuristic's grid first, then the same additions, so the normal
    space is a subset of the exhaustive one.
    """
    ranked = [e.config for e in heuristic.rank(problem, device, enable_streamk)]
    seeds = _seeds(ranked, top_k)
    # On a cold compile cache a budget of 4-6 s times the first ~8 candidates only (MIN_TIMED), so the
    # first seed's neighbours come before the other seeds: on the rows of the tuning run of 2026-11-30
    # the best of the first 8 was more than 2% behind the problem's best on 9 of 44 problems in the
    # order seeds-then-neighbours, on 1 in this order (python 016dd08:scripts/tuner_order.py ROWS).
    extra = itertools.chain.from_iterable(_neighbours(c) for c in seeds[1:neighbour_seeds])
    pool = [*seeds[:SEEDS_FIRST], *(_neighbours(seeds[0]) if seeds and neighbour_seeds else ()),
            *seeds[SEEDS_FIRST:], *(ranked if exhaustive else []), *extra]
    pool += [g for c in seeds[:neighbour_seeds] for g in _grids(c, problem, device)]
    out: dict[GemmConfig, None] = {}
    # The vendor where torch takes the problem (a quantized one: torch._scaled_mm's rules, config_supports).
    if vendor_candidate(device, enable_streamk, vendor) and \
            config_supports(GemmConfig.vendor(), problem, device) is None:
        out[GemmConfig.vendor()] = None
    for cfg in pool:
        if enable_streamk is not None and cfg.streamk != enable_streamk:
            continue
        cfg = _canonical(cfg, problem, device, enable_streamk)
        if cfg not in out and config_supports(cfg, problem, device) is None:
            out[cfg] = None
    return list(out)
