"""`tritonblas.grouped_mm`: torch._grouped_mm's semantics (tritonblas/grouped/forms.py), any dtype of
fp16/bf16/fp32, any layout and size, a bias per group, autograd and torch.compile.

Eager calls without autograd launch directly; calls that need gradients, and calls under
torch.compile, go through one custom op, `tritonblas::grouped_mm`, whose backward is grouped GEMMs of the
four forms again (each form's gradients are products of another form), written into buffers of their
inputs' layout.
"""

from __future__ import annotations

import torch

from .. import caches, record
from ..device import tensor_device_info
from ..validate import TORCH_DTYPES
from . import launch as grouped_launch
from .forms import GroupedShape, check_args, output_strides
from .select import GroupedSelection, key_of, select

BACKENDS = (None, "triton", "torch")


# torch's own kernels of aten::_grouped_mm by device type ("cuda", "cpu"), each with the dispatch key set it
# is called with, taken before transparent mode's replaced them, while the mode is on: what the torch
# backend runs then (`vendor`), never ours.
_own: dict[str, tuple[object, object]] = {}


def set_own(kernels: dict[str, object]) -> None:
    """Transparent mode hands torch's own kernels here by dispatch key ("CUDA", "CPU") as it routes the op
    (an empty dict as it ends)."""
    _own.clear()
    _own.update({key.lower(): (kernel, torch._C.DispatchKeySet(getattr(torch._C.DispatchKey, key)))
                 for key, kernel in kernels.items() if kernel is not None})


def own_grouped_mm(mat_a, mat_b, offs, out_dtype):
    """torch._grouped_mm on torch's own kernel, whether transparent mode routes the op or not."""
    own = _own.get(mat_a.device.type)
    if own is None:
        return torch._grouped_mm(mat_a, mat_b, offs=offs, out_dtype=out_dtype)
    kernel, keyset = own
    return kernel.call_boxed(keyset, mat_a, mat_b, offs=offs, out_dtype=out_dtype)


def note_call(mat_a: torch.Tensor, mat_b: torch.Tensor, shape: GroupedShape) -> None:
    """Record a MoE forward (the 2d3d form, what a shapes file's `op: grouped` entry is) being recorded."""
    if shape.form != "2d3d" or record.current() is None:
        return
    from ..shapes import GroupedEntry

    layout = ("t" if grouped_launch.is_col_major(mat_a) else "n") + (
        "t" if grouped_launch.is_col_major(mat_b) else "n"
    )
    record.note_grouped(
        GroupedEntry(
            groups=shape.groups,
            m=shape.m,
            n=shape.n,
            k=shape.k,
            dtype=TORCH_DTYPES[mat_a.dtype],
            layout=layout,
        )
    )


def grouped_mm(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    *,
    offs: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    backend: str | None = None,
) -> torch.Tensor:
    """Grouped matrix products as torch._grouped_mm (F.grouped_mm): 2-D x 3-D with `offs` over the rows
    (the MoE forward), 3-D x 3-D (batched), 2-D x 2-D with `offs` over K (out (E, M, N)), 3-D x 2-D with
    `offs` over the columns of mat_b. `bias`: one row per group, (E, N), or (N,) for 3-D x 2-D.
    backend: None (dispatch decides), "triton" (the kernels) or "torch" (torch._grouped_mm where the
    running torch takes the call, else a loop of torch.mm)."""
    if torch.compiler.is_compiling():  # checked while tracing; selected when the custom op runs
        _check_backend(backend)
        check_args(mat_a, mat_b, offs, bias, out_dtype, read_offs=False)
        return grouped_mm_op(mat_a, mat_b, offs, bias, out_dtype, backend)
    shape, selection = known_call(mat_a, mat_b, offs, bias, out_dtype, backend)
    note_call(mat_a, mat_b, shape)
    if (
        torch.is_grad_enabled()
        and (mat_a.requires_grad or mat_b.requires_grad or (bias is not None and bias.requires_grad))
    ):
        # Eager: an autograd.Function, not the custom op, whose Python dispatch cost a training step's
        # forward ~130 us a call (H200, 2026-12-03); the same forward and backward.
        return _GroupedProduct.apply(mat_a, mat_b, offs, bias, out_dtype, backend, shape, selection)
    return product(mat_a, mat_b, offs, bias, out_dtype or mat_a.dtype, shape, backend, selection=selection)


# The checks and the selection of a call signature, kept: a decode step calls the same few signatures
# again and again, and the host time of a call counts there as much as its kernel's. Dropped with
# dispatch's selections (tritonblas.dispatch.clear_cache()).
_calls: dict[tuple, tuple] = caches.new()


