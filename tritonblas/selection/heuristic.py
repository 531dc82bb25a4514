"""Analytical config selection: a cost model over Persistent and Stream-K candidates. Pure Python.

For each feasible candidate the model estimates time from
  - compute: tile FLOPs at a per-SM rate scaled by the tile's efficiency (big tiles reuse more),
  - wave quantization: Persistent runs ceil(tiles / programs) waves of whole tiles; Stream-K cuts the
    K loop of each tile of the last partial wave into programs // tiles even segments,
  - edge waste: tiles past M/N compute zeros that are thrown away,
  - the Stream-K fix-up: each split tile writes and re-reads fp32 partials,
  - memory: bytes moved at the device bandwidth (roofline: the larger of compute and memory wins),
and ranks the candidates (candidates.py, the space) by it. `rank` returns the ranked estimates with each
term (`Estimate.why`; `tritonblas explain` prints them), so a choice is auditable.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

from ..arch import DeviceInfo
from ..arith import cdiv, gemm_flops
from ..config import GemmConfig, config_supports, torch_blockwise_fits
from ..launch.streamk import fixup_plan, fixup_reads, tile_splits
from ..problem import (
    DTYPE_BYTES,
    Problem,
    aligned_leading_dim,
    operand_alignment,
    operand_leading_dims,
    rows_aligned,
    scale_floats,
)
from ..smem import smem_bytes
from .candidates import candidates

# Peak dense rates (TFLOP/s) and bandwidth (TB/s) per arch; unknown archs fall back to "default".
# H200: torch.mm bf16 8192^3 measured 660-800 TFLOP/s on 2026-11-29, our best tile 760; copy ~4.3 TB/s.
# fp8 / int8 (scaled_mm): as bf16's 800 sits just above cuBLAS's best, 1450 sits above torch._scaled_mm's
# best in the fp8 class's tuning run (1397 TFLOP/s at 8192^3, 2026-12-02; dense fp8 peak ~1979). int8 has
# the same MMA rate on Hopper and is taken as fp8 (not measured).
_PEAK_TFLOPS = {"sm_90": {"fp16": 800.0, "bf16": 800.0, "fp32": 50.0, "tf32": 400.0,
                          "e4m3": 1450.0, "e5m2": 1450.0, "int8": 1450.0},
                "default": {"fp16": 300.0, "bf16": 300.0, "fp32": 20.0, "tf32": 150.0,
                            "e4m3": 600.0, "e5m2": 600.0, "int8": 600.0}}
_BANDWIDTH_TBS = {"sm_90": 4.3, "default": 2.0}
_LAUNCH_US = 4.0
_COPY_BANDWIDTH = 0.58  # share of the bandwidth the aligned copy reaches (see _aligned_copy_us)
# Odd leading dims (not 16-byte rows) load element by element and cannot use TMA: 127x4097x4095 bf16
# took 89 us at best (sweep 1) where the model predicts ~20 us for aligned operands.
_MISALIGNED_EFFICIENCY = 0.25
_MISALIGNED_BANDWIDTH = 0.05
# A K-contiguous operand (A row-major, B column-major) whose leading dim is 16-byte aligned but not a
# multiple of 16 elements runs the pointer loop ~3.5x slower even with the kernel's alignment hint:
# 1024x1024x1000 bf16 44.7 us vs 12.3 us for 1024^3 with the same config, while TMA took 14.9 us
# (016dd08:scripts/ragged_probe.py, 2026-11-30). B row-major with N=1000 lost only 9% (13.4 us).
_UNSPECIALIZED_K_LEAD_EFFICIENCY = 0.3
_IN_FLIGHT_BYTES = 128 * 1024  # per SM, for full bandwidth (see streaming_efficiency)
# Grouped tile order: 8 row-tiles per group. In the tuning run of 2026-11-30, the same config with
# group 4 or 16 instead of 8 took 2.3% / 2.5% longer (geomean of 164 pairs each, 0.96-1.29), and 39 of
# the 44 winners use 8; so other groups pay a small efficiency factor.
_GROUP = 8
_GROUP_EFFICIENCY = 0.976
_OVERSUBSCRIBED_EFFICIENCY = {False: 1 / 1.06, True: 1 / 1.13}
_STAGE_BONUS = {4: 1.08, 5: 1.12}  # by stage count, on tiles up to 128x128 (see tile_efficiency)



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
    copy_us: float = 0.0

    def why(self) -> str:
        return (f"{self.config.short()}: {self.total_us:.1f} us (compute {self.compute_us:.1f}, memory "
                f"{self.memory_us:.1f}, waves {self.waves:.2f}, tile efficiency {self.efficiency:.2f}, "
                f"edge waste {self.edge_waste:.0%}, fix-up {self.fixup_us:.1f}"
                + (f", aligned copy {self.copy_us:.1f}" if self.copy_us else "") + ")")


# The share of that rate the kernels reach where it is below their 16-bit share: on the fp8 class's
# compute-bound problems (every dim >= 512, H200, 2026-12-02, docs/benchmarks/h200-fp8-kernels.json)
# the best tuned Triton configs ran 834-1013 TFLOP/s (0.58-0.70 of 1450) where torch._scaled_mm ran
# 1257-1366. Applied to the kernels' estimates only, not to the roofline: so vendor_preferred leaves
# compute-bound fp8 problems to torch._scaled_mm, and the memory-bound ones (decode, where the kernels
# measured 1.11x-1.35x) to the kernels.
_KERNEL_SHARE = {"sm_90": {"e4m3": 0.68, "e5m2": 0.68, "int8": 0.68}}


def _rate(problem: Problem, arch: str) -> float:
    """Peak TFLOP/s of the problem's operands on `arch` (a known one or "default")."""
    return _PEAK_TFLOPS[arch]["tf32" if problem.dtype == "fp32" else problem.dtype]


