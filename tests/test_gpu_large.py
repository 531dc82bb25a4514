"""GPU suite, sizes past 2**31 elements: an operand, the output, the bias or the Stream-K workspace
whose offsets no longer fit in 32 bits, on both families, TMA and pointer loads and the padded copy;
rows at the start, middle and end checked against float64.

Each case allocates up to ~10 GB; run alone or with few workers:
    TRITONBLAS_TEST_GPU=1 python -m pytest tests/test_gpu_large.py
"""

import pytest
import torch
from helpers.shapes import assert_close

import tritonblas
from tritonblas import GemmConfig
from tritonblas.device import interpreter_enabled
from tritonblas.launch import gemm as launch
from tritonblas.launch import streamk as launch_streamk

GPU = torch.cuda.is_available() and not interpreter_enabled()
# A selected config that triton refuses to compile falls back with a RuntimeWarning (issue 21): on the
# GPU suite that is a failure, so the suite counts them and the count must be zero.
pytestmark = [pytest.mark.gpu,
              pytest.mark.skipif(not GPU, reason="needs a CUDA GPU and TRITONBLAS_TEST_GPU=1"),
              pytest.mark.filterwarnings("error:.*could not be compiled:RuntimeWarning")]

BIG = 2**31


def _config(streamk: bool, tma: bool = False, copy: bool = False, grid: int | None = None,
            block_n: int = 128) -> GemmConfig:
    return GemmConfig(block_m=128, block_n=block_n, block_k=64, num_warps=8, num_stages=3, streamk=streamk,
                      tma=tma, aligned_copy=copy, grid=grid)


def _rand(*shape: int) -> torch.Tensor:
    return torch.randn(*shape, device="cuda", dtype=torch.bfloat16)


def _rows(m: int) -> list[int]:
    return sorted({0, 1, m // 2, m - 2, m - 1})


def _check_rows(out: torch.Tensor, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None,
                rows: list[int]) -> None:
    """Rows of out against float64 (K in chunks, so no float64 copy of a large B), with torch's error on
    the same rows as the allowance."""
    ref = torch.zeros(len(rows), b.shape[1], dtype=torch.float64, device="cuda")
    for k0 in range(0, a.shape[1], 8192):
        ref += a[rows, k0:k0 + 8192].double() @ b[k0:k0 + 8192].double()
    theirs = a[rows] @ b
    if bias is not None:
        ref += bias[rows].double() if bias.dim() == 2 else bias.double()
        theirs = theirs + (bias[rows] if bias.dim() == 2 else bias)
    assert_close(out[rows], theirs, ref, k=a.shape[1])


def _free() -> None:
    launch.plans.clear()
    torch.cuda.empty_cache()


@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
@pytest.mark.parametrize("tma", [False, True], ids=["ptr", "tma"])
def test_output_past_2_to_the_31(streamk, tma):
    # Logits over Llama-3's vocabulary for 17000 tokens: C is 2.18e9 elements (faulted in 32 bits).
    m, n, k = 17000, 128256, 256
    a, b, bias = _rand(m, k), _rand(k, n), _rand(n)
    out = tritonblas.addmm(bias, a, b, config=_config(streamk, tma))
    _check_rows(out, a, b, bias, _rows(m))
    del a, b, bias, out
    _free()


@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
def test_full_bias_past_2_to_the_31(streamk):
    m, n, k = 17000, 128256, 64
    a, b, bias = _rand(m, k), _rand(k, n), _rand(m, n)
    out = tritonblas.addmm(bias, a, b, config=_config(streamk))
    _check_rows(out, a, b, bias, _rows(m))
    del a, b, bias, out
    _free()


@pytest.mark.parametrize("streamk,tma", [(False, False), (True, False), (False, True)],
                         ids=["persistent", "streamk", "persistent_tma"])
def test_a_past_2_to_the_31(streamk, tma):
    # A tall A: 140000 x 16384 is 2.29e9 elements (faulted with and without TMA).
    m, n, k = 140000, 64, 16384
    a, b = _rand(m, k), _rand(k, n)
    out = tritonblas.matmul(a, b, config=_config(streamk, tma, block_n=64))
    _check_rows(out, a, b, None, _rows(m))
    del a, b, out
    _free()


@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
def test_b_past_2_to_the_31(streamk):
    m, n, k = 64, 16384, 140000
    a, b = _rand(m, k), _rand(k, n)
    out = tritonblas.matmul(a, b, config=_config(streamk))
    _check_rows(out, a, b, None, _rows(m))
    del a, b, out
    _free()


def test_padded_copy_of_an_operand_past_2_to_the_31():
    # K = 16383 is not 16-byte aligned in bf16: A is copied into a padded 140000 x 16384 buffer.
    m, n, k = 140000, 64, 16383
    a, b = _rand(m, k), _rand(k, n)
    out = tritonblas.matmul(a, b, config=_config(False, tma=True, copy=True, block_n=64))
    _check_rows(out, a, b, None, _rows(m))
    del a, b, out
    _free()


def test_stream_k_workspace_of_2_to_the_31_floats():
    # 65536 programs, each one K iteration of a 256x128 tile: the partials fill 2**31 floats (8 GiB).
    m, n, k = 4096, 4096, 8192
    config = GemmConfig(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=3, streamk=True,
                        grid=65536)
    assert launch_streamk.program_count(config, m, n, k, 132) * 256 * 128 == BIG
    a, b = _rand(m, k), _rand(k, n)
    out = tritonblas.matmul(a, b, config=config)
    _check_rows(out, a, b, None, _rows(m))
    del a, b, out
    _free()


@pytest.mark.parametrize("span", [BIG - 1, BIG + 1], ids=["2^31-1", "2^31+1"])
@pytest.mark.parametrize("which", ["a", "out"])
def test_spans_at_the_boundary(span, which):
    """Two rows whose row stride puts the tensor's span at 2**31 -/+ 1 elements."""
    cols = 4096
    buf = torch.empty(span, device="cuda", dtype=torch.bfloat16)
    view = buf.as_strided((2, cols), (span - cols, 1))
    if which == "a":
        view.normal_()
        a, b = view, _rand(cols, 256)
        out = tritonblas.matmul(a, b)
    else:
        a, b = _rand(2, 512), _rand(512, cols)
        buf[:cols].fill_(float("nan"))
        out = tritonblas.matmul(a, b, out=view)
        assert out.data_ptr() == view.data_ptr()
    _check_rows(out, a, b, None, [0, 1])
    del buf, view, a, b, out
    _free()


def test_dispatch_picks_and_runs_a_problem_past_2_to_the_31():
    # Default dispatch (whatever it selects) on the first failing problem.
    m, n, k = 17000, 128256, 512
    a, b = _rand(m, k), _rand(k, n)
    out = tritonblas.matmul(a, b)
    _check_rows(out, a, b, None, _rows(m))
    del a, b, out
    _free()
