"""What a command works on, checked the same way for every command: the arch (`--arch`) and the tuning
database (`--db`, else $TRITONBLAS_DB, else the default file). Mistakes exit 2 naming the option (or
$TRITONBLAS_DB) before anything is opened or written; a database that cannot be used exits 1."""

from __future__ import annotations

import os

from .common import fail


def check_arch(arch: str | None) -> str | None:
    """--arch of every command: one of the known archs (tritonblas.arch.ARCHS, the interpreter's
    included), else exit 2 with the list. A typo must not read as "nothing tuned for it"."""
    from ..arch import ARCHS

    if arch is not None and arch not in ARCHS:
        fail(f"error: --arch: unknown arch {arch!r}; known: {', '.join(ARCHS)}")
    return arch


def db_location(url: str | None, *, create: bool = False, default_may_be_missing: bool = False) -> str:
    """--db of every command, checked before anything is opened or written: the database URL (None:
    $TRITONBLAS_DB, else the default file). Exit 2, naming where it came from, for a malformed URL, a
    directory, or a file that does not exist, unless `create` (tune, db import) or, with
    `default_may_be_missing`, --db did not name it (dispatch then reads no database). Creating, the
    file's folder must exist: a typo in a path must not leave a new database in a new folder behind.
    Only the default location's folder is created."""
    from tuning_db.engine import ENV_VAR, default_url, normalize_url, sqlite_path

    given = url or os.environ.get(ENV_VAR, "").strip()
    source = "--db" if url else f"${ENV_VAR}" if given else "default database"
    try:
        full = normalize_url(given) if given else default_url()
    except ValueError as e:
        detail = str(e).removeprefix("db: ")
        if not detail.startswith("not a database"):  # what SQLAlchemy could not parse, in its words
            detail = f"not a database URL or path: {given!r} ({detail})"
        fail(f"error: {source}: {detail}")
    path = sqlite_path(full)
    if path is None or path.is_file():
        return full
    if path.is_dir():
        fail(f"error: {source} {path} is a directory; give a database file")
    if not create:
        if url or not default_may_be_missing:
            fail(f"error: {source}: no tuning database at {path} (tritonblas-tune creates one; --db or "
                 f"${ENV_VAR} chooses another)")
        return full
    if given and not path.parent.is_dir():
        what = "does not exist" if not path.parent.exists() else "is not a directory"
        fail(f"error: {source} {path}: folder {path.parent} {what} (only the default location's folder "
             "is created)")
    return full


def open_db(url: str | None, *, create: bool = False):
    """The tuning database at `url` (db_location), migrated. Only commands that write (tune, db import)
    create one. A database that cannot be used (not a database, locked, newer) exits 1."""
    from tuning_db import TuningDB, TuningDBError

    full = db_location(url, create=create)
    try:
        return TuningDB(full, create=create)
    except TuningDBError as e:
        fail(f"error: {e}", code=1)


def check_db(url: str | None) -> str:
    """For commands that only read through dispatch (explain, bench, warmup): the database they will
    read, described for reports. Dispatch skips a database it cannot use with a warning; a command
    says so at once instead (db_location's exits 2; not a usable tuning database: exit 1). A missing
    default file is fine (nothing tuned yet)."""
    from tuning_db import TuningDB, TuningDBError
    from tuning_db.engine import describe, sqlite_path

    full = db_location(url, default_may_be_missing=True)
    path = sqlite_path(full)
    if path is None or path.exists():
        try:
            TuningDB(full, create=False, migrate=False).close()  # what dispatch does: a reader, no writes
        except TuningDBError as e:
            fail(f"error: {e}", code=1)
    return describe(full)
