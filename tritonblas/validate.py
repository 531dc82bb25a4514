"""Argument checks for the public ops: every failure names the argument and nothing is written."""

from __future__ import annotations

import numbers

import torch

from .config import GemmConfig

TORCH_DTYPES: dict[torch.dtype, str] = {torch.float16: "fp16", torch.bfloat16: "bf16", torch.float32: "fp32"}


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


def check_operands(a: object, b: object, a_name: str = "a", b_name: str = "b") -> tuple[int, int, int]:
    check_tensor(a_name, a, 2)
    check_tensor(b_name, b, 2)
    check_same(b_name, b, a_name, a)
    if a.shape[1] != b.shape[0]:
        raise ValueError(f"inner dimensions differ: {a_name} is {tuple(a.shape)} and {b_name} is "
                         f"{tuple(b.shape)} ({a.shape[1]} != {b.shape[0]})")
    return a.shape[0], b.shape[1], a.shape[1]


def check_bias(name: str, bias: object, a: torch.Tensor, m: int, n: int) -> torch.Tensor:
    check_tensor(name, bias)
    check_same(name, bias, "a", a)
    if bias.dim() > 2:
        raise ValueError(f"{name} of shape {tuple(bias.shape)} cannot be broadcast to ({m}, {n})")
    shape = (1,) * (2 - bias.dim()) + tuple(bias.shape)
    if shape[0] not in (1, m) or shape[1] not in (1, n):
        raise ValueError(f"{name} of shape {tuple(bias.shape)} cannot be broadcast to ({m}, {n})")
    return bias


def check_scalar(name: str, v: object) -> float:
    if isinstance(v, bool) or not isinstance(v, numbers.Real):
        raise TypeError(f"{name} must be a real number, got {type(v).__name__}")
    return float(v)


def check_options(enable_streamk: object, config: object) -> None:
    if enable_streamk is not None and not isinstance(enable_streamk, bool):
        raise TypeError(f"enable_streamk must be None, True or False, got {enable_streamk!r}")
    if config is not None and not isinstance(config, GemmConfig):
        raise TypeError(f"config must be a tritonblas.GemmConfig, got {type(config).__name__}")
    # config= runs exactly that config: a family restriction it breaks cannot be honoured silently.
    if config is not None and enable_streamk is not None and config.streamk != enable_streamk:
        fam = "Stream-K" if config.streamk else "persistent"
        raise ValueError(f"enable_streamk={enable_streamk} conflicts with config, a {fam} config; "
                         "pass one or the other")


def _span(t: torch.Tensor) -> tuple[int, int]:
    if t.numel() == 0:
        return (0, 0)
    last = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride(), strict=True) if stride > 0)
    start = t.data_ptr()
    return start, start + (last + 1) * t.element_size()


def _has_internal_overlap(t: torch.Tensor) -> bool:
    dims = sorted((s, n) for n, s in zip(t.shape, t.stride(), strict=True) if n > 1)
    extent = 1
    for stride, size in dims:
        if stride < extent:
            return True
        extent = stride * size
    return False


def check_out(out: object, m: int, n: int, a: torch.Tensor, inputs: dict[str, torch.Tensor | None],
              op: str) -> torch.Tensor:
    check_tensor("out", out)
    if tuple(out.shape) != (m, n):
        raise ValueError(f"out has shape {tuple(out.shape)}, expected ({m}, {n})")
    check_same("out", out, "a", a)
    if torch.is_grad_enabled() and any(t is not None and t.requires_grad
                                       for t in (out, *inputs.values())):
        raise RuntimeError(f"{op}(): functions with out=... arguments don't support automatic "
                           "differentiation, but one of the arguments requires grad")
    if torch.compiler.is_compiling():
        return out
    if not out.is_contiguous() and _has_internal_overlap(out):
        raise ValueError("out has internal overlap (an expanded view): each element must be distinct")
    if out.numel() == 0:
        return out
    storage = out.untyped_storage().data_ptr()
    for name, t in inputs.items():
        # Tensors on different storages cannot share memory; only aliases need the byte ranges.
        if t is None or t.numel() == 0 or t.untyped_storage().data_ptr() != storage:
            continue
        (lo, hi), (t_lo, t_hi) = _span(out), _span(t)
        if lo < t_hi and t_lo < hi:
            raise ValueError(f"out overlaps {name} in memory; pass a separate output tensor")
    return out
