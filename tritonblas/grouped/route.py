"""Transparent mode's aten::_grouped_mm: torch._grouped_mm (and F.grouped_mm, and transformers'
`experts_implementation="grouped_mm"`) through grouped dispatch with no code change.

Registered below autograd (torch's own derivative formula calls _grouped_mm again for the gradients,
which are routed too) for CUDA tensors, and CPU ones under the interpreter: the C++ kernel of
native/route.cpp, which runs torch's own kernel for a key answered "torch" without Python and asks
`routed` otherwise, or where the C++ side is not built the Python kernel `grouped_kernel`. A call whose
arguments grouped_mm refuses, or that torch's op runs better (dispatch's torch pick), goes to torch's own
kernel: one aten op per call, as without the mode. Nothing reads `offs` on the host.
"""

from __future__ import annotations

import torch

from ..contract import ASK, TORCH
from .op import known_call, note_call, product


def routed(mat_a, mat_b, offs, out_dtype) -> tuple[torch.Tensor | None, int]:
    """A routed call without bias: (our output, or None where torch's kernel is to run; what holds for
    later calls of its key, contract.TORCH or ASK). A call grouped_mm's checks refuse is torch's for good
    (its checks read only what the key holds: torch's own kernel accepts it or raises its own error), as
    is dispatch's torch pick."""
    try:
        shape, selection = known_call(mat_a, mat_b, offs, None, out_dtype, None, read_offs=False)
    except (TypeError, ValueError):
        return None, TORCH
    note_call(mat_a, mat_b, shape)
    if selection.backend == "torch":
        return None, TORCH
    return product(mat_a, mat_b, offs, None, out_dtype or mat_a.dtype, shape, None, selection=selection), ASK


def grouped_kernel(torch_grouped):
    """The Python aten::_grouped_mm kernel over torch's own (`torch_grouped`, a boxed kernel), where the
    C++ side is not built."""

    def grouped_mm(keyset, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        if bias is None:  # (torch refuses a bias on its own kernels' terms: its error, not ours)
            out, _ = routed(mat_a, mat_b, offs, out_dtype)
            if out is not None:
                return out
        return torch_grouped.call_boxed(keyset, mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)

    return grouped_mm
