"""What the GEMM kernels are passed, in their signatures' order (kernels/persistent.py, streamk.py,
reduce.py, and the block-scaled and grouped Gluon kernels' leading arguments): the arguments around a
plan's integers and a scaled_mm launch's scales, written once for every launcher (launch.gemm's
launch_gemm, launch.prepared's launches through launch_plan and through triton's C launcher,
launch.native's C++ record, launch.blockscaled's and grouped.gluon's launches), each passing its own kind
of value (tensors, pointers, descriptors or their encodings, a record's slots). A new kernel parameter is
added here. (The Triton grouped kernel's arguments are named where grouped.launch plans them.)"""

from __future__ import annotations

import torch

# A scaled_mm launch's scales: (scale_a, scale_b), each fp32 and contiguous, one value or a vector along
# M (scale_a) / N (scale_b); None for every plain GEMM.
Scales = tuple[torch.Tensor, torch.Tensor] | None


def scale_modes(scales: Scales) -> tuple[int, int]:
    """The kernels' A_SCALE, B_SCALE: 0 no scale, 1 one value, 2 a vector (kernels/common.epilogue)."""
    if scales is None:
        return 0, 0
    return 1 if scales[0].numel() == 1 else 2, 1 if scales[1].numel() == 1 else 2


def scale_args(scales: Scales) -> tuple:
    """The scale pointers as kernel arguments: None for a plain GEMM (a constexpr to triton, so the plain
    kernels take no extra parameter and compile to the code they had)."""
    return (None, None) if scales is None else scales


# What comes before a plan's integers and what after (its constexprs last), as launch.gemm.launch_plan
# takes them.
def gemm_args(a: object, b: object, c: object, bias_or_c: object, workspace: tuple, alpha: object,
              beta: object, host: tuple, scales: tuple) -> tuple[tuple, tuple]:
    """The GEMM's (before, after) its plan's integers: the operands, the output, the bias (c's where there
    is none), Stream-K's partials and counters (() for none); alpha, beta, A's and B's host descriptors
    ((None, None) for none) and the scales (scale_args)."""
    return (a, b, c, bias_or_c, *workspace), (alpha, beta, *host, *scales)


def reduce_args(partials: object, c: object, bias_or_c: object, alpha: object, beta: object,
                scales: tuple) -> tuple[tuple, tuple]:
    """Stream-K's reduce kernel's (before, after) its plan's integers: the partials, the output, the bias
    (or c); alpha, beta and the scales."""
    return (partials, c, bias_or_c), (alpha, beta, *scales)


def block_args(a: object, b: object, c: object, bias_or_c: object, scale_a: object,
               scale_b: object) -> tuple:
    """kernels/blockscaled.py's arguments before its plan's integers: the operands, the output, the bias
    (c's where there is none) and the block scales."""
    return (a, b, c, bias_or_c, scale_a, scale_b)


def gluon_block_args(c: object, bias_or_c: object, scale_a: object, scale_b: object,
                     descriptors: tuple) -> tuple:
    """kernels/blockscaled_gluon.py's and scaled_gluon.py's arguments before their plans' integers: the
    output, the bias (or c), the scales, then the TMA descriptors of A, W and the output (objects, or a
    direct launch's encodings of them)."""
    return (c, bias_or_c, scale_a, scale_b, *descriptors)


def gluon_grouped_args(c: object, bias_or_c: object, offs: object, descriptors: tuple) -> tuple:
    """kernels/grouped_gluon.py's arguments before its plan's integers: the output, the bias (or c), the
    group ends, then the TMA descriptors of A, B and the output (objects, or their encodings)."""
    return (c, bias_or_c, offs, *descriptors)
