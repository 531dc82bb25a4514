"""Launching the Gluon kernels (kernels/blockscaled_gluon.py, scaled_gluon.py, grouped_gluon.py), one way
for the three: each takes three host TMA descriptors (A, B, the output), which its plan's `descs` describe
((shape, strides, box) of each). The first launch of a plan goes through triton (compiling, descriptors
as objects); later ones through triton's C launcher (launch.direct), the descriptors' encodings kept per
address, where that launcher was verified with these kernels (kernel-levers G9: ~30 us of host time a
call against ~40 and more through `run`).
"""

from __future__ import annotations

import functools
import threading
from collections.abc import Callable

import torch

from . import direct
from .gemm import Plan, current_device, descriptor, launch_plan

_threads = threading.local()


def context_current(index: int) -> None:
    """Make device `index`'s CUDA context current in this thread, once a thread: triton encodes a Gluon
    launch's descriptors on the host (cuTensorMapEncodeTiled), which fails in a thread that has not yet
    called the CUDA runtime ("invalid device context": the tuner's compile threads, 2026-12-04, H200).
    cudaMemGetInfo is such a call; a thread that is capturing a graph has its context already and makes
    none (a capture may refuse calls outside the stream)."""
    seen = getattr(_threads, "devices", None)
    if seen is None:
        seen = _threads.devices = set()
    if index not in seen and not torch.cuda.is_current_stream_capturing():
        torch.cuda.mem_get_info(index)
        seen.add(index)


@functools.cache
def direct_verified() -> bool:
    """Whether this triton's C launcher was run with the Gluon kernels' descriptors on the GPU: 3.6 and 3.9
    (H200, 2026-12-04: tests/test_gluon_grouped.py and tests/test_gpu_scaled.py, each result bit-equal to
    the first launch's); elsewhere `run` launches them."""
    import triton

    return triton.__version__.startswith(("3.6.", "3.9."))


def launch_gluon(plan: Plan, arguments: Callable[..., tuple], leading: tuple[torch.Tensor, ...],
                 operands: tuple[torch.Tensor, torch.Tensor, torch.Tensor],
                 descriptors: Callable[[], tuple]) -> None:
    """Launch `plan` (its `descs` the geometry of the descriptors over `operands`: A, B, the output)
    with arguments(*leading, descriptors) before its integers: `leading` the tensors the kernel takes
    by pointer, `descriptors()` the first launch's TMA descriptor objects (launch.arguments' Gluon lists).
    The output's device is the launch's."""
    index = operands[2].get_device()
    context_current(index)  # (encoding a descriptor needs the device's context)
    state = plan.state
    run = state.direct
    if run is not None and index == current_device():
        descs = tuple(x for slot, t in enumerate(operands) for x in run.descriptor(slot, t, t.data_ptr()))
        head = arguments(*(t.data_ptr() for t in leading), descs)
        run.launch(torch._C._cuda_getCurrentRawStream(index), (*head, *plan.ints, *state.constexpr_args))
        return
    first = state.compiled is None
    launch_plan(plan, arguments(*leading, descriptors()), ())
    # The launch that compiled the kernel tries its direct launch, once: later ones keep `run` where it
    # was refused (or this triton's launcher is not verified with these descriptors).
    if first and state.compiled is not None and direct_verified():
        state.direct = direct.make(state.compiled, plan.progs, plan.descs, descriptor)
