"""Schema migrations, recorded in the table `tuning_schema_migrations` (one row per applied step).

Opening a database applies the missing steps in one transaction (under the write lock, so processes
that open a new file together do not race). A database whose recorded version is newer than this
code's LATEST is refused before anything is written. Each step's tables are frozen here as they were
at that step: the ORM models describe only the latest schema.

SQLite cannot drop or change a table's constraints: step 3 rebuilds `problems` (a copy with the new
key, the old table dropped, the copy renamed), as SQLite's own ALTER TABLE procedure says, with foreign
keys off for the transaction so that dropping the old table does not cascade into the winners and
measurements that refer to its ids (the ids are copied unchanged; `foreign_key_check` runs before the
commit).
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timezone

from sqlalchemy import (
    Column,
    Connection,
    DateTime,
    Double,
    Engine,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Table,
    UniqueConstraint,
    func,
    insert,
    inspect,
    select,
)
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.schema import AddConstraint, CreateColumn, DropConstraint, ExecutableDDLElement

from .engine import WRITE_OPTION, translate_errors
from .errors import SchemaTooNewError, TuningDBError
from .models import ARCH_LOOKUP_COLUMNS, ENV_COLUMNS, KEY_COLUMNS, SchemaMigration

MIGRATIONS_TABLE = SchemaMigration.__tablename__
OWN_TABLES = frozenset({MIGRATIONS_TABLE, "environments", "problems", "measurements", "winners"})
# pg_advisory_xact_lock key: serializes migrations of one PostgreSQL database ("tbDB" in ASCII).
_PG_LOCK_KEY = 0x74624442
# The problems table's key before migration 3 added `scales` (steps 1 and 2 are frozen with it).
_V1_KEY_COLUMNS = ("m", "n", "k", "a_dtype", "b_dtype", "out_dtype", "layout", "bias", "arch", "device_name",
                   "sm_count")
_KEY_TYPES = {"a_dtype": String(8), "b_dtype": String(8), "out_dtype": String(8), "layout": String(2),
              "bias": String(8), "scales": String(8), "arch": String(32), "device_name": String(128)}


class AddColumn(ExecutableDDLElement):
    """ALTER TABLE ... ADD COLUMN, compiled per dialect from a Column (SQLAlchemy Core has no such op)."""

    def __init__(self, table: str, column: Column) -> None:
        self.table = table
        self.column = column


@compiles(AddColumn)
def _compile_add_column(element: AddColumn, compiler, **kw) -> str:
    table = compiler.preparer.quote(element.table)
    return f"ALTER TABLE {table} ADD COLUMN {compiler.process(CreateColumn(element.column), **kw)}"


def _v1_initial(conn: Connection) -> None:
    md = MetaData()
    Table(MIGRATIONS_TABLE, md, Column("version", Integer, primary_key=True, autoincrement=False),
          Column("name", String(128), nullable=False), Column("applied_at", DateTime, nullable=False))
    Table("environments", md, Column("id", Integer, primary_key=True),
          *[Column(c, String(64), nullable=False) for c in ENV_COLUMNS],
          UniqueConstraint(*ENV_COLUMNS, name="uq_environments_identity"),
          Index("ix_environments_fresh", "triton_version", "kernel_hash"))
    _problems_table(md, "problems", _V1_KEY_COLUMNS)

    def refs() -> list[Column]:
        return [Column("problem_id", ForeignKey("problems.id", ondelete="CASCADE"), nullable=False),
                Column("env_id", ForeignKey("environments.id", ondelete="CASCADE"), nullable=False),
                Column("config_json", String(512), nullable=False)]

    Table("measurements", md, Column("id", Integer, primary_key=True), *refs(),
          Column("status", String(32), nullable=False),
          *[Column(c, Double) for c in ("median_ms", "p20_ms", "p80_ms", "tflops", "rel_error")],
          UniqueConstraint("problem_id", "env_id", "config_json", name="uq_measurements_cand"))
    Table("winners", md, Column("id", Integer, primary_key=True), *refs(),
          Column("median_ms", Double, nullable=False), Column("torch_ms", Double),
          Column("speedup", Double), Column("source", String(16), nullable=False),
          Column("host", String(255), nullable=False), Column("created_at", DateTime, nullable=False),
          UniqueConstraint("problem_id", "env_id", name="uq_winners_problem_env"))
    md.create_all(conn)


def _v2_notes_and_lookup(conn: Connection) -> None:
    conn.execute(AddColumn("measurements", Column("note", String(512), nullable=False, server_default="")))
    conn.execute(AddColumn("measurements", Column("measured_at", DateTime, nullable=True)))
    problems = Table("problems", MetaData(), *[Column(c) for c in _V1_KEY_COLUMNS])
    Index("ix_problems_arch_lookup", *[problems.c[c] for c in ("arch", "m", "n", "k", "a_dtype",
                                                              "b_dtype", "out_dtype", "layout",
                                                              "bias")]).create(conn)


def _problems_table(md: MetaData, name: str, key: tuple[str, ...]) -> Table:
    """The problems table with key columns `key` (their unique constraint holds them all)."""
    def column(c: str) -> Column:
        default = {"server_default": "none"} if c == "scales" else {}
        return Column(c, _KEY_TYPES.get(c, Integer), nullable=False, **default)

    return Table(name, md, Column("id", Integer, primary_key=True), *[column(c) for c in key],
                 UniqueConstraint(*key, name="uq_problems_key"))


def _lookup_index(problems: Table) -> Index:
    return Index("ix_problems_arch_lookup", *[problems.c[c] for c in ARCH_LOOKUP_COLUMNS])


def _v3_scales(conn: Connection) -> None:
    """`problems.scales` (the scale mode of a quantized problem), "none" on every existing row, in the
    unique key and the lookup index."""
    md = MetaData()
    if conn.dialect.name == "sqlite":  # rebuilt (see the module docstring); migrate() turned keys off
        old = Table("problems", md, Column("id"), *[Column(c) for c in _V1_KEY_COLUMNS])
        new = _problems_table(md, "problems__v3", KEY_COLUMNS)
        new.create(conn)
        copied = ("id", *_V1_KEY_COLUMNS)
        conn.execute(insert(new).from_select(copied, select(*[old.c[c] for c in copied])))
        old.drop(conn)  # its lookup index goes with it
        conn.exec_driver_sql('ALTER TABLE "problems__v3" RENAME TO "problems"')
        _lookup_index(_problems_table(MetaData(), "problems", KEY_COLUMNS)).create(conn)
        return
    conn.execute(AddColumn("problems", Column("scales", String(8), nullable=False, server_default="none")))
    old = _problems_table(md, "problems", _V1_KEY_COLUMNS)
    Index("ix_problems_arch_lookup", *[old.c[c] for c in ARCH_LOOKUP_COLUMNS if c != "scales"]).drop(conn)
    conn.execute(DropConstraint(next(c for c in old.constraints if isinstance(c, UniqueConstraint))))
    new = _problems_table(MetaData(), "problems", KEY_COLUMNS)
    conn.execute(AddConstraint(next(c for c in new.constraints if isinstance(c, UniqueConstraint))))
    _lookup_index(new).create(conn)


Step = tuple[int, str, Callable[[Connection], None]]
STEPS: tuple[Step, ...] = (
    (1, "initial schema", _v1_initial),
    (2, "measurement notes and times; device-independent lookup index", _v2_notes_and_lookup),
    (3, "problem scale mode (quantized GEMMs) in the key", _v3_scales),
)
LATEST = STEPS[-1][0]


def current_version(conn: Connection, where: str) -> int:
    """The recorded schema version; 0 for a database without tuning tables."""
    names = set(inspect(conn).get_table_names())
    if MIGRATIONS_TABLE not in names:
        ours = sorted(names & OWN_TABLES)
        foreign = conn.dialect.name == "sqlite" and names
        if ours or foreign:
            raise TuningDBError(f"{where}: has tables ({', '.join(sorted(names)[:5])}) but no "
                                f"{MIGRATIONS_TABLE} table: not a tuning database; left unchanged")
        return 0
    version = conn.execute(select(func.max(SchemaMigration.version))).scalar()
    return int(version or 0)


def refuse_newer(version: int, where: str) -> None:
    if version > LATEST:
        raise SchemaTooNewError(f"{where}: schema version {version} was written by a newer tritonblas "
                                f"(this one reads up to {LATEST}); upgrade tritonblas or use another "
                                "--db. The database was left unchanged")


def migrate(engine: Engine, where: str, target: int = LATEST) -> int:
    """Apply the steps above the recorded version, up to `target`; returns the version reached."""
    if not 1 <= target <= LATEST:
        raise ValueError(f"target: schema version must be in 1..{LATEST}, got {target}")
    with translate_errors(where), engine.connect() as conn:
        sqlite = conn.dialect.name == "sqlite"
        if sqlite:  # outside the transaction, where SQLite takes it (see the module docstring)
            conn.connection.driver_connection.execute("PRAGMA foreign_keys=OFF")
        try:
            with conn.execution_options(**{WRITE_OPTION: True}).begin():
                return _apply(conn, where, target, sqlite)
        finally:
            if sqlite:
                conn.connection.driver_connection.execute("PRAGMA foreign_keys=ON")


def _apply(conn: Connection, where: str, target: int, sqlite: bool) -> int:
    if conn.dialect.name == "postgresql":
        conn.execute(select(func.pg_advisory_xact_lock(_PG_LOCK_KEY)))
    version = current_version(conn, where)
    refuse_newer(version, where)
    for number, name, step in STEPS:
        if version < number <= target:
            step(conn)
            conn.execute(insert(SchemaMigration).values(
                version=number, name=name, applied_at=datetime.now(timezone.utc).replace(tzinfo=None)))
            version = number
    if sqlite and conn.exec_driver_sql("PRAGMA foreign_key_check").first() is not None:
        raise TuningDBError(f"{where}: a migration left rows referring to missing ones; rolled back")
    return version
