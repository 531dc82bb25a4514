"""tritonblas: Triton GEMM kernels behind an autotuning dispatcher.

Importing does no device work and reads no environment: kernels (and triton) load on first use.
"""

from .config import DeviceInfo, GemmConfig, Problem, config_supports
from .dispatch import Selection, select
from .ops import addmm, linear, matmul

__version__ = "0.1.0"
__all__ = ["GemmConfig", "DeviceInfo", "Problem", "config_supports", "matmul", "addmm", "linear",
           "select", "Selection", "__version__"]
