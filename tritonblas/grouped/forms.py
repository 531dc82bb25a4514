"""The four forms of torch._grouped_mm, their argument checks and their output.

| form | mat_a | mat_b | offs cuts | out |
|---|---|---|---|---|
| 2d3d (MoE forward) | (M, K), rows sorted by group | (E, K, N) | rows of A | (M, N) |
| 3d3d (batched) | (E, M, K) | (E, K, N) | nothing (None) | (E, M, N) |
| 2d2d (weight gradient) | (M, K) | (K, N) | K | (E, M, N) |
| 3d2d | (E, M, K) | (K, N) | columns of B | (M, N) |

`offs[i]` is the end of group i (int32, on the operands' device, non-decreasing, at most the cut
dimension); what lies past the last end is no group's: its output rows (columns) are zeros. A bias is one
row per group, (E, N), or for 3d2d, whose groups are column ranges, one (N,) vector.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from ..arith import cdiv
from ..validate import TORCH_DTYPES

FLOAT_DTYPES = tuple(TORCH_DTYPES)

# Which dimension offs cuts, as the kernel's JAGGED constexpr numbers them.
JAGGED = {"3d3d": 0, "2d3d": 1, "3d2d": 2, "2d2d": 3}


@dataclass(frozen=True)
class GroupedShape:
    """One call's form and sizes: E groups of (m, n, k), the cut dimension given as its whole extent."""

    form: str
    groups: int
    m: int
    n: int
    k: int
    out_shape: tuple[int, ...]

    @property
    def jagged(self) -> int:
        return JAGGED[self.form]


@dataclass(frozen=True)
class GroupedKey:
    """The dispatch key of a grouped GEMM (tuned winners are stored under it)."""

    form: str
    groups: int
    n: int
    k: int
    rows: int  # rows per group, bucketed to a power of two (the 3d3d and 2d2d forms: each group's m)
    dtype: str
    layout: str  # A and B in storage order: "n" row-major, "t" column-major, as the shapes format says

    def text(self) -> str:
        return (f"{self.form} E={self.groups} rows/group~{self.rows} N={self.n} K={self.k} {self.dtype} "
                f"{self.layout}")


def _check_float_tensor(name: str, t) -> None:  # noqa: ANN001 (anything a caller passed)
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"grouped_mm: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype not in FLOAT_DTYPES:
        raise TypeError(f"grouped_mm: {name} must be float16, bfloat16 or float32, got {t.dtype}")


def form_of(mat_a: torch.Tensor, mat_b: torch.Tensor) -> str:
    return f"{mat_a.dim()}d{mat_b.dim()}d"


def check_args(mat_a, mat_b, offs, bias, out_dtype, read_offs: bool = True) -> GroupedShape:
    """Every argument check of grouped_mm (TypeError / ValueError naming the argument); the shape.
    read_offs: check CPU offs' values too (not while tracing: torch.compile, the custom op's fake)."""
    for name, t in (("mat_a", mat_a), ("mat_b", mat_b)):
        _check_float_tensor(name, t)
        if t.dim() not in (2, 3):
            raise ValueError(
                f"grouped_mm: {name} must be 2-D or 3-D, got {t.dim()}-D of shape {tuple(t.shape)}"
            )
    if mat_b.dtype != mat_a.dtype:
        raise TypeError(f"grouped_mm: mat_b's dtype {mat_b.dtype} differs from mat_a's {mat_a.dtype}")
    if mat_b.device != mat_a.device:
        raise ValueError(f"grouped_mm: mat_b is on {mat_b.device}, mat_a on {mat_a.device}")
    if out_dtype is not None and out_dtype not in FLOAT_DTYPES:
        raise TypeError(
            f"grouped_mm: out_dtype must be None, torch.float16, torch.bfloat16 or torch.float32, "
            f"got {out_dtype!r}"
        )
    shape = _shape(mat_a, mat_b, offs)
    _check_offs(offs, shape, mat_a.device, read_offs)
    _check_bias(bias, shape, mat_a)
    return shape


def _shape(mat_a: torch.Tensor, mat_b: torch.Tensor, offs) -> GroupedShape:
    form = form_of(mat_a, mat_b)
    if form == "3d3d":
        if offs is not None:
            raise ValueError(
                "grouped_mm: offs must be None when mat_a and mat_b are both 3-D (batched groups)"
            )
        if mat_a.shape[0] != mat_b.shape[0]:
            raise ValueError(f"grouped_mm: mat_a has {mat_a.shape[0]} groups, mat_b {mat_b.shape[0]}")
    elif offs is None:
        raise ValueError(
            f"grouped_mm: offs (the int32 group ends) is needed when an operand is 2-D "
            f"(mat_a {mat_a.dim()}-D, mat_b {mat_b.dim()}-D)"
        )
    if mat_a.shape[-1] != mat_b.shape[-2]:
        raise ValueError(
            f"grouped_mm: mat_a's last dimension ({mat_a.shape[-1]}) must equal mat_b's "
            f"second to last ({mat_b.shape[-2]}), the contraction (K)"
        )
    groups = mat_a.shape[0] if mat_a.dim() == 3 else mat_b.shape[0] if mat_b.dim() == 3 else _length(offs)
    m, k, n = mat_a.shape[-2], mat_a.shape[-1], mat_b.shape[-1]
    out_shape = {"2d3d": (m, n), "3d3d": (groups, m, n), "2d2d": (groups, m, n), "3d2d": (m, n)}[form]
    return GroupedShape(form=form, groups=groups, m=m, n=n, k=k, out_shape=out_shape)


