"""The heuristic's search space: every config the cost model (heuristic.py) ranks for a problem.

Tile shapes, warps and stages of the Persistent and Stream-K kernels (with Stream-K's grids and its reduce
kernel where they change the schedule), the block-scaled kernel's measured tiles, and the Gluon fp8
kernels' rings; each kept only where `config.config_supports` accepts it.
"""

from __future__ import annotations

import itertools

from ..arch import DeviceInfo
from ..arith import cdiv
from ..config import GLUON_SHAPE, GemmConfig, config_supports
from ..launch.streamk import splits_tiles, streamk_grids
from ..problem import DTYPE_BYTES, Problem, operands_aligned

BLOCK_MN = (16, 32, 64, 128, 256)
BLOCK_K = (32, 64, 128, 256)
# 1-byte operands: triton's fp8 dot on sm_90 needs block_k >= 32, and a K step of 32 moves half the bytes
# of a 16-bit one, too little to hide a load; 64-256 are the steps fp8 GEMMs use.
BLOCK_K_1BYTE = (64, 128, 256)
WARPS = (4, 8)
STAGES = (3, 4, 5)

# Block-wise scales (kernels/blockscaled.py): the tiles that led on the H200 (2026-12-04, e4m3 -> bf16,
# DeepSeek-V3 and Qwen3 weights, M 16-4096; docs/notes/kernel-levers.md, B1-B3). The per-step promotion
# runs on CUDA cores, which the model's tile efficiency knows nothing of: 128x128 tiles on 4 warps ran at
# 0.4x the same tile on 8, 128x256 at 0.74-0.85x 128x128, so the model only ranks among these.
# (block_m, block_n, block_k, num_warps, num_stages)
_BLOCK_SCALED_TILES = ((128, 128, 128, 8, 4), (64, 128, 128, 4, 4), (64, 64, 128, 4, 5))
# The Gluon block kernel's rings (config.gluon_refusal drops those that do not fit beside the output tiles).
GLUON_STAGES = (4, 5, 6)


def _block_scaled_candidates(problem: Problem, device: DeviceInfo) -> list[GemmConfig]:
    out = []
    for bm, bn, bk, warps, stages in _BLOCK_SCALED_TILES:
        # by pointers only where descriptors cannot read the operands: TMA's K loop is warp-specialized
        for tma in (True, False):
            cfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages, tma=tma)
            if config_supports(cfg, problem, device) is None:
                out.append(cfg)
                break
    return out + _gluon_candidates(problem, device)


def _gluon_candidates(problem: Problem, device: DeviceInfo) -> list[GemmConfig]:
    """The Gluon fp8 kernels' rings that fit (block-wise scales: blockscaled_gluon.py; tensor- and row-wise:
    scaled_gluon.py, the same promotion and tile)."""
    configs = [GemmConfig(**GLUON_SHAPE, num_stages=stages, tma=True, gluon=True) for stages in GLUON_STAGES]
    return [cfg for cfg in configs if config_supports(cfg, problem, device) is None]


def candidates(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> list[GemmConfig]:
    """Every feasible config of the heuristic's space for this problem."""
    if problem.scales == "block":
        return [] if enable_streamk else _block_scaled_candidates(problem, device)
    families = (False, True) if enable_streamk is None else (enable_streamk,)
    copies = (False,) if operands_aligned(problem) else (False, True)
    # A reduce kernel where no data-parallel tile hides the fix-up, but not on a small problem, whose
    # eager call would pay its launch in host time (space._canonical).
    reduce_ok = not problem.small
    block_k = BLOCK_K_1BYTE if min(DTYPE_BYTES[problem.dtype], DTYPE_BYTES[problem.b]) == 1 else BLOCK_K
    out = []
    for bm, bn, bk, warps, stages, sk in itertools.product(BLOCK_MN, BLOCK_MN, block_k, WARPS, STAGES,
                                                           families):
        if bn < 32:
            continue  # N is the contiguous output dim: 16-wide tiles only ever lost in the sweep
        for tma, copy in itertools.product((False, True), copies):
            # Flattened only on the persistent family: Stream-K's flattened data-parallel loop ran 3.5%
            # (TMA) to 7% (pointers) slower than its plain one (tuning run of 2026-11-30, lever 19); the
            # tuner still tries it as a neighbour.
            fields = dict(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages,
                          streamk=sk, tma=tma, flatten=tma and not sk, aligned_copy=copy)
            for grid in streamk_grids((bm, bn, bk), problem, device.sm_count) if sk else (None,):
                cfg = GemmConfig(**fields, grid=grid)
                if sk and enable_streamk is None and not splits_tiles(cfg, problem, device.sm_count):
                    continue  # the same schedule as its persistent twin (splits_tiles), which is listed
                if config_supports(cfg, problem, device) is None:
                    out.append(cfg)
                    if sk and reduce_ok and cdiv(problem.m, bm) * cdiv(problem.n, bn) < device.sm_count:
                        out.append(GemmConfig(**fields, grid=grid, reduce_kernel=True))
    return out if enable_streamk else out + _gluon_candidates(problem, device)
