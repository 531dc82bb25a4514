"""Argument checks for the public ops: every failure names the argument and nothing is written."""

from __future__ import annotations

import numbers

import torch

from tuning_db.vocabulary import (
    BIAS_KINDS,
    FLOAT_DTYPES,
    LAYOUTS,
    QUANT_DTYPES,
    QUANT_OUT_DTYPES,
    SCALES,
)

from .arch import DeviceInfo
from .config import BACKENDS, GemmConfig
from .problem import Problem, default_quant_out

TORCH_DTYPES: dict[torch.dtype, str] = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}
# Every dtype name of the vocabulary by its torch dtype (the plain GEMMs' and scaled_mm's operands and
# outputs), and the other way round: the one table of both.
DTYPE_NAMES: dict[torch.dtype, str] = {**TORCH_DTYPES, torch.float8_e4m3fn: "e4m3", torch.float8_e5m2: "e5m2",
                                       torch.int8: "int8"}
TORCH_DTYPE_OF: dict[str, torch.dtype] = {name: dtype for dtype, name in DTYPE_NAMES.items()}
_STRIDED = torch.strided

# Hot path: each public call first tries one fused expression for the common case and runs the detailed
# checks (which raise with the argument's name, in their order) only when it fails. The fused tests are
# strictly narrower than the detailed ones, so an unusual but valid input (a 2-D bias, a 0-d bias) just
# takes the detailed path. Measured with the launch stubbed out (TRITON_INTERPRET, 64^3 fp16, this 2-core
# box): check_operands 1.5 -> 0.7 us, check_out 2.7 -> 1.3 us, check_bias 1.0 -> 0.5 us.


def check_tensor(name: str, t: object, rank: int | None = None) -> torch.Tensor:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    # Sparse and nested tensors have no strides to hand a kernel: refuse them here by name rather than
    # fail later inside torch with a message about its internals.
    if t.layout != torch.strided or t.is_nested:
        kind = "nested" if t.is_nested else str(t.layout).removeprefix("torch.")
        raise TypeError(f"{name} must be a dense (strided) tensor, got a {kind} tensor")
    if rank is not None and t.dim() != rank:
        raise ValueError(f"{name} must be {rank}-D, got shape {tuple(t.shape)}")
    if t.dtype not in TORCH_DTYPES:
        raise TypeError(f"{name} has unsupported dtype {t.dtype}; supported: float16, bfloat16, float32")
    return t


def check_same(name: str, t: torch.Tensor, ref_name: str, ref: torch.Tensor) -> None:
    if t.dtype != ref.dtype:
        raise TypeError(f"{name} has dtype {t.dtype} but {ref_name} has {ref.dtype}; they must match")
    if t.device != ref.device:
        raise ValueError(f"{name} is on {t.device} but {ref_name} is on {ref.device}; they must match")


def check_operands(a: object, b: object, a_name: str = "a", b_name: str = "b") -> None:
    if (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.ndim == 2 and b.ndim == 2
            and a.dtype is b.dtype and a.dtype in TORCH_DTYPES and a.layout is _STRIDED
            and b.layout is _STRIDED and not a.is_nested and not b.is_nested and a.shape[1] == b.shape[0]
            and a.device == b.device):
        return
    check_tensor(a_name, a, 2)
    check_tensor(b_name, b, 2)
    check_same(b_name, b, a_name, a)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: {a_name} is {tuple(a.shape)} and {b_name} is "
                         f"{tuple(b.shape)} ({a.shape[1]} != {b.shape[0]})")


def check_bias(name: str, bias: object, a: torch.Tensor, m: int, n: int) -> torch.Tensor:
    # The common bias, one value per output column (as nn.Linear's).
    if (isinstance(bias, torch.Tensor) and bias.ndim == 1 and bias.dtype is a.dtype
            and bias.layout is _STRIDED and not bias.is_nested and bias.shape[0] == n
            and bias.device == a.device):
        return bias
    check_tensor(name, bias)
    check_same(name, bias, "a", a)
    if bias.dim() > 2:
        raise ValueError(f"{name} of shape {tuple(bias.shape)} cannot be broadcast to ({m}, {n})")
    shape = (1,) * (2 - bias.dim()) + tuple(bias.shape)
    if shape[0] not in (1, m) or shape[1] not in (1, n):
        raise ValueError(f"{name} of shape {tuple(bias.shape)} cannot be broadcast to ({m}, {n})")
    return bias


