"""The C++ side: transparent mode's kernels (route.cpp) and the explicit ops' front (front.cpp), one
library built once per torch with the host's C++ compiler, cached, and loaded on the first enable() or
`tritonblas warmup` (`load()`, which builds), or on an explicit call's first answer when the cache
already holds it (`front()`, which never builds: no compiler runs inside a GEMM call).

Why: a Python kernel under the dispatcher costs 3-4 us a call before it does anything, and most GEMMs of
a model are calls dispatch gives to torch's own kernel. The C++ kernels run those without Python (a call
whose key was answered "torch" before); every other call reaches the Python side as before
(transparent.py). The front does the same for explicit calls (call/ops.py). Where nothing can be built
(no C++ compiler, a torch without its headers, a ROCm torch), `load()` says why once and transparent
mode keeps its Python kernels; without Python's headers the library has no front.

The library lands in $XDG_CACHE_HOME/tritonblas/native (else ~/.cache/...), named by a hash of the
source, the torch build and the compiler ($CXX, else c++), so another torch never loads a stale one;
several processes may build it at once (each writes its own file, renamed into place). A build says
so at WARNING before it starts and after, with its seconds (on stderr where logging shows nothing): the
first enable() with a cold cache took 34.0 s on a 2-core CPU box, 32 s of them the build, against
2.0 s with the library cached (torch 2.13 CPU, commit d76df40, 2026-12-03). `tritonblas warmup`
builds it ahead.
"""

from __future__ import annotations

import hashlib
import importlib.machinery
import importlib.util
import logging
import os
import shutil
import subprocess
import sys
import sysconfig
import threading
import time
import types
from collections.abc import Callable
from pathlib import Path

import torch

from .. import caches, log, record

HERE = Path(__file__).parent
SOURCE = HERE / "route.cpp"
LAUNCH = HERE / "launch.cpp"
FRONT = HERE / "front.cpp"
SOURCES = (SOURCE, LAUNCH, FRONT, *(HERE / h for h in ("answers.h", "launch.h", "contract.h", "stream.h")))
_lock = threading.Lock()
_loaded: bool | None = None  # None: not tried in this process
_why_not = ""
_front: types.ModuleType | None = None  # the front's Python module, once loaded
_front_tried = False  # front() looked for a built library once
_on_front: list[Callable[[types.ModuleType], None]] = []
_routing = False  # transparent mode's C++ kernels are installed (they launch recorded kernels themselves)


def load() -> bool:
    """Whether the C++ kernels are loaded (built first where the cache lacks them); False, with one
    warning saying why, where they cannot be."""
    global _loaded, _why_not
    with _lock:
        if _loaded is None:
            try:
                _open(_library())
            except (OSError, RuntimeError, ImportError, subprocess.SubprocessError) as exc:
                _loaded, _why_not = False, str(exc).strip()
                log.warn("tritonblas: its C++ side could not be built here, so transparent mode runs its "
                         "Python kernels (+3-4 us a routed call) and explicit calls that torch's op runs "
                         f"keep their Python lookup: {_why_not}", stacklevel=4)
        loaded_front = _front if _loaded else None
    if loaded_front is not None:
        _announce(loaded_front)
    return _loaded


def front() -> types.ModuleType | None:
    """The explicit ops' front (front.cpp's module) if the library is loaded, or built for this torch
    already (then loaded now: looked for once a process); None otherwise. Never builds."""
    global _front_tried
    if _front is not None or _front_tried:
        return _front
    with _lock:
        if _loaded is None and not _front_tried:
            _front_tried = True
            try:
                path = _library(build=False)
                if path is not None:
                    _open(path)
            except (OSError, RuntimeError, ImportError) as exc:
                log.get().info("the explicit ops' C++ front is not loaded: %s", exc)
        found = _front
    if found is not None:
        _announce(found)
    return found


def on_front(use: Callable[[types.ModuleType], None]) -> None:
    """Call `use(module)` once the front is loaded (now, if it is)."""
    _on_front.append(use)
    if _front is not None:
        use(_front)


def _open(path: Path) -> None:
    """Load the built library (with _lock held): its torch ops, and the front's Python module where it
    was built with one. Its answers are dropped with dispatch's selections and with every change of
    the file recorded into (caches.also_clear, record.also_on_start)."""
    global _loaded, _front
    torch.ops.load_library(str(path))
    _loaded = True
    caches.also_clear(forget)
    record.also_on_start(forget)
    if ops().has_front():
        loader = importlib.machinery.ExtensionFileLoader("tritonblas_native", str(path))
        spec = importlib.util.spec_from_file_location("tritonblas_native", path, loader=loader)
        module = importlib.util.module_from_spec(spec)
        loader.exec_module(module)
        _front = module


def _announce(module: types.ModuleType) -> None:
    global _on_front
    uses, _on_front = _on_front, []
    for use in uses:
        use(module)


