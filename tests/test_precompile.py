"""Compile-ahead workers (tritonblas/precompile.py): the function a worker runs, here in-process on the
interpreter. (The process pool itself needs a GPU: tests/test_gpu.py.)"""

import pytest
import torch

from tritonblas import GemmConfig
from tritonblas.benchmark import GpuBenchmark, default_benchmark
from tritonblas.precompile import compile_candidate

GOOD = GemmConfig(block_m=16, block_n=16, block_k=16)


@pytest.mark.parametrize("bias", ["none", "row"])
def test_a_candidate_runs_on_inputs_of_its_problem(bias):
    assert compile_candidate((20, 24, 40, "fp16", "tn", bias, None), GOOD.model_dump(), "cpu") is None


def test_a_failing_candidate_gives_its_error_text_instead_of_raising():
    bad = GOOD.model_copy(update={"tma": True}).model_dump()  # K = 7: rows of 14 bytes, no descriptor
    message = compile_candidate((20, 24, 7, "fp16", "nn", "none", None), bad, "cpu")
    assert message is not None and "ValueError" in message


def test_no_compile_processes_without_a_gpu():
    assert not torch.cuda.is_available()
    assert GpuBenchmark(compile_processes=4)._procs is None
    assert default_benchmark() is not default_benchmark()  # interpreter: a fresh one per tuning call
