"""The tensor-descriptor (TMA) K loop, emulated by the interpreter: every layout on aligned ragged
shapes, the pointer fallback for views descriptors cannot take, and the feasibility check."""

import pytest
import torch
from helpers.shapes import TMA_SHAPES, assert_close, operands, record_launches, reference, run_op

import tritonblas
from tritonblas import GemmConfig
from tritonblas.launch import gemm as launch


def _config(streamk: bool) -> GemmConfig:
    return GemmConfig(block_m=32, block_n=32, block_k=32, grid=3, streamk=streamk, tma=True)


@pytest.fixture
def launches(monkeypatch):
    return record_launches(monkeypatch)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32], ids=["fp16", "fp32"])
@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("shape", TMA_SHAPES, ids=lambda s: "x".join(map(str, s)))
def test_tma_every_layout(shape, layout, streamk, dtype, launches):
    m, n, k = shape
    a, b = operands(m, n, k, dtype, layout)
    bias = torch.randn(m, 1).to(dtype)
    ours, theirs = run_op("addmm", a, b, bias, 0.5, 2.0, config=_config(streamk))
    assert_close(ours, theirs, reference(a, b, bias, 0.5, 2.0))
    (call,) = launches
    assert call.config.tma
    # Both operands qualify, so the descriptor loop (not the pointer fallback) ran.
    assert launch.tma_ready(call.a) == (True, layout[0] == "t")
    assert launch.tma_ready(call.b) == (True, layout[1] == "t")


def _offset_by_one_column(m, n, k, dtype):
    a = torch.randn(m, k + 1).to(dtype)[:, 1:]  # base 2 or 4 bytes past an aligned address
    return a, torch.randn(k, n).to(dtype)


@pytest.mark.parametrize("make", [
    lambda m, n, k, dt: operands(m, n, k, dt, "strided"),  # no unit stride at all
    _offset_by_one_column,  # misaligned base address
], ids=["strided", "misaligned_base"])
@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
def test_views_descriptors_cannot_take_fall_back_to_pointers(make, streamk, launches):
    m, n, k = TMA_SHAPES[0]
    a, b = make(m, n, k, torch.float16)
    ours, theirs = run_op("matmul", a, b, None, config=_config(streamk))
    assert_close(ours, theirs, reference(a, b))
    assert not launch.tma_ready(launches[0].a)[0]


def test_tma_config_refused_for_unaligned_leading_dims():
    a, b = operands(15, 17, 33, torch.float16, "nn")
    with pytest.raises(ValueError, match=r"config .* tma .*not feasible.*tma.*16 bytes"):
        run_op("matmul", a, b, None, config=_config(False))


def test_tma_config_checked_against_the_actual_layout():
    # A is column-major with M = 104 (208-byte leading dim: aligned); K = 33 would only matter if A
    # were row-major. The problem is feasible for TMA, so the config must be accepted.
    a, b = operands(104, 40, 33, torch.float16, "tn")
    ours, theirs = run_op("matmul", a, b, None, config=_config(False))
    assert_close(ours, theirs, reference(a, b))


def _bytes(rows: int, cols: int, dtype: torch.dtype = torch.int8) -> torch.Tensor:
    """Random one-byte elements (every bit pattern of int8; fp8 as its bytes' view)."""
    return torch.randint(-128, 128, (rows, cols), dtype=torch.int8).view(dtype)


# Operands the aligned copy must reproduce exactly in a padded buffer: odd leading dims row- and
# column-major, a source with no unit stride at all, and an empty one; one- and two-byte elements (the
# word copy: rows starting at every byte of a word, rows shorter than a word, rows strided apart, a
# column-major operand) and the ones it leaves to the element copy (no unit stride, a pointer off a
# word).
COPY_SOURCES = {
    "row_major_odd_lead": lambda: torch.randn(37, 41),
    "col_major_odd_lead": lambda: torch.randn(41, 37).t(),
    "no_unit_stride": lambda: torch.randn(37, 82)[:, ::2],
    "fp16_odd_lead": lambda: torch.randn(7, 33).half(),
    "empty": lambda: torch.randn(0, 5),
    "int8_odd_lead": lambda: _bytes(37, 41),
    "e4m3_odd_lead": lambda: _bytes(13, 1001 % 128, torch.float8_e4m3fn),
    "e5m2_col_major": lambda: _bytes(29, 19, torch.float8_e5m2).t(),
    "int8_short_rows": lambda: _bytes(9, 3),
    "int8_strided_rows": lambda: _bytes(11, 50)[:, :37],
    "int8_no_unit_stride": lambda: _bytes(9, 34)[:, ::2],
    "int8_pointer_off_a_word": lambda: _bytes(9, 42)[:, 1:],
    "int8_empty": lambda: _bytes(0, 7),
    "bf16_even_lead": lambda: torch.randn(11, 30).bfloat16(),
    "fp16_col_major": lambda: torch.randn(13, 9).half().t(),
    "bf16_one_element_rows": lambda: torch.randn(6, 1).bfloat16(),
    "fp16_strided_rows": lambda: torch.randn(7, 41).half()[:, :37],
    "bf16_no_unit_stride": lambda: torch.randn(9, 34).bfloat16()[:, ::2],
}


