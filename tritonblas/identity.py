"""What a tuning result depends on: triton version, torch version, kernel sources, timing protocol.

A stored winner whose kernel hash differs from these is stale; one of another triton version still
serves, after the running version's (tuning_db.schemas.EnvIdentity.serves).
"""

from __future__ import annotations

import functools
import hashlib
from importlib import metadata
from pathlib import Path

import torch

# Bump when the way candidates are timed changes (warm-up, repetitions, L2 flush, statistic).
TIMING_PROTOCOL = "do_bench-median-l2flush-v2-small-replayed"
_KERNEL_DIR = Path(__file__).parent / "kernels"


@functools.lru_cache(maxsize=1)
def kernel_hash() -> str:
    """sha256 (first 16 hex digits) over the kernel sources, in file-name order."""
    h = hashlib.sha256()
    for path in sorted(_KERNEL_DIR.glob("*.py")):
        h.update(path.name.encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


@functools.lru_cache(maxsize=1)
def triton_version() -> str:
    try:
        return metadata.version("triton")
    except metadata.PackageNotFoundError:
        return "unknown"


def torch_version() -> str:
    return torch.__version__.split("+")[0]
