"""Launch records: a prepared launch of launch.prepared written as the int64 words transparent mode's C++
kernels launch it from (tritonblas/native/launch.h reads them; the layout: tritonblas/contract.py).

Why: a routed call whose kernel runs otherwise takes the trip into Python, 55-73 us of host time a call
inside a model's step against torch's own op's 21, 208 us for a Stream-K launch (H200, 2026-12-02,
commit 185762a). With a record, the C++ kernel launches the compiled kernels itself, as triton's
launcher does: cuLaunchKernel on the current stream with each kernel's non-constexpr arguments in
signature order, then global and profile scratch. Host descriptors are encoded per call in C++ from
the call's addresses with what triton's own encoding (its driver's fill_tma_descriptor) passes
cuTensorMapEncodeTiled.

A record is the plan's launches in order (pad copies, the GEMM, Stream-K's reduce kernel) and the
buffers they share: padded operands, Stream-K's partials, and its tile counters, zeroed when allocated
(every Stream-K launch leaves them at zero). The C++ side keeps them per device and stream, as
launch/scratch.py keeps the Python side's (native/launch.cpp says how). Only what a record can say is
written: arguments that are the call's addresses (scaled_mm's scales among them), a buffer's, the call's
alpha and beta, constants of the plan, or 2-D host descriptors of an operand or a buffer, and no launch
attribute (cooperative grid, PDL, cluster).
"""

from __future__ import annotations

import struct

from ..config import GemmConfig
from ..contract import (
    BUFFER_WORDS,
    FORMAT,
    MAX_PARAMS,
    P_A,
    P_ALPHA,
    P_B,
    P_BETA,
    P_BIAS,
    P_BUF,
    P_C,
    P_DESC,
    P_F32,
    P_I32,
    P_I64,
    P_NULL,
    P_SCALE_A,
    P_SCALE_B,
    P_SCRATCH,
)
from . import direct
from .arguments import gemm_args, reduce_args
from .gemm import Plan
from .prepared import all_direct
from .scratch import workspace_elements


class _Slot:
    """A placeholder in an argument template: the call's value of one argument (value: a buffer's or a
    host descriptor's index)."""

    __slots__ = ("kind", "value")

    def __init__(self, kind: int, value: int = 0) -> None:
        self.kind, self.value = kind, value


_A, _B, _C, _BIAS, _ALPHA, _BETA = (_Slot(k) for k in (P_A, P_B, P_C, P_BIAS, P_ALPHA, P_BETA))
_DESCS = (_Slot(P_DESC, 0), _Slot(P_DESC, 1))  # the GEMM's host descriptors of A and B
_SCALES = (_Slot(P_SCALE_A), _Slot(P_SCALE_B))  # a scaled_mm call's scales (contiguous fp32)
_POINTERS = (P_A, P_B, P_C, P_BIAS, P_BUF, P_SCALE_A, P_SCALE_B)
_INTS = {"i32": P_I32, "i64": P_I64}
_FLOATS = ("fp32", "f32")


def config_has_record(config: GemmConfig | None) -> bool:
    """Whether `config`'s launch on 16-byte aligned operands gets a record once launched directly (what
    can be said without tensors: the transparent rule's cost of a routed call, `tritonblas explain`):
    every kernel config but a Gluon one (launch.blockscaled's, its descriptors built per call), on a triton
    whose launches go direct."""
    return config is not None and config.backend != "torch" and not config.gluon and direct.expected()