@pytest.mark.parametrize("name", list(COPY_SOURCES))
def test_aligned_copy_is_exact_and_tma_ready(name):
    src = COPY_SOURCES[name]()
    copied = launch._aligned(src, 0)
    # (bytes compared: fp8 has no equality on the CPU, and NaN patterns would differ from themselves)
    assert copied is not src and torch.equal(copied.view(torch.int8) if src.element_size() == 1 else copied,
                                              src.view(torch.int8) if src.element_size() == 1 else src)
    assert launch.tma_ready(copied) == (True, launch._is_col_major(src))


WORD_COPIES = {"int8_odd_lead", "e4m3_odd_lead", "e5m2_col_major", "int8_short_rows", "int8_strided_rows",
               "fp16_odd_lead", "bf16_even_lead", "fp16_col_major", "bf16_one_element_rows",
               "fp16_strided_rows"}


@pytest.mark.parametrize("name", [n for n in COPY_SOURCES if "empty" not in n])
def test_one_byte_rows_are_copied_a_word_at_a_time(name, monkeypatch):
    kernels = []
    monkeypatch.setattr(launch, "launch_plan", lambda plan, *args: kernels.append(plan.kernel))
    launch._aligned(COPY_SOURCES[name](), 0)
    assert kernels == [launch._kernels()[4 if name in WORD_COPIES else 2]]


def test_aligned_copy_reuses_its_buffer_per_slot():
    # One padded buffer per operand slot, reused call after call (stream order makes that safe): A and B
    # of the same shape must not share one.
    a, b = torch.randn(9, 13), torch.randn(9, 13)
    first_a, first_b = launch._aligned(a, 0), launch._aligned(b, 1)
    assert first_a.data_ptr() != first_b.data_ptr()
    assert torch.equal(first_a, a) and torch.equal(first_b, b)
    again = launch._aligned(b, 0)
    assert again.data_ptr() == first_a.data_ptr() and torch.equal(again, b)


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
@pytest.mark.parametrize("streamk", [False, True], ids=["persistent", "streamk"])
def test_host_built_descriptors_match_device_built(layout, streamk, launches):
    """host_descriptors: the TMA descriptors come from the host as kernel arguments; the result is the
    device-built path's, bitwise (same boxes, same K loop, same sum order)."""
    m, n, k = TMA_SHAPES[1]
    a, b = operands(m, n, k, torch.float16, layout)
    bias = torch.randn(n).to(torch.float16)
    device_built = _config(streamk)
    host_built = GemmConfig(**{**device_built.model_dump(), "host_descriptors": True})
    ours, theirs = run_op("addmm", a, b, bias, 0.5, 2.0, config=host_built)
    assert_close(ours, theirs, reference(a, b, bias, 0.5, 2.0))
    assert torch.equal(ours, run_op("addmm", a, b, bias, 0.5, 2.0, config=device_built)[0])
    assert launches[0].config.host_descriptors and launch.tma_ready(launches[0].a)[0]


def test_host_descriptors_need_tma():
    from tritonblas.arch import INTERPRETER_DEVICE
    from tritonblas.config import config_supports
    from tritonblas.problem import Problem

    config = GemmConfig(block_m=32, block_n=32, block_k=32, host_descriptors=True)
    assert "need tma" in config_supports(config, Problem(64, 64, 64, "fp16"), INTERPRETER_DEVICE)


def test_host_descriptors_with_k_0_write_beta_times_bias():
    # K = 0 has no columns to describe: the plan takes the device-built path, which no iteration reads.
    config = GemmConfig(block_m=32, block_n=32, block_k=32, tma=True, host_descriptors=True)
    bias = torch.randn(40).to(torch.float16)
    out = tritonblas.addmm(bias, torch.randn(24, 0).to(torch.float16), torch.randn(0, 40).to(torch.float16),
                           beta=2.0, config=config)
    assert torch.equal(out, (2.0 * bias.float()).to(torch.float16).expand(24, 40))
