"""Public ops (matmul, addmm, linear) and the core op `tritonblas::gemm`, as one path.

Every op does lookup-or-prepare, then launch:

    signature = _signature(op, options, tensors)   # options + each tensor's type, layout, shape, ...
    plan = _plans.get(signature)                    # a Plan an earlier call with these facts made,
    if plan is None or not _still_valid(plan, ...): #   if the facts a signature leaves out allow it
        <the op's argument checks>                  # raise naming the argument; nothing written
        plan = _prepare(signature, ...)             # the shared checks, the dispatch key (Problem),
                                                    #   device facts, the selected config; stored
    return _launch(plan, tensors, alpha, beta)

A Plan is frozen, holds no tensor and is a function of the signature and of dispatch's selections
(dropped with them: dispatch.on_clear, and never stored across a drop: dispatch.cache_if_current).
The per-call facts a signature leaves out are out's memory overlap with the inputs (data pointers) and
TRITON_INTERPRET for CPU tensors, both checked on every hit (`_still_valid`); grad mode with the
requires_grad flags is in it (whether the call needs autograd), and torch.compile gets none.

A call that needs autograd (its plan is stored apart), or runs under torch.compile (never stored), is
planned through the custom op
`tritonblas::gemm` (`gemm`; one opaque node for the compiler, the library's kernels in the backward),
whose body plans and launches the same way without the argument checks its callers ran. Eager calls
that need no autograd launch directly: the custom-op dispatcher costs ~10 us a call.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass

import torch

from . import dispatch, record
from .config import BACKENDS, INTERPRETER_DEVICE, DeviceInfo, GemmConfig, Problem
from .device import interpreter_enabled, tensor_device_info
from .launch import is_out_of_resources, launch_gemm, prefetch_compile_key
from .validate import (
    TORCH_DTYPES,
    check_bias,
    check_operands,
    check_options,
    check_out,
    check_scalar,
    check_tensor,
    span_bytes,
)

# (enable_streamk, backend) <-> the custom op's `family` int (its schema has no Optional[bool]). A
# family restriction already means the kernels, so (False, "triton") is (False, None).
_FAMILY = {(None, None): -1, (False, None): 0, (True, None): 1, (None, "triton"): 2, (None, "torch"): 3,
           (False, "triton"): 0, (True, "triton"): 1}
_RESTRICTION = {-1: (None, None), 0: (False, None), 1: (True, None), 2: (None, "triton"), 3: (None, "torch")}
# A dispatched config that triton cannot compile (out of shared memory) is reported and the next one
# selected, this many times at most (tests/test_dispatch_fallback.py).
_MAX_COMPILE_FALLBACKS = 8
_BIAS_KINDS = {(False, False): "scalar", (False, True): "row", (True, False): "column", (True, True): "full"}
# What torch.backends.cuda.matmul.allow_tf32 returns, without its module __getattr__: 0.65 -> 0.05 us.
_allow_tf32 = torch._C._get_cublas_allow_tf32
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


# The custom op's schema takes the config as list[int]: every GemmConfig field in declaration order
# (bools as 0/1, grid None as 0, backend as its index in BACKENDS), so a field added to GemmConfig
# cannot be dropped on the way.
_CONFIG_FIELDS = tuple(GemmConfig.model_fields)
_BOOL_FIELDS = frozenset(f for f, info in GemmConfig.model_fields.items() if info.annotation is bool)


def _config_to_list(config: GemmConfig | None) -> list[int]:
    if config is None:
        return []
    return [BACKENDS.index(config.backend) if f == "backend" else int(getattr(config, f) or 0)
            for f in _CONFIG_FIELDS]


def _config_from_list(values: list[int]) -> GemmConfig | None:
    return _config_from_tuple(tuple(values)) if values else None


@functools.lru_cache(maxsize=1024)
def _config_from_tuple(values: tuple[int, ...]) -> GemmConfig:
    """Cached: validating a GemmConfig costs ~5 us, paid once per distinct config."""
    fields = dict(zip(_CONFIG_FIELDS, values, strict=True))
    fields = {f: bool(v) if f in _BOOL_FIELDS else v for f, v in fields.items()}
    fields["grid"] = fields["grid"] or None
    fields["backend"] = BACKENDS[fields["backend"]]
    return GemmConfig(**fields)


# --- the plan -----------------------------------------------------------------------------------------

@dataclass(frozen=True, slots=True)
class Plan:
    """What the checks of one call derived, for its launch and for every later call of its signature."""

    m: int
    n: int
    k: int
    problem: Problem | None  # the dispatch key; None when the call goes through the custom op
    device: DeviceInfo | None  # None when the call goes through the custom op (its body plans)
    config: GemmConfig | None  # what runs: selected, or the caller's; None: an empty output, no launch
    restriction: tuple  # (enable_streamk, backend) of the call: the next selection on a fall-back
    user_config: bool  # config= given: run exactly that, never replaced after a compile failure
    fp32: bool  # precision then depends on the global tf32 flag, read per call
    spans: tuple[int, int, int, int]  # span_bytes of out, a, b, bias (out= calls only)
    out_shape: tuple | None = None  # linear of an N-D x: the result's shape
    through_op: bool = False  # autograd or torch.compile: the custom op `gemm`


_plans: dict[tuple, Plan] = {}  # by signature
_PLANS_CAP = 4096
dispatch.on_clear.append(_plans.clear)  # a plan must not outlive the selection it holds


def _signature(op: str, enable_streamk: object, backend: object, config: object, a: object, b: object,
               bias: object = None, out: object = None) -> tuple | None:
    """What a plan is stored under: the op (marked when autograd needs the custom op), its options and
    each tensor's (type, layout, shape, strides, dtype, device); None where no plan may be stored (then
    the call is planned every time): config=, an option of the wrong type, out= with autograd (refused),
    torch.compile. Spelled out flat rather than a helper per tensor over map(): 1.6 -> 1.2 us for three
    tensors (~50 ns an attribute read)."""
    if config is not None or not (enable_streamk is None or type(enable_streamk) is bool) or \
            not (backend is None or backend == "triton" or backend == "torch") or _is_compiling():
        return None
    try:
        if _grad_enabled() and (a.requires_grad or b.requires_grad or (
                bias is not None and bias.requires_grad) or (out is not None and out.requires_grad)):
            if out is not None:
                return None  # out= refuses autograd: the checks raise
            op = (op, "grad")  # through the custom op, for autograd
        # Layout is needed: a sparse COO tensor has a shape and strides (all 0) like an expanded view.
        return (op, enable_streamk, backend, type(a), a.layout, a.shape, a.stride(), a.dtype, a.device,
                type(b), b.layout, b.shape, b.stride(), b.dtype, b.device,
                None if bias is None else (type(bias), bias.layout, bias.shape, bias.stride(), bias.dtype,
                                           bias.device),
                None if out is None else (type(out), out.layout, out.shape, out.stride(), out.dtype,
                                          out.device))
    except Exception:  # not a tensor, or one without sizes/strides: the checks name it
        return None


def _still_valid(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                 out: torch.Tensor | None) -> bool:
    """Whether the per-call facts a signature leaves out allow its plan: the interpreter still chosen for
    CPU tensors, and no byte of out in the range of an input (else check_out compares their storages)."""
    if plan.device is INTERPRETER_DEVICE and not interpreter_enabled():
        return False
    if out is None:
        return True
    out_span, a_span, b_span, bias_span = plan.spans
    lo = out.data_ptr()
    hi = lo + out_span
    p = a.data_ptr()
    if p < hi and lo < p + a_span:
        return False
    p = b.data_ptr()
    if p < hi and lo < p + b_span:
        return False
    return bias is None or not ((p := bias.data_ptr()) < hi and lo < p + bias_span)


def _layout(a: torch.Tensor, b: torch.Tensor) -> str:
    """'n' for a row-major operand (unit stride along K for A, along N for B), 't' for column-major."""
    a0, a1 = a.stride()
    b0, b1 = b.stride()
    return ("t" if a1 != 1 and a0 == 1 else "n") + ("t" if b1 != 1 and b0 == 1 else "n")


def _bias_kind(bias: torch.Tensor | None, m: int, n: int) -> str:
    if bias is None:
        return "none"
    shape = bias.shape
    if len(shape) == 1:
        return "row" if shape[0] == n and n != 1 else "scalar"
    shape = (1,) * (2 - len(shape)) + tuple(shape)
    return _BIAS_KINDS[shape[0] == m and m != 1, shape[1] == n and n != 1]


def _prepare(signature: tuple | None, op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
             beta: float, out: torch.Tensor | None, enable_streamk: bool | None, config: GemmConfig | None,
             backend: str | None, out_shape: tuple | None = None) -> Plan:
    """The checks every op shares (after its own argument checks: a and b are the GEMM's 2-D operands,
    bias addmm's input or linear's bias), and the plan they derive, stored under `signature` unless the
    selections were dropped meanwhile. Raises before anything is written."""
    m, k = a.shape
    n = b.shape[1]
    restriction = (enable_streamk, backend)
    if out is not None:
        compiling = _is_compiling()
        check_out(out, m, n, a, b, bias, op, compiling)
    else:
        compiling = op != "gemm" and _is_compiling()
    if op != "gemm" and (compiling or (out is None and _grad_enabled() and (
            a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad)))):
        plan = Plan(m, n, k, None, None, config, restriction, config is not None, False, (0, 0, 0, 0),
                    out_shape, through_op=True)
        if signature is not None:  # autograd (torch.compile has none): it holds no selection
            dispatch.cache_if_current(dispatch.generation(), _plans, signature, plan, _PLANS_CAP)
        return plan
    read_at = dispatch.generation()  # before anything is selected (not while compiling: no guard on it)
    device = tensor_device_info(a)  # first: it raises for tensors no kernel can take, empty ones too
    if a.is_cuda:
        prefetch_compile_key()  # the first compile-cache lookup's hash, in a thread while we select
    # As torch.addmm: with beta == 0 the input is ignored, NaN/inf in it included.
    problem = Problem(m, n, k, TORCH_DTYPES[a.dtype], _layout(a, b), _bias_kind(None if beta == 0.0 else bias,
                                                                                 m, n))
    record.note(problem)  # TRITONBLAS_RECORD / enable(record=...): a new problem goes to the file
    user_config = config is not None
    if user_config:
        dispatch.check_user_config(config, problem, device)
    elif m and n:  # an empty output launches nothing, and the heuristic has no tiles to rank
        config = dispatch.select_config(problem, device, enable_streamk, backend)
    spans = (0, 0, 0, 0) if out is None else \
        (span_bytes(out), span_bytes(a), span_bytes(b), 0 if bias is None else span_bytes(bias))
    plan = Plan(m, n, k, problem, device, config, restriction, user_config, a.dtype is torch.float32, spans,
                out_shape)
    if signature is not None:
        dispatch.cache_if_current(read_at, _plans, signature, plan, _PLANS_CAP)
    return plan


# --- the launch ---------------------------------------------------------------------------------------

def _launch(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None,
            alpha: float, beta: float) -> torch.Tensor:
    """Run a plan on this call's tensors: out (allocated when None) = alpha * a @ b + beta * bias."""
    if plan.through_op:
        y = gemm(a, b, bias, beta, alpha, _FAMILY[plan.restriction], _config_to_list(plan.config))
        return y if out is None else out.copy_(y)
    if out is None:
        # new_empty with int sizes: 0.85 us, torch.empty((m, n), dtype=, device=) 1.8 us (keyword parsing).
        out = a.new_empty(plan.m, plan.n)
    config = plan.config
    if config is None:
        return out
    # The bias kind is "none" for addmm with beta == 0 too: the input is ignored.
    bias2d = None if plan.problem.bias == "none" else torch.broadcast_to(bias, (plan.m, plan.n))
    precision = "tf32" if not plan.fp32 or _allow_tf32() else "ieee"
    try:  # free when nothing is raised (zero-cost exceptions): the hot path pays nothing for it
        if config.backend == "torch":  # _run_config inlined: one frame less on the hot path (~0.1 us)
            _vendor_gemm(a, b, out, bias2d, alpha, beta)
        else:
            launch_gemm(a, b, out, bias2d, alpha, beta, config, plan.device.sm_count, precision)
    except Exception as exc:
        if plan.user_config:
            raise
        _fall_back(exc, plan, (a, b, out, bias2d, alpha, beta), precision)
    return out


