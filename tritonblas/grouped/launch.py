"""The grouped GEMM's launch, described once: `plan` turns tensors and a config into a frozen
`GroupedLaunch` (kernel, grid, the arguments in the kernel's signature order, its compile-time choices);
`launch` runs it.

Nothing here reads `offs`' values: the grid is an upper bound of the tiles (every group wastes less than
one tile row), and the kernel finds each group's tiles on the device, so a call captures in a CUDA graph
and replays right when the counts change.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch

from ..config import GemmConfig
from ..launch.gemm import INT32_OFFSETS, offset_reach
from . import gluon
from .forms import GroupedShape, grid_bound

# The kernel's parameters, in its signature order (kernels/grouped.py).
POINTERS = ("a_ptr", "b_ptr", "c_ptr", "bias_ptr", "offs_ptr", "a_desc", "b_desc")
INTEGERS = (
    "E",
    "M",
    "N",
    "K",
    "NUM_PROGS",
    "stride_ag",
    "stride_am",
    "stride_ak",
    "stride_bg",
    "stride_bk",
    "stride_bn",
    "stride_cg",
    "stride_cm",
    "stride_cn",
    "stride_biasg",
    "stride_biasn",
)


@dataclass(frozen=True)
class GroupedLaunch:
    """Everything one launch needs: `args` pairs each kernel argument with its value, in order, then each
    compile-time choice (its constexprs, bundled into the kernel's `SPEC`: kernels/specs.py)."""

    grid: int
    args: tuple[tuple[str, object], ...]
    num_warps: int
    num_stages: int
    descriptors: tuple | None = None  # TMA geometry ((shape, strides, box) of A and B), None: pointers

    @property
    def constexprs(self) -> dict:
        return {name: value for name, value in self.args if name.isupper() and name not in INTEGERS}

    @property
    def runtime(self) -> tuple:
        """The values of the arguments that are not compiled in, in order."""
        return tuple(value for name, value in self.args if not name.isupper() or name in INTEGERS)

    def kernel_constexprs(self) -> dict:
        """The kernel's constexpr keyword arguments: the constexprs, bundled (kernels/specs.py)."""
        from ..kernels.specs import kernel_constexprs

        return kernel_constexprs(kernel(), self.constexprs)


@functools.cache
def kernel():
    from ..kernels.grouped import grouped_gemm_kernel

    return grouped_gemm_kernel


def _strides3(t: torch.Tensor | None) -> tuple[int, int, int]:
    """(group stride, stride of dim -2, stride of dim -1); a 2-D operand's group stride is 0."""
    if t is None:
        return 0, 0, 0
    return (t.stride(0) if t.dim() == 3 else 0), t.stride(-2), t.stride(-1)


def is_col_major(t: torch.Tensor) -> bool:
    """Column-major in its last two dims (as launch.gemm decides for a 2-D operand)."""
    return t.stride(-1) != 1 and t.stride(-2) == 1


def _pow2_divisor(x: int) -> int:
    div = 16
    while div > 1 and x % div:
        div //= 2
    return div


def _vector_divisor(t: torch.Tensor, col: bool, wraps_contiguous_axis: bool, extent: int | None) -> int:
    """The kernel's A_DIV/B_DIV: a power of two dividing the leading stride, the group stride and, where
    the contiguous axis is the one the K loop wraps, that axis' size (`extent`; None: a cut dimension of
    unknown size, so no hint)."""
    group, rows, cols = _strides3(t)
    div = _pow2_divisor(cols if col else rows)
    if t.dim() == 3:
        div = min(div, _pow2_divisor(group))
    if wraps_contiguous_axis:
        div = 1 if extent is None else min(div, _pow2_divisor(extent))
    return div


def _tma_geometry(t: torch.Tensor, rows_block: int, cols_block: int) -> tuple | None:
    """(shape, strides, box) of a 2-D TMA descriptor over an operand's storage, every group's rows one
    after another; None where none fits: no unit stride, a base or leading stride not 16-byte aligned,
    groups not back to back."""
    size = t.element_size()
    col = is_col_major(t)
    group, s_rows, s_cols = _strides3(t)
    lead, unit = (s_cols, s_rows) if col else (s_rows, s_cols)
    rows, cols = (t.shape[-1], t.shape[-2]) if col else (t.shape[-2], t.shape[-1])
    if unit != 1 or t.data_ptr() % 16 or lead <= 0 or (lead * size) % 16:
        return None
    if t.dim() == 3 and t.shape[0] > 1 and group != rows * lead:
        return None
    groups = t.shape[0] if t.dim() == 3 else 1
    box = [cols_block, rows_block] if col else [rows_block, cols_block]
    return [groups * rows, cols], [lead, 1], box


def geometries(config: GemmConfig, shape: GroupedShape, a: torch.Tensor, b: torch.Tensor) -> tuple | None:
    """The TMA descriptors' (shape, strides, box) of A and B where the config asks for TMA and it fits:
    not over a cut K, nor where groups start anywhere along an operand's contiguous axis (a box's start
    there must be 16-byte aligned), nor where a box past K would cross into the next group's rows (a
    3-D operand whose K is its rows, unless K is a whole number of blocks); no empty dimension."""
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    a_col, b_col = is_col_major(a), is_col_major(b)
    even_k = shape.k % bk == 0
    if (
        not config.tma
        or shape.jagged == 3
        or min(shape.m, shape.n, shape.k) == 0
        or (shape.jagged == 1 and a_col)
        or (shape.jagged == 2 and not b_col)
        or (a.dim() == 3 and a_col and not even_k)
        or (b.dim() == 3 and not b_col and not even_k)
    ):
        return None
    geometry_a, geometry_b = _tma_geometry(a, bm, bk), _tma_geometry(b, bk, bn)
    return None if geometry_a is None or geometry_b is None else (geometry_a, geometry_b)


def _descriptor(base: torch.Tensor, shape: list, strides: list, block: list):
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor(base, shape, strides, block)


def needs_int64(a, b, c, bias) -> bool:
    """Offsets inside one group (group bases are formed in 64 bits in the kernel) reach 2**31."""
    views = [t[0] if t.dim() == 3 else t for t in (a, b, c, bias) if t is not None and t.numel()]
    return max((offset_reach(v) for v in views), default=0) >= INT32_OFFSETS


def plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
         offs: torch.Tensor | None, shape: GroupedShape, config: GemmConfig, sm_count: int,
         precision: str) -> GroupedLaunch:
    """The launch of `config` on these tensors; c is the output (written whole, the tail as zeros). No
    bias or no offs: c's pointer stands in, never read, so the compiled kernel takes a pointer there and
    later direct launches of the signature pass one."""
    if a.dtype == torch.bfloat16 and not a.is_cuda:
        # Triton's interpreter computes tl.dot on bf16 wrongly (numpy has no bf16), as launch.gemm says:
        # it gets the exact fp32 copies (same layout); the kernel still accumulates in fp32, stores bf16.
        a, b = a.float(), b.float()
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    jag = shape.jagged
    descs = geometries(config, shape, a, b)
    tma = descs is not None
    a_col, b_col = is_col_major(a), is_col_major(b)
    sag, sam, sak = _strides3(a)
    sbg, sbk, sbn = _strides3(b)
    scg, scm, scn = _strides3(c)
    sbiasg, sbiasn = (
        (0, 0) if bias is None else ((0, bias.stride(0)) if bias.dim() == 1 else tuple(bias.stride()))
    )
    progs = max(1, min(config.grid or sm_count, grid_bound(shape, bm, bn)))
    args = (
        ("a_ptr", a),
        ("b_ptr", b),
        ("c_ptr", c),
        ("bias_ptr", c if bias is None else bias),
        ("offs_ptr", c if offs is None else offs),
        ("a_desc", _descriptor(a, *descs[0]) if tma else None),
        ("b_desc", _descriptor(b, *descs[1]) if tma else None),
        ("E", shape.groups),
        ("M", shape.m),
        ("N", shape.n),
        ("K", shape.k),
        ("NUM_PROGS", progs),
        ("stride_ag", sag),
        ("stride_am", sam),
        ("stride_ak", sak),
        ("stride_bg", sbg),
        ("stride_bk", sbk),
        ("stride_bn", sbn),
        ("stride_cg", scg),
        ("stride_cm", scm),
        ("stride_cn", scn),
        ("stride_biasg", sbiasg),
        ("stride_biasn", sbiasn),
        ("BLOCK_M", bm),
        ("BLOCK_N", bn),
        ("BLOCK_K", bk),
        ("GROUP_M", config.group_m),
        ("JAGGED", jag),
        ("TAIL", int(jag in (1, 2))),
        ("HAS_BIAS", bias is not None),
        ("PRECISION", precision),
        ("USE_TMA", tma),
        ("A_COL", a_col),
        ("B_COL", b_col),
        ("A_DIV", _vector_divisor(a, a_col, a_col, None if jag == 1 else shape.m)),
        ("B_DIV", _vector_divisor(b, b_col, not b_col, None if jag == 2 else shape.n)),
        ("EVEN_K", jag != 3 and shape.k % bk == 0),
        ("INT64", needs_int64(a, b, c, bias)),
        ("E_PAD", max(2, 1 << shape.groups.bit_length())),  # > E: the groups and the tail
    )
    return GroupedLaunch(grid=progs, args=args, num_warps=config.num_warps, num_stages=config.num_stages,
                         descriptors=descs)


