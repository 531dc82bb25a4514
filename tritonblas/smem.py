"""The shared-memory model: what triton allocates for a config on a problem (`smem_bytes`), which
config_supports checks against the device's limit."""

from __future__ import annotations

from typing import Protocol

from .problem import DTYPE_BYTES, Problem, operand_leading_dims


class Tiling(Protocol):
    """What the model reads of a GemmConfig (tritonblas.config, whose config_supports calls it)."""

    block_m: int
    block_n: int
    block_k: int
    num_stages: int
    tma: bool
    flatten: bool
    aligned_copy: bool


# Archs whose allocation smem_bytes was fitted to (the interpreter stands for the H200 in tests).
SMEM_FITTED_ARCHS = ("sm_90", "interpreter")


def smem_bytes(config: Tiling, problem: Problem, arch: str = "sm_90") -> int:
    """Shared memory triton 3.6 allocates for the kernels on sm_90, fitted to its own figures:
    scripts/smem_sweep.py compiles them on a CPU exactly as a launch would (tritonblas.launch.gemm's
    arguments, triton's specialization) over a sample of the heuristic's and the tuner's space, every
    dtype, layout, K residue and bias, the TMA, pointer and aligned-copy paths, both families. Fitted
    to 4476 records, checked on 1726 more drawn afterwards (none of their 255 rows over the limit
    accepted); of all 6202 (tests/data/smem_records.json, tests/test_smem_records.py) this estimate
    exceeds the H200's 232448 B on each of the 971 over it and refuses 112 of the 3369 (problem,
    config) pairs that fit (3.3%). The same harness reproduced the "Required" bytes of all 10 configs
    the H200 refused in two tuning runs, and fits all 1098 of their near-limit rows that ran.
    - Operand buffers, one A (BM x BK) and one B (BK x BN) tile per pipeline stage where the dot runs
      on wgmma (block_m >= 64), one stage fewer where it runs on mma.sync (block_m 16 and 32); fp32 by
      TMA takes every stage either way (its ieee-precision FMA dot does; whether a call runs tf32 is
      the caller's allow_tf32 flag, not part of the problem, so fp32 is estimated for both).
    - A 16-bit operand the pointer loop reads one element at a time (an odd leading dim not copied to
      a padded buffer, or an odd M / N where that is its contiguous axis) is not pipelined through
      shared memory: one buffer (4095x4097x127 by pointers, 128x128x128 at 5 stages: 64 KiB).
    - The output tile (BM x BN of the output dtype) on top where the operand buffers stay live through
      the epilogue: a flattened tile loop that pipelines (num_stages > 1) prefetches the next tile's
      first K blocks meanwhile, and K == 1 is a constant to triton; with pointers and a ragged K, the
      flattened loop's peeled last block takes one stage of A and B instead, when that is larger.
      (Issue 21: 256x128x64 at 4 stages, TMA, flattened, on 2911x926x11 asked for 4 x 48 KiB + a
      256x128 fp16 tile + 32 B = 262176 B.)
    - 1 KiB for barriers and alignment (triton's figure was at most 96 B over the buffers). Not
      counted: the epilogue's layout conversion of the fp32 accumulator, which shares the operand
      buffers (triton asks for the larger of the two) and is at most 128 KiB within the register rule.
    - A quantized problem's tiles at its operands' bytes, A's and B's each (1 for fp8 and int8); its
      float32 scales are read in the epilogue, not staged. Not yet checked against triton's figures for
      1-byte operands (scripts/smem_sweep.py covers the 16- and 32-bit dtypes).
    On archs it was not fitted to (`arch` not in SMEM_FITTED_ARCHS) every operand counts every stage:
    the fewer buffers were measured on sm_90 only. A config triton still refuses falls back to the
    next selection (call.run's `_fall_back`); docs/notes/shared-memory.md says how to measure again."""
    elt = DTYPE_BYTES[problem.dtype]
    bm, bn, bk, stages = config.block_m, config.block_n, config.block_k, max(config.num_stages, 1)
    a_tile, b_tile = bm * bk * elt, bk * bn * DTYPE_BYTES[problem.b]
    fitted = arch in SMEM_FITTED_ARCHS
    full = stages if not fitted or bm >= 64 or (config.tma and elt == 4) else max(stages - 1, 1)
    a_bufs = b_bufs = full
    if fitted and not config.tma:
        a_one, b_one = _one_element_loads(problem, config.aligned_copy)
        a_bufs, b_bufs = (1 if a_one else full), (1 if b_one else full)
    need = a_bufs * a_tile + b_bufs * b_tile
    out_tile = bm * bn * DTYPE_BYTES[problem.out]
    if config.flatten and stages > 1 and not config.tma and problem.k % bk:
        need += max(a_tile + b_tile, out_tile)
    elif (config.flatten and stages > 1) or problem.k == 1:
        need += out_tile
    return need + 1024


def _one_element_loads(problem: Problem, copied: bool) -> tuple[bool, bool]:
    """Per operand (A, B), whether the pointer loop reads it one element at a time, as launch.gemm's
    A_DIV / B_DIV = 1 make it for a 16-bit dtype: an odd leading dim (a copied operand's is padded),
    or an odd M (A column-major) / N (B row-major), the contiguous axis it wraps. Problems with a
    dimension of 1 (which triton turns into constants) count as not."""
    if DTYPE_BYTES[problem.dtype] != 2 or min(problem.m, problem.n, problem.k) <= 1:
        return False, False
    lead_a, lead_b = operand_leading_dims(problem)
    a_wraps = problem.layout[0] == "t" and problem.m % 2  # contiguous along M
    b_wraps = problem.layout[1] == "n" and problem.n % 2  # contiguous along N
    return (bool(lead_a % 2 and not copied) or bool(a_wraps),
            bool(lead_b % 2 and not copied) or bool(b_wraps))
