"""Config files: the tuned winners of one arch and device as a deterministic JSON file.

Export writes keys sorted within every object, one entry per line, entries sorted by problem, so
exporting twice, or export -> import into an empty database -> export, gives byte-identical files.
The header's `date` is the date of the newest entry's `created_at`, not today's date: a file that
depends on the day it was written could not be byte-identical across days, and the newest result's
date says what a reader wants to know (how old the tuning is).

The header's `schema_version` is the version of this file format, not of the database schema: a
database migration does not invalidate shipped files. Version 1: every entry was tuned under the
header's triton version. Version 2: an entry may name its own (`triton_version`, written only where it
differs from the header's), so one file holds a problem's winners of several triton versions (a tuning
run under a new triton adds its rows beside the old ones). Export writes version 1 whenever that holds
it all, so older readers keep reading such files; both versions are read. The header's triton
version is the one most entries were tuned under.

An entry's key is its problem (GemmShape): a quantized problem's entry says its scale mode
(`"scales": "row"`); the field is written only where it is not "none" and read as "none" where absent,
so files of plain GEMMs are the same bytes as before quantized problems existed.

Entries carry no host name unless the export asks for it (`with_host`): a team's shipped file would
publish its machines' names.

A file serves the running code when its kernel hash is the running one; an entry of another triton
version then serves too (`Winner.other_triton`), after the running version's entry for the problem.

Import validates the whole file (strict pydantic, no unknown fields, feasible configs by the bound
application's predicate, `schemas.bind(supports=...)`, bounded sizes) before it writes anything, then
writes every entry in one transaction. tritonblas ships such files in its `configs/` directory, and
its dispatch reads them through `load_config_file` as a read-only layer under the user's database.
"""

from __future__ import annotations

import json
import os
import secrets
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import date as Date
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from .coverage import other_triton_counts
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
    version_key,
)
from .textfile import read_bounded_text

if TYPE_CHECKING:  # reading a config file (dispatch's shipped layer) loads no SQLAlchemy
    from .store import ImportPolicy, TuningDB

FILE_SCHEMA_VERSION = 2  # the newest format, read and written (see the module docstring)
READ_VERSIONS = (1, 2)
ONE_TRITON_VERSION = 1  # the format export writes when every entry is of the header's triton version
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
        if self.schema_version not in READ_VERSIONS:
            raise ValueError(f"schema_version {self.schema_version} is not supported (this version "
                             f"reads versions {', '.join(map(str, READ_VERSIONS))})")
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
    host: Host = ""  # only when the export asked for it (files before that always have one)
    created_at: datetime
    torch_version: Label
    timing_protocol: Label
    kernel: KernelFallback | None = None  # only on a torch.mm winner (files before it have none)
    triton_version: Label | None = None  # format 2: the triton that tuned it, where not the header's