def check_scalar(name: str, v: object) -> float:
    if type(v) is float or type(v) is int:  # the usual Python numbers skip the ABC check (0.2 us)
        return float(v)
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    return float(v)


def check_options(enable_streamk: object, config: object, backend: object = None) -> None:
    if enable_streamk is not None and not isinstance(enable_streamk, bool):
        raise TypeError(f"enable_streamk must be None, True or False, got {enable_streamk!r}")
    if config is not None and not isinstance(config, GemmConfig):
        raise TypeError(f"config must be a tritonblas.GemmConfig, got {type(config).__name__}")
    if backend is not None and not (isinstance(backend, str) and backend in BACKENDS):
        raise ValueError(f"backend must be None, 'triton' or 'torch', got {backend!r}")
    if config is not None and backend is not None and config.backend != backend:
        raise ValueError(f"backend={backend!r} conflicts with config, a {config.backend!r}-backend config; "
                         "pass one or the other")
    if enable_streamk is not None and (backend == "torch" or (config is not None and config.is_vendor)):
        raise ValueError(f"enable_streamk={enable_streamk} restricts the choice to a kernel family, but "
                         "the torch backend runs torch.mm; pass one or the other")
    # config= runs exactly that config: a family restriction it breaks cannot be honoured silently.
    if config is not None and enable_streamk is not None and config.streamk != enable_streamk:
        fam = "Stream-K" if config.streamk else "persistent"
        raise ValueError(f"enable_streamk={enable_streamk} conflicts with config, a {fam} config; "
                         "pass one or the other")


def span_bytes(t: torch.Tensor) -> int:
    """Bytes from t.data_ptr() to one past its last element, 0 when empty: the part of its memory span
    that depends only on shape, strides and dtype (ops' per-call cache keeps it)."""
    if t.numel() == 0:
        return 0
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True) if stride > 0)
    return (last + 1) * t.element_size()


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    start = t.data_ptr()
    return start, start + span_bytes(t)


def has_internal_overlap(t: torch.Tensor) -> bool:
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return True
        extent = stride * size
    return False


def check_out(out: object, m: int, n: int, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
              op: str, compiling: bool) -> torch.Tensor:
    """out= of an (m, n) result of a @ b (+ bias, addmm's `input`); raises before anything is written.

    `compiling`: torch.compiler.is_compiling() for this call, asked once by the caller, which needs it
    too (0.1 us a call)."""
    if not (isinstance(out, torch.Tensor) and out.dtype is a.dtype and out.layout is _STRIDED
            and not out.is_nested and out.shape == (m, n) and out.device == a.device):
        _check_out_tensor(out, m, n, a)
    if torch.is_grad_enabled() and (out.requires_grad or a.requires_grad or b.requires_grad
                                    or (bias is not None and bias.requires_grad)):
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad")
    if compiling:
        return out
    if not out.is_contiguous() and has_internal_overlap(out):
        raise ValueError("out has internal overlap (an expanded view): each element must be distinct")
    if out.numel() == 0:
        return out
    # Tensors on different storages cannot share memory; only aliases need the byte ranges. Unrolled
    # rather than a loop over (name, tensor) pairs: 0.51 -> 0.35 us.
    storage = out.untyped_storage().data_ptr()
    if a.untyped_storage().data_ptr() == storage:
        check_disjoint(out, "a", a)
    if b.untyped_storage().data_ptr() == storage:
        check_disjoint(out, "b", b)
    if bias is not None and bias.untyped_storage().data_ptr() == storage:
        check_disjoint(out, "input", bias)
    return out


