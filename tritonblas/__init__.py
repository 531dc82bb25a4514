"""tritonblas: Triton GEMM kernels behind an autotuning dispatcher.

Importing does no device work and opens no database. The public names load on first use (PEP 562), so
`import tritonblas` costs about a millisecond; torch, pydantic and the custom op registration come with
the first `tritonblas.matmul` (or any other name), triton with the first launch. The one thing the
environment does at import: TRITONBLAS_ENABLED=1 turns transparent mode on (`tritonblas.enable()`,
which imports torch). TRITONBLAS_DB, TRITONBLAS_RECORD and TRITONBLAS_LOG are read on first use.
"""

import importlib
import os

__version__ = "0.1.0"

_WHERE = {
    "GemmConfig": "config", "config_supports": "config", "DeviceInfo": "arch", "Problem": "problem",
    "matmul": "call.ops", "addmm": "call.ops", "linear": "call.ops", "scaled_mm": "call.scaled",
    "grouped_mm": "grouped.op",
    "select": "selection.dispatch", "Selection": "selection.dispatch",
    "enable": "transparent", "disable": "transparent",
    "warmup": "warm",
}
__all__ = [*_WHERE, "__version__"]
# Modules the README names as attributes of the package (`tritonblas.dispatch.clear_cache()`), which
# moved into the subpackages (issue 35).
_MODULES = {"dispatch": "selection.dispatch"}


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        if name not in _MODULES:
            raise AttributeError(f"module 'tritonblas' has no attribute {name!r}")
        value = importlib.import_module(f".{_MODULES[name]}", __name__)
    else:
        value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


if os.environ.get("TRITONBLAS_ENABLED", "").strip().lower() not in ("", "0", "false", "no", "off"):
    __getattr__("enable")()
