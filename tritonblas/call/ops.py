"""The public ops: matmul, addmm, linear (as torch.mm, torch.addmm, F.linear).

Each checks its arguments only when the call's signature has no plan yet (call.path: lookup, or the
op's checks and prepare, then run). A call that needs autograd runs its plan through `_Gemm`, an
autograd.Function whose forward launches directly and whose backward is the custom op's
(core_op.backward: one definition of the gradients). Under torch.compile a call goes through the custom
op `tritonblas::gemm` (core_op.gemm: one opaque node for the compiler), whose body plans and launches
the same way. Eager calls never pay the custom op's dispatch: a linear with a weight needing grad cost
69.5 us of host time through it, 12.8 us now (CPU box, launch stubbed: tests/ops_overhead.py).
Under torch.func's transforms (vmap, grad, jacrev, ...) a call runs torch's own op: the transforms wrap
the tensors, which the kernels cannot read, and torch's formulas know every transform.

A call without options first asks the C++ front (call.front): where the Python path ran torch's op for
its key before, for a reason that holds, the front runs torch's op itself, without the signature and
lookup; else it answers None.
"""

from __future__ import annotations

import math

import torch

from ..config import GemmConfig
from ..validate import check_bias, check_operands, check_options, check_scalar, check_tensor
from . import front, path
from .path import Plan, is_compiling, lookup, signature
from .run import eager_torch, gemm_operands, run, run_gemm

_core_op_module = None


def _core_op():
    # Imported on the first call that needs autograd or runs under torch.compile (which performs the
    # import while tracing): registering the custom op took 0.14-0.24 s of a warmed first call on the
    # H200 (016dd08:scripts/first_call_imports.py), and eager calls without autograd never use it.
    # Kept once imported: an import statement costs ~2 us a call on the CPU box.
    global _core_op_module
    if _core_op_module is None:
        from . import core_op

        _core_op_module = core_op
    return _core_op_module


class _Gemm(torch.autograd.Function):
    """alpha * a @ b + beta * bias for eager autograd: the forward runs the plan, the backward and the
    saved context are the custom op's. The old-style forward(ctx, ...) (setup inside it): with a
    separate setup_context, apply costs 28 us instead of 7 on the CPU box. A linear hands its weight
    as it is (b is its transpose) and it is saved as it is (`ctx.weight`: core_op's backward then
    returns the weight's gradient, no transposed view made either way, ~1.5 us each)."""

    @staticmethod
    def forward(ctx, a, b, bias, beta, alpha, family, plan):  # noqa: ANN001, ANN205 (autograd's API)
        y = run_gemm(plan, a, b, bias, alpha, beta)
        _core_op().setup_context(ctx, (a, b, bias, beta, alpha, family, plan.op_args[1]), y)
        ctx.weight = plan.linear
        return y

    @staticmethod
    def backward(ctx, grad):  # noqa: ANN001, ANN205
        core_op = _core_op()
        # Without create_graph the gradients need no graph: the GEMMs skip the custom op's dispatch.
        return core_op.backward(ctx, grad, None if torch.is_grad_enabled() else core_op.eager_product)


# Function.apply's own Python (binding defaults, unwrapping functorch's dead wrappers) costs ~3 us a
# call on the CPU box: with no functorch transform active it ends in this C apply, called directly.
_apply = super(torch.autograd.Function, _Gemm).apply
_functorch_active = torch._C._are_functorch_transforms_active


def _launch(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None,
            alpha: float, beta: float, op: int) -> torch.Tensor:
    """Run a plan on the op's tensors: through autograd or the custom op where it needs them. op: the
    call's code for the C++ front (native/answers.h), which learns where torch's op runs."""
    if _functorch_active() and not is_compiling():
        # torch.func's transforms (vmap, grad, jacrev, ...) wrap the tensors, which the kernels cannot
        # read: torch's own op, whose formulas every transform knows
        return _torch_op(plan, a, b, bias, alpha, beta, out)
    torch_picked = front.torch_decides(plan) or eager_torch(plan)
    if not (plan.grad or plan.through_op):
        if torch_picked:
            front.remember(op, plan, a, b, bias, out)
            return _torch_op(plan, a, b, bias, alpha, beta, out)
        return run(plan, a, b, bias, out, alpha, beta)
    if plan.grad and torch_picked:
        front.remember(op, plan, a, b, bias)
        return _torch_op(plan, a, b, bias, alpha, beta)
    if plan.grad:
        a2 = a if plan.out_shape is None else a.reshape(plan.m, plan.k)
        y = _apply(a2, b, bias, beta, alpha, plan.op_args[0], plan)
    else:  # torch.compile: the custom op
        a2, b2 = gemm_operands(plan, a, b)
        core_op = _core_op()
        y = core_op.gemm(a2, b2, bias, beta, alpha, core_op.FAMILY[plan.restriction],
                         core_op.config_to_list(plan.config))
        y = y if out is None else out.copy_(y)
    return y if plan.out_shape is None else y.reshape(plan.out_shape)