def _run_config(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias2d: torch.Tensor | None,
                alpha: float, beta: float, config: GemmConfig, sm_count: int, precision: str) -> None:
    """The kernels, or for a torch-backend config the vendor GEMM (_vendor_gemm)."""
    if config.backend == "torch":
        _vendor_gemm(a, b, out, bias2d, alpha, beta)
    else:
        launch_gemm(a, b, out, bias2d, alpha, beta, config, sm_count, precision)


def _vendor_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias2d: torch.Tensor | None,
                 alpha: float, beta: float) -> None:
    """torch.mm / torch.addmm with the kernels' contract: out = alpha * (a @ b) + beta * bias in a's
    dtype (bias None: no bias term, as with beta == 0; K = 0 gives beta * bias). torch honours
    allow_tf32 for fp32 as the kernels' precision does."""
    if bias2d is not None:
        if bias2d.stride(0) == 0 and bias2d.stride(1) == 1:
            # A row bias goes in as the (N,) vector it is: cuBLASLt then fuses it into the GEMM's
            # epilogue, where the broadcast 2-D view is first copied into out (512x6144x4096 bf16, nt,
            # row bias: 48.0 us vs F.linear's 39.9 us on the H200, 2026-11-30).
            bias2d = bias2d[0]
        torch.addmm(bias2d, a, b, beta=beta, alpha=alpha, out=out)
    elif alpha == 1.0:
        torch.mm(a, b, out=out)
    else:  # beta=0: out is not read (torch.addmm ignores its input then, NaN included)
        torch.addmm(out, a, b, beta=0.0, alpha=alpha, out=out)