def launch(spec: GroupedLaunch):
    """Launch through triton's `kernel[grid](...)` (compiling on first use); the compiled kernel, or
    None where there is none (the interpreter)."""
    return kernel()[(spec.grid,)](
        *spec.runtime, **spec.kernel_constexprs(), num_warps=spec.num_warps, num_stages=spec.num_stages
    )


# --- the hot path: one prepared launch per call signature ---------------------------------------------


@dataclass
class Prepared:
    """A signature's launch after its first: triton's C launcher called with the pointers as integers
    and the host descriptors' encodings kept per address (launch/direct.py), no Python per argument."""

    direct: object  # launch.direct.DirectLaunch
    tma: bool
    ints: tuple
    constexprs: tuple


_prepared: dict[tuple, Prepared | None] = {}
MAX_PREPARED = 4096  # signatures kept (a model has tens; a shape sweep past this starts over)


def _signature(a, b, c, bias, offs, config: GemmConfig, precision: str) -> tuple:
    """Every fact a plan depends on (pointers only through their 16-byte alignment)."""
    return (
        config,
        precision,
        a.shape,
        a.stride(),
        a.dtype,
        b.shape,
        b.stride(),
        c.shape,
        c.stride(),
        c.dtype,
        a.device,
        a.data_ptr() % 16 == 0,
        b.data_ptr() % 16 == 0,
        None if bias is None else (bias.shape, bias.stride(), bias.dtype, bias.data_ptr() % 16 == 0),
        None if offs is None else (offs.shape, offs.data_ptr() % 16 == 0),
    )


