"""Every bad input raises a clear exception that names the argument, and writes nothing to `out`."""

import re
from types import SimpleNamespace

import pydantic
import pytest
import torch
from shapes import ERROR_SHAPE

import tritonblas
from tritonblas import GemmConfig

M, N, K = ERROR_SHAPE
f16 = torch.float16


def _t(*shape, dtype=f16, device="cpu"):
    return torch.randn(*shape).to(dtype=dtype, device=device)


@pytest.fixture
def x():
    """Valid operands, a sentinel-filled `out`, and a few bad tensors built from them."""
    a, b = _t(M, K), _t(K, N)
    return SimpleNamespace(a=a, b=b, bias=_t(N), out=torch.full((M, N), 7.0, dtype=f16),
                           w=_t(N, K))


TINY = GemmConfig(block_m=16, block_n=16, block_k=16)
HUGE = GemmConfig(block_m=256, block_n=256, block_k=256, num_stages=8, num_warps=8)

# (id, call(x, out), exception type, regex the message must match: it names the argument)
CASES = [
    ("a_rank", lambda x, o: tritonblas.matmul(x.a[0], x.b, out=o), ValueError, r"\ba must be 2-D"),
    ("b_rank", lambda x, o: tritonblas.matmul(x.a, x.b[None], out=o), ValueError, r"\bb must be 2-D"),
    ("a_not_tensor", lambda x, o: tritonblas.matmul(x.a.tolist(), x.b, out=o), TypeError,
     r"\ba must be a torch.Tensor"),
    ("inner_dims", lambda x, o: tritonblas.matmul(x.a, x.b[:-1], out=o), ValueError,
     r"inner dimensions.*\ba\b.*\bb\b"),
    ("b_other_device", lambda x, o: tritonblas.matmul(x.a, x.b.to("meta"), out=o), ValueError,
     r"\bb is on meta"),
    ("a_float64", lambda x, o: tritonblas.matmul(x.a.double(), x.b.double(), out=o), TypeError,
     r"\ba has unsupported dtype torch.float64"),
    ("a_int32", lambda x, o: tritonblas.matmul(x.a.int(), x.b.int(), out=o), TypeError,
     r"\ba has unsupported dtype torch.int32"),
    ("dtype_mismatch", lambda x, o: tritonblas.matmul(x.a, x.b.float(), out=o), TypeError,
     r"\bb has dtype torch.float32 but a has torch.float16"),
    ("out_shape", lambda x, o: tritonblas.matmul(x.a, x.b[:, :-1], out=o), ValueError,
     r"\bout has shape"),
    ("out_dtype", lambda x, o: tritonblas.matmul(x.a.float(), x.b.float(), out=o), TypeError,
     r"\bout has dtype"),
    ("out_device", lambda x, o: tritonblas.matmul(x.a.to("meta"), x.b.to("meta"), out=o), ValueError,
     r"\bout is on cpu"),
    ("out_not_tensor", lambda x, o: tritonblas.matmul(x.a, x.b, out=o.tolist()), TypeError,
     r"\bout must be a torch.Tensor"),
    ("out_is_a_view", lambda x, o: tritonblas.matmul(x.a, x.b, out=x.a[:, :N]), ValueError,
     r"\bout overlaps a\b"),
    ("out_is_b_view", lambda x, o: tritonblas.matmul(x.a, x.b, out=x.b[:M]), ValueError,
     r"\bout overlaps b\b"),
    ("out_is_input", lambda x, o: tritonblas.addmm(o, x.a, x.b, out=o), ValueError,
     r"\bout overlaps input"),
    ("out_expanded", lambda x, o: tritonblas.matmul(x.a, x.b, out=o[0].expand(M, N)), ValueError,
     r"\bout has internal overlap"),
    ("input_too_long", lambda x, o: tritonblas.addmm(_t(M + 1), x.a, x.b, out=o), ValueError,
     r"\binput of shape \(6,\) cannot be broadcast"),
    ("input_two_rows", lambda x, o: tritonblas.addmm(_t(2, N), x.a, x.b, out=o), ValueError,
     r"\binput of shape \(2, 4\) cannot be broadcast"),
    ("input_3d", lambda x, o: tritonblas.addmm(_t(1, M, N), x.a, x.b, out=o), ValueError,
     r"\binput of shape \(1, 5, 4\)"),
    ("input_dtype", lambda x, o: tritonblas.addmm(x.bias.float(), x.a, x.b, out=o), TypeError,
     r"\binput has dtype"),
    ("input_device", lambda x, o: tritonblas.addmm(x.bias.to("meta"), x.a, x.b, out=o), ValueError,
     r"\binput is on meta"),
    ("input_float64", lambda x, o: tritonblas.addmm(x.bias.double(), x.a, x.b, out=o), TypeError,
     r"\binput has unsupported dtype"),
    ("alpha_str", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, alpha="2", out=o), TypeError,
     r"\balpha must be a real number"),
    ("beta_none", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, beta=None, out=o), TypeError,
     r"\bbeta must be a real number"),
    ("enable_streamk_str", lambda x, o: tritonblas.matmul(x.a, x.b, enable_streamk="yes", out=o),
     TypeError, r"\benable_streamk must be None, True or False"),
    ("enable_streamk_int", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, enable_streamk=1, out=o),
     TypeError, r"\benable_streamk"),
    ("config_dict", lambda x, o: tritonblas.matmul(x.a, x.b, config={"block_m": 16}, out=o), TypeError,
     r"\bconfig must be a tritonblas.GemmConfig"),
    ("config_infeasible", lambda x, o: tritonblas.matmul(x.a, x.b, config=HUGE, out=o), ValueError,
     r"\bconfig (SK|P) .*not feasible.*shared memory"),
    ("config_infeasible_addmm", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, config=HUGE, out=o),
     ValueError, r"\bconfig .*not feasible"),
    ("linear_weight_rank", lambda x, o: tritonblas.linear(x.a, x.w[0]), ValueError,
     r"\bweight must be 2-D"),
    ("linear_features", lambda x, o: tritonblas.linear(x.a, x.w[:, :-1]), ValueError,
     r"\bx has 6 features.*weight"),
    ("linear_x_0d", lambda x, o: tritonblas.linear(x.a[0, 0], x.w), ValueError, r"\bx must have"),
    ("linear_bias_2d", lambda x, o: tritonblas.linear(x.a, x.w, x.bias[None]), ValueError,
     r"\bbias must be 1-D"),
    ("linear_bias_len", lambda x, o: tritonblas.linear(x.a, x.w, _t(N + 1)), ValueError,
     r"\bbias has shape \(5,\)"),
    ("linear_weight_dtype", lambda x, o: tritonblas.linear(x.a, x.w.float()), TypeError,
     r"\bweight has dtype"),
    ("linear_bias_device", lambda x, o: tritonblas.linear(x.a, x.w, x.bias.to("meta")), ValueError,
     r"\bbias is on meta"),
    ("linear_config", lambda x, o: tritonblas.linear(x.a, x.w, config="fast"), TypeError,
     r"\bconfig must be"),
]


