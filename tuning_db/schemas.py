"""The validated values the tuning database stores and returns: keys, environments, results; and the
binding through which the application that tunes tells the database what its configs are.

tuning_db imports nothing of the application (tritonblas). A config is stored as its canonical JSON and
read back through the bound config type's validation, never pickled or eval'ed. Unbound, a config is a
`StoredConfig` (any JSON object), every config and arch is accepted and `env=` must be passed where the
running environment is needed. tritonblas binds when `tritonblas.config` is imported:

    bind(config_type=GemmConfig, supports=..., check_arch=..., is_vendor=..., current_env=...)
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timezone
from typing import Annotated, Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from .vocabulary import BiasKind, DType, Layout, Scales, quantized_mismatch

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
# What measuring a candidate came to: ok, or why it did not run correctly.
Status = Literal["ok", "compile_error", "out_of_resources", "wrong_result", "timeout", "launch_error"]
Source = Literal["tuned", "imported"]


class StoredConfig(BaseModel):
    """A config as stored when no application has bound its config type: any JSON object."""

    model_config = ConfigDict(frozen=True, extra="allow")

    def __hash__(self) -> int:
        return hash(config_json(self))

    def short(self) -> str:
        return config_json(self)


@dataclass(frozen=True)
class Binding:
    """What the application tells the database (see the module docstring and `bind`)."""

    config_type: type[BaseModel] = StoredConfig
    supports: Callable[[Any, ProblemKey], str | None] = lambda config, key: None
    check_arch: Callable[[str], object] = lambda arch: None
    is_vendor: Callable[[Any], bool] = lambda config: False
    current_env: Callable[[], EnvIdentity] | None = None


_binding = Binding()
# Models with a `config` field (and models holding them), rebuilt for the bound config type, in order.
_CONFIG_MODELS: list[type[BaseModel]] = []
M = TypeVar("M", bound=type[BaseModel])


def holds_config(model: M) -> M:
    """Class decorator: `model`'s `config` field (or a model it holds) takes the bound config type."""
    _CONFIG_MODELS.append(model)
    if _binding.config_type is not StoredConfig:
        _rebuild(model)
    return model


def _rebuild(model: type[BaseModel]) -> None:
    if "config" in model.model_fields:
        field = model.model_fields["config"]
        field.annotation = _binding.config_type if field.is_required() else _binding.config_type | None
    model.model_rebuild(force=True)


def bind(*, config_type: type[BaseModel], supports: Callable[[Any, ProblemKey], str | None],
         check_arch: Callable[[str], object], is_vendor: Callable[[Any], bool],
         current_env: Callable[[], EnvIdentity]) -> None:
    """Bind the application's configs for this process (once; binding again replaces it):
    - config_type: the pydantic model of a config (frozen, hashable; stored as its JSON);
    - supports(config, key): None when `config` can run the problem of `key` on its arch, else why
      not (every entry of a config file is checked before anything is imported);
    - check_arch(arch): raises ValueError for an arch the application does not know;
    - is_vendor(config): whether `config` is the vendor GEMM (a config file records, for a problem it
      won, the fastest other config measured with it);
    - current_env(): the EnvIdentity of the code running now (the default `env` everywhere)."""
    global _binding
    _binding = Binding(config_type, supports, check_arch, is_vendor, current_env)
    for model in _CONFIG_MODELS:
        _rebuild(model)


def binding() -> Binding:
    return _binding


