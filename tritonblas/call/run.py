"""The run of a call's plan (tritonblas.call.path): its prepared launch where the call's tensors allow
it, else launch_gemm or the vendor GEMM on the GEMM's 2-D views; a config triton cannot compile falls
back to the next selection (`_fall_back`). Also the custom op's body (`gemm_body`) and transparent mode's
question whether torch runs a plan (`torch_runs`)."""

from __future__ import annotations

from collections.abc import Callable

import torch

from ..config import GemmConfig
from ..launch.blockscaled import (
    gluon_twin,
    launch_blockscaled,
    launch_scaled_gluon,
    store_fp32,
    torch_blockwise,
    vendor_blockscaled,
)
from ..launch.gemm import is_out_of_resources, launch_gemm
from ..launch.native import launch_record
from ..launch.prepared import launch_prepared
from ..selection import dispatch
from .path import Plan, ScaledPlan, bias_view, lookup, precision_of, prepare, signature

# A dispatched config that triton cannot compile (out of shared memory) is reported and the next one
# selected, this many times at most (tests/test_dispatch_fallback.py).
MAX_COMPILE_FALLBACKS = 8
# The seam tests replace to watch launches: while it is replaced, every launch goes through it.
_LAUNCH_GEMM = launch_gemm


def capturing() -> bool:
    """Whether the current CUDA stream is being captured into a graph (never without CUDA)."""
    return torch.cuda.is_initialized() and torch.cuda.is_current_stream_capturing()


# --- the launch of a plan ------------------------------------------------------------------------------

def run(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None,
        alpha: float, beta: float) -> torch.Tensor:
    """Run a plan on this call's tensors (a linear's x and weight as they are): out (allocated when None)
    = alpha * a @ b + beta * bias. A plan through the custom op or autograd never gets here (ops)."""
    if plan.launch is not None and _ready(plan):
        if out is None:
            # new_empty with int sizes: 0.85 us, torch.empty((m, n), dtype=, device=) 1.8 us.
            out = a.new_empty(plan.m, plan.n) if plan.out_shape is None else a.new_empty(plan.out_shape)
        try:  # free when nothing is raised (zero-cost exceptions)
            if launch_prepared(plan.launch, a, b, out, bias if plan.has_bias else None, alpha, beta):
                return out
        except Exception as exc:
            _prepared_failed(exc, plan, a, b, bias, out, alpha, beta)
            return out
        # a pointer not 16-byte aligned: the views' launch, into the output already made
        run_views(plan, *gemm_operands(plan, a, b), bias, out.view(plan.m, plan.n), alpha, beta)
        return out
    a2, b2 = gemm_operands(plan, a, b)
    y = run_views(plan, a2, b2, bias, out, alpha, beta)
    return y if plan.out_shape is None else y.reshape(plan.out_shape)


def run_gemm(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, alpha: float,
             beta: float) -> torch.Tensor:
    """Run a plan on 2-D operands (a linear's x as (M, K) and its weight as it is): a new (M, N)."""
    out = a.new_empty(plan.m, plan.n)
    if plan.launch is not None and _ready(plan):
        try:
            if launch_prepared(plan.launch, a, b, out, bias if plan.has_bias else None, alpha, beta):
                return out
        except Exception as exc:
            _prepared_failed(exc, plan, a, b, bias, out, alpha, beta)
            return out
    return run_views(plan, a, b.t() if plan.linear else b, bias, out, alpha, beta)


def _ready(plan: Plan) -> bool:
    """Whether the plan's prepared launch may run (launch_prepared then checks the pointers' 16-byte
    alignment): the tf32 flag as planned, eager use not left to torch, and the launch seam not
    replaced (tests watching launch_gemm)."""
    return launch_gemm is _LAUNCH_GEMM and not plan.eager_vendor and \
        not (plan.fp32 and precision_of(plan) != plan.precision)


def native_record(plan: Plan, contiguous_scales: bool = True) -> list[int] | None:
    """The launch record (launch/native.py) of a routed plan whose kernel runs, for transparent mode's C++
    kernels to launch later calls of its key themselves; None where Python must go on deciding per call:
    no prepared launch launched directly yet, fp32 (the tf32 flag is read per call), a kernel for one
    kind of call only (eager_vendor, capture_vendor), the launch seam replaced (tests), a scaled_mm plan
    whose call's scales are not `contiguous_scales` (the kernels read a copy: scale_vector)."""
    scaled = type(plan) is ScaledPlan
    if plan.launch is None or plan.fp32 or plan.capture_vendor or not _ready(plan) or \
            scaled and not contiguous_scales:
        return None
    return launch_record(plan.launch, plan.has_bias, scaled)


