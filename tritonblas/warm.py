"""Warm-up: compile, ahead of the first real call, every config dispatch would run for a list of problems.

The first call of a config in a fresh process compiles its kernel (seconds on a GPU). `warmup` runs
each problem once through the public ops, exactly as a user's call goes (dispatch selects the config;
the operands have the problem's layout, so triton specializes the kernel the same way), in a pool of
threads (`tritonblas.parallel`, as the tuner compiles), so the compiled kernels land in triton's cache
(~/.triton/cache, or $TRITON_CACHE_DIR) and a later process finds them there. A problem dispatch sends
to torch.mm compiles nothing. In Triton's interpreter nothing is compiled: small problems are launched
once (so the flow is tested on CPU), larger ones only selected. It also builds the library's C++ side
(tritonblas.native, once per torch, cached), whose front answers explicit calls that torch's op runs
without the Python lookup in later processes too.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from .config import GemmConfig
from .problem import Problem

WarmStatus = Literal["compiled", "vendor", "selected", "failed"]
# In the interpreter a launch runs the kernel in numpy: only problems up to this many multiply-adds run.
INTERPRETER_MAX_MACS = 64**3


@dataclass(frozen=True)
class WarmupResult:
    """One problem: what dispatch selected, and what warming it did.

    status: compiled (its kernel ran once, so it is compiled and cached), vendor (dispatch runs
    torch.mm: nothing to compile), selected (interpreter, too large to launch there), failed (`note`)."""

    problem: Problem
    status: WarmStatus
    config: GemmConfig | None = None
    source: str = ""
    seconds: float = 0.0
    note: str = ""


def problems_of(shapes: str | Path | Sequence[str | Path] | None = None, file: str | Path | None = None,
                problems: Iterable[Problem] | None = None, dtypes: Sequence[str] | None = None
                ) -> list[Problem]:
    """The problems of shapes files, of a config file's entries and of `problems`, in order, each once.
    Raises ValueError (ShapesError, ConfigFileError) naming the file."""
    from .shapes import load_problems

    found: list[Problem] = list(problems or [])
    paths = [] if shapes is None else [shapes] if isinstance(shapes, (str, Path)) else list(shapes)
    for path in paths:
        found += load_problems(path, list(dtypes) if dtypes else None)
    if file is not None:
        from tuning_db.exchange import load_config_file

        found += [Problem.from_key(e) for e in load_config_file(file).entries
                  if e.scales != "none" or e.a_dtype == e.b_dtype == e.out_dtype]
    return list(dict.fromkeys(found))


def _zeros(rows: int, cols: int, transposed: bool, dtype, device):
    """A rows x cols operand of zeros, row-major or (transposed) column-major: the transpose of a
    row-major cols x rows tensor."""
    import torch

    if transposed:
        return torch.zeros((cols, rows), dtype=dtype, device=device).t()
    return torch.zeros((rows, cols), dtype=dtype, device=device)


def _zero_call(problem: Problem, device, backend: str | None) -> Callable[[], object]:
    """The public op's call of the problem on zero operands of its shape, layout and dtypes (the values
    do not matter to a compile; zeros keep the run free of NaN and overflow warnings): matmul or addmm,
    or for a quantized problem scaled_mm with unit scales of its mode."""
    import torch

    import tritonblas

    from .validate import TORCH_DTYPE_OF

    a = _zeros(problem.m, problem.k, problem.layout[0] == "t", TORCH_DTYPE_OF[problem.dtype], device)
    b = _zeros(problem.k, problem.n, problem.layout[1] == "t", TORCH_DTYPE_OF[problem.b], device)
    if problem.quantized:
        from .tuning.scaled import bias_dtype, laid_out_scales

        sa, sb = laid_out_scales(problem, lambda shape: torch.ones(shape, dtype=torch.float32, device=device))
        out = TORCH_DTYPE_OF[problem.out]
        bias = None if problem.bias == "none" else \
            torch.zeros(problem.n, dtype=bias_dtype(out), device=device)
        return lambda: tritonblas.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=out, backend=backend)
    shape = {"none": None, "scalar": (1, 1), "row": (problem.n,), "column": (problem.m, 1),
             "full": (problem.m, problem.n)}[problem.bias]
    if shape is None:
        return lambda: tritonblas.matmul(a, b, backend=backend)
    bias = torch.zeros(shape, dtype=a.dtype, device=device)
    return lambda: tritonblas.addmm(bias, a, b, backend=backend)


def _warm_one(problem: Problem, info, torch_device, interpreter: bool, backend: str | None) -> WarmupResult:
    from .selection import dispatch

    start = time.monotonic()

    def select():
        return dispatch.select_problem(problem, device=info, backend=backend)

    try:
        sel = select()
        if sel.backend == "torch":
            return WarmupResult(problem, "vendor", sel.config, sel.source, time.monotonic() - start)
        if interpreter and problem.m * problem.n * problem.k > INTERPRETER_MAX_MACS:
            return WarmupResult(problem, "selected", sel.config, sel.source, time.monotonic() - start,
                                "the interpreter compiles nothing; too large to launch there")
        _zero_call(problem, torch_device, backend)()
        sel = select()  # what ran: a config triton refused is no longer selected
    except Exception as exc:  # one problem failing (out of memory, say) must not stop the others
        return WarmupResult(problem, "failed", seconds=time.monotonic() - start,
                            note=f"{type(exc).__name__}: {exc}"[:300])
    return WarmupResult(problem, "compiled", sel.config, sel.source, time.monotonic() - start)


def warmup(shapes: str | Path | Sequence[str | Path] | None = None, *, file: str | Path | None = None,
           problems: Iterable[Problem] | None = None, dtypes: Sequence[str] | None = None,
           device: int | None = None, workers: int | None = None, progress: bool | None = None,
           on_result: Callable[[WarmupResult], None] | None = None,
           backend: str | None = None) -> list[WarmupResult]:
    """Compile every config dispatch would run for the problems of `shapes` (shapes.yaml files), of
    `file` (a config file such as configs/sm_90.json: its entries' problems) and of `problems`, into
    triton's cache, `workers` at a time (default: up to 16 threads). `device`: a GPU index (default: the
    current one; Triton's interpreter under TRITON_INTERPRET=1). `progress`: a progress bar on stderr
    (default: when stderr is a terminal). `backend`: as matmul's ("triton" warms the kernel even where
    dispatch would run torch.mm). Returns one result per problem, in order.

        tritonblas.warmup("shapes.yaml")
        tritonblas.warmup(file="configs/sm_90.json")
        tritonblas.warmup(problems=[tritonblas.Problem(4096, 4096, 4096, "bf16")])
    """
    import torch

    from . import native
    from .device import interpreter_enabled, on_device
    from .parallel import run_first_launches

    todo = problems_of(shapes, file, problems, dtypes)
    interpreter = interpreter_enabled()
    if not interpreter and not torch.cuda.is_available():
        raise RuntimeError("warmup compiles for a CUDA or ROCm GPU and none is available; under "
                           "TRITON_INTERPRET=1 it runs in Triton's interpreter")
    native.load()  # (says once why where it cannot be built; warming goes on without it)
    index = (torch.cuda.current_device() if device is None else device) if not interpreter else 0
    torch_device = torch.device("cpu") if interpreter else torch.device("cuda", index)
    workers = 1 if interpreter else (workers or min(16, os.cpu_count() or 1))
    if progress is None:
        import sys

        progress = sys.stderr.isatty()
    with on_device(index, interpreter) as info, _progress_bar(progress, len(todo), info.name) as advance:
        def done(problem: Problem, result: WarmupResult) -> None:
            advance()
            if on_result is not None:
                on_result(result)

        results, pending = run_first_launches(
            todo, lambda p: _warm_one(p, info, torch_device, interpreter, backend), workers=workers,
            cuda_device=None if interpreter else torch_device, timeout_s=1800.0, on_done=done)
    for p in pending:
        results[p] = WarmupResult(p, "failed", note="still compiling after 30 minutes")
    return [results[p] for p in todo]


class _progress_bar:
    """A rich progress bar on stderr (or nothing); the context gives the function that advances it."""

    def __init__(self, show: bool, total: int, where: str) -> None:
        self.show, self.total, self.where = show, total, where
        self.progress = None

    def __enter__(self) -> Callable[[], None]:
        if not self.show:
            return lambda: None
        from rich.console import Console
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.progress = Progress(TextColumn(f"warming up on {self.where}"), BarColumn(), MofNCompleteColumn(),
                                 TimeElapsedColumn(), console=Console(stderr=True))
        task = self.progress.add_task("warmup", total=self.total)
        self.progress.start()
        return lambda: self.progress.advance(task)

    def __exit__(self, *exc: object) -> None:
        if self.progress is not None:
            self.progress.stop()
