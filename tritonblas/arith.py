"""Arithmetic the layers share: ceiling division, a GEMM's FLOPs and its rate. Pure Python."""

from __future__ import annotations


def cdiv(a: int, b: int) -> int:
    """ceil(a / b) for b > 0, in integers."""
    return -(-a // b)


def gemm_flops(m: int, n: int, k: int) -> int:
    """Multiply-adds of C[M, N] = A[M, K] @ B[K, N], two FLOPs each (a bias adds no count)."""
    return 2 * m * n * k


def tflops(m: int, n: int, k: int, ms: float | None) -> float | None:
    """The rate of an (m, n, k) GEMM that took `ms` milliseconds; None when no time is known."""
    return gemm_flops(m, n, k) / (ms * 1e9) if ms else None
