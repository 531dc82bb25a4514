"""GemmConfig, the device and problem descriptions, and the one feasibility predicate.

`config_supports` is the single answer to "can this config run this problem on this device?": the
heuristic, the tuner's pruner, config-file loading and `matmul(config=...)` all call it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer, model_validator

from .arith import DEFERRED_CHUNK, fixup_deferred, gemm_flops

DType = Literal["fp16", "bf16", "fp32"]
BiasKind = Literal["none", "scalar", "row", "column", "full"]
Layout = Literal["nn", "nt", "tn", "tt"]
Backend = Literal["triton", "torch"]
BACKENDS: tuple[str, ...] = ("triton", "torch")

DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4}
# Problem.small: operands and work below which a problem's kernel takes a few microseconds on the H200
# (512^3 3.6 us, 1024x1024x512 4.8, 128x128x8192 8.2 in graph replay: h200-graph-small-tune10.json).
SMALL_OPERAND_BYTES = 8 << 20
SMALL_FLOPS = 2**31
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
        if not self.reduce_kernel:  # at its default, the JSON from before it
            data.pop("reduce_kernel", None)
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
                                                     ("reduce", self.reduce_kernel)) if on)
        return (
            f"{fam} {self.block_m}x{self.block_n}x{self.block_k} g{self.group_m} "
            f"w{self.num_warps} s{self.num_stages} grid={grid}{flags}"
        )


_VENDOR = GemmConfig(backend="torch")


@dataclass(frozen=True)
class DeviceInfo:
    """What the feasibility predicate and the heuristic need to know of a device."""

    arch: str  # "sm_90", "gfx942", or "interpreter"
    name: str
    sm_count: int
    smem_per_block: int  # bytes of shared memory one program may use
    regs_per_sm: int = 65536


# The interpreter runs programs one after another on the CPU: no shared memory limit to speak of; a
# small "SM count" keeps default grids (and so test run time) small.
INTERPRETER_DEVICE = DeviceInfo(arch="interpreter", name="triton-interpreter", sm_count=4,
                                smem_per_block=232448)


@dataclass(frozen=True)
class ArchFacts:
    """What is known of an arch without its device: the shared memory one program may opt into, and the
    SM (CU) count of a reference part (a device that is present reports its own count)."""

    part: str
    sm_count: int
    smem_per_block: int


# Used where only the arch is known: config files and database keys (their headers carry the SM count
# of the device they were tuned on), `explain --arch`. Shared memory is CUDA's per-block opt-in maximum
# (64 KiB of LDS on AMD). Other parts of an arch differ in SM count: H100 PCIe 114, A40 84, L4 58.
ARCHS: dict[str, ArchFacts] = {
    "sm_80": ArchFacts("A100", 108, 166912),
    "sm_86": ArchFacts("A10", 72, 101376),
    "sm_89": ArchFacts("L40S", 142, 101376),
    "sm_90": ArchFacts("H100 SXM / H200", 132, 232448),
    "sm_100": ArchFacts("B200", 148, 232448),
    "sm_120": ArchFacts("RTX 5090", 170, 101376),
    "gfx90a": ArchFacts("MI250X (one GCD)", 110, 65536),
    "gfx942": ArchFacts("MI300X", 304, 65536),
    "interpreter": ArchFacts("Triton interpreter", INTERPRETER_DEVICE.sm_count,
                             INTERPRETER_DEVICE.smem_per_block),
}


def device_for_arch(arch: str, name: str = "", sm_count: int | None = None) -> DeviceInfo:
    """A DeviceInfo for an arch known only by name (an imported file's header, a DB key, --arch); the SM
    count is the reference part's (ARCHS) unless given."""
    facts = ARCHS.get(arch)
    if facts is None:
        raise ValueError(f"unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    return DeviceInfo(arch=arch, name=name or arch, sm_count=sm_count or facts.sm_count,
                      smem_per_block=facts.smem_per_block)


@dataclass(frozen=True)
class Problem:
    """The dispatch key of one GEMM: C[M, N] = A[M, K] @ B[K, N] (+ bias)."""

    m: int
    n: int
    k: int
    dtype: DType
    layout: Layout = "nn"
    bias: BiasKind = "none"
    out_dtype: DType | None = None

    @property
    def out(self) -> DType:
        return self.out_dtype or self.dtype

    @classmethod
    def from_key(cls, key) -> Problem:
        """The problem of a tuning_db key (a ProblemKey or GemmShape)."""
        if key.a_dtype != key.b_dtype:
            raise ValueError(f"key has mixed operand dtypes {key.a_dtype}/{key.b_dtype}; "
                             "Problem takes one operand dtype")
        out = None if key.out_dtype == key.a_dtype else key.out_dtype
        return cls(key.m, key.n, key.k, key.a_dtype, key.layout, key.bias, out)

    @property
    def small(self) -> bool:
        """A problem whose kernel runs for a few microseconds, of the order of an eager call's host time:
        A and B together at most SMALL_OPERAND_BYTES and at most SMALL_FLOPS (every problem of
        classes/small.yaml; not a decode step's 32 MB weight). The tuner times these as CUDA-graph
        replays (tuning/benchmark.replayed), and no launch is added to them (the reduce kernel)."""
        operands = (self.m * self.k + self.k * self.n) * DTYPE_BYTES[self.dtype]
        return operands <= SMALL_OPERAND_BYTES and gemm_flops(self.m, self.n, self.k) <= SMALL_FLOPS

    def short(self) -> str:
        """E.g. "16x6144x4096 fp16 nt +row" (the bias only when there is one)."""
        out = "" if self.out == self.dtype else f"->{self.out}"
        return f"{self.m}x{self.n}x{self.k} {self.dtype}{out} {self.layout}" + \
            ("" if self.bias == "none" else f" +{self.bias}")


# Archs whose allocation smem_bytes was fitted to (the interpreter stands for the H200 in tests).
SMEM_FITTED_ARCHS = ("sm_90", "interpreter")


def smem_bytes(config: GemmConfig, problem: Problem, arch: str = "sm_90") -> int:
    """Shared memory triton 3.6 allocates for the kernels on sm_90, fitted to its own figures:
    scripts/smem_sweep.py compiles them on a CPU exactly as a launch would (tritonblas.launch's
    arguments, triton's specialization) over a sample of the heuristic's and the tuner's space, every
    dtype, layout, K residue and bias, the TMA, pointer and aligned-copy paths, both families. Fitted
    to 4476 records, checked on 1726 more drawn afterwards (none of their 255 rows over the limit
    accepted); of all 6202 (tests/data/smem_records.json, tests/test_smem_records.py) this estimate
    exceeds the H200's 232448 B on each of the 971 over it and refuses 112 of the 3369 (problem,
    config) pairs that fit (3.3%). The same harness reproduced the "Required" bytes of all 10 configs
    the H200 refused in two tuning runs, and fits all 1098 of their near-limit rows that ran.
    - Operand buffers, one A (BM x BK) and one B (BK x BN) tile per pipeline stage where the dot runs
      on wgmma (block_m >= 64), one stage fewer where it runs on mma.sync (block_m 16 and 32); fp32 by
      TMA takes every stage either way (its ieee-precision FMA dot does; whether a call runs tf32 is
      the caller's allow_tf32 flag, not part of the problem, so fp32 is estimated for both).
    - A 16-bit operand the pointer loop reads one element at a time (an odd leading dim not copied to
      a padded buffer, or an odd M / N where that is its contiguous axis) is not pipelined through
      shared memory: one buffer (4095x4097x127 by pointers, 128x128x128 at 5 stages: 64 KiB).
    - The output tile (BM x BN of the output dtype) on top where the operand buffers stay live through
      the epilogue: a flattened tile loop that pipelines (num_stages > 1) prefetches the next tile's
      first K blocks meanwhile, and K == 1 is a constant to triton; with pointers and a ragged K, the
      flattened loop's peeled last block takes one stage of A and B instead, when that is larger.
      (Issue 21: 256x128x64 at 4 stages, TMA, flattened, on 2911x926x11 asked for 4 x 48 KiB + a
      256x128 fp16 tile + 32 B = 262176 B.)
    - 1 KiB for barriers and alignment (triton's figure was at most 96 B over the buffers). Not
      counted: the epilogue's layout conversion of the fp32 accumulator, which shares the operand
      buffers (triton asks for the larger of the two) and is at most 128 KiB within the register rule.
    On archs it was not fitted to (`arch` not in SMEM_FITTED_ARCHS) every operand counts every stage:
    the fewer buffers were measured on sm_90 only. A config triton still refuses falls back to the
    next selection (`ops._fall_back`); docs/notes/shared-memory.md says how to measure again."""
    elt = DTYPE_BYTES[problem.dtype]
    bm, bn, bk, stages = config.block_m, config.block_n, config.block_k, max(config.num_stages, 1)
    a_tile, b_tile = bm * bk * elt, bk * bn * elt
    fitted = arch in SMEM_FITTED_ARCHS
    full = stages if not fitted or bm >= 64 or (config.tma and elt == 4) else max(stages - 1, 1)
    a_bufs = b_bufs = full
    if fitted and not config.tma:
        a_one, b_one = _one_element_loads(problem, config.aligned_copy)
        a_bufs, b_bufs = (1 if a_one else full), (1 if b_one else full)
    need = a_bufs * a_tile + b_bufs * b_tile
    out_tile = bm * bn * DTYPE_BYTES[problem.out]
    if config.flatten and stages > 1 and not config.tma and problem.k % bk:
        need += max(a_tile + b_tile, out_tile)
    elif (config.flatten and stages > 1) or problem.k == 1:
        need += out_tile
    return need + 1024


def fixup_plan(config: GemmConfig, tiles: int, programs: int, splits: int, tma: bool) -> tuple[int, bool]:
    """(FIXUP_CHUNKS, DEFERRED) of a Stream-K launch (kernels/streamk.py) whose `tiles` leave `splits`
    segments per leftover tile on `programs` programs; `tma`: its loads run TMA.

    Summed on arrival, a tile holds chunks of 4096 fp32 (32 values a thread on 4 warps, so four chunks
    in flight are as many as one whole 128x128 partial): on TMA tiles; pointer tiles read whole partials
    one at a time. H200, graph replay against whole partials (pipelined by cp.async on TMA tiles on 4
    warps, kernel-levers row 30), bf16 (tests/kernel_ab.py --chunks --both-modes, row 31): TMA 128x128
    128x128x8192 38.8 -> 35.1 us, 256x256x65536 49.0 -> 47.7, 1024x1024x16384 60.6 -> 58.9; pointer
    128x128 at 5 stages slower in chunks, 768x3072x8192 72.7 -> 74.3, 2176x2176x4096 71.1 -> 73.8.
    Deferred (arith.fixup_deferred), chunks of 2048 fp32, at most 8 (the tile counter's claim bits):
    up to 8 programs claim one each and read its S slots eight at a time (row 33)."""
    if config.reduce_kernel:  # no fix-up in the kernel (kernels/reduce.py sums the partials)
        return 1, False
    def chunks(floats: int) -> int:  # chunks of `floats` fp32 to a tile, 1 to 8 (the claim bits)
        return min(8, max(1, config.block_m * config.block_n // floats))

    deferred_chunks = chunks(DEFERRED_CHUNK)
    if fixup_deferred(tiles, programs, splits, deferred_chunks):
        return deferred_chunks, True
    return (chunks(4096) if tma else 1), False


def _one_element_loads(problem: Problem, copied: bool) -> tuple[bool, bool]:
    """Per operand (A, B), whether the pointer loop reads it one element at a time, as launch's
    A_DIV / B_DIV = 1 make it for a 16-bit dtype: an odd leading dim (a copied operand's is padded),
    or an odd M (A column-major) / N (B row-major), the contiguous axis it wraps. Problems with a
    dimension of 1 (which triton turns into constants) count as not."""
    if DTYPE_BYTES[problem.dtype] != 2 or min(problem.m, problem.n, problem.k) <= 1:
        return False, False
    lead_a, lead_b = operand_leading_dims(problem)
    a_wraps = problem.layout[0] == "t" and problem.m % 2  # contiguous along M
    b_wraps = problem.layout[1] == "n" and problem.n % 2  # contiguous along N
    return (bool(lead_a % 2 and not copied) or bool(a_wraps),
            bool(lead_b % 2 and not copied) or bool(b_wraps))


def accumulator_regs_per_thread(config: GemmConfig) -> int:
    return config.block_m * config.block_n // (config.num_warps * 32)


# Archs whose copy engine takes tensor descriptors (and the interpreter, which emulates them).
TMA_ARCHS = ("sm_90", "sm_100", "sm_120", "interpreter")


def operand_leading_dims(problem: Problem) -> tuple[int, int]:
    """Leading (non-unit) stride of A and B, in elements, for dense storage in the problem's layout."""
    lead_a = problem.k if problem.layout[0] == "n" else problem.m
    lead_b = problem.n if problem.layout[1] == "n" else problem.k
    return lead_a, lead_b


def config_supports(config: GemmConfig, problem: Problem, device: DeviceInfo) -> str | None:
    """None when `config` can run `problem` on `device`; otherwise the reason it cannot."""
    if problem.m < 0 or problem.n < 0 or problem.k < 0:
        return f"negative problem size {problem.m}x{problem.n}x{problem.k}"
    if config.backend == "torch":
        return None  # torch.mm / torch.addmm take every problem the public ops accept
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


def aligned_leading_dim(lead: int, elt: int) -> int:
    """`lead` elements of `elt` bytes rounded up to a multiple of 16 bytes: the leading dim of an
    aligned_copy buffer (launch._aligned), and what the heuristic prices the copied operand at."""
    per16 = 16 // elt
    return -(-lead // per16) * per16


def operand_alignment(problem: Problem) -> tuple[bool, bool]:
    """Whether dense A and B, each, in the problem's layout have a 16-byte aligned leading dimension."""
    elt = DTYPE_BYTES[problem.dtype]
    lead_a, lead_b = operand_leading_dims(problem)
    return lead_a * elt % 16 == 0, lead_b * elt % 16 == 0


def operands_aligned(problem: Problem) -> bool:
    return all(operand_alignment(problem))


def require_supported(config: GemmConfig, problem: Problem, device: DeviceInfo) -> None:
    reason = config_supports(config, problem, device)
    if reason is not None:
        raise ValueError(f"config {config.short()} is not feasible for "
                         f"{problem.m}x{problem.n}x{problem.k} {problem.dtype}: {reason}")


def _bind_tuning_db() -> None:
    """tuning_db, the storage, imports nothing of tritonblas and stores configs as JSON objects. Bound
    here, where GemmConfig is defined, whatever reads the database in this process (dispatch, the tuner,
    the CLI) gets GemmConfigs back, config files are checked with `config_supports`, and stale results
    are told by tritonblas.identity. tuning_db.schemas loads pydantic only, no database."""
    from tuning_db import schemas

    def supports(config: GemmConfig, key) -> str | None:
        device = device_for_arch(key.arch, key.device_name, key.sm_count)
        return config_supports(config, Problem.from_key(key), device)

    def current_env() -> schemas.EnvIdentity:
        from . import identity  # torch loads here, on first use

        return schemas.EnvIdentity(triton_version=identity.triton_version(),
                                   torch_version=identity.torch_version(), kernel_hash=identity.kernel_hash(),
                                   timing_protocol=identity.TIMING_PROTOCOL)

    schemas.bind(config_type=GemmConfig, supports=supports, check_arch=device_for_arch,
                 is_vendor=lambda config: config.is_vendor, current_env=current_env)


_bind_tuning_db()
