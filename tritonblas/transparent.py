"""Transparent mode: torch's own GEMMs through dispatch, without changing model code.

    tritonblas.enable()                    # until tritonblas.disable()
    with tritonblas.enable(record="shapes.yaml"):
        model(x)                           # nn.Linear, F.linear, torch.mm, torch.addmm, a @ b
    TRITONBLAS_ENABLED=1 python train.py   # enabled when tritonblas is imported

While enabled, aten::mm, aten::addmm, aten::_scaled_mm and aten::_grouped_mm on CUDA tensors (and, under
TRITON_INTERPRET=1, CPU tensors) of float16, bfloat16 or float32 (_scaled_mm: float8 with scales of one
value or one per row/column, as tritonblas.scaled_mm takes them; _grouped_mm: as tritonblas.grouped_mm
takes it) run through dispatch: the tuned config, the shipped one, a neighbour's or the heuristic's, or
torch's op where that is what dispatch selects.
linear, nn.Linear and `@` on 2-D tensors reach them because torch decomposes linear and matmul into
addmm / mm (an N-D input of linear or `@` with a 2-D right operand folds into one 2-D GEMM, as torch
does). Everything else falls through to torch unchanged: other dtypes, mixed dtypes or devices,
bmm/baddbmm (batched), CPU tensors without the interpreter.

Mechanism: kernels for aten::mm, aten::addmm, aten::_scaled_mm and aten::_grouped_mm registered at the
CUDA dispatch key (CPU too under the interpreter), dropped again by `disable()`, in C++
(tritonblas/native: built with the host's C++ compiler on the first enable(), then cached): a call whose
key was answered "torch" before (dispatch's torch pick, or a call not routed) runs torch's own kernel
with no Python at all; every other call asks `_native_answers` here, which plans and runs it. Where
nothing builds (no compiler), Python kernels (`_kernels`, `_scaled_kernel`, grouped.route's) do the same
at 3-4 us more per call; so does `enable(native=False)`. The answers are dropped (native.forget) with
dispatch's selections and when recording moves to another file, so that every problem's next call is
planned and recorded again; they outlive disable(), so that a with-block around each forward pays the
trip into Python once per problem.
These are the kernels torch runs below autograd, so
  - autograd keeps torch's own derivative formulas, and the mm calls of the backward come here too;
  - the mode is global (every thread; a TorchFunctionMode is per thread) and costs nothing for other
    ops (a TorchFunctionMode costs every torch call in Python, +1.3 us on a CPU add of 64x64);
  - a call that falls through, or that dispatch gives to torch, runs torch's own kernel without a
    second trip through the dispatcher (the C++ kernels call at::cuda::mm / addmm; the Python ones
    torch's kernel taken with torch.library.get_kernel before ours replaced it, or before torch 2.9 the
    out= overloads aten::mm.out / aten::addmm.out, which are not overridden): no second aten::mm in a
    profile. Explicit calls' torch backend runs those out= overloads, so it never recurses here;
  - torch.compile traces with fake tensors and never calls these kernels. With Inductor, compiled code
    runs Inductor's own GEMMs (its Triton templates, or cuBLAS through mm.out), not the library's;
    backends that run the captured aten ops eagerly ("eager", "aot_eager") do come here. To put the
    library's kernels into compiled code, call tritonblas.matmul / addmm / linear (a custom op the
    compiler keeps whole).
Host cost on a hit, every launch stubbed: tests/ops_overhead.py --transparent; on the GPU,
scripts/dispatch_overhead.py.
"""

from __future__ import annotations

import logging
import os
import threading
import warnings

import torch

from . import log, native
from . import record as _record
from .call.path import lookup, prepare
from .call.run import native_record, routed_eager_torch, run, torch_runs
from .contract import ASK, EAGER_TORCH, KERNEL, TORCH
from .device import interpreter_enabled

_lock = threading.RLock()
_library = None  # the torch.library.Library objects holding the registrations while enabled
_native = False  # the C++ kernels (native/route.cpp) are installed
_fell_through: set[tuple] = set()  # what was logged as left to torch


def is_enabled() -> bool:
    return _library is not None