def _fall_back(exc: Exception, plan: Plan, args: tuple, precision: str) -> None:
    """A selected config triton cannot compile is reported (never selected again for this problem,
    which drops the plans) and the next selection runs; other errors propagate."""
    config = plan.config
    for _ in range(_MAX_COMPILE_FALLBACKS):
        if not is_out_of_resources(exc):
            raise exc
        dispatch.report_compile_failure(plan.problem, plan.device, config, exc)
        config = dispatch.select_config(plan.problem, plan.device, *plan.restriction)
        try:
            _run_config(*args, config, plan.device.sm_count, precision)
            return
        except Exception as again:
            exc = again
    p = plan.problem
    raise RuntimeError(f"tritonblas: {_MAX_COMPILE_FALLBACKS + 1} selected configs in a row could not be "
                       f"compiled for {p.m}x{p.n}x{p.k} {p.dtype} on {plan.device.name}; pass config= "
                       "explicitly") from exc


# --- the core op --------------------------------------------------------------------------------------

@torch.library.custom_op("tritonblas::gemm", mutates_args=())
def gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
         family: int, config: list[int]) -> torch.Tensor:
    """alpha * a @ b + beta * bias for checked 2-D operands: the node autograd and torch.compile see."""
    return _gemm(a, b, bias, beta, alpha, *_RESTRICTION[family], _config_from_list(config))


