"""Decode-shaped and misaligned problems through the public ops (issue 16's test list), in the interpreter:
M = 1..3 (and N = 1..3, the tall-skinny side), odd N and K, operands sliced out of larger buffers so
their leading dim exceeds their width and their first element sits at an odd element offset, every
bias kind, both kernel families, with and without the aligned copy. Each case is checked against
float64 with torch's own error as the yardstick (shapes.assert_close), and reads its inputs in place
unless the config copies them on purpose."""

from __future__ import annotations

import pytest
import torch
from helpers.shapes import assert_close, make_bias, op_reference, pairwise, record_launches, run_op, same_view

from tritonblas import GemmConfig

# (M, N, K): skinny on either side, odd N and K (no dimension a multiple of 8), sizes <= 130.
SKINNY_SHAPES = [
    (1, 37, 33),  # decode GEMV, N and K odd
    (2, 129, 101),  # two rows; N one past a power of two
    (3, 65, 127),
    (1, 1, 95),  # a dot product
    (67, 3, 45),  # tall-skinny: N is the small side
]
# How the operands are laid out in memory: dense, or sliced out of a larger buffer at an odd offset
# (leading dim > width, first element 1-3 elements past the buffer's start), row- or column-major.
LAYOUTS = ("dense_nn", "dense_nt", "sliced_nn", "sliced_nt", "sliced_tn")
BIAS_KINDS = ("none", "scalar0d", "row", "col", "full", "expand_row", "full_t")
FAMILIES = ("persistent", "streamk")


def _sliced(rows: int, cols: int, dtype: torch.dtype, offset: int, g: torch.Generator) -> torch.Tensor:
    """A rows x cols row-major view into a (rows + 1) x (cols + 2 * offset + 1) buffer: one row down and
    `offset` elements in, so its leading dim exceeds its width and its first element is at an odd
    element offset from the buffer's start."""
    big = torch.randn(rows + 1, cols + 2 * offset + 1, generator=g).to(dtype)
    return big[1:, offset:offset + cols]


def skinny_operands(m: int, n: int, k: int, dtype: torch.dtype, layout: str):
    g = torch.Generator().manual_seed(m * 10007 + n * 101 + k)
    kind, ab = layout.split("_")

    def make(rows: int, cols: int, transposed: bool, offset: int) -> torch.Tensor:
        if kind == "dense":
            t = torch.randn(cols, rows, generator=g) if transposed else torch.randn(rows, cols, generator=g)
            return (t.t() if transposed else t).to(dtype)
        return _sliced(cols, rows, dtype, offset, g).t() if transposed else _sliced(rows, cols, dtype,
                                                                                    offset, g)

    return make(m, k, ab[0] == "t", 1), make(k, n, ab[1] == "t", 3)


def _config(family: str, copy: bool) -> GemmConfig:
    # 16x32 tiles: several N tiles and, with K split, several programs per tile on these sizes.
    return GemmConfig(block_m=16, block_n=32, block_k=16, num_warps=4, num_stages=2,
                      streamk=family == "streamk", grid=6 if family == "streamk" else None,
                      aligned_copy=copy, tma=copy)


CASES = pairwise({"shape": SKINNY_SHAPES, "layout": list(LAYOUTS), "bias": list(BIAS_KINDS),
                  "family": list(FAMILIES), "copy": [False, True], "dtype": ["fp16", "fp32"]},
                 # every K here is odd, so A's leading dim is never 16-byte aligned: a copy is allowed
                 lambda case: True)


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(
    f"{v[0]}x{v[1]}x{v[2]}" if isinstance(v, tuple) else str(v) for v in c.values()))
def test_skinny_and_misaligned_match_torch(case, monkeypatch):
    dtype = {"fp16": torch.float16, "fp32": torch.float32}[case["dtype"]]
    m, n, k = case["shape"]
    a, b = skinny_operands(m, n, k, dtype, case["layout"])
    bias = make_bias(case["bias"], m, n, dtype) if case["bias"] != "none" else None
    config = _config(case["family"], case["copy"])
    launches = record_launches(monkeypatch)
    op = "matmul" if bias is None else "addmm"
    ours, theirs = run_op(op, a, b, bias, 0.5, -1.5, config=config)
    assert_close(ours, theirs, op_reference(op, a, b, bias, 0.5, -1.5), k=k)
    (call,) = launches
    assert call.config == config
    if not case["copy"]:  # read in place: sliced, odd-offset views are not copied behind the config's back
        assert same_view(call.a, a) and same_view(call.b, b)


@pytest.mark.parametrize("m", [1, 2, 3])
def test_decode_linear_with_every_bias_kind(m):
    """F.linear at decode: x (M, K) with M = 1..3 against a sliced weight (N, K), odd N and K; the
    bias as linear takes it (row, a stride-0 expand, none), through dispatch with the kernels only."""
    n, k = 45, 77
    g = torch.Generator().manual_seed(m)
    x = torch.randn(m, k, generator=g).to(torch.float16)
    weight = _sliced(n, k, torch.float16, 2, g)
    for bias in (None, torch.randn(n, generator=g).to(torch.float16),
                 torch.randn(1, generator=g).to(torch.float16).expand(n)):
        ours, theirs = run_op("linear", x, weight.t(), bias, backend="triton")
        assert_close(ours, theirs, op_reference("linear", x, weight.t(), bias), k=k)
