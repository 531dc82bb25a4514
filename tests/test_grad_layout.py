"""Gradients in their inputs' layout (torch's layout contract), with torch's values, for every op, layout
and bias kind: explicit calls (the custom op's backward; also under torch.compile) and transparent mode
(torch's derivative formulas, their GEMMs routed). A gradient whose strides differ from its parameter's
costs a copy per .backward() (AccumulateGrad's), so both the raw gradients of torch.autograd.grad and the
.grad that .backward() accumulates into (twice: the second accumulation adds in place) are compared with
torch's, stride for stride.
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from helpers.shapes import assert_close

import tritonblas

M, K, N = 33, 47, 29  # tiny, ragged in every dim


@dataclass(frozen=True)
class Case:
    op: str  # matmul, addmm, linear
    layouts: str  # per GEMM operand (a, b; linear: x, weight): n row-major, t column-major, s strided
    dtype: torch.dtype = torch.float32
    bias: str = "none"  # addmm's input / linear's bias: none, row, row2d, col, full, full_t, scalar0d, one
    beta: float = 1.0
    alpha: float = 1.0
    x3d: bool = False  # linear of a (3, M / 3, K) x

    @property
    def id(self) -> str:
        dt = str(self.dtype).removeprefix("torch.float")
        return (f"{self.op}-{self.layouts}-fp{dt}-{self.bias}-b{self.beta:g}-a{self.alpha:g}"
                + ("-3d" if self.x3d else ""))


H, F32 = torch.float16, torch.float32
CASES = [
    *(Case("matmul", lay) for lay in ("nn", "nt", "tn", "tt", "ss")),
    Case("matmul", "nt", H), Case("matmul", "tn", H),
    Case("addmm", "nn", F32, "row", 0.5, -2.0),
    Case("addmm", "tt", H, "row2d"),
    Case("addmm", "nt", F32, "col"),
    Case("addmm", "tn", H, "full", 0.5, 1.5),
    Case("addmm", "tt", F32, "full_t"),
    Case("addmm", "nt", H, "scalar0d", -1.0, 3.0),
    Case("addmm", "tn", F32, "one"),
    Case("addmm", "nn", F32, "row", 0.0),  # beta = 0: zeros for the input, as torch gives
    *(Case("linear", lay) for lay in ("nn", "nt", "tn", "tt")),
    Case("linear", "nn", H, "row"), Case("linear", "tt", F32, "row"),
    Case("linear", "nn", F32, "row", x3d=True), Case("linear", "nt", H, x3d=True),
]


def _operand(rows: int, cols: int, layout: str, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor:
    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g).to(dtype)

    if layout == "s":  # no unit stride: torch's backward falls back to row-major
        return rand(rows, 2 * cols)[:, ::2]
    return rand(rows, cols) if layout == "n" else rand(cols, rows).t()


def _bias(kind: str, dtype: torch.dtype, g: torch.Generator) -> torch.Tensor | None:
    shapes = {"none": None, "row": (N,), "row2d": (1, N), "col": (M, 1), "full": (M, N), "scalar0d": (),
              "one": (1,)}
    if kind == "full_t":
        return torch.randn(N, M, generator=g).to(dtype).t()
    shape = shapes[kind]
    return None if shape is None else torch.randn(shape, generator=g).to(dtype)


def leaves(case: Case, seed: int = 0) -> list[torch.Tensor | None]:
    """Fresh leaves requiring grad (same values for the same seed), each in its case's layout."""
    g = torch.Generator().manual_seed(seed)
    la, lb = case.layouts
    a = _operand(M, K, la, case.dtype, g)
    if case.x3d:
        a = a.reshape(3, M // 3, K) if la == "n" else torch.randn(K, 3, M // 3, generator=g).to(
            case.dtype).permute(1, 2, 0)
    b = _operand(N, K, lb, case.dtype, g) if case.op == "linear" else _operand(K, N, lb, case.dtype, g)
    tensors = [a, b, _bias(case.bias, case.dtype, g)]
    return [None if t is None else t.detach().requires_grad_() for t in tensors]


