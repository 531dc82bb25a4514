"""Where the database is, how it is opened, and how driver errors become TuningDBErrors.

SQLite files are opened in WAL mode (readers never wait for a writer) with a busy timeout; write
transactions start with BEGIN IMMEDIATE, so two writers queue on the lock instead of one failing when
it upgrades a read lock to a write lock halfway through. Only SQLite opens a database file: closing any
descriptor of it would drop the locks of the process's connections (check_sqlite_path).
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from sqlalchemy import Engine, create_engine, event
from sqlalchemy import exc as sa_exc
from sqlalchemy.engine import URL, make_url

from .errors import (
    CorruptDatabaseError,
    DatabaseLockedError,
    ReadOnlyDatabaseError,
    TuningDBError,
)
from .location import ENV_VAR, default_path

BUSY_TIMEOUT_S = 30.0
# Files SQLite keeps next to a database: the write-ahead log, its index, the rollback journal.
_SIDE_FILES = ("-wal", "-shm", "-journal")
# Execution option that marks a write transaction (BEGIN IMMEDIATE on SQLite).
WRITE_OPTION = "tuning_db_write"


def default_url() -> str:
    """$TRITONBLAS_DB (a URL or a file path) if set, else an SQLite file in the user cache dir."""
    chosen = os.environ.get(ENV_VAR, "").strip()
    return normalize_url(chosen) if chosen else normalize_url(str(default_path()))


def normalize_url(url_or_path: str) -> str:
    """A SQLAlchemy URL; a bare path means an SQLite file. `postgresql://` without a driver means psycopg
    (3), the driver the `[postgres]` extra installs (SQLAlchemy's own default would be psycopg2)."""
    if "://" not in url_or_path:
        path = Path(url_or_path).expanduser().absolute()
        return URL.create("sqlite", database=str(path)).render_as_string()
    try:
        url = make_url(url_or_path)
    except sa_exc.ArgumentError as e:
        raise ValueError(f"db: not a database URL or path: {url_or_path!r}") from e
    if url.drivername in ("postgresql", "postgres"):
        url = url.set(drivername="postgresql+psycopg")
    return url.render_as_string(hide_password=False)


def sqlite_path(url: str) -> Path | None:
    """The file of an SQLite URL; None for other databases and in-memory SQLite."""
    u = make_url(url)
    if u.get_backend_name() != "sqlite" or u.database in (None, "", ":memory:"):
        return None
    return Path(u.database)


def describe(url: str) -> str:
    """What error messages call the database: the file for SQLite, the URL without password otherwise."""
    path = sqlite_path(url)
    return str(path) if path is not None else make_url(url).render_as_string(hide_password=True)


def check_sqlite_path(path: Path) -> None:
    """Refuse a directory, and make the directory of a file to be created. Only stat() and mkdir():
    this never opens the file. Whether it is an SQLite database is for SQLite to say
    (check_is_sqlite): a process that closes any descriptor of the file loses every POSIX lock it
    holds on it, including those of its other SQLite connections (the dispatch reader next to a
    tuner's TuningDB), after which another process may checkpoint and reset the WAL under them
    (sqlite.org/howtocorrupt.html, 2.2)."""
    if path.is_dir():
        raise TuningDBError(f"{path}: is a directory, not a tuning database file")
    if path.exists():
        return
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ReadOnlyDatabaseError(f"{path}: cannot create the tuning database's directory: "
                                    f"{e.strerror or e}") from e


def check_is_sqlite(engine: Engine, where: str) -> None:
    """Through SQLite: read the file's header (PRAGMA schema_version reads page 1). A file that is not
    an SQLite database fails with SQLITE_NOTADB before anything is written (as_tuning_error makes it
    a CorruptDatabaseError); an empty or new file is an empty database."""
    with translate_errors(where), engine.connect() as conn:
        conn.exec_driver_sql("PRAGMA schema_version").scalar()


def database_files(url: str) -> list[Path]:
    """The SQLite file of `url` and the files SQLite keeps next to it; [] for other databases."""
    path = sqlite_path(url)
    return [] if path is None else [path, *(Path(f"{path}{s}") for s in _SIDE_FILES)]


def refuse_database_file(path: Path, url: str, what: str) -> None:
    """TuningDBError when `path` is the database of `url` (or its -wal/-shm/-journal): writing or even
    reading it with open() in this process would break SQLite's locks (see check_sqlite_path), and
    writing it would destroy the database. Compared by stat(), never by opening."""
    for db_file in database_files(url):
        try:
            same = os.path.realpath(path) == os.path.realpath(db_file) or path.samefile(db_file)
        except OSError:  # either is missing (or cannot be looked at): not the same file
            same = False
        if same:
            raise TuningDBError(f"{path}: is the tuning database {describe(url)} itself (or one of its "
                                f"files), not a {what}")


def _sqlite_hooks(engine: Engine) -> None:
    @event.listens_for(engine, "connect")
    def _connect(dbapi_conn, _record) -> None:
        # pysqlite's own transaction handling would defer BEGIN; we issue BEGIN ourselves below.
        dbapi_conn.isolation_level = None
        cur = dbapi_conn.cursor()
        cur.execute("PRAGMA foreign_keys=ON")
        # In WAL mode NORMAL cannot corrupt the file; a crash of the machine (not of a process) may
        # lose the last commits. That suits a cache of measurements, and spares an fsync per commit.
        cur.execute("PRAGMA synchronous=NORMAL")
        cur.close()

    @event.listens_for(engine, "begin")
    def _begin(conn) -> None:
        write = conn.get_execution_options().get(WRITE_OPTION, False)
        conn.exec_driver_sql("BEGIN IMMEDIATE" if write else "BEGIN")


def make_engine(url: str) -> Engine:
    where = describe(url)
    backend = make_url(url).get_backend_name()
    try:
        if backend == "sqlite":
            engine = create_engine(url, connect_args={"timeout": BUSY_TIMEOUT_S})
            _sqlite_hooks(engine)
            return engine
        return create_engine(url, pool_pre_ping=True)
    except (sa_exc.ArgumentError, sa_exc.NoSuchModuleError, ImportError) as e:
        raise TuningDBError(f"{where}: cannot open database: {e}") from e


def enable_wal(engine: Engine, where: str) -> None:
    """Switch an SQLite file to WAL (persistent in the file). Outside any transaction, as SQLite asks.

    The switch needs the file to itself and SQLite does not wait for that on its own (no busy handler
    here), so processes that open a new file together retry until the busy timeout."""
    deadline = time.monotonic() + BUSY_TIMEOUT_S
    delay = 0.002
    while True:
        with translate_errors(where):
            raw = engine.raw_connection()
        try:
            cur = raw.cursor()
            if str(cur.execute("PRAGMA journal_mode").fetchone()[0]).lower() != "wal":
                cur.execute("PRAGMA journal_mode=WAL")
            return
        except engine.dialect.loaded_dbapi.Error as e:
            if "locked" not in str(e).lower() or time.monotonic() > deadline:
                raise as_tuning_error(e, where) from e
        finally:
            raw.close()
        time.sleep(delay)
        delay = min(2 * delay, 0.05)


def is_retryable(err: sa_exc.DBAPIError) -> bool:
    """PostgreSQL deadlock or serialization failure: the whole transaction may simply run again."""
    return getattr(err.orig, "sqlstate", None) in ("40P01", "40001")


@contextmanager
def translate_errors(where: str) -> Iterator[None]:
    """Driver exceptions -> TuningDBError subclasses whose message names the database."""
    try:
        yield
    except sa_exc.DBAPIError as e:
        raise as_tuning_error(e.orig, where) from e


def as_tuning_error(orig: BaseException, where: str) -> TuningDBError:
    """The TuningDBError for a driver exception (the DBAPI's own, not SQLAlchemy's wrapper)."""
    detail = str(orig).strip().splitlines()[0] if str(orig).strip() else type(orig).__name__
    low = detail.lower()
    if getattr(orig, "sqlite_errorname", "") == "SQLITE_NOTADB" or "file is not a database" in low:
        return CorruptDatabaseError(f"{where}: not an SQLite database (SQLite does not recognize its "
                                    "header); the file was left unchanged")
    if "locked" in low or "busy" in low:
        return DatabaseLockedError(f"{where}: database is locked: another process held the write lock "
                                   f"for more than {BUSY_TIMEOUT_S:.0f} s ({detail})")
    if "readonly" in low or "read-only" in low or "read only" in low:
        return ReadOnlyDatabaseError(f"{where}: database is read-only ({detail})")
    if "not a database" in low or "malformed" in low or "corrupt" in low:
        return CorruptDatabaseError(f"{where}: not a tuning database, or a damaged one ({detail}); "
                                    "the file was left unchanged")
    if "unable to open" in low:
        return TuningDBError(f"{where}: cannot open database file ({detail})")
    return TuningDBError(f"{where}: database error: {detail}")
