"""What a tuning result depends on: triton version, torch version, kernel code, timing protocol.

A stored winner whose kernel hash differs from these is stale; one of another triton version still
serves, after the running version's (tuning_db.schemas.EnvIdentity.serves).

The kernel hash is of the code that decides what is compiled and launched, not of its bytes: the
syntax trees of kernels/*.py and of the host's planning code named in PLANNING, without docstrings,
comments or line numbers. Hashing the raw files made one added comment turn every shipped winner stale
(issue 35); the planning code (constexprs, fix-up plan, thresholds) was not covered at all.
"""

from __future__ import annotations

import ast
import functools
import gc
import hashlib
import json
import os
import re
import threading
from collections.abc import Callable
from importlib import metadata
from pathlib import Path

# Bump when the way candidates are timed changes (warm-up, repetitions, L2 flush, statistic).
TIMING_PROTOCOL = "do_bench-median-l2flush-v2-small-replayed"
_PACKAGE = Path(__file__).parent
_KERNEL_DIR = _PACKAGE / "kernels"
# Kernels of other op families, hashed apart (grouped_kernel_hash): a change to the grouped GEMM's kernel
# leaves the dense GEMMs' tuned winners fresh, and the reverse is caught by hashing common.py in both.
# Its Gluon kernel (grouped_gluon.py, 2026-12-04) runs the same keys; it takes the tile order from the
# Gluon block kernel's file.
GROUPED_KERNELS: tuple[str, ...] = ("grouped.py", "grouped_gluon.py", "blockscaled_gluon.py", "common.py",
                                    "specs.py")
# The block-scaled scaled_mm (kernels/blockscaled.py, 2026-12-03): a family of its own for the same reason.
# Its Gluon kernel (blockscaled_gluon.py, 2026-12-04) runs the same problems: the same family.
BLOCKSCALED_KERNELS: tuple[str, ...] = ("blockscaled.py", "blockscaled_gluon.py", "common.py", "specs.py")
# The dense family hashes common.py and, as its tensor- and row-wise Gluon kernel (scaled_gluon.py,
# 2026-12-04) imports the block kernel's producer, tile order and epilogue, blockscaled_gluon.py too.
# Every family hashes specs.py, its kernels' constexpr bundles.
_SHARED = {"common.py", "blockscaled_gluon.py", "specs.py"}
_OWN_FAMILY = frozenset(GROUPED_KERNELS + BLOCKSCALED_KERNELS) - _SHARED

# The host code that decides what the kernels compute and how they are launched (constexprs, grid,
# workspace, Stream-K split and fix-up plan, padded copies, 64-bit offsets), per module of tritonblas:
# functions by name (their code) and module-level constants (their assignment), by file under
# tritonblas/. Hashed by name, not by module, so moving one keeps the hash (a relative import inside one
# is hashed as written from tritonblas/, see _from_package); a name not found is an error, so a rename
# must be made here too.
PLANNING: dict[str, tuple[str, ...]] = {
    "arith.py": ("cdiv",),
    "problem.py": ("aligned_leading_dim",),
    "launch/streamk.py": ("streamk_split", "TREE_MIN_SPLITS", "fixup_groups", "DEFER_MIN_SPLITS",
                          "DEFERRED_CHUNK", "DEFER_MIN_CHUNKS", "fixup_deferred", "fixup_plan",
                          "program_count", "streamk_workspace", "reduce_chunks"),
    "launch/blockscaled.py": ("scaled_gluon_plan", "gluon_ready", "gluon_twin", "GLUON_TILE",
                              "GLUON_MAXNREG"),
    "launch/gemm.py": ("_kernels", "make_plan", "_reduce_plan", "_host_descriptors", "descriptor",
                       "tma_ready", "_is_col_major", "_pow2_divisor", "_vector_divisor", "INT32_OFFSETS",
                       "_OFFSET_SLACK", "offset_reach", "needs_int64", "_aligned", "_COPY_ROWS",
                       "_WORD_ROWS", "_copy_plan"),
}

_SCOPES = (ast.Module, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def _is_docstring(stmt: ast.stmt) -> bool:
    return (isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant)
            and isinstance(stmt.value.value, str))