@holds_config
class ConfigFile(BaseModel):
    """A validated config file: one arch, one device, one kernel hash; entries of one triton version
    (format 1) or several (format 2: at most one entry per problem and triton version)."""

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
            scales = "" if e.scales == "none" else f" scales={e.scales}"
            where = f"entries[{i}] ({e.m}x{e.n}x{e.k} {e.a_dtype} {e.layout} bias={e.bias}{scales})"
            if e.triton_version is not None and h.schema_version < 2:
                raise ValueError(f"{where}: field 'triton_version' needs schema_version 2 (the header says "
                                 f"{h.schema_version})")
            problem = (e.shape_key(), self.triton_of(e))
            if problem in seen:
                raise ValueError(f"{where}: same problem and triton version as entries[{seen[problem]}]")
            seen[problem] = i
            key = self.key_of(e)
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

    def triton_of(self, entry: FileEntry) -> str:
        """The triton version that tuned `entry`: its own (format 2), else the header's."""
        return entry.triton_version or self.header.triton_version

    def key_of(self, entry: FileEntry) -> ProblemKey:
        h = self.header
        return ProblemKey(**{f: getattr(entry, f) for f in _ENTRY_KEY}, arch=h.arch,
                          device_name=h.device_name, sm_count=h.sm_count)

    def env_for(self, entry: FileEntry) -> EnvIdentity:
        return EnvIdentity(triton_version=self.triton_of(entry), torch_version=entry.torch_version,
                           kernel_hash=self.header.kernel_hash, timing_protocol=entry.timing_protocol)

    def is_stale(self, env: EnvIdentity | None = None) -> bool:
        """Tuned for other kernel sources than `env`'s (default: running): no entry serves."""
        return self.header.kernel_hash not in (env or EnvIdentity.current()).hashes()

    def _winner(self, e: FileEntry, running: dict[str, EnvIdentity]) -> Winner:
        env = self.env_for(e)
        return Winner(key=self.key_of(e), config=e.config, median_ms=e.median_ms, torch_ms=e.torch_ms,
                      speedup=e.speedup, source="imported", host=e.host, created_at=e.created_at, env=env,
                      **Winner.state_for(env, running[e.scales]))

    def _running(self, env: EnvIdentity | None) -> dict[str, EnvIdentity]:
        """`env` (default: running) for each scale mode of the entries (EnvIdentity.for_scales), made once
        a mode rather than once an entry."""
        running = env or EnvIdentity.current()
        return {scales: running.for_scales(scales) for scales in {e.scales for e in self.entries}}

    def winners(self, env: EnvIdentity | None = None) -> list[Winner]:
        """The entries as Winners (source "imported"), `stale` and `other_triton` set against `env`
        (default: running)."""
        running = self._running(env)
        return [self._winner(e, running) for e in self.entries]

    def serving(self, env: EnvIdentity | None = None) -> dict[tuple, tuple[Winner, KernelFallback | None]]:
        """By GemmShape.shape_key(): the entry that serves each problem for `env` (default: running),
        as a Winner, with its kernel fallback (on a torch.mm winner: the fastest kernel of the same
        tuning run). The running triton version's entry first, else the fastest of another version;
        nothing when the file is stale."""
        env = env or EnvIdentity.current()
        if self.is_stale(env):
            return {}
        running = self._running(env)
        found = sorted(((w, e.kernel) for e in self.entries if not (w := self._winner(e, running)).stale),
                       key=lambda pair: (pair[0].other_triton, pair[0].median_ms))  # stable: file order
        best: dict[tuple, tuple[Winner, KernelFallback | None]] = {}
        for w, kernel in found:
            best.setdefault(w.key.shape_key(), (w, kernel))
        return best

    def lookup(self, key: ProblemKey, env: EnvIdentity | None = None) -> Any:
        """The config that serves `key` (see `serving`) on any device of the file's arch; None if
        absent or stale."""
        found = self.serving(env).get(key.shape_key()) if key.arch == self.header.arch else None
        return found[0].config if found is not None else None


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


def _entry_json(w: Winner, kernel: Measurement | None, header_triton: str, with_host: bool) -> dict[str, Any]:
    # "scales" only on quantized problems: files of plain GEMMs read and compare as before the field.
    shape = {f: getattr(w.key, f) for f in _ENTRY_KEY if f != "scales" or w.key.scales != "none"}
    entry = {**shape, "config": w.config.model_dump(mode="json"),
             "median_ms": w.median_ms, "torch_ms": w.torch_ms, "speedup": w.speedup,
             "created_at": _time_text(w.created_at), "torch_version": w.env.torch_version,
             "timing_protocol": w.env.timing_protocol}
    if with_host and w.host:
        entry["host"] = w.host
    if w.env.triton_version != header_triton:
        entry["triton_version"] = w.env.triton_version
    if kernel is not None:
        entry["kernel"] = {"config": kernel.config.model_dump(mode="json"), "median_ms": kernel.median_ms}
    return entry


def _fastest_kernel(db: TuningDB, w: Winner) -> Measurement | None:
    """For a torch.mm winner, the fastest kernel measured for its problem under its triton version."""
    is_vendor = binding().is_vendor
    if not is_vendor(w.config):
        return None
    return next((m for m in db.measurements(w.key, w.env) if m.status == "ok" and not is_vendor(m.config)),
                None)


def _main_triton(winners: list[Winner]) -> str:
    """The header's triton version: the one most winners were tuned under (ties: the newest)."""
    counts = Counter(w.env.triton_version for w in winners)
    return max(counts, key=lambda v: (counts[v], version_key(v)))


