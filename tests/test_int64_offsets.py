"""64-bit offsets: the host's choice (launch.needs_int64) at the 2**31 boundary, and the kernels' 64-bit
path, forced on tiny problems so that the interpreter runs it on every kernel path.

The sizes past 2**31 elements themselves run in the GPU suite (tests/test_gpu_large.py).
"""

import pytest
import torch
from helpers.shapes import check_case, record_launches

from tritonblas.launch import gemm as launch

LIMIT = launch.INT32_OFFSETS
SLACK = launch._OFFSET_SLACK


def _meta(rows: int, cols: int, transposed: bool = False) -> torch.Tensor:
    """A (rows, cols) tensor with no storage: only its shape and strides matter here."""
    if transposed:
        return torch.empty(cols, rows, device="meta").t()
    return torch.empty(rows, cols, device="meta")


def _reach(rows: int, cols: int) -> int:
    # Row-major (rows, cols): the last row past the edge by SLACK rows, the last column by SLACK.
    return 1 + (rows + SLACK - 1) * cols + (cols + SLACK - 1)


def _rows_reaching(cols: int, reach: int) -> int:
    """The most rows of `cols` columns whose reach stays below `reach`."""
    rows = (reach - cols - SLACK - 1) // cols - SLACK + 1
    assert _reach(rows, cols) < reach <= _reach(rows + 1, cols)
    return rows


@pytest.mark.parametrize("cols", [4096, 128256, 64, 1])
def test_the_boundary_is_2_to_the_31_elements_reached(cols):
    rows = _rows_reaching(cols, LIMIT)
    below, above = _meta(rows, cols), _meta(rows + 1, cols)
    assert launch.offset_reach(below) == _reach(rows, cols) < LIMIT
    assert launch.offset_reach(above) >= LIMIT
    assert not launch.needs_int64((below,))
    assert launch.needs_int64((above,))


@pytest.mark.parametrize("which", ["a", "b", "c", "bias"])
def test_any_one_tensor_past_the_boundary_widens_the_launch(which):
    small = {"a": _meta(64, 64), "b": _meta(64, 64), "c": _meta(64, 64), "bias": None}
    assert not launch.needs_int64(tuple(small.values()))
    # 17000 x 128256 (the logits) as each tensor in turn; a column-major view reaches as far.
    small[which] = _meta(17000, 128256, transposed=which == "b")
    assert launch.needs_int64(tuple(small.values()))


def test_problems_that_fit_keep_32_bit_offsets():
    # The 16000 x 128256 x 4096 fits (C: 2.05e9 elements); 4096^3 and a broadcast bias too.
    c = _meta(16000, 128256)
    assert launch.offset_reach(c) < LIMIT
    assert not launch.needs_int64((_meta(16000, 4096), _meta(4096, 128256), c, _meta(1, 128256)))
    bias = torch.empty(128256, device="meta").expand(16000, 128256)  # stride 0 along M
    assert launch.offset_reach(bias) < 2 * 128256 + 2 * SLACK


def test_the_stream_k_workspace_counts_too():
    tiny = (_meta(16, 16),)
    assert not launch.needs_int64(tiny, LIMIT - 1)
    assert launch.needs_int64(tiny, LIMIT)
    # 65536 programs of 256x128 partials: exactly 2**31 floats.
    assert launch.needs_int64(tiny, 65536 * 256 * 128)


@pytest.fixture
def forced_int64(monkeypatch):
    """Every launch takes the 64-bit path (a limit of one element), with no plan cached from before."""
    monkeypatch.setattr(launch, "INT32_OFFSETS", 1)
    monkeypatch.setattr(launch, "plans", {})
    return launch.plans


# (path, shape, layout, bias kind, scale): each kernel path once with a bias and a layout change, so
# the widened loads, K steps, epilogue, bias and Stream-K partials all run in 64 bits.
INT64_CASES = [
    ("persistent", (33, 17, 100), "nn", "row", "scaled"),
    ("persistent", (17, 33, 100), "tt", "full", "unit"),
    ("persistent", (100, 15, 17), "strided", "col", "scaled"),
    ("sk_shared", (15, 17, 127), "nt", "full_t", "scaled"),
    ("sk_mixed", (100, 33, 100), "tn", "row", "unit"),
    ("sk_mixed", (100, 33, 100), "strided", "expand_col", "scaled"),
    ("persistent_tma", (104, 40, 72), "nn", "row", "scaled"),
    ("sk_tma", (104, 40, 72), "nn", "full", "unit"),
    ("heuristic", (127, 33, 15), "nt", "scalar0d", "scaled"),  # K below one block: masked K step only
]


@pytest.mark.parametrize("path,shape,layout,bias_kind,scale", INT64_CASES,
                         ids=["-".join(map(str, c[:3])) for c in INT64_CASES])
def test_the_64_bit_path_is_right_on_every_kernel_path(forced_int64, monkeypatch, path, shape, layout,
                                                        bias_kind, scale):
    launches = record_launches(monkeypatch)
    check_case("addmm", "fp16", path, shape, layout, bias_kind, scale, launches)
    gemm_plans = [p for p in forced_int64.values() if "INT64" in p.constexprs]
    assert gemm_plans and all(p.constexprs["INT64"] for p in gemm_plans)


def test_the_32_bit_path_is_kept_below_the_boundary(monkeypatch):
    monkeypatch.setattr(launch, "plans", {})
    launches = record_launches(monkeypatch)
    check_case("addmm", "fp16", "sk_mixed", (100, 33, 100), "nn", "row", "unit", launches)
    assert [p.constexprs["INT64"] for p in launch.plans.values()] == [False]
