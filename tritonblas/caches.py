"""The caches derived from what dispatch reads, and the one way to drop them.

dispatch's selections and the call path's plans are functions of dispatch's state (the user DB, the
shipped files, the configs reported as failing to compile). Whatever changes that state (clear_cache,
set_database, set_shipped_dir, a compile failure) calls `invalidate()`, which empties every cache made
by `new()` and bumps one generation under one lock. Something computed from the state read at
generation g is stored only while the generation is still g (`store`), so a drop can never be undone
by a thread that selected before it. Nothing else drops them: recording (record.py) and the
interpreter choice (a per-hit check of the plans made for CPU tensors) do not touch these caches.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

from .contract import CACHE_CAP as CAP  # entries per cache; a full cache is emptied whole

_lock = threading.Lock()
_clears: list[Callable[[], None]] = []  # each cache's clear
_generation = 0


def new() -> dict:
    """A dict whose entries are dropped with every other cache here; fill it through `store`."""
    cache: dict = {}
    also_clear(cache.clear)
    return cache


def also_clear(clear: Callable[[], None]) -> None:
    """Call `clear` with every drop: a cache kept elsewhere (transparent mode's C++ kernels' answers)."""
    with _lock:
        _clears.append(clear)


def generation() -> int:
    """Read before computing something from dispatch's state; hand it to `store`."""
    return _generation


def store(read_at: int, cache: dict, key: object, value: object) -> bool:
    """cache[key] = value unless `invalidate` ran since generation() returned `read_at` (then `value`
    may hold an older selection and is not kept). A full cache is emptied first."""
    with _lock:
        if _generation != read_at:
            return False
        if len(cache) >= CAP:
            cache.clear()
        cache[key] = value
        return True


def invalidate() -> None:
    """Drop every entry of every cache made by `new()`; what was computed before is never stored."""
    global _generation
    with _lock:
        for clear in _clears:
            clear()
        _generation += 1
