"""torch.compile(fullgraph=True) traces through matmul/addmm/linear (one custom-op node, no graph
break), and torch.library.opcheck accepts the `tritonblas::gemm` registration."""

import pytest
import torch
from helpers.shapes import MID_SHAPE, assert_close, operands
from torch._dynamo.testing import CompileCounterWithBackend

import tritonblas
from tritonblas import GemmConfig
from tritonblas.call.core_op import config_from_list as _config_from_list
from tritonblas.call.core_op import config_to_list as _config_to_list
from tritonblas.call.core_op import gemm

M, N, K = MID_SHAPE
SK = GemmConfig(block_m=16, block_n=16, block_k=32, grid=5, streamk=True)


def _all_ops(a, b, bias, w):
    y = tritonblas.matmul(a, b, enable_streamk=True)
    y = y + tritonblas.addmm(bias, a, b, beta=0.5, alpha=-1.5, config=SK)
    return y + tritonblas.linear(a, w, bias)


def _inputs(dtype=torch.float32, requires_grad=False):
    a, b = operands(M, N, K, dtype, "tn")
    g = torch.Generator().manual_seed(2)
    bias, w = torch.randn(N, generator=g).to(dtype), torch.randn(N, K, generator=g).to(dtype)
    return [t.requires_grad_(requires_grad) for t in (a, b, bias, w)]


@pytest.fixture(autouse=True)
def _fresh_dynamo():
    torch._dynamo.reset()
    yield
    torch._dynamo.reset()


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_fullgraph_compile_matches_eager(backend):
    counter = CompileCounterWithBackend(backend)
    compiled = torch.compile(_all_ops, fullgraph=True, backend=counter)
    args = _inputs(torch.float16)
    got = compiled(*args)
    assert counter.frame_count == 1  # one graph: no break around the custom op
    assert torch.equal(got, _all_ops(*args))


def test_fullgraph_compile_backward_matches_eager():
    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(_all_ops, fullgraph=True, backend=counter)
    args, args_eager = _inputs(requires_grad=True), _inputs(requires_grad=True)
    compiled(*args).square().sum().backward()
    _all_ops(*args_eager).square().sum().backward()
    assert counter.frame_count == 1
    for t, e in zip(args, args_eager, strict=True):
        torch.testing.assert_close(t.grad, e.grad, rtol=1e-5, atol=1e-5)


def test_fullgraph_compile_with_out_and_dynamic_shapes():
    def f(a, b, out):
        return tritonblas.matmul(a, b, out=out)

    counter = CompileCounterWithBackend("aot_eager")
    compiled = torch.compile(f, fullgraph=True, backend=counter, dynamic=True)
    for m, n, k in [(33, 17, 100), (15, 100, 17)]:
        a, b = operands(m, n, k, torch.float32, "nn")
        out = torch.full((m, n), 5.0)
        assert compiled(a, b, out) is out
        assert_close(out, a @ b, a.double() @ b.double())
    assert counter.frame_count == 1  # the second shape reuses the symbolic graph


def test_inductor_fullgraph():
    # The real backend: inductor's C++ wrapper around the custom op (slow: it compiles C++ on CPU).
    compiled = torch.compile(_all_ops, fullgraph=True)
    args = _inputs()
    torch.testing.assert_close(compiled(*args), _all_ops(*args), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("with_bias, config", [(True, []), (False, _config_to_list(SK))])
def test_opcheck(dtype, with_bias, config):
    a, b, bias, _ = _inputs(dtype, requires_grad=dtype == torch.float32)
    torch.library.opcheck(gemm, (a, b, bias if with_bias else None, 0.5, 2.0, -1, config))


def test_every_config_field_survives_the_custom_op_schema():
    # The op takes the config as list[int]; a field it dropped would silently run another config.
    flags = {f: True for f, info in GemmConfig.model_fields.items() if info.annotation is bool}
    for config in (GemmConfig(block_m=16, block_n=32, block_k=64),
                   GemmConfig(block_m=64, block_n=16, block_k=32, group_m=3, num_warps=8, num_stages=5,
                              grid=7, **flags)):
        assert _config_from_list(_config_to_list(config)) == config


def test_the_custom_op_registers_on_first_need_even_while_tracing():
    """core_op (the custom op's registration, 0.14-0.24 s on the H200) is imported on the first call that
    needs it: never by an eager call, and still in one graph when the first call is torch.compile's
    trace (fresh processes: nothing imported it before)."""
    import subprocess
    import sys

    code = """
import sys, torch, tritonblas
from torch._dynamo.testing import CompileCounterWithBackend
a, b = torch.randn(24, 40, dtype=torch.float16), torch.randn(40, 16, dtype=torch.float16)
if sys.argv[1] == "eager":
    y = tritonblas.matmul(a, b)
    assert "tritonblas.call.core_op" not in sys.modules
else:
    counter = CompileCounterWithBackend("aot_eager")
    y = torch.compile(lambda a, b: tritonblas.matmul(a, b) * 2, fullgraph=True, backend=counter)(a, b) / 2
    assert counter.frame_count == 1 and "tritonblas.call.core_op" in sys.modules
assert torch.allclose(y.float(), a.float() @ b.float(), rtol=1e-2, atol=1e-2)
print("ok")
"""
    for mode in ("eager", "compile"):
        out = subprocess.run([sys.executable, "-c", code, mode], capture_output=True, text=True,
                             env={"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1"})
        assert out.returncode == 0 and out.stdout.strip().endswith("ok"), (mode, out.stderr[-2000:])
