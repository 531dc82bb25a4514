"""`Problem`, the dispatch key of one GEMM, and the facts of its dense operands (bytes per element,
leading dimensions, 16-byte alignment). A quantized problem (scaled_mm: fp8 or int8 operands with float32
scales, `scales` != "none") is a Problem too: the same key, tuned, stored and selected like any other."""

from __future__ import annotations

from dataclasses import dataclass

from tuning_db import vocabulary
from tuning_db.vocabulary import BiasKind, DType, Layout, Scales

from .arith import gemm_flops

DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4, "e4m3": 1, "e5m2": 1, "int8": 1}
# Problem.small: operands and work below which a problem's kernel takes a few microseconds on the H200 (512^3
# 3.6 us, 1024x1024x512 4.8, 128x128x8192 8.2 in graph replay:
# 016dd08:docs/benchmarks/h200-graph-small-tune10.json).
SMALL_OPERAND_BYTES = 8 << 20
SMALL_FLOPS = 2**31


@dataclass(frozen=True)
class Problem:
    """The dispatch key of one GEMM: C[M, N] = A[M, K] @ B[K, N] (+ bias); quantized (scales != "none"):
    C = (A * scale_a) @ (B * scale_b) (+ bias), A of `dtype` and B of `b` (fp8 may mix e4m3 and e5m2)."""

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
        scales = getattr(key, "scales", "none")
        out = key.out_dtype if scales != "none" or key.out_dtype != key.a_dtype else None
        b = None if key.b_dtype == key.a_dtype else key.b_dtype
        return cls(key.m, key.n, key.k, key.a_dtype, key.layout, key.bias, out, b, scales)

    def __post_init__(self) -> None:
        if self.b_dtype is not None and self.b_dtype == self.dtype:
            object.__setattr__(self, "b_dtype", None)  # one spelling per problem: equal keys hash equal
        reason = vocabulary.quantized_mismatch(self.dtype, self.b, self.out_dtype, self.bias, self.scales)
        if reason is not None:
            raise ValueError(f"Problem {self.m}x{self.n}x{self.k}: {reason}")

    @property
    def small(self) -> bool:
        """A problem whose kernel runs for a few microseconds, of the order of an eager call's host time:
        A and B together at most SMALL_OPERAND_BYTES and at most SMALL_FLOPS (every problem of
        classes/small.yaml; not a decode step's 32 MB weight). The tuner times these as CUDA-graph
        replays (tuning/benchmark.replayed), and no launch is added to them (the reduce kernel)."""
        operands = self.m * self.k * DTYPE_BYTES[self.dtype] + self.k * self.n * DTYPE_BYTES[self.b]
        return operands <= SMALL_OPERAND_BYTES and gemm_flops(self.m, self.n, self.k) <= SMALL_FLOPS

    def dtypes_text(self) -> str:
        """E.g. "fp16", "e4m3->bf16", "e4m3xe5m2->bf16": the operand dtypes, and the output's where it
        differs (always for a quantized problem)."""
        ab = self.dtype if self.b == self.dtype else f"{self.dtype}x{self.b}"
        return ab if self.out == self.dtype and not self.quantized else f"{ab}->{self.out}"

    def short(self) -> str:
        """E.g. "16x6144x4096 fp16 nt +row" (the bias only when there is one); quantized:
        "4096x4096x4096 e4m3->bf16 nt row" (the scale mode after the layout)."""
        scales = f" {self.scales}" if self.quantized else ""
        return f"{self.m}x{self.n}x{self.k} {self.dtypes_text()} {self.layout}{scales}" + \
            ("" if self.bias == "none" else f" +{self.bias}")


# A quantized problem's scale mode as (scale_a one value per row of A, scale_b one per column of B); each
# False: one value for the whole operand (vocabulary.Scales). The block mode ("block") is not one of these:
# its scales vary along K too (block_scale_shapes).
SCALE_VECTORS: dict[str, tuple[bool, bool]] = {"tensor": (False, False), "row": (True, True),
                                               "row_a": (True, False), "row_b": (False, True)}
# Block-wise scales (scales "block", DeepSeek-V3's and transformers' FineGrainedFP8 convention): A per 1 x
# SCALE_BLOCK block of a row, B per SCALE_BLOCK x SCALE_BLOCK block; a partial last block has one scale.
SCALE_BLOCK = 128


def block_scale_shapes(m: int, n: int, k: int) -> tuple[tuple[int, int], tuple[int, int]]:
    """The shapes of block-wise scale_a, (M, ceil(K/128)), and scale_b, (ceil(K/128), ceil(N/128))."""
    kb = -(-k // SCALE_BLOCK)
    return (m, kb), (kb, -(-n // SCALE_BLOCK))


def scale_floats(problem: Problem) -> tuple[int, int]:
    """How many float32 scales a quantized problem reads for A and for B (0, 0 for a plain one)."""
    if not problem.quantized:
        return 0, 0
    if problem.scales == "block":
        (ma, ka), (kb, nb) = block_scale_shapes(problem.m, problem.n, problem.k)
        return ma * ka, kb * nb
    rows, cols = SCALE_VECTORS[problem.scales]
    return (problem.m if rows else 1), (problem.n if cols else 1)


def vendor_name(problem: Problem) -> str:
    """The vendor op a torch-backend config runs for `problem` (what messages and explain call it)."""
    if not problem.quantized:
        return "torch.mm"
    if problem.scales == "block":
        return "torch.nn.functional.scaled_mm"
    return "torch._int_mm" if problem.dtype == "int8" else "torch._scaled_mm"


def default_quant_out(dtype: str) -> str:
    """scaled_mm's output dtype when none is given: A's dtype for fp8 (torch's convention), bf16 for
    int8."""
    return "bf16" if dtype == "int8" else dtype


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
    lead_a, lead_b = operand_leading_dims(problem)
    return lead_a * DTYPE_BYTES[problem.dtype] % 16 == 0, lead_b * DTYPE_BYTES[problem.b] % 16 == 0


def operands_aligned(problem: Problem) -> bool:
    return all(operand_alignment(problem))


def rows_aligned(problem: Problem) -> bool:
    """Whether A's, B's and C's rows (dense, in the problem's layout) are each a multiple of 16 bytes:
    where one is not, cuBLAS has no vectorized kernel (configs/sm_90.json: torch.mm 1.5x-6.7x behind the
    kernels on every such problem with M and N >= 256)."""
    return operands_aligned(problem) and problem.n * DTYPE_BYTES[problem.out] % 16 == 0
