"""`python -m tritonblas ...` runs the `tritonblas` command."""

from .cli import app

app(prog_name="tritonblas")
