"""Backward through matmul/addmm/linear against torch's gradients, and the `out=` contract."""

import pytest
import torch
import torch.nn.functional as F
from helpers.shapes import MID_SHAPE, assert_close, config_for_path, make_bias, operands

import tritonblas
from tritonblas import GemmConfig

M, N, K = MID_SHAPE


def _run_backward(fn, inputs: list[torch.Tensor | None], grad: torch.Tensor):
    """fn(*leaves) and the leaves' grads, on fresh leaf copies of `inputs` (None stays None)."""
    leaves = [None if t is None else t.detach().clone().requires_grad_() for t in inputs]
    y = fn(*leaves)
    y.backward(grad)
    return y, [None if t is None else t.grad for t in leaves]


def _check_grads(ours_fn, torch_fn, ref_fn, inputs, grad):
    y, ours = _run_backward(ours_fn, inputs, grad)
    y_t, theirs = _run_backward(torch_fn, inputs, grad)
    refs = ref_fn(*[None if t is None else t.double() for t in inputs], grad.double())
    assert_close(y.detach(), y_t.detach(), ref_fn.forward(*[None if t is None else t.double()
                                                                for t in inputs]))
    for name, o, t, r in zip("abc", ours, theirs, refs, strict=False):
        if r is not None:
            assert o is not None and o.dtype == t.dtype, name
            assert_close(o, t, r)


class _AddmmRef:
    def __init__(self, beta: float, alpha: float):
        self.beta, self.alpha = beta, alpha

    def forward(self, bias, a, b):
        out = self.alpha * (a @ b)
        return out if bias is None else out + self.beta * bias

    def __call__(self, bias, a, b, g):
        gbias = None if bias is None else self.beta * g.sum_to_size(bias.shape)
        return gbias, self.alpha * g @ b.t(), self.alpha * a.t() @ g


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
@pytest.mark.parametrize("path, layout", [("heuristic", "nn"), ("sk_shared", "tn"), ("persistent", "nt")])
def test_matmul_backward(dtype, path, layout):
    a, b = operands(M, N, K, dtype, layout)
    grad = torch.randn(M, N).to(dtype)
    config = config_for_path(path, M, N, K)
    ref = _AddmmRef(1.0, 1.0)
    _check_grads(lambda bias, a, b: tritonblas.matmul(a, b, config=config), lambda bias, a, b: a @ b, ref,
                 [None, a, b], grad)


@pytest.mark.parametrize("bias_kind, beta, alpha, dtype", [
    ("row", 0.5, -2.0, torch.float32),
    ("col", 1.0, 1.0, torch.float16),
    ("full", 2.0, 0.25, torch.float16),
    ("scalar0d", -1.0, 3.0, torch.float32),
    ("row2d", 0.0, 1.0, torch.float32),  # beta = 0: the input's grad is zeros, as torch gives
])
def test_addmm_backward(bias_kind, beta, alpha, dtype):
    a, b = operands(M, N, K, dtype, "nn")
    bias = make_bias(bias_kind, M, N, dtype)
    grad = torch.randn(M, N).to(dtype)
    _check_grads(lambda c, a, b: tritonblas.addmm(c, a, b, beta=beta, alpha=alpha, enable_streamk=True),
                 lambda c, a, b: torch.addmm(c, a, b, beta=beta, alpha=alpha), _AddmmRef(beta, alpha),
                 [bias, a, b], grad)


@pytest.mark.parametrize("with_bias", [True, False])
def test_linear_backward_with_3d_input(with_bias):
    x = torch.randn(3, 7, K)
    w = torch.randn(N, K)
    bias = torch.randn(N) if with_bias else None
    grad = torch.randn(3, 7, N)
    (y, (gx, gw, gb)) = _run_backward(lambda x, w, b: tritonblas.linear(x, w, b), [x, w, bias], grad)
    (y_t, (gx_t, gw_t, gb_t)) = _run_backward(F.linear, [x, w, bias], grad)
    x64, w64, g64 = x.double(), w.double(), grad.double()
    ref_y = x64 @ w64.t() + (0 if bias is None else bias.double())
    assert y.shape == (3, 7, N)
    assert_close(y.detach(), y_t.detach(), ref_y)
    assert_close(gx, gx_t, g64 @ w64)
    assert_close(gw, gw_t, g64.reshape(-1, N).t() @ x64.reshape(-1, K))
    if with_bias:
        assert_close(gb, gb_t, g64.sum((0, 1)))


