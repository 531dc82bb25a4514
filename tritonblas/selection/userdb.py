"""The user's tuning database as dispatch reads it: which one, opened once, dropped when it fails.

Found by the URL given to `dispatch.set_database` or else `tuning_db.default_url()` ($TRITONBLAS_DB, else
the file in the user cache dir); opened on dispatch's first cache miss, read-only (a reader never writes
or waits). A SQLite file that does not exist is skipped without loading SQLAlchemy (a user who never
tuned pays nothing for it). A database that cannot be used (locked, corrupt, read-only, newer schema, a
missing driver) costs one warning per process and is dropped, never a failed matmul.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Literal, TypeVar

from .. import log

T = TypeVar("T")


class UserDB:
    """One process's handle on the user DB; `lock` is dispatch's (it guards the selections too)."""

    def __init__(self, lock: threading.RLock) -> None:
        self.lock = lock
        self.url: str | None = None  # None: tuning_db.default_url() at first use
        self.enabled = True
        self.warned = False
        self.db = None
        self.opened = False

    def choose(self, url: str | None | Literal[False]) -> None:
        """Use `url` from the next open on (None: the default; False: no user DB at all); the warning
        may be given again."""
        with self.lock:
            self.url = url or None
            self.enabled = url is not False
            self.warned = False
            self.close()

    def close(self) -> None:
        """Close it; the next read reopens."""
        with self.lock:
            if self.db is not None:
                self.db.close()
            self.db = None
            self.opened = False

    def _open(self):
        """The DB, opened once; None when disabled, absent or unusable (after one warning)."""
        with self.lock:
            if self.opened:
                return self.db
            self.opened = True
            if not self.enabled:
                return None
            try:
                from tuning_db.location import absent_sqlite_file

                if absent_sqlite_file(self.url):  # no tuning database: SQLAlchemy stays unloaded
                    return None
                from tuning_db import TuningDB, default_url, normalize_url
                from tuning_db.engine import sqlite_path

                url = normalize_url(self.url) if self.url else default_url()
                path = sqlite_path(url)
                if path is not None and not path.exists():
                    return None
                self.db = TuningDB(url, create=False, migrate=False)
                log.get().info("dispatch reads the tuning database %s", _shown(url))
            except Exception as exc:  # any failure to open (even a missing driver) must not fail a matmul
                self._warn(exc)
            return self.db

    def call(self, fn: Callable[[object], T]) -> T | None:
        """fn(db), or None without a usable DB; a DB that fails now is dropped for the process."""
        db = self._open()
        if db is None:
            return None
        from tuning_db import TuningDBError

        try:
            return fn(db)
        except (TuningDBError, OSError) as exc:
            with self.lock:
                self.db = None
            self._warn(exc)
            return None

    def _warn(self, exc: BaseException) -> None:
        if not self.warned:
            self.warned = True
            log.warn(f"tritonblas: the tuning database cannot be used ({exc}); dispatch falls back to "
                     "the shipped configs and the heuristic", stacklevel=5)


def _shown(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
