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


def fixup_groups(splits: int) -> tuple[int, int]:
    """(G, Q) of a Stream-K tile split S ways: G = ceil(sqrt(S)) segments per fix-up group and Q =
    cdiv(S, G) groups; one group up to S = 4 (the kernel's fixup_groups, kernels/streamk.py)."""
    group = splits if splits <= 4 else math.isqrt(splits - 1) + 1
    return group, cdiv(splits, group)
