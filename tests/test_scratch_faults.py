"""Scratch survives a launch that raises (issue 33), in the interpreter: see tests/helpers/faults.py; the GPU
suite runs the same check on CUDA (tests/test_gpu.py)."""

import pytest
from helpers.faults import CASES, ERRORS, SHAPE, fault_then_every_path
from helpers.shapes import sk_plan

from tritonblas.launch import streamk as launch_streamk


@pytest.mark.parametrize("error", list(ERRORS))
@pytest.mark.parametrize("case", list(CASES))
def test_a_failed_launch_leaves_no_dirty_scratch(case, error, monkeypatch):
    fault_then_every_path(case, error, "cpu", monkeypatch)


@pytest.mark.parametrize("case", [c for c in CASES if CASES[c][0].streamk])
def test_the_stream_k_cases_split_tiles(case):
    # Else no counter would be in play, and the check above would hold without the fix.
    config = CASES[case][0]
    assert sk_plan(config, *SHAPE).splits > 1
    assert launch_streamk.streamk_workspace(config, *SHAPE, config.grid)[1] > 0