@pytest.mark.parametrize("call, exc, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_argument_and_writes_nothing(x, call, exc, pattern):
    before = {name: t.clone() for name, t in vars(x).items()}
    with pytest.raises(exc, match=pattern):
        call(x, x.out)
    for name, t in before.items():  # out, and the operands that an overlapping out aliases
        assert torch.equal(getattr(x, name), t), name


def test_all_meta_tensors_are_refused(x):
    with pytest.raises(RuntimeError, match="device type 'meta'"):
        tritonblas.matmul(x.a.to("meta"), x.b.to("meta"))


def test_cpu_tensors_need_the_interpreter(x, monkeypatch):
    # device.interpreter_enabled reads the variable at call time.
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    before = x.out.clone()
    for call in (lambda: tritonblas.matmul(x.a, x.b, out=x.out),
                 lambda: tritonblas.addmm(x.bias, x.a, x.b, config=TINY),
                 lambda: tritonblas.linear(x.a, x.w)):
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            call()
    assert torch.equal(x.out, before)


@pytest.mark.parametrize("field, value", [("block_m", 24), ("block_k", 8), ("num_warps", 3),
                                          ("num_stages", 0), ("grid", 0), ("block_n", "32")])
def test_malformed_config_is_a_validation_error_naming_the_field(field, value):
    kw = {"block_m": 16, "block_n": 16, "block_k": 16, field: value}
    with pytest.raises(pydantic.ValidationError, match=re.escape(field)) as info:
        GemmConfig(**kw)
    assert isinstance(info.value, ValueError)


def test_unknown_config_field_is_refused():
    with pytest.raises(pydantic.ValidationError, match="blockm"):
        GemmConfig(block_m=16, block_n=16, block_k=16, blockm=32)
