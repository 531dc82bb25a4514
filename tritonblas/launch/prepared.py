"""Prepared launches: the call path's plans keep one (`prepare_launch`) and run it on each call's tensors
(`launch_prepared`): on pointers through launch.direct once the kernel is compiled, none of launch_gemm's
per-call planning.

A config with padded copies (aligned_copy) or Stream-K is prepared too: the GEMM's plan is made once
on the padded buffers' shapes and strides (its host descriptors' encodings kept per buffer, which the
pool keeps stable); each call takes its buffers and its Stream-K workspace from scratch, launches the
copies, the GEMM and the Stream-K reduce kernel where the plan has one, and gives its scratch back.
launch_gemm did that per call from the tensors (launch.gemm._aligned, then the GEMM's plan by its
key), and its Python around the three launches made eager calls of misaligned problems host-bound
(a routed Stream-K call spent 208 us in Python inside BERT's step, H200, 2026-12-02). The
copies' plans are launch_gemm's own, found under the key `_aligned` stores them by: until they are
there (a plan's first call) and where they are not (launch.gemm's cache dropped them), `launch_prepared`
answers False and the caller takes launch_gemm.

launch.gemm.launch_plan is looked up on its module at each call: tests replace it to watch launches.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import torch

from ..config import GemmConfig
from ..problem import aligned_leading_dim
from . import direct, gemm, scratch
from .arguments import Scales, gemm_args, reduce_args, scale_args
from .gemm import Plan, needs_scratch


def prepare_launch(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                   config: GemmConfig, sm_count: int, precision: str, scales: Scales = None,
                   fast_acc: bool = False) -> Plan | None:
    """The launch of `config` on tensors of these shapes, strides, dtype, device and alignment, for a
    caller that keeps it (the call path's plan) and runs it with `launch_prepared` on tensors of the
    same facts, or on any tensors with the same data pointers (the plan holds every shape and stride:
    a weight can stand for its transpose, a bias vector for its broadcast view). None where a launch
    needs more than the pointers and scratch: bf16 in the interpreter (which launches fp32 copies), an
    empty output, a pointer that is not 16-byte aligned (the caller then takes launch_gemm, whose plan
    key holds the alignment)."""
    m, n = a.shape[0], b.shape[1]
    if config.backend == "torch" or m == 0 or n == 0 or \
            (a.dtype == torch.bfloat16 and not a.is_cuda) or _misaligned(a, b, c, bias, *(scales or ())):
        return None
    copies = None
    if config.aligned_copy:
        copies, a, b = _prepare_copies(a, b)
    plan = gemm.make_plan(a, b, c, bias, config, sm_count, precision, scales, fast_acc)
    # make_plan's plan is this caller's alone (not in the plan cache): completed into a new frozen one
    descs = gemm.descriptor_geometry(a, b, plan.constexprs) if plan.constexprs["HOST_DESC"] else None
    return replace(plan, descs=descs, copies=None if copies == (None, None) else copies)


def config_launches_directly(config: GemmConfig) -> bool:
    """Whether `config`'s launch on 16-byte aligned operands is a direct one (direct.launches_directly of
    the plan prepare_launch makes): a kernel config needing no padded copies or Stream-K workspace.
    For what can be said without tensors (`tritonblas explain`). A Gluon config's launch is not prepared
    (launch.blockscaled: its descriptors are built per call)."""
    return config.backend != "torch" and not config.gluon and not needs_scratch(config) and direct.expected()


def _misaligned(*tensors: torch.Tensor | None) -> bool:
    return any(t is not None and t.data_ptr() % 16 for t in tensors)


def launch_prepared(plan: Plan, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                    alpha: float, beta: float, scales: Scales = None) -> bool:
    """Launch a plan of prepare_launch: c = alpha * a @ b * scales + beta * bias, each tensor's facts as
    the plan's, scales of the plan's modes. False, and nothing launched, where a pointer is not 16-byte
    aligned (the caller then takes launch_gemm, whose plan key holds the alignment), or where a plan with
    copies finds its copies' plans not made yet."""
    pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
    pbias = pc if bias is None else bias.data_ptr()
    sa, sb = (None, None) if scales is None else (scales[0].data_ptr(), scales[1].data_ptr())
    if (pa | pb | pc | pbias | (sa or 0) | (sb or 0)) & 15:
        return False
    if plan.copies is not None or plan.workspace is not None:
        return launch_with_scratch(plan, a, b, c, bias, alpha, beta, scales, (pa, pb, pc, pbias, sa, sb))
    if plan.state.direct is not None and (index := a.get_device()) == gemm.current_device():
        stream = torch._C._cuda_getCurrentRawStream(index)
        _launch_direct(plan, a, b, pa, pb, pc, pbias, alpha, beta, sa, sb, (), stream)
    else:
        _launch_views(plan, a, b, c, bias, alpha, beta, scales)
    return True


