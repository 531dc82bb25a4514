"""Transparent mode's aten::_grouped_mm kernel: torch._grouped_mm (and F.grouped_mm, and transformers'
`experts_implementation="grouped_mm"`) through grouped dispatch with no code change.

Registered below autograd (torch's own derivative formula calls _grouped_mm again for the gradients,
which are routed too) for CUDA tensors, and CPU ones under the interpreter. A call whose arguments
grouped_mm refuses, or that torch's op runs better (dispatch's torch pick), goes to torch's own kernel:
one aten op per call, as without the mode. Nothing reads `offs` on the host.
"""

from __future__ import annotations

from .op import known_call, note_call, product, routing_off


def grouped_kernel(torch_grouped):
    """Our aten::_grouped_mm kernel over torch's own (`torch_grouped`, a boxed kernel)."""

    def grouped_mm(keyset, mat_a, mat_b, offs=None, bias=None, out_dtype=None):
        if not routing_off() and bias is None:  # (torch refuses a bias: its error, not ours)
            try:
                shape, selection = known_call(mat_a, mat_b, offs, None, out_dtype, None, read_offs=False)
            except (TypeError, ValueError):
                shape = selection = None
            if shape is not None:
                note_call(mat_a, mat_b, shape)
                if selection.backend != "torch":
                    return product(mat_a, mat_b, offs, None, out_dtype or mat_a.dtype, shape, None,
                                   selection=selection)
        return torch_grouped.call_boxed(keyset, mat_a, mat_b, offs=offs, bias=bias, out_dtype=out_dtype)

    return grouped_mm
