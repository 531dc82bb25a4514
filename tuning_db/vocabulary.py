"""The words a GEMM problem is described in, defined once: operand dtypes, scale modes, layouts (A and B
each "n" or "t", transposed) and bias kinds. tuning_db validates keys with these types; tritonblas
imports them from here (tuning_db imports nothing of tritonblas), so the two cannot disagree.

Plain GEMMs (matmul/addmm/linear) take FLOAT_DTYPES; scaled_mm takes QUANT_DTYPES operands with float32
scales (`Scales`: "none" is a plain GEMM; "tensor" one value each for A and B; "row" scale_a (M, 1) and
scale_b (1, N); "row_a" / "row_b" one operand row-wise, the other one value) and writes QUANT_OUT_DTYPES.
A problem is quantized exactly when its scales are not "none"."""

from __future__ import annotations

from typing import Literal, get_args

DType = Literal["fp16", "bf16", "fp32", "e4m3", "e5m2", "int8"]
Scales = Literal["none", "tensor", "row", "row_a", "row_b"]
DTYPES = get_args(DType)
SCALES = get_args(Scales)
FLOAT_DTYPES = ("fp16", "bf16", "fp32")          # plain GEMMs (matmul/addmm/linear)
QUANT_DTYPES = ("e4m3", "e5m2", "int8")          # scaled_mm operands
QUANT_OUT_DTYPES = ("bf16", "fp16", "fp32", "e4m3", "e5m2")
Layout = Literal["nn", "nt", "tn", "tt"]
BiasKind = Literal["none", "scalar", "row", "column", "full"]

LAYOUTS: tuple[str, ...] = get_args(Layout)
BIAS_KINDS: tuple[str, ...] = get_args(BiasKind)