def _length(offs) -> int:
    return offs.shape[0] if isinstance(offs, torch.Tensor) and offs.dim() == 1 else -1


def cut_extent(shape: GroupedShape) -> int:
    """The whole extent of the dimension offs cuts (0: none)."""
    return {0: 0, 1: shape.m, 2: shape.n, 3: shape.k}[shape.jagged]


def _check_offs(offs, shape: GroupedShape, device: torch.device, read_values: bool) -> None:
    if offs is None:
        return
    if not isinstance(offs, torch.Tensor):
        raise TypeError(f"grouped_mm: offs must be a torch.Tensor of int32, got {type(offs).__name__}")
    if offs.dtype != torch.int32:
        raise TypeError(f"grouped_mm: offs must be int32 (torch._grouped_mm's group ends), got {offs.dtype}")
    if offs.dim() != 1:
        raise ValueError(f"grouped_mm: offs must be 1-D, got shape {tuple(offs.shape)}")
    if offs.device != device:
        raise ValueError(f"grouped_mm: offs is on {offs.device}, the operands on {device}")
    if offs.shape[0] != shape.groups:
        owner = "mat_b's first dimension" if shape.form == "2d3d" else "mat_a's first dimension"
        raise ValueError(
            f"grouped_mm: offs has {offs.shape[0]} group ends, {owner} has {shape.groups} groups"
        )
    if shape.form == "2d2d" and shape.groups == 0:
        raise ValueError("grouped_mm: offs must hold at least one group end when mat_a and mat_b are 2-D")
    if (
        read_values and offs.device.type == "cpu" and offs.numel()
    ):  # readable without a device sync; CUDA offs are clamped
        values = offs.tolist()
        if any(b < a for a, b in zip(values, values[1:], strict=False)) or values[0] < 0:
            raise ValueError(f"grouped_mm: offs must be non-decreasing and non-negative, got {values[:8]}...")
        if values[-1] > cut_extent(shape):
            raise ValueError(f"grouped_mm: offs ends at {values[-1]}, past the {cut_extent(shape)} it cuts")


def _check_bias(bias, shape: GroupedShape, mat_a: torch.Tensor) -> None:
    if bias is None:
        return
    _check_float_tensor("bias", bias)
    want = (shape.n,) if shape.form == "3d2d" else (shape.groups, shape.n)
    if tuple(bias.shape) != want:
        raise ValueError(
            f"grouped_mm: bias must have shape {want} (one row per group), got {tuple(bias.shape)}"
        )
    if bias.device != mat_a.device:
        raise ValueError(f"grouped_mm: bias is on {bias.device}, the operands on {mat_a.device}")


def output_strides(shape: GroupedShape, like: torch.Tensor | None = None) -> tuple[int, ...]:
    """Row-major strides of the output, or `like`'s storage order where it is a dense tensor of the same
    shape (a gradient keeps its input's layout: a weight stored (E, N, K) and used transposed)."""
    if like is not None and tuple(like.shape) == shape.out_shape and _dense(like):
        return tuple(like.stride())
    strides, step = [], 1
    for size in reversed(shape.out_shape):
        strides.append(step)
        step *= max(size, 1)
    return tuple(reversed(strides))


def _dense(t: torch.Tensor) -> bool:
    """Non-overlapping and without gaps: its strides are a permutation of a contiguous tensor's."""
    order = sorted(range(t.dim()), key=lambda d: t.stride(d))
    step = 1
    for d in order:
        if t.shape[d] != 1 and t.stride(d) != step:
            return False
        step *= t.shape[d]
    return True


def grid_bound(shape: GroupedShape, block_m: int, block_n: int) -> int:
    """An upper bound of the output tiles whatever the group sizes (each cut group and the tail waste
    less than one tile along the cut dimension)."""
    tm, tn, e = cdiv(shape.m, block_m), cdiv(shape.n, block_n), shape.groups
    return {0: e * tm * tn, 1: (tm + e + 1) * tn, 2: tm * (tn + e + 1), 3: e * tm * tn}[shape.jagged]
