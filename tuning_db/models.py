"""SQLAlchemy 2.0 ORM models: the current schema. migrations.py builds it step by step; a test checks
that the migrated database and these models agree, table by table and column by column.

Problems and environments are rows of their own (the unique constraints hold the full keys), so a
measurement or a winner is a pair of small foreign keys plus its numbers.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    DateTime,
    Double,
    ForeignKey,
    Index,
    Integer,
    String,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

KEY_COLUMNS = ("m", "n", "k", "a_dtype", "b_dtype", "out_dtype", "layout", "bias", "scales", "arch",
               "device_name", "sm_count")
# Dispatch's device-independent lookup (TuningDB.lookup): the key less the device.
ARCH_LOOKUP_COLUMNS = ("arch", "m", "n", "k", "a_dtype", "b_dtype", "out_dtype", "layout", "bias", "scales")
ENV_COLUMNS = ("triton_version", "torch_version", "kernel_hash", "timing_protocol")


class Base(DeclarativeBase):
    pass


class SchemaMigration(Base):
    __tablename__ = "tuning_schema_migrations"

    version: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=False)
    name: Mapped[str] = mapped_column(String(128))
    applied_at: Mapped[datetime] = mapped_column(DateTime)


class EnvRow(Base):
    __tablename__ = "environments"
    __table_args__ = (
        UniqueConstraint(*ENV_COLUMNS, name="uq_environments_identity"),
        Index("ix_environments_fresh", "triton_version", "kernel_hash"),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    triton_version: Mapped[str] = mapped_column(String(64))
    torch_version: Mapped[str] = mapped_column(String(64))
    kernel_hash: Mapped[str] = mapped_column(String(64))
    timing_protocol: Mapped[str] = mapped_column(String(64))


class ProblemRow(Base):
    __tablename__ = "problems"
    __table_args__ = (
        UniqueConstraint(*KEY_COLUMNS, name="uq_problems_key"),
        Index("ix_problems_arch_lookup", *ARCH_LOOKUP_COLUMNS),
    )

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    m: Mapped[int] = mapped_column(Integer)
    n: Mapped[int] = mapped_column(Integer)
    k: Mapped[int] = mapped_column(Integer)
    a_dtype: Mapped[str] = mapped_column(String(8))
    b_dtype: Mapped[str] = mapped_column(String(8))
    out_dtype: Mapped[str] = mapped_column(String(8))
    layout: Mapped[str] = mapped_column(String(2))
    bias: Mapped[str] = mapped_column(String(8))
    # Added by migration 3: the scale mode of a quantized problem; "none" for plain GEMMs (older rows).
    scales: Mapped[str] = mapped_column(String(8), default="none", server_default="none")
    arch: Mapped[str] = mapped_column(String(32))
    device_name: Mapped[str] = mapped_column(String(128))
    sm_count: Mapped[int] = mapped_column(Integer)


class MeasurementRow(Base):
    __tablename__ = "measurements"
    __table_args__ = (UniqueConstraint("problem_id", "env_id", "config_json", name="uq_measurements_cand"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id", ondelete="CASCADE"))
    env_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    config_json: Mapped[str] = mapped_column(String(512))
    status: Mapped[str] = mapped_column(String(32))
    median_ms: Mapped[float | None] = mapped_column(Double)
    p20_ms: Mapped[float | None] = mapped_column(Double)
    p80_ms: Mapped[float | None] = mapped_column(Double)
    tflops: Mapped[float | None] = mapped_column(Double)
    rel_error: Mapped[float | None] = mapped_column(Double)
    # Added by migration 2.
    note: Mapped[str] = mapped_column(String(512), default="", server_default="")
    measured_at: Mapped[datetime | None] = mapped_column(DateTime)


class WinnerRow(Base):
    __tablename__ = "winners"
    __table_args__ = (UniqueConstraint("problem_id", "env_id", name="uq_winners_problem_env"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    problem_id: Mapped[int] = mapped_column(ForeignKey("problems.id", ondelete="CASCADE"))
    env_id: Mapped[int] = mapped_column(ForeignKey("environments.id", ondelete="CASCADE"))
    config_json: Mapped[str] = mapped_column(String(512))
    median_ms: Mapped[float] = mapped_column(Double)
    torch_ms: Mapped[float | None] = mapped_column(Double)
    speedup: Mapped[float | None] = mapped_column(Double)
    source: Mapped[str] = mapped_column(String(16))
    host: Mapped[str] = mapped_column(String(255))
    created_at: Mapped[datetime] = mapped_column(DateTime)
