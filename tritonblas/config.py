"""GemmConfig (one launch configuration) and the one feasibility predicate, config_supports.

`config_supports` is the single answer to "can this config run this problem on this device?": the
heuristic, the tuner's pruner, config-file loading and `matmul(config=...)` all call it.
"""

from __future__ import annotations

import functools
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from .arch import FP8_ARCHS, TMA_ARCHS, DeviceInfo
from .binding import bind_tuning_db
from .problem import DTYPE_BYTES, SCALE_BLOCK, Problem, operands_aligned, rows_aligned
from .smem import smem_bytes

Backend = Literal["triton", "torch"]
BACKENDS: tuple[str, ...] = ("triton", "torch")

_POW2_BLOCKS = (16, 32, 64, 128, 256)
MAX_GRID = 65536


def _is_pow2(x: int) -> bool:
    return x > 0 and (x & (x - 1)) == 0


# The one torch-backend config: the tile fields mean nothing to torch.mm, so they hold these fixed
# values (a torch config given other values is refused), and equal torch configs are one candidate.
_VENDOR_FIELDS = {"block_m": 16, "block_n": 16, "block_k": 16}


class GemmConfig(BaseModel):
    """One launch configuration of a GEMM kernel. Frozen, hashable, validated; JSON in and out.

    backend "triton" (the default) runs the library's kernels; "torch" runs the vendor GEMM (torch.mm /
    torch.addmm: cuBLAS(Lt) on NVIDIA, hipBLASLt on ROCm), a candidate like any other: one canonical
    config, `GemmConfig.vendor()`, whose JSON is {"backend": "torch"}. A triton config's JSON has no
    backend key, so files and database rows written before the field existed read and compare the same.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    block_m: int = Field(ge=16, le=256)
    block_n: int = Field(ge=16, le=256)
    block_k: int = Field(ge=16, le=256)
    group_m: int = Field(default=8, ge=1, le=64)
    num_warps: int = Field(default=4)
    num_stages: int = Field(default=2, ge=1, le=8)
    streamk: bool = False
    grid: int | None = Field(default=None, ge=1, le=MAX_GRID)
    tma: bool = False  # load A/B tiles with Hopper tensor descriptors (TMA) instead of pointers
    host_descriptors: bool = False  # TMA descriptors built on the host, kernel arguments (tma only)
    # The persistent tile loop (Stream-K: its data-parallel loop) as triton's tl.range options:
    flatten: bool = False  # one flattened tile x K loop, prefetching the next tile's first K blocks
    aligned_copy: bool = False  # copy operands whose leading dim is not 16-byte aligned into padded ones
    # Stream-K: split tiles summed by a kernel of their own over all the SMs (kernels/reduce.py), not by
    # their last segment's program.
    reduce_kernel: bool = False
    # The Gluon kernels (sm_90): block-wise fp8 scales on kernels/blockscaled_gluon.py, each K block's
    # product promoted to fp32 while the tensor cores run the next block's (gluon_refusal says where it
    # runs); grouped GEMMs' MoE forward on kernels/grouped_gluon.py (grouped.select.gluon_refusal).
    gluon: bool = False
    backend: Backend = "triton"

    @classmethod
    def vendor(cls) -> GemmConfig:
        """The torch-backend config (torch.mm / torch.addmm)."""
        return _VENDOR

    @property
    def is_vendor(self) -> bool:
        return self.backend == "torch"

    @model_validator(mode="before")
    @classmethod
    def _retired_warp_specialize(cls, data: object) -> object:
        # Configs stored before the lever was removed (configs/sm_90.json, user databases) carry
        # "warp_specialize": false, which is today's code; true asked for code that no longer exists.
        if not (isinstance(data, dict) and "warp_specialize" in data):
            return data
        if data["warp_specialize"] is not False:
            raise ValueError(f"warp_specialize was removed (triton 3.6 compiled it on sm_90 to the same code "
                             f"as without); only false is read, got {data['warp_specialize']!r}")
        return {f: v for f, v in data.items() if f != "warp_specialize"}

    @model_validator(mode="before")
    @classmethod
    def _vendor_tile(cls, data: object) -> object:
        if not (isinstance(data, dict) and data.get("backend") == "torch"):
            return data
        defaults = {**{f: info.default for f, info in cls.model_fields.items()
                       if f not in _VENDOR_FIELDS and f != "backend"}, **_VENDOR_FIELDS}
        odd = sorted(f for f, v in data.items() if f in defaults and v != defaults[f])
        if odd:
            raise ValueError(f"backend 'torch' takes no tile fields (got {', '.join(odd)}); use "
                             "GemmConfig.vendor() or {'backend': 'torch'}")
        return {**defaults, **data}

    @model_serializer(mode="wrap")
    def _dump(self, handler):
        if self.backend == "torch":
            return {"backend": "torch"}
        data = handler(self)
        data.pop("backend", None)
        for name in ("reduce_kernel", "gluon"):  # at their defaults, the JSON from before them
            if not data[name]:
                data.pop(name)
        return data

    @field_validator("block_m", "block_n", "block_k")
    @classmethod
    def _block_pow2(cls, v: int) -> int:
        if not _is_pow2(v):
            raise ValueError(f"block sizes must be powers of two in {_POW2_BLOCKS}, got {v}")
        return v

    @field_validator("num_warps")
    @classmethod
    def _warps_pow2(cls, v: int) -> int:
        if v not in (1, 2, 4, 8, 16):
            raise ValueError(f"num_warps must be one of 1, 2, 4, 8, 16, got {v}")
        return v

    def short(self) -> str:
        if self.backend == "torch":
            return "torch"
        fam = "SK" if self.streamk else "P"
        grid = "sms" if self.grid is None else str(self.grid)
        flags = "".join(f" {name}" for name, on in (("tma", self.tma), ("hdesc", self.host_descriptors),
                                                     ("flat", self.flatten),
                                                     ("copy", self.aligned_copy),
                                                     ("reduce", self.reduce_kernel),
                                                     ("gluon", self.gluon)) if on)
        return (
            f"{fam} {self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} "
            f"w{self.num_warps} s{self.num_stages} grid={grid}{flags}"
        )


_VENDOR = GemmConfig(backend="torch")


def accumulator_regs_per_thread(config: GemmConfig) -> int:
    return config.block_m * config.block_n // (config.num_warps * 32)



def config_supports(config: GemmConfig, problem: Problem, device: DeviceInfo) -> str | None:
    """None when `config` can run `problem` on `device`; otherwise the reason it cannot."""
    if problem.m < 0 or problem.n < 0 or problem.k < 0:
        return f"negative problem size {problem.m}x{problem.n}x{problem.k}"
    reason = fp8_refusal(problem, device)
    if reason is not None:
        return reason
    if config.backend == "torch":
        # torch.mm / torch.addmm take every problem the public ops accept; scaled_mm's vendor does not.
        return vendor_scaled_refusal(problem, device) if problem.quantized else None
    if config.gluon:
        return gluon_refusal(config, problem, device)
    if problem.scales == "block":
        reason = block_refusal(config)
        if reason is not None:
            return reason
    need = smem_bytes(config, problem, device.arch)
    if need > device.smem_per_block:
        return (f"needs {need} B of shared memory ({config.num_stages} stages), "
                f"device {device.name} allows {device.smem_per_block} B")
    # fp32 accumulators live in registers (255 per thread at most, operands and addresses need room too):
    # 256x256 tiles on 8 warps (256 accumulator registers per thread) ran at 0.15x torch.mm on the H200.
    regs = accumulator_regs_per_thread(config)
    if regs > 128:
        return f"accumulator needs {regs} registers per thread with {config.num_warps} warps (max 128)"
    if problem.dtype == "fp32" and config.block_k > 128:
        return "fp32 operands support block_k <= 128"
    if DTYPE_BYTES[problem.dtype] == 1 and config.block_k < 32:
        # triton's NVIDIA backend (min_dot_size, 3.6 and 3.9): an 8-bit tl.dot needs K >= 32.
        return "fp8 and int8 operands need block_k >= 32"
    aligned = operands_aligned(problem)
    if config.aligned_copy and aligned:
        return "aligned_copy applies only when a leading dimension is not a multiple of 16 bytes"
    if config.host_descriptors and not config.tma:
        return "host_descriptors are TMA descriptors: they need tma=True"
    if config.reduce_kernel and not config.streamk:
        return "reduce_kernel sums Stream-K partials: it needs streamk=True"
    if config.tma:
        if device.arch not in TMA_ARCHS:
            return f"tensor descriptors (tma) need sm_90 or newer, device is {device.arch}"
        if not (aligned or config.aligned_copy):
            return "tensor descriptors (tma) need leading dimensions that are multiples of 16 bytes"
    return None


def block_refusal(config: GemmConfig) -> str | None:
    """Why the block-scaled kernel (kernels/blockscaled.py) cannot run a kernel `config`, None where it
    can: persistent tiles, by TMA or pointers, whose K step divides the scale block of 128."""
    if config.streamk:
        # A Stream-K segment's partial would reach the fix-up already summed over K blocks of other scales.
        return "block-wise scales run on the persistent kernel only (no Stream-K)"
    if config.aligned_copy or config.host_descriptors:
        return "block-wise scales read the operands in place (aligned_copy=False, host_descriptors=False)"
    if config.flatten:
        return "block-wise scales have no flattened tile loop (flatten=False)"
    if SCALE_BLOCK % config.block_k:
        return f"block-wise scales need a block_k dividing {SCALE_BLOCK} (one scale per K block)"
    if config.num_warps < 8 and (config.block_m > 64 or config.block_m * config.block_n > 64 * 128):
        # On the H200 under triton 3.6 one warp group over 128 rows returned NaN (128x64 and 128x128 by
        # TMA) and 64x256 failed to compile (tuning run of 2026-12-04): such tiles take 8 warps.
        return "block-wise scales on tiles of over 64 rows or 64x128 elements need 8 warps"
    return None


# The Gluon kernel's one shape: 128 x 128 x 128 tiles, num_warps 4 (each of its two consumer warpgroups;
# a producer warp besides), persistent with one program an SM, operands by host-built TMA descriptors.
GLUON_SHAPE = dict(block_m=128, block_n=128, block_k=128, num_warps=4)
_GLUON_OFF = ("streamk", "host_descriptors", "flatten", "aligned_copy", "reduce_kernel")


def gluon_refusal(config: GemmConfig, problem: Problem, device: DeviceInfo) -> str | None:
    """Why the Gluon fp8 kernels (kernels/blockscaled_gluon.py for block-wise scales, scaled_gluon.py for
    tensor- and row-wise ones) cannot run a `gluon` config, None where they can: fp8 operands on sm_90,
    layout nt (fp8 wgmma reads K-major operands), 16-byte aligned rows (TMA loads and stores), their one
    tile, a ring of num_stages A and B blocks that fits in shared memory beside two output tiles."""
    if not problem.quantized or "int8" in (problem.dtype, problem.b):
        return "gluon configs run fp8 scaled_mm only"
    if device.arch != "sm_90":
        return f"the Gluon kernel is written for sm_90 (wgmma, TMA), device is {device.arch}"
    if problem.layout != "nt":
        return "the Gluon kernel needs a row-major and b column-major (layout nt): fp8 wgmma reads K-major"
    if any(getattr(config, f) != v for f, v in GLUON_SHAPE.items()):
        return "the Gluon kernel has one tile: block_m=block_n=block_k=128, num_warps=4 (a warp group)"
    off = [f for f in _GLUON_OFF if getattr(config, f)] + ([] if config.tma else ["tma=False"])
    if off or config.grid is not None:
        return ("gluon configs are persistent TMA configs, one program an SM, no other lever (got "
                f"{', '.join(off + (['grid'] if config.grid is not None else []))})")
    if not rows_aligned(problem):
        return "the Gluon kernel's TMA loads and stores need rows of A, B and C of 16-byte multiples"
    need = config.num_stages * 2 * 128 * 128 + 2 * 64 * 128 * DTYPE_BYTES[problem.out] + 1024
    if need > device.smem_per_block:
        return (f"needs {need} B of shared memory ({config.num_stages} stages), "
                f"device {device.name} allows {device.smem_per_block} B")
    return None


def fp8_refusal(problem: Problem, device: DeviceInfo) -> str | None:
    """Why `device` runs no fp8 problem at all (no fp8 tensor cores: FP8_ARCHS), None where it may."""
    if problem.quantized and "int8" not in (problem.dtype, problem.b) and device.arch not in FP8_ARCHS:
        return f"fp8 operands need an sm_89 or newer NVIDIA GPU, device is {device.arch}"
    return None


def torch_blockwise_fits(problem: Problem, arch: str) -> bool:
    """Whether torch's block-wise scaled mm (torch.nn.functional.scaled_mm, BlockWise1x128 x
    BlockWise128x128: cuBLASLt) takes a block problem: sm_90, e4m3 operands, a row-major and b
    column-major (layout nt), N whole blocks, K a whole number of 4 blocks (torch 2.11 refused K = 4224, 33
    blocks: "scale_b must have shape 36 x 8", 2026-12-04), M a multiple of 4 (cuBLASLt 13 refused M = 1,
    2, 3, 15 and 17 on the H200, took 4, 8, 16 and 32: 2026-12-04), a bf16 output and no bias (the kernels'
    contract adds the bias in fp32 before one cast, which torch's bf16 result would round twice), a torch
    that has the op. Elsewhere torch's side of a block problem is the dequantized fp32 product."""
    return (arch == "sm_90" and problem.scales == "block" and problem.layout == "nt" and problem.m % 4 == 0
            and problem.dtype == problem.b == "e4m3" and problem.n % SCALE_BLOCK == 0
            and problem.k % (4 * SCALE_BLOCK) == 0 and problem.out == "bf16" and problem.bias == "none"
            and _torch_has_blockwise())


@functools.cache
def _torch_has_blockwise() -> bool:
    import torch  # (here, not at import: the db commands load this module without torch)

    return hasattr(getattr(torch.nn.functional, "ScalingType", None), "BlockWise128x128")


def vendor_scaled_refusal(problem: Problem, device: DeviceInfo | None = None) -> str | None:
    """Why torch refuses a quantized problem on CUDA (scaled_mm's vendor: torch._scaled_mm for fp8,
    torch._int_mm for int8), None where it runs it, so that dispatch, the tuner and the heuristic never
    pick a vendor that would raise. Each rule is aten's check (_scaled_mm_out_cuda, _int_mm_out_cuda)
    or cuBLASLt's refusal, as torch 2.11+cu130 answered on the H200 (2026-12-02: every layout, sizes 1,
    8-48 and 17, each dtype pair, scale mix, output and bias dtype). The output and bias dtypes set no
    rule: call.run's vendor takes torch's fp32 result where cuBLASLt refuses them (fp8 outputs, a bias
    of another dtype than the output, any bias with an fp32 output) and adds the bias and casts itself.
    (Row-wise scales with an fp32 result need cuBLAS >= 12.9, as that build has; older builds run
    CUTLASS there, bf16 and fp16 outputs only.)"""
    if problem.scales == "block":
        return None  # torch's block-wise op where the call suits it, else the dequantized fp32 product
    m, n, k = problem.m, problem.n, problem.k
    if problem.layout != "nt":
        # fp8: "Only multiplication of row-major and column-major matrices is supported by cuBLASLt";
        # int8: other layouts failed with CUBLAS_STATUS_NOT_SUPPORTED on some sizes (M 17-48 by 32x32).
        return "torch needs a row-major and b column-major (layout nt)"
    if problem.dtype == "int8":
        # _int_mm: "self.size(0) needs to be greater than 16", K and N "a multiple of 8".
        if m <= 16 or k % 8 or n % 8:
            return "torch._int_mm needs M > 16 and K, N multiples of 8"
        return None
    if k % 16 or n % 16:  # "trailing dimension of mat1 to be divisible by 16", "mat2 shape ... by 16"
        return "torch._scaled_mm needs K and N multiples of 16"
    if problem.dtype == problem.b == "e5m2":
        return "torch._scaled_mm does not multiply two e5m2 matrices"
    if problem.scales not in ("tensor", "row"):  # "Invalid scaling configuration"
        return f"torch._scaled_mm takes tensor-wise or row-wise scales on both operands, not {problem.scales}"
    if device is not None and device.arch == "interpreter" and problem.scales == "row" \
            and not cpu_scaled_mm_takes_rows():
        return "this torch's CPU _scaled_mm takes tensor-wise scales only"
    return None


@functools.cache
def cpu_scaled_mm_takes_rows() -> bool:
    """Whether the running torch's CPU torch._scaled_mm takes row-wise scales (the interpreter's vendor
    for CPU tensors): torch 2.11's asserts one scale each, 2.13's takes them. Asked once, of a 16^3
    product, where no torch version table could be kept true. The out= overload, which transparent mode
    does not intercept: asked from inside a routed call, the probe never comes back through dispatch."""
    import torch

    a = torch.ones(16, 16).to(torch.float8_e4m3fn)
    out = torch.empty(16, 16, dtype=torch.bfloat16)
    try:
        torch._scaled_mm(a, a.t(), torch.ones(16, 1), torch.ones(1, 16), out_dtype=torch.bfloat16, out=out)
    except (RuntimeError, NotImplementedError, TypeError):
        return False
    return bool((out == 16).all())


def require_supported(config: GemmConfig, problem: Problem, device: DeviceInfo) -> None:
    reason = config_supports(config, problem, device)
    if reason is not None:
        raise ValueError(f"config {config.short()} is not feasible for "
                         f"{problem.m}x{problem.n}x{problem.k} {problem.dtype}: {reason}")


bind_tuning_db(GemmConfig, config_supports)  # every reader of tuning_db in this process gets GemmConfigs