def check_disjoint(out: torch.Tensor, name: str, t: torch.Tensor) -> None:
    if t.numel() == 0:
        return
    (lo, hi), (t_lo, t_hi) = _span(out), _span(t)
    if lo < t_hi and t_lo < hi:
        raise ValueError(f"out overlaps {name} in memory; pass a separate output tensor")


def _check_out_tensor(out: object, m: int, n: int, a: torch.Tensor) -> None:
    check_tensor("out", out)
    if tuple(out.shape) != (m, n):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected ({m}, {n})")
    check_same("out", out, "a", a)


def problem_of(m, n, k, dtype, out_dtype, layout, bias, scales=None, b_dtype=None) -> Problem:
    """select()'s problem arguments, checked by name. With `scales` (not None or "none") a quantized
    problem: dtype and b_dtype of QUANT_DTYPES, out_dtype default as scaled_mm's."""
    m, n, k = _check_int("m", m), _check_int("n", n), _check_int("k", k)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    bias = "none" if bias is None else bias
    if bias not in BIAS_KINDS:
        raise ValueError(f"bias must be None or one of {', '.join(BIAS_KINDS)}, got {bias!r}")
    if scales is not None and scales != "none":
        return _quantized_problem_of(m, n, k, dtype, out_dtype, layout, bias, scales, b_dtype)
    if b_dtype is not None:
        raise ValueError("b_dtype is for quantized problems (with scales); a plain GEMM has one dtype")
    if _dtype_name("dtype", dtype, QUANT_DTYPES + FLOAT_DTYPES) in QUANT_DTYPES:
        raise ValueError(f"dtype {dtype} is quantized: give its scales (scales= one of "
                         f"{', '.join(SCALES[1:])})")
    dt = _dtype_name("dtype", dtype)
    out = dt if out_dtype is None else _dtype_name("out_dtype", out_dtype)
    if out != dt:
        raise ValueError(f"out_dtype {out} differs from dtype {dt}: the kernels write the operand dtype")
    return Problem(m, n, k, dt, layout, bias)


def _quantized_problem_of(m: int, n: int, k: int, dtype, out_dtype, layout: str, bias: str, scales,
                          b_dtype) -> Problem:
    if scales not in SCALES:
        raise ValueError(f"scales must be None or one of {', '.join(SCALES)}, got {scales!r}")
    a = _dtype_name("dtype", dtype, QUANT_DTYPES)
    b = a if b_dtype is None else _dtype_name("b_dtype", b_dtype, QUANT_DTYPES)
    out = default_quant_out(a) if out_dtype is None else _dtype_name("out_dtype", out_dtype, QUANT_OUT_DTYPES)
    return Problem(m, n, k, a, layout, bias, out, b, scales)  # (it raises for what does not go together)


def _check_int(name: str, v: object) -> int:
    if isinstance(v, bool) or not isinstance(v, int):
        raise TypeError(f"{name} must be an int, got {type(v).__name__}")
    if v < 0:
        raise ValueError(f"{name} must be >= 0, got {v}")
    return v


def _dtype_name(name: str, v: object, allowed: tuple[str, ...] = FLOAT_DTYPES) -> str:
    if isinstance(v, torch.dtype):
        v = DTYPE_NAMES.get(v, str(v))
    if not isinstance(v, str) or v not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)} (or the torch dtype), got {v!r}")
    return v


def device_info_of(device: object) -> DeviceInfo:
    """select()'s device argument: None (the current CUDA device, or the interpreter), a torch device or
    device string, or a DeviceInfo."""
    if isinstance(device, DeviceInfo):
        return device
    from .device import device_info, interpreter_enabled

    if device is None:
        if interpreter_enabled() or not torch.cuda.is_available():
            return device_info(torch.device("cpu"))
        return device_info(torch.device("cuda"))
    try:
        dev = torch.device(device)
    except (TypeError, RuntimeError) as exc:
        raise ValueError(f"device must be a torch.device, a device string or a DeviceInfo, got {device!r}"
                         ) from exc
    return device_info(dev)
