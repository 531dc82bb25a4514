"""The public ops: matmul, addmm, linear (as torch.mm, torch.addmm, F.linear).

Each checks its arguments only when the call's signature has no plan yet (call_path: lookup-or-prepare,
then launch). A call that needs autograd (its plan is stored apart), or runs under torch.compile (never
stored), is planned through the custom op `tritonblas::gemm` (core_op.gemm, registered on the first
such call; one opaque node for the compiler, the library's kernels in the backward), whose body
(call_path.gemm_body) plans and launches the same way without the argument checks its callers ran.
Eager calls that need no autograd launch directly: the custom-op dispatcher costs ~10 us a call.
"""

from __future__ import annotations

import math

import torch

from . import call_path
from .call_path import Plan
from .call_path import plans as _plans
from .call_path import run_plan as _run_plan
from .call_path import signature as _signature
from .call_path import still_valid as _still_valid
from .config import GemmConfig
from .validate import check_bias, check_operands, check_options, check_scalar, check_tensor


def _launch(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None,
            alpha: float, beta: float) -> torch.Tensor:
    """Run a plan: through the custom op where it needs autograd or torch.compile, else directly."""
    if plan.through_op:
        # Imported here, on the first call that needs autograd or runs under torch.compile (which
        # performs the import while tracing): registering the custom op took 0.14-0.24 s of a warmed
        # first call on the H200 (scripts/first_call_imports.py), and eager calls never use it.
        from .core_op import FAMILY, config_to_list, gemm

        y = gemm(a, b, bias, beta, alpha, FAMILY[plan.restriction], config_to_list(plan.config))
        return y if out is None else out.copy_(y)
    return _run_plan(plan, a, b, bias, out, alpha, beta)


# --- the public ops -----------------------------------------------------------------------------------
# Host cost of a repeated call, every launch stubbed (thread CPU time, 2-core CPU box, 64^3 fp16,
# TRITON_INTERPRET=1 python tests/ops_overhead.py --baseline <the tree before plans>): matmul(out=)
# 3.26 -> 3.20 us, matmul 3.52 -> 3.45, addmm 5.34 -> 5.28, linear 6.15 -> 6.09, linear of a 3-D x 8.92
# -> 8.85, linear needing autograd (its plan is stored now) 54.8 -> 48.0. matmul(out=, config=), planned
# on every call until config= joined the signature: 12.80 -> 3.79 (2026-12-01, --baseline the tree before).

def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """a @ b for 2-D a (M, K) and b (K, N), as torch.mm.

    backend: None (dispatch decides between the kernels and torch.mm), "triton" (the kernels only) or
    "torch" (torch.mm, the vendor GEMM)."""
    signature = _signature("matmul", enable_streamk, backend, config, a, b, None, out)
    plan = _plans.get(signature) if signature is not None else None
    if plan is None or not _still_valid(plan, a, b, None, out):
        check_operands(a, b)
        if enable_streamk is not None or config is not None or backend is not None:
            check_options(enable_streamk, config, backend)
        plan = call_path.prepare(signature, "matmul", a, b, None, 1.0, out, enable_streamk, config, backend)
    return _launch(plan, a, b, None, out, 1.0, 1.0)


def addmm(input: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1,
          out: torch.Tensor | None = None, enable_streamk: bool | None = None,
          config: GemmConfig | None = None, backend: str | None = None) -> torch.Tensor:
    """beta * input + alpha * (a @ b), with input broadcast as torch.addmm broadcasts it; backend as
    for matmul (torch.addmm is the vendor's)."""
    signature = None
    if type(beta) in (float, int) and type(alpha) in (float, int):  # bool and other Reals: the checks
        signature = _signature("addmm" if beta != 0 else "addmm0", enable_streamk, backend, config, a, b,
                               input, out)
    plan = _plans.get(signature) if signature is not None else None
    if plan is None or not _still_valid(plan, a, b, input, out):
        check_operands(a, b)
        check_bias("input", input, a, a.shape[0], b.shape[1])
        check_scalar("beta", beta)
        check_scalar("alpha", alpha)
        check_options(enable_streamk, config, backend)
        plan = call_path.prepare(signature, "addmm", a, b, input, float(beta), out, enable_streamk, config,
                                 backend)
    return _launch(plan, a, b, input, out, float(alpha), float(beta))


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """As torch.nn.functional.linear: x[..., K] @ weight[N, K].T + bias[N]; backend as for matmul."""
    signature = _signature("linear", enable_streamk, backend, config, x, weight, bias)
    plan = _plans.get(signature) if signature is not None else None
    if plan is None or not _still_valid(plan, x, weight, bias, None):
        x2 = _check_linear(x, weight, bias)
        check_options(enable_streamk, config, backend)
        out_shape = None if x2 is x else (*x.shape[:-1], weight.shape[0])
        plan = call_path.prepare(signature, "linear", x2, weight.t(), bias, 1.0, None, enable_streamk,
                                 config, backend, out_shape)
    if plan.out_shape is None:  # a 2-D x is used as it is: a reshape to the same shape costs 0.9 us
        return _launch(plan, x, weight.t(), bias, None, 1.0, 1.0)
    y = _launch(plan, x.reshape(plan.m, plan.k), weight.t(), bias, None, 1.0, 1.0)
    return y.reshape(plan.out_shape)


def _check_linear(x: object, weight: object, bias: object) -> torch.Tensor:
    """linear's argument checks; x as the 2-D operand (x itself when it is 2-D)."""
    check_tensor("x", x)
    check_tensor("weight", weight, 2)
    if x.dim() < 1:
        raise ValueError("x must have at least 1 dimension")
    if x.shape[-1] != weight.shape[1]:
        raise ValueError(f"x has {x.shape[-1]} features in its last dimension but weight "
                         f"{tuple(weight.shape)} expects {weight.shape[1]}")
    # Explicit row count: reshape(-1, 0) of an empty x is ambiguous and raises.
    x2 = x if x.dim() == 2 else x.reshape(math.prod(x.shape[:-1]), x.shape[-1])
    check_operands(x2, weight.t(), "x", "weight")
    n = weight.shape[0]
    if bias is not None:
        check_tensor("bias", bias, 1)
        if bias.shape[0] != n:
            raise ValueError(f"bias has shape {tuple(bias.shape)}, expected ({n},)")
        check_bias("bias", bias, x2, x2.shape[0], n)
    return x2
