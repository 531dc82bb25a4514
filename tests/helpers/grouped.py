"""Grouped GEMM test cases (every form, dtype, layout, empty and ragged groups, bias) in one list, their
operands and the float64 reference, written apart from the library's own torch fallback."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from tritonblas.config import GemmConfig

DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}
MANTISSA = {torch.float32: 23, torch.float16: 10, torch.bfloat16: 7}
POINTERS = GemmConfig(block_m=16, block_n=32, block_k=16, num_warps=4, num_stages=1)
TMA = GemmConfig(block_m=32, block_n=16, block_k=16, num_warps=4, num_stages=1, tma=True)
# The Gluon kernel's pingpong tile (grouped.select.GLUON_TILES): on the GPU it runs the nt bf16/fp16 MoE
# forward cases, elsewhere (other cases, the interpreter) its Triton twin of the same tile.
GLUON = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=5, tma=True, gluon=True)


@dataclass(frozen=True)
class Case:
    """One grouped product: form, sizes (the cut dimension's group sizes, the tail left after them),
    storage order of A and B ("n" row-major, "t" column-major), dtype, bias."""

    form: str
    groups: int
    m: int
    n: int
    k: int
    sizes: tuple[int, ...] = ()
    layout: str = "nn"
    dtype: str = "fp32"
    bias: bool = False

    @property
    def id(self) -> str:
        cut = "-".join(map(str, self.sizes)) if self.sizes else "x"
        return f"{self.form}-E{self.groups}-{self.m}x{self.n}x{self.k}-{cut}-{self.layout}-{self.dtype}" + (
            "-bias" if self.bias else ""
        )


CASES = [
    # the MoE forward: rows sorted by expert; empty groups, groups of one row, a tail past the last end
    Case("2d3d", 4, 45, 24, 40, (10, 0, 1, 30), "nt"),
    Case("2d3d", 4, 45, 24, 40, (10, 0, 1, 30), "nn", bias=True),
    Case("2d3d", 3, 50, 17, 33, (20, 5, 20), "tt", "fp16"),
    Case("2d3d", 3, 50, 24, 40, (0, 50, 0), "nt", "bf16", bias=True),
    Case("2d3d", 2, 9, 20, 24, (1, 1), "nt"),  # decode: a few rows, 7 past the last end
    # batched
    Case("3d3d", 3, 20, 24, 17, layout="nt"),
    Case("3d3d", 2, 33, 18, 40, layout="tn", dtype="fp16", bias=True),
    # the weight gradient: offs over K, an empty group
    Case("2d2d", 3, 24, 20, 50, (10, 0, 37), "tn"),
    Case("2d2d", 2, 17, 33, 40, (25, 15), "nn", "fp16", bias=True),
    # offs over the columns of B
    Case("3d2d", 3, 20, 50, 24, (7, 13, 25), "nt"),
    Case("3d2d", 2, 20, 40, 24, (15, 25), "tn", "bf16", bias=True),
]


def pick_grouped(monkeypatch, config: GemmConfig) -> None:
    """Grouped dispatch selects `config` for every key, whatever it would pick (GemmConfig(backend="torch"):
    torch's op); the calls' kept selections dropped."""
    from tritonblas import caches
    from tritonblas.grouped import op, select

    def picked(key, device, backend=None):
        return select.GroupedSelection(config, "test", key)

    monkeypatch.setattr(select, "select", picked)
    monkeypatch.setattr(op, "select", picked)
    caches.invalidate()


def operand(shape: tuple[int, ...], order: str, dtype: torch.dtype, device: str) -> torch.Tensor:
    """Random values of logical `shape`, stored row-major ("n") or column-major ("t") in the last two."""
    if order == "n":
        return torch.randn(shape, device=device).to(dtype)
    flipped = (*shape[:-2], shape[-1], shape[-2])
    return torch.randn(flipped, device=device).to(dtype).transpose(-2, -1)


def operands(case: Case, device: str):
    """(mat_a, mat_b, offs, bias) of a case."""
    dtype = DTYPES[case.dtype]
    e, m, n, k = case.groups, case.m, case.n, case.k
    a_shape = (m, k) if case.form[0] == "2" else (e, m, k)
    b_shape = (k, n) if case.form[2] == "2" else (e, k, n)
    a = operand(a_shape, case.layout[0], dtype, device)
    b = operand(b_shape, case.layout[1], dtype, device)
    offs = None
    if case.sizes:
        offs = torch.tensor(case.sizes, dtype=torch.int64).cumsum(0).to(torch.int32).to(device)
    bias = None
    if case.bias:
        bias = torch.randn((n,) if case.form == "3d2d" else (e, n), device=device).to(dtype)
    return a, b, offs, bias


def loop(a, b, offs, bias, out_dtype, compute: torch.dtype) -> torch.Tensor:
    """The groups one by one (torch.mm in `compute`), the tail zero, the bias added in fp32."""
    form = f"{a.dim()}d{b.dim()}d"
    e = a.shape[0] if a.dim() == 3 else b.shape[0] if b.dim() == 3 else offs.shape[0]
    ends = offs.tolist() if offs is not None else [0] * e
    starts = [0, *ends[:-1]]
    m, n = a.shape[-2], b.shape[-1]
    out = torch.zeros((m, n) if form in ("2d3d", "3d2d") else (e, m, n), dtype=torch.float64, device=a.device)
    for g in range(e):
        s, t = starts[g], ends[g]
        if form == "3d3d":
            out[g] = (a[g].to(compute) @ b[g].to(compute)).double()
        elif form == "2d3d":
            out[s:t] = (a[s:t].to(compute) @ b[g].to(compute)).double()
        elif form == "2d2d":
            out[g] = (a[:, s:t].to(compute) @ b[s:t].to(compute)).double()
        else:
            out[:, s:t] = (a[g].to(compute) @ b[:, s:t].to(compute)).double()
        if bias is not None:
            if form == "2d3d":
                out[s:t] += bias[g].double()
            elif form == "3d2d":
                out[:, s:t] += bias[s:t].double()
            else:
                out[g] += bias[g].double()
    return out.to(out_dtype) if out_dtype != torch.float64 else out


def error(x: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (x.double() - ref).norm().item()
    return diff / max(ref.norm().item(), 1e-300)


def assert_close(ours: torch.Tensor, a, b, offs, bias) -> None:
    """err(ours) <= 2 * err(torch's mm in the input dtype, one group at a time) + one rounding of the
    output dtype, against the float64 reference (triton 3.6's interpreter truncates bf16 stores)."""
    ref = loop(a, b, offs, bias, torch.float64, torch.float64)
    theirs = loop(a, b, offs, bias, ours.dtype, a.dtype)
    eps = 2.0 ** -MANTISSA[ours.dtype] + 1e-6
    assert ours.shape == ref.shape
    assert error(ours, ref) <= 2 * error(theirs, ref) + eps, (error(ours, ref), error(theirs, ref))


# A shapes file of grouped entries small enough for the interpreter (2-4 experts, dims <= 64): one
# balanced (timed on both draws), one zipf (one draw), of different keys.
TINY_GROUPED = """\
dtypes: [fp16]
shapes:
  - {op: grouped, groups: 4, m: 64, n: 32, k: 32, layout: nt}
  - {op: grouped, groups: 2, m: 16, n: 32, k: 64, layout: nt, group_sizes: zipf}
"""


def tiny_grouped_file(folder) -> str:
    """TINY_GROUPED written into `folder`; its path."""
    path = folder / "tiny_grouped.yaml"
    path.write_text(TINY_GROUPED)
    return str(path)