def launch_record(plan: Plan, has_bias: bool, scaled: bool = False) -> list[int] | None:
    """The record of `plan`'s launches (a prepared launch of launch.prepared, each of its kernels launched
    directly at least once) for calls c = alpha * a @ b + beta * bias (`has_bias`: the bias is read; else
    c's address stands in, as launch.prepared passes it), `scaled`: scaled_mm's, the product scaled by the
    call's scales (tensor- or row-wise, contiguous); None where a record cannot say it."""
    if not all_direct(plan):
        return None
    buffers: list[int] = []
    launches: list[list[int] | None] = []
    operands = []
    for source, copy in zip((_A, _B), plan.copies or (None, None), strict=True):
        if copy is None:
            operands.append(source)
            continue
        buf = _Slot(P_BUF, len(buffers) // BUFFER_WORDS)
        buffers += (copy.shape[0] * copy.lead * copy.itemsize, 0)
        copy_args = (source, buf, *copy.plan.ints, *copy.plan.state.constexpr_args)
        launches.append(_launch_words(copy.plan, copy_args))
        operands.append(buf)
    workspace = ()
    if plan.workspace is not None:
        floats, counters = workspace_elements(*plan.workspace)
        first = len(buffers) // BUFFER_WORDS
        workspace = (_Slot(P_BUF, first), _Slot(P_BUF, first + 1))
        buffers += (4 * floats, 0, 4 * counters, 1)  # fp32 partials; int32 counters, zeroed
    bias = _BIAS if has_bias else _C
    host = (None, None) if plan.descs is None else _DESCS
    scales = _SCALES if scaled else (None, None)  # (launch.arguments.scale_args)
    # the launchers' argument lists (launch.arguments), the call's values as placeholders
    head, tail = gemm_args(*operands, _C, bias, workspace, _ALPHA, _BETA, host, scales)
    launches.append(_launch_words(plan, (*head, *plan.ints, *tail, *plan.state.constexpr_args), operands))
    if plan.then is not None:
        then = plan.then
        head, tail = reduce_args(workspace[0], _C, bias, _ALPHA, _BETA, scales)
        launches.append(_launch_words(then, (*head, *then.ints, *tail, *then.state.constexpr_args)))
    if any(words is None for words in launches):
        return None
    head = [FORMAT, len(buffers) // BUFFER_WORDS, len(launches)]
    return head + buffers + [word for words in launches for word in words]


def _launch_words(plan: Plan, template: tuple, bases: list | None = None) -> list[int] | None:
    """One launch's words: its head, (kind, value) per parameter, its host descriptors (on `bases`: A's
    and B's sources, the call's operands or buffers); None where a record cannot say it."""
    compiled, launch = plan.state.compiled, plan.state.direct
    descs = None if plan.descs is None else _descriptor_words(launch.descriptors, bases)
    if compiled is None or plan.descs is not None and descs is None:
        return None
    launcher = compiled.run
    if getattr(launcher, "launch_cooperative_grid", True) or getattr(launcher, "launch_pdl", True):
        return None
    types = _signature(compiled)
    if types is None or len(types) != len(template):
        return None
    params = _params(types, template, plan.descs)
    if params is None:
        return None
    params += [(P_SCRATCH if launch.scratch_bytes else P_NULL, 0), (P_NULL, 0)]  # global, profile scratch
    if len(params) > MAX_PARAMS:
        return None
    meta = compiled.metadata
    words = [int(compiled.function), plan.progs, 32 * meta.num_warps, meta.shared, launch.scratch_bytes,
             len(params), 0 if descs is None else 2]
    for kind, value in params:
        words += (kind, value)
    return words + (descs or [])


def _signature(compiled: object) -> list[str] | None:
    """The kernel's argument types in order ("constexpr" for those compiled in), as triton's launcher
    reads them; None where they are not plain strings (host descriptors, tuples)."""
    signature = getattr(getattr(compiled, "src", None), "signature", None)
    if not isinstance(signature, dict):
        return None
    types = list(signature.values())
    return types if all(isinstance(t, str) for t in types) else None


def _params(types: list[str], template: tuple, geometry: tuple | None = None) -> list[tuple[int, int]] | None:
    """(kind, value) of each argument the launcher passes (constexprs are not), or None for one a record
    cannot say. A host descriptor (geometry: (shape, strides, box) of A's and B's) is passed as triton
    expands it: the encoded map (P_DESC: its slot), its shape as i32, its strides as i64."""
    params = []
    for ty, value in zip(types, template, strict=True):
        if ty == "constexpr":
            continue
        if ty.startswith("tensordesc"):
            if geometry is None or value not in _DESCS:
                return None
            slot = value.value
            shape, strides, _ = geometry[slot]
            params += [(P_DESC, slot), *((P_I32, v) for v in shape), *((P_I64, v) for v in strides)]
            continue
        if ty.startswith("*"):  # (None is compiled in: a pointer typed where None stands is not this plan's)
            if isinstance(value, _Slot) and value.kind in _POINTERS:
                params.append((value.kind, value.value))
            else:
                return None
        elif ty in _INTS and type(value) is int:
            params.append((_INTS[ty], value))
        elif ty in _FLOATS and isinstance(value, _Slot) and value.kind in (P_ALPHA, P_BETA):
            params.append((value.kind, 0))
        elif ty in _FLOATS and type(value) is float:
            params.append((P_F32, struct.unpack("<q", struct.pack("<d", value))[0]))
        else:
            return None
    return params


def _descriptor_words(descriptors: tuple | None, bases: list | None) -> list[int] | None:
    """The words of A's and B's host descriptors as triton's encoding passes them to
    cuTensorMapEncodeTiled (its driver's fill_tma_descriptor: dims and box innermost first, the row
    stride in bytes, no interleave, 128-byte L2 promotion, zero fill): per descriptor its base (kind
    and value: the call's operand or a buffer), the driver's dtype code, swizzle, fill, dims (2), row
    stride in bytes, box (2). None where they are not 2-D tiled descriptors of plain dtypes (fp4
    padding, im2col)."""
    try:
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    except ImportError:
        return None
    if descriptors is None or bases is None or len(descriptors) != 2:
        return None
    words = []
    for base, ((shape, strides, _), meta) in zip(bases, descriptors, strict=True):
        if len(shape) != 2 or strides[1] != 1 or meta.get("fp4_padded") or meta.get("is_im2col") or \
                len(meta["block_size"]) != 2:
            return None
        box = meta["block_size"]
        words += [base.kind, base.value, TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], meta["swizzle"], 0,
                  shape[1], shape[0], strides[0] * meta["elem_size"], box[1], box[0]]
    return words