def run(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
        offs: torch.Tensor | None, shape: GroupedShape, config: GemmConfig, sm_count: int,
        precision: str) -> None:
    """c = the grouped product: a signature's first call plans and launches through triton (compiling),
    later ones launch directly (CUDA; triton versions launch.direct knows). A `gluon` config runs the
    Gluon kernel where it takes the tensors (grouped/gluon.py), else its Triton twin."""
    if config.gluon:
        if offs is not None and gluon.gluon_ready(a, b, c, shape):
            gluon.run_gluon(a, b, c, bias, offs, shape, config, sm_count)
            return
        config = gluon.gluon_twin(config, a.element_size())
    key = _signature(a, b, c, bias, offs, config, precision) if a.is_cuda else None
    prepared = _prepared.get(key) if key is not None else None
    if prepared is not None:
        pa, pb, pc = a.data_ptr(), b.data_ptr(), c.data_ptr()
        direct = prepared.direct
        host = (*direct.descriptor(0, a, pa), *direct.descriptor(1, b, pb)) if prepared.tma else (None, None)
        args = (
            pa,
            pb,
            pc,
            pc if bias is None else bias.data_ptr(),
            pc if offs is None else offs.data_ptr(),
            *host,
            *prepared.ints,
            *prepared.constexprs,
        )
        direct.launch(torch._C._cuda_getCurrentRawStream(a.device.index), args)
        return
    spec = plan(a, b, c, bias, offs, shape, config, sm_count, precision)
    compiled = launch(spec)
    if key is not None and compiled is not None and len(_prepared) < MAX_PREPARED:
        _prepared[key] = _prepare(compiled, spec)


def _prepare(compiled, spec: GroupedLaunch) -> Prepared | None:
    from ..launch import direct

    made = direct.make(compiled, spec.grid, spec.descriptors, _descriptor)
    if made is None:
        return None
    values = dict(spec.args)
    return Prepared(
        direct=made,
        tma=spec.descriptors is not None,
        ints=tuple(values[n] for n in INTEGERS),
        constexprs=tuple(spec.kernel_constexprs().values()),
    )