# (mm, addmm, linear) of torch and of the library
OPS = {"torch": (torch.mm, torch.addmm, F.linear),
       "explicit": (tritonblas.matmul, tritonblas.addmm, tritonblas.linear)}


def op_fn(case: Case, which: str):
    """The case's op as fn(a, b, bias): torch's or the library's."""
    mm, addmm, linear = OPS[which]
    if case.op == "matmul":
        return lambda a, b, _: mm(a, b)
    if case.op == "addmm":
        return lambda a, b, c: addmm(c, a, b, beta=case.beta, alpha=case.alpha)
    return linear


def run(case: Case, mode: str, step):
    """step(fn) under `mode`: torch's op, the library's explicit op (also compiled: AOT autograd traces
    the custom op's backward), or torch's op in transparent mode."""
    if mode == "compiled":
        torch._dynamo.reset()  # one code object for every case: past its recompile limit it would run eagerly
        return step(torch.compile(op_fn(case, "explicit"), backend="aot_eager", fullgraph=True))
    if mode != "transparent":
        return step(op_fn(case, mode))
    with tritonblas.enable():
        return step(op_fn(case, "torch"))


def _raw_grads(case: Case, mode: str, grad: torch.Tensor) -> list[torch.Tensor]:
    def step(fn):
        inputs = [t for t in leaves(case) if t is not None]
        return torch.autograd.grad(fn(*inputs, *([None] * (3 - len(inputs)))), inputs, grad)

    return run(case, mode, step)


def _accumulated_grads(case: Case, mode: str, weights: torch.Tensor) -> tuple[list[torch.Tensor], list]:
    """.grad after two .backward(): of y.sum() (an expanded, stride-0 grad of y), then of (y * weights).sum();
    and the strides of each gradient handed to AccumulateGrad (a leaf's hook sees it first), which
    copies one whose strides differ from its leaf's."""
    def step(fn):
        inputs = [t for t in leaves(case) if t is not None]
        handed = [[] for _ in inputs]  # per leaf: the order of backward nodes may differ from torch's
        for t, seen in zip(inputs, handed, strict=True):
            t.register_hook(lambda g, seen=seen: seen.append(g.stride()))
        args = [*inputs, *([None] * (3 - len(inputs)))]
        fn(*args).sum().backward()
        (fn(*args) * weights).sum().backward()
        return [t.grad for t in inputs], handed

    return run(case, mode, step)


def _double(case: Case) -> Case:
    return Case(case.op, case.layouts, torch.float64, case.bias, case.beta, case.alpha, case.x3d)


def _compare(ours: list[torch.Tensor], theirs: list[torch.Tensor], refs: list[torch.Tensor],
             k: int) -> None:
    assert len(ours) == len(theirs) == len(refs)
    for i, (o, t, r) in enumerate(zip(ours, theirs, refs, strict=True)):
        assert (o.shape, o.stride(), o.dtype) == (t.shape, t.stride(), t.dtype), f"gradient {i}"
        assert_close(o, t, r, k=k)


def _out_shape(case: Case) -> tuple[int, ...]:
    return (3, M // 3, N) if case.x3d else (M, N)


@pytest.mark.parametrize("mode", ["explicit", "transparent", "compiled"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_raw_gradients_in_torchs_layout(case, mode):
    grad = torch.randn(_out_shape(case), generator=torch.Generator().manual_seed(2)).to(case.dtype)
    refs = _raw_grads(_double(case), "torch", grad.double())
    _compare(_raw_grads(case, mode, grad), _raw_grads(case, "torch", grad), refs, max(M, N))


@pytest.mark.parametrize("mode", ["explicit", "transparent"])
@pytest.mark.parametrize("case", CASES, ids=lambda c: c.id)
def test_accumulated_grad_keeps_the_leafs_layout(case, mode):
    weights = torch.randn(_out_shape(case), generator=torch.Generator().manual_seed(3)).to(case.dtype)
    refs, _ = _accumulated_grads(_double(case), "torch", weights.double())
    theirs, theirs_handed = _accumulated_grads(case, "torch", weights)
    ours, ours_handed = _accumulated_grads(case, mode, weights)
    _compare(ours, theirs, refs, max(M, N))
    assert ours_handed == theirs_handed
