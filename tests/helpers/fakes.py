"""Fake benchmarks: config-dependent timings without a GPU, so tuning tests are about the tuner and
the orchestration, not the kernels."""

from __future__ import annotations

import os
import time
import zlib
from pathlib import Path

from tritonblas.tuning.protocol import Benchmark, BenchResult

FAIL_M = 19  # every candidate of this problem is a wrong result in the no-winner tests


def fake_ms(config) -> float:
    """A deterministic, config-dependent fake time in ms."""
    return 0.5 + (zlib.crc32(config.short().encode()) % 10_000) / 10_000


def candidate_calls(calls: list) -> list:
    """`calls` without the final match (tuner._rematch: the fastest kernel timed again beside torch.mm),
    which follows torch.mm's timing as a candidate, the last candidate's."""
    last = max((i for i, c in enumerate(calls) if c.backend == "torch"), default=len(calls) - 1)
    return calls[:last + 1]


class FakeBench(Benchmark):
    """Fake timings; `outcomes` maps a config to a BenchResult to return or an exception to raise."""

    def __init__(self, outcomes=None, sleep_s: float = 0.0, torch_ms: float | None = None) -> None:
        self.outcomes = outcomes or {}
        self.sleep_s = sleep_s
        self.torch_ms = torch_ms
        self.calls: list = []
        self.cutoffs: list = []

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        self.calls.append(config)
        self.cutoffs.append(cutoff_ms)
        if self.sleep_s:
            time.sleep(self.sleep_s)
        got = self.outcomes.get(config)
        if isinstance(got, BaseException):
            raise got
        if callable(got):
            return got()
        return got or BenchResult("ok", fake_ms(config), fake_ms(config) * 0.99, fake_ms(config) * 1.01, 1e-3)

    def baseline(self, problem, device):
        return self.torch_ms


class WorkerBench(Benchmark):
    """Fake, config-dependent timings. Picklable: it travels to the spawned workers.

    rendezvous: a folder where each worker process checks in on its first call and waits for the
    others, so every worker is known to take part whatever the start-up order."""

    def __init__(self, rendezvous: Path | None = None, workers: int = 2, crash_m: int | None = None,
                 interrupt_m: int | None = None) -> None:
        self.rendezvous, self.workers = rendezvous, workers
        self.crash_m, self.interrupt_m = crash_m, interrupt_m

    def _meet(self) -> None:
        (self.rendezvous / str(os.getpid())).touch()
        deadline = time.monotonic() + 120
        while len(list(self.rendezvous.iterdir())) < self.workers and time.monotonic() < deadline:
            time.sleep(0.05)

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        if self.rendezvous is not None:
            self._meet()
        if problem.m == self.crash_m:
            os._exit(3)
        if problem.m == self.interrupt_m:
            raise KeyboardInterrupt
        if problem.m == FAIL_M:
            return BenchResult("wrong_result", rel_error=1.0, note="fake: always wrong")
        ms = 1.0 + config.block_m / 1000 + config.num_stages / 100
        return BenchResult("ok", ms, ms, ms, 1e-3)

    def baseline(self, problem, device):
        return 2.0


def fake_scaled_mm(a, b, scale_a, scale_b, *, bias=None, out_dtype=None, use_fast_accum=False, out=None,
                   backend=None, config=None, drop_scale_b: bool = False):
    """tritonblas.scaled_mm's contract in torch (issue 36: the op is built on another branch): the fp32
    product of the dequantized operands plus the bias, saturated to an fp8 output's range, cast once.
    `config` is taken and ignored, so the tuner's and the bench's plumbing is what a test exercises;
    drop_scale_b=True is a wrong op, for the check that catches one."""
    import torch

    out_dtype = out_dtype or (torch.bfloat16 if a.dtype == torch.int8 else a.dtype)
    acc = (a.float() * scale_a) @ (b.float() * (1.0 if drop_scale_b else scale_b))
    if bias is not None:
        acc = acc + bias.float()
    if out_dtype.itemsize == 1:
        acc = acc.clamp(torch.finfo(out_dtype).min, torch.finfo(out_dtype).max)
    result = acc.to(out_dtype)
    return result if out is None else out.copy_(result)
