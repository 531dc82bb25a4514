"""The shapes.yaml format: which GEMM problems to tune or benchmark.

    dtypes: [bf16, fp16]              # default dtypes for every shape
    shapes:
      - {m: 1024, n: 1024, k: 1024}
      - {m: [1, 16, 128], n: 4096, k: 4096, dtypes: [fp16], layout: nt, bias: row}
      - {m: 4096, n: 4096, k: 4096, dtypes: [e4m3], layout: nt, scales: row, out_dtype: bf16}

A list in m, n or k expands to the grid of all combinations. `op: grouped` entries are grouped GEMMs
(mixture-of-experts layers, tritonblas.grouped_mm's 2-D x 3-D form): `groups` experts, m rows in all,
each expert's weight (n, k) (layout nt: stored (E, N, K) as nn.Linear does), `group_sizes` (balanced or
zipf) the row counts a tuning run draws; they take no bias or scales, and `load_problems` leaves them
out (`load_grouped` reads them). Quantized problems (scaled_mm) have dtypes e4m3, e5m2 or int8 and
`scales` (tensor | row | row_a | row_b | block: fp8 only), optionally `b_dtype` (B's dtype where it
differs from A's: e4m3 with e5m2) and `out_dtype` (default: A's dtype for fp8, bf16 for int8, as
scaled_mm's); plain dtypes take no scales; `scales`, `b_dtype` and `out_dtype` may also be given at
the top level, for every entry that does not say its own. Errors name the file, the entry, the field and
the YAML line, so a typo in a 200-line suite is found at once.
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from tuning_db.schemas import MAX_DIM
from tuning_db.textfile import read_bounded_text
from tuning_db.vocabulary import (
    DTYPES,
    FLOAT_DTYPES,
    QUANT_DTYPES,
    BiasKind,
    DType,
    Layout,
    Scales,
    quantized_fault,
)

from .problem import Problem, default_quant_out

# A shapes file is a short list written by hand; these bounds keep a hostile or mistaken one (a 300 x
# 300 x 300 grid is three short lines) from exhausting memory before anything is reported.
MAX_FILE_BYTES = 4 * 2**20
MAX_PROBLEMS = 100_000

Dim = int | list[int]


class ShapesError(ValueError):
    """A shapes file that cannot be read or does not validate; the message says where."""


def _check_dim(v: object) -> object:
    values = v if isinstance(v, list) else [v]
    if isinstance(v, list) and not v:
        raise ValueError("an empty list expands to no problems")
    for x in values:
        if isinstance(x, bool) or not isinstance(x, int):
            raise ValueError(f"must be an integer or a list of integers, got {x!r}")
        if not 1 <= x <= MAX_DIM:  # the tuning database's key bound: larger dims cannot be stored
            raise ValueError(f"must be between 1 and {MAX_DIM}, got {x}")
    return v


def _check_dtypes(v: object) -> object:
    if v is None:
        return v
    if not isinstance(v, list) or not v:
        raise ValueError(f"must be a non-empty list of dtypes from {', '.join(DTYPES)}")
    bad = [d for d in v if d not in DTYPES]
    if bad:
        raise ValueError(f"unknown dtype {bad[0]!r}; valid dtypes: {', '.join(DTYPES)}")
    return v


class ShapeEntry(BaseModel):
    """One entry of `shapes:` as written in the file."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    m: Dim
    n: Dim
    k: Dim
    dtypes: list[DType] | None = None
    layout: Layout = "nn"
    bias: BiasKind = "none"
    scales: Scales | None = None  # None: the file's (top-level) scales, else "none"
    b_dtype: DType | None = None
    out_dtype: DType | None = None
    op: Literal["gemm", "grouped"] = "gemm"
    groups: int | None = Field(default=None, ge=1, le=4096)
    group_sizes: Literal["balanced", "zipf"] | None = None

    @field_validator("m", "n", "k", mode="before")
    @classmethod
    def _dims(cls, v: object) -> object:
        return _check_dim(v)

    @model_validator(mode="after")
    def _grouped_fields(self) -> ShapeEntry:
        if self.op == "grouped":
            if self.groups is None:
                raise ValueError("op grouped needs groups (the experts)")
            if self.bias != "none" or self.scales not in (None, "none") or self.b_dtype or self.out_dtype:
                raise ValueError("op grouped takes no bias, scales, b_dtype or out_dtype")
        elif self.groups is not None or self.group_sizes is not None:
            raise ValueError("groups and group_sizes are for op: grouped entries")
        return self

    @field_validator("dtypes", mode="before")
    @classmethod
    def _dtypes(cls, v: object) -> object:
        return _check_dtypes(v)


class ShapesFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    dtypes: list[DType] = Field(default_factory=lambda: ["bf16"])
    scales: Scales = "none"
    b_dtype: DType | None = None
    out_dtype: DType | None = None
    shapes: list[ShapeEntry] = Field(min_length=1)

    @field_validator("dtypes", mode="before")
    @classmethod
    def _dtypes(cls, v: object) -> object:
        return _check_dtypes(v)


class ShapeSpec(BaseModel):
    """One entry with its dtypes, scales and output dtype resolved (its own, else the file's); expands
    to Problems."""

    model_config = ConfigDict(frozen=True)

    ms: tuple[int, ...]
    ns: tuple[int, ...]
    ks: tuple[int, ...]
    dtypes: tuple[DType, ...]
    layout: Layout = "nn"
    bias: BiasKind = "none"
    scales: Scales = "none"
    b_dtype: DType | None = None
    out_dtype: DType | None = None
    op: str = "gemm"
    groups: int | None = None
    group_sizes: str | None = None
    source: str = ""  # "file.yaml entry 3", for messages

    def out_for(self, dtype: str) -> str | None:
        """The output dtype of the problems of `dtype`: the given one, else scaled_mm's default for a
        quantized problem (A's dtype for fp8, bf16 for int8), else None (a plain GEMM's: its dtype)."""
        if self.out_dtype is not None or self.scales == "none":
            return self.out_dtype
        return default_quant_out(dtype)

    def problems(self) -> list[Problem]:
        if self.op == "grouped":
            return []
        return [Problem(m, n, k, dt, self.layout, self.bias, self.out_for(dt), self.b_dtype, self.scales)
                for dt, m, n, k in itertools.product(self.dtypes, self.ms, self.ns, self.ks)]


def _mismatch(spec: ShapeSpec, dtype: str) -> tuple[str, str] | None:
    """The field at fault and why, when `spec`'s problems of `dtype` cannot be built; else None."""
    if spec.scales == "none" and dtype in QUANT_DTYPES:
        return "scales", (f"dtype {dtype} is quantized: it needs scales (tensor, row, row_a, row_b or "
                          "block) and optionally out_dtype")
    if spec.scales != "none" and dtype in FLOAT_DTYPES:
        return "scales", (f"dtype {dtype} is a plain GEMM and takes no scales (they are for "
                          f"{', '.join(QUANT_DTYPES)})")
    if spec.scales == "none" and spec.b_dtype not in (None, dtype):
        return "b_dtype", f"a plain GEMM has one dtype ({dtype}); b_dtype is for quantized problems"
    if spec.scales == "none" and spec.out_dtype not in (None, dtype):
        return "out_dtype", f"a plain GEMM of {dtype} writes {dtype}; out_dtype is for quantized problems"
    return quantized_fault(dtype, spec.b_dtype or dtype, spec.out_for(dtype), spec.bias, spec.scales)


def _as_tuple(v: Dim) -> tuple[int, ...]:
    return tuple(v) if isinstance(v, list) else (v,)


def _line_of(root: yaml.Node | None, loc: tuple) -> int | None:
    """1-based line of the node at `loc` (pydantic's error location) in the composed YAML tree."""
    node, line = root, None
    for part in loc:
        if isinstance(node, yaml.MappingNode) and isinstance(part, str):
            match = [(k, v) for k, v in node.value if getattr(k, "value", None) == part]
            if not match:
                break
            line, node = match[0][0].start_mark.line + 1, match[0][1]
        elif isinstance(node, yaml.SequenceNode) and isinstance(part, int) and part < len(node.value):
            node = node.value[part]
            line = node.start_mark.line + 1
        else:
            break
    return line


def _describe(path: Path, err: dict, root: yaml.Node | None) -> str:
    loc = tuple(err["loc"])
    where = f"{path}"
    line = _line_of(root, loc)
    if line is not None:
        where += f":{line}"
    parts = list(loc)
    if len(parts) >= 2 and parts[0] == "shapes" and isinstance(parts[1], int):
        where += f": shapes entry {parts[1] + 1}"
        parts = parts[2:]
    field = ".".join(str(p) for p in parts) or "(top level)"
    msg = err["msg"].removeprefix("Value error, ")
    return f"{where}: field '{field}': {msg}"