def _canonical(node) -> str:
    """`node` as text without docstrings or positions. Fields that are None or empty are left out, so
    the text is the same under every Python the package supports (3.12 added FunctionDef.type_params,
    3.13 changed ast.dump's defaults)."""
    if isinstance(node, list):
        return "[" + ",".join(_canonical(item) for item in node) + "]"
    if not isinstance(node, ast.AST):
        return repr(node)
    parts = []
    for name in node._fields:
        value = getattr(node, name, None)
        if name == "body" and isinstance(node, _SCOPES) and value and _is_docstring(value[0]):
            value = value[1:]
        if value is None or (isinstance(value, list) and not value):
            continue
        parts.append(f"{name}={_canonical(value)}")
    return f"{type(node).__name__}({','.join(parts)})"


def _defines(stmt: ast.stmt) -> set[str]:
    """The names a module-level statement defines: a function's or class's, or an assignment's."""
    if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return {stmt.name}
    targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] \
        if isinstance(stmt, (ast.AnnAssign, ast.AugAssign)) else []
    return {n.id for t in targets for n in ast.walk(t) if isinstance(n, ast.Name)}


def _from_package(stmt: ast.stmt, module: str) -> ast.stmt:
    """`stmt` of tritonblas/`module` with its relative imports as written in a module of tritonblas/
    itself (`from ..kernels.copy import x` in launch/gemm.py reads `from .kernels.copy import x`)."""
    package = module.split("/")[:-1]
    if not package:
        return stmt
    for node in ast.walk(stmt):
        if isinstance(node, ast.ImportFrom) and node.level:
            base = package[:len(package) - (node.level - 1)]
            node.module, node.level = ".".join([*base, *filter(None, [node.module])]) or None, 1
    return stmt


def code_hash(kernels: dict[str, str], planning: dict[str, str],
              names: dict[str, tuple[str, ...]] = PLANNING) -> str:
    """sha256 (first 16 hex digits) of the kernel sources (file name -> text) and of the statements
    defining `names` (module -> names) in the planning sources (module -> text), as syntax trees."""
    # The ~30,000 nodes parsed set off the cycle collector over and over (80 ms, against 18 without it);
    # a syntax tree holds no cycles.
    collecting = gc.isenabled()
    gc.disable()
    try:
        return _code_hash(kernels, planning, names)
    finally:
        if collecting:
            gc.enable()


def _code_hash(kernels: dict[str, str], planning: dict[str, str], names: dict[str, tuple[str, ...]]) -> str:
    h = hashlib.sha256()
    for name in sorted(kernels):
        h.update(f"{name}\n{_canonical(ast.parse(kernels[name]))}\n".encode())
    found: dict[str, str] = {}
    for module, wanted in names.items():
        for stmt in ast.parse(planning[module]).body:
            for name in _defines(stmt) & set(wanted):
                found[name] = _canonical(_from_package(stmt, module))
        missing = sorted(set(wanted) - set(found))
        if missing:
            raise LookupError(f"tritonblas.identity.PLANNING: {module} defines no {', '.join(missing)}")
    for name in sorted(found):
        h.update(f"{name}\n{found[name]}\n".encode())
    return h.hexdigest()[:16]


def sources() -> tuple[dict[str, str], dict[str, str]]:
    """(kernels/*.py by file name, PLANNING's modules by file name): what kernel_hash hashes."""
    kernels = {path.name: path.read_text() for path in _KERNEL_DIR.glob("*.py")
               if path.name not in _OWN_FAMILY}
    return kernels, {module: (_PACKAGE / module).read_text() for module in PLANNING}


@functools.lru_cache(maxsize=1)
def kernel_hash() -> str:
    """This installation's code_hash, once per process (on first use, not at import). Parsing takes
    ~18 ms, so it is kept on disk under the sha256 of the bytes it is a function of (these sources and
    this file); a later process reads it back in well under a millisecond."""
    kernels, planning = sources()
    raw = hashlib.sha256(repr((sorted(kernels.items()), sorted(planning.items()),
                               Path(__file__).read_text())).encode()).hexdigest()
    path = _memo_path()
    try:
        memo = json.loads(path.read_text())
        if memo.get("sources") == raw and re.fullmatch("[0-9a-f]{16}", str(memo.get("kernel_hash"))):
            return memo["kernel_hash"]
    except (OSError, ValueError, AttributeError):
        pass
    digest = code_hash(kernels, planning)
    write_json_atomically(path, {"sources": raw, "kernel_hash": digest})
    return digest