def known_call(mat_a, mat_b, offs, bias, out_dtype, backend, read_offs: bool = True) -> tuple:
    """(shape, selection) of a call: every argument check (the error naming the argument) and the
    selection, once per signature (None for backend "torch")."""
    key = _call_key(mat_a, mat_b, offs, bias, out_dtype, backend)
    known = _calls.get(key) if key is not None else None
    if known is None:
        read_at = caches.generation()
        _check_backend(backend)
        read_offs = read_offs and not torch.compiler.is_compiling()
        shape = check_args(mat_a, mat_b, offs, bias, out_dtype, read_offs=read_offs)
        known = (shape, None if backend == "torch" else selection_for(mat_a, mat_b, shape, backend))
        if key is not None:
            caches.store(read_at, _calls, key, known)
    return known


def _check_backend(backend) -> None:
    if backend not in BACKENDS:
        raise ValueError(f"grouped_mm: backend must be None, 'triton' or 'torch', got {backend!r}")


def _call_key(mat_a, mat_b, offs, bias, out_dtype, backend) -> tuple | None:
    """The facts the checks and the selection read, for CUDA calls (CPU offs' values are checked per
    call); None: not kept."""
    try:
        if not mat_a.is_cuda or type(mat_a) is not torch.Tensor or type(mat_b) is not torch.Tensor:
            return None
        return (
            mat_a.shape,
            mat_a.stride(),
            mat_a.dtype,
            mat_a.device,
            mat_b.shape,
            mat_b.stride(),
            mat_b.dtype,
            mat_b.device,
            None if offs is None else (offs.shape, offs.dtype, offs.device),
            None if bias is None else (bias.shape, bias.dtype, bias.device),
            out_dtype,
            backend,
        )
    except (AttributeError, TypeError):
        return None


def selection_for(
    mat_a: torch.Tensor, mat_b: torch.Tensor, shape: GroupedShape, backend: str | None
) -> GroupedSelection:
    device = tensor_device_info(mat_a)
    key = key_of(shape, mat_a.dtype, grouped_launch.is_col_major(mat_a), grouped_launch.is_col_major(mat_b))
    return select(key, device, backend)


def product(
    mat_a,
    mat_b,
    offs,
    bias,
    out_dtype: torch.dtype,
    shape: GroupedShape,
    backend: str | None,
    like: torch.Tensor | None = None,
    selection: GroupedSelection | None = None,
) -> torch.Tensor:
    """The grouped product into a new tensor (`like`'s layout where given), by the selected backend."""
    if backend != "torch" and selection is None:
        selection = selection_for(mat_a, mat_b, shape, backend)
    if backend == "torch" or selection.backend == "torch":
        result = vendor(mat_a, mat_b, offs, bias, out_dtype, shape)
        if like is None or result.stride() == output_strides(shape, like):
            return result
        return torch.empty_strided(
            shape.out_shape, output_strides(shape, like), dtype=out_dtype, device=mat_a.device
        ).copy_(result)
    out = torch.empty_strided(
        shape.out_shape, output_strides(shape, like), dtype=out_dtype, device=mat_a.device
    )
    if out.numel() == 0:
        return out
    if shape.groups == 0:  # no group: the whole output is the tail past the (absent) group ends
        return out.zero_()
    # fp32 honours torch's tf32 flag, as the dense kernels and torch.mm do
    precision = (
        "ieee" if mat_a.dtype == torch.float32 and not torch.backends.cuda.matmul.allow_tf32 else "tf32"
    )
    grouped_launch.run(
        mat_a, mat_b, out, bias, offs, shape, selection.config, tensor_device_info(mat_a).sm_count, precision
    )
    return out


def vendor(mat_a, mat_b, offs, bias, out_dtype: torch.dtype, shape: GroupedShape) -> torch.Tensor:
    """torch's own grouped GEMM where it takes the call (bf16, 16-byte strides), else the groups one
    by one with torch.mm (reads offs on the host, the tail zero); the bias added after, torch's op has
    none. Rows (columns) past the last group end are what torch's op leaves there: zeroing them cost
    a copy of the output (Qwen3-MoE's down projection through dispatch ran at 0.42x torch's op)."""
    try:
        out = own_grouped_mm(mat_a, mat_b, offs, out_dtype if out_dtype != mat_a.dtype else None)
    except (RuntimeError, AttributeError, TypeError):
        out = _loop(mat_a, mat_b, offs, shape)
    out = out.to(out_dtype)
    if bias is not None:
        out = out + _bias_rows(bias, offs, shape).to(out_dtype)
    return out


def _loop(mat_a, mat_b, offs, shape: GroupedShape) -> torch.Tensor:
    ends = [] if offs is None else offs.tolist()
    starts = [0, *ends[:-1]]
    out = torch.zeros(shape.out_shape, dtype=torch.float32, device=mat_a.device)
    for g in range(shape.groups):
        s, e = (starts[g], ends[g]) if offs is not None else (0, 0)
        if shape.form == "3d3d":
            out[g] = mat_a[g].float() @ mat_b[g].float()
        elif shape.form == "2d3d":
            out[s:e] = mat_a[s:e].float() @ mat_b[g].float()
        elif shape.form == "2d2d":
            out[g] = mat_a[:, s:e].float() @ mat_b[s:e].float()
        else:
            out[:, s:e] = mat_a[g].float() @ mat_b[:, s:e].float()
    return out