class _Enabled:
    """What enable() returns: transparent mode is on from the call; as a context manager, the state
    before the call (on or off, and what was recorded) comes back at the end of the with-block."""

    def __init__(self, before: tuple) -> None:
        self._before = before

    def __enter__(self) -> _Enabled:
        return self

    def __exit__(self, *exc: object) -> None:
        was_on, recording = self._before
        with _lock:
            _start_recording(recording)
            if not was_on:
                _unregister()


def enable(record: str | os.PathLike | None = None, *, native: bool = True) -> _Enabled:
    """Route torch's mm / addmm / linear (nn.Linear, `@`) through dispatch until disable(), or for a
    with-block. record: a shapes.yaml to add every new problem to (else TRITONBLAS_RECORD, if set), for
    `tritonblas-tune --shapes`. native: run the C++ kernels (built on the first call, then cached; see
    tritonblas.native) where they build here, else the Python ones; while enabled, a second enable()
    keeps the kernels it found."""
    if type(native) is not bool:
        raise TypeError(f"native must be True or False, not {native!r}")
    with _lock:
        before = (is_enabled(), _record.given())
        if record is not None:
            _start_recording(record)
        _register(native)
    return _Enabled(before)


def disable() -> None:
    """torch's GEMMs run torch's own kernels again; recording stops (TRITONBLAS_RECORD aside)."""
    with _lock:
        _unregister()
        _start_recording(None)


def is_native() -> bool:
    """Whether the C++ kernels route torch's mm, addmm and _scaled_mm now (else the Python ones, or none)."""
    return _native


def _start_recording(path: str | os.PathLike | None) -> None:
    """A problem is noted on the Python side of a call: where the file changes to another one, the C++
    kernels forget what they answered without it (tritonblas.native hooks record.start), so that each
    problem's next call reaches it."""
    _record.start(path)


def _register(want_native: bool) -> None:
    global _library, _native
    if _library is not None:
        return
    from .grouped import op as grouped_op
    from .grouped import route as grouped_route

    keys = ("CUDA", "CPU") if interpreter_enabled() else ("CUDA",)
    grouped_own = {key: _torch_kernel("aten::_grouped_mm", key) for key in keys}  # before ours replace them
    answers = _install_native(keys) if want_native and native.load() else None
    lib = torch.library.Library("aten", "IMPL")
    with warnings.catch_warnings():  # torch warns once that a kernel is overridden: that is the point
        warnings.simplefilter("ignore")
        for key in keys if answers is None else ():
            mm, addmm = _kernels(_torch_kernel("aten::mm", key), _torch_kernel("aten::addmm", key))
            lib.impl("mm", mm, key, with_keyset=True)
            lib.impl("addmm", addmm, key, with_keyset=True)
            own = _torch_kernel("aten::_scaled_mm", key)
            if own is not None:  # (torch before 2.9: no get_kernel, so _scaled_mm is left alone)
                lib.impl("_scaled_mm", _scaled_kernel(own), key, with_keyset=True)
            if grouped_own[key] is not None:  # (a torch without the op: tritonblas.grouped_mm still works)
                lib.impl("_grouped_mm", grouped_route.grouped_kernel(grouped_own[key]), key, with_keyset=True)
    grouped_op.set_own(grouped_own)
    _library = (lib,) if answers is None else (lib, answers)
    _native = answers is not None
    log.get().info("transparent mode on (%s kernels): torch's mm, addmm, linear, _scaled_mm and "
                   "_grouped_mm on %s go through dispatch", "C++" if _native else "Python",
                   "CUDA and (interpreter) CPU tensors" if interpreter_enabled() else "CUDA tensors")


def _install_native(keys: tuple[str, ...]):
    """The C++ kernels installed at `keys`, answered by `_native_answers` (the returned Library holds
    those); None, with a warning, where installing them failed (the Python kernels then go in)."""
    answers = torch.library.Library("tritonblas_native", "IMPL")
    try:
        answered = _native_answers()
        for key in keys:
            for name, answer in answered.items():
                answers.impl(name, answer, key)
        native.ops().install("CPU" in keys)
        native.set_routing(True)
    except RuntimeError as exc:
        answers._destroy()
        log.warn(f"tritonblas: transparent mode's C++ kernels could not be installed ({exc}); its Python "
                 "kernels run instead")
        return None
    return answers