def _check_duplicate_keys(path: Path, node: yaml.Node | None) -> None:
    """YAML keeps the last of two equal keys without a word; `{m: 16, m: 32}` is a typo to report."""
    if isinstance(node, yaml.MappingNode):
        seen: set = set()
        for key, value in node.value:
            if getattr(key, "value", None) in seen:
                raise ShapesError(f"{path}:{key.start_mark.line + 1}: key '{key.value}' is given twice")
            seen.add(getattr(key, "value", None))
            _check_duplicate_keys(path, value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _check_duplicate_keys(path, item)


def _refuse_aliases(path: Path, text: str) -> None:
    """A shapes file needs no YAML aliases, and nested ones expand exponentially (a "billion laughs"
    file of ten lines would hang validation): refuse the first one, by line."""
    for event in yaml.parse(text, Loader=yaml.SafeLoader):
        if isinstance(event, yaml.AliasEvent):
            raise ShapesError(f"{path}:{event.start_mark.line + 1}: YAML aliases (*{event.anchor}) are "
                              "not supported in a shapes file")


def _parse(path: Path) -> tuple[object, yaml.Node | None]:
    text = read_bounded_text(path, MAX_FILE_BYTES, "shapes file", ShapesError)
    try:
        _refuse_aliases(path, text)
        data, root = yaml.safe_load(text), yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        problem = getattr(e, "problem", None) or str(e)
        raise ShapesError(f"{where}: invalid YAML: {problem}") from e
    _check_duplicate_keys(path, root)
    return data, root


def load_shapes(path: str | Path, dtypes: list[str] | None = None) -> list[ShapeSpec]:
    """Read and validate a shapes file. `dtypes`, when given, replaces every dtype list in the file."""
    path = Path(path)
    if dtypes is not None:
        try:
            _check_dtypes(list(dtypes))
        except ValueError as e:
            raise ShapesError(f"dtypes: {e}") from None
    data, root = _parse(path)
    if data is None:
        raise ShapesError(f"{path}: the file is empty; it needs a 'shapes' list")
    if not isinstance(data, dict):
        raise ShapesError(f"{path}: expected a mapping with 'dtypes' and 'shapes' at the top level, "
                          f"got {type(data).__name__}")
    try:
        parsed = ShapesFile.model_validate(data)
    except ValidationError as e:
        raise ShapesError("\n".join(_describe(path, err, root) for err in e.errors())) from None
    specs = []
    total = 0
    for i, entry in enumerate(parsed.shapes):
        chosen = dtypes or entry.dtypes or parsed.dtypes
        total += math.prod(len(_as_tuple(d)) for d in (entry.m, entry.n, entry.k)) * len(set(chosen))
        if total > MAX_PROBLEMS:
            raise ShapesError(f"{path}: shapes entry {i + 1}: the file expands to more than "
                              f"{MAX_PROBLEMS} problems")
        spec = ShapeSpec(ms=_as_tuple(entry.m), ns=_as_tuple(entry.n), ks=_as_tuple(entry.k),
                         dtypes=tuple(dict.fromkeys(chosen)), layout=entry.layout, bias=entry.bias,
                         scales=entry.scales or parsed.scales, b_dtype=entry.b_dtype or parsed.b_dtype,
                         out_dtype=entry.out_dtype or parsed.out_dtype, source=f"{path} entry {i + 1}",
                         op=entry.op, groups=entry.groups, group_sizes=entry.group_sizes)
        for dtype in spec.dtypes:
            bad = _mismatch(spec, dtype) if spec.op == "gemm" else (
                None if dtype in FLOAT_DTYPES else ("dtypes", f"op grouped takes {', '.join(FLOAT_DTYPES)}"))
            if bad is not None:
                line = _line_of(root, ("shapes", i))
                raise ShapesError(f"{path}{'' if line is None else f':{line}'}: shapes entry {i + 1}: "
                                  f"field '{bad[0]}': {bad[1]}")
        specs.append(spec)
    return specs


def load_problems(path: str | Path, dtypes: list[str] | None = None) -> list[Problem]:
    """Every problem of a shapes file in file order, each once (a shape listed twice is tuned once)."""
    return list(dict.fromkeys(p for spec in load_shapes(path, dtypes) for p in spec.problems()))


@dataclass(frozen=True)
class GroupedEntry:
    """One `op: grouped` problem: E experts, m rows in all, each expert's weight (N, K)."""

    groups: int
    m: int
    n: int
    k: int
    dtype: str = "bf16"
    layout: str = "nt"
    group_sizes: str = "balanced"

    def text(self) -> str:
        return f"E={self.groups} {self.m}x{self.n}x{self.k} {self.dtype} {self.layout} {self.group_sizes}"


def load_grouped(path: str | Path, dtypes: list[str] | None = None) -> list[GroupedEntry]:
    """Every `op: grouped` entry of a shapes file, each once."""
    entries = [GroupedEntry(groups=spec.groups, m=m, n=n, k=k, dtype=dt, layout=spec.layout,
                            group_sizes=spec.group_sizes or "balanced")
               for spec in load_shapes(path, dtypes) if spec.op == "grouped"
               for dt, m, n, k in itertools.product(spec.dtypes, spec.ms, spec.ns, spec.ks)]
    return list(dict.fromkeys(entries))
