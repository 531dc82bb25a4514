"""The command line: `tritonblas {tune,bench,explain,warmup,db}` and `tritonblas-tune`.

One module per command, each thin over the library: tuning is `tritonblas.tuning` (a run over GPUs and
shards: `tuning.run`), benchmarking `tritonblas.bench`, selection `tritonblas.selection.dispatch`, warm-up
`tritonblas.warmup`, the database `tuning_db`. `common` holds what they share: how help is attached
(each command's docstring, with examples), option types and checks, and the one-line exits; `targets`
checks `--arch` and `--db`; `tables` fits tables to the console; `progress` is tune's live display. A
command imports what it runs when it runs, so the `db` commands load no torch.
"""

from __future__ import annotations

import typer

from . import bench, db, explain, tune, warmup
from .common import EXIT_CODES_HELP, HELP_NAMES, SIZE_ARGS, Group, command, configure_console, version_option

app = typer.Typer(name="tritonblas", cls=Group, no_args_is_help=True, add_completion=False,
                  rich_markup_mode="markdown", context_settings=HELP_NAMES, epilog=EXIT_CODES_HELP)
command(app, "tune")(tune.tune)
command(app, "bench")(bench.bench)
command(app, "explain", context_settings=SIZE_ARGS)(explain.explain)
command(app, "warmup")(warmup.warmup)
app.add_typer(db.app, name="db")

tune_app = typer.Typer(name="tritonblas-tune", add_completion=False, rich_markup_mode="markdown",
                       context_settings=HELP_NAMES)
command(tune_app, "tune", prog="tritonblas-tune")(tune.tune)


@app.callback()
def main(version: bool = version_option()) -> None:
    """tritonblas: Triton GEMM kernels behind an autotuning dispatcher with a tuning database.

    **Examples**

    ```
    tritonblas tune --shapes shapes.yaml
    tritonblas bench --shapes shapes.yaml --plot bench.png
    tritonblas explain 4096 4096 4096 --dtype bf16
    tritonblas warmup --file configs/sm_90.json
    tritonblas db export --arch sm_90 -o configs/sm_90.json
    ```
    """
    configure_console()
