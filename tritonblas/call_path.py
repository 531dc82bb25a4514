"""The call path below the public ops: a call's plan (what its checks and the selection derived),
stored by the call's signature, and its launch.

Every op (ops.matmul / addmm / linear, the custom op's body `gemm_body`, transparent mode's aten
kernels) does lookup-or-prepare, then launch:

    sig = signature(op, options, tensors)          # options + each tensor's type, layout, shape, ...
    plan = plans.get(sig)                           # a Plan an earlier call with these facts made,
    if plan is None or not still_valid(plan, ...):  #   if the facts a signature leaves out allow it
        <the op's argument checks>                  # raise naming the argument; nothing written
        plan = prepare(sig, ...)                    # the shared checks, the dispatch key (Problem),
                                                    #   device facts, the selected config; stored
    return run_plan(plan, tensors, alpha, beta)     # (ops sends a plan through_op to core_op.gemm)

A Plan is frozen, holds no tensor and is a function of the signature and of dispatch's selections
(dropped with them: dispatch.on_clear, and never stored across a drop: dispatch.cache_if_current).
The per-call facts a signature leaves out are out's memory overlap with the inputs (data pointers) and
TRITON_INTERPRET for CPU tensors, both checked on every hit (`still_valid`); grad mode with the
requires_grad flags is in it (whether the call needs autograd), and torch.compile gets none.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from . import dispatch, record
from .config import INTERPRETER_DEVICE, DeviceInfo, GemmConfig, Problem
from .device import interpreter_enabled, tensor_device_info
from .launch import is_out_of_resources, launch_gemm, prefetch_compile_key
from .validate import (
    TORCH_DTYPES,
    check_out,
    span_bytes,
)

# A dispatched config that triton cannot compile (out of shared memory) is reported and the next one
# selected, this many times at most (tests/test_dispatch_fallback.py).
MAX_COMPILE_FALLBACKS = 8
_BIAS_KINDS = {(False, False): "scalar", (False, True): "row", (True, False): "column", (True, True): "full"}
# What torch.backends.cuda.matmul.allow_tf32 returns, without its module __getattr__: 0.65 -> 0.05 us.
_allow_tf32 = torch._C._get_cublas_allow_tf32
_is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled


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


plans: dict[tuple, Plan] = {}  # by signature
PLANS_CAP = 4096
dispatch.on_clear.append(plans.clear)  # a plan must not outlive the selection it holds


def signature(op: str, enable_streamk: object, backend: object, config: object, a: object, b: object,
               bias: object = None, out: object = None) -> tuple | None:
    """What a plan is stored under: the op (marked when autograd needs the custom op), its options
    (config= included: a frozen GemmConfig, checked against the problem once like the rest) and each
    tensor's (type, layout, shape, strides, dtype, device); None where no plan may be stored (then the call
    is planned every time): an option of the wrong type, out= with autograd (refused), torch.compile.
    Spelled out flat rather than a helper per tensor over map(): 1.6 -> 1.2 us for three tensors (~50 ns
    an attribute read). A config= call was planned every time until 2026-12-01: 12.1 us of host time a
    call on the CPU box against 3.3 through dispatch (launch stubbed, 64^3 fp16), 27-41 us against 15-22 on
    the H200's host (scripts/dispatch_overhead.py); its config costs a hash now (0.34 us)."""
    if not (config is None or type(config) is GemmConfig) or \
            not (enable_streamk is None or type(enable_streamk) is bool) or \
            not (backend is None or backend == "triton" or backend == "torch") or _is_compiling():
        return None
    try:
        if _grad_enabled() and (a.requires_grad or b.requires_grad or (
                bias is not None and bias.requires_grad) or (out is not None and out.requires_grad)):
            if out is not None:
                return None  # out= refuses autograd: the checks raise
            op = (op, "grad")  # through the custom op, for autograd
        # Layout is needed: a sparse COO tensor has a shape and strides (all 0) like an expanded view.
        return (op, enable_streamk, backend, config,
                type(a), a.layout, a.shape, a.stride(), a.dtype, a.device,
                type(b), b.layout, b.shape, b.stride(), b.dtype, b.device,
                None if bias is None else (type(bias), bias.layout, bias.shape, bias.stride(), bias.dtype,
                                           bias.device),
                None if out is None else (type(out), out.layout, out.shape, out.stride(), out.dtype,
                                          out.device))
    except Exception:  # not a tensor, or one without sizes/strides: the checks name it
        return None


