"""Arithmetic the layers share: ceiling division, a GEMM's FLOPs and its rate. Pure Python."""

from __future__ import annotations

import math


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for b > 0, in integers."""
    return -(-a // b)


def gemm_flops(m: int, n: int, k: int) -> int:
    """Multiply-adds of C[M, N] = A[M, K] @ B[K, N], two FLOPs each (a bias adds no count)."""
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, ms: float | None) -> float | None:
    """The rate of an (m, n, k) GEMM that took `ms` milliseconds; None when no time is known."""
    return gemm_flops(m, n, k) / (ms * 1e9) if ms else None


def streamk_split(tiles: int, programs: int, iters: int) -> int:
    """K segments the Stream-K kernel (kernels/streamk.py) gives each of the tiles left after full waves
    of `programs`: min(programs // leftover tiles, K iterations); 0 when the tiles fill whole waves."""
    rest = tiles % programs
    return min(programs // rest, max(iters, 1)) if rest else 0


# Splits from which the Stream-K fix-up is a two-level tree (kernels/fixup.py mirrors it). The tree's
# second level (a group sum stored, a fence, one more counter) cost about 3 partial reads on the H200:
# 2176x2176x4096 (S = 5) 81.3 -> 84.9 us and 512x512x32768 (S = 8) 55.9 -> 58.4 with the tree, 768x3072x8192
# (S = 11) 89.5 -> 89.3, 256x256x65536 (S = 33) 85.8 -> 58.7, 128x128x8192 (S = 128) 218 -> 59
# (tests/kernel_ab.py, graph replay, 2026-11-30). So it pays once G + Q + 3 < S.
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
# replay, deferred against data-parallel tiles first (tests/kernel_ab.py --chunks --both-modes, row 31):
# S 11 768x3072x8192 128x128 74.3 -> 70.7 us (pointers) and 91.6 -> 87.8 (TMA); S 6 2176x2176x4096
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
