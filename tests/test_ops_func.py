"""torch.func's transforms over the public ops (vmap, grad, jacrev): the transforms wrap the tensors, which
the kernels cannot read, so the ops run torch's own op there (call.ops._launch), whose formulas every
transform knows; results equal torch's own op under the same transform."""

import pytest
import torch
import torch.nn.functional as F

import tritonblas

f32 = torch.float32


def _t(*shape, seed=0):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed), dtype=f32)


# (name, ours, torch's), each f(x, w, bias) with x (M, K), w (N, K), bias (N,)
OPS = [
    ("linear", lambda x, w, c: tritonblas.linear(x, w, c), lambda x, w, c: F.linear(x, w, c)),
    ("matmul", lambda x, w, c: tritonblas.matmul(x, w.t()), lambda x, w, c: torch.mm(x, w.t())),
    ("addmm", lambda x, w, c: tritonblas.addmm(c, x, w.t(), beta=0.5, alpha=2.0),
     lambda x, w, c: torch.addmm(c, x, w.t(), beta=0.5, alpha=2.0)),
]


@pytest.mark.parametrize("ours, theirs", [o[1:] for o in OPS], ids=[o[0] for o in OPS])
def test_vmap_over_a_batch_of_inputs(ours, theirs):
    xs, w, c = _t(3, 4, 8), _t(6, 8, seed=1), _t(6, seed=2)
    got = torch.func.vmap(lambda x: ours(x, w, c))(xs)
    assert torch.equal(got, torch.func.vmap(lambda x: theirs(x, w, c))(xs))


@pytest.mark.parametrize("ours, theirs", [o[1:] for o in OPS], ids=[o[0] for o in OPS])
def test_grad_and_per_sample_grads(ours, theirs):
    x, w, c = _t(4, 8), _t(6, 8, seed=1), _t(6, seed=2)

    def loss(f):
        return lambda w, x: f(x, w, c).square().sum()

    assert torch.equal(torch.func.grad(loss(ours))(w, x), torch.func.grad(loss(theirs))(w, x))
    per_sample = torch.func.vmap(torch.func.grad(loss(ours)), in_dims=(None, 0))(w, x[:, None])
    want = torch.func.vmap(torch.func.grad(loss(theirs)), in_dims=(None, 0))(w, x[:, None])
    assert per_sample.shape == (4, 6, 8) and torch.equal(per_sample, want)


def test_jacrev_of_a_linear():
    x, w, c = _t(2, 5), _t(3, 5, seed=1), _t(3, seed=2)
    got = torch.func.jacrev(lambda x: tritonblas.linear(x, w, c))(x)
    assert torch.equal(got, torch.func.jacrev(lambda x: F.linear(x, w, c))(x))


def test_outside_the_transforms_the_kernels_still_run(monkeypatch):
    from helpers.shapes import record_launches

    launches = record_launches(monkeypatch)
    x, w = _t(4, 8), _t(6, 8, seed=1)
    torch.func.vmap(lambda x: tritonblas.linear(x, w))(_t(3, 4, 8))
    assert not launches
    tritonblas.linear(x, w, backend="triton")
    assert len(launches) == 1
