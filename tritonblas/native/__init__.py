"""Transparent mode's C++ kernels (route.cpp): built once per torch with the host's C++ compiler, cached,
and loaded into torch's dispatcher on the first enable() that asks for them.

Why: a Python kernel under the dispatcher costs 3-4 us a call before it does anything, and most GEMMs of
a model are calls dispatch gives to torch's own kernel. The C++ kernels run those without Python (a call
whose key was answered "torch" before); every other call reaches the Python side as before
(transparent.py). Where nothing can be built (no C++ compiler, a torch without its headers, a ROCm
torch), `load()` says why once and transparent mode keeps its Python kernels.

The library lands in $XDG_CACHE_HOME/tritonblas/native (else ~/.cache/...), named by a hash of the
source, the torch build and the compiler ($CXX, else c++), so another torch never loads a stale one;
several processes may build it at once (each writes its own file, renamed into place).
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import threading
from pathlib import Path

import torch

from .. import log

SOURCE = Path(__file__).with_name("route.cpp")
_lock = threading.Lock()
_loaded: bool | None = None  # None: not tried in this process
_why_not = ""


def load() -> bool:
    """Whether the C++ kernels are loaded (built first where the cache lacks them); False, with one
    warning saying why, where they cannot be."""
    global _loaded, _why_not
    with _lock:
        if _loaded is None:
            try:
                torch.ops.load_library(str(_library()))
                _loaded = True
            except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
                _loaded, _why_not = False, str(exc).strip()
                log.warn("tritonblas: transparent mode runs its Python kernels (+3-4 us a routed call): its "
                         f"C++ ones could not be built here: {_why_not}", stacklevel=4)
        return _loaded


def loaded() -> bool:
    """Whether the library is loaded in this process (load() succeeded), installed or not."""
    return _loaded is True


def why_not() -> str:
    """Why load() returned False ("" if it did not)."""
    return _why_not


def ops():
    """The library's ops (torch.ops.tritonblas_native), after load()."""
    return torch.ops.tritonblas_native


def _library() -> Path:
    """The built library for this torch and compiler: from the cache, else compiled into it."""
    if torch.version.hip is not None:
        raise RuntimeError("a ROCm torch: the C++ kernels call CUDA's and the CPU's only")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise RuntimeError("no C++ compiler (c++ or g++ on PATH, or $CXX)")
    root = Path(torch.__file__).parent
    cuda = torch.version.cuda is not None and any((root / "lib").glob("libtorch_cuda.*"))
    include = root / "include"
    flags = ["-shared", "-fPIC", "-O2", "-std=c++17",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             "-isystem", str(include), "-isystem", str(include / "torch" / "csrc" / "api" / "include")]
    libs = [f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu"]
    if cuda:
        flags.append("-DTRITONBLAS_CUDA")
        libs += ["-ltorch_cuda", "-lc10_cuda"]
    facts = [SOURCE.read_text(), torch.__version__, str(torch.version.cuda), str(root), cxx, *flags, *libs]
    tag = hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]
    path = _cache_dir() / f"tritonblas_native-{tag}.so"
    if not path.exists():
        _compile(cxx, flags, libs, path)
    return path


def _cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tritonblas" / "native"


def _compile(cxx: str, flags: list[str], libs: list[str], path: Path) -> None:
    log.get().info("building transparent mode's C++ kernels into %s (once per torch)", path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        done = subprocess.run([cxx, *flags, str(SOURCE), *libs, "-o", str(tmp)], capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"{cxx} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
