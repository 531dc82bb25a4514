"""Each Triton GEMM kernel's compile-time choices as one named bundle, the kernel's last parameter `SPEC`
(a `tl.constexpr`): the kernel and the building blocks it hands `SPEC` to (kernels/common.py, fixup.py)
read `SPEC.BLOCK_M`, `SPEC.HAS_BIAS`, ... A launch plan names its choices in a dict (launch.gemm.Plan's
`constexprs`, what the host reads); `kernel_constexprs` makes the kernel's keyword argument of it.

The fields are `tl.constexpr` values for the compiler, plain values for the interpreter (whose arithmetic
on a constexpr and a tensor gives a constexpr): triton 3.6 takes a plain int read from a tuple as a shape
only once bound to a constexpr name (`tl.zeros((SPEC.BLOCK_M, SPEC.BLOCK_N))` fails with plain ints).
A building block that also serves another tile size (a chunk of rows: common.epilogue) takes that size
as its own parameter and the rest from `SPEC`.
"""

from __future__ import annotations

from typing import NamedTuple

import triton.language as tl


class GemmSpec(NamedTuple):
    """persistent_gemm_kernel's and streamk_gemm_kernel's (launch.gemm.make_plan)."""

    # the tile, and how tiles are ordered (GROUP_M row-tiles share B in L2: common.tile_coords)
    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    # the epilogue: a bias, scale_a's and scale_b's modes (0 none, 1 one value, 2 a vector)
    HAS_BIAS: bool
    A_SCALE: int
    B_SCALE: int
    # the K loop: K a multiple of BLOCK_K, tl.dot's input precision, fp8 accumulation on the tensor cores
    EVEN_K: bool
    PRECISION: str
    FAST_ACC: bool
    # how A and B are read: TMA (descriptors from the host or built per program) or pointers, column-major
    # storage, the power of two dividing each one's contiguous extent, 64-bit offsets
    USE_TMA: bool
    HOST_DESC: bool
    A_COL: bool
    B_COL: bool
    A_DIV: int
    B_DIV: int
    INT64: bool
    # the tile loop prefetches the next tile's K blocks during this one's epilogue
    FLATTEN: bool
    # Stream-K's fix-up (launch.streamk.fixup_plan): row chunks, deferred claims, a reduce kernel after
    FIXUP_CHUNKS: int = 1
    DEFERRED: bool = False
    REDUCE: bool = False


class ReduceSpec(NamedTuple):
    """splitk_reduce_kernel's: the Stream-K launch's tile, epilogue and chunks (launch.gemm._reduce_plan)."""

    BLOCK_M: int
    BLOCK_N: int
    GROUP_M: int
    HAS_BIAS: bool
    A_SCALE: int
    B_SCALE: int
    INT64: bool
    FIXUP_CHUNKS: int


class BlockSpec(NamedTuple):
    """blockscaled_gemm_kernel's (launch.blockscaled.block_plan)."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    HAS_BIAS: bool
    EVEN_K: bool
    USE_TMA: bool
    A_COL: bool
    B_COL: bool
    A_DIV: int
    B_DIV: int
    INT64: bool
    # the scales' block along K and N (128: kernels/blockscaled.py)
    SCALE_BLOCK: int
    # the shared epilogue's scale modes: none (the block scales multiply each K step's product)
    A_SCALE: int = 0
    B_SCALE: int = 0


class GroupedSpec(NamedTuple):
    """grouped_gemm_kernel's (grouped.launch): a GEMM's tile and reads, and the groups' form."""

    BLOCK_M: int
    BLOCK_N: int
    BLOCK_K: int
    GROUP_M: int
    # which dimension offs cuts (kernels/grouped.py), zero tiles past the last group end, groups padded
    JAGGED: int
    TAIL: bool
    HAS_BIAS: bool
    PRECISION: str
    USE_TMA: bool
    A_COL: bool
    B_COL: bool
    A_DIV: int
    B_DIV: int
    EVEN_K: bool
    INT64: bool
    E_PAD: int
    # what the shared K loop and epilogue also read: no fp8, no scales
    FAST_ACC: bool = False
    A_SCALE: int = 0
    B_SCALE: int = 0


# Each kernel's bundle, by the kernel function's name.
SPECS: dict[str, type] = {
    "persistent_gemm_kernel": GemmSpec,
    "streamk_gemm_kernel": GemmSpec,
    "splitk_reduce_kernel": ReduceSpec,
    "blockscaled_gemm_kernel": BlockSpec,
    "grouped_gemm_kernel": GroupedSpec,
}


def kernel_constexprs(kernel: object, constexprs: dict) -> dict:
    """The keyword arguments that compile `kernel` for a plan's named choices: {"SPEC": its bundle} for a
    kernel of SPECS (every field named, each a tl.constexpr), the choices themselves for any other (the
    Gluon kernels, the pad copies)."""
    spec = SPECS.get(getattr(getattr(kernel, "fn", None), "__name__", ""))
    if spec is None:
        return constexprs
    unknown = set(constexprs) - set(spec._fields)
    if unknown:
        raise ValueError(f"{spec.__name__} has no field {sorted(unknown)}")
    bundle = spec(**constexprs)
    if type(kernel).__name__ == "InterpretedFunction":  # the interpreter computes with plain values
        return {"SPEC": bundle}
    return {"SPEC": spec(*(tl.constexpr(value) for value in bundle))}