def render(header: dict[str, Any], entries: list[dict[str, Any]]) -> str:
    """The canonical text: header first, then one entry per line; keys sorted inside every object."""
    lines = ",\n".join("    " + json.dumps(e, sort_keys=True, ensure_ascii=True) for e in entries)
    head = json.dumps(header, sort_keys=True, indent=2, ensure_ascii=True).replace("\n", "\n  ")
    body = f"[\n{lines}\n  ]" if entries else "[]"
    return f'{{\n  "header": {head},\n  "entries": {body}\n}}\n'


def _pick(winners: Iterable[Winner], arch: str, device_name: str | None) -> list[Winner]:
    """One winner per problem and triton version: several environments of it (e.g. two torch
    versions) -> the fastest. Sorted by problem, then triton version."""
    chosen = [w for w in winners if device_name is None or w.key.device_name == device_name]
    devices = sorted({(w.key.device_name, w.key.sm_count) for w in chosen})
    if not chosen:
        what = f"arch {arch}" + (f", device {device_name!r}" if device_name else "")
        raise ValueError(f"arch: no winners of the running kernels for {what} in the database; "
                         "nothing to export")
    if len(devices) > 1:
        names = "; ".join(f"{n!r} ({s} SMs)" for n, s in devices)
        raise ValueError(f"device: arch {arch} has winners from several devices ({names}); "
                         "export one device per file with --device")
    best: dict[tuple, Winner] = {}
    for w in sorted(chosen, key=lambda w: (w.median_ms, -w.created_at.timestamp(), w.env.torch_version)):
        best.setdefault((w.key.arch_key(), w.env.triton_version), w)
    return [best[k] for k in sorted(best, key=lambda k: (k[0], version_key(k[1])))]


def export_file(db: TuningDB, path: str | Path, arch: str, *, device_name: str | None = None,
                env: EnvIdentity | None = None, with_host: bool = False, family: str = "gemm") -> ConfigFile:
    """Write the winners of `arch` (one device) for the running kernels to `path`, one per problem and
    triton version; returns the file as validated. Host names are written only `with_host`. A file
    holds one kernel family (one kernel hash): "gemm", or a scale mode whose kernels are hashed apart
    (EnvIdentity.family_hashes: "block")."""
    from .engine import refuse_database_file

    refuse_database_file(Path(path), db.url, "config file to write")
    current = env or EnvIdentity.current()
    families = dict(current.family_hashes)
    if family != "gemm" and family not in families:
        raise ValueError(f"family: must be one of gemm, {', '.join(sorted(families))}; got {family!r}")
    running = current.for_scales(family)
    binding().check_arch(arch)
    mine = [w for w in db.winners(arch, include_stale=False, env=running)
            if (w.key.scales if w.key.scales in families else "gemm") == family]
    picked = _pick(mine, arch, device_name)
    newest = max(utc(w.created_at) for w in picked)
    triton = _main_triton(picked)
    entries = [_entry_json(w, _fastest_kernel(db, w), triton, with_host) for w in picked]
    version = FILE_SCHEMA_VERSION if any("triton_version" in e for e in entries) else ONE_TRITON_VERSION
    header = {"schema_version": version, "arch": arch, "device_name": picked[0].key.device_name,
              "sm_count": picked[0].key.sm_count, "triton_version": triton,
              "kernel_hash": running.kernel_hash, "date": newest.date().isoformat(), "count": len(picked)}
    text = render(header, entries)
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
    stale: bool  # the file's kernel hash differs from the running code's: no entry serves
    other_triton: dict[str, int]  # entries that serve though tuned under another triton, by version


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
    winners = cfg.winners(env)
    counts = db.import_winners(winners, policy)
    for e in cfg.entries:
        if e.kernel is not None:
            db.record_measurements(cfg.key_of(e), cfg.env_for(e), [Measurement(
                config=e.kernel.config, status="ok", median_ms=e.kernel.median_ms)])
    return ImportReport(path, len(cfg.entries), counts["written"], counts["kept"], cfg.is_stale(env),
                        other_triton_counts(winners))
