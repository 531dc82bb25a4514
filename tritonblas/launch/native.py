"""Launch records: a prepared direct launch written as the int64 words transparent mode's C++ kernels
launch it from (tritonblas/native/launch.h reads them; the layout is kept in step with it).

Why: a routed call whose kernel runs otherwise takes the trip into Python, 55-73 us of host time a call
inside a model's step against torch's own op's 21 (docs/benchmarks/h200.md, forty-fifth session). With a
record, the C++ kernel launches the compiled kernel itself, as triton's launcher does: cuLaunchKernel on
the current stream with the kernel's non-constexpr arguments in signature order, then global and
profile scratch. Host descriptors are encoded per call in C++ from the call's addresses with what
triton's own encoding (its driver's fill_tma_descriptor) passes cuTensorMapEncodeTiled. Only what a
record can say is written: launches on the call's own tensors (no padded copies, no Stream-K
workspace), arguments that are the call's addresses, its alpha and beta, constants of the plan or 2-D
host descriptors of A and B, and no launch attribute (cooperative grid, PDL, cluster).
"""

from __future__ import annotations

import struct

from ..config import GemmConfig
from .gemm import _Plan
from .prepared import config_launches_directly

FORMAT = 1
HEAD = 8  # words before the parameters (launch.h's HEAD)
# What a kernel parameter takes (launch.h's Kind).
P_A, P_B, P_C, P_BIAS, P_I32, P_I64, P_F32, P_ALPHA, P_BETA, P_NULL, P_SCRATCH, P_DESC = range(12)
MAX_PARAMS = 96  # launch.h's MAX_PARAMS


class _Slot:
    """A placeholder in the argument template: the call's value of one argument."""

    __slots__ = ("kind",)

    def __init__(self, kind: int) -> None:
        self.kind = kind


_A, _B, _C, _BIAS, _ALPHA, _BETA = (_Slot(k) for k in (P_A, P_B, P_C, P_BIAS, P_ALPHA, P_BETA))
_DESCS = (_Slot(P_DESC), _Slot(P_DESC))  # A's and B's host descriptors
_INTS = {"i32": P_I32, "i64": P_I64}
_FLOATS = ("fp32", "f32")


def config_has_record(config: GemmConfig | None) -> bool:
    """Whether `config`'s launch on 16-byte aligned operands gets a record once launched directly (what
    can be said without tensors: the transparent rule's cost of a routed call, `tritonblas explain`):
    exactly the direct launches (no padded copies, no Stream-K workspace)."""
    return config is not None and config_launches_directly(config)


def launch_record(plan: _Plan, has_bias: bool) -> list[int] | None:
    """The record of `plan`'s launch (a prepared launch of launch.prepared, launched directly at least
    once) for calls c = alpha * a @ b + beta * bias (`has_bias`: the bias is read; else c's address
    stands in, as launch.prepared passes it); None where a record cannot say it."""
    direct, compiled = plan.direct, plan.compiled
    if direct is None or compiled is None or plan.copies is not None or plan.workspace is not None or \
            plan.then is not None:
        return None
    descs = None if plan.descs is None else _descriptor_words(direct.descriptors)
    if plan.descs is not None and descs is None:
        return None
    launcher = compiled.run
    if getattr(launcher, "launch_cooperative_grid", True) or getattr(launcher, "launch_pdl", True):
        return None
    types = _signature(compiled)
    # launch.prepared._launch_direct's argument list, the call's values as placeholders
    host = (None, None) if descs is None else _DESCS
    template = (_A, _B, _C, _BIAS if has_bias else _C, *plan.ints, _ALPHA, _BETA, *host, None, None,
                *plan.constexpr_args)
    if types is None or len(types) != len(template):
        return None
    params = _params(types, template, plan.descs)
    if params is None:
        return None
    params += [(P_SCRATCH if direct.scratch_bytes else P_NULL, 0), (P_NULL, 0)]  # global, profile scratch
    if len(params) > MAX_PARAMS:
        return None
    meta = compiled.metadata
    words = [FORMAT, int(compiled.function), plan.progs, 32 * meta.num_warps, meta.shared,
             direct.scratch_bytes, len(params), 0 if descs is None else 2]
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
            slot = _DESCS.index(value)
            shape, strides, _ = geometry[slot]
            params += [(P_DESC, slot), *((P_I32, v) for v in shape), *((P_I64, v) for v in strides)]
            continue
        if ty.startswith("*"):
            if value is None:
                params.append((P_NULL, 0))
            elif isinstance(value, _Slot) and value.kind in (P_A, P_B, P_C, P_BIAS):
                params.append((value.kind, 0))
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


def _descriptor_words(descriptors: tuple | None) -> list[int] | None:
    """The words of A's and B's host descriptors as triton's encoding passes them to
    cuTensorMapEncodeTiled (its driver's fill_tma_descriptor: dims and box innermost first, the row
    stride in bytes, no interleave, 128-byte L2 promotion, zero fill): per descriptor its slot, the
    driver's dtype code, swizzle, fill, dims (2), row stride in bytes, box (2). None where they are
    not 2-D tiled descriptors of plain dtypes (fp4 padding, im2col)."""
    try:
        from triton.backends.nvidia.driver import TMA_DTYPE_DEVICE_TO_HOST
    except ImportError:
        return None
    if descriptors is None or len(descriptors) != 2:
        return None
    words = []
    for slot, ((shape, strides, _), meta) in enumerate(descriptors):
        if len(shape) != 2 or strides[1] != 1 or meta.get("fp4_padded") or meta.get("is_im2col") or \
                len(meta["block_size"]) != 2:
            return None
        box = meta["block_size"]
        words += [slot, TMA_DTYPE_DEVICE_TO_HOST[meta["elem_type"]], meta["swizzle"], 0, shape[1], shape[0],
                  strides[0] * meta["elem_size"], box[1], box[0]]
    return words
