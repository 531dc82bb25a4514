"""The vectorization hints the host hands the pointer K loop (A_DIV/B_DIV) must be true claims: a false
hint makes vectorized loads read wrong addresses on a GPU, which the interpreter cannot show."""

import pytest
import torch

from tritonblas.launch.gemm import _pow2_divisor, _vector_divisor


def _col(rows: int, cols: int, lead: int) -> torch.Tensor:
    """A rows x cols column-major view whose columns are `lead` elements apart."""
    return torch.empty(cols, lead)[:, :rows].t()


def _row(rows: int, cols: int, lead: int) -> torch.Tensor:
    return torch.empty(rows, lead)[:, :cols]


# (operand, wrapped dim: 0 for A's M, 1 for B's N, expected divisor)
CASES = {
    "A row-major, lead 1000": (_row(1000, 1000, 1000), 0, 8),
    "A row-major, lead 4095": (_row(127, 4095, 4095), 0, 1),
    "A row-major, lead 1024, M odd": (_row(127, 1024, 1024), 0, 16),  # M is not A's contiguous axis
    "A col-major, lead 1000, M 1000": (_col(1000, 64, 1000), 0, 8),
    "A col-major, lead 1008, M 1004": (_col(1004, 64, 1008), 0, 4),  # M limits the run along M
    "A col-major, lead 128, M 127": (_col(127, 64, 128), 0, 1),
    "B row-major, lead 1008, N 1004": (_row(64, 1004, 1008), 1, 4),
    "B row-major, lead 4097": (_row(64, 4097, 4097), 1, 1),
    "B col-major, lead 1000, N odd": (_col(1000, 33, 1000), 1, 8),  # N is not B's contiguous axis
}


@pytest.mark.parametrize("name", list(CASES))
def test_vector_divisor(name):
    t, wrapped_dim, expected = CASES[name]
    assert _vector_divisor(t, wrapped_dim) == expected


@pytest.mark.parametrize("extent", [1, 2, 8, 24, 100, 127, 1000, 1004, 4096])
@pytest.mark.parametrize("block", [16, 64, 128])
def test_wrapped_index_hint_holds(extent, block):
    # The kernel's claim for wrapped_index(pid, extent, BLOCK, DIV): every aligned run of DIV indices
    # is contiguous and starts at a multiple of DIV, for every program along the axis.
    div = _pow2_divisor(extent)
    for pid in range(-(-extent // block)):
        idx = [(pid * block + i) % extent for i in range(block)]
        for start in range(0, block, div):
            run = idx[start:start + div]
            assert run[0] % div == 0, (pid, start, run)
            assert run == list(range(run[0], run[0] + div)), (pid, start, run)
