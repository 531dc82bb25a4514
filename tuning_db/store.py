"""TuningDB: the repository the tuner writes and dispatch reads.

Opening validates the database (a non-database file, or a newer schema, is refused before anything is
written), switches SQLite to WAL and applies missing migrations. Every public write is one transaction.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, Literal, TypeVar

from sqlalchemy import Connection, case, delete, func, select
from sqlalchemy import exc as sa_exc
from sqlalchemy.orm import Session

from . import engine as eng
from . import rows
from .errors import TuningDBError
from .migrations import LATEST, current_version, migrate, refuse_newer
from .models import ARCH_LOOKUP_COLUMNS, EnvRow, MeasurementRow, ProblemRow, WinnerRow
from .schemas import EnvIdentity, Measurement, ProblemKey, Winner

T = TypeVar("T")
ImportPolicy = Literal["faster", "file", "db"]
_POLICY_CONFLICT: dict[str, rows.OnConflict] = {"faster": "faster", "file": "replace", "db": "keep"}
_WRITE_ATTEMPTS = 5


class TuningDB:
    """A tuning database at `url` (SQLAlchemy URL or SQLite file path; None: $TRITONBLAS_DB, else the
    SQLite file in the user cache dir). Readers see only committed data and never wait for writers.
    create=False refuses a missing SQLite file instead of creating it (for commands that only read)."""

    def __init__(self, url: str | None = None, *, create: bool = True, migrate: bool = True) -> None:
        self.url = eng.normalize_url(url) if url else eng.default_url()
        self.where = eng.describe(self.url)
        path = eng.sqlite_path(self.url)
        if path is not None:
            if not create and not path.exists():
                raise TuningDBError(f"{path}: no tuning database here (tritonblas-tune creates one; "
                                    "--db or $TRITONBLAS_DB chooses another)")
            eng.check_sqlite_path(path)  # stat() only: SQLite itself says whether it is a database
        self._engine = eng.make_engine(self.url)
        self._may_migrate = migrate
        try:
            self._open(path is not None)
        except BaseException:
            self._engine.dispose()
            raise

    def _open(self, is_sqlite: bool) -> None:
        if is_sqlite:
            eng.check_is_sqlite(self._engine, self.where)
        version = self._read(lambda conn: current_version(conn, self.where))
        refuse_newer(version, self.where)
        if not self._may_migrate:
            # A reader (dispatch) never writes: switching to WAL or upgrading takes the write lock and
            # could wait out the busy timeout behind a tuner. Files this package creates are WAL already.
            if version < LATEST:
                raise TuningDBError(f"{self.where}: schema version {version} is older than {LATEST}; "
                                    "opening it with tritonblas-tune or `tritonblas db stats` upgrades it")
            return
        if is_sqlite:
            eng.enable_wal(self._engine, self.where)
        if version < LATEST:
            migrate(self._engine, self.where)

    def __enter__(self) -> TuningDB:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"TuningDB({self.where!r})"

    def close(self) -> None:
        self._engine.dispose()

    def _read(self, fn: Callable[[Connection], T]) -> T:
        with eng.translate_errors(self.where), self._engine.connect() as conn:
            return fn(conn)

    def _write(self, fn: Callable[[Connection], T]) -> T:
        writer = self._engine.execution_options(**{eng.WRITE_OPTION: True})
        attempts = 0
        while True:
            try:
                with writer.begin() as conn:
                    return fn(conn)
            except sa_exc.DBAPIError as e:
                attempts += 1
                if not (eng.is_retryable(e) and attempts < _WRITE_ATTEMPTS):
                    raise eng.as_tuning_error(e.orig, self.where) from e

    def schema_version(self) -> int:
        return self._read(lambda conn: current_version(conn, self.where))

    def record_measurements(self, key: ProblemKey, env: EnvIdentity,
                            measurements: Iterable[Measurement]) -> None:
        """Store timed candidates; a config measured again in the same environment is replaced."""
        items = sorted(measurements, key=lambda m: rows.config_json(m.config))
        now = datetime.now(timezone.utc)

        def work(conn: Connection) -> None:
            pid, eid = rows.problem_id(conn, key), rows.env_id(conn, env)
            for m in items:
                rows.upsert(conn, MeasurementRow, rows.measurement_values(m, pid, eid, now),
                            ("problem_id", "env_id", "config_json"), "replace")

        self._write(work)

    def upsert_winner(self, winner: Winner) -> bool:
        """Store `winner` unless the same key and environment already has an equal or faster one."""
        return self._write(lambda conn: self._put_winner(conn, winner, "faster"))

    @staticmethod
    def _put_winner(conn: Connection, winner: Winner, on_conflict: rows.OnConflict) -> bool:
        pid, eid = rows.problem_id(conn, winner.key), rows.env_id(conn, winner.env)
        return rows.upsert(conn, WinnerRow, rows.winner_values(winner, pid, eid),
                           ("problem_id", "env_id"), on_conflict)

    def import_winners(self, winners: list[Winner], policy: ImportPolicy = "faster") -> dict[str, int]:
        """All or nothing: one transaction. policy: faster (keep the faster), file (file wins), db
        (stored rows win). Returns {"written": n, "kept": n}."""
        if policy not in _POLICY_CONFLICT:
            raise ValueError(f"policy: must be one of {', '.join(_POLICY_CONFLICT)}, got {policy!r}")
        ordered = sorted(winners, key=lambda w: (w.key.sort_key(), tuple(w.env.model_dump().values())))

        def work(conn: Connection) -> dict[str, int]:
            written = sum(self._put_winner(conn, w, _POLICY_CONFLICT[policy]) for w in ordered)
            return {"written": written, "kept": len(ordered) - written}

        return self._write(work)

    def _winner_rows(self, conn: Connection, *where: Any, order: tuple = ()) -> list[tuple]:
        stmt = (select(WinnerRow, ProblemRow, EnvRow).join(ProblemRow, WinnerRow.problem_id == ProblemRow.id)
                .join(EnvRow, WinnerRow.env_id == EnvRow.id).where(*where).order_by(*order))
        # A Session over the same connection: ORM entities come back as objects, not flat columns.
        return list(Session(bind=conn).execute(stmt))

    def get_winner(self, key: ProblemKey, env: EnvIdentity | None = None) -> Winner | None:
        """The fastest fresh winner for exactly this key (device included); None on a miss."""
        running = (env or EnvIdentity.current()).for_scales(key.scales)
        match = [getattr(ProblemRow, c) == v for c, v in key.model_dump().items()]
        found = self._read(lambda conn: self._winner_rows(
            conn, *match, rows.fresh_clause(running),
            order=(WinnerRow.median_ms, WinnerRow.created_at.desc())))
        return rows.winner_of(*found[0], running, self.where) if found else None

    def lookup(self, key: ProblemKey, env: EnvIdentity | None = None) -> Winner | None:
        """What dispatch uses for `key`: like get_winner, but any device of the key's arch serves when
        this device has no winner (a config tuned on one sm_90 part runs well on another), and so does
        a winner of another triton version for the same kernels (`Winner.other_triton`). A winner of
        the running triton version comes first, then the exact device, then the fastest."""
        running = (env or EnvIdentity.current()).for_scales(key.scales)
        values = key.model_dump()
        same_triton = case((EnvRow.triton_version == running.triton_version, 0), else_=1)
        same_device = case(((ProblemRow.device_name == key.device_name)
                            & (ProblemRow.sm_count == key.sm_count), 0), else_=1)
        same_key = [getattr(ProblemRow, c) == values[c] for c in ARCH_LOOKUP_COLUMNS]
        found = self._read(lambda conn: self._winner_rows(
            conn, *same_key, rows.serving_clause(running),
            order=(same_triton, same_device, WinnerRow.median_ms, ProblemRow.device_name,
                   EnvRow.triton_version, WinnerRow.created_at.desc())))
        return rows.winner_of(*found[0], running, self.where) if found else None

    def has_fresh_winner(self, key: ProblemKey, env: EnvIdentity | None = None) -> bool:
        return self.get_winner(key, env) is not None

    def winners(self, arch: str | None = None, include_stale: bool = True,
                env: EnvIdentity | None = None) -> list[Winner]:
        """Winners sorted by key, then environment; `stale` and `other_triton` are set against `env`
        (default: running). include_stale=False leaves out the stale ones (other kernel sources) only:
        winners of another triton version serve, and stay."""
        running = env or EnvIdentity.current()
        where = [] if arch is None else [ProblemRow.arch == arch]
        if not include_stale:
            where.append(rows.serving_clause(running))
        order = (*[getattr(ProblemRow, c) for c in ARCH_LOOKUP_COLUMNS], ProblemRow.device_name,
                 ProblemRow.sm_count, EnvRow.triton_version, EnvRow.torch_version, EnvRow.kernel_hash,
                 EnvRow.timing_protocol)
        found = self._read(lambda conn: self._winner_rows(conn, *where, order=order))
        return [rows.winner_of(*r, running, self.where) for r in found]

    def measurements(self, key: ProblemKey, env: EnvIdentity | None = None) -> list[Measurement]:
        """Candidates measured for `key` in environments fresh for `env`: ok ones fastest first, then
        failures."""
        running = (env or EnvIdentity.current()).for_scales(key.scales)
        stmt = (select(MeasurementRow).join(ProblemRow, MeasurementRow.problem_id == ProblemRow.id)
                .join(EnvRow, MeasurementRow.env_id == EnvRow.id)
                .where(*[getattr(ProblemRow, c) == v for c, v in key.model_dump().items()],
                       rows.fresh_clause(running))
                .order_by(case((MeasurementRow.status == "ok", 0), else_=1), MeasurementRow.median_ms,
                          MeasurementRow.config_json, MeasurementRow.id))
        found = self._read(lambda conn: list(Session(bind=conn).execute(stmt).scalars()))
        return [rows.measurement_of(r, self.where) for r in found]

    def prune(self, env: EnvIdentity | None = None) -> int:
        """Delete winners and measurements of stale environments (other kernel sources), and what then
        refers to nothing; returns how many winners and measurements were removed. Rows of another
        triton version with the same kernels serve, and are kept."""
        running = env or EnvIdentity.current()
        stale_envs = select(EnvRow.id).where(~rows.serving_clause(running))

        def work(conn: Connection) -> int:
            removed = conn.execute(delete(WinnerRow).where(WinnerRow.env_id.in_(stale_envs))).rowcount
            removed += conn.execute(delete(MeasurementRow)
                                    .where(MeasurementRow.env_id.in_(stale_envs))).rowcount
            conn.execute(delete(EnvRow).where(EnvRow.id.in_(stale_envs)))
            used = select(WinnerRow.problem_id).union(select(MeasurementRow.problem_id))
            conn.execute(delete(ProblemRow).where(ProblemRow.id.not_in(used)))
            return removed

        return self._write(work)

    def stats(self, env: EnvIdentity | None = None) -> dict[str, Any]:
        running = env or EnvIdentity.current()

        def count(conn: Connection, model: type, *where: Any) -> int:
            return conn.execute(select(func.count()).select_from(model).where(*where)).scalar_one()

        def winners_of(clause: Any) -> Any:
            return WinnerRow.env_id.in_(select(EnvRow.id).where(clause))

        def work(conn: Connection) -> dict[str, Any]:
            fresh = count(conn, WinnerRow, winners_of(rows.fresh_clause(running)))
            serving = count(conn, WinnerRow, winners_of(rows.serving_clause(running)))
            total = count(conn, WinnerRow)
            by_status = conn.execute(select(MeasurementRow.status, func.count())
                                     .group_by(MeasurementRow.status).order_by(MeasurementRow.status))
            by_arch = conn.execute(select(ProblemRow.arch, func.count()).join(
                WinnerRow, WinnerRow.problem_id == ProblemRow.id).group_by(ProblemRow.arch)
                .order_by(ProblemRow.arch))
            return {"database": self.where, "db_schema_version": current_version(conn, self.where),
                    "problems": count(conn, ProblemRow), "environments": count(conn, EnvRow),
                    "measurements": count(conn, MeasurementRow), "measurements_by_status": dict(
                        by_status.all()), "winners": total, "fresh_winners": fresh,
                    "other_triton_winners": serving - fresh, "stale_winners": total - serving,
                    "winners_by_arch": dict(by_arch.all())}

        return self._read(work)
