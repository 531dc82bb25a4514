"""What every command shares: the console, option parsing, device checks, and user-facing exits.

User mistakes (bad dtype, bad shapes file, no GPU) end in one clear line on stderr and exit code 2,
the code argument errors get from typer; failures of the work itself exit 1.
"""

from __future__ import annotations

import enum
import os
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

import typer
from rich.console import Console

from .config import Problem
from .shapes import DTYPES, ShapesError, load_problems

USAGE_ERROR = 2
PIPE_WIDTH = 160
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

NO_GPU_MESSAGE = ("error: tuning and benchmarking need a CUDA or ROCm GPU and none was found; for a "
                  "functional dry run on CPU set TRITON_INTERPRET=1 (timings are then meaningless)")


def configure_console() -> None:
    """Output that goes to a file or pipe (CI logs, `| tee`) has no terminal width; rich would assume 80
    columns and fold tables into unreadable cells, so give it room unless COLUMNS says otherwise."""
    for c in (console, err_console):
        if not c.is_terminal and "COLUMNS" not in os.environ:
            c.width = PIPE_WIDTH


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    err_console.print(message, markup=False, soft_wrap=True)
    raise typer.Exit(code)


def interpreter_mode() -> bool:
    from .device import interpreter_enabled

    return interpreter_enabled()


def gpu_count() -> int:
    import torch

    return torch.cuda.device_count() if torch.cuda.is_available() else 0


def require_device() -> None:
    """Exit 2 with the one-line hint unless kernels can run here (a GPU, or Triton's interpreter)."""
    if not interpreter_mode() and gpu_count() == 0:
        fail(NO_GPU_MESSAGE)


def parse_devices(devices: str | None, option: str = "--devices") -> list[int]:
    """`--devices 0,1,3` -> [0, 1, 3]; None -> [0]. Checked against the GPUs present (any in interpreter)."""
    require_device()
    if devices is None:
        return [0]
    try:
        ids = [int(d) for d in devices.split(",") if d.strip()]
    except ValueError:
        fail(f"error: {option} must be comma-separated GPU indices like 0,1, got {devices!r}")
    if not ids:
        fail(f"error: {option} names no device")
    if len(set(ids)) != len(ids):
        fail(f"error: {option} lists a device twice: {devices!r}")
    if not interpreter_mode():
        count = gpu_count()
        bad = [d for d in ids if not 0 <= d < count]
        if bad:
            fail(f"error: {option} {bad[0]} does not exist; this host has GPUs 0..{count - 1}")
    elif any(d < 0 for d in ids):
        fail(f"error: {option} must be non-negative, got {devices!r}")
    return ids


def parse_dtypes(dtypes: str | None) -> list[str] | None:
    """`--dtypes bf16,fp16` -> ["bf16", "fp16"]; an unknown one exits 2 with the valid list."""
    if dtypes is None:
        return None
    items = [d.strip() for d in dtypes.split(",") if d.strip()]
    for d in items or [dtypes]:
        check_dtype(d)
    return list(dict.fromkeys(items))


def check_dtype(dtype: str) -> str:
    if dtype not in DTYPES:
        fail(f"error: unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}")
    return dtype


def problems_from(shapes: Path | Sequence[Path], dtypes: str | None) -> list[Problem]:
    """Every problem of one shapes file or of several (`--shapes a.yaml --shapes b.yaml`), in file order,
    each once: a problem in two files is tuned, benchmarked or checked once."""
    chosen = parse_dtypes(dtypes)
    paths = [shapes] if isinstance(shapes, (str, Path)) else list(shapes)
    try:
        return list(dict.fromkeys(p for path in paths for p in load_problems(path, chosen)))
    except ShapesError as e:
        fail(f"error: {e}")


def shapes_label(shapes: Path | Sequence[Path]) -> str:
    return str(shapes) if isinstance(shapes, (str, Path)) else ", ".join(map(str, shapes))


class BackendChoice(str, enum.Enum):
    """`--backend` of explain and bench: the kernels only, or torch.mm pinned."""

    triton = "triton"
    torch = "torch"


SHAPES_HELP = "shapes.yaml listing the problems; repeat for several files (--shapes a.yaml --shapes b.yaml)."


def open_db(url: str | None):
    """The tuning database at `url` (default: $TRITONBLAS_DB or the user cache file); a database that
    cannot be opened exits 1, a malformed URL 2."""
    from tuning_db import TuningDB
    from tuning_db.errors import TuningDBError

    try:
        return TuningDB(url)
    except TuningDBError as e:
        fail(f"error: {e}", code=1)
    except ValueError as e:  # a malformed URL
        fail(f"error: --db: {e}")


def describe_db(url: str | None) -> str:
    """The database dispatch will read, for reports. A SQLite file given explicitly must exist:
    dispatch never creates one and would silently run without it."""
    from tuning_db import default_url, normalize_url
    from tuning_db.engine import describe, sqlite_path

    try:
        full = normalize_url(url) if url else default_url()
    except ValueError as e:
        fail(f"error: --db: {e}")
    path = sqlite_path(full)
    if url and path is not None and not path.exists():
        fail(f"error: --db: no database at {path}")
    return describe(full)


def _print_version(value: bool) -> None:
    if value:
        from . import __version__
        from .identity import torch_version, triton_version

        console.print(f"tritonblas {__version__} (triton {triton_version()}, torch {torch_version()})",
                      markup=False)
        raise typer.Exit()


def version_option():
    return typer.Option(False, "--version", callback=_print_version, is_eager=True,
                        help="Print the versions of tritonblas, triton and torch, and exit.")


def problem_label(p: Problem) -> str:
    extra = "" if p.bias == "none" else f" +{p.bias}"
    return f"{p.m}x{p.n}x{p.k} {p.dtype} {p.layout}{extra}"

