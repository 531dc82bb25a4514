"""What every command shares: the console, how help is attached, option types and checks, and exits.

Help: every command's help is its function's docstring (typer renders it as markdown), ending in an
**Examples** block; `command()` registers it (docs/cli.md's reference is written from it by
scripts/cli_reference.py). Errors are one line on stderr starting with `error:`; EXIT_CODES says which
code each kind gets. `--arch` and `--db` are checked in `targets`, one function each, so they read the
same in every command. Nothing is written before the arguments are checked.
"""

from __future__ import annotations

import enum
import inspect
import os
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn

import typer
import typer.core
from rich.console import Console

from tuning_db.vocabulary import SCALES

if TYPE_CHECKING:
    from ..problem import Problem

USAGE_ERROR = 2
# What each exit code means, for every command (`tritonblas --help` and docs/cli.md show it).
EXIT_CODES = {
    0: "success",
    1: "the work failed: a problem without a verified winner, a wrong result, `db check` finding gaps, a "
       "database that cannot be used (not a tuning database, locked, of a newer tritonblas)",
    USAGE_ERROR: "a usage error, before anything runs or is written: a bad option or argument (an unknown "
                 "--arch or dtype, a bad shapes file, a --db that does not exist or whose folder does not), "
                 "an output that cannot be written, no GPU",
    130: "interrupted (Ctrl-C); tune keeps the finished problems' winners",
}
EXIT_CODES_HELP = "**Exit codes**: " + "; ".join(f"{code} {text}" for code, text in EXIT_CODES.items()) + "."
PIPE_WIDTH = 160
console = Console(highlight=False)
err_console = Console(stderr=True, highlight=False)

NO_GPU_MESSAGE = ("error: tuning and benchmarking need a CUDA or ROCm GPU and none was found; for a "
                  "functional dry run on CPU set TRITON_INTERPRET=1 (timings are then meaningless)")
DEFAULT_DTYPE = "bf16"  # of every command that takes one --dtype (shapes files default to it too)
DB_HELP = "Tuning database: a SQLAlchemy URL or a SQLite file (default: $TRITONBLAS_DB, else " \
          "~/.cache/tritonblas/tuning.sqlite)."
SHAPES_HELP = "shapes.yaml listing the problems; repeat for several files (--shapes a.yaml --shapes b.yaml)."
DTYPES_HELP = "Replace the files' dtypes, e.g. bf16,fp16."
DTYPE_HELP = ("Operand dtype: fp16, bf16 or fp32; e4m3, e5m2 or int8 (A's, with --scales) for a quantized "
              "problem (scaled_mm).")
DEVICE_HELP = "GPU index to run on (as in --devices; a CPU worker in Triton's interpreter)."
CREATES_FOLDERS = "Missing folders are created."


class _OneLineUsageErrors:
    """typer shows a usage error (an unknown option, a missing argument, a bad choice) as a usage line, a
    hint and the message in a five-line box; our own checks end in one line. So the top-level command
    runs in click's non-standalone mode and prints such an error as one line on stderr, with the help
    command to run, exit code 2. Help for no arguments (no_args_is_help) is shown as typer shows it."""

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode, **extra)
        try:
            code = super().main(args, prog_name, complete_var, False, **extra)
        except typer.Abort:
            err_console.print("Aborted.", markup=False)
            raise SystemExit(1) from None
        except Exception as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # no command ran: typer's own help rendering
                return super().main(args, prog_name, complete_var, True, **extra)
            if not _is_usage_error(exc):
                raise
            ctx = getattr(exc, "ctx", None)
            hint = f" (see '{ctx.command_path} --help')" if ctx is not None else ""
            err_console.print(f"error: {exc.format_message()}{hint}", markup=False, soft_wrap=True)
            raise SystemExit(exc.exit_code) from None
        raise SystemExit(code if isinstance(code, int) else 0)


def _is_usage_error(exc: BaseException) -> bool:
    """click's exceptions (vendored by typer: not importable by a public name) by their interface."""
    return callable(getattr(exc, "format_message", None)) and isinstance(getattr(exc, "exit_code", None),
                                                                         int)


class Group(_OneLineUsageErrors, typer.core.TyperGroup):
    """The `tritonblas` command group (and `db`), with one-line usage errors."""


class Command(_OneLineUsageErrors, typer.core.TyperCommand):
    """A command, with one-line usage errors when it is the program (`tritonblas-tune`)."""


