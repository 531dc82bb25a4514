"""The explicit ops' C++ front (tritonblas/native/front.cpp) as the call path sees it: its functions once
its library is loaded (None until then: `native.on_front`), and what the Python path tells it.

An explicit call without options asks the front first (`mm`, `addmm`, `linear`, `scaled_mm`): it keys
the call as call.path.signature does and, where the Python path answered "torch's op" for that key
before, runs torch's op itself (else None: the Python path runs the call). The Python path answers
(`remember`, `remember_scaled`) after it ran torch's op for a reason that holds for later calls of the
key (`answer`)."""

from __future__ import annotations

import types

import torch

from .. import native
from ..contract import ADDMM, ADDMM0, ASK, EAGER_TORCH, LINEAR, MATMUL, SCALED_MM, SCALED_MM_BLOCK, TORCH
from .path import Plan
from .run import scaled_mm_alone

mm = addmm = linear = scaled_mm = None  # the front's calls, once loaded
_remember = _remember_scaled = None
_blockwise = False  # whether the front runs torch's block-wise op (its torch has aten::_scaled_mm_v2)


def _use(front: types.ModuleType) -> None:
    global mm, addmm, linear, scaled_mm, _remember, _remember_scaled, _blockwise
    codes = (front.MATMUL, front.ADDMM, front.ADDMM0, front.LINEAR, front.SCALED_MM, front.SCALED_MM_BLOCK,
             front.TORCH, front.EAGER_TORCH)
    if codes != (MATMUL, ADDMM, ADDMM0, LINEAR, SCALED_MM, SCALED_MM_BLOCK, TORCH, EAGER_TORCH):
        raise RuntimeError("tritonblas/native/front.cpp's codes differ from call.front's")
    _remember, _remember_scaled, _blockwise = front.remember, front.remember_scaled, bool(front.BLOCKWISE)
    mm, addmm, linear, scaled_mm = front.mm, front.addmm, front.linear, front.scaled_mm


native.on_front(_use)


def torch_decides(plan: Plan) -> bool:
    """Dispatch's own choice of torch's GEMM (not a backend or config the caller pinned)."""
    config = plan.config
    return config is not None and config.backend == "torch" and plan.restriction == (None, None) and \
        not plan.user_config


def answer(plan: Plan) -> int:
    """What later calls of a plan's key run, given that this one ran torch's op: torch's op for good where
    dispatch picked it (TORCH), or in eager calls where the kernel wins under graph capture only and
    has been launched once (EAGER_TORCH); ASK (0) where the Python path must decide again (a torch pick whose
    kernel runs eager calls, caught under capture)."""
    if torch_decides(plan):
        return TORCH
    return EAGER_TORCH if plan.eager_vendor and plan.launched else ASK


def _loaded() -> bool:
    return _remember is not None or native.front() is not None  # (looked for once a process)


def remember(op: int, plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
             out: torch.Tensor | None = None) -> None:
    """This call ran torch's op: tell the front what later calls of its key run (a, b: the op's operands
    as the caller passed them, a linear's x and weight; bias: the bias or addmm's input; out: out=)."""
    if _loaded() and (code := answer(plan)):
        _remember(op, a, b, bias, out, code)


def remember_scaled(plan: Plan, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                    scale_b: torch.Tensor, bias: torch.Tensor | None, out_dtype: torch.dtype | None,
                    fast_acc: bool, out: torch.Tensor | None) -> None:
    """As `remember`, for a scaled_mm call that ran torch._scaled_mm as the front would: fp8 operands, a
    bf16 or fp16 output (out= contiguous, written in place), a bias of its dtype or none, contiguous
    scales."""
    contiguous = scale_a.is_contiguous() and scale_b.is_contiguous() and (out is None or out.is_contiguous())
    if not (contiguous and scaled_mm_alone(a, plan.out_dtype, bias)):
        return
    if _loaded() and (code := answer(plan)):
        _remember_scaled(a, b, scale_a, scale_b, bias, out_dtype, fast_acc, out, code, SCALED_MM)


def remember_block(plan: Plan, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                   scale_b: torch.Tensor, out_dtype: torch.dtype | None, fast_acc: bool) -> None:
    """As remember_scaled, for a block-wise call without bias or out= that just ran torch's block-wise op
    as dispatch's pick (launch.blockscaled.torch_blockwise, which cuBLASLt took): later calls of its key
    run that op from the front, where its torch has it and the scales need no copy (outer-dim-major)."""
    if _loaded() and _blockwise and torch_decides(plan) and plan.torch_blockwise and \
            scale_a.stride(0) == 1 and scale_b.stride(0) == 1:
        _remember_scaled(a, b, scale_a, scale_b, None, out_dtype, fast_acc, None, TORCH, SCALED_MM_BLOCK)
