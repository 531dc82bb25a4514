"""A launch that raises part way, for the interpreter (tests/test_scratch_faults.py) and the GPU suite
(tests/test_gpu.py): a call takes its scratch, a launch dirties it as a kernel stopped mid-way would
(counters set, partials and padded copies NaN) and raises; then no dirty buffer is in the pool and
every path gives torch's results (issue 33: the pooled workspace went back dirty, later calls NaN).
"""

from __future__ import annotations

import pytest
import torch

import tritonblas
from helpers.shapes import assert_close, reference
from tritonblas import GemmConfig
from tritonblas.launch import gemm as launch
from tritonblas.launch import scratch
from tritonblas.selection import dispatch

# fp16 33x17x100: A's leading dim (200 B) and B's (34 B) are not 16-byte multiples, so aligned_copy
# copies both; 16x16 tiles make 6 tiles, 4 programs split 2 of them 2 ways.
SHAPE = (33, 17, 100)
_BASE = dict(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2)
# name: (config, index of the call's launch that fails; earlier ones run for real)
CASES = {
    "streamk": (GemmConfig(**_BASE, streamk=True, grid=4), 0),  # mid fix-up: counters set
    "reduce": (GemmConfig(**_BASE, streamk=True, grid=4, reduce_kernel=True), 1),  # at the reduce kernel
    "copy": (GemmConfig(**_BASE, grid=2, aligned_copy=True), 2),  # at the GEMM, both copies done
    "copy_streamk": (GemmConfig(**_BASE, streamk=True, grid=4, aligned_copy=True), 1),  # at B's copy
}
# What a launch may raise: a compile error, out of memory, Ctrl-C.
ERRORS = {"compile_error": RuntimeError, "out_of_memory": torch.OutOfMemoryError,
          "interrupt": KeyboardInterrupt}


def _scratch_of(tensors: tuple) -> list[torch.Tensor]:
    """The scratch among a launch's tensors: the pad copy's buffer, the GEMM's workspace and counters,
    the reduce kernel's workspace (its first tensor)."""
    return {2: list(tensors[1:]), 3: list(tensors[:1])}.get(len(tensors), list(tensors[4:]))


def _dirty(t: torch.Tensor) -> None:
    t.fill_(1 if t.dtype == torch.int32 else float("nan"))  # a counter mid-fix-up, garbage partials


class FailingLaunch:
    """Stands in for launch.launch_plan: launches `fail_at` runs for real, then dirties every piece of
    scratch the call was handed and raises `error`."""

    def __init__(self, real, fail_at: int, error: type[BaseException]) -> None:
        self.real, self.fail_at, self.error = real, fail_at, error
        self.launches = 0
        self.dirtied: list[torch.Tensor] = []

    def __call__(self, plan, tensors, floats) -> None:
        self.dirtied += _scratch_of(tensors)
        if self.launches == self.fail_at:
            for t in self.dirtied:
                _dirty(t)
            raise self.error("injected fault")
        self.launches += 1
        self.real(plan, tensors, floats)


def _pooled_storages() -> set[int]:
    return {t.untyped_storage().data_ptr() for free in list(scratch.free_lists.values()) for buf in list(free)
            for t in (buf if isinstance(buf, tuple) else (buf,))}


def check_every_path(device: str) -> None:
    """Every case's config on SHAPE gives torch's result, and the pooled counters are all zero."""
    a = torch.randn(SHAPE[0], SHAPE[2], dtype=torch.float16).to(device)
    b = torch.randn(SHAPE[2], SHAPE[1], dtype=torch.float16).to(device)
    for name, (config, _) in CASES.items():
        assert_close(tritonblas.matmul(a, b, config=config), a @ b, reference(a, b), k=SHAPE[2]), name
    # The device as tensors name it ("cuda:0", not "cuda"): the pool key the library's launches use.
    assert not scratch.workspace(torch.empty(0, device=device).device, 0, 0)[1].any()


def fault_then_every_path(case: str, error: str, device: str, monkeypatch) -> None:
    """Every path once (scratch pooled, kernels compiled), the case's call failing part way, then
    every path again: the failed call's scratch is not in the pool, every result is torch's."""
    check_every_path(device)
    config, fail_at = CASES[case]
    a = torch.randn(SHAPE[0], SHAPE[2], dtype=torch.float16).to(device)
    b = torch.randn(SHAPE[2], SHAPE[1], dtype=torch.float16).to(device)
    failing = FailingLaunch(launch.launch_plan, fail_at, ERRORS[error])
    # A fresh plan: a prepared launch's first runs go through launch.launch_plan (later ones go on pointers
    # through the C launcher, where no fault can be injected).
    dispatch.clear_cache()
    with monkeypatch.context() as patch:
        patch.setattr(launch, "launch_plan", failing)
        with pytest.raises(ERRORS[error], match="injected fault"):
            tritonblas.matmul(a, b, config=config)
    assert failing.dirtied, "the failing launch was handed no scratch"
    dirty = {t.untyped_storage().data_ptr() for t in failing.dirtied}
    assert not dirty & _pooled_storages(), "a dirty buffer went back to the pool"
    check_every_path(device)