def _torch_kernel(op: str, key: str):
    """torch's own kernel of `op` at `key` (ours is never registered while this runs), or None where
    this torch cannot hand it out."""
    get_kernel = getattr(torch.library, "get_kernel", None)
    try:
        return get_kernel(op, key) if get_kernel is not None else None
    except RuntimeError:
        return None


def _unregister() -> None:
    global _library, _native
    if _library is None:
        return
    if _native:
        native.ops().uninstall()  # first: no C++ kernel may call an answer that is gone
        native.set_routing(False)
    for lib in _library:
        lib._destroy()
    from .grouped.op import set_own

    set_own({})
    _library, _native = None, False
    log.get().info("transparent mode off")


# --- the kernels ----------------------------------------------------------------------------------------
# The plan key of a call here (call.path.lookup / prepare) is shorter than the explicit ops' signature:
# only dense tensors of the CUDA (or CPU) dispatch key reach these kernels (sparse, nested, meta and
# __torch_dispatch__ subclasses dispatch elsewhere), below autograd (no grad marker) and never while
# torch.compile traces (it runs fake tensors), so the layout, the type, the grad flags and the options
# it leaves out are the same for every call, and the device is its index (-1: the CPU).

_ROUTED = (torch.float16, torch.bfloat16, torch.float32)
_mm_out, _addmm_out = torch.ops.aten.mm.out, torch.ops.aten.addmm.out  # not overridden: torch's own kernels
_NUMBERS = (int, float)


def _kernels(torch_mm, torch_addmm) -> tuple:
    """Our aten::mm and aten::addmm kernels for one dispatch key, over torch's own ones there."""
    if torch_mm is None or torch_addmm is None:
        def own_mm(keyset, a, b):
            return _mm_out(a, b, out=a.new_empty(0))

        def own_addmm(keyset, bias, a, b, beta, alpha):
            return _addmm_out(bias, a, b, beta=beta, alpha=alpha, out=a.new_empty(0))
    else:
        def own_mm(keyset, a, b):
            return torch_mm.call_boxed(keyset, a, b)

        def own_addmm(keyset, bias, a, b, beta, alpha):
            return torch_addmm.call_boxed(keyset, bias, a, b, beta=beta, alpha=alpha)

    def mm(keyset, a, b):
        out, _ = _routed_mm(a, b)
        return own_mm(keyset, a, b) if out is None else out

    def addmm(keyset, bias, a, b, *, beta=1, alpha=1):
        out, _ = _routed_addmm(bias, a, b, beta, alpha)
        return own_addmm(keyset, bias, a, b, beta, alpha) if out is None else out

    return mm, addmm


_NO_RECORD: list[int] = []


