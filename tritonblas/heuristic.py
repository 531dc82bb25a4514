"""Analytical config selection: a cost model over Persistent and Stream-K candidates. Pure Python.

For each feasible candidate the model estimates time from
  - compute: tile FLOPs at a per-SM rate scaled by the tile's efficiency (big tiles reuse more),
  - wave quantization: Persistent runs ceil(tiles / programs) waves of whole tiles; Stream-K spreads
    the last partial wave's K iterations evenly over all programs,
  - edge waste: tiles past M/N compute zeros that are thrown away,
  - the Stream-K fix-up: each split tile writes and re-reads fp32 partials,
  - memory: bytes moved at the device bandwidth (roofline: the larger of compute and memory wins),
and ranks candidates by it. `explain` returns the ranked list with each term, so a choice is auditable.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass

from .config import DTYPE_BYTES, DeviceInfo, GemmConfig, Problem, config_supports

# Peak dense rates (TFLOP/s) and bandwidth (TB/s) per arch; unknown archs fall back to "default".
# H200: torch.mm bf16 8192^3 measured 660-740 TFLOP/s on 2026-11-29; device copy ~4.3 TB/s.
_PEAK_TFLOPS = {"sm_90": {"fp16": 720.0, "bf16": 720.0, "fp32": 50.0, "tf32": 360.0},
                "default": {"fp16": 300.0, "bf16": 300.0, "fp32": 20.0, "tf32": 150.0}}
_BANDWIDTH_TBS = {"sm_90": 4.3, "default": 2.0}
_LAUNCH_US = 4.0
_FIXUP_US_PER_TILE = 0.6

BLOCK_MN = (64, 128, 256)
BLOCK_K = (32, 64, 128)
WARPS = (4, 8)
STAGES = (3, 4, 5)


@dataclass(frozen=True)
class Estimate:
    config: GemmConfig
    total_us: float
    compute_us: float
    memory_us: float
    waves: float
    efficiency: float
    edge_waste: float
    fixup_us: float

    def why(self) -> str:
        return (f"{self.config.short()}: {self.total_us:.1f} us (compute {self.compute_us:.1f}, memory "
                f"{self.memory_us:.1f}, waves {self.waves:.2f}, tile efficiency {self.efficiency:.2f}, "
                f"edge waste {self.edge_waste:.0%}, fix-up {self.fixup_us:.1f})")


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def tile_efficiency(config: GemmConfig, dtype: str) -> float:
    """Fraction of peak a tile reaches in steady state: operand reuse grows with the tile's harmonic size.

    128x256 with 8 warps is the Hopper sweet spot (wgmma on 2 warpgroups); 64x64 tiles reach about
    a third of it because each K step loads as many bytes per FLOP as 4x larger tiles do twice over.
    """
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    reuse = 2 * bm * bn / (bm + bn)  # FLOPs per operand element loaded, per K step
    eff = reuse / (reuse + 40.0)
    eff *= min(1.0, bk / 64) ** 0.3
    warps_ideal = 8 if bm * bn >= 128 * 256 else 4
    if config.num_warps != warps_ideal:
        eff *= 0.85
    if config.num_stages < 3:
        eff *= 0.8
    if dtype == "fp32" and bk > 64:
        eff *= 0.9
    return eff


def estimate(config: GemmConfig, problem: Problem, device: DeviceInfo) -> Estimate:
    m, n, k = problem.m, problem.n, problem.k
    arch = device.arch if device.arch in _PEAK_TFLOPS else "default"
    dtype_rate = "tf32" if problem.dtype == "fp32" else problem.dtype
    per_sm_flops_us = _PEAK_TFLOPS[arch][dtype_rate] * 1e6 / device.sm_count  # FLOP per us per SM
    eff = tile_efficiency(config, problem.dtype)
    tiles = _cdiv(m, config.block_m) * _cdiv(n, config.block_n)
    iters = max(_cdiv(k, config.block_k), 1)
    tile_us = 2 * config.block_m * config.block_n * iters * config.block_k / (per_sm_flops_us * eff)
    programs = min(config.grid or device.sm_count, device.sm_count)
    fixup = 0.0
    if config.streamk:
        full_waves, rest = divmod(tiles, programs)
        waves = full_waves + rest / programs
        if rest:
            split = programs / rest  # programs sharing one leftover tile
            fixup = _FIXUP_US_PER_TILE * min(split, iters) * (config.block_m * config.block_n / 16384)
    else:
        waves = _cdiv(tiles, min(programs, tiles))
    compute_us = waves * tile_us + fixup
    useful = m * n
    edge_waste = 1.0 - useful / (tiles * config.block_m * config.block_n)
    elt = DTYPE_BYTES[problem.dtype]
    # A is re-read once per column of tiles in a group sweep, B once per row-group (grouped order).
    a_reads = max(1, _cdiv(n, config.block_n) / max(1, min(config.group_m, _cdiv(m, config.block_m))))
    b_reads = max(1, _cdiv(m, config.block_m * config.group_m))
    bytes_moved = elt * (m * k * min(a_reads, 4) + k * n * min(b_reads, 4)) + DTYPE_BYTES[problem.out] * m * n
    memory_us = bytes_moved / (_BANDWIDTH_TBS[arch] * 1e6)
    total = max(compute_us, memory_us) + _LAUNCH_US
    return Estimate(config, total, compute_us, memory_us, waves, eff, edge_waste, fixup)


def candidates(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> list[GemmConfig]:
    """Every feasible config of the heuristic's space for this problem."""
    families = (False, True) if enable_streamk is None else (enable_streamk,)
    out = []
    for bm, bn, bk, warps, stages, sk in itertools.product(BLOCK_MN, BLOCK_MN, BLOCK_K, WARPS, STAGES,
                                                           families):
        cfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages,
                         streamk=sk)
        if config_supports(cfg, problem, device) is None:
            out.append(cfg)
    return out


def rank(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> list[Estimate]:
    """Candidates sorted fastest first by the model; ties broken by the config's text for determinism."""
    ests = [estimate(c, problem, device) for c in candidates(problem, device, enable_streamk)]
    return sorted(ests, key=lambda e: (round(e.total_us, 6), e.config.short()))


def choose(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> GemmConfig:
    ranked = rank(problem, device, enable_streamk)
    if not ranked:
        raise RuntimeError(f"no feasible config for {problem} on {device.name}")
    return ranked[0].config


def roofline_us(problem: Problem, device: DeviceInfo) -> float:
    arch = device.arch if device.arch in _PEAK_TFLOPS else "default"
    rate = _PEAK_TFLOPS[arch]["tf32" if problem.dtype == "fp32" else problem.dtype]
    flops_us = 2 * problem.m * problem.n * problem.k / (rate * 1e6)
    elt = DTYPE_BYTES[problem.dtype]
    bytes_us = elt * (problem.m * problem.k + problem.k * problem.n + problem.m * problem.n) / (
        _BANDWIDTH_TBS[arch] * 1e6)
    return max(flops_us, bytes_us, math.ulp(1.0))
