"""Stream-K planning on the host, in one place (pure Python; kernels/streamk.py and kernels/fixup.py
are the device side): how the leftover tiles' K loops are split (`streamk_split`), how the split tiles
are summed (the fix-up's tree `fixup_groups`, deferral `fixup_deferred`, chunks `fixup_plan`; the
reduce kernel's chunks `reduce_chunks`), the programs and workspace of a launch (`program_count`,
`streamk_workspace`), the grids worth pricing and whether a config splits at all (`streamk_grids`,
`splits_tiles`, for the heuristic and the tuner's space), and what the fix-up costs on its critical
path (`fixup_reads`, for the heuristic).
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING

from ..arith import cdiv

if TYPE_CHECKING:
    from ..config import GemmConfig
    from ..problem import Problem


def streamk_split(tiles: int, programs: int, iters: int) -> int:
    """K segments the Stream-K kernel (kernels/streamk.py) gives each of the tiles left after full waves
    of `programs`: min(programs // leftover tiles, K iterations); 0 when the tiles fill whole waves."""
    rest = tiles % programs
    return min(programs // rest, max(iters, 1)) if rest else 0


# Splits from which the Stream-K fix-up is a two-level tree (kernels/fixup.py mirrors it). The tree's
# second level (a group sum stored, a fence, one more counter) cost about 3 partial reads on the H200:
# 2176x2176x4096 (S = 5) 81.3 -> 84.9 us and 512x512x32768 (S = 8) 55.9 -> 58.4 with the tree, 768x3072x8192
# (S = 11) 89.5 -> 89.3, 256x256x65536 (S = 33) 85.8 -> 58.7, 128x128x8192 (S = 128) 218 -> 59
# (016dd08:tests/kernel_ab.py, graph replay, 2026-11-30). So it pays once G + Q + 3 < S.
TREE_MIN_SPLITS = 12
TREE_EXTRA_READS = 3


def fixup_groups(splits: int) -> tuple[int, int]:
    """(G, Q) of a Stream-K tile split S ways: G = ceil(sqrt(S)) segments per fix-up group and Q =
    cdiv(S, G) groups; one group below TREE_MIN_SPLITS (the kernel's fixup_groups, kernels/fixup.py)."""
    group = splits if splits < TREE_MIN_SPLITS else math.isqrt(splits - 1) + 1
    return group, cdiv(splits, group)


def fixup_chain(splits: int) -> int:
    """Partial reads (of one tile's fp32 accumulator) on the fix-up's longest chain for S splits when
    the last segment to arrive sums the tile (or the tree's last group, from TREE_MIN_SPLITS)."""
    group, groups = fixup_groups(splits)
    return splits if groups == 1 else group + groups + TREE_EXTRA_READS


# Where the Stream-K fix-up is deferred (kernels/streamk.py: segments first, chunks claimed after the
# data-parallel tiles): from this many splits, on tiles of at least this many chunks. H200, bf16, graph
# replay, deferred against data-parallel tiles first (016dd08:tests/kernel_ab.py --chunks --both-modes,
# row 31): S 11 768x3072x8192 128x128 74.3 -> 70.7 us (pointers) and 91.6 -> 87.8 (TMA); S 6 2176x2176x4096
# 128x256 79.3 -> 74.0; S 5 even (2176x2176x4096 73.8 -> 71.5, 1536x3072x8192 135.2 -> 138.6); S 2-3
# slower (1792x1792x8192 91.4 -> 96.1, 896x3072x8192 80.5 -> 85.1), one chunk too (768^3 64x64, S 11:
# 11.0 -> 12.0): a claim is one more atomic on the critical path.
DEFER_MIN_SPLITS = 6
# Deferred chunks are DEFERRED_CHUNK fp32 (16 rows of a 128-wide tile): 8 to a 128x128 tile, so 8 of
# its S programs share the reads (row 33); tiles of 8 chunks, 128x128 and up, are deferred (row 31's
# set: one-chunk 64x64 tiles lost).
DEFERRED_CHUNK = 2048
DEFER_MIN_CHUNKS = 8


def fixup_deferred(tiles: int, programs: int, splits: int, chunks: int) -> bool:
    """Whether the Stream-K kernel claims the fix-up's chunks after its data-parallel tiles (there are
    some: tiles >= programs) instead of summing the tile when its last segment arrives."""
    return tiles >= programs and splits >= DEFER_MIN_SPLITS and chunks >= DEFER_MIN_CHUNKS


def fixup_reads(splits: int, chunks: int, deferred: bool) -> float:
    """Whole-tile partial reads on the fix-up's critical path (kernels/streamk.py): deferred
    (fixup_deferred), the program of segment j sums chunks j, j + S, ... of the `chunks`, each over
    the S partials; else fixup_chain."""
    if deferred:
        return cdiv(chunks, splits) * splits / chunks
    return fixup_chain(splits)


def fixup_plan(config: GemmConfig, tiles: int, programs: int, splits: int, tma: bool) -> tuple[int, bool]:
    """(FIXUP_CHUNKS, DEFERRED) of a Stream-K launch (kernels/streamk.py) whose `tiles` leave `splits`
    segments per leftover tile on `programs` programs; `tma`: its loads run TMA.

    Summed on arrival, a tile holds chunks of 4096 fp32 (32 values a thread on 4 warps, so four chunks
    in flight are as many as one whole 128x128 partial): on TMA tiles; pointer tiles read whole partials
    one at a time. H200, graph replay against whole partials (pipelined by cp.async on TMA tiles on 4
    warps, kernel-levers row 30), bf16 (016dd08:tests/kernel_ab.py --chunks --both-modes, row 31): TMA
    128x128 128x128x8192 38.8 -> 35.1 us, 256x256x65536 49.0 -> 47.7, 1024x1024x16384 60.6 -> 58.9; pointer
    128x128 at 5 stages slower in chunks, 768x3072x8192 72.7 -> 74.3, 2176x2176x4096 71.1 -> 73.8.
    Deferred (fixup_deferred), chunks of 2048 fp32, at most 8 (the tile counter's claim bits):
    up to 8 programs claim one each and read its S slots eight at a time (row 33)."""
    if config.reduce_kernel:  # no fix-up in the kernel (kernels/reduce.py sums the partials)
        return 1, False
    def chunks(floats: int) -> int:  # chunks of `floats` fp32 to a tile, 1 to 8 (the claim bits)
        return min(8, max(1, config.block_m * config.block_n // floats))

    deferred_chunks = chunks(DEFERRED_CHUNK)
    if fixup_deferred(tiles, programs, splits, deferred_chunks):
        return deferred_chunks, True
    return (chunks(4096) if tma else 1), False


def streamk_workspace(config: GemmConfig, m: int, n: int, k: int, programs: int) -> tuple[int, int]:
    """(fp32 partial floats, counters) a Stream-K launch needs: a slot per program and, where the fix-up
    is a tree (S >= 12, not deferred), a slot per group of each split tile; a counter per split tile
    and per group."""
    tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
    sk_tiles = tiles % programs
    splits = streamk_split(tiles, programs, cdiv(k, config.block_k))
    deferred = fixup_plan(config, tiles, programs, splits, config.tma)[1]
    groups = fixup_groups(splits)[1] if splits > 1 and not (deferred or config.reduce_kernel) else 1
    group_slots = sk_tiles * groups if groups > 1 else 0
    return (programs + group_slots) * config.block_m * config.block_n, sk_tiles + group_slots


def program_count(config: GemmConfig, m: int, n: int, k: int, sm_count: int) -> int:
    """Programs launched for `config` on an (m, n, k) problem."""
    tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
    grid = config.grid or sm_count
    if config.streamk and k > 0:
        return max(1, min(grid, tiles * cdiv(k, config.block_k)))
    return max(1, min(grid, tiles))


def reduce_chunks(sk_tiles: int, programs: int) -> int:
    """Row chunks a split tile is summed in by kernels/reduce.py: 8 where 4 would leave half the
    programs' worth of SMs idle, else 4 (a chunk of a tile of 4 or 8 holds at most 32 or 16 values a
    thread under the accumulator rule, so fixup.sum_chunk's 4 or 8 slots in flight stay within 128)."""
    return 8 if 4 * sk_tiles < programs else 4


def tile_splits(config: GemmConfig, problem: Problem, programs: int) -> int:
    """K segments per leftover tile of `config` on `problem` on `programs` programs
    (streamk_split)."""
    tiles = cdiv(problem.m, config.block_m) * cdiv(problem.n, config.block_n)
    return streamk_split(tiles, programs, cdiv(problem.k, config.block_k))


def splits_tiles(config: GemmConfig, problem: Problem, programs: int) -> bool:
    """Whether a Stream-K config splits any tile's K loop on `programs` programs. When it does not, it
    runs exactly the persistent kernel's schedule (its data-parallel loop, then one program per
    leftover tile), so the persistent twin stands for it."""
    return problem.k > 0 and tile_splits(config, problem, min(config.grid or programs, programs)) > 1


# Splits per tile the Stream-K grids below offer when the tiles do not fill the SMs.
STREAMK_SPLITS = (2, 3, 4, 6, 8, 12, 16, 24, 32)


def streamk_grids(blocks: tuple[int, int, int], problem: Problem, sm_count: int) -> tuple[int | None, ...]:
    """Stream-K grids worth pricing: one program per SM (None), and, when the tiles are fewer than the
    SMs, grids that cut every tile's K loop in exactly s segments, s in STREAMK_SPLITS and fewer than
    the split one program per SM gives (the same schedule with idle programs otherwise). A tile split
    128 ways has a long fix-up: 128x128x8192 (one 128x128 tile) took 59 us on 132 programs with the
    tree fix-up, torch.mm 7.3 (016dd08:tests/kernel_ab.py, graph replay, H200, 2026-11-30)."""
    block_m, block_n, block_k = blocks
    tiles = cdiv(problem.m, block_m) * cdiv(problem.n, block_n)
    default_split = streamk_split(tiles, sm_count, cdiv(problem.k, block_k)) if tiles < sm_count else 0
    return (None, *(tiles * s for s in STREAMK_SPLITS if s < default_split))