@pytest.mark.parametrize("op", ["linear", "matmul"])
def test_double_backward_matches_torch(op):
    """create_graph=True: the gradients' GEMMs keep a graph of their own (the custom op), so a second
    backward through them gives torch's second-order gradients."""
    x, w = torch.randn(M, K), torch.randn(N, K)
    h = torch.randn(M, K)
    fns = {"linear": (tritonblas.linear, F.linear),
           "matmul": (lambda a, b: tritonblas.matmul(a, b.t()), lambda a, b: a @ b.t())}[op]
    grads = []
    for fn in fns:
        xl, wl = x.clone().requires_grad_(), w.clone().requires_grad_()
        (gx,) = torch.autograd.grad(fn(xl, wl).pow(2).sum(), xl, create_graph=True)
        (gx * h).sum().backward()
        grads.append(wl.grad)
    x64, w64, h64 = x.double(), w.double(), h.double()
    ref = 2 * ((x64 @ w64.t()).t() @ h64 + (h64 @ w64.t()).t() @ x64)
    assert_close(grads[0], grads[1], ref, k=K)


def test_only_inputs_that_need_grad_get_one():
    a, b = operands(M, N, K, torch.float32, "nn")
    a.requires_grad_()
    tritonblas.matmul(a, b).sum().backward()
    assert b.grad is None
    assert_close(a.grad, torch.ones(M, N) @ b.t(), torch.ones(M, N).double() @ b.double().t())


def test_no_grad_skips_autograd_graph():
    a, b = operands(M, N, K, torch.float32, "nn")
    a.requires_grad_()
    with torch.no_grad():
        y = tritonblas.matmul(a, b)
    assert not y.requires_grad and y.grad_fn is None


@pytest.mark.parametrize("who", ["a", "b", "input", "out"])
def test_out_refuses_autograd_like_torch(who):
    a, b = operands(M, N, K, torch.float32, "nn")
    bias = torch.randn(N)
    out = torch.full((M, N), 3.0)
    {"a": a, "b": b, "input": bias, "out": out}[who].requires_grad_()
    before = out.detach().clone()
    with pytest.raises(RuntimeError, match=r"addmm\(\): functions with out=\.\.\. arguments don't support "
                                           "automatic differentiation"):
        tritonblas.addmm(bias, a, b, out=out)
    # torch refuses the same call, with the same words
    with pytest.raises(RuntimeError, match="out=... arguments don't support automatic differentiation"):
        torch.addmm(bias, a, b, out=out)
    assert torch.equal(out.detach(), before)
    with torch.no_grad():  # without autograd recording, out= is fine
        assert tritonblas.addmm(bias, a, b, out=out) is out
    assert_close(out.detach(), torch.addmm(bias, a, b).detach(), bias.double() + a.double() @ b.double())


def _outs(m: int, n: int, dtype: torch.dtype) -> dict[str, torch.Tensor]:
    return {
        "contiguous": torch.full((m, n), 9.0, dtype=dtype),
        "column_major": torch.full((n, m), 9.0, dtype=dtype).t(),
        "strided_slice": torch.full((m, 3 * n), 9.0, dtype=dtype)[:, 1::3],
    }


@pytest.mark.parametrize("out_kind", ["contiguous", "column_major", "strided_slice"])
@pytest.mark.parametrize("op, config", [
    ("matmul", None),
    ("addmm", GemmConfig(block_m=16, block_n=16, block_k=32, grid=5, streamk=True)),
    ("addmm", GemmConfig(block_m=32, block_n=16, block_k=16, grid=2)),
])
def test_out_is_written_in_place_and_returned(out_kind, op, config):
    a, b = operands(M, N, K, torch.float16, "tn")
    bias = torch.randn(M, 1).half()
    out = _outs(M, N, torch.float16)[out_kind]
    base = out._base if out._base is not None else out
    untouched = base.clone()
    if op == "matmul":
        result, expect, ref = tritonblas.matmul(a, b, out=out, config=config), a @ b, a.double() @ b.double()
    else:
        result = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, out=out, config=config)
        expect = torch.addmm(bias, a, b, beta=0.5, alpha=2.0)
        ref = 0.5 * bias.double() + 2.0 * (a.double() @ b.double())
    assert result is out
    assert_close(out, expect, ref)
    # Nothing outside out's elements changed (the gaps of a strided out keep their values).
    mask = torch.ones_like(base, dtype=torch.bool)
    mask.as_strided(out.shape, out.stride(), out.storage_offset()).fill_(False)
    assert torch.equal(base[mask], untouched[mask])