def config_json(config: BaseModel) -> str:
    """Canonical JSON of a config: the stored form, and the identity of a measured candidate."""
    return json.dumps(config.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


def config_from_json(text: str) -> Any:
    return _binding.config_type.model_validate_json(text)


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
    scales: Scales = "none"  # a quantized problem's scale mode (vocabulary.Scales); "none": a plain GEMM

    @model_validator(mode="after")
    def _consistent(self) -> GemmShape:
        reason = quantized_mismatch(self.a_dtype, self.b_dtype, self.out_dtype, self.bias, self.scales)
        if reason is not None:
            raise ValueError(reason)
        return self

    @classmethod
    def from_problem(cls, problem: Any) -> GemmShape:
        """From any object with m, n, k, dtype (of A), out (of C), layout and bias, and optionally b (B's
        dtype, default A's) and scales (default "none")."""
        return GemmShape(m=problem.m, n=problem.n, k=problem.k, a_dtype=problem.dtype,
                         b_dtype=getattr(problem, "b", problem.dtype), out_dtype=problem.out,
                         layout=problem.layout, bias=problem.bias, scales=getattr(problem, "scales", "none"))

    def shape_key(self) -> tuple:
        return tuple(getattr(self, f) for f in GemmShape.model_fields)


class ProblemKey(GemmShape):
    """The full key of a tuned problem: what was multiplied, and on which device."""

    arch: Arch
    device_name: DeviceName
    sm_count: SmCount

    @classmethod
    def from_problem(cls, problem: Any, device: Any) -> ProblemKey:
        """The key of `problem` (see GemmShape.from_problem) on `device` (anything with arch, name and
        sm_count)."""
        return cls(**GemmShape.from_problem(problem).model_dump(), arch=device.arch, device_name=device.name,
                   sm_count=device.sm_count)

    def arch_key(self) -> tuple:
        """The key without the device: a winner tuned on one sm_90 device serves every sm_90 device."""
        return (self.arch, *self.shape_key())

    def sort_key(self) -> tuple:
        return (*self.arch_key(), self.device_name, self.sm_count)

    def describe(self) -> str:
        dt = self.a_dtype if self.a_dtype == self.b_dtype else f"{self.a_dtype}x{self.b_dtype}"
        scales = "" if self.scales == "none" else f" scales={self.scales}"
        return (f"{self.m}x{self.n}x{self.k} {dt}->{self.out_dtype} {self.layout} bias={self.bias}{scales} "
                f"{self.arch}")


class EnvIdentity(BaseModel):
    """What a measurement depends on besides the problem. A kernel change makes it stale; a result of
    another triton version (same kernels) still serves, after any of the running version's."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    triton_version: Label
    torch_version: Label
    kernel_hash: KernelHash
    timing_protocol: Label
    # The running code only (never stored: a stored row has one kernel hash): the kernel hashes of
    # problems whose kernels are hashed apart, by scale mode ("block": the block-scaled kernel's), so a
    # change to one family's kernels stales its winners and no others.
    family_hashes: tuple[tuple[Scales, KernelHash], ...] = ()

    @classmethod
    def current(cls) -> EnvIdentity:
        """The running code's identity, as the bound application says (`bind(current_env=...)`)."""
        if _binding.current_env is None:
            raise RuntimeError("tuning_db: no application has bound the running environment "
                               "(tuning_db.schemas.bind(current_env=...)); pass env= explicitly")
        return _binding.current_env()

    def for_scales(self, scales: str) -> EnvIdentity:
        """The environment a problem of this scale mode is tuned and looked up under: its family's
        kernel hash where it has one of its own, else `kernel_hash`."""
        found = dict(self.family_hashes).get(scales, self.kernel_hash)
        return self.model_copy(update={"kernel_hash": found, "family_hashes": ()})

    def hashes(self) -> tuple[str, ...]:
        """Every kernel hash the running code serves: `kernel_hash` and the families'."""
        return (self.kernel_hash, *sorted({h for _, h in self.family_hashes} - {self.kernel_hash}))

    def is_fresh_for(self, running: EnvIdentity) -> bool:
        """Fresh: same triton and same kernels. A torch upgrade alone does not change a kernel's speed."""
        return self.triton_version == running.triton_version and self.serves(running)

    def serves(self, running: EnvIdentity) -> bool:
        """Same kernel sources: the config runs the same code, so it serves under any triton version
        (feasibility is checked again where it is used); only another kernel hash makes it stale."""
        return self.kernel_hash in running.hashes()


@holds_config
class Measurement(BaseModel):
    """One timed candidate config; failures are recorded too, so a retune skips them."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    config: StoredConfig  # the bound config type (bind)
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


def version_key(version: str) -> tuple:
    """Sorts version labels numerically part by part ("3.10.0" after "3.9.0"); non-numeric parts
    sort before numbers, by text, so any two labels compare."""
    return tuple((1, int(p), "") if p.isdigit() else (0, 0, p) for p in re.split(r"[.+\-]", version))


def utc(dt: datetime) -> datetime:
    """Aware UTC; a naive datetime is taken to be UTC already (that is how the database stores it)."""
    return dt.replace(tzinfo=timezone.utc) if dt.tzinfo is None else dt.astimezone(timezone.utc)


@holds_config
class Winner(BaseModel):
    """The fastest config found for a key in one environment."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key: ProblemKey
    config: StoredConfig  # the bound config type (bind)
    median_ms: Millis
    torch_ms: Millis | None = None
    speedup: Speedup | None = None
    source: Source = "tuned"
    host: Host = ""
    created_at: datetime
    env: EnvIdentity
    stale: bool = False  # tuned for other kernel sources: never used
    # Tuned under another triton version than the running one (same kernels): it serves, after any
    # winner of the running version for the same problem.
    other_triton: bool = False

    @classmethod
    def state_for(cls, env: EnvIdentity, running: EnvIdentity) -> dict[str, bool]:
        """The `stale` and `other_triton` fields of a winner of `env` read by `running` code."""
        serves = env.serves(running)
        return {"stale": not serves, "other_triton": serves and env.triton_version != running.triton_version}

    @field_validator("created_at")
    @classmethod
    def _utc(cls, v: datetime) -> datetime:
        return utc(v)
