"""tritonblas: Triton GEMM kernels behind an autotuning dispatcher.

Importing does no device work, opens no database and reads no environment. The public names load on
first use (PEP 562), so `import tritonblas` costs about a millisecond; torch, pydantic and the custom
op registration come with the first `tritonblas.matmul` (or any other name), triton with the first
launch.
"""

import importlib

__version__ = "0.1.0"

_WHERE = {
    "GemmConfig": "config", "DeviceInfo": "config", "Problem": "config", "config_supports": "config",
    "matmul": "ops", "addmm": "ops", "linear": "ops",
    "select": "dispatch", "Selection": "dispatch",
    "warmup": "warm",
}
__all__ = [*_WHERE, "__version__"]


def __getattr__(name: str):
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'tritonblas' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
