"""Compile tuning candidates in worker processes, so the tuner's own first launch of each one is a load
from triton's disk cache.

Why processes: compile threads in the tuner's process got through ~2 candidates a second on the H200
host however many there were (triton's front end holds the GIL), so on a cold cache a 4 s budget timed
8 of ~50 candidates and missed the exhaustive winner by 2.8-6% on 2 of 6 problems
(scripts/tune_quality.py, 2026-11-30).

A worker runs the candidate once through the public op on fresh random inputs of the same problem:
same shapes, strides, dtypes and 16-byte alignment, so triton specializes and caches exactly the binary
the tuner's launch will look up. A worker's failure is not reported: the tuner's own verification of
the candidate compiles it again and records the error properly.
"""

from __future__ import annotations

import concurrent.futures as cf
import multiprocessing as mp

import torch

from .config import GemmConfig, Problem

_inputs: dict[tuple, tuple] = {}  # in a worker: the last problem's operands, reused by its candidates


def _start_worker(device_index: int) -> None:
    torch.cuda.set_device(device_index)
    torch.empty(1, device="cuda")  # create the CUDA context now, not in the first candidate's time


def _warm() -> None:
    import tritonblas  # noqa: F401  (import cost paid before the first candidate)


def compile_candidate(problem: tuple, config: dict, device: str = "cuda") -> str | None:
    """Run `config` once on random inputs of `problem` (Problem fields); the error text if it fails."""
    import tritonblas

    from .benchmark import _TORCH, _bias, _operand

    p = Problem(*problem)
    try:
        if problem not in _inputs:
            _inputs.clear()
            dev = torch.device(device)
            gen = torch.Generator(device=dev).manual_seed(0)
            dtype = _TORCH[p.dtype]
            a = _operand(p.m, p.k, p.layout[0] == "t", dtype, dev, gen)
            b = _operand(p.k, p.n, p.layout[1] == "t", dtype, dev, gen)
            _inputs[problem] = (a, b, _bias(p.bias, p.m, p.n, dtype, dev, gen),
                                torch.empty(p.m, p.n, dtype=dtype, device=dev))
        a, b, bias, out = _inputs[problem]
        cfg = GemmConfig(**config)
        if bias is None:
            tritonblas.matmul(a, b, out=out, config=cfg)
        else:
            tritonblas.addmm(bias, a, b, out=out, config=cfg)
        if out.is_cuda:
            torch.cuda.synchronize()
    except Exception as exc:  # reported by the tuner's own run of the candidate
        return f"{type(exc).__name__}: {exc}"[:300]
    return None


class CompilePool:
    """Worker processes bound to one GPU, started at construction so their start-up (import, CUDA
    context) overlaps the tuner's own set-up."""

    def __init__(self, workers: int, device_index: int) -> None:
        self.workers, self.device_index = workers, device_index
        self._pool = cf.ProcessPoolExecutor(max_workers=workers, mp_context=mp.get_context("spawn"),
                                            initializer=_start_worker, initargs=(device_index,))
        for _ in range(workers):
            self._pool.submit(_warm)

    def submit(self, problem: Problem, config: GemmConfig) -> cf.Future:
        fields = (problem.m, problem.n, problem.k, problem.dtype, problem.layout, problem.bias,
                  problem.out_dtype)
        return self._pool.submit(compile_candidate, fields, config.model_dump())

    def close(self) -> None:
        self._pool.shutdown(wait=False, cancel_futures=True)