def _kernel_rate(problem: Problem, arch: str) -> float:
    """The TFLOP/s the kernels' model computes at: the peak, times _KERNEL_SHARE where the kernels lag."""
    return _rate(problem, arch) * _KERNEL_SHARE.get(arch, {}).get(problem.dtype, 1.0)


def _operand_bytes(problem: Problem) -> tuple[int, int]:
    """Bytes per element of A and of B (a quantized problem may mix them only in name: e4m3 x e5m2)."""
    return DTYPE_BYTES[problem.dtype], DTYPE_BYTES[problem.b]


def _scale_bytes(problem: Problem) -> int:
    """The bytes of float32 scales a quantized problem reads: one value, one per row of A / column of B,
    or one per block (problem.scale_floats)."""
    return 4 * sum(scale_floats(problem))


def tile_efficiency(config: GemmConfig, dtype: str) -> float:
    """Fraction of peak one tile shape sustains in steady state, fitted to an H200 sweep (bf16, 4096^3
    to 8192^3, 016dd08:scripts/sweep.py, 2026-11-29): 128x256x64 760 TFLOP/s, 128x128x64 675, 64x128x64 440,
    64x64x128 382, 64x64x64 264, 32x64x128 177, 16x64x256 119.

    - operand reuse: FLOPs per loaded element grow with the tile's harmonic size h = 2*BM*BN/(BM+BN),
      saturating as h / (h + 100);
    - K depth: small tiles need long K steps to hide load latency: min(1, h*BK/8192) ** 0.5;
    - MMA shape: Hopper's wgmma works on 64 rows; BM 16/32 tiles ran at ~0.6 of the reuse model.
    For 1-byte operands the K depth counts bytes (a K step of 128 loads what a 16-bit step of 64 does);
    not yet fitted to fp8 measurements.
    """
    bm, bn = config.block_m, config.block_n
    bk = config.block_k // 2 if DTYPE_BYTES[dtype] == 1 else config.block_k
    h = 2 * bm * bn / (bm + bn)
    eff = 1.5 * h / (h + 100.0) * min(1.0, h * bk / 8192) ** 0.5
    if bm < 64:
        eff *= 0.6
    if bm * bn <= 64 * 64 and config.num_warps == 8:
        eff *= 0.85  # 8 warps on a 64x64 tile split the MMA too thin
    if config.group_m != _GROUP:
        eff *= _GROUP_EFFICIENCY
    if config.num_stages < 3:
        eff *= 0.8
    elif bm * bn <= 128 * 128:
        # More stages in flight pay on small and medium tiles, one stage later on 128x128: 128x4096x4096
        # bf16 with 64x64x128 took 22.7 us at 4 stages vs 27.2 us at 3; 128x128x64 at 4 stages ran
        # 0.86-0.89 of 128x256's on compute-bound shapes (the sweep's ratio, so no bonus), and at 5 stages
        # won 512x1024x32768, 1536x1536x12288 and 512x6144x4096. Fitted to the tuning run of 2026-11-30
        # (016dd08:docs/benchmarks/h200-tune3-measurements.json): with this table the heuristic's pick among
        # each problem's measured configs is 0.972 of the best (0.954 with a 4-stage bonus only), and 0.950 on
        # the previous kernel's run (h200-tune2-measurements.json there, 0.932);
        # 016dd08:scripts/heuristic_vs_sweep.py --min-us 0.
        eff *= _STAGE_BONUS.get(config.num_stages - (bm * bn == 128 * 128), 1.0)
    if config.tma and config.flatten and bm * bn >= 128 * 128:
        # 4096^3 128x256: 0.99x torch.mm vs 0.94x for the plain loop; on 64x64 tiles (512x1024x32768)
        # flattening lost 25%, so the bonus is for big tiles only (2026-11-29 sweeps).
        eff *= 1.02
    if dtype == "fp32" and bk > 64:
        eff *= 0.9
    return min(eff, 1.0)


