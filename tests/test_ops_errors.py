"""Every bad input raises a clear exception that names the argument, and writes nothing to `out`."""

import re

import pydantic
import pytest
import torch
from helpers.bad_inputs import CASES, TINY, assert_refused_and_untouched

import tritonblas
from tritonblas import GemmConfig


@pytest.mark.parametrize("call, exc, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_argument_and_writes_nothing(x, call, exc, pattern):
    assert_refused_and_untouched(x, call, exc, pattern)


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
