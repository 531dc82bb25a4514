"""The call path below the public ops: a call's plan (what its checks, the selection and the launch's
preparation derived), stored by the call's signature in the one plan cache; its launch is call.run's.

Every op (ops.matmul / addmm / linear, the custom op's body `gemm_body`, transparent mode's aten
kernels) does lookup-or-prepare, then run:

    key = signature(op, options, tensors)            # options + each tensor's type, layout, shape, ...
    plan = lookup(key, tensors) or <the op's checks, then prepare(key, ...)>
    return run.run(plan, tensors, alpha, beta)       # (ops sends grad / compile plans elsewhere)

A hit is one key build, one dict lookup and the launch prepared with the plan (launch.prepared.prepare_launch:
kernel, grid, integer arguments, constexprs; the op's own tensors give the pointers, so a linear passes
its weight and bias as they are, without the transposed and broadcast views a GEMM describes them by).
Plans live in a `caches.new()` dict: dropped with dispatch's selections (caches.invalidate), never
stored across a drop (caches.store). The per-call facts a signature leaves out are checked on every hit
(`lookup`): out's memory overlap with the inputs, TRITON_INTERPRET for plans of CPU tensors, whether
the plan's problem went into the file being recorded now (record.generation), and on the run the
pointers' 16-byte alignment and the tf32 flag the prepared launch was made for.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch

from .. import caches, native, record
from ..arch import INTERPRETER_DEVICE, DeviceInfo
from ..config import GemmConfig
from ..device import interpreter_enabled, tensor_device_info
from ..launch.compile_key import prefetch as prefetch_compile_key
from ..launch.direct import launches_directly
from ..launch.native import config_has_record
from ..launch.prepared import config_launches_directly, prepare_launch
from ..problem import Problem
from ..selection import dispatch
from ..validate import TORCH_DTYPES, check_out, span_bytes

# Host time of one call of ours whose launch is not a prepared direct one (launch_gemm's scratch: Stream-K,
# padded copies) more than torch's own op's: a selected kernel of such a launch that runs shorter than
# this leaves eager calls to torch (see `eager_vendor`). H200, 4x2048x2048 bf16 linear: a launch through
# CompiledKernel.run with device-side descriptors 31.0 us against F.linear's 22.0, a prepared direct
# launch 19.2 (docs/notes/kernel-levers.md, "Host cost of a launch").
KERNEL_HOST_US = 10.0
# A routed call (transparent mode) whose kernel runs pays the trip into Python; torch's own call (which
# the C++ kernels run without Python) does not. What that trip costs is measured inside a model's step,
# not in a loop of one call, where Python's path runs hot: H200, 4x2048x2048 bf16, F.linear 20.9 us a
# call and routed to a kernel 26.7 in a loop, but in BERT's training step at 4x256 (no sync in it) six
# routed kernel calls a step added 0.36 ms of host (60 us a call), and GPT-2's eager decode at batch 1,
# one routed call a token (its logits GEMM, 11 us faster than torch's), ran 0.938x-0.942x where torch
# against itself read 1.008x (80 us a token); the Python side alone timed 55-73 us a call in those steps
# against 19-26 in a loop (H200, 2026-12-02, commit 185762a). A launch that is not a prepared
# direct one (Stream-K: launch_gemm plans each call) took ~100 us more there (208 against 73 us).
TORCH_CALL_HOST_US = 21.0
ROUTED_EXTRA_US = 65.0
ROUTED_NOT_DIRECT_US = 100.0
# A routed call whose launch has a record (launch/native.py) is launched by the C++ kernel after its first
# call, with no Python: cuLaunchKernel in place of torch's cuBLAS call. What that costs above torch's own
# op (H200, in a loop and in a model's step): docs/notes/kernel-levers.md, "Routed launches from C++". A
# recorded launch with scratch (pad copies, Stream-K: several launches, kept buffers) is charged the trip into
# Python still: it cost torch's op +2 us in a loop, and inside BERT's host-bound step at 4x256 letting such
# picks run (their margins 145-150 us) read 0.97x-0.99x against 1.02x-1.04x leaving them to torch, a
# difference within the spread of trees that make the same calls (kernel-levers, "Routed launches from C++";
# commit 03cda6d, 2026-12-03): no gain shown there, so the charge stays. Where they win by more, they run,
# launched from C++.
ROUTED_NATIVE_EXTRA_US = 1.0
# An explicit call that runs torch's op pays the lookup on top of it; one that launches a prepared kernel
# directly costs less than torch's op alone. H200 host, loops of back-to-back calls (`tritonblas bench`'s
# loop ratio, classes/small.yaml, explicit calls with out=): torch's picks 15.4 us a call against
# torch.mm's own 11.2, kernel picks 10.5. Where torch won the tuning run by less than that difference
# and the run's fastest kernel is shorter than such a call's host time (the call is host-bound, its wall
# time the host's), explicit eager calls run that kernel; under graph capture torch's op (eager_kernel).
# Without the C++ front only: through it a torch pick's explicit call costs torch's op (eager_kernel).
EXPLICIT_TORCH_HOST_US = 15.0
EXPLICIT_TORCH_EXTRA_US = 4.9
_BIAS_KINDS = {(False, False): "scalar", (False, True): "row", (True, False): "column", (True, True): "full"}
# What torch.backends.cuda.matmul.allow_tf32 returns, without its module __getattr__: 0.65 -> 0.05 us.
_allow_tf32 = torch._C._get_cublas_allow_tf32
is_compiling = torch.compiler.is_compiling
_grad_enabled = torch.is_grad_enabled
_functorch_active = torch._C._are_functorch_transforms_active


# --- the plan -----------------------------------------------------------------------------------------

@dataclass(slots=True, eq=False)
class Plan:
    """What the checks of one call derived, for its launch and for every later call of its signature."""

    m: int
    n: int
    k: int
    problem: Problem | None  # the dispatch key; None under torch.compile (the custom op's body plans)
    device: DeviceInfo | None
    config: GemmConfig | None  # what runs: selected, or the caller's; None: an empty output, no launch
    restriction: tuple  # (enable_streamk, backend) of the call: the next selection on a fall-back
    user_config: bool  # config= given: run exactly that, never replaced after a compile failure
    fp32: bool  # precision then depends on the global tf32 flag, read per call
    spans: tuple[int, int, int, int]  # span_bytes of out, a, b, bias (out= calls only)
    out_shape: tuple | None = None  # linear of an N-D x: the result's shape
    through_op: bool = False  # torch.compile: the custom op `gemm`
    grad: bool = False  # eager autograd: ops' autograd.Function, whose forward runs this plan
    linear: bool = False  # the op's tensors are (x, weight): the GEMM's operands x (2-D) and weight.t()
    has_bias: bool = False  # a bias term (addmm with beta == 0 has none: its input is ignored)
    launch: object = None  # launch.prepared.prepare_launch's, for tensors with the planned call's pointers
    precision: str = "tf32"  # the tf32 choice `launch` was made with (fp32 only: read per call)
    eager_vendor: bool = False  # the kernels win only where no host time is paid: graph capture
    capture_vendor: bool = False  # torch's pick, whose kernel runs eager explicit calls (eager_kernel)
    launched: bool = False  # its kernel ran once (compiled and loaded: a graph capture may launch it)
    recorded: int = -1  # record.generation when the problem was last noted (see lookup)
    op_args: tuple = ()  # grad plans: the custom op's (family, config list), for the shared backward


@dataclass(slots=True, eq=False)
class ScaledPlan(Plan):
    """A scaled_mm call's plan (call.scaled): what Plan holds, and the output dtype and fp8 fast
    accumulation its launch and its vendor run take."""

    out_dtype: torch.dtype | None = None
    fast_acc: bool = False
    torch_blockwise: bool = False  # block-wise scales that torch's own op takes (config.torch_blockwise_fits)
    # eager_vendor for transparent mode's calls of the plan (eager_torch_reason's `routed`), where its
    # kernel launches from Python and where from a launch record (the C++ kernels on, contiguous scales)
    routed_eager_vendor: tuple[bool, bool] = (False, False)


plans: dict[tuple, Plan] = caches.new()  # by signature


def signature(op: str, enable_streamk: object, backend: object, config: object, a: object, b: object,
              bias: object = None, out: object = None, autograd: bool = True) -> tuple | None:
    """What a plan is stored under: the op (marked when the call needs autograd, unless `autograd` is
    False: below autograd, as the custom op's body and transparent mode's kernels run), its options
    (config= included: a frozen GemmConfig) and each tensor's (type, layout, shape, strides, dtype,
    device); None where no plan may be stored (then the call is planned every time): an option of the
    wrong type, out= with autograd (refused), torch.compile. Spelled out flat rather than a helper per
    tensor: 1.6 -> 1.2 us for three tensors (~50 ns an attribute read)."""
    if not (config is None or type(config) is GemmConfig) or \
            not (enable_streamk is None or type(enable_streamk) is bool) or \
            not (backend is None or backend == "triton" or backend == "torch") or is_compiling():
        return None
    try:
        if autograd and _grad_enabled() and (a.requires_grad or b.requires_grad or (
                bias is not None and bias.requires_grad) or (out is not None and out.requires_grad)):
            if out is not None:
                return None  # out= refuses autograd: the checks raise
            op = (op, "grad")
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


def lookup(key: tuple | None, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
           out: torch.Tensor | None) -> Plan | None:
    """The stored plan of `key` if the per-call facts it leaves out allow it (else None: the caller
    checks and prepares): the interpreter still chosen for CPU tensors, no byte of out in the range
    of an input. A problem not yet noted into the file recorded now is noted (once per plan and
    recording: a generation stamp)."""
    plan = plans.get(key) if key is not None else None
    if plan is None or (plan.device is INTERPRETER_DEVICE and not interpreter_enabled()) or \
            (out is not None and _overlaps(plan, a, b, bias, out)):
        return None
    if plan.recorded != record.generation:
        note(plan)
    return plan


def _overlaps(plan: Plan, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
              out: torch.Tensor) -> bool:
    out_span, a_span, b_span, bias_span = plan.spans
    lo = out.data_ptr()
    hi = lo + out_span
    p = a.data_ptr()
    if p < hi and lo < p + a_span:
        return True
    p = b.data_ptr()
    if p < hi and lo < p + b_span:
        return True
    return bias is not None and (p := bias.data_ptr()) < hi and lo < p + bias_span


def note(plan: Plan) -> None:
    """Note the plan's problem into the file recorded now; stamped with the generation read first, so
    that a recording started meanwhile gets it on the next hit."""
    seen = record.generation
    if plan.problem is not None:
        record.note(plan.problem)
    plan.recorded = seen


def layout_of(a: torch.Tensor, b: torch.Tensor) -> str:
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


def prepare(key: tuple | None, op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
            beta: float, out: torch.Tensor | None, enable_streamk: bool | None, config: GemmConfig | None,
            backend: str | None, out_shape: tuple | None = None, linear: bool = False,
            finish: Callable[[Plan], None] | None = None, routed: bool = False) -> Plan:
    """The checks every op shares (after its own argument checks: a and b are the GEMM's 2-D operands,
    bias addmm's input or linear's bias), and the plan they derive, completed by `finish` (the op's
    own facts) and stored under `key` unless the selections were dropped meanwhile; `routed`: a call of
    transparent mode (its host cost differs: eager_vendor). Raises before anything is written."""
    m, k = a.shape
    n = b.shape[1]
    restriction = (enable_streamk, backend)
    compiling = is_compiling()
    if out is not None:
        check_out(out, m, n, a, b, bias, op, compiling)
    grad = op != "gemm" and out is None and _grad_enabled() and (
        a.requires_grad or b.requires_grad or (bias is not None and bias.requires_grad))
    if op != "gemm" and (compiling or _functorch_active()):
        # torch.compile: the custom op's body plans (the compiler sees one opaque node); torch.func's
        # transforms (wrapped tensors, no storage for the kernels): torch's own op runs (ops._launch).
        # Nothing stored (compile has no key; a transform's tensors are not the key's).
        return Plan(m, n, k, None, None, config, restriction, config is not None, False, (0, 0, 0, 0),
                    out_shape, through_op=True, linear=linear)
    read_at = caches.generation()  # before anything is selected
    device = tensor_device_info(a)  # first: it raises for tensors no kernel can take, empty ones too
    if a.is_cuda:
        prefetch_compile_key()  # the first compile-cache lookup's hash, in a thread while we select
    has_bias = bias is not None and beta != 0.0  # as torch.addmm: beta == 0 ignores the input, NaN too
    problem = Problem(m, n, k, TORCH_DTYPES[a.dtype], layout_of(a, b), _bias_kind(bias if has_bias else None,
                                                                                 m, n))
    user_config = config is not None
    selection = None
    if user_config:
        dispatch.check_user_config(config, problem, device)
    elif m and n:  # an empty output launches nothing, and the heuristic has no tiles to rank
        selection = dispatch.select(m, n, k, problem.dtype, layout=problem.layout, bias=problem.bias,
                                    enable_streamk=enable_streamk, device=device, backend=backend)
        config = selection.config
    spans = (0, 0, 0, 0) if out is None else \
        (span_bytes(out), span_bytes(a), span_bytes(b), 0 if bias is None else span_bytes(bias))
    plan = Plan(m, n, k, problem, device, config, restriction, user_config, a.dtype is torch.float32, spans,
                out_shape, grad=grad, linear=linear, has_bias=has_bias)
    kernel = None if selection is None or routed or grad or restriction != (None, None) else \
        eager_kernel(selection)
    if kernel is not None:
        plan.config, plan.capture_vendor = kernel.config, True
    if plan.config is not None and plan.config.backend != "torch":
        plan.precision = precision_of(plan)
        c = out if out is not None else torch.empty((m, n), dtype=a.dtype, device="meta")  # strides only
        plan.launch = prepare_launch(a, b, c, bias_view(plan, bias), plan.config, device.sm_count,
                                     plan.precision)
    if finish is not None:
        finish(plan)  # before it is stored: other threads see it whole
    if plan.capture_vendor and not launches_directly(plan.launch):  # (finish may drop the prepared launch)
        plan.config, plan.launch, plan.capture_vendor = selection.config, None, False
    if selection is not None and restriction == (None, None) and not plan.capture_vendor:
        recorded = routed and a.is_cuda and not plan.fp32 and native.routing() and \
            config_has_record(plan.config)
        plan.eager_vendor = eager_vendor(selection, plan.launch, routed, recorded)
    note(plan)  # TRITONBLAS_RECORD / enable(record=...): a new problem goes to the file
    if key is not None:
        caches.store(read_at, plans, key, plan)
    return plan


def eager_vendor(selection: dispatch.Selection, launch: object, routed: bool = False,
                 recorded: bool = False) -> bool:
    """Whether a kernel selection must leave eager calls to torch (eager_torch_reason), its launch
    prepared as `launch` (launch.direct.launches_directly: no dearer on the host than torch's op)."""
    return eager_torch_reason(selection, launches_directly(launch), routed, recorded) is not None


def eager_torch_reason(selection: dispatch.Selection, direct: bool, routed: bool = False,
                       recorded: bool = False) -> str | None:
    """Why eager calls of a kernel selection run torch's op instead (None: they run the kernel), on a GPU,
    for a launch that is `direct` (a prepared one, no dearer on the host than torch's op) or not
    (Stream-K, padded copies), `routed` (transparent mode) or explicit. Under graph capture no host time
    is paid: the kernel runs there.
      - explicit: a launch that is not direct costs KERNEL_HOST_US above torch's op; a kernel shorter
        than that, or beating torch's op by less, gains nothing (the call is host-bound, or the host's
        time is the whole difference where the host is the bottleneck);
      - routed: the trip into Python (ROUTED_EXTRA_US, and ROUTED_NOT_DIRECT_US more for a launch that
        is not direct) as it costs inside a model's step; ROUTED_NATIVE_EXTRA_US for a direct launch the
        C++ kernels make from a record (`recorded`: launch/native.py, transparent mode's C++ kernels on).
        Where the host is the bottleneck (eager decode, a small training step) that time is the whole
        difference, and where the GPU is, the kernel's win shows: the kernel runs where it beats torch's
        op by more than that; where torch was not timed, where it is longer than the call's host time."""
    if selection.device is INTERPRETER_DEVICE or selection.backend == "torch":
        return None
    kernel_us, torch_us = selection.time_ms * 1000, selection.torch_ms * 1000
    if routed:
        return _routed_torch_reason(kernel_us, torch_us, direct, recorded)
    host_us = 0.0 if direct else KERNEL_HOST_US
    if 0.0 < kernel_us < host_us:
        return f"its kernel ({kernel_us:.1f} us) is shorter than its launch's host time above torch's " \
               f"({host_us:.0f} us)"
    margin_us = torch_us - kernel_us
    if torch_us > 0.0 and margin_us < host_us:
        return (f"it beats torch's op by {margin_us:.1f} us, less than the {host_us:.0f} us of host time "
                "it costs above torch's")
    return None


def _routed_torch_reason(kernel_us: float, torch_us: float, direct: bool, recorded: bool) -> str | None:
    if recorded and direct:  # (a recorded launch with scratch: see ROUTED_NATIVE_EXTRA_US)
        extra_us = ROUTED_NATIVE_EXTRA_US
    else:
        extra_us = ROUTED_EXTRA_US + (0.0 if direct else ROUTED_NOT_DIRECT_US)
    if torch_us <= 0.0:
        host_us = TORCH_CALL_HOST_US + extra_us
        if 0.0 < kernel_us < host_us:
            return (f"its kernel ({kernel_us:.1f} us) is shorter than a routed call's host time "
                    f"({host_us:.0f} us)")
        return None
    margin_us = torch_us - kernel_us
    if margin_us < extra_us:
        return (f"it beats torch's op by {margin_us:.1f} us, less than the {extra_us:.0f} us of host time "
                "a routed call costs above torch's")
    return None


def eager_kernel(selection: dispatch.Selection) -> dispatch.Selection | None:
    """The tuning run's fastest kernel where explicit eager calls run it in place of dispatch's torch pick
    (eager_kernel_reason), else None. Only without the C++ front (tritonblas.native, looked for here once
    a process): through it an explicit call of a torch pick costs torch's own op (H200 host, 4x2048x2048
    bf16: +0.35 us, against +4.2 through the lookup), and a faster launch than that is all a direct
    kernel saved."""
    if selection.backend != "torch" or not selection.measured or selection.device is INTERPRETER_DEVICE or \
            native.front() is not None:
        return None
    try:
        kernel = dispatch.select_problem(selection.problem, device=selection.device, backend="triton")
    except (ValueError, RuntimeError):
        return None
    if not kernel.measured or kernel.source != selection.source:
        return None
    return kernel if eager_kernel_reason(selection, kernel, config_launches_directly(kernel.config)) else None


def eager_kernel_reason(selection: dispatch.Selection, kernel: dispatch.Selection,
                        direct: bool) -> str | None:
    """Why explicit eager calls of a torch pick run `kernel` (its tuning run's fastest), launched directly
    (`direct`), instead of torch's op (None: torch's op): a kernel shorter than such a call's host time
    (the call is host-bound) that loses to torch's by less than the host time its direct launch saves."""
    kernel_us, torch_us = kernel.time_ms * 1000, selection.time_ms * 1000
    if not direct or kernel_us <= 0.0 or torch_us <= 0.0:
        return None
    if kernel_us <= EXPLICIT_TORCH_HOST_US and kernel_us - torch_us < EXPLICIT_TORCH_EXTRA_US:
        return (f"its kernel ({kernel_us:.1f} us, torch's op {torch_us:.1f}) is shorter than an explicit "
                f"call's host time ({EXPLICIT_TORCH_HOST_US:.0f} us), and its direct launch costs "
                f"{EXPLICIT_TORCH_EXTRA_US:.1f} us less of it than torch's op")
    return None


def precision_of(plan: Plan) -> str:
    return "tf32" if not plan.fp32 or _allow_tf32() else "ieee"


def bias_view(plan: Plan, bias: torch.Tensor | None) -> torch.Tensor | None:
    """The bias as the kernels read it: a 2-D view of the output's shape (None: no bias term)."""
    return torch.broadcast_to(bias, (plan.m, plan.n)) if plan.has_bias else None
