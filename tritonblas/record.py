"""Recorded shapes: every new problem dispatch sees, added once to a shapes.yaml for the tuner.

    tritonblas.enable(record="shapes.yaml")   # or TRITONBLAS_RECORD=shapes.yaml in the environment
    ... run the model ...
    tritonblas-tune --shapes shapes.yaml      # reads the file as it is

A problem is (m, n, k, dtypes, layout, bias kind, scale mode), the dispatch key; it is noted when a
call is planned, and again on the first hit of each plan after recording moved to another file
(`generation`, bumped by start(), against each plan's stamp: one integer compare a hit), so a file gets
every problem that runs while it is recorded, planned before or not. One entry per problem, sorted, in
the shapes.yaml format (`tritonblas.shapes`); problems with a zero size (nothing to tune) or past the
tuning database's bound are left out. The file is rewritten whole on each new problem, so comments and
grids written by hand in it become one entry per problem.

Several processes (and threads) may record into one file: each addition takes an exclusive lock on a
side file `<file>.lock` (fcntl.flock; the lock file stays), reads what the file holds then, adds the new
problem and replaces the file atomically (a temporary file in the same folder, fsync, os.replace), so
no process loses another's problems and no reader sees half a file. A file that exists but is not a
shapes file is never overwritten: one warning, and recording into it stops.

TRITONBLAS_RECORD is read on the first planned call (never at import); enable(record=...) takes
precedence over it.
"""

from __future__ import annotations

import os
import tempfile
import threading
from pathlib import Path

from . import log
from .problem import Problem

_lock = threading.Lock()
# Bumped by start() whenever the file recorded into changes: a plan whose problem was noted at another
# generation notes it again (call.path.lookup); note() itself skips what the file already holds.
generation = 0
_HEADER = ("# GEMM problems recorded by tritonblas (tritonblas.enable(record=...) or TRITONBLAS_RECORD),\n"
           "# one entry per problem; tune them with: tritonblas-tune --shapes <this file>\n")


class _State:
    def __init__(self) -> None:
        self.path: Path | None = None  # given by start(); else the environment's
        self.env_read = False
        self.env_path: Path | None = None
        self.seen: dict[Path, set[Problem]] = {}  # problems known to be in each file
        self.refused: set[Path] = set()  # files that are not shapes files: never written


_state = _State()
_on_start: list = []  # called when the file recorded into changes (what remembers answers forgets them)


def also_on_start(call) -> None:  # noqa: ANN001 (a callable of no arguments)
    """Call `call()` whenever start() moves recording to another file: the C++ answers (tritonblas.native)
    skip the Python hit that notes a problem into the new file, so they are dropped then."""
    with _lock:
        _on_start.append(call)


def start(path: str | os.PathLike | None) -> bool:
    """Record into `path` from now on (None: stop, but for TRITONBLAS_RECORD). Problems planned before
    are noted into it on their next call (generation). Whether that changed the path."""
    global generation
    new = None if path is None else Path(path)
    with _lock:
        before, _state.path = _state.path, new
        if new != before:
            generation += 1
        calls = list(_on_start) if new != before else []
    if current() is not None:  # (stopped: nothing more to note, what was answered holds)
        for call in calls:
            call()
    if new is not None and new != before:
        log.get().info("recording new GEMM problems to %s", new)
    return new != before


def given() -> Path | None:
    """The path start() was given last (None: none, or stopped)."""
    return _state.path


def current() -> Path | None:
    """Where problems are recorded now (start()'s path, else TRITONBLAS_RECORD's), or None."""
    if _state.path is not None:
        return _state.path
    if not _state.env_read:
        value = os.environ.get("TRITONBLAS_RECORD", "")
        _state.env_path = Path(value) if value else None
        _state.env_read = True
    return _state.env_path


def note(problem) -> None:  # noqa: ANN001 (a Problem, or a grouped GEMM's GroupedEntry)
    """Add `problem` to the file being recorded into, if it is new there."""
    path = current()
    if path is None or path in _state.refused or problem in _state.seen.get(path, ()):
        return
    from .shapes import MAX_DIM

    if not all(1 <= d <= MAX_DIM for d in (problem.m, problem.n, problem.k)):
        return  # nothing a shapes file can hold (or the tuner tune)
    with _lock:
        seen = _state.seen.setdefault(path, set())
        if problem in seen or path in _state.refused:
            return
        try:
            in_file = _add(path, problem)
        except Exception as exc:  # recording must never fail a matmul
            _state.refused.add(path)
            log.warn(f"tritonblas: cannot record GEMM problems to {path} ({exc}); recording into it stops",
                     stacklevel=4)
            return
        seen |= in_file
    if not isinstance(problem, Problem):
        log.get().info("recorded grouped GEMM %s to %s", problem.text(), path)
        return
    scales = f" scales={problem.scales}" if problem.quantized else ""
    log.get().info("recorded %dx%dx%d %s layout=%s bias=%s%s to %s", problem.m, problem.n, problem.k,
                   problem.dtypes_text(), problem.layout, problem.bias, scales, path)


def note_grouped(entry) -> None:  # noqa: ANN001 (a tritonblas.grouped.tune.GroupedEntry)
    """Add a grouped GEMM (an `op: grouped` entry) to the file being recorded into, if it is new there."""
    note(entry)


def _add(path: Path, problem) -> set:  # noqa: ANN001 (a Problem or a GroupedEntry)
    """Under the file's lock: read its problems, add `problem`, replace the file; what it holds now."""
    import fcntl

    from .shapes import load_grouped, load_problems

    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the lock file is closed
        problems = set(load_problems(path)) | set(load_grouped(path)) if path.exists() else set()
        if problem not in problems:
            problems.add(problem)
            _write(path, problems)
        return problems


def _entry(p: Problem) -> str:
    """One problem as a shapes file entry; a quantized one with its scales, output dtype and, where it
    differs from A's, B's dtype."""
    quantized = "" if not p.quantized else (
        (f", b_dtype: {p.b}" if p.b != p.dtype else "") + f", scales: {p.scales}, out_dtype: {p.out}")
    return (f"  - {{m: {p.m}, n: {p.n}, k: {p.k}, dtypes: [{p.dtype}], layout: {p.layout}, "
            f"bias: {p.bias}{quantized}}}\n")


def _grouped_entry(e) -> str:  # noqa: ANN001 (a GroupedEntry)
    return (f"  - {{op: grouped, groups: {e.groups}, m: {e.m}, n: {e.n}, k: {e.k}, dtypes: [{e.dtype}], "
            f"layout: {e.layout}, group_sizes: {e.group_sizes}}}\n")


def _write(path: Path, problems: set) -> None:
    dense = [p for p in problems if isinstance(p, Problem)]
    grouped = sorted((p for p in problems if not isinstance(p, Problem)),
                     key=lambda e: (e.dtype, e.layout, e.groups, e.n, e.k, e.m, e.group_sizes))
    order = sorted(dense, key=lambda p: (p.dtype, p.b, p.out, p.scales, p.layout, p.bias, p.m, p.n, p.k))
    lines = [_HEADER, "shapes:\n", *map(_entry, order), *map(_grouped_entry, grouped)]
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as f:
            f.writelines(lines)
            f.flush()
            os.fsync(f.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