# `-h` as well as `--help`, on every group and command (given to each: a command run as the program,
# tritonblas-tune, has no group to inherit it from).
HELP_NAMES = {"help_option_names": ["-h", "--help"]}


def command(app: typer.Typer, name: str, *, prog: str | None = None, **settings) -> Callable:
    """Register the decorated function as command `name` of `app`, its docstring as the help. `prog`:
    the program its examples name, where that is not `tritonblas <name>` (tritonblas-tune)."""
    settings = {"context_settings": {**HELP_NAMES, **settings.pop("context_settings", {})}, **settings}

    def register(fn: Callable) -> Callable:
        text = inspect.getdoc(fn) or ""
        if prog is not None:
            text = text.replace(f"tritonblas {name}", prog)
        app.command(None if prog else name, help=text, cls=Command, **settings)(fn)
        return fn

    return register


def configure_console() -> None:
    """The width tables are fitted to (tables.fitted), read when a command starts, not when this module
    was imported: COLUMNS where set; else the terminal's; output that goes to a file or pipe (CI logs,
    `| tee`) has no terminal width, and rich would assume 80 columns, so it gets PIPE_WIDTH."""
    columns = os.environ.get("COLUMNS", "").strip()
    for c in (console, err_console):
        c.width = int(columns) if columns.isdigit() and int(columns) > 0 else \
            None if c.is_terminal else PIPE_WIDTH


def fail(message: str, code: int = USAGE_ERROR) -> NoReturn:
    err_console.print(message, markup=False, soft_wrap=True)
    raise typer.Exit(code)


def say(message: str) -> None:
    console.print(message, markup=False, soft_wrap=True, highlight=False)


def num(v: float | None, fmt: str = ".4g", suffix: str = "") -> str:
    """A number for a table cell; "-" where there is none."""
    return "-" if v is None else format(v, fmt) + suffix


def interpreter_mode() -> bool:
    from ..device import interpreter_enabled

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


def parse_device(device: int) -> int:
    """`--device 1`: one GPU index, checked as --devices is."""
    return parse_devices(str(device), "--device")[0]


# Sizes as arguments (explain, db show) are read here, not by click: "-16" would be an unknown option
# and "24.5" a boxed usage error; these commands take negative-looking arguments as sizes.
SIZE_ARGS = {"ignore_unknown_options": True}


def parse_size(text: str, name: str) -> int:
    """An M, N or K argument: a whole number from 1 to MAX_DIM, as in a shapes file."""
    from ..shapes import MAX_DIM

    try:
        value = int(text, 10)
    except ValueError:
        fail(f"error: {name} must be a whole number from 1 to {MAX_DIM}, got {text!r}")
    if not 1 <= value <= MAX_DIM:
        fail(f"error: {name} must be from 1 to {MAX_DIM} (as in a shapes file), got {value}")
    return value


def parse_dtypes(dtypes: str | None) -> list[str] | None:
    """`--dtypes bf16,fp16` -> ["bf16", "fp16"]; an unknown one exits 2 with the valid list."""
    if dtypes is None:
        return None
    items = [d.strip() for d in dtypes.split(",") if d.strip()]
    for d in items or [dtypes]:
        check_dtype(d)
    return list(dict.fromkeys(items))


def check_dtype(dtype: str) -> str:
    from ..shapes import DTYPES

    if dtype not in DTYPES:
        fail(f"error: unknown dtype {dtype!r}; valid dtypes: {', '.join(DTYPES)}")
    return dtype


def problems_from(shapes: Path | Sequence[Path], dtypes: str | None) -> list[Problem]:
    """Every problem of one shapes file or of several (`--shapes a.yaml --shapes b.yaml`), in file order,
    each once: a problem in two files is tuned, benchmarked or checked once."""
    from ..shapes import ShapesError, load_problems

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


# `--scales`: a quantized problem's scale mode (none: a plain GEMM), the vocabulary's words.
ScalesChoice = enum.Enum("ScalesChoice", {s: s for s in SCALES}, type=str)


class LayoutChoice(str, enum.Enum):
    nn = "nn"
    nt = "nt"
    tn = "tn"
    tt = "tt"


class BiasChoice(str, enum.Enum):
    none = "none"
    scalar = "scalar"
    row = "row"
    column = "column"
    full = "full"


