"""scaled_mm's test inputs and references: quantized operands in any layout, scales of each mode, the
float64 reference of the dequantized operands, torch's own result, and a fix for the interpreter's fp8
rounding, a skip where torch's CPU op lacks row-wise scales (no tests here)."""

from __future__ import annotations

import contextlib

import numpy as np
import pytest
import torch

from tritonblas.config import cpu_scaled_mm_takes_rows

E4M3, E5M2, INT8 = torch.float8_e4m3fn, torch.float8_e5m2, torch.int8
FP8_MAX = {E4M3: 448.0, E5M2: 57344.0}
# Mantissa bits of each output dtype: its rounding step relative to a value, 2**-bits.
MANTISSA = {torch.bfloat16: 7, torch.float16: 10, torch.float32: 23, E4M3: 3, E5M2: 2}


def quantized(rows: int, cols: int, dtype: torch.dtype, transposed: bool, g: torch.Generator) -> torch.Tensor:
    """A (rows, cols) operand of `dtype`: values of a few units (int8: -100..100), column-major when
    `transposed` (the transpose of a row-major (cols, rows) tensor)."""
    shape = (cols, rows) if transposed else (rows, cols)
    if dtype == INT8:
        t = torch.randint(-100, 101, shape, generator=g, dtype=torch.int8)
    else:
        t = (torch.randn(shape, generator=g) * 3).to(dtype)
    return t.t() if transposed else t


def scales(mode: str, m: int, n: int, g: torch.Generator, one_shape: tuple = ()) -> tuple:
    """(scale_a, scale_b) of a scale mode ("tensor", "row", "row_a", "row_b"); a single value has
    `one_shape`, () or (1, 1)."""

    def value() -> torch.Tensor:
        return (torch.rand((), generator=g) + 0.5).reshape(one_shape)

    scale_a = torch.rand(m, 1, generator=g) + 0.5 if mode in ("row", "row_a") else value()
    scale_b = torch.rand(1, n, generator=g) + 0.5 if mode in ("row", "row_b") else value()
    return scale_a, scale_b


def reference(a, b, scale_a, scale_b, bias, out_dtype) -> torch.Tensor:  # noqa: ANN001
    """The float64 result of the dequantized operands, saturated as an fp8 output is."""
    ref = (a.double() * scale_a.double()) @ (b.double() * scale_b.double())
    if bias is not None:
        ref = ref + bias.double()
    limit = FP8_MAX.get(out_dtype)
    return ref if limit is None else ref.clamp(-limit, limit)


def torch_result(a, b, scale_a, scale_b, bias, out_dtype) -> torch.Tensor:  # noqa: ANN001
    """torch's own result: torch._scaled_mm on the CPU where it takes the call (fp8 with tensor-wise
    or row-wise scales), else the dequantized operands' fp32 product (torch._int_mm's exact int32 one for
    int8), biased in fp32 and cast once (saturated for fp8)."""
    if a.dtype == INT8:
        y = torch._int_mm(a, b).float() * scale_a * scale_b
    else:
        try:
            y = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32)
        except (RuntimeError, ValueError):  # a mix of a row-wise and a single scale
            y = (a.float() * scale_a) @ (b.float() * scale_b)
    if bias is not None:
        y = y + bias.float()
    limit = FP8_MAX.get(out_dtype)
    return (y if limit is None else y.clamp(-limit, limit)).to(out_dtype)


def error(x: torch.Tensor, ref: torch.Tensor) -> float:
    """Largest absolute error relative to the reference's largest magnitude."""
    return ((x.double() - ref).abs().max() / ref.abs().max().clamp_min(1e-300)).item()


def assert_scaled_close(ours: torch.Tensor, a, b, scale_a, scale_b, bias, out_dtype) -> None:  # noqa: ANN001
    """err(ours) <= 2 * err(torch) + one rounding step of the output dtype (the interpreter truncates
    bf16 and fp16 stores where torch rounds to nearest), errors against the float64 reference."""
    assert ours.dtype == out_dtype and ours.shape == (a.shape[0], b.shape[1])
    assert torch.isfinite(ours.float()).all()
    ref = reference(a, b, scale_a, scale_b, bias, out_dtype)
    theirs = torch_result(a, b, scale_a, scale_b, bias, out_dtype)
    eps = max(2.0 ** -MANTISSA[out_dtype], 1e-6)
    assert error(ours, ref) <= 2 * error(theirs, ref) + eps, (error(ours, ref), error(theirs, ref))


_TO_TORCH_FP8 = {"fp8e4nv": E4M3, "fp8e5": E5M2}


@contextlib.contextmanager
def interpreter_fp8_rounding():
    """Triton's interpreter (3.6 and 3.9) casts fp32 to fp8 wrongly: rounding up a mantissa of all
    ones ORs the carry into the exponent instead of adding it (-125.85 stored as e4m3 reads -64, not
    -128). Here torch's RTNE cast stands in for that one conversion, made non-saturating (a value past
    the finite range becomes NaN in e4m3fn, inf in e5m2), so that the tests see the kernels' own clamp
    (kernels/common.saturated) and not a saturating cast's (torch's e4m3fn cast and the GPU's
    cvt.rn.satfinite saturate)."""
    from triton.runtime import interpreter

    real = interpreter._convert_float

    def convert(input, input_dtype, output_dtype, rounding_mode):  # noqa: ANN001, ANN202, A002
        target = _TO_TORCH_FP8.get(output_dtype.name)
        if target is None or input_dtype.name != "fp32":
            return real(input, input_dtype, output_dtype, rounding_mode)
        x = torch.from_numpy(np.ascontiguousarray(input).view(np.float32))
        over = float("nan") if target == E4M3 else float("inf")
        x = torch.where(x.abs() > FP8_MAX[target], x.sign() * over, x)
        return x.to(target).view(torch.uint8).numpy().reshape(input.shape)

    interpreter._convert_float = convert
    try:
        yield
    finally:
        interpreter._convert_float = real


def needs_cpu_rowwise(rows: bool = True) -> None:
    """Skip a test that runs torch's CPU _scaled_mm with row-wise scales where the running torch's takes
    tensor-wise scales only (torch 2.11: dispatch then never picks it, config.vendor_scaled_refusal)."""
    if rows and not cpu_scaled_mm_takes_rows():
        pytest.skip(f"torch {torch.__version__}'s CPU _scaled_mm takes tensor-wise scales only")
