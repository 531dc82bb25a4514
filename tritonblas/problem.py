"""`Problem`, the dispatch key of one GEMM, and the facts of its dense operands (bytes per element,
leading dimensions, 16-byte alignment)."""

from __future__ import annotations

from dataclasses import dataclass

from tuning_db.vocabulary import BiasKind, DType, Layout, Scales

from .arith import gemm_flops

DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4, "e4m3": 1, "e5m2": 1, "int8": 1}
# Problem.small: operands and work below which a problem's kernel takes a few microseconds on the H200
# (512^3 3.6 us, 1024x1024x512 4.8, 128x128x8192 8.2 in graph replay: h200-graph-small-tune10.json).
SMALL_OPERAND_BYTES = 8 << 20
SMALL_FLOPS = 2**31


@dataclass(frozen=True)
class Problem:
    """The dispatch key of one GEMM: C[M, N] = A[M, K] @ B[K, N] (+ bias)."""

    m: int
    n: int
    k: int
    dtype: DType
    layout: Layout = "nn"
    bias: BiasKind = "none"
    out_dtype: DType | None = None
    b_dtype: DType | None = None  # None: the same as dtype (A's)
    scales: Scales = "none"  # scaled_mm's scale mode; "none": a plain GEMM

    @property
    def out(self) -> DType:
        return self.out_dtype or self.dtype

    @property
    def b(self) -> DType:
        """B's operand dtype."""
        return self.b_dtype or self.dtype

    @property
    def quantized(self) -> bool:
        return self.scales != "none"

    @classmethod
    def from_key(cls, key) -> Problem:
        """The problem of a tuning_db key (a ProblemKey or GemmShape)."""
        if key.a_dtype != key.b_dtype:
            raise ValueError(f"key has mixed operand dtypes {key.a_dtype}/{key.b_dtype}; "
                             "Problem takes one operand dtype")
        out = None if key.out_dtype == key.a_dtype else key.out_dtype
        return cls(key.m, key.n, key.k, key.a_dtype, key.layout, key.bias, out)

    @property
    def small(self) -> bool:
        """A problem whose kernel runs for a few microseconds, of the order of an eager call's host time:
        A and B together at most SMALL_OPERAND_BYTES and at most SMALL_FLOPS (every problem of
        classes/small.yaml; not a decode step's 32 MB weight). The tuner times these as CUDA-graph
        replays (tuning/benchmark.replayed), and no launch is added to them (the reduce kernel)."""
        operands = (self.m * self.k + self.k * self.n) * DTYPE_BYTES[self.dtype]
        return operands <= SMALL_OPERAND_BYTES and gemm_flops(self.m, self.n, self.k) <= SMALL_FLOPS

    def short(self) -> str:
        """E.g. "16x6144x4096 fp16 nt +row" (the bias only when there is one)."""
        out = "" if self.out == self.dtype else f"->{self.out}"
        return f"{self.m}x{self.n}x{self.k} {self.dtype}{out} {self.layout}" + \
            ("" if self.bias == "none" else f" +{self.bias}")


def operand_leading_dims(problem: Problem) -> tuple[int, int]:
    """Leading (non-unit) stride of A and B, in elements, for dense storage in the problem's layout."""
    lead_a = problem.k if problem.layout[0] == "n" else problem.m
    lead_b = problem.n if problem.layout[1] == "n" else problem.k
    return lead_a, lead_b


def aligned_leading_dim(lead: int, elt: int) -> int:
    """`lead` elements of `elt` bytes rounded up to a multiple of 16 bytes: the leading dim of an
    aligned_copy buffer (launch.gemm._aligned), and what the heuristic prices the copied operand at."""
    per16 = 16 // elt
    return -(-lead // per16) * per16


def operand_alignment(problem: Problem) -> tuple[bool, bool]:
    """Whether dense A and B, each, in the problem's layout have a 16-byte aligned leading dimension."""
    elt = DTYPE_BYTES[problem.dtype]
    lead_a, lead_b = operand_leading_dims(problem)
    return lead_a * elt % 16 == 0, lead_b * elt % 16 == 0


def operands_aligned(problem: Problem) -> bool:
    return all(operand_alignment(problem))