def _native_answers() -> dict:
    """The Python side of the C++ kernels (native/route.cpp), by op name: a call's output (None: torch's
    kernel runs), what holds for later calls of its key and KERNEL's launch record said through the op
    `answer` first (no word: ASK, the answer of most calls that come here)."""
    def answered(out, answer: int, record: list[int]):
        if answer != ASK:
            native.ops().answer(answer, record)
        return out

    def routed_mm(a, b):
        out, plan = _routed_mm(a, b)
        return answered(out, *_later(plan, a))

    def routed_addmm(bias, a, b, beta, alpha):
        out, plan = _routed_addmm(bias, a, b, beta, alpha)
        return answered(out, *_later(plan, a))

    def routed_scaled_mm(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum):
        out, plan = _routed_scaled(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
        recorded = _recorded_scales(scale_a, scale_b)
        if plan is not None and plan.routed_eager_vendor[recorded]:
            return answered(out, EAGER_TORCH, _NO_RECORD)
        return answered(out, *_later(plan, a, recorded))

    from .grouped.route import routed

    def routed_grouped_mm(a, b, offs, out_dtype):
        out, answer = routed(a, b, offs, out_dtype)
        return answered(out, answer, _NO_RECORD)

    return {"routed_mm": routed_mm, "routed_addmm": routed_addmm, "routed_scaled_mm": routed_scaled_mm,
            "routed_grouped_mm": routed_grouped_mm}


def _routed_mm(a, b) -> tuple:
    """An aten::mm call through dispatch: (our output, or None where torch's kernel is to run; the plan,
    None for a call not routed)."""
    plan = _mm_plan(a, b)
    if plan is not None and not torch_runs(plan):
        return run(plan, a, b, None, None, 1.0, 0.0), plan
    if plan is None and _debug():
        _left_to_torch("mm", a, b)
    return None, plan


def _routed_addmm(bias, a, b, beta, alpha) -> tuple:
    """An aten::addmm call through dispatch, as _routed_mm."""
    plan = _addmm_plan(bias, a, b, beta, alpha)
    if plan is not None and not torch_runs(plan):
        return run(plan, a, b, bias, None, float(alpha), float(beta)), plan
    if plan is None and _debug():
        _left_to_torch("addmm", a, b, bias)
    return None, plan


def _later(plan, a, contiguous_scales: bool = True) -> tuple[int, list[int]]:
    """(answer, launch record) for later calls of the key: KERNEL where the kernel runs and its launch has
    a record (launch/native.py: the C++ kernel launches it); ASK where a kernel runs otherwise (its launch
    is Python's) and for CPU tensors while the interpreter is off (it may come back on); EAGER_TORCH for
    a kernel that wins under graph capture only; else TORCH."""
    if plan is None:
        return (TORCH if not a.is_cpu or interpreter_enabled() else ASK), _NO_RECORD
    if plan.eager_vendor:
        return EAGER_TORCH, _NO_RECORD
    if torch_runs(plan):
        return TORCH, _NO_RECORD
    if a.is_cpu:  # the interpreter's launches: Python's, never a record
        return ASK, _NO_RECORD
    record = native_record(plan, contiguous_scales)
    return (ASK, _NO_RECORD) if record is None else (KERNEL, record)


# A plan found for the call's key says it is routable (a plan is made only for operands that passed the
# checks, and the key holds every fact they read): the checks run on a miss only.
def _mm_plan(a, b):
    """The plan of an aten::mm call, or None where torch's kernel takes it as it is."""
    if a.dtype not in _ROUTED:
        return None
    key = ("aten::mm", a.shape, a.stride(), a.dtype, a.get_device(), b.shape, b.stride(), b.dtype,
           b.get_device())
    plan = lookup(key, a, b, None, None)
    if plan is None and _routable(a, b) and a.shape[1] == b.shape[0]:
        plan = prepare(key, "gemm", a, b, None, 0.0, None, None, None, None, routed=True)
    return plan


def _addmm_plan(bias, a, b, beta, alpha):
    """The plan of an aten::addmm call, or None where torch's kernel takes it as it is."""
    if a.dtype not in _ROUTED or type(beta) not in _NUMBERS or type(alpha) not in _NUMBERS:
        return None
    beta = float(beta)
    key = ("aten::addmm" if beta else "aten::addmm0", a.shape, a.stride(), a.dtype, a.get_device(),
           b.shape, b.stride(), b.dtype, b.get_device(), bias.shape, bias.stride(), bias.dtype,
           bias.get_device())  # (the schema's `self`: always a tensor)
    plan = lookup(key, a, b, bias, None)
    if plan is None and _routable(a, b) and a.shape[1] == b.shape[0] and _bias_ok(bias, a, b):
        plan = prepare(key, "gemm", a, b, bias, beta, None, None, None, None, routed=True)
    return plan


def _routable(a, b) -> bool:
    """2-D operands of one routed dtype on one device the library runs (torch's own kernel checks and
    reports every other case). Both are dense: a sparse, nested, quantized or MKL-DNN tensor among
    the arguments sends the call to another dispatch key than the ones registered here."""
    dtype = a.dtype
    if dtype not in _ROUTED or b.dtype is not dtype or a.dim() != 2 or b.dim() != 2:
        return False
    if a.is_cuda:
        return b.is_cuda and a.get_device() == b.get_device()
    return a.is_cpu and b.is_cpu and interpreter_enabled()  # the CPU kernels exist under it only


def _bias_ok(bias, a, b) -> bool:
    """addmm's input broadcastable to (M, N), of the operands' dtype and device."""
    if not (isinstance(bias, torch.Tensor) and bias.dtype is a.dtype and bias.dim() <= 2
            and bias.is_cuda is a.is_cuda and bias.get_device() == a.get_device()):
        return False
    shape = (1,) * (2 - bias.dim()) + tuple(bias.shape)
    return shape[0] in (1, a.shape[0]) and shape[1] in (1, b.shape[1])


def _debug() -> bool:
    return log.logger.isEnabledFor(logging.DEBUG)  # configured by enable() (log.get())


def _left_to_torch(op: str, a, b, bias=None) -> None:
    """Log (DEBUG) once per kind of call what falls through to torch."""
    kind = (op, a.dtype, b.dtype, a.is_cuda, b.is_cuda, a.dim(), b.dim(),
            None if bias is None else (bias.dtype, bias.dim()))
    if kind not in _fell_through:
        _fell_through.add(kind)
        log.logger.debug("transparent mode leaves %s of %s %s (%s) and %s %s (%s)%s to torch", op, a.dtype,
                        tuple(a.shape), a.device, b.dtype, tuple(b.shape), b.device,
                        "" if bias is None else f" with input {bias.dtype} {tuple(bias.shape)}")


# --- torch._scaled_mm -------------------------------------------------------------------------------------
_QUANT = (torch.float8_e4m3fn, torch.float8_e5m2)  # what torch._scaled_mm takes (int8 is torch._int_mm's)


def _scaled_kernel(torch_scaled):
    """Our aten::_scaled_mm kernel over torch's own (the Python kernels'; the C++ kernel asks
    _routed_scaled through routed_scaled_mm)."""
    def scaled_mm(keyset, a, b, scale_a, scale_b, bias=None, scale_result=None, out_dtype=None,
                  use_fast_accum=False):
        out, _ = _routed_scaled(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum)
        if out is not None:
            return out
        return torch_scaled.call_boxed(keyset, a, b, scale_a, scale_b, bias=bias, scale_result=scale_result,
                                       out_dtype=out_dtype, use_fast_accum=use_fast_accum)

    return scaled_mm


def _routed_scaled(a, b, scale_a, scale_b, bias, scale_result, out_dtype, use_fast_accum) -> tuple:
    """An aten::_scaled_mm call through dispatch, as _routed_mm: fp8 operands with float32 scales of a
    mode scaled_mm has (one value, one per row of a / column of b, or block-wise: the shapes of torch's
    BlockWise1x128 x BlockWise128x128) and no scale_result run the public op's plan (a kernel, or torch's
    own kernel where dispatch picks torch); anything else, and anything scaled_mm's checks refuse, goes
    to torch's kernel (plan None), which accepts it or raises its own error."""
    from .call.run import run_scaled
    from .call.scaled import plan_scaled

    plan = None
    if scale_result is None and a.dtype in _QUANT and b.dtype in _QUANT and a.dim() == b.dim() == 2:
        try:
            plan = plan_scaled(a, b, scale_a, scale_b, bias, out_dtype, use_fast_accum)
        except (TypeError, ValueError, RuntimeError):  # torch's kernel has the last word on validity
            return None, None
        if not torch_runs(plan) and not routed_eager_torch(plan, _recorded_scales(scale_a, scale_b)):
            return run_scaled(plan, a, b, scale_a, scale_b, bias, None), plan
    elif _debug():
        _left_to_torch("_scaled_mm", a, b, bias)
    return None, plan


def _recorded_scales(scale_a: torch.Tensor, scale_b: torch.Tensor) -> bool:
    """Whether a routed _scaled_mm call's kernel launches from a launch record after its first call: the
    C++ kernels route (native.routing), and its scales are contiguous (a record passes them as they are;
    the Python side reads others through a copy, call.run.scale_vector)."""
    return native.routing() and scale_a.is_contiguous() and scale_b.is_contiguous()
