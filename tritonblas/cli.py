"""The `tritonblas` command (tune, bench, explain, db) and the `tritonblas-tune` command.

Thin over the library: shapes files are read by shapes.py, tuning is tuner.py (spread over GPUs by
cli_workers.py), selection is dispatch.py, the database is tuning_db (its commands: db_cli.py).
"""

from __future__ import annotations

import enum

import typer
from rich import box
from rich.table import Table

from .cli_bench import bench
from .cli_common import (
    BackendChoice,
    check_dtype,
    configure_console,
    console,
    describe_db,
    fail,
    gpu_count,
    interpreter_mode,
    version_option,
)
from .cli_tune import TUNE_HELP, tune
from .config import DeviceInfo
from .db_cli import app as db_app

APP_HELP = """tritonblas: Triton GEMM kernels behind an autotuning dispatcher with a tuning database.

**Examples**

```
tritonblas tune --shapes shapes.yaml
tritonblas bench --shapes shapes.yaml --plot bench.png
tritonblas explain 4096 4096 4096 --dtype bf16
tritonblas db export --arch sm_90 -o configs/sm_90.json
```
"""

app = typer.Typer(name="tritonblas", help=APP_HELP, no_args_is_help=True, add_completion=False,
                  rich_markup_mode="markdown")
app.command("tune", help=TUNE_HELP)(tune)
app.command("bench")(bench)
app.add_typer(db_app, name="db")

tune_app = typer.Typer(name="tritonblas-tune", add_completion=False, rich_markup_mode="markdown")
tune_app.command(help=TUNE_HELP)(tune)


@app.callback()
def main(version: bool = version_option()) -> None:
    """tritonblas: Triton GEMM kernels behind an autotuning dispatcher with a tuning database."""
    configure_console()


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


def _explain_device(arch: str | None, sms: int | None) -> DeviceInfo:
    """--arch explains for a GPU that is not here; otherwise the GPU (or the interpreter) we run on."""
    import torch

    from .config import device_for_arch
    from .device import device_info

    if arch is not None:
        try:
            return device_for_arch(arch, sm_count=sms or 132)
        except ValueError as e:
            fail(f"error: --arch: {e}")
    if interpreter_mode():
        return device_info(torch.device("cpu"))
    if gpu_count() == 0:
        fail("error: no CUDA or ROCm GPU here to explain for; pass the target with --arch, e.g. "
             "--arch sm_90 (or set TRITON_INTERPRET=1 for the interpreter)")
    return device_info(torch.device("cuda"))


EXPLAIN_HELP = """Show the config dispatch selects for one problem, its source, and the heuristic's ranking.

Dispatch looks in order at: the tuning database, the shipped `configs/<arch>.json`, the nearest tuned
neighbour, the analytical heuristic. Each may answer with a kernel config (backend triton) or with
torch.mm (backend torch: the vendor GEMM, a tuning candidate like any other). The ranking shows the
heuristic's cost model term by term.

**Examples**

```
tritonblas explain 4096 4096 4096 --dtype bf16
tritonblas explain 16 6144 4096 --dtype fp16 --layout nt --bias row --arch sm_90 --top 5
```
"""


@app.command("explain", help=EXPLAIN_HELP)
def explain(m: int = typer.Argument(..., min=0, help="Rows of A and C."),
            n: int = typer.Argument(..., min=0, help="Columns of B and C."),
            k: int = typer.Argument(..., min=0, help="Columns of A, rows of B."),
            dtype: str = typer.Option("bf16", "--dtype", help="Operand dtype: fp16, bf16 or fp32."),
            layout: LayoutChoice = typer.Option(LayoutChoice.nn, "--layout",
                                                help="A and B: n row-major, t column-major."),
            bias: BiasChoice = typer.Option(BiasChoice.none, "--bias", help="Bias added to the product."),
            streamk: bool = typer.Option(None, "--streamk/--no-streamk",
                                         help="Only Stream-K / only Persistent (default: either)."),
            backend: BackendChoice = typer.Option(None, "--backend", help="Only the kernels (triton) or "
                                                  "torch.mm pinned (torch); default: dispatch decides."),
            arch: str = typer.Option(None, "--arch", help="Explain for this arch (e.g. sm_90) instead of "
                                     "the GPU here; no GPU needed."),
            sms: int = typer.Option(None, "--sms", min=1, help="SM count with --arch (default 132)."),
            db: str = typer.Option(None, "--db", help="Tuning database URL or SQLite file "
                                   "(default: $TRITONBLAS_DB, else ~/.cache/tritonblas/tuning.sqlite)."),
            top: int = typer.Option(10, "--top", min=1, help="How many ranked candidates to show.")) -> None:
    from . import dispatch, heuristic

    check_dtype(dtype)
    where = describe_db(db)
    info = _explain_device(arch, sms)
    with dispatch.using_database(db):
        try:
            sel = dispatch.select(m, n, k, dtype, layout=layout.value, bias=bias.value,
                                  enable_streamk=streamk, device=info,
                                  backend=None if backend is None else backend.value)
        except (ValueError, RuntimeError) as e:
            fail(f"error: {e}", code=1)
    ranked = heuristic.rank(sel.problem, info, streamk)
    on = info.name if info.name == info.arch else f"{info.name} ({info.arch})"
    lines = [("problem", f"{m}x{n}x{k} {dtype}, layout {layout.value}, bias {bias.value}, on {on}, "
                         f"{info.sm_count} SMs"),
             ("selected", sel.config.short()),
             ("backend", "torch (torch.mm / torch.addmm, the vendor GEMM)" if sel.backend == "torch"
              else "triton (the library's kernels)"),
             ("source", f"{sel.source}: {_source_detail(sel, where)}")]
    if sel.time_ms:
        kind = "measured" if sel.measured else "predicted by the heuristic"
        tflops = 2 * m * n * k / (sel.time_ms * 1e9)
        lines.append(("time", f"{sel.time_ms:.4g} ms {kind} ({tflops:.1f} TFLOP/s)"))
    for name, text in lines:
        console.print(f"{name + ':':10}{text}", markup=False)
    console.print(_ranking_table(ranked[:top], sel.config, len(ranked)))


def _source_detail(sel, where: str) -> str:
    if sel.source == "heuristic":
        text = f"nothing tuned for it in {where}, configs/{sel.device.arch}.json or nearby shapes"
        return text + (f"; {sel.detail}" if sel.backend == "torch" else "")
    return sel.detail


def _ranking_table(ranked, selected, total: int) -> Table:
    """The cost model term by term (times in us; compute includes the Stream-K fix-up)."""
    table = Table(title=f"heuristic ranking: top {len(ranked)} of {total} feasible configs (* = selected)",
                  box=box.SIMPLE_HEAD, title_justify="left", padding=(0, 1), pad_edge=False)
    for col in ("#", "config", "us", "compute", "memory", "waves", "eff", "waste"):
        table.add_column(col, justify="left" if col == "config" else "right", no_wrap=True)
    for i, e in enumerate(ranked, 1):
        mark = "*" if e.config == selected else ""
        table.add_row(f"{mark}{i}", e.config.short(), f"{e.total_us:.1f}", f"{e.compute_us:.1f}",
                      f"{e.memory_us:.1f}", f"{e.waves:.2f}", f"{e.efficiency:.2f}", f"{e.edge_waste:.0%}")
    return table
