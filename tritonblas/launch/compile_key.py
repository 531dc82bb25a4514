"""triton's per-process compile-cache key, kept on disk so a warmed process does not hash 400 MB again.

Before triton looks a compiled kernel up in its cache it computes `triton_key()`: a hash of its compiler
sources and of libtriton.so (415 MB in triton 3.6), once per process. On the H200 host that was 0.35-0.66
s of a warm first call of 0.76 s (016dd08:scripts/custom_op_probe.py, scripts/warmup_check.py --profile,
2026-11-30), more than the issue's whole 0.5 s budget. The key is a pure function of those files'
contents, so it is stored next to triton's cache with the size and mtime of every file it covers (as
ccache and pip do for theirs): a later process whose files all stat the same reuses it; any difference
recomputes it with triton's own function. Installed as `triton.runtime.cache.triton_key`, the name
triton's `get_cache_key` calls; a triton without that function is left alone.
"""

from __future__ import annotations

import functools
import json
import os
import threading
from pathlib import Path

from ..identity import write_json_atomically

_FILE = "tritonblas-triton-key.json"
_lock = threading.Lock()


def _covered_files(root: Path) -> list[Path]:
    """Every file triton_key reads: runtime/cache.py, the libtriton shared object, and the modules of the
    compiler, backends and language packages. Like its pkgutil.walk_packages, the walk enters packages
    only (folders with an __init__.py): the backends' folders of CUDA headers and tools hold thousands
    of files, whose walk took 0.29 s on the H200 host."""
    files = [root / "runtime" / "cache.py", *sorted((root / "_C").glob("libtriton.*"))]
    for sub in ("compiler", "backends", "language"):
        for folder, dirs, names in os.walk(root / sub):
            dirs[:] = sorted(d for d in dirs if os.path.isfile(os.path.join(folder, d, "__init__.py")))
            files += [Path(folder) / name for name in sorted(names) if name.endswith(".py")]
    return files


def _signature(root: Path) -> list[list]:
    out = []
    for path in _covered_files(root):
        st = path.stat()
        out.append([str(path.relative_to(root)), st.st_size, st.st_mtime_ns])
    return out


def _store_path() -> Path:
    from triton import knobs

    return Path(knobs.cache.dir) / _FILE


def install() -> None:
    """Make `triton_key()` the stored key when triton's files are unchanged; otherwise compute it once
    (triton's own function) and store it. Thread-safe; a no-op after the first call."""
    with _lock:
        _install_locked()


@functools.cache
def _install_locked() -> None:
    import triton
    from triton.runtime import cache

    original = getattr(cache, "triton_key", None)
    if original is None or not hasattr(original, "cache_info"):
        return  # not the triton this was written for (3.x's lru-cached function): leave it alone
    root = Path(triton.__file__).parent
    signature = [triton.__version__, _signature(root)]
    path = _store_path()
    try:
        stored = json.loads(path.read_text())
    except (OSError, ValueError):
        stored = None
    if isinstance(stored, dict) and stored.get("signature") == signature and isinstance(stored.get("key"),
                                                                                         str):
        key = stored["key"]
    else:
        key = original()
        write_json_atomically(path, {"signature": signature, "key": key})
    cache.triton_key = functools.lru_cache(maxsize=None)(lambda: key)




@functools.cache
def prefetch() -> None:
    """Start, once per process, a thread that loads (or computes and stores) triton's compile-cache key
    (this module): it runs while the calling thread selects a config and imports the
    kernels, and the first launch waits for it instead of hashing triton's files a second time."""
    threading.Thread(target=install_quietly, name="tritonblas-triton-key", daemon=True).start()


def install_quietly() -> None:
    """install(), its errors ignored: only a head start (triton computes its key itself)."""
    try:
        install()
    except Exception:  # noqa: BLE001 (only a head start: triton computes its key itself if this failed)
        pass