def test_out_for_empty_and_k0_problems():
    out = torch.full((4, 0), 1.0)
    assert tritonblas.matmul(torch.randn(4, 3), torch.randn(3, 0), out=out) is out
    out = torch.full((4, 5), 1.0)
    bias = torch.randn(5)
    assert tritonblas.addmm(bias, torch.randn(4, 0), torch.randn(0, 5), beta=3.0, out=out) is out
    assert torch.equal(out, (3.0 * bias).expand(4, 5))


def test_a_kernel_left_to_graph_capture_runs_eager_grad_calls_through_torchs_autograd(capture_only):
    """A plan whose kernel wins under graph capture only (eager_vendor): its first call launches the
    kernel through the library's Function (compiled and loaded for a later capture), every later eager
    call needing grad is torch's op with torch's own autograd node."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 16, generator=g, requires_grad=True)
    w = torch.randn(12, 16, generator=g, requires_grad=True)
    first, later = tritonblas.linear(x, w), tritonblas.linear(x, w)
    assert "_Gemm" in type(first.grad_fn).__name__
    assert type(later.grad_fn) is type(F.linear(x, w).grad_fn)
    grads = torch.autograd.grad(later.sum(), [x, w])
    for got, ref in zip(grads, torch.autograd.grad(F.linear(x, w).sum(), [x, w]), strict=True):
        torch.testing.assert_close(got, ref)
        assert got.stride() == ref.stride()


@pytest.mark.parametrize("op", ["linear", "matmul", "addmm"])
def test_where_dispatch_picks_torch_autograd_is_torchs(op, torch_picked):
    """Dispatch's torch pick needing grad runs torch's op with torch's own autograd node (no Python
    Function to apply and run backward: issue 34's host cost); a pinned backend="torch" keeps ours.
    Values, gradients and their layouts are torch's, first and second order."""
    g = torch.Generator().manual_seed(0)
    x = torch.randn(6, 5, 16, generator=g, requires_grad=True)
    w = torch.randn(12, 16, generator=g, requires_grad=True)
    bias = torch.randn(12, generator=g, requires_grad=True)
    a, b = x[0], w.t()
    ours_fn, torch_fn = {
        "linear": (lambda **kw: tritonblas.linear(x, w, bias, **kw), lambda: F.linear(x, w, bias)),
        "matmul": (lambda **kw: tritonblas.matmul(a, b, **kw), lambda: torch.mm(a, b)),
        "addmm": (lambda **kw: tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, **kw),
                  lambda: torch.addmm(bias, a, b, beta=0.5, alpha=2.0)),
    }[op]
    ours, theirs = ours_fn(), torch_fn()
    assert type(ours.grad_fn) is type(theirs.grad_fn)
    pinned = ours_fn(backend="torch").grad_fn  # (an N-D linear's output is a view of the GEMM's)
    # (a custom Function's own node refuses next_functions under torch 2.11: asked only of the view's)
    assert "_Gemm" in type(pinned).__name__ or \
        any("_Gemm" in type(n).__name__ for n, _ in pinned.next_functions)
    inputs = [x, w, bias]
    first = torch.autograd.grad(ours.square().sum(), inputs, create_graph=True, allow_unused=True)
    want = torch.autograd.grad(theirs.square().sum(), inputs, create_graph=True, allow_unused=True)
    for got, ref in zip(first, want, strict=True):
        assert (got is None) == (ref is None)
        if got is not None:
            torch.testing.assert_close(got, ref)
            assert got.stride() == ref.stride()
    second = [torch.autograd.grad(sum(t.sum() for t in grads if t is not None), [w], allow_unused=True)[0]
              for grads in (first, want)]
    assert (second[0] is None) == (second[1] is None)
    if second[0] is not None:
        torch.testing.assert_close(*second)