def _launch_direct(plan: Plan, a: torch.Tensor, b: torch.Tensor, pa: int, pb: int, pc: int, pbias: int,
                   alpha: float, beta: float, sa: int | None, sb: int | None, workspace: tuple,
                   stream: int) -> None:
    """The launch through the plan's direct launch, on pointers (a and b: the tensors at pa and pb, the
    bases of their host descriptors, whose encodings are kept per pointer; workspace: the Stream-K
    partials' and counters' pointers, () for none), then its reduce kernel's where it has one."""
    state = plan.state
    fast = state.direct
    host = (None, None) if plan.descs is None else (*fast.descriptor(0, a, pa), *fast.descriptor(1, b, pb))
    head, tail = gemm_args(pa, pb, pc, pbias, workspace, alpha, beta, host, (sa, sb))
    fast.launch(stream, (*head, *plan.ints, *tail, *state.constexpr_args))
    then = plan.then
    if then is not None:  # stream order: the partials are all in when it runs
        head, tail = reduce_args(workspace[0], pc, pbias, alpha, beta, (sa, sb))
        then.state.direct.launch(stream, (*head, *then.ints, *tail, *then.state.constexpr_args))


def _launch_views(plan: Plan, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                  alpha: float, beta: float, scales: Scales = None, workspace: tuple = ()) -> None:
    """The launch through launch.gemm.launch_plan (its first, on the interpreter, another device current, a
    triton whose launcher is unknown). The kernels read shapes and strides from the plan: a and b are
    tensors at the planned pointers (a linear's weight stands for its transpose)."""
    descs = plan.descs
    host = (None, None) if descs is None else (gemm.descriptor(a, *descs[0]), gemm.descriptor(b, *descs[1]))
    scaling = scale_args(scales)
    bias_or_c = c if bias is None else bias
    gemm.launch_plan(plan, *gemm_args(a, b, c, bias_or_c, workspace, alpha, beta, host, scaling))
    if plan.then is not None:
        gemm.launch_plan(plan.then, *reduce_args(workspace[0], c, bias_or_c, alpha, beta, scaling))


# --- scratch: padded copies, the Stream-K workspace -------------------------------------------------

@dataclass(slots=True, eq=False)
class PadCopy:
    """One operand's copy: its source as launch.gemm._aligned reads it (the operand, or the transpose of
    a column-major one: rows along dim 0, the contiguous axis along 1), the buffer's leading dim, and
    the copy's plan once launch_gemm has made it."""

    slot: int  # 0: A, 1: B (scratch keeps a buffer per slot)
    shape: tuple[int, int]  # the source's (rows, cols)
    strides: tuple[int, int]
    lead: int  # the buffer's leading dim: cols rounded up to 16 bytes
    itemsize: int  # bytes an element
    col: bool  # a column-major operand: the GEMM reads the buffer's transpose
    key: tuple  # launch.gemm._aligned's key of the copy's plan
    plan: Plan | None = None


def _prepare_copies(a: torch.Tensor, b: torch.Tensor) -> tuple[tuple[PadCopy | None, PadCopy | None],
                                                               torch.Tensor, torch.Tensor]:
    """(each operand's copy, None where TMA reads it as it is; A and B as the GEMM reads them: meta views
    of the padded buffers, or the operand itself)."""
    copies, operands = [], []
    for slot, t in enumerate((a, b)):
        ok, col = gemm.tma_ready(t)
        if ok:
            copies.append(None)
            operands.append(t)
            continue
        src = t.t() if col else t
        rows, cols = src.shape
        lead = aligned_leading_dim(cols, t.element_size())
        # (the pointer 16-byte aligned: launch_prepared runs no other)
        copies.append(PadCopy(slot, (rows, cols), src.stride(), lead, t.element_size(), col,
                              gemm.copy_key(src, lead, True)))
        view = torch.empty((rows, lead), dtype=t.dtype, device="meta")[:, :cols]
        operands.append(view.t() if col else view)
    return (copies[0], copies[1]), operands[0], operands[1]


