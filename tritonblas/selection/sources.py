"""Where dispatch's answers are read from, held once per process: the user tuning DB (opened on the first
cache miss through userdb.UserDB), the shipped files under configs/ (read once per arch), the DB's winners
as neighbour candidates, and the configs that failed to compile or run here. Dropping any of it
(`clear_cache`, `set_database`, `set_shipped_dir`, a failed config) is `caches.invalidate()`: the
selections and plans computed from it go too.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from .. import caches, log
from ..arch import DeviceInfo
from ..config import GemmConfig
from ..identity import SCALE_FAMILIES
from ..problem import Problem
from .userdb import UserDB

SHIPPED_DIR = Path(__file__).parent.parent / "configs"  # tritonblas/configs


class State:
    """Process-wide dispatch state: the user DB, shipped files, neighbour indexes, failed configs."""

    def __init__(self) -> None:
        self.lock = threading.RLock()
        self.user_db = UserDB(self.lock)
        self.forget()

    def forget(self) -> None:
        """Close the DB and drop what was read from it or from shipped files; the next miss reopens."""
        self.user_db.close()
        self.shipped: dict[str, dict[tuple, object]] = {}
        self.shipped_kernels: dict[str, dict[tuple, object]] = {}  # the torch winners' kernel fallbacks
        self.db_neighbors: dict[str, list[object]] = {}
        # Configs triton could not compile for a problem on a device (see report_compile_failure).
        self.failed: dict[tuple[Problem, DeviceInfo], set[GemmConfig]] = {}


state = State()


def db_call(fn):
    """A read on the user DB (userdb.UserDB.call): None without a usable one."""
    return state.user_db.call(fn)


def set_database(url: str | None | Literal[False]) -> None:
    """Use the DB at `url` from now on (None: tuning_db.default_url(); False: no user DB at all).
    Clears every cache, so the next dispatch reopens."""
    state.user_db.choose(url)
    clear_cache()


def database_choice() -> str | None | Literal[False]:
    """What set_database chose: a URL or path, None (the default), False (no user DB): grouped
    dispatch reads its user table next to that database (grouped/usertable.py). No lock: torch.compile
    traces grouped dispatch through here and cannot enter one; a read racing set_database is followed
    by set_database's clear_cache anyway."""
    user_db = state.user_db
    return user_db.url if user_db.enabled else False


@contextlib.contextmanager
def using_database(url: str | None | Literal[False]) -> Iterator[None]:
    """set_database for the duration of a with-block; the previous choice is restored after it."""
    with state.lock:
        before = (state.user_db.url, state.user_db.enabled)
    set_database(url)
    try:
        yield
    finally:
        set_database(False if not before[1] else before[0])


def set_shipped_dir(path: str | Path | None) -> None:
    """Read shipped config files from `path` (None: the package's configs/). For tests and packagers."""
    global SHIPPED_DIR
    SHIPPED_DIR = Path(path) if path is not None else Path(__file__).parent.parent / "configs"
    clear_cache()


def clear_cache() -> None:
    """Forget every cached selection, close the DB and drop the shipped files read: the next call
    looks again (e.g. after a tuning run in another process). The one warning stays given."""
    with state.lock:
        state.forget()
        caches.invalidate()


def arch_key(p: Problem) -> tuple:
    """The problem as a shipped file's entries are found (GemmShape.shape_key)."""
    return (p.m, p.n, p.k, p.dtype, p.b, p.out, p.layout, p.bias, p.scales)


def shipped_name(arch: str, scales: str = "none") -> str:
    """The file under configs/ that ships winners of this scale mode: a mode whose kernels are hashed
    apart (identity.SCALE_FAMILIES: block-wise scales) has a file of its own, one kernel hash a file."""
    return f"{scales}/{arch}.json" if scales in SCALE_FAMILIES else f"{arch}.json"


def shipped_table(arch: str) -> dict[tuple, object]:
    """Entries of configs/<arch>.json and configs/block/<arch>.json (the block-scaled kernel's winners:
    a kernel hash of their own) by (m, n, k, dtypes, layout, bias, scales); loaded once per arch."""
    with state.lock:
        if arch in state.shipped:
            return state.shipped[arch]
        table: dict[tuple, object] = {}
        kernels: dict[tuple, object] = {}
        for path in (SHIPPED_DIR / shipped_name(arch, scales) for scales in ("none", *SCALE_FAMILIES)):
            if path.is_file():
                _read_shipped(path, arch, table, kernels)
        state.shipped[arch] = table
        state.shipped_kernels[arch] = kernels
        return table


def _read_shipped(path: Path, arch: str, table: dict[tuple, object], kernels: dict[tuple, object]) -> None:
    try:
        from tuning_db.exchange import load_config_file

        cfg = load_config_file(path)
        # One entry per problem: the running triton version's, else one of another version
        # (same kernels); stale entries (another kernel hash) are a miss, as in the DB.
        if cfg.header.arch == arch:
            for w, kernel in cfg.serving().values():
                table[w.key.arch_key()[1:]] = w
                if kernel is not None:
                    kernels[w.key.arch_key()[1:]] = kernel
    except Exception as exc:  # a broken shipped file must not break matmul
        log.warn(f"tritonblas: shipped config file {path} cannot be read ({exc}); it is ignored",
                 stacklevel=5)


def db_neighbors(arch: str) -> list[object]:
    with state.lock:
        if arch not in state.db_neighbors:
            found = db_call(lambda db: db.winners(arch=arch, include_stale=False))
            state.db_neighbors[arch] = list(found or [])
        return state.db_neighbors[arch]


def shipped_kernel(arch: str, problem: Problem) -> object | None:
    """The kernel fallback shipped beside a torch winner of `problem` (None: none)."""
    shipped_table(arch)
    return state.shipped_kernels.get(arch, {}).get(arch_key(problem))


def failed_configs(problem: Problem, device: DeviceInfo) -> set[GemmConfig]:
    """The configs that failed to compile or run for `problem` on `device` in this process."""
    return state.failed.get((problem, device), set())


def mark_failed(problem: Problem, device: DeviceInfo, config: GemmConfig) -> None:
    """`config` is never selected again for `problem` on `device` in this process."""
    with state.lock:
        state.failed.setdefault((problem, device), set()).add(config)
        caches.invalidate()