def _gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
          enable_streamk: bool | None = None, backend: str | None = None,
          config: GemmConfig | None = None) -> torch.Tensor:
    """The core op's body: lookup-or-prepare, then launch, for 2-D operands its callers checked (the
    custom op's, and transparent mode's aten::mm / addmm kernels); never through the custom op."""
    signature = _signature("gemm" if beta != 0.0 else "gemm0", enable_streamk, backend, config, a, b, bias)
    plan = _plans.get(signature) if signature is not None else None
    if plan is None or not _still_valid(plan, a, b, bias, None):
        plan = _prepare(signature, "gemm", a, b, bias, beta, None, enable_streamk, config, backend)
    return _launch(plan, a, b, bias, None, alpha, beta)


@gemm.register_fake
def _(a, b, bias, beta, alpha, family, config):
    return a.new_empty((a.shape[0], b.shape[1]))


def _setup_context(ctx, inputs, output):
    a, b, bias, beta, alpha, family, config = inputs
    ctx.save_for_backward(a, b)
    ctx.bias_shape = None if bias is None else bias.shape
    ctx.beta, ctx.alpha, ctx.family = beta, alpha, family


def _backward(ctx, grad):
    a, b = ctx.saved_tensors
    grad_a = grad_b = grad_bias = None
    if ctx.needs_input_grad[0]:
        grad_a = gemm(grad, b.t(), None, 0.0, ctx.alpha, ctx.family, [])
    if ctx.needs_input_grad[1]:
        grad_b = gemm(a.t(), grad, None, 0.0, ctx.alpha, ctx.family, [])
    if ctx.bias_shape is not None and ctx.needs_input_grad[2]:
        grad_bias = (grad.float().sum_to_size(ctx.bias_shape) * ctx.beta).to(grad.dtype)
    return grad_a, grad_b, grad_bias, None, None, None, None


gemm.register_autograd(_backward, setup_context=_setup_context)


# --- the public ops -----------------------------------------------------------------------------------
# Host cost of a repeated call, every launch stubbed (thread CPU time, 2-core CPU box, 64^3 fp16,
# TRITON_INTERPRET=1 python tests/ops_overhead.py --baseline <the tree before plans>): matmul(out=)
# 3.26 -> 3.20 us, matmul 3.52 -> 3.45, addmm 5.34 -> 5.28, linear 6.15 -> 6.09, linear of a 3-D x 8.92
# -> 8.85, linear needing autograd (its plan is stored now) 54.8 -> 48.0.

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
        plan = _prepare(signature, "matmul", a, b, None, 1.0, out, enable_streamk, config, backend)
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
        plan = _prepare(signature, "addmm", a, b, input, float(beta), out, enable_streamk, config, backend)
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
        plan = _prepare(signature, "linear", x2, weight.t(), bias, 1.0, None, enable_streamk, config, backend,
                        out_shape)
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