def launch_with_scratch(plan: Plan, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor,
                        bias: torch.Tensor | None, alpha: float, beta: float, scales: Scales,
                        pointers: tuple) -> bool:
    """launch_prepared of a plan with padded copies or a Stream-K workspace, its pointers checked
    (pointers: those of a, b, c, the bias or c, the scales or None): the copies, then the GEMM on the
    buffers, then its reduce kernel where it has one. False, nothing launched, where a copy's plan is not
    made yet."""
    copies = plan.copies or (None, None)
    for copy in copies:
        if copy is not None and copy.plan is None:
            copy.plan = gemm.plans.get(copy.key)
            if copy.plan is None:
                return False
    index = c.get_device()
    fast = all_direct(plan) and index == gemm.current_device()
    held, stream = [], scratch.current_stream(c.device)
    try:
        workspace = () if plan.workspace is None else \
            scratch.workspace(c.device, *plan.workspace, held, stream)
        if fast:
            _scratch_direct(plan, a, b, pointers, workspace, alpha, beta, held, stream,
                            torch._C._cuda_getCurrentRawStream(index))
        else:
            a, b = _copied(copies[0], a, held, stream), _copied(copies[1], b, held, stream)
            _launch_views(plan, a, b, c, bias, alpha, beta, scales, workspace)
    except BaseException:
        held = None  # a launch that failed part way: its scratch is dropped (launch/scratch.py)
        raise
    finally:
        if held:
            scratch.give(held)
    return True


def all_direct(plan: Plan) -> bool:
    """Whether each launch of a prepared plan (its copies', its GEMM's, its reduce kernel's) has its
    direct launch (made at its first launch where this triton's launcher allows it)."""
    return plan.state.direct is not None and (plan.then is None or plan.then.state.direct is not None) and \
        all(copy is None or (copy.plan is not None and copy.plan.state.direct is not None)
            for copy in plan.copies or ())


def _scratch_direct(plan: Plan, a: torch.Tensor, b: torch.Tensor, pointers: tuple, workspace: tuple,
                    alpha: float, beta: float, held: list, stream: int | None, raw_stream: int) -> None:
    """Every launch on pointers: no view is made."""
    ca, cb = plan.copies or (None, None)
    pa, pb, pc, pbias, sa, sb = pointers
    if ca is not None:
        a = scratch.padded_buffer(0, ca.shape[0], ca.lead, a, held, stream)
        pa = _copy_direct(ca, pa, a, raw_stream)
    if cb is not None:
        b = scratch.padded_buffer(1, cb.shape[0], cb.lead, b, held, stream)
        pb = _copy_direct(cb, pb, b, raw_stream)
    workspace = tuple(t.data_ptr() for t in workspace)
    _launch_direct(plan, a, b, pa, pb, pc, pbias, alpha, beta, sa, sb, workspace, raw_stream)


def _copy_direct(copy: PadCopy, src: int, buf: torch.Tensor, raw_stream: int) -> int:
    """The copy of the operand at `src` into `buf`; the buffer's pointer."""
    dst = buf.data_ptr()
    plan = copy.plan
    plan.state.direct.launch(raw_stream, (src, dst, *plan.ints, *plan.state.constexpr_args))
    return dst


def _copied(copy: PadCopy | None, t: torch.Tensor, held: list, stream: int | None) -> torch.Tensor:
    """The operand as the GEMM reads it, through launch.gemm.launch_plan: `t` itself, or a view of its copy
    into a padded buffer of the call's."""
    if copy is None:
        return t
    rows, cols = copy.shape
    buf = scratch.padded_buffer(copy.slot, rows, copy.lead, t, held, stream)
    # `t` is the operand or a tensor at its pointer (a linear's weight for weight.t()): the source is
    # the planned view of its storage.
    gemm.launch_plan(copy.plan, (t.as_strided(copy.shape, copy.strides), buf), ())
    view = buf[:, :cols]
    return view.t() if copy.col else view
