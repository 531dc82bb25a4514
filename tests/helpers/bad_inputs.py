"""Hostile inputs that more than one test module tries: the op cases of tests/test_ops_errors.py (also
tried after a cached valid call) and the spoiled config files of tests/test_db_exchange.py. All are rows
of docs/reliability.md's table (tests/test_reliability_inputs.py checks the table lists them)."""

from __future__ import annotations

import pytest
import torch

import tritonblas
from helpers.shapes import ERROR_SHAPE
from tritonblas import GemmConfig

M, N, K = ERROR_SHAPE
f16 = torch.float16


def tensor(*shape, dtype=f16, device="cpu"):
    return torch.randn(*shape).to(dtype=dtype, device=device)


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
    ("input_too_long", lambda x, o: tritonblas.addmm(tensor(M + 1), x.a, x.b, out=o), ValueError,
     r"\binput of shape \(6,\) cannot be broadcast"),
    ("input_two_rows", lambda x, o: tritonblas.addmm(tensor(2, N), x.a, x.b, out=o), ValueError,
     r"\binput of shape \(2, 4\) cannot be broadcast"),
    ("input_3d", lambda x, o: tritonblas.addmm(tensor(1, M, N), x.a, x.b, out=o), ValueError,
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
    ("linear_bias_len", lambda x, o: tritonblas.linear(x.a, x.w, tensor(N + 1)), ValueError,
     r"\bbias has shape \(5,\)"),
    ("linear_weight_dtype", lambda x, o: tritonblas.linear(x.a, x.w.float()), TypeError,
     r"\bweight has dtype"),
    ("linear_bias_device", lambda x, o: tritonblas.linear(x.a, x.w, x.bias.to("meta")), ValueError,
     r"\bbias is on meta"),
    ("linear_config", lambda x, o: tritonblas.linear(x.a, x.w, config="fast"), TypeError,
     r"\bconfig must be"),
]


def assert_refused_and_untouched(x, call, exc, pattern) -> None:
    """call(x, x.out) raises `exc` matching `pattern`, and no tensor of `x` was written."""
    before = {name: t.clone() for name, t in vars(x).items()}
    with pytest.raises(exc, match=pattern):
        call(x, x.out)
    for name, t in before.items():  # out, and the operands that an overlapping out aliases
        assert torch.equal(getattr(x, name), t), name


def edit_json(data: dict, path: tuple, value) -> dict:
    """`data` with the item at `path` set to `value` (DELETE: removed; a callable: value(data))."""
    target = data
    for part in path[:-1]:
        target = target[part]
    if callable(value):
        value = value(data)
    if value is DELETE:
        del target[path[-1]]
    else:
        target[path[-1]] = value
    return data


DELETE = object()
# (id, path into the JSON, new value, what the error must say). The bad entry is the last one, so
# the earlier good entries prove that nothing of the file is imported.
BAD_EDITS = [
    ("unknown-entry-field", ("entries", 2, "evil"), "x", r"entries\[2\] \(48x66x32\): field 'evil'"),
    ("unknown-top-field", ("extra",), 1, "field 'extra'"),
    ("unknown-config-field", ("entries", 2, "config", "exec"), "rm", r"entries\[2\].*config\.exec"),
    ("missing-field", ("entries", 2, "median_ms"), DELETE, r"entries\[2\].*median_ms.*required"),
    # 256x256x256 tiles, 8 stages: megabytes of shared memory, no device has that.
    ("infeasible-config", ("entries", 2, "config"), {"block_m": 256, "block_n": 256, "block_k": 256,
                                                     "group_m": 8, "num_warps": 8, "num_stages": 8,
                                                     "streamk": False, "grid": None, "tma": False},
     r"entries\[2\].*infeasible on sm_90.*shared memory"),
    ("invalid-config", ("entries", 2, "config", "block_m"), 48, r"entries\[2\].*block_m.*powers of two"),
    ("absurd-size", ("entries", 2, "m"), 2**40, r"entries\[2\].*field 'm'.*less than or equal"),
    ("negative-time", ("entries", 2, "median_ms"), -1.0, r"entries\[2\].*median_ms.*greater than 0"),
    ("absurd-time", ("entries", 2, "median_ms"), 1e300, r"entries\[2\].*median_ms"),
    ("string-for-int", ("entries", 2, "k"), "32", r"entries\[2\].*field 'k'.*valid integer"),
    ("bad-dtype", ("entries", 2, "a_dtype"), "int4", r"entries\[2\].*a_dtype"),
    ("scales-on-plain", ("entries", 2, "scales"), "row", r"entries\[2\].*scales 'row' need operands of e4m3"),
    ("unknown-scales", ("entries", 2, "scales"), "blockwise", r"entries\[2\].*field 'scales'"),
    ("mixed-plain-dtypes", ("entries", 2, "b_dtype"), "bf16", r"entries\[2\].*fp16/bf16 need scales"),
    ("escape-in-host", ("entries", 2, "host"), "n\x1b[2J", r"entries\[2\].*host"),
    ("duplicate-entry", ("entries", 2), lambda d: {**d["entries"][0], "median_ms": 0.1},
     r"entries\[2\].*same problem and triton version as entries\[0\]"),
    ("count-mismatch", ("header", "count"), 4, "header count 4 != 3 entries"),
    ("unknown-arch", ("header", "arch"), "sm_99", "unknown arch 'sm_99'"),
    ("newer-file-schema", ("header", "schema_version"), 99, "schema_version 99 is not supported"),
    ("entries-not-a-list", ("entries",), {"a": 1}, "field 'entries'"),
]


# Files that are not JSON documents at all, each with the reason it is refused.
BAD_TEXTS = [
    ("truncated", lambda good: good[: len(good) // 2], "invalid JSON"),
    ("nan-time", lambda good: good.replace('"median_ms": 0.5,', '"median_ms": NaN,', 1), "median_ms"),
    ("duplicate-key", lambda good: good.replace('"arch": "sm_90"', '"arch": "sm_90", "arch": "sm_80"'),
     "duplicate key 'arch'"),
    ("deep-nesting", lambda good: "[" * 100_000 + "]" * 100_000, "invalid JSON"),
    ("not-an-object", lambda good: "[1, 2, 3]", "expected a JSON object with 'header' and 'entries'"),
    ("empty", lambda good: "", "invalid JSON"),
]
