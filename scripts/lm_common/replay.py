"""A CPU stand-in for a CUDA graph, so the graph decoder's capture and replay run in CPU tests the way they
run on the GPU.

A CUDA graph replays the kernels its capture launched, on the tensors they touched then, with every
host-side value (Python ints, shapes, branches taken) frozen at capture time; only what lives in tensors
changes from one replay to the next. RecordedGraph does the same with the aten ops a call runs: capture()
records each op (the top-level ones, with their arguments as they were) and keeps its outputs as the graph's
fixed buffers; replay() runs the recorded ops again in order, writing each op's result into the buffer it
had at capture. A capture launches nothing on the GPU, so tensors that existed before it keep their values:
capture() puts back every one its ops wrote to. A host synchronization during capture (`.item()`, a
data-dependent shape) is refused, as CUDA capture refuses it."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

# Ops that read a device value on the host: a CUDA capture fails on them, so the emulation does too.
_HOST_SYNCS = ("aten::_local_scalar_dense", "aten::nonzero", "aten::equal", "aten::is_nonzero")


class _Recorder(TorchDispatchMode):
    def __init__(self, ops: list) -> None:
        super().__init__()
        self.ops = ops
        # id: (tensor, its value before the capture wrote to it)
        self.saved: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func._schema.name in _HOST_SYNCS:
            raise RuntimeError(f"{func._schema.name} during graph capture: a host synchronization, which a "
                               "CUDA graph cannot capture")
        for t in _written(func, args, kwargs):
            if id(t) not in self.saved:
                self.saved[id(t)] = (t, t.detach().clone())
        out = func(*args, **kwargs)  # ops it runs inside are below this mode: only the top level is recorded
        self.ops.append((func, args, kwargs, out))
        return out

    def restore(self) -> None:
        with torch.no_grad():
            for t, value in reversed(self.saved.values()):
                t.copy_(value)


def _written(func, args: tuple, kwargs: dict) -> list[torch.Tensor]:
    """The tensor arguments an op writes to (in-place and out= arguments, by its schema)."""
    out = []
    for i, arg in enumerate(func._schema.arguments):
        value = args[i] if i < len(args) else kwargs.get(arg.name)
        if isinstance(value, torch.Tensor) and arg.alias_info is not None and arg.alias_info.is_write:
            out.append(value)
    return out


class RecordedGraph:
    """torch.cuda.CUDAGraph's capture/replay contract on any device (see the module docstring)."""

    def __init__(self) -> None:
        self.ops: list[tuple[Any, tuple, dict, Any]] = []

    @contextlib.contextmanager
    def capture(self) -> Iterator[None]:
        if self.ops:
            raise RuntimeError("RecordedGraph: already captured")
        recorder = _Recorder(self.ops)
        try:
            with recorder:
                yield
        finally:
            recorder.restore()

    def replay(self) -> None:
        if not self.ops:
            raise RuntimeError("RecordedGraph: replay before capture")
        with torch.no_grad():
            for func, args, kwargs, captured in self.ops:
                fresh = func(*args, **kwargs)
                for buf, new in zip(tree_leaves(captured), tree_leaves(fresh), strict=True):
                    # an in-place op or a view already wrote into (or is) the buffer
                    if isinstance(buf, torch.Tensor) and not _same_memory(buf, new):
                        buf.copy_(new)


def _same_memory(a: torch.Tensor, b: torch.Tensor) -> bool:
    return (a.data_ptr() == b.data_ptr() and a.shape == b.shape and a.stride() == b.stride()
            and a.dtype == b.dtype)
