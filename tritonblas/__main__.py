"""`python -m tritonblas ...` runs the `tritonblas` command."""

from .cli import app

if __name__ == "__main__":  # spawned tuning workers import this module too; they must not rerun the CLI
    app(prog_name="tritonblas")
