"""Device facts (arch, SM count, shared memory), read once per device and cached."""

from __future__ import annotations

import contextlib
import functools
import os
import re

import torch

from .arch import INTERPRETER_DEVICE, DeviceInfo

_INTERPRETER = ("CPU tensors run only in Triton's interpreter (TRITON_INTERPRET=1, set before triton is "
                "imported)")
_NOT_ON_CPU = f"tritonblas runs on CUDA/ROCm tensors and got CPU ones: move them to the GPU; {_INTERPRETER}"
# select() without tensors on a machine without a GPU asks for the current device and lands here too.
_NO_GPU = (f"tritonblas runs on CUDA/ROCm devices and this torch sees none; {_INTERPRETER}. To see what "
           "dispatch selects for a GPU that is not here: tritonblas.select(..., device="
           "tritonblas.arch.device_for_arch('sm_90')) or `tritonblas explain M N K --arch sm_90`")


# os.environ's own mapping of encoded names to values (CPython's os._Environ._data, which os.environ's
# writes and monkeypatch.setenv update): a plan lookup on CPU tensors asks per call, and
# os.environ.get costs 0.58 us there against 0.03 for the dict.
_ENVIRON = getattr(os.environ, "_data", None)
if _ENVIRON is not None:
    _INTERPRET = os.environ.encodekey("TRITON_INTERPRET")
    _OFF = (os.environ.encodevalue(""), os.environ.encodevalue("0"))


def interpreter_enabled() -> bool:
    """Triton's interpreter runs kernels on CPU tensors; it must be chosen before triton is imported."""
    if _ENVIRON is None:
        return os.environ.get("TRITON_INTERPRET", "0") not in ("", "0")
    return _ENVIRON.get(_INTERPRET, _OFF[1]) not in _OFF


def _major_minor(version: str) -> tuple[int, int]:
    """(3, 10) of "3.10.0+git1a2b": numpy's and triton's versions start with two numbers."""
    major, minor = re.match(r"(\d+)\.(\d+)", version).groups()
    return int(major), int(minor)


def interpreter_problem(triton_version: str, numpy_version: str) -> str | None:
    """Why Triton's interpreter cannot run beside these versions, or None. Triton 3.6's interpreter turns
    one-element arrays into Python scalars, which numpy 2.4 refuses; 3.7's does not. The package does not
    cap numpy for everyone: a GPU host never runs the interpreter."""
    if _major_minor(triton_version) < (3, 7) and _major_minor(numpy_version) >= (2, 4):
        return (f"triton {triton_version}'s interpreter fails with numpy {numpy_version} (\"only "
                "0-dimensional arrays can be converted to Python scalars\"): pip install \"numpy<2.4\", "
                "or triton>=3.7")
    return None


@functools.cache
def interpreter_device() -> DeviceInfo:
    """INTERPRETER_DEVICE, once triton's interpreter can run beside this numpy (checked once a process: a
    refusal is not cached, so every call says it, where the kernels would fail in numpy)."""
    import numpy
    import triton

    problem = interpreter_problem(triton.__version__, numpy.__version__)
    if problem:
        raise RuntimeError(problem)
    return INTERPRETER_DEVICE


def device_info(device: torch.device) -> DeviceInfo:
    if device.type == "cpu":
        if not interpreter_enabled():
            raise RuntimeError(_NOT_ON_CPU if torch.cuda.is_available() else _NO_GPU)
        return interpreter_device()
    if device.type != "cuda":
        raise RuntimeError(f"tritonblas does not run on device type {device.type!r}")
    if device.index is None:
        _require_cuda(device)
        return _cuda_device_info(torch.cuda.current_device())
    return _cuda_device_info(device.index)


def tensor_device_info(t: torch.Tensor) -> DeviceInfo:
    """device_info(t.device), for the per-call hot path: t.is_cuda and t.get_device() are plain reads,
    where t.device.type builds a device object and a string (device_info 0.74 -> 0.35 us on the CPU
    interpreter path, of which the env read is 0.28; the CUDA path is a cached lookup by index)."""
    if t.is_cuda:
        return _cuda_device_info(t.get_device())
    if t.is_cpu and interpreter_enabled():
        return interpreter_device()
    return device_info(t.device)  # raises the detailed error


def _require_cuda(device: torch.device) -> None:
    """torch answers a CUDA call on a machine without one with an AssertionError; say which device."""
    if not torch.cuda.is_available():
        raise RuntimeError(f"device {device}: no CUDA/ROCm device is available to this torch "
                           f"({torch.__version__})")


@functools.cache
def _cuda_device_info(index: int) -> DeviceInfo:
    # Cached, so the checks cost nothing per matmul; an exception is not cached.
    _require_cuda(torch.device("cuda", index))
    if not 0 <= index < torch.cuda.device_count():
        raise ValueError(f"device cuda:{index} does not exist: {torch.cuda.device_count()} device(s) visible")
    props = torch.cuda.get_device_properties(index)
    if torch.version.hip is not None:
        arch = props.gcnArchName.split(":")[0]
    else:
        arch = f"sm_{props.major}{props.minor}"
    smem = getattr(props, "shared_memory_per_block_optin", 0) or 101376
    return DeviceInfo(arch=arch, name=props.name, sm_count=props.multi_processor_count,
                      smem_per_block=int(smem), regs_per_sm=getattr(props, "regs_per_multiprocessor", 65536))


@contextlib.contextmanager
def on_device(index: int, interpreter: bool):
    """Make GPU `index` current (inputs built on "cuda" land there) and yield its DeviceInfo."""
    if interpreter:
        yield device_info(torch.device("cpu"))
        return
    with torch.cuda.device(index):
        yield device_info(torch.device("cuda", index))


def device_arch(index: int, interpreter: bool) -> str:
    with on_device(index, interpreter) as info:
        return info.arch