def still_valid(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
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


def prepare(signature: tuple | None, op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
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
            dispatch.cache_if_current(dispatch.generation(), plans, signature, plan, PLANS_CAP)
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
        dispatch.cache_if_current(read_at, plans, signature, plan, PLANS_CAP)
    return plan


# --- the launch of a plan ------------------------------------------------------------------------------

def run_plan(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
             out: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """Run a plan on this call's tensors: out (allocated when None) = alpha * a @ b + beta * bias."""
    # (a plan through the custom op never gets here: ops._launch sends it to core_op.gemm)
    if out is None:
        # new_empty with int sizes: 0.85 us, torch.empty((m, n), dtype=, device=) 1.8 us (keyword parsing).
        out = a.new_empty(plan.m, plan.n)
    config = plan.config
    if config is None:
        return out
    if config.backend == "torch":  # _run_config inlined: one frame less on the hot path (~0.1 us)
        # torch.addmm broadcasts the bias itself: no 2-D view to build (1.5 us a call on the CPU box)
        _vendor_gemm(a, b, out, None if plan.problem.bias == "none" else bias, alpha, beta)
        return out
    # The bias kind is "none" for addmm with beta == 0 too: the input is ignored.
    bias2d = None if plan.problem.bias == "none" else torch.broadcast_to(bias, (plan.m, plan.n))
    precision = "tf32" if not plan.fp32 or _allow_tf32() else "ieee"
    try:  # free when nothing is raised (zero-cost exceptions): the hot path pays nothing for it
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


def _vendor_gemm(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None,
                 alpha: float, beta: float) -> None:
    """torch.mm / torch.addmm with the kernels' contract: out = alpha * (a @ b) + beta * bias in a's
    dtype, bias anything torch.addmm broadcasts (None: no bias term, as with beta == 0; K = 0 gives
    beta * bias). torch honours allow_tf32 for fp32 as the kernels' precision does."""
    if bias is not None:
        if bias.dim() == 2 and bias.stride(1) == 1 and (bias.shape[0] == 1 or bias.stride(0) == 0):
            # A row bias goes in as the (N,) vector it is: cuBLASLt then fuses it into the GEMM's
            # epilogue, where a 2-D one is first copied into out (512x6144x4096 bf16, nt, row bias:
            # 48.0 us vs F.linear's 39.9 us on the H200, 2026-11-30; 1x6144x4096, whose broadcast view
            # has stride (N, 1): a copy and a non-bias kernel, 58.7 vs 24.1 us, scripts/vendor_probe.py).
            bias = bias[0]
        if alpha == 1.0 and beta == 1.0:  # keyword parsing costs 0.6 us
            torch.addmm(bias, a, b, out=out)
        else:
            torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)
    elif alpha == 1.0:
        torch.mm(a, b, out=out)
    else:  # beta=0: out is not read (torch.addmm ignores its input then, NaN included)
        torch.addmm(out, a, b, beta=0.0, alpha=alpha, out=out)


def _fall_back(exc: Exception, plan: Plan, args: tuple, precision: str) -> None:
    """A selected config triton cannot compile is reported (never selected again for this problem,
    which drops the plans) and the next selection runs; other errors propagate."""
    config = plan.config
    for _ in range(MAX_COMPILE_FALLBACKS):
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
    raise RuntimeError(f"tritonblas: {MAX_COMPILE_FALLBACKS + 1} selected configs in a row could not be "
                       f"compiled for {p.m}x{p.n}x{p.k} {p.dtype} on {plan.device.name}; pass config= "
                       "explicitly") from exc


# --- the core op's body ---------------------------------------------------------------------------

def gemm_body(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
          enable_streamk: bool | None = None, backend: str | None = None,
          config: GemmConfig | None = None) -> torch.Tensor:
    """The core op's body: lookup-or-prepare, then launch, for 2-D operands its callers checked (the
    custom op's (core_op.gemm), and transparent mode's aten::mm / addmm kernels); never through the
    custom op."""
    sig = signature("gemm" if beta != 0.0 else "gemm0", enable_streamk, backend, config, a, b, bias)
    plan = plans.get(sig) if sig is not None else None
    if plan is None or not still_valid(plan, a, b, bias, None):
        plan = prepare(sig, "gemm", a, b, bias, beta, None, enable_streamk, config, backend)
    return run_plan(plan, a, b, bias, None, alpha, beta)