def _group_index(offs: torch.Tensor, extent: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(group of each position along the cut dimension, whether it is in a group), on the device."""
    pos = torch.arange(extent, device=offs.device, dtype=torch.int32)
    idx = torch.searchsorted(offs, pos, right=True)
    inside = idx < offs.shape[0]
    return idx.clamp(max=max(offs.shape[0] - 1, 0)), inside


def _bias_rows(bias: torch.Tensor, offs, shape: GroupedShape) -> torch.Tensor:
    """The bias broadcast to the output's shape, zero past the last group end."""
    if shape.form == "2d3d":
        idx, inside = _group_index(offs, shape.m)
        return bias[idx] * inside[:, None]
    if shape.form == "3d2d":
        return bias[None, :] * _group_index(offs, shape.n)[1][None, :]
    return bias[:, None, :]


# --- autograd and torch.compile: one custom op ----------------------------------------------------------


def _backward(ctx, grad: torch.Tensor):
    mat_a, mat_b, offs, bias = ctx.saved_tensors
    g = grad.to(mat_a.dtype)
    # Every form's gradients are grouped products of another form with the same offs: 2d3d's are 2d3d
    # and 2d2d, 2d2d's 3d2d and 2d3d, 3d2d's 2d2d and 3d2d, 3d3d's 3d3d.
    products = ((g, mat_b.transpose(-2, -1), offs, mat_a), (mat_a.transpose(-2, -1), g, offs, mat_b))
    grads = []
    for (x, y, o, like), needed in zip(products, ctx.needs_input_grad[:2], strict=True):
        grads.append(_gradient(x, y, o, like) if needed else None)
    grad_bias = (
        _bias_grad(grad, offs, ctx.form, bias) if bias is not None and ctx.needs_input_grad[3] else None
    )
    return grads[0], grads[1], None, grad_bias, None, None


def _gradient(x, y, offs, like: torch.Tensor) -> torch.Tensor:
    # (known_call: a training step's backward calls the same signatures each step, checked and selected once)
    shape, selection = known_call(x, y, offs, None, None, None, read_offs=False)
    return product(x, y, offs, None, like.dtype, shape, None, like=like, selection=selection)


def _bias_grad(grad: torch.Tensor, offs, form: str, bias: torch.Tensor) -> torch.Tensor:
    if form == "2d3d":  # per-group row sums: a 2d2d grouped product of a row of ones with the gradient
        ones = torch.ones(1, 1, dtype=grad.dtype, device=grad.device).expand(1, grad.shape[0])
        sums = product(
            ones,
            grad,
            offs,
            None,
            torch.float32,
            check_args(ones, grad, offs, None, None, read_offs=False),
            None,
        )
        return sums[:, 0, :].to(bias.dtype)
    if form == "3d2d":
        return grad.sum(0).to(bias.dtype)
    return grad.sum(1).to(bias.dtype)


def _setup_context(ctx, inputs, output) -> None:
    mat_a, mat_b, offs, bias, _, _ = inputs
    ctx.form = f"{mat_a.dim()}d{mat_b.dim()}d"
    ctx.save_for_backward(mat_a, mat_b, offs, bias)


class _GroupedProduct(torch.autograd.Function):
    """Eager grouped_mm with gradients: the custom op's forward (the call's checks and selection already
    made) and its backward, _backward."""

    @staticmethod
    def forward(ctx, mat_a, mat_b, offs, bias, out_dtype, backend, shape, selection):
        _setup_context(ctx, (mat_a, mat_b, offs, bias, out_dtype, backend), None)
        out_dtype = out_dtype or mat_a.dtype
        return product(mat_a, mat_b, offs, bias, out_dtype, shape, backend, selection=selection)

    @staticmethod
    def backward(ctx, grad):
        return (*_backward(ctx, grad), None, None)


# Registered when this module loads (the first use of tritonblas.grouped_mm), never inside a trace.
@torch.library.custom_op("tritonblas::grouped_mm", mutates_args=())
def grouped_mm_op(
    mat_a: torch.Tensor,
    mat_b: torch.Tensor,
    offs: torch.Tensor | None,
    bias: torch.Tensor | None,
    out_dtype: torch.dtype | None,
    backend: str | None,
) -> torch.Tensor:
    shape = check_args(mat_a, mat_b, offs, bias, out_dtype, read_offs=False)  # (checked by the caller)
    return product(mat_a, mat_b, offs, bias, out_dtype or mat_a.dtype, shape, backend)


@grouped_mm_op.register_fake
def _(mat_a, mat_b, offs, bias, out_dtype, backend):
    shape = check_args(mat_a, mat_b, offs, bias, out_dtype, read_offs=False)
    return mat_a.new_empty_strided(shape.out_shape, output_strides(shape), dtype=out_dtype or mat_a.dtype)


grouped_mm_op.register_autograd(_backward, setup_context=_setup_context)
