"""The validated values the tuning database stores and returns: keys, environments, results.

Everything that enters the database or a config file passes through these pydantic models; configs are
stored as their canonical JSON and read back through GemmConfig's validation, never pickled or eval'ed.
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from tritonblas.config import BiasKind, DeviceInfo, DType, GemmConfig, Layout, Problem

# Largest M, N or K a key may hold: 2**24 already makes a 16M x 16M fp16 operand of 512 TiB.
MAX_DIM = 2**24
# A single GEMM slower than 10 minutes is a broken measurement, not a result.
MAX_MS = 600_000.0
# Free text that reaches a terminal or a file header: printable, no control characters.
_NAME = r"^[^\x00-\x1f\x7f]*$"
Dim = Annotated[int, Field(ge=0, le=MAX_DIM)]
Millis = Annotated[float, Field(gt=0.0, le=MAX_MS)]
# Constraints reject NaN and infinity too: NaN fails every comparison, infinity the upper bounds.
MeasuredMs = Annotated[float, Field(ge=0.0, le=MAX_MS)]
NonNegative = Annotated[float, Field(ge=0.0, allow_inf_nan=False)]
Speedup = Annotated[float, Field(gt=0.0, le=1e6)]
Arch = Annotated[str, Field(min_length=1, max_length=32, pattern=r"^[A-Za-z0-9_.\-]+$")]
Label = Annotated[str, Field(min_length=1, max_length=64, pattern=_NAME)]
KernelHash = Annotated[str, Field(min_length=1, max_length=64, pattern=r"^[0-9a-zA-Z]+$")]
DeviceName = Annotated[str, Field(max_length=128, pattern=_NAME)]
Host = Annotated[str, Field(max_length=255, pattern=_NAME)]
SmCount = Annotated[int, Field(ge=1, le=4096)]
Status = Literal["ok", "compile_error", "out_of_resources", "wrong_result", "timeout", "launch_error"]
Source = Literal["tuned", "imported"]


def config_json(config: GemmConfig) -> str:
    """Canonical JSON of a config: the stored form, and the identity of a measured candidate."""
    return json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def config_from_json(text: str) -> GemmConfig:
    return GemmConfig.model_validate_json(text)


class GemmShape(BaseModel):
    """What is multiplied: the device-independent part of a key (a config file entry's key)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    m: Dim
    n: Dim
    k: Dim
    a_dtype: DType
    b_dtype: DType
    out_dtype: DType
    layout: Layout = "nn"
    bias: BiasKind = "none"

    def shape_key(self) -> tuple:
        return tuple(getattr(self, f) for f in GemmShape.model_fields)


class ProblemKey(GemmShape):
    """The full key of a tuned problem: what was multiplied, and on which device."""

    arch: Arch
    device_name: DeviceName
    sm_count: SmCount

    @classmethod
    def from_problem(cls, problem: Problem, device: DeviceInfo) -> ProblemKey:
        return cls(m=problem.m, n=problem.n, k=problem.k, a_dtype=problem.dtype, b_dtype=problem.dtype,
                   out_dtype=problem.out, layout=problem.layout, bias=problem.bias, arch=device.arch,
                   device_name=device.name, sm_count=device.sm_count)

    def to_problem(self) -> Problem:
        if self.a_dtype != self.b_dtype:
            raise ValueError(f"key has mixed operand dtypes {self.a_dtype}/{self.b_dtype}; "
                             "Problem takes one operand dtype")
        out = None if self.out_dtype == self.a_dtype else self.out_dtype
        return Problem(self.m, self.n, self.k, self.a_dtype, self.layout, self.bias, out)

    def arch_key(self) -> tuple:
        """The key without the device: a winner tuned on one sm_90 device serves every sm_90 device."""
        return (self.arch, *self.shape_key())

    def sort_key(self) -> tuple:
        return (*self.arch_key(), self.device_name, self.sm_count)

    def describe(self) -> str:
        dt = self.a_dtype if self.a_dtype == self.b_dtype else f"{self.a_dtype}x{self.b_dtype}"
        return (f"{self.m}x{self.n}x{self.k} {dt}->{self.out_dtype} {self.layout} bias={self.bias} "
                f"{self.arch}")


class EnvIdentity(BaseModel):
    """What a measurement depends on besides the problem. Triton or kernel changes make it stale."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    triton_version: Label
    torch_version: Label
    kernel_hash: KernelHash
    timing_protocol: Label

    @classmethod
    def current(cls) -> EnvIdentity:
        from tritonblas import identity  # torch loads here, on first use, not at import

        return cls(triton_version=identity.triton_version(), torch_version=identity.torch_version(),
                   kernel_hash=identity.kernel_hash(), timing_protocol=identity.TIMING_PROTOCOL)

    def is_fresh_for(self, running: EnvIdentity) -> bool:
        """Fresh: same triton and same kernels. A torch upgrade alone does not change a kernel's speed."""
        return (self.triton_version == running.triton_version
                and self.kernel_hash == running.kernel_hash)


class Measurement(BaseModel):
    """One timed candidate config; failures are recorded too, so a retune skips them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: GemmConfig
    status: Status
    median_ms: MeasuredMs | None = None
    p20_ms: MeasuredMs | None = None
    p80_ms: MeasuredMs | None = None
    tflops: NonNegative | None = None
    rel_error: NonNegative | None = None
    note: str = Field(default="", max_length=512)

    @model_validator(mode="after")
    def _ok_has_a_time(self) -> Measurement:
        if self.status == "ok" and self.median_ms is None:
            raise ValueError("an 'ok' measurement needs median_ms")
        return self


def utc(dt: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already (that is how the database stores it)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


class Winner(BaseModel):
    """The fastest config found for a key in one environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: ProblemKey
    config: GemmConfig
    median_ms: Millis
    torch_ms: Millis | None = None
    speedup: Speedup | None = None
    source: Source = "tuned"
    host: Host = ""
    created_at: datetime
    env: EnvIdentity
    stale: bool = False

    @field_validator("created_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return utc(v)