def estimate(config: GemmConfig, problem: Problem, device: DeviceInfo) -> Estimate:
    m, n, k = problem.m, problem.n, problem.k
    arch = device.arch if device.arch in _PEAK_TFLOPS else "default"
    per_sm_flops_us = _kernel_rate(problem, arch) * 1e6 / device.sm_count  # FLOP per us per SM
    eff = tile_efficiency(config, problem.dtype)
    if config.gluon:
        eff *= _GLUON_BLOCK_GAIN
    copy_us = 0.0
    if config.aligned_copy:
        copy_us = _aligned_copy_us(problem, arch)
    if not config.tma:
        eff *= pointer_efficiency(problem, config.aligned_copy)
    if (config.grid or device.sm_count) > device.sm_count and 2 * smem_bytes(config, problem) > \
            device.smem_per_block:
        # More programs than SMs when two cannot share one: they queue. Measured in the tuning run of
        # 2026-11-30 against the same config on one program per SM: Persistent 6% slower (70 pairs),
        # Stream-K 13% (25 pairs).
        eff *= _OVERSUBSCRIBED_EFFICIENCY[config.streamk]
    tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
    iters = max(cdiv(k, config.block_k), 1)
    tile_us = 2 * config.block_m * config.block_n * iters * config.block_k / (per_sm_flops_us * eff)
    programs = min(config.grid or device.sm_count, device.sm_count)
    fixup = 0.0
    if config.streamk:
        waves = float(tiles // programs)
        split = tile_splits(config, problem, programs)
        if split:
            # The kernel's K-aligned split: each leftover tile's K loop in `split` even segments, run at
            # the data-parallel rate (1920x1920x8192 with 128x256 tiles, one segment per tile: 92.3 us
            # vs Persistent 91.6 us, H200 2026-11-30; docs/notes/streamk-split.md).
            waves += cdiv(iters, split) / iters
            if split > 1 and config.reduce_kernel:
                # kernels/reduce.py: no fence or arrival, a launch, then every partial read once over
                # all the SMs.
                partials = (tiles % programs) * split * config.block_m * config.block_n * 4
                fixup = _SPLIT_FILL_US + _LAUNCH_US + partials / (_BANDWIDTH_TBS[arch] * 1e6)
            elif split > 1:
                fixup += split_fixed_us(config)
                # The fix-up's reads at about twice one SM's fair share of bandwidth: 256x256x65536
                # with 128x128 tiles (33 partials of 64 KB read by one program) took 66 us against
                # ~38 us with no fix-up at all. What is on the critical path: launch.streamk.fixup_reads (the
                # tree's chain, or deferred one program's chunks).
                per_sm_bytes_us = _BANDWIDTH_TBS[arch] * 1e6 / device.sm_count * 2
                reads = fixup_reads(split, *fixup_plan(config, tiles, programs, split, config.tma))
                fixup += reads * config.block_m * config.block_n * 4 / per_sm_bytes_us
    else:
        waves = cdiv(tiles, max(1, min(programs, tiles)))
    compute_us = waves * tile_us + fixup
    useful = m * n
    edge_waste = 1.0 - useful / (tiles * config.block_m * config.block_n) if tiles else 0.0
    elt_a, elt_b = _operand_bytes(problem)
    # A is re-read once per column of tiles in a group sweep, B once per row-group (grouped order).
    # Re-reads under the grouped order are modelled at the default group of 8; other groups are charged
    # in tile_efficiency instead (see _GROUP_EFFICIENCY).
    a_reads = max(1, cdiv(n, config.block_n) / max(1, min(_GROUP, cdiv(m, config.block_m))))
    b_reads = max(1, cdiv(m, config.block_m * _GROUP))
    bytes_moved = (elt_a * m * k * min(a_reads, 4) + elt_b * k * n * min(b_reads, 4)
                   + DTYPE_BYTES[problem.out] * m * n + _scale_bytes(problem))
    memory_us = bytes_moved / (_BANDWIDTH_TBS[arch] * 1e6) / streaming_efficiency(config, problem)
    if not config.tma and element_wide_loads(problem, config.aligned_copy):
        # Loads one element wide are bound by the memory system, not by the SM: 127x4097x4095 bf16 by
        # pointers took 205 us with Stream-K over 132 programs (33.5 MB: 0.16 TB/s), no faster than on
        # 33 (sweep 1: 89 us). More programs do not help; the copy + TMA path took 85 us.
        memory_us /= _MISALIGNED_BANDWIDTH
    total = max(compute_us, memory_us) + _LAUNCH_US + copy_us
    return Estimate(config, total, compute_us, memory_us, waves, eff, edge_waste, fixup, copy_us)


# The split part's fixed costs on the critical path, per program (tests/streamk_timeline.py, H200,
# kernel-levers row 33): its segment's pipeline fill (768x3072x8192: 11.6 iterations in 6.2 us where the
# data-parallel tile ran 0.35 us an iteration), and its fp32 partial's store and arrival (every program
# writes at once, then fences: 3.1 us for 64 KB, 5.1 for 128 KB). Charged, the heuristic's pick among each
# problem's measured configs improved on three tuning runs' rows (016dd08:scripts/heuristic_vs_sweep.py
# --min-us 0 on 016dd08:docs/benchmarks/h200-tune{9,8,7}-measurements.json: 0.923 -> 0.930, 0.930 -> 0.934,
# 0.906 -> 0.912; 0.930-0.931 on the first for either constant from 0 to 3 us), and its own pick changed on 10
# of that run's 152 problems, measured before and after on 8: 7 faster (64x1024x512 6.4 -> 3.7 us,
# 2176x2176x4096 75.9 -> 70.7, 513x8191x2048 113.8 -> 110.0), one 3.6% slower (1024x10240x8192 fp16 250.6 ->
# 259.6).
_SPLIT_FILL_US = 1.5
_STORE_US_PER_64KB = 2.0


def split_fixed_us(config: GemmConfig) -> float:
    """What a Stream-K program's split segment costs besides its iterations: the fill and the store."""
    return _SPLIT_FILL_US + _STORE_US_PER_64KB * config.block_m * config.block_n * 4 / 65536


def streaming_efficiency(config: GemmConfig, problem: Problem) -> float:
    """Fraction of the bandwidth one program's pipeline sustains: useful bytes in flight per SM
    ((stages - 1) K steps of the tile's rows and columns that lie inside M and N), saturating at 128 KB,
    to the power 0.45. Fitted to three memory-bound pairs of the 2026-11-30 H200 bench (tuned winner vs
    the old heuristic pick): 16x6144x4096 (123 vs 49 KB: 1.53x faster), 16x4096x14336 (74 vs 25 KB:
    1.63x), 64x8192x28672 (131 vs 65 KB: 1.34x); each pair gives an exponent of 0.42-0.46."""
    elt_a, elt_b = _operand_bytes(problem)
    row_bytes = (min(config.block_m, max(problem.m, 1)) * elt_a
                 + min(config.block_n, max(problem.n, 1)) * elt_b)
    # Counted up to 5 stages (7 of the 44 tuned winners of 2026-11-30 use 5; none more): on memory-bound
    # problems a cap at 4 tied 4 and 5 stages and ranked the 4-stage config first, the tuner's seed,
    # where the 5-stage one won the exhaustive search (127x4096x4096 P 64x64x128, 16x4096x14336
    # P 16x64x256: 016dd08:scripts/tune_quality.py). Pick quality on h200-tune3's rows 0.973
    # (0.972 capped at 4).
    in_flight = (min(config.num_stages, 5) - 1) * row_bytes * config.block_k
    return min(1.0, in_flight / _IN_FLIGHT_BYTES) ** 0.45


def _pointer_operands(problem: Problem) -> list[tuple[int, bool, int]]:
    """Per operand (A, B): its leading dim, whether its contiguous axis is K, and the size of its M or N
    axis (the one the pointer loop wraps at the edge)."""
    k_contiguous = (problem.layout[0] == "n", problem.layout[1] == "t")
    return list(zip(operand_leading_dims(problem), k_contiguous, (problem.m, problem.n), strict=True))


def pointer_efficiency(problem: Problem, copied: bool) -> float:
    """How much of the tile's rate the pointer K loop keeps, from how wide its loads can be (TMA
    configs are not affected). The worst operand decides:
    - a leading dim that is not 16-byte aligned loads element by element: _MISALIGNED_EFFICIENCY,
      unless the operand is copied to a padded buffer (aligned_copy);
    - a K-contiguous operand (A row-major, B column-major) whose leading dim is not a multiple of 16
      elements: _UNSPECIALIZED_K_LEAD_EFFICIENCY;
    - an operand contiguous along M (A column-major) or N (B row-major) wraps at that size, so its loads
      are as wide as the size's alignment: under 16 bytes counts as misaligned, even after a copy
      (127x4097x4095 with a copy took 367-519 us by pointers, 2026-11-30)."""
    eff = 1.0
    for (lead, along_k, extent), aligned, elt in zip(_pointer_operands(problem), operand_alignment(problem),
                                                     _operand_bytes(problem), strict=True):
        if not aligned and not copied:
            eff = min(eff, _MISALIGNED_EFFICIENCY)
        elif along_k and aligned_leading_dim(lead, elt) % 16:
            eff = min(eff, _UNSPECIALIZED_K_LEAD_EFFICIENCY)
        elif not along_k and extent * elt % 16:
            eff = min(eff, _MISALIGNED_EFFICIENCY)
    return eff


def element_wide_loads(problem: Problem, copied: bool) -> bool:
    """Whether the pointer loop loads some operand one element at a time: its contiguous axis has an odd
    leading dim (not copied to a padded buffer) or, when that axis is M or N, wraps at an odd size."""
    for lead, along_k, extent in _pointer_operands(problem):
        if (lead % 2 and not copied) or (not along_k and extent % 2):
            return True
    return False


def _aligned_copy_us(problem: Problem, arch: str) -> float:
    """Read and write each misaligned operand once at the copy's share of the device bandwidth, plus a
    launch per copy. kernels/copy.py moved the 4095x4097 bf16 B of 127x4097x4095 (67 MB read and
    written) in 27.0 us, 0.58 of 4.3 TB/s; torch's contiguous clone of it took 24.2 us
    (016dd08:scripts/copy_probe.py, 2026-11-30)."""
    sizes = (problem.m * problem.k, problem.k * problem.n)
    operands = zip(sizes, operand_alignment(problem), _operand_bytes(problem), strict=True)
    copied = [(numel, elt) for numel, aligned, elt in operands if not aligned]
    return sum(2 * elt * numel / (_COPY_BANDWIDTH * _BANDWIDTH_TBS[arch] * 1e6) + _LAUNCH_US
               for numel, elt in copied)


# Its promotion runs under the next K block's MMA, which the tile model does not see: CUDA graphs of each
# pinned, 5 DeepSeek-V3 / Qwen3 weights x M 256-4096, with and without a bias (H200, 2026-12-04,
# kernel-levers B17): 1.26x-1.72x the same 128x128 tile on the Triton kernel (median 1.41x), 1.13x-1.31x
# the smaller Triton tiles the model put first at 256-512 rows; it lost only to 64x64 at 256x1536x7168
# (0.93x). Charged as this much more of the tile's efficiency, the model's order matches the measured one
# on all 70 pairs (before: 64).
_GLUON_BLOCK_GAIN = 1.35


def rank(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> list[Estimate]:
    """Candidates sorted fastest first by the model; ties broken by the config's text for determinism."""
    return list(_rank(problem, device, enable_streamk))


@functools.lru_cache(maxsize=256)
def _rank(problem: Problem, device: DeviceInfo, enable_streamk: bool | None) -> tuple[Estimate, ...]:
    # Cached: ranking the whole space costs tens of ms, and dispatch may ask twice for a new shape
    # (the neighbour check, then the heuristic layer).
    ests = [estimate(c, problem, device) for c in candidates(problem, device, enable_streamk)]
    return tuple(sorted(ests, key=lambda e: (round(e.total_us, 6), e.config.short())))


def choose(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None) -> GemmConfig:
    ranked = rank(problem, device, enable_streamk)
    if not ranked:
        raise RuntimeError(f"no feasible config for {problem} on {device.name}")
    return ranked[0].config


# When the vendor GEMM (torch.mm: cuBLAS) beats the kernels on a shape nobody tuned, by one ratio: the
# roofline time over the model's time for its best kernel (the efficiency the model itself expects). Where the
# model expects its best kernel under 0.85 of the roofline (ragged or odd sizes, few tiles, long K, small
# problems) cuBLAS's per-shape kernels won; above it the kernels held their own. Fit on the 44 problems of the
# tuning run of 2026-11-30 (configs/sm_90.json's torch_ms against the measured time of the heuristic's pick in
# 016dd08:docs/benchmarks/h200-tune4-measurements.json): the rule picks the faster of the two on 40 of 44
# (vendor predicted on 22, right on 20: on 1920x1920x8192 the kernel was 1-3% faster; kernels predicted on 22,
# right on 20: on 16x6144x4096 torch.mm was 3% faster). On the heuristic-alone bench of the same shapes
# (016dd08:docs/benchmarks/h200-bench-heuristic.json) 38 of 44, the misses kernels at 0.94-0.99x torch.mm
# (1024x10240x8192 the worst); on the untuned shapes, not used for the fit
# (016dd08:docs/benchmarks/h200-bench-untuned-heuristic.json), 5 of 8, the misses kernels at 0.97-0.99x.
# Conservative: only archs with a fitted threshold (never the interpreter), 16-bit operands (the fit has no
# fp32 row), and not on skinny problems (M or N <= 32: memory-bound decode, where the kernels' pick ran at
# 1.02x (16x4096x14336) and 1.09x (32x4096x4096) torch.mm, and at 0.98x on 16x6144x4096, tuned 1.04x).
_VENDOR_BELOW_EFFICIENCY = {"sm_90": 0.85}
_VENDOR_MIN_MN = 33
# Nor where a leading dim of A, B or C is not 16 bytes (a vocabulary of 30522 or 50257, a ragged size)
# and M and N are both at least this: cuBLAS has no vectorized kernel there and ran 1.5x-6.7x behind
# the tuned kernels in each of the shipped file's 32 such rows (configs/sm_90.json: 256x30522x1024
# 1.53x, 1024x1024x30522 2.16x, 30522x1024x1024 tn 2.03x, 4096x4096x4097 4.7x); the model prices the
# kernels' padded copy but not cuBLAS's loss, so its efficiency test sent the same problems at other
# token counts (2048x1024x30522, BERT's logits dX at 4 x 512 tokens) to torch.mm. Smaller M or N tied
# (127x4097x4095 1.00x, 100x30522x1023 fp16 1.00x): the rule stands there. 16-bit problems only: those
# are what was measured (torch._scaled_mm refuses an fp8 problem's ragged rows anyway).
_VENDOR_MISALIGNED_MIN_MN = 256


def vendor_preferred(problem: Problem, device: DeviceInfo, best: Estimate | None) -> str | None:
    """Why the vendor GEMM is predicted faster than the kernels' best estimate `best`; None when not."""
    if problem.scales == "block":
        # The block kernels stayed below torch's block-wise op (cuBLASLt) on every problem that op takes:
        # the Triton one 0.58-0.97x, the Gluon one 0.87-0.97x at 4096 rows (2026-12-04, H200,
        # scripts/block_bench.py; kernel-levers B8, B13; the tuned picks of configs/block/ aside); where
        # it takes none, the dequantized product is no contender.
        if torch_blockwise_fits(problem, device.arch):
            return ("torch's block-wise op (cuBLASLt) ran 1.0-1.7x faster than the block kernel where it "
                    "takes the call")
        return None
    threshold = _VENDOR_BELOW_EFFICIENCY.get(device.arch)
    if best is None or threshold is None or problem.dtype == "fp32" or problem.k == 0:
        return None
    if config_supports(GemmConfig.vendor(), problem, device) is not None:
        return None  # (scaled_mm: a problem torch._scaled_mm / torch._int_mm refuses)
    if min(problem.m, problem.n) < _VENDOR_MIN_MN:
        return None
    if min(problem.m, problem.n) >= _VENDOR_MISALIGNED_MIN_MN and not problem.quantized and \
            not rows_aligned(problem):
        return None
    eff = roofline_us(problem, device) / best.total_us
    if eff >= threshold:
        return None
    return (f"the best kernel is predicted at {eff:.2f} of the roofline (< {threshold} on {device.arch}, "
            f"where torch.mm won in the tuning runs): {best.why()}")


def roofline_us(problem: Problem, device: DeviceInfo) -> float:
    """The time at the arch's peak rate or its bandwidth, whichever is longer: every operand, scale and
    output byte moved once (a quantized problem's at its operands' 1 byte and twice the 16-bit rate)."""
    arch = device.arch if device.arch in _PEAK_TFLOPS else "default"
    flops_us = gemm_flops(problem.m, problem.n, problem.k) / (_rate(problem, arch) * 1e6)
    elt_a, elt_b = _operand_bytes(problem)
    moved = (elt_a * problem.m * problem.k + elt_b * problem.k * problem.n
             + DTYPE_BYTES[problem.out] * problem.m * problem.n + _scale_bytes(problem))
    return max(flops_us, moved / (_BANDWIDTH_TBS[arch] * 1e6), math.ulp(1.0))