def _torch_op(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float,
              beta: float, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch's own op, as the caller would have called it (with torch's own autograd node where it needs
    one), where dispatch runs torch's GEMM: it picked it, or the kernel wins under graph capture only
    (call.run.eager_torch). The route through run (an output allocated, the GEMM's 2-D views,
    torch.mm(out=)) and, with grad, _Gemm's Python apply and backward would only add host time (the H200
    host, 4x2048x2048 bf16: a linear +10.7 us a call on torch's kernel through run; with grad, +5.4 us
    through _Gemm). A backend or config the caller pinned takes run, whose out= calls transparent mode
    never routes; this op is routed there, and dispatch's same choice runs torch's kernel (what an
    explicit call's rule for eager use sends to torch, a routed call's sends too)."""
    if plan.linear:  # (no out=)
        return torch.nn.functional.linear(a, b, bias)
    if bias is None:
        return torch.mm(a, b) if out is None else torch.mm(a, b, out=out)
    if out is None:
        return torch.addmm(bias, a, b, beta=beta, alpha=alpha)
    return torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)


def _prepare(key: tuple | None, op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
             beta: float, out: torch.Tensor | None, enable_streamk: bool | None, config: GemmConfig | None,
             backend: str | None, out_shape: tuple | None = None, x: torch.Tensor | None = None) -> Plan:
    """path.prepare, with what the op adds before the plan is stored: for a linear (x: its input,
    a: x as 2-D), no prepared launch where x's reshape copies (x's pointer is not the GEMM's A then);
    for a call under autograd, the custom op's arguments its shared backward reads."""

    def finish(plan: Plan) -> None:
        if x is not None and x is not a and not (a._is_view() and a.data_ptr() == x.data_ptr()):
            plan.launch = None
        if plan.grad:
            core_op = _core_op()
            plan.op_args = (core_op.FAMILY[plan.restriction], core_op.config_to_list(plan.config))

    return path.prepare(key, op, a, b, bias, beta, out, enable_streamk, config, backend, out_shape,
                             x is not None, finish)


# --- the public ops -----------------------------------------------------------------------------------
# Host cost of a repeated call: tests/ops_overhead.py (launch stubbed, CPU box), bounded against
# torch's own ops by tests/test_host_cost.py.

def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """a @ b for 2-D a (M, K) and b (K, N), as torch.mm.

    backend: None (dispatch decides between the kernels and torch.mm), "triton" (the kernels only) or
    "torch" (torch.mm, the vendor GEMM)."""
    if front.mm is not None and enable_streamk is None and config is None and backend is None and \
            not is_compiling():
        y = front.mm(a, b, out)
        if y is not None:
            return y
    key = signature("matmul", enable_streamk, backend, config, a, b, None, out)
    plan = lookup(key, a, b, None, out) or _plan_matmul(key, a, b, out, enable_streamk, config, backend)
    return _launch(plan, a, b, None, out, 1.0, 1.0, front.MATMUL)


def _plan_matmul(key, a, b, out, enable_streamk, config, backend) -> Plan:  # noqa: ANN001
    check_operands(a, b)
    if enable_streamk is not None or config is not None or backend is not None:
        check_options(enable_streamk, config, backend)
    return _prepare(key, "matmul", a, b, None, 1.0, out, enable_streamk, config, backend)


def addmm(input: torch.Tensor, a: torch.Tensor, b: torch.Tensor, *, beta: float = 1, alpha: float = 1,
          out: torch.Tensor | None = None, enable_streamk: bool | None = None,
          config: GemmConfig | None = None, backend: str | None = None) -> torch.Tensor:
    """beta * input + alpha * (a @ b), with input broadcast as torch.addmm broadcasts it; backend as
    for matmul (torch.addmm is the vendor's)."""
    if front.addmm is not None and enable_streamk is None and config is None and backend is None and \
            not is_compiling():
        y = front.addmm(input, a, b, beta, alpha, out)
        if y is not None:
            return y
    key = None
    if type(beta) in (float, int) and type(alpha) in (float, int):  # bool and other Reals: the checks
        key = signature("addmm" if beta != 0 else "addmm0", enable_streamk, backend, config, a, b, input, out)
    plan = lookup(key, a, b, input, out) or _plan_addmm(key, input, a, b, beta, alpha, out, enable_streamk,
                                                        config, backend)
    op = front.ADDMM if beta != 0 else front.ADDMM0
    return _launch(plan, a, b, input, out, float(alpha), float(beta), op)


def _plan_addmm(key, input, a, b, beta, alpha, out, enable_streamk, config, backend) -> Plan:  # noqa: ANN001
    check_operands(a, b)
    check_bias("input", input, a, a.shape[0], b.shape[1])
    check_scalar("beta", beta)
    check_scalar("alpha", alpha)
    check_options(enable_streamk, config, backend)
    return _prepare(key, "addmm", a, b, input, float(beta), out, enable_streamk, config, backend)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None, *,
           enable_streamk: bool | None = None, config: GemmConfig | None = None,
           backend: str | None = None) -> torch.Tensor:
    """As torch.nn.functional.linear: x[..., K] @ weight[N, K].T + bias[N]; backend as for matmul."""
    if front.linear is not None and enable_streamk is None and config is None and backend is None and \
            not is_compiling():
        y = front.linear(x, weight, bias)
        if y is not None:
            return y
    key = signature("linear", enable_streamk, backend, config, x, weight, bias)
    plan = lookup(key, x, weight, bias, None) or _plan_linear(key, x, weight, bias, enable_streamk, config,
                                                              backend)
    return _launch(plan, x, weight, bias, None, 1.0, 1.0, front.LINEAR)


def _plan_linear(key, x, weight, bias, enable_streamk, config, backend) -> Plan:  # noqa: ANN001
    x2 = _check_linear(x, weight, bias)
    check_options(enable_streamk, config, backend)
    out_shape = None if x2 is x else (*x.shape[:-1], weight.shape[0])
    return _prepare(key, "linear", x2, weight.t(), bias, 1.0, None, enable_streamk, config, backend,
                    out_shape, x)


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
