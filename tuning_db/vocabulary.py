"""The words a GEMM problem is described in, defined once: operand dtypes, layouts (A and B each "n"
or "t", transposed) and bias kinds. tuning_db validates keys with these types; tritonblas imports them
from here (tuning_db imports nothing of tritonblas), so the two cannot disagree."""

from __future__ import annotations

from typing import Literal, get_args

DType = Literal["fp16", "bf16", "fp32", "e4m3", "e5m2", "int8"]
Layout = Literal["nn", "nt", "tn", "tt"]
BiasKind = Literal["none", "scalar", "row", "column", "full"]
Scales = Literal["none", "tensor", "row", "row_a", "row_b", "block"]

DTYPES: tuple[str, ...] = get_args(DType)
SCALES: tuple[str, ...] = get_args(Scales)
FLOAT_DTYPES = ("fp16", "bf16", "fp32")          # plain GEMMs (matmul/addmm/linear)
QUANT_DTYPES = ("e4m3", "e5m2", "int8")          # scaled_mm operands
QUANT_OUT_DTYPES = ("bf16", "fp16", "fp32", "e4m3", "e5m2")
LAYOUTS: tuple[str, ...] = get_args(Layout)
BIAS_KINDS: tuple[str, ...] = get_args(BiasKind)

# Plain GEMMs (matmul/addmm/linear) take FLOAT_DTYPES; scaled_mm takes QUANT_DTYPES operands with float32
# scales (Scales: "none" is a plain GEMM; "tensor" one value each for A and B; "row" scale_a (M, 1) and
# scale_b (1, N); "row_a" / "row_b" one operand row-wise, the other one value; "block" scale_a per 1x128
# block of A's rows, (M, ceil(K/128)), scale_b per 128x128 block of B, (ceil(K/128), ceil(N/128)): fp8
# operands only) and writes QUANT_OUT_DTYPES. A problem is quantized exactly when its scales are not "none".
# Bias kinds of a quantized problem: torch._scaled_mm's, none or one value per output column (N,).
QUANT_BIAS_KINDS = ("none", "row")


def quantized_mismatch(a: str, b: str, out: str | None, bias: str, scales: str) -> str | None:
    """Why operand dtypes `a`/`b`, output dtype `out` (None: a's), bias kind and scale mode do not go
    together, or None when they do. A plain problem (scales "none") has one FLOAT_DTYPES operand dtype;
    a quantized one fp8 operands (e4m3/e5m2, mixed allowed) or int8 ones (both), an output dtype of
    QUANT_OUT_DTYPES and a bias of QUANT_BIAS_KINDS."""
    fault = quantized_fault(a, b, out, bias, scales)
    return None if fault is None else fault[1]


def quantized_fault(a: str, b: str, out: str | None, bias: str, scales: str) -> tuple[str, str] | None:
    """quantized_mismatch's reason with the field at fault: "b_dtype" (the operands), "out_dtype" or
    "bias"; None when they go together."""
    if scales == "none":
        if a not in FLOAT_DTYPES or b != a:
            what = a if b == a else f"{a}/{b}"
            return "b_dtype", (f"operand dtypes {what} need scales (scales 'none' is a plain GEMM of one of "
                               f"{', '.join(FLOAT_DTYPES)})")
        return None
    if a not in QUANT_DTYPES or b not in QUANT_DTYPES:
        return "b_dtype", f"scales {scales!r} need operands of {', '.join(QUANT_DTYPES)}, got {a}/{b}"
    if scales == "block" and "int8" in (a, b):
        return "b_dtype", f"block-wise scales take fp8 operands (e4m3, e5m2), got {a}/{b}"
    if (a == "int8") != (b == "int8"):
        return "b_dtype", f"int8 operands go with int8 only, got {a}/{b}"
    if out not in QUANT_OUT_DTYPES:
        return "out_dtype", (f"a quantized problem needs an output dtype of {', '.join(QUANT_OUT_DTYPES)}, "
                             f"got {out}")
    if bias not in QUANT_BIAS_KINDS:
        return "bias", f"a quantized problem takes bias {' or '.join(QUANT_BIAS_KINDS)} (N,), got {bias!r}"
    return None