# One problem on the command line (explain, db show): M N K and the options of its kind.
SizeM = typer.Argument(..., help="Rows of A and C (1 to 2^24).")
SizeN = typer.Argument(..., help="Columns of B and C.")
SizeK = typer.Argument(..., help="Columns of A, rows of B.")
DtypeOption = typer.Option(DEFAULT_DTYPE, "--dtype", help=DTYPE_HELP)
LayoutOption = typer.Option(LayoutChoice.nn, "--layout", help="A and B: n row-major, t column-major (nn, nt, "
                            "tn, tt).")
BiasOption = typer.Option(BiasChoice.none, "--bias", help="Bias added to the product: none, scalar, row, "
                          "column or full (a quantized problem: none or row).")
ScalesOption = typer.Option(
    ScalesChoice.none, "--scales", help="A quantized problem's float32 scales: tensor (one value each for A "
    "and B), row (scale_a (M, 1), scale_b (1, N)), row_a or row_b (that operand row-wise, the other one "
    "value), block (fp8: scale_a per 1x128 block of A's rows, scale_b per 128x128 block of B); none: a plain "
    "GEMM.")
OutDtypeOption = typer.Option(
    None, "--out-dtype", help="With --scales: the output dtype, bf16, fp16, fp32, e4m3 or e5m2 (default: "
    "A's dtype for fp8, bf16 for int8, as scaled_mm's).")
BDtypeOption = typer.Option(None, "--b-dtype", help="With --scales: B's dtype where it differs from --dtype "
                            "(e4m3 with e5m2).")


def problem_of_args(m: int, n: int, k: int, dtype: str, layout: LayoutChoice, bias: BiasChoice,
                    scales: ScalesChoice = ScalesChoice.none, out_dtype: str | None = None,
                    b_dtype: str | None = None) -> Problem:
    """One problem from the command line (explain, db show), checked as dispatch.select checks its
    arguments; a bad combination exits 2 naming what is wrong."""
    from ..validate import problem_of

    check_dtype(dtype)
    if scales is ScalesChoice.none and (out_dtype is not None or b_dtype is not None):
        fail(f"error: {'--out-dtype' if out_dtype is not None else '--b-dtype'} goes with --scales (a "
             "quantized problem); a plain GEMM writes its operand dtype")
    try:
        return problem_of(m, n, k, dtype, out_dtype, layout.value, bias.value, scales=scales.value,
                          b_dtype=b_dtype)
    except ValueError as e:
        fail(f"error: {e}")


def check_output(path: Path | None, option: str) -> None:
    """Refuse, before any work, an output that cannot be written: a folder, a path under a file, or a
    folder without write permission. A missing folder is fine: it is created when the file is written."""
    if path is None:
        return
    if path.is_dir():
        fail(f"error: {option} {path} is a directory; give a file name")
    parent = path.parent
    while not parent.exists() and parent != parent.parent:
        parent = parent.parent
    if not parent.is_dir():
        fail(f"error: {option} {path}: {parent} is not a directory")
    if not os.access(parent, os.W_OK | os.X_OK):
        fail(f"error: {option} {path}: {parent} is not writable")


def guard(fn: Callable, *args, **kwargs):
    """Run a library call; its documented errors (database, bad file or argument) become one line on
    stderr and exit 1 instead of a traceback."""
    from tuning_db import TuningDBError

    try:
        return fn(*args, **kwargs)
    except (TuningDBError, ValueError) as e:  # ValueError includes ConfigFileError, named in the message
        fail(f"error: {e}", code=1)
    except OSError as e:
        fail(f"error: {e.filename or ''}: {e.strerror or e}".replace("error: : ", "error: "), code=1)


def _print_version(value: bool) -> None:
    if value:
        from .. import __version__
        from ..identity import torch_version, triton_version

        console.print(f"tritonblas {__version__} (triton {triton_version()}, torch {torch_version()})",
                      markup=False)
        raise typer.Exit()


def version_option():
    return typer.Option(False, "--version", callback=_print_version, is_eager=True,
                        help="Print the versions of tritonblas, triton and torch, and exit.")


def winner_text(row) -> str:  # noqa: ANN001 (a tuning.run.TuneRow: the tuner loads with the command)
    """A tuning row's winner as the tables show it ("-": none)."""
    return "-" if row.config is None else row.config.short()
