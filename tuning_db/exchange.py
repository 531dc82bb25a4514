"""Config files: the tuned winners of one arch and device as a deterministic JSON file.

Export writes keys sorted within every object, one entry per line, entries sorted by problem, so
exporting twice, or export -> import into an empty database -> export, gives byte-identical files.
The header's `date` is the date of the newest entry's `created_at`, not today's date: a file that
depends on the day it was written could not be byte-identical across days, and the newest result's
date says what a reader wants to know (how old the tuning is).

The header's `schema_version` is the version of this file format, not of the database schema: a
database migration does not invalidate shipped files.

Import validates the whole file (strict pydantic, no unknown fields, feasible configs by the bound
application's predicate, `schemas.bind(supports=...)`, bounded sizes) before it writes anything, then
writes every entry in one transaction. tritonblas ships such files in its `configs/` directory, and
its dispatch reads them through `load_config_file` as a read-only layer under the user's database.
"""

from __future__ import annotations

import functools
import json
import os
import secrets
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date as Date
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .schemas import (
    Arch,
    DeviceName,
    EnvIdentity,
    GemmShape,
    Host,
    KernelHash,
    Label,
    Measurement,
    Millis,
    ProblemKey,
    SmCount,
    Speedup,
    StoredConfig,
    Winner,
    binding,
    holds_config,
    utc,
)
from .textfile import read_bounded_text

if TYPE_CHECKING:  # reading a config file (dispatch's shipped layer) loads no SQLAlchemy
    from .store import ImportPolicy, TuningDB

FILE_SCHEMA_VERSION = 1
MAX_FILE_BYTES = 64 * 2**20
MAX_ENTRIES = 100_000
_ENTRY_KEY = tuple(GemmShape.model_fields)


class ConfigFileError(ValueError):
    """A config file that cannot be read or does not validate; the message names the file and entry."""


