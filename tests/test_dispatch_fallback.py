"""A config dispatch selected that triton cannot compile (out of shared memory where the predicate's
estimate said it fits) is reported once, never selected again for that problem, and the call goes on
with the next selection; every other error propagates untouched."""

import pytest
import torch
from triton.runtime.errors import OutOfResources

import tritonblas
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.call import run as call_run
from tritonblas.problem import Problem
from tritonblas.selection import dispatch, sources


def _failing_launch(monkeypatch, refuse):
    """call_run.launch_gemm raising OutOfResources for the configs `refuse` says no to; returns the log."""
    real, tried = call_run.launch_gemm, []

    def launch(a, b, c, bias, alpha, beta, config, sm_count, precision):
        tried.append(config)
        if refuse(config):
            raise OutOfResources(300000, 232448, "shared memory")
        return real(a, b, c, bias, alpha, beta, config, sm_count, precision)

    monkeypatch.setattr(call_run, "launch_gemm", launch)
    return tried


def test_uncompilable_selection_falls_back_to_the_next_once(fresh_dispatch, monkeypatch):
    a, b = torch.randn(33, 40).half(), torch.randn(40, 17).half()
    first = tritonblas.select(33, 17, 40, "fp16").config
    tried = _failing_launch(monkeypatch, lambda c: c == first)
    with pytest.warns(RuntimeWarning, match=first.short()):
        out = tritonblas.matmul(a, b)
    torch.testing.assert_close(out, a @ b, rtol=1e-2, atol=1e-2)
    second = tritonblas.select(33, 17, 40, "fp16").config
    assert tried == [first, second] and second != first
    tried.clear()
    tritonblas.matmul(a, b)  # no second warning, straight to the working config
    assert tried == [second]


def test_every_selection_uncompilable_is_a_clear_error_and_out_is_untouched(fresh_dispatch, monkeypatch):
    a, b = torch.randn(33, 40).half(), torch.randn(40, 17).half()
    out = torch.full((33, 17), 7.0).half()
    tried = _failing_launch(monkeypatch, lambda c: True)
    with pytest.warns(RuntimeWarning), \
            pytest.raises(RuntimeError, match="could not be compiled for 33x17x40"):
        tritonblas.matmul(a, b, out=out)
    assert len(set(tried)) == len(tried) == call_run.MAX_COMPILE_FALLBACKS + 1
    assert torch.equal(out, torch.full((33, 17), 7.0).half())


def test_other_launch_errors_propagate_without_fallback(fresh_dispatch, monkeypatch):
    def boom(*args):
        raise ValueError("boom")

    monkeypatch.setattr(call_run, "launch_gemm", boom)
    with pytest.raises(ValueError, match="boom"):
        tritonblas.matmul(torch.randn(8, 8).half(), torch.randn(8, 8).half())
    assert not sources.state.failed


def test_a_user_config_that_cannot_compile_is_not_replaced(fresh_dispatch, monkeypatch):
    config = tritonblas.select(33, 17, 40, "fp16").config
    _failing_launch(monkeypatch, lambda c: True)
    with pytest.raises(OutOfResources):
        tritonblas.matmul(torch.randn(33, 40).half(), torch.randn(40, 17).half(), config=config)
    assert (Problem(33, 17, 40, "fp16"), INTERPRETER_DEVICE) not in sources.state.failed


def test_scaled_mm_falls_back_through_the_same_path(fresh_dispatch, monkeypatch):
    """scaled_mm's run shares the plain ops' fall-back (call.run._fall_back): reported once, the next
    selection runs, the result right."""
    real, tried = call_run.launch_gemm, []
    a = torch.randn(33, 64).to(torch.float8_e4m3fn)
    b = torch.randn(48, 64).to(torch.float8_e4m3fn).t()
    sa, sb = torch.rand(33, 1) + 0.5, torch.rand(1, 48) + 0.5
    problem = Problem(33, 48, 64, "e4m3", "nt", "none", "fp32", scales="row")
    first = dispatch.select_problem(problem, device=INTERPRETER_DEVICE).config

    def launch(a, b, c, bias, alpha, beta, config, *rest):
        tried.append(config)
        if config == first:
            raise OutOfResources(300000, 232448, "shared memory")
        return real(a, b, c, bias, alpha, beta, config, *rest)

    monkeypatch.setattr(call_run, "launch_gemm", launch)
    with pytest.warns(RuntimeWarning, match=first.short()):
        out = tritonblas.scaled_mm(a, b, sa, sb, out_dtype=torch.float32)
    second = dispatch.select_problem(problem, device=INTERPRETER_DEVICE).config
    assert tried == [first, second] and second != first
    ref = (a.float() * sa) @ (b.float() * sb)
    torch.testing.assert_close(out, ref, rtol=1e-3, atol=1e-3)
