"""The words a GEMM problem is described in, defined once: operand dtypes, layouts (A and B each "n"
or "t", transposed) and bias kinds. tuning_db validates keys with these types; tritonblas imports them
from here (tuning_db imports nothing of tritonblas), so the two cannot disagree."""

from __future__ import annotations

from typing import Literal, get_args

DType = Literal["fp16", "bf16", "fp32", "e4m3", "e5m2", "int8"]
Layout = Literal["nn", "nt", "tn", "tt"]
BiasKind = Literal["none", "scalar", "row", "column", "full"]
Scales = Literal["none", "tensor", "row", "row_a", "row_b"]

DTYPES: tuple[str, ...] = get_args(DType)
SCALES: tuple[str, ...] = get_args(Scales)
FLOAT_DTYPES = ("fp16", "bf16", "fp32")          # plain GEMMs (matmul/addmm/linear)
QUANT_DTYPES = ("e4m3", "e5m2", "int8")          # scaled_mm operands
QUANT_OUT_DTYPES = ("bf16", "fp16", "fp32", "e4m3", "e5m2")
LAYOUTS: tuple[str, ...] = get_args(Layout)
BIAS_KINDS: tuple[str, ...] = get_args(BiasKind)
