"""Rows in and out: upserts on the unique keys, and conversion between rows and validated models.

Upserts are single INSERT ... ON CONFLICT statements on SQLite and PostgreSQL, so concurrent writers
cannot interleave between a read and a write; other databases get a select-then-write inside the same
transaction. All statements are SQLAlchemy expressions with bound parameters.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Literal

from pydantic import ValidationError
from sqlalchemy import ColumnElement, Connection, and_, insert, select, update
from sqlalchemy.dialects import postgresql, sqlite

from .errors import TuningDBError
from .models import ENV_COLUMNS, KEY_COLUMNS, EnvRow, MeasurementRow, ProblemRow, WinnerRow
from .schemas import EnvIdentity, Measurement, ProblemKey, Winner, config_from_json, config_json, utc

# What to do when the row already exists: replace it, replace it only with a faster one, keep it.
OnConflict = Literal["replace", "faster", "keep"]
_DIALECT_INSERT = {"sqlite": sqlite.insert, "postgresql": postgresql.insert}


def _match(model: type, values: dict[str, Any], cols: tuple[str, ...]) -> ColumnElement[bool]:
    return and_(*[getattr(model, c) == values[c] for c in cols])


def upsert(conn: Connection, model: type, values: dict[str, Any], conflict: tuple[str, ...],
           on_conflict: OnConflict) -> bool:
    """Insert `values`, or resolve a clash on the unique columns `conflict`. True if a row was written."""
    dialect_insert = _DIALECT_INSERT.get(conn.dialect.name)
    if dialect_insert is None:
        return _upsert_generic(conn, model, values, conflict, on_conflict)
    stmt = dialect_insert(model).values(**values)
    if on_conflict == "keep":
        stmt = stmt.on_conflict_do_nothing(index_elements=list(conflict))
    else:
        changed = {c: stmt.excluded[c] for c in values if c not in conflict}
        faster = model.median_ms > stmt.excluded.median_ms if on_conflict == "faster" else None
        stmt = stmt.on_conflict_do_update(index_elements=list(conflict), set_=changed, where=faster)
    # RETURNING says whether a row was written: rowcount is not reliable across drivers here.
    return conn.execute(stmt.returning(model.id)).first() is not None


def _upsert_generic(conn: Connection, model: type, values: dict[str, Any], conflict: tuple[str, ...],
                    on_conflict: OnConflict) -> bool:
    where = _match(model, values, conflict)
    stored = conn.execute(select(model).where(where)).scalar_one_or_none()
    if stored is None:
        conn.execute(insert(model).values(**values))
        return True
    if on_conflict == "keep" or (on_conflict == "faster" and stored.median_ms <= values["median_ms"]):
        return False
    conn.execute(update(model).where(where).values(**{c: v for c, v in values.items() if c not in conflict}))
    return True


def _id_of(conn: Connection, model: type, values: dict[str, Any], cols: tuple[str, ...]) -> int:
    where = _match(model, values, cols)
    found = conn.execute(select(model.id).where(where)).scalar_one_or_none()
    if found is None:
        upsert(conn, model, values, cols, "keep")
        found = conn.execute(select(model.id).where(where)).scalar_one()
    return found


def problem_id(conn: Connection, key: ProblemKey) -> int:
    return _id_of(conn, ProblemRow, key.model_dump(), KEY_COLUMNS)


def env_id(conn: Connection, env: EnvIdentity) -> int:
    return _id_of(conn, EnvRow, {c: getattr(env, c) for c in ENV_COLUMNS}, ENV_COLUMNS)


def naive_utc(dt: datetime) -> datetime:
    """The stored form of a time: UTC without tzinfo (SQLite and TIMESTAMP columns keep no zone)."""
    return utc(dt).replace(tzinfo=None)


def winner_values(winner: Winner, pid: int, eid: int) -> dict[str, Any]:
    return dict(problem_id=pid, env_id=eid, config_json=config_json(winner.config),
                median_ms=winner.median_ms, torch_ms=winner.torch_ms, speedup=winner.speedup,
                source=winner.source, host=winner.host, created_at=naive_utc(winner.created_at))


def measurement_values(m: Measurement, pid: int, eid: int, when: datetime) -> dict[str, Any]:
    return dict(problem_id=pid, env_id=eid, config_json=config_json(m.config), status=m.status,
                median_ms=m.median_ms, p20_ms=m.p20_ms, p80_ms=m.p80_ms, tflops=m.tflops,
                rel_error=m.rel_error, note=m.note, measured_at=naive_utc(when))


def fresh_clause(running: EnvIdentity) -> ColumnElement[bool]:
    """Rows of environments whose triton version and kernel sources match the running ones."""
    return and_(EnvRow.triton_version == running.triton_version, serving_clause(running))


def serving_clause(running: EnvIdentity) -> ColumnElement[bool]:
    """Rows that serve the running code (EnvIdentity.serves): its kernel sources (any family's: a
    family's hash is only ever stored with its own problems), any triton version."""
    return EnvRow.kernel_hash.in_(running.hashes())


def key_of(prow: ProblemRow) -> ProblemKey:
    return ProblemKey(**{c: getattr(prow, c) for c in KEY_COLUMNS})


def env_of(erow: EnvRow) -> EnvIdentity:
    return EnvIdentity(**{c: getattr(erow, c) for c in ENV_COLUMNS})


def winner_of(wrow: WinnerRow, prow: ProblemRow, erow: EnvRow, running: EnvIdentity, where: str) -> Winner:
    try:
        env = env_of(erow)
        return Winner(key=key_of(prow), config=config_from_json(wrow.config_json), median_ms=wrow.median_ms,
                      torch_ms=wrow.torch_ms, speedup=wrow.speedup, source=wrow.source, host=wrow.host,
                      created_at=wrow.created_at, env=env,
                      **Winner.state_for(env, running.for_scales(prow.scales)))
    except ValidationError as e:
        raise TuningDBError(f"{where}: winners row {wrow.id} does not validate: "
                            f"{e.errors()[0]['msg']}") from None


def measurement_of(mrow: MeasurementRow, where: str) -> Measurement:
    try:
        return Measurement(config=config_from_json(mrow.config_json), status=mrow.status,
                           median_ms=mrow.median_ms, p20_ms=mrow.p20_ms, p80_ms=mrow.p80_ms,
                           tflops=mrow.tflops, rel_error=mrow.rel_error, note=mrow.note or "")
    except ValidationError as e:
        raise TuningDBError(f"{where}: measurements row {mrow.id} does not validate: "
                            f"{e.errors()[0]['msg']}") from None
