"""The launch of the Gluon grouped kernel (kernels/grouped_gluon.py), which a `gluon` config asks for
(grouped.select.gluon_refusal says for which keys): `gluon_plan` describes it as launch.gemm's Plan
(grid, integer arguments, constexprs; hashed into the grouped family's kernel hash,
identity.GROUPED_PLANNING), `run_gluon` launches it through the one plan cache and launch.gluon,
and where a call's tensors do not suit it (`gluon_ready`), its Triton twin runs (`gluon_twin`).

As for the Triton grouped kernel, nothing here reads `offs`' values: the kernel finds each group's tiles
on the device, so a call captures in a CUDA graph and replays right when the counts change.
"""

from __future__ import annotations

import functools
from dataclasses import replace

import torch

from ..config import GemmConfig
from ..launch.arguments import gluon_grouped_args
from ..launch.blockscaled import GLUON_MAXNREG, shared_layout
from ..launch.gemm import Plan, cached_plan
from ..launch.gluon import launch_gluon
from .forms import GroupedShape, grid_bound

# The operand dtypes the kernel's wgmma takes here (grouped.select.gluon_refusal: bf16 or fp16).
_DTYPES = (torch.bfloat16, torch.float16)


@functools.cache
def _kernel():
    from ..kernels.grouped_gluon import grouped_gluon_kernel

    return grouped_gluon_kernel


def _rows_ready(t: torch.Tensor) -> bool:
    """Row-major with a 16-byte aligned base and row stride (a TMA descriptor's conditions)."""
    return t.stride(-1) == 1 and (t.stride(-2) * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0


def gluon_ready(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, shape: GroupedShape) -> bool:
    """Whether the Gluon kernel takes these tensors: on CUDA, K > 0, A row-major, the weights (E, K, N)
    a view of (E, N, K) storage whose experts lie back to back (one 2-D descriptor over them), `out`
    row-major in A's dtype (bf16 or fp16), every row 16-byte aligned."""
    if not (a.is_cuda and shape.form == "2d3d" and shape.k > 0 and a.dtype in _DTYPES
            and out.dtype == a.dtype):
        return False
    w = b.transpose(-2, -1)
    return (_rows_ready(a) and _rows_ready(w) and _rows_ready(out)
            and (b.shape[0] == 1 or w.stride(0) == w.shape[1] * w.stride(1)))


# What the twin's ring may take of shared memory (the Triton kernel allocates about its operand blocks).
_TWIN_RING_BYTES = 200 * 1024


@functools.cache  # (a call's hot path: a config copied once per config, not per call)
def gluon_twin(config: GemmConfig, element_size: int) -> GemmConfig:
    """The Triton grouped kernel's config that runs a Gluon config's call where gluon_ready says no: the
    same tile and warps, its ring as deep as fits for operands of `element_size` bytes (fp32: shallower)."""
    block = (config.block_m + config.block_n) * config.block_k * element_size
    stages = max(1, min(config.num_stages, _TWIN_RING_BYTES // block))
    return config.model_copy(update={"gluon": False, "num_stages": stages})


def _c_split(config: GemmConfig) -> int:
    """The column pieces a consumer's output leaves in (kernels/grouped_gluon.epilogue): 2 for the
    cooperative 128x256 tile at 4 stages, its ring (48 KB a stage) beside 2 x 16 KB of output; at 3
    stages the whole half tile leaves at once (the code the shipped winners were tuned with)."""
    return 2 if not _pingpong(config) and config.block_n == 256 and config.num_stages >= 4 else 1


def _pingpong(config: GemmConfig) -> bool:
    """4 MMA warps a tile: each consumer warp group takes its own tiles in turn (grouped.select)."""
    return config.num_warps == 4


def descriptor_geometry(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: GemmConfig) -> tuple:
    """(shape, strides, box) of the kernel's TMA descriptors: A (rows, K), the weights as (E * N, K) over
    their storage, out (rows, N), with the kernel's boxes (out's: a consumer's rows)."""
    w = b.transpose(-2, -1)
    e, n, k = w.shape
    bm, bn, bk = config.block_m, config.block_n, config.block_k
    return (([a.shape[0], k], [a.stride(0), 1], [bm, bk]),
            ([e * n, k], [w.stride(1), 1], [bn, bk]),
            ([out.shape[0], n], [out.stride(0), 1],
             [bm if _pingpong(config) else bm // 2, bn // _c_split(config)]))


def gluon_descriptors(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, config: GemmConfig) -> tuple:
    """Gluon TMA descriptors of descriptor_geometry (a first launch's: triton compiles from their
    layouts); built each call (they hold the tensors' addresses)."""
    from triton.experimental.gluon.nvidia.hopper import TensorDescriptor

    return tuple(TensorDescriptor(t, shape, strides, box, shared_layout(tuple(box), t.dtype))
                 for t, (shape, strides, box) in zip((a, b, out), descriptor_geometry(a, b, out, config),
                                                     strict=True))


def gluon_plan(bias: torch.Tensor | None, shape: GroupedShape, out: torch.Tensor, config: GemmConfig,
               sm_count: int) -> Plan:
    """One launch of the Gluon grouped kernel as launch.gemm's Plan: the integer arguments after c, bias
    (or c), offs and the three descriptors; a program an SM."""
    sbg, sbn = (0, 0) if bias is None else bias.stride()
    constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                      STAGES=config.num_stages, GROUP_M=config.group_m, HAS_BIAS=bias is not None,
                      E_PAD=max(2, 1 << shape.groups.bit_length()), PINGPONG=_pingpong(config),
                      C_SPLIT=_c_split(config))
    progs = max(1, min(sm_count, grid_bound(shape, config.block_m, config.block_n)))
    ints = (shape.groups, shape.n, shape.k, shape.m, out.stride(0), sbg, sbn)
    return Plan(_kernel(), progs, ints, constexprs, 4, config.num_stages, None, maxnreg=GLUON_MAXNREG,
                host_objects=True)


def _described_plan(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, shape: GroupedShape,
                    out: torch.Tensor, config: GemmConfig, sm_count: int) -> Plan:
    """gluon_plan with its descriptors' geometry, which a direct launch encodes from; built whole here
    since a plan is frozen (gluon_plan itself is hashed, and left as it is)."""
    plan = gluon_plan(bias, shape, out, config, sm_count)
    return replace(plan, descs=descriptor_geometry(a, b, out, config))


def _facts(t: torch.Tensor) -> tuple:
    return t.shape, t.stride(), t.dtype, t.data_ptr() % 16 == 0


def run_gluon(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor, bias: torch.Tensor | None,
              offs: torch.Tensor, shape: GroupedShape, config: GemmConfig, sm_count: int) -> None:
    """out = the grouped product by the Gluon kernel (the caller checked gluon_ready); the plan kept in
    launch.gemm's one plan cache under everything it depends on, launched by launch.gluon (later launches
    through triton's C launcher)."""
    # The plan holds the descriptors' geometry: the key holds all it reads (a's, b's, out's facts, config).
    key = ("grouped-gluon", config, sm_count, a.device, _facts(a), _facts(b), _facts(out),
           None if bias is None else _facts(bias), offs.shape)
    plan = cached_plan(key, lambda: _described_plan(a, b, bias, shape, out, config, sm_count))
    launch_gluon(plan, gluon_grouped_args, (out, out if bias is None else bias, offs), (a, b, out),
                 lambda: gluon_descriptors(a, b, out, config))