def routing() -> bool:
    """Whether transparent mode's C++ kernels are installed (set_routing): routed calls whose launch has a
    record (launch/native.py) are launched from C++."""
    return _routing


def set_routing(on: bool) -> None:
    global _routing
    _routing = on


def forget() -> None:
    """Drop every answer (the transparent kernels' and the front's)."""
    if _loaded:
        ops().forget()


def loaded() -> bool:
    """Whether the library is loaded in this process (load() succeeded), installed or not."""
    return _loaded is True


def why_not() -> str:
    """Why load() returned False ("" if it did not)."""
    return _why_not


def ops():
    """The library's ops (torch.ops.tritonblas_native), after load()."""
    return torch.ops.tritonblas_native


def _library(build: bool = True) -> Path | None:
    """The built library for this torch and compiler: from the cache, else compiled into it (None
    where it is not built and `build` is False)."""
    cxx, flags, sources, libs = command()
    root = Path(torch.__file__).parent
    facts = [*(s.read_text() for s in SOURCES), torch.__version__, str(torch.version.cuda), str(root), cxx,
             *flags, *libs]
    tag = hashlib.sha256("\0".join(facts).encode()).hexdigest()[:16]
    path = _cache_dir() / f"tritonblas_native-{tag}.so"
    if not path.exists():
        if not build:
            return None
        _compile(cxx, flags, sources, libs, path)
    return path


def command(cuda: bool | None = None) -> tuple[str, list[str], list[Path], list[str]]:
    """(compiler, flags, sources, libraries) of the library's build for this torch: with its CUDA
    kernels where `cuda` (None: where torch has CUDA's libraries)."""
    if torch.version.hip is not None:
        raise RuntimeError("a ROCm torch: the C++ kernels call CUDA's and the CPU's only")
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise RuntimeError("no C++ compiler (c++ or g++ on PATH, or $CXX)")
    root = Path(torch.__file__).parent
    if cuda is None:
        cuda = torch.version.cuda is not None and any((root / "lib").glob("libtorch_cuda.*"))
    include = root / "include"
    flags = ["-shared", "-fPIC", "-O2", f"-std={cxx_standard(torch.__version__)}",
             f"-D_GLIBCXX_USE_CXX11_ABI={int(torch._C._GLIBCXX_USE_CXX11_ABI)}",
             "-isystem", str(include), "-isystem", str(include / "torch" / "csrc" / "api" / "include")]
    libs = [f"-L{root / 'lib'}", "-lc10", "-ltorch_cpu"]
    if cuda:
        flags.append("-DTRITONBLAS_CUDA")
        libs += ["-ltorch_cuda", "-lc10_cuda"]
    sources = [SOURCE, LAUNCH]
    python = sysconfig.get_paths()["include"]
    if (Path(python) / "Python.h").exists():  # the front is a Python module: without the headers, none
        flags += ["-DTRITONBLAS_FRONT", "-isystem", python]
        libs.append("-ltorch_python")
        sources.append(FRONT)
    return cxx, flags, sources, libs


def cxx_standard(torch_version: str) -> str:
    """The C++ standard torch's own extension builds use (torch.utils.cpp_extension): C++17 up to torch
    2.11, C++20 from 2.12. torch 2.14's headers compile only as C++20 (requires-clauses, operator<=>)."""
    return "c++20" if torch.torch_version.TorchVersion(torch_version) >= (2, 12) else "c++17"


def _cache_dir() -> Path:
    cache = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(cache) / "tritonblas" / "native"


def _say(message: str) -> None:
    """`message` at WARNING; on stderr too where no handler would show it (the logger's own is a
    NullHandler until the application or TRITONBLAS_LOG configures one): a build of tens of seconds
    inside the first enable() is never silent."""
    logger = log.get()
    logger.warning(message)
    handlers = logger.handlers + logging.getLogger().handlers
    if all(isinstance(h, logging.NullHandler) for h in handlers) and logger.isEnabledFor(logging.WARNING):
        print(message, file=sys.stderr, flush=True)


def _compile(cxx: str, flags: list[str], sources: list[Path], libs: list[str], path: Path) -> None:
    _say(f"tritonblas: building transparent mode's C++ kernels for torch {torch.__version__} (first use; "
         f"cached under {path.parent}) ...")
    start = time.perf_counter()
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        done = subprocess.run([cxx, *flags, *map(str, sources), *libs, "-o", str(tmp)], capture_output=True,
                              text=True, timeout=600)
        if done.returncode != 0:
            raise RuntimeError(f"{cxx} failed ({done.returncode}): {done.stderr.strip()[-1500:]}")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    _say(f"tritonblas: built transparent mode's C++ kernels in {time.perf_counter() - start:.0f} s "
         f"({path.name})")