# The grouped GEMM's host code that decides what is compiled and launched (its constexprs: TMA or
# pointers, the divisibility hints, 64-bit offsets, the grid), as PLANNING is for the dense kernels.
GROUPED_PLANNING: dict[str, tuple[str, ...]] = {
    "grouped/launch.py": ("plan", "geometries", "_tma_geometry", "_vector_divisor", "_pow2_divisor",
                          "is_col_major", "_strides3", "needs_int64"),
    "grouped/forms.py": ("grid_bound",),
    "grouped/gluon.py": ("gluon_plan", "gluon_ready", "_rows_ready", "gluon_twin", "_TWIN_RING_BYTES",
                         "_pingpong", "descriptor_geometry", "gluon_descriptors", "_DTYPES"),
    "launch/blockscaled.py": ("GLUON_MAXNREG", "shared_layout", "_GL_NAMES"),
    "launch/gemm.py": ("offset_reach", "INT32_OFFSETS", "_OFFSET_SLACK"),
}


@functools.lru_cache(maxsize=1)
def grouped_kernel_hash() -> str:
    """The grouped GEMM's code hash: its kernel, the building blocks it calls and its planning code."""
    return _family_hash(GROUPED_KERNELS, GROUPED_PLANNING)


# The block-scaled kernel's host planning (launch/blockscaled.py: its constexprs and grid), as PLANNING.
BLOCKSCALED_PLANNING: dict[str, tuple[str, ...]] = {
    "launch/blockscaled.py": ("block_plan", "_divisor", "gluon_plan", "gluon_ready", "gluon_twin",
                              "GLUON_TILE", "GLUON_MAXNREG"),
    "launch/streamk.py": ("program_count",),
    "launch/gemm.py": ("offset_reach", "INT32_OFFSETS", "_OFFSET_SLACK", "needs_int64", "tma_ready",
                       "_is_col_major"),
    "problem.py": ("SCALE_BLOCK",),
}


@functools.lru_cache(maxsize=1)
def blockscaled_kernel_hash() -> str:
    """The block-scaled scaled_mm's code hash: its kernel, the building blocks it calls, its planning."""
    return _family_hash(BLOCKSCALED_KERNELS, BLOCKSCALED_PLANNING)


# Scale modes whose problems run a kernel family hashed apart from the dense one: their winners are stored,
# looked up and exported under that family's hash and ship in configs/<mode>/<arch>.json. The one table
# the binding (EnvIdentity.family_hashes), dispatch (shipped_name) and `db export --family` read.
SCALE_FAMILIES: dict[str, Callable[[], str]] = {"block": blockscaled_kernel_hash}


def family_hashes() -> tuple[tuple[str, str], ...]:
    """(scale mode, the running code's hash of its kernel family) for each of SCALE_FAMILIES."""
    return tuple((scales, family_hash()) for scales, family_hash in SCALE_FAMILIES.items())


def _family_hash(kernel_files: tuple[str, ...], planning: dict[str, tuple[str, ...]]) -> str:
    """The code hash of a kernel family hashed apart from the dense one: its kernel files, and the
    names `planning` lists of each module."""
    kernels = {name: (_KERNEL_DIR / name).read_text() for name in kernel_files}
    sources = {module: (_PACKAGE / module).read_text() for module in planning}
    return code_hash(kernels, sources, planning)


def _memo_path() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tritonblas" / "kernel-hash.json"


def write_json_atomically(path: Path, doc: dict) -> None:
    """Atomically (a temporary file renamed over it): a reader never sees half a file. A cache folder
    that cannot be written only costs the next process the work the file would have saved."""
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp.write_text(json.dumps(doc))
        os.replace(tmp, path)
    except OSError:
        tmp.unlink(missing_ok=True)  # (itself an OSError only where nothing could be written anyway)


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "unknown"


@functools.lru_cache(maxsize=1)
def torch_version() -> str:
    """torch's version without its build suffix (2.13.0+cpu: 2.13.0), read from its metadata as
    triton's is: commands that only read the tuning database (`tritonblas db stats`) need the running
    identity but not the 2 s of importing torch."""
    try:
        version = metadata.version("torch")
    except metadata.PackageNotFoundError:  # a torch built in place, without an installed distribution
        import torch

        version = torch.__version__
    return version.split("+")[0]