class FileHeader(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    schema_version: int
    arch: Arch
    device_name: DeviceName
    sm_count: SmCount
    triton_version: Label
    kernel_hash: KernelHash
    date: Date | None
    count: int = Field(ge=0, le=MAX_ENTRIES)

    @model_validator(mode="after")
    def _known(self) -> FileHeader:
        if self.schema_version != FILE_SCHEMA_VERSION:
            raise ValueError(f"schema_version {self.schema_version} is not supported (this version "
                             f"reads version {FILE_SCHEMA_VERSION})")
        binding().check_arch(self.arch)  # an unknown arch is refused with the list of known ones
        return self


@holds_config
class KernelFallback(BaseModel):
    """The fastest kernel (backend triton) of the tuning run whose winner was torch.mm: what dispatch
    runs for the problem when a call asks for the kernels only (backend="triton")."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    config: StoredConfig  # the bound config type
    median_ms: Millis


@holds_config
class FileEntry(GemmShape):
    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    config: StoredConfig  # the bound config type
    median_ms: Millis
    torch_ms: Millis | None
    speedup: Speedup | None
    host: Host
    created_at: datetime
    torch_version: Label
    timing_protocol: Label
    kernel: KernelFallback | None = None  # only on a torch.mm winner (files before it have none)


@holds_config
class ConfigFile(BaseModel):
    """A validated config file: one arch, one device, one triton version and kernel hash."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    header: FileHeader
    entries: list[FileEntry] = Field(max_length=MAX_ENTRIES)

    @model_validator(mode="after")
    def _consistent(self) -> ConfigFile:
        if self.header.count != len(self.entries):
            raise ValueError(f"header count {self.header.count} != {len(self.entries)} entries")
        h, bound = self.header, binding()
        seen: dict[tuple, int] = {}
        for i, e in enumerate(self.entries):
            where = f"entries[{i}] ({e.m}x{e.n}x{e.k} {e.a_dtype} {e.layout} bias={e.bias})"
            if e.shape_key() in seen:
                raise ValueError(f"{where}: same problem as entries[{seen[e.shape_key()]}]")
            seen[e.shape_key()] = i
            if e.a_dtype != e.b_dtype:
                raise ValueError(f"{where}: mixed operand dtypes {e.a_dtype}/{e.b_dtype} are not supported")
            key = ProblemKey(**{f: getattr(e, f) for f in _ENTRY_KEY}, arch=h.arch,
                             device_name=h.device_name, sm_count=h.sm_count)
            reason = bound.supports(e.config, key)
            if reason is not None:
                raise ValueError(f"{where}: config {e.config.short()} is infeasible on "
                                 f"{self.header.arch}: {reason}")
            if e.kernel is not None:
                if not bound.is_vendor(e.config) or bound.is_vendor(e.kernel.config):
                    raise ValueError(f"{where}: a kernel fallback belongs to a torch winner and is a "
                                     "triton config")
                reason = bound.supports(e.kernel.config, key)
                if reason is not None:
                    raise ValueError(f"{where}: kernel config {e.kernel.config.short()} is infeasible on "
                                     f"{self.header.arch}: {reason}")
        return self

    def env_for(self, entry: FileEntry) -> EnvIdentity:
        return EnvIdentity(triton_version=self.header.triton_version, torch_version=entry.torch_version,
                           kernel_hash=self.header.kernel_hash, timing_protocol=entry.timing_protocol)

    def is_fresh(self, env: EnvIdentity | None = None) -> bool:
        running = env or EnvIdentity.current()
        return (self.header.triton_version == running.triton_version
                and self.header.kernel_hash == running.kernel_hash)

    def winners(self, env: EnvIdentity | None = None) -> list[Winner]:
        """The entries as Winners (source "imported"), `stale` set against `env` (default: running)."""
        running = env or EnvIdentity.current()
        h = self.header
        return [Winner(key=ProblemKey(**{f: getattr(e, f) for f in _ENTRY_KEY}, arch=h.arch,
                                      device_name=h.device_name, sm_count=h.sm_count),
                       config=e.config, median_ms=e.median_ms, torch_ms=e.torch_ms, speedup=e.speedup,
                       source="imported", host=e.host, created_at=e.created_at, env=self.env_for(e),
                       stale=not self.is_fresh(running))
                for e in self.entries]

    def kernel_fallbacks(self) -> dict[tuple, KernelFallback]:
        """By GemmShape.shape_key(): the fastest kernel of each problem whose winner is torch.mm."""
        return {e.shape_key(): e.kernel for e in self.entries if e.kernel is not None}

    @functools.cached_property
    def _index(self) -> dict[tuple, FileEntry]:
        return {e.shape_key(): e for e in self.entries}

    def lookup(self, key: ProblemKey, env: EnvIdentity | None = None) -> Any:
        """The file's config for `key` on any device of the file's arch; None if absent or stale."""
        if key.arch != self.header.arch or not self.is_fresh(env):
            return None
        entry = self._index.get(key.shape_key())
        return entry.config if entry is not None else None


def _reject_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [k for k, _ in pairs]
    dup = next((k for k in keys if keys.count(k) > 1), None)
    if dup is not None:
        raise ValueError(f"duplicate key {dup!r} in one JSON object")
    return dict(pairs)


def _describe_error(raw: Any, err: dict) -> str:
    loc = list(err["loc"])
    where = ""
    if len(loc) >= 2 and loc[0] == "entries" and isinstance(loc[1], int):
        where = f"entries[{loc[1]}]"
        entries = raw.get("entries") if isinstance(raw, dict) else None
        item = entries[loc[1]] if isinstance(entries, list) and loc[1] < len(entries) else None
        if isinstance(item, dict) and all(isinstance(item.get(d), int) for d in "mnk"):
            where += f" ({item['m']}x{item['n']}x{item['k']})"
        loc = loc[2:]
    field = ".".join(str(p) for p in loc)
    msg = err["msg"].removeprefix("Value error, ")
    return ": ".join(p for p in (where, f"field '{field}'" if field else "", msg) if p)


def load_config_file(path: str | Path) -> ConfigFile:
    """Read and validate a config file; ConfigFileError names the file and the first bad entry."""
    path = Path(path)
    text = read_bounded_text(path, MAX_FILE_BYTES, "config file", ConfigFileError)
    try:
        raw = json.loads(text, object_pairs_hook=_reject_duplicate_keys)
    except (ValueError, RecursionError) as e:
        raise ConfigFileError(f"{path}: invalid JSON: {e}") from None
    if not isinstance(raw, dict):
        raise ConfigFileError(f"{path}: expected a JSON object with 'header' and 'entries', "
                              f"got {type(raw).__name__}")
    try:
        return ConfigFile.model_validate_json(text)
    except ValidationError as e:
        errors = e.errors()
        more = f" (and {len(errors) - 1} more problems)" if len(errors) > 1 else ""
        raise ConfigFileError(f"{path}: {_describe_error(raw, errors[0])}{more}") from None


def _time_text(dt: datetime) -> str:
    return utc(dt).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _entry_json(w: Winner, kernel: Measurement | None = None) -> dict[str, Any]:
    entry = {**{f: getattr(w.key, f) for f in _ENTRY_KEY}, "config": w.config.model_dump(mode="json"),
             "median_ms": w.median_ms, "torch_ms": w.torch_ms, "speedup": w.speedup, "host": w.host,
             "created_at": _time_text(w.created_at), "torch_version": w.env.torch_version,
             "timing_protocol": w.env.timing_protocol}
    if kernel is not None:
        entry["kernel"] = {"config": kernel.config.model_dump(mode="json"), "median_ms": kernel.median_ms}
    return entry


def _fastest_kernel(db: TuningDB, w: Winner, env: EnvIdentity) -> Measurement | None:
    """For a torch.mm winner, the fastest kernel measured for its problem (fresh for `env`)."""
    is_vendor = binding().is_vendor
    if not is_vendor(w.config):
        return None
    return next((m for m in db.measurements(w.key, env) if m.status == "ok" and not is_vendor(m.config)),
                None)


def render(header: dict[str, Any], entries: list[dict[str, Any]]) -> str:
    """The canonical text: header first, then one entry per line; keys sorted inside every object."""
    lines = ",\n".join("    " + json.dumps(e, sort_keys=True, ensure_ascii=True) for e in entries)
    head = json.dumps(header, sort_keys=True, indent=2, ensure_ascii=True).replace("\n", "\n  ")
    body = f"[\n{lines}\n  ]" if entries else "[]"
    return f'{{\n  "header": {head},\n  "entries": {body}\n}}\n'


def _pick(winners: Iterable[Winner], arch: str, device_name: str | None) -> list[Winner]:
    """One winner per problem: several fresh environments (e.g. two torch versions) -> the fastest."""
    chosen = [w for w in winners if device_name is None or w.key.device_name == device_name]
    devices = sorted({(w.key.device_name, w.key.sm_count) for w in chosen})
    if not chosen:
        what = f"arch {arch}" + (f", device {device_name!r}" if device_name else "")
        raise ValueError(f"arch: no fresh winners for {what} in the database; nothing to export")
    if len(devices) > 1:
        names = "; ".join(f"{n!r} ({s} SMs)" for n, s in devices)
        raise ValueError(f"device: arch {arch} has winners from several devices ({names}); "
                         "export one device per file with --device")
    best: dict[tuple, Winner] = {}
    for w in sorted(chosen, key=lambda w: (w.median_ms, -w.created_at.timestamp(), w.env.torch_version)):
        best.setdefault(w.key.arch_key(), w)
    return [best[k] for k in sorted(best)]


def export_file(db: TuningDB, path: str | Path, arch: str, *, device_name: str | None = None,
                env: EnvIdentity | None = None) -> ConfigFile:
    """Write the fresh winners of `arch` (one device) to `path`; returns the file as validated."""
    from .engine import refuse_database_file

    refuse_database_file(Path(path), db.url, "config file to write")
    running = env or EnvIdentity.current()
    binding().check_arch(arch)
    picked = _pick(db.winners(arch, include_stale=False, env=running), arch, device_name)
    newest = max(utc(w.created_at) for w in picked)
    header = {"schema_version": FILE_SCHEMA_VERSION, "arch": arch, "device_name": picked[0].key.device_name,
              "sm_count": picked[0].key.sm_count, "triton_version": running.triton_version,
              "kernel_hash": running.kernel_hash, "date": newest.date().isoformat(), "count": len(picked)}
    text = render(header, [_entry_json(w, _fastest_kernel(db, w, running)) for w in picked])
    validated = ConfigFile.model_validate_json(text)  # never write a file import would refuse
    _write_atomic(Path(path), text)
    return validated


def _write_atomic(path: Path, text: str) -> None:
    """Write a temporary file next to `path`, then rename it onto `path`: readers see the old file or
    the new one, never half of it. The file gets the permissions any new file of the user gets (0666
    less the umask, as the bench's JSON and plot do), or those of the file it replaces."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.parent / f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666)
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="\n") as f:
            f.write(text)
        if path.exists():
            os.chmod(tmp, path.stat().st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@dataclass(frozen=True)
class ImportReport:
    path: Path
    entries: int
    written: int
    kept: int
    stale: bool  # the file's triton version or kernel hash differs from the running code


def import_file(db: TuningDB, path: str | Path, policy: ImportPolicy = "faster",
                env: EnvIdentity | None = None) -> ImportReport:
    """Validate all of `path`, then import every entry in one transaction (all or nothing)."""
    from .engine import refuse_database_file

    refuse_database_file(Path(path), db.url, "config file")  # reading it would drop the DB's locks
    return import_config(db, load_config_file(path), Path(path), policy, env)


def import_config(db: TuningDB, cfg: ConfigFile, path: Path, policy: ImportPolicy = "faster",
                  env: EnvIdentity | None = None) -> ImportReport:
    """Import an already validated file in one transaction; then each torch winner's kernel fallback as
    a measurement of its problem (what dispatch's DB layer reads for backend="triton", and export writes
    back)."""
    counts = db.import_winners(cfg.winners(env), policy)
    for e in cfg.entries:
        if e.kernel is not None:
            key = ProblemKey(**{f: getattr(e, f) for f in _ENTRY_KEY}, arch=cfg.header.arch,
                             device_name=cfg.header.device_name, sm_count=cfg.header.sm_count)
            db.record_measurements(key, cfg.env_for(e), [Measurement(config=e.kernel.config, status="ok",
                                                                     median_ms=e.kernel.median_ms)])
    return ImportReport(path, len(cfg.entries), counts["written"], counts["kept"], not cfg.is_fresh(env))


@dataclass(frozen=True)
class Gap:
    problem: Any  # as given to coverage_gaps
    reason: str


def coverage_gaps(problems: Iterable[Any], arch: str, winners: Iterable[Winner]) -> list[Gap]:
    """Problems (GemmShapes, or anything GemmShape.from_problem takes) with no fresh winner on `arch`
    (any device): the CI gate for shipped configs."""
    by_key: dict[tuple, list[Winner]] = {}
    for w in winners:
        by_key.setdefault(w.key.arch_key(), []).append(w)
    gaps = []
    for p in problems:
        shape = p if isinstance(p, GemmShape) else GemmShape.from_problem(p)
        found = by_key.get((arch, *shape.shape_key()), [])
        if not found:
            gaps.append(Gap(p, "no winner"))
        elif all(w.stale for w in found):
            envs = sorted({f"triton {w.env.triton_version}, kernels {w.env.kernel_hash}" for w in found})
            gaps.append(Gap(p, f"only stale winners ({'; '.join(envs)})"))
    return gaps
