"""Where the default database file is, without SQLAlchemy: dispatch asks this on a GEMM's first call,
and importing SQLAlchemy (0.3 s of a 0.9 s first call on the CI machine, 2026-11-30) only to learn that
no tuning database exists would put that cost on every process of a user who never tuned."""

from __future__ import annotations

import os
from pathlib import Path

ENV_VAR = "TRITONBLAS_DB"


def default_path() -> Path:
    import platformdirs

    return Path(platformdirs.user_cache_dir("tritonblas")) / "tuning.sqlite"


def absent_sqlite_file(url_or_path: str | None) -> bool:
    """True when `url_or_path` (None: $TRITONBLAS_DB, else the default file) names an SQLite file by a
    plain path and that file does not exist. URLs are left to SQLAlchemy (False: not known absent)."""
    chosen = url_or_path if url_or_path is not None else os.environ.get(ENV_VAR, "").strip()
    if "://" in chosen:
        return False
    path = Path(chosen).expanduser() if chosen else default_path()
    return not path.exists()