def _prepared_failed(exc: Exception, plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                     out: torch.Tensor, alpha: float, beta: float) -> None:
    """A prepared launch raised: as run_views' launch, the next selection where triton could not compile
    the selected config (_fall_back), else the error. a and b as the op has them (a linear's x, 2-D or
    not, and its weight)."""
    if plan.user_config:
        raise exc
    a2, b2 = gemm_operands(plan, a, b)
    args = (a2, b2, out.view(plan.m, plan.n), bias_view(plan, bias), alpha, beta)
    _fall_back(exc, plan, lambda config: _run_config(*args, config, plan.device.sm_count, plan.precision))


def gemm_operands(plan: Plan, a: torch.Tensor, b: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The GEMM's 2-D operands of the op's tensors (a linear's x as (M, K) and weight.t())."""
    if not plan.linear:
        return a, b
    return (a if plan.out_shape is None else a.reshape(plan.m, plan.k)), b.t()


def run_views(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
              out: torch.Tensor | None, alpha: float, beta: float) -> torch.Tensor:
    """Run a plan on the GEMM's 2-D operands through launch_gemm or the vendor GEMM."""
    if out is None:
        out = a.new_empty(plan.m, plan.n)
    config = plan.config
    if config is None:
        return out
    if config.backend == "torch" or eager_torch(plan):
        # torch.addmm broadcasts the bias itself: no 2-D view to build (1.5 us a call on the CPU box)
        _vendor_gemm(a, b, out, bias if plan.has_bias else None, alpha, beta)
        return out
    precision = precision_of(plan)
    bias2d = bias_view(plan, bias)
    try:
        launch_gemm(a, b, out, bias2d, alpha, beta, config, plan.device.sm_count, precision)
        plan.launched = True
    except Exception as exc:
        if plan.user_config:
            raise
        _fall_back(exc, plan, lambda c: _run_config(a, b, out, bias2d, alpha, beta, c, plan.device.sm_count,
                                                    precision))
    return out


def eager_torch(plan: Plan) -> bool:
    """Whether this call of a plan whose kernel wins under graph capture only (eager_vendor) runs torch's
    GEMM: an eager call, but for the first, which runs the kernel so that it is compiled and loaded
    before a capture launches it (a first launch under capture fails, and falls back to torch). Or,
    the other way (capture_vendor: torch's pick, its kernel for eager explicit calls), a captured call."""
    if plan.capture_vendor:
        return capturing()
    return plan.eager_vendor and plan.launched and not capturing()


def routed_eager_torch(plan: ScaledPlan, recorded: bool) -> bool:
    """As eager_torch, for a transparent-mode call of a scaled_mm plan (ScaledPlan.routed_eager_vendor)
    whose later calls launch from a record (`recorded`) or from Python."""
    return plan.routed_eager_vendor[recorded] and plan.launched and not capturing()


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
    beta * bias). torch honours allow_tf32 for fp32 as the kernels' precision does. The out= overloads:
    transparent mode does not intercept them, so an explicit call never comes back through it."""
    if bias is not None:
        if bias.dim() == 2 and bias.stride(1) == 1 and (bias.shape[0] == 1 or bias.stride(0) == 0):
            # A row bias goes in as the (N,) vector it is: cuBLASLt then fuses it into the GEMM's
            # epilogue, where a 2-D one is first copied into out (512x6144x4096 bf16, nt, row bias:
            # 48.0 us vs F.linear's 39.9 us on the H200, 2026-11-30; 1x6144x4096, whose broadcast view
            # has stride (N, 1): a copy and a non-bias kernel, 58.7 vs 24.1 us,
            # 016dd08:scripts/vendor_probe.py).
            bias = bias[0]
        if alpha == 1.0 and beta == 1.0:  # keyword parsing costs 0.6 us
            torch.addmm(bias, a, b, out=out)
        else:
            torch.addmm(bias, a, b, beta=beta, alpha=alpha, out=out)
    elif alpha == 1.0:
        torch.mm(a, b, out=out)
    else:  # beta=0: out is not read (torch.addmm ignores its input then, NaN included)
        torch.addmm(out, a, b, beta=0.0, alpha=alpha, out=out)


def _fall_back(exc: Exception, plan: Plan, run_config: Callable[[GemmConfig], None]) -> None:
    """A selected config triton cannot compile is reported (never selected again for this problem,
    which drops the plans) and the next selection runs (`run_config`: the call's launch of a config,
    a plain GEMM's or scaled_mm's); other errors propagate."""
    config = plan.config
    for _ in range(MAX_COMPILE_FALLBACKS):
        if not is_out_of_resources(exc):
            raise exc
        dispatch.report_compile_failure(plan.problem, plan.device, config, exc)
        config = dispatch.select_config(plan.problem, plan.device, *plan.restriction)
        try:
            run_config(config)
            return
        except Exception as again:
            exc = again
    raise RuntimeError(f"tritonblas: {MAX_COMPILE_FALLBACKS + 1} selected configs in a row could not be "
                       f"compiled for {plan.problem.short()} on {plan.device.name}; pass config= "
                       "explicitly") from exc


# --- the core op's body and transparent mode's kernels --------------------------------------------

def plan_gemm(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float,
              enable_streamk: bool | None = None, backend: str | None = None,
              config: GemmConfig | None = None) -> Plan:
    """Lookup-or-prepare below autograd, for 2-D operands the custom op's callers checked."""
    key = signature("gemm" if beta != 0.0 else "gemm0", enable_streamk, backend, config, a, b, bias, None,
                    False)
    return lookup(key, a, b, bias, None) or prepare(key, "gemm", a, b, bias, beta, None, enable_streamk,
                                                    config, backend)


def torch_runs(plan: Plan) -> bool:
    """Whether torch's own GEMM runs this plan (transparent mode then calls torch's kernel itself):
    dispatch chose torch.mm, the kernels win only under graph capture (eager_torch), or the output is
    empty."""
    config = plan.config
    return config is None or config.backend == "torch" or eager_torch(plan)


def gemm_body(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float, alpha: float,
              enable_streamk: bool | None = None, backend: str | None = None,
              config: GemmConfig | None = None) -> torch.Tensor:
    """The core op's body: plan_gemm, then run; never through the custom op."""
    return run(plan_gemm(a, b, bias, beta, enable_streamk, backend, config), a, b, bias, None, alpha, beta)


# --- scaled_mm (call.scaled) ------------------------------------------------------------------------

def scale_vector(scale: torch.Tensor) -> torch.Tensor:
    """A scale as the kernels read it: contiguous fp32 values (one, or one per row / column), read
    through its pointer alone; the caller's tensor where it is contiguous (no view: ~0.7 us a call)."""
    return scale if scale.is_contiguous() else scale.contiguous()


def run_scaled(plan: ScaledPlan, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
               scale_b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
    """Run a scaled_mm plan: out (allocated when None) = (a * scale_a) @ (b * scale_b) + bias."""
    if plan.config is not None and plan.problem.scales == "block":  # (its own kernel and vendor)
        return run_block(plan, a, b, scale_a, scale_b, bias, out)
    if out is None:
        out = a.new_empty((plan.m, plan.n), dtype=plan.out_dtype)
    config = plan.config
    if config is None:
        return out
    if config.backend == "torch" or eager_torch(plan):  # (the vendor takes the caller's tensors)
        _vendor_scaled(a, b, scale_a, scale_b, bias, out, plan.fast_acc)
        return out
    scales = (scale_vector(scale_a), scale_vector(scale_b))

    def run_config(config: GemmConfig) -> None:  # (a fallback may select the vendor)
        if config.backend == "torch":
            _vendor_scaled(a, b, scale_a, scale_b, bias, out, plan.fast_acc)
            return
        # A gluon config's tensors the Gluon kernel cannot take run its Triton twin.
        if not (config.gluon and launch_scaled_gluon(a, b, *scales, bias, out, config, plan.device.sm_count)):
            bias2d = None if bias is None else torch.broadcast_to(bias, (plan.m, plan.n))
            launch_gemm(a, b, out, bias2d, 1.0, 1.0, gluon_twin(config) if config.gluon else config,
                        plan.device.sm_count, plan.precision, scales, plan.fast_acc)
        plan.launched = True

    try:
        if plan.launch is None or not _ready(plan) or \
                not launch_prepared(plan.launch, a, b, out, bias, 1.0, 1.0, scales):
            run_config(config)
        else:
            plan.launched = True  # (compiled and loaded: routed_eager_torch may leave later calls to torch)
    except Exception as exc:  # as the plain ops: the next selection where triton cannot compile this one
        if plan.user_config:
            raise
        _fall_back(exc, plan, run_config)
    return out


def run_block(plan: ScaledPlan, a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
              scale_b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor | None) -> torch.Tensor:
    """A block-scaled plan's run (launch/blockscaled.py): its kernel into out (allocated where None), or
    torch's side for a torch config, whose own result is returned where the caller gave no out; a
    selected config triton cannot compile falls back to the next selection (as run_scaled's)."""
    torch_takes = plan.torch_blockwise
    if plan.config.backend == "torch" and torch_takes and not (plan.user_config or plan.restriction[1]):
        try:
            y = torch_blockwise(a, b, scale_a, scale_b)
            return y if out is None else out.copy_(y)
        except (RuntimeError, ValueError, NotImplementedError) as exc:
            # Dispatch's pick refused by cuBLASLt (M = 1 on the H200): the kernel from now on.
            dispatch.report_refusal(plan.problem, plan.device, plan.config, "refused the call", exc)
            plan.config = dispatch.select_config(plan.problem, plan.device, *plan.restriction)
    elif plan.config.backend == "torch" and out is None:
        return vendor_blockscaled(a, b, scale_a, scale_b, bias, None, plan.out_dtype, torch_takes)
    if out is None:
        out = a.new_empty((plan.m, plan.n), dtype=plan.out_dtype)

    def run_config(config: GemmConfig) -> None:
        if config.backend == "torch":
            vendor_blockscaled(a, b, scale_a, scale_b, bias, out, plan.out_dtype, torch_takes)
        else:
            launch_blockscaled(a, b, scale_a, scale_b, bias, out, config, plan.device.sm_count)

    try:
        run_config(plan.config)
    except Exception as exc:
        if plan.user_config:
            raise
        _fall_back(exc, plan, run_config)
    return out


def scaled_mm_alone(a: torch.Tensor, out_dtype: torch.dtype, bias: torch.Tensor | None) -> bool:
    """Whether torch._scaled_mm's own result is the vendor's (_vendor_scaled's first case): fp8
    operands, a bf16 or fp16 output, a bias of that dtype or none (cuBLASLt takes those)."""
    return a.dtype != torch.int8 and out_dtype in (torch.bfloat16, torch.float16) and \
        (bias is None or bias.dtype == out_dtype)


def _vendor_scaled(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
                   bias: torch.Tensor | None, out: torch.Tensor, fast_acc: bool) -> None:
    """torch's scaled GEMM with the kernels' contract: torch._scaled_mm for fp8 (its own bias and
    output where cuBLASLt takes them: a bf16 / fp16 output and a bias of that dtype), else its fp32
    result with the bias added in fp32; torch._int_mm for int8, its exact int32 result then scaled and
    biased in fp32. Either way one cast at the end, fp8 outputs saturated (config.vendor_scaled_refusal
    says which problems torch takes at all). Always the out= overload: transparent mode intercepts
    aten::_scaled_mm, not aten::_scaled_mm.out, so the vendor never comes back through it (as
    _vendor_gemm's torch.mm(out=))."""
    scale_a = scale_a if scale_a.is_contiguous() else scale_a.contiguous()
    scale_b = scale_b if scale_b.is_contiguous() else scale_b.contiguous()
    if a.dtype == torch.int8:
        y = torch._int_mm(a, b).float() * scale_a * scale_b
    elif scaled_mm_alone(a, out.dtype, bias):
        # written in place where out is contiguous: no copy in what the tuner times as the vendor's
        dst = out if out.is_contiguous() else torch.empty_like(out, memory_format=torch.contiguous_format)
        torch._scaled_mm(a, b, scale_a, scale_b, bias=bias, out_dtype=out.dtype, use_fast_accum=fast_acc,
                         out=dst)
        if dst is not out:
            out.copy_(dst)
        return
    else:
        y = out.new_empty(out.shape, dtype=torch.float32)
        torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=torch.float32, use_fast_accum=fast_acc, out=y)
    store_fp32(y, bias, out)
