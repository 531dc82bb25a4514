"""TuningDB on SQLite and PostgreSQL: schema and migrations, upserts, staleness, lookups, prune."""

from __future__ import annotations

import subprocess
import sys
from datetime import datetime, timedelta

import pytest
import sqlalchemy as sa
from helpers.db import (
    BIG,
    ENV,
    ENV_NEW_KERNELS,
    ENV_OLD_TRITON,
    ENV_OTHER_TORCH,
    SK,
    SMALL,
    T0,
    TUNED,
    key,
    measurement,
    quant_key,
    winner,
)
from pydantic import ValidationError

from tritonblas.arch import device_for_arch
from tritonblas.problem import Problem
from tuning_db import (
    SCHEMA_VERSION,
    EnvIdentity,
    ProblemKey,
    SchemaTooNewError,
    TuningDB,
    TuningDBError,
    default_url,
    normalize_url,
)
from tuning_db.engine import make_engine, sqlite_path
from tuning_db.migrations import MIGRATIONS_TABLE, STEPS, migrate
from tuning_db.models import Base


def _schema(url: str) -> dict[str, dict]:
    """Tables -> columns (name -> nullable), unique constraint names, index names, as the DB reports."""
    engine = sa.create_engine(normalize_url(url))
    try:
        insp = sa.inspect(engine)
        return {t: {"columns": {c["name"]: c["nullable"] for c in insp.get_columns(t)},
                    "unique": sorted(u["name"] for u in insp.get_unique_constraints(t)),
                    "indexes": sorted(i["name"] for i in insp.get_indexes(t) if not i.get("unique"))}
                for t in insp.get_table_names()}
    finally:
        engine.dispose()


def _model_schema() -> dict[str, dict]:
    return {t.name: {"columns": {c.name: c.nullable for c in t.columns},
                     "unique": sorted(c.name for c in t.constraints if isinstance(c, sa.UniqueConstraint)),
                     "indexes": sorted(i.name for i in t.indexes)}
            for t in Base.metadata.sorted_tables}


def test_empty_db_is_migrated_to_the_models(db, db_url):
    assert db.schema_version() == SCHEMA_VERSION == STEPS[-1][0]
    assert _schema(db_url) == _model_schema()
    engine = sa.create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        recorded = conn.execute(sa.text("SELECT version, name FROM tuning_schema_migrations "
                                        "ORDER BY version")).all()
    engine.dispose()
    assert [tuple(r) for r in recorded] == [(v, name) for v, name, _ in STEPS]
    if sqlite_path(db.url) is not None:  # WAL, so that readers never wait for a writer
        with db._engine.connect() as conn:
            assert conn.execute(sa.text("PRAGMA journal_mode")).scalar() == "wal"
            assert conn.execute(sa.text("PRAGMA busy_timeout")).scalar() >= 1000


# Schema versions before the latest, and a column each lacks (what the next migration adds).
OLD_SCHEMAS = [(1, "measurements", "note"), (2, "problems", "scales")]


@pytest.mark.parametrize(("version", "table", "missing"), OLD_SCHEMAS)
def test_old_schema_db_is_upgraded_keeping_its_rows(db_url, version, table, missing):
    # A genuine old database: the migrations stopped at `version`, rows written in its shape.
    engine = make_engine(normalize_url(db_url))
    assert migrate(engine, db_url, target=version) == version
    md = sa.MetaData()
    md.reflect(engine)
    assert missing not in md.tables[table].c
    with engine.begin() as conn:
        conn.execute(md.tables["problems"].insert().values(id=1, **key().model_dump(exclude={"scales"})))
        env = ENV.model_dump(exclude={"family_hashes"})
        conn.execute(md.tables["environments"].insert().values(id=1, **env))
        conn.execute(md.tables["winners"].insert().values(
            problem_id=1, env_id=1, config_json=SMALL.model_dump_json(), median_ms=0.5, torch_ms=1.0,
            speedup=2.0, source="tuned", host="old", created_at=T0.replace(tzinfo=None)))
        conn.execute(md.tables["measurements"].insert().values(
            problem_id=1, env_id=1, config_json=SMALL.model_dump_json(), status="ok", median_ms=0.5,
            p20_ms=0.4, p80_ms=0.6, tflops=1.0, rel_error=0.0))
    engine.dispose()
    with TuningDB(db_url) as db:
        assert db.schema_version() == SCHEMA_VERSION
        w = db.get_winner(key(), ENV)
        assert (w.config, w.median_ms, w.host, w.created_at) == (SMALL, 0.5, "old", T0)
        assert [(m.config, m.median_ms, m.note) for m in db.measurements(key(), ENV)] == [(SMALL, 0.5, "")]
        db.record_measurements(key(), ENV, [measurement(BIG, 0.7, note="after upgrade")])
        assert [m.note for m in db.measurements(key(), ENV)] == ["", "after upgrade"]
        assert [w.key for w in db.winners(env=ENV)] == [key()] and key().scales == "none"
        assert db.lookup(key(device_name="NVIDIA H100"), ENV).config == SMALL  # the arch lookup index
    assert _schema(db_url) == _model_schema()


def test_newer_schema_is_refused_and_left_untouched(db_url):
    TuningDB(db_url).close()
    engine = sa.create_engine(normalize_url(db_url))
    with engine.begin() as conn:
        conn.execute(sa.text("INSERT INTO tuning_schema_migrations (version, name, applied_at) "
                             "VALUES (:v, 'from the future', :t)"), {"v": SCHEMA_VERSION + 1, "t": T0})
    engine.dispose()
    path = sqlite_path(normalize_url(db_url))
    before = path.read_bytes() if path else None
    with pytest.raises(SchemaTooNewError, match=f"schema version {SCHEMA_VERSION + 1}.*newer") as exc:
        TuningDB(db_url)
    assert (str(path) if path else "127.0.0.1") in str(exc.value)
    if path is not None:
        assert path.read_bytes() == before
    engine = sa.create_engine(normalize_url(db_url))
    with engine.connect() as conn:
        versions = conn.execute(sa.select(sa.column("version")).select_from(sa.table(MIGRATIONS_TABLE)))
        assert SCHEMA_VERSION + 1 in versions.scalars().all()
    engine.dispose()


def test_foreign_sqlite_file_is_refused(tmp_path):
    path = tmp_path / "other.sqlite"
    engine = sa.create_engine(f"sqlite:///{path}")
    with engine.begin() as conn:
        conn.execute(sa.text("CREATE TABLE notes (body TEXT)"))
    engine.dispose()
    before = path.read_bytes()
    with pytest.raises(TuningDBError, match=f"{path}.*not a tuning database"):
        TuningDB(str(path))
    assert path.read_bytes() == before


def test_upsert_keeps_the_faster_winner(db):
    assert db.upsert_winner(winner(ms=1.0, config=SMALL))
    assert not db.upsert_winner(winner(ms=1.5, config=BIG))  # slower: kept the stored one
    assert not db.upsert_winner(winner(ms=1.0, config=BIG))  # a tie is not an improvement
    assert db.get_winner(key(), ENV).config == SMALL
    assert db.upsert_winner(winner(ms=0.25, config=SK, host="node-2"))
    got = db.get_winner(key(), ENV)
    assert (got.config, got.median_ms, got.host, got.speedup) == (SK, 0.25, "node-2", 8.0)
    assert len(db.winners()) == 1


def test_winner_round_trips_every_field(db):
    w = winner(ms=0.123456789012345, torch_ms=None, speedup=None, config=SK,
               at=T0 + timedelta(microseconds=7), host="gpu node #3")
    db.upsert_winner(w)
    assert db.get_winner(w.key, ENV) == w


def test_stale_entries_are_misses_shown_stale_and_pruned(db):
    db.upsert_winner(winner(ms=0.5, env=ENV_NEW_KERNELS))  # faster, but for other kernel sources
    db.upsert_winner(winner(key(m=256), ms=0.5, env=ENV_OLD_TRITON))  # same kernels: serves, not fresh
    db.upsert_winner(winner(ms=1.0, env=ENV_OTHER_TORCH))  # torch alone does not make it stale
    db.record_measurements(key(), ENV_NEW_KERNELS, [measurement(BIG, 0.5)])
    db.record_measurements(key(), ENV, [measurement(SMALL, 1.0)])
    assert db.get_winner(key(), ENV).env == ENV_OTHER_TORCH
    assert db.get_winner(key(m=256), ENV) is None  # the tuner's "done" is the running triton's only
    assert not db.has_fresh_winner(key(m=256), ENV)
    assert db.lookup(key(m=256), ENV).env == ENV_OLD_TRITON  # what dispatch uses
    assert [(w.key.m, w.env.kernel_hash, w.stale, w.other_triton) for w in db.winners(env=ENV)] == [
        (128, "k1", False, False), (128, "k2", True, False), (256, "k1", False, True)]
    assert [w.stale for w in db.winners(env=ENV_NEW_KERNELS)] == [True, False, True]
    assert len(db.winners(include_stale=False, env=ENV)) == 2
    assert [m.config for m in db.measurements(key(), ENV)] == [SMALL]
    assert db.prune(ENV) == 2  # the stale winner and the stale measurement
    assert [(w.env, w.stale) for w in db.winners(env=ENV)] == [(ENV_OTHER_TORCH, False),
                                                               (ENV_OLD_TRITON, False)]
    stats = db.stats(ENV)
    counts = [stats[c] for c in ("winners", "fresh_winners", "other_triton_winners", "stale_winners",
                                 "measurements", "problems")]
    assert counts == [2, 1, 1, 0, 1, 2]
    assert db.prune(ENV) == 0


def test_get_winner_takes_the_fastest_fresh_environment(db):
    db.upsert_winner(winner(ms=1.0, env=ENV))
    db.upsert_winner(winner(ms=0.8, config=BIG, env=ENV_OTHER_TORCH))
    assert db.get_winner(key(), ENV).config == BIG
    assert len(db.winners()) == 2


def test_lookup_serves_any_device_of_the_arch_preferring_this_one(db):
    h100 = key(device_name="NVIDIA H100 80GB HBM3")
    db.upsert_winner(winner(h100, ms=0.5, config=BIG))
    assert db.get_winner(key(), ENV) is None  # the exact key is per device
    assert db.lookup(key(), ENV).key == h100
    db.upsert_winner(winner(key(), ms=0.9, config=SMALL))
    assert db.lookup(key(), ENV).config == SMALL  # this device's own result, though slower
    assert db.lookup(key(arch="sm_80", device_name="A100", sm_count=108), ENV) is None
    assert db.lookup(key(layout="nt"), ENV) is None
    assert db.lookup(key(bias="row"), ENV) is None


def test_measurements_are_replaced_per_config_and_ordered(db):
    db.record_measurements(key(), ENV, [measurement(SMALL, 1.0), measurement(BIG, None, "compile_error"),
                                        measurement(SK, 2.0)])
    db.record_measurements(key(), ENV, [measurement(SMALL, 3.0, note="re-measured")])
    got = db.measurements(key(), ENV)
    assert [(m.config, m.status, m.median_ms) for m in got] == [
        (SK, "ok", 2.0), (SMALL, "ok", 3.0), (BIG, "compile_error", None)]
    assert got[1].note == "re-measured" and got[0].p20_ms == pytest.approx(1.8)
    assert db.measurements(key(m=1), ENV) == []
    assert db.stats(ENV)["measurements_by_status"] == {"compile_error": 1, "ok": 2}


def test_winners_are_sorted_and_filtered_by_arch(db):
    keys = [key(m=64), key(m=16), key(m=16, dtype="bf16"), key(m=32, arch="gfx942", device_name="MI300X",
                                                              sm_count=304)]
    for i, k in enumerate(keys):
        db.upsert_winner(winner(k, ms=1.0 + i))
    assert [(w.key.arch, w.key.m, w.key.a_dtype) for w in db.winners(env=ENV)] == [
        ("gfx942", 32, "fp16"), ("sm_90", 16, "bf16"), ("sm_90", 16, "fp16"), ("sm_90", 64, "fp16")]
    assert [w.key.m for w in db.winners("gfx942", env=ENV)] == [32]
    assert db.stats(ENV)["winners_by_arch"] == {"gfx942": 1, "sm_90": 3}


def test_default_environment_is_the_running_code(db):
    current = EnvIdentity.current()
    db.upsert_winner(winner(env=current))
    assert db.get_winner(key()) is not None and db.winners()[0].stale is False


# Each bad key field, with why it is refused.
BAD_KEYS = [
    {"m": -1},  # negative size
    {"k": 2**24 + 1},  # beyond what a key may hold
    {"a_dtype": "fp64"},  # not a kernel dtype
    {"layout": "nx"},
    {"bias": "diagonal"},
    {"arch": "sm 90; DROP TABLE"},  # arch names are identifiers
    {"device_name": "H200\x1b[31m"},  # terminal escape in free text
    {"sm_count": 0},
    {"extra": 1},  # unknown field
]


@pytest.mark.parametrize("bad", BAD_KEYS, ids=lambda b: next(iter(b)))
def test_problem_key_validation(bad):
    fields = key().model_dump()
    with pytest.raises(ValidationError, match=next(iter(bad))):
        ProblemKey(**{**fields, **bad})


KEY_PROBLEMS = [
    Problem(33, 17, 100, "fp16", "tn", "row", "fp32"),
    Problem(1, 2, 3, "bf16"),
    Problem(4096, 4096, 4096, "e4m3", "nt", "none", "bf16", scales="tensor"),
    Problem(64, 8192, 8192, "e4m3", "nt", "row", "bf16", "e5m2", "row"),
    Problem(16, 32, 48, "int8", "nt", "none", "fp32", scales="row_a"),
    Problem(16, 32, 48, "e5m2", "nn", "none", "e5m2", scales="row_b"),
]


@pytest.mark.parametrize("p", KEY_PROBLEMS, ids=Problem.short)
def test_problem_key_from_and_to_problem(p):
    device = device_for_arch("sm_90", "NVIDIA H200", 132)
    k = ProblemKey.from_problem(p, device)
    assert (k.a_dtype, k.b_dtype, k.out_dtype, k.scales, k.arch, k.sm_count) == (
        p.dtype, p.b, p.out, p.scales, "sm_90", 132)
    assert Problem.from_key(k) == p


# Keys whose dtypes, scales and bias do not go together, and what the refusal says.
BAD_QUANT_KEYS = [
    (dict(b_dtype="bf16"), "operand dtypes fp16/bf16 need scales"),
    (dict(a_dtype="e4m3", b_dtype="e4m3", out_dtype="bf16"), "operand dtypes e4m3 need scales"),
    (dict(scales="row"), "scales 'row' need operands of e4m3, e5m2, int8"),
    (dict(a_dtype="int8", b_dtype="e4m3", out_dtype="bf16", scales="row"), "int8 operands go with int8"),
    (dict(a_dtype="int8", b_dtype="int8", out_dtype="int8", scales="row"), "output dtype"),
    (dict(a_dtype="e4m3", b_dtype="e4m3", out_dtype="bf16", scales="row", bias="full"), "bias none or row"),
]


@pytest.mark.parametrize(("bad", "match"), BAD_QUANT_KEYS, ids=lambda b: str(b))
def test_a_key_refuses_dtypes_scales_and_bias_that_do_not_go_together(bad, match):
    with pytest.raises(ValidationError, match=match):
        key(**bad)


@pytest.mark.parametrize("field,value", [
    ("median_ms", float("nan")), ("median_ms", 0.0), ("median_ms", float("inf")), ("torch_ms", -1.0),
    ("speedup", float("nan")), ("source", "guessed"), ("host", "a\nb"),
])
def test_winner_validation(field, value):
    with pytest.raises(ValidationError, match=field):
        winner(**{field: value})


def test_naive_times_are_taken_as_utc():
    w = winner(at=datetime(2026, 1, 2, 3, 4, 5))
    assert w.created_at.utcoffset() == timedelta(0) and w.created_at.hour == 3


def test_measurement_validation():
    with pytest.raises(ValidationError, match="status"):
        measurement(status="fast")
    with pytest.raises(ValidationError, match="p20_ms"):
        measurement(p20_ms=-1.0)
    with pytest.raises(ValidationError, match="needs median_ms"):
        measurement(ms=None)
    with pytest.raises(ValidationError, match="tflops"):
        measurement(tflops=float("inf"))
    with pytest.raises(ValidationError, match="block_m"):
        measurement(config={"block_m": 48, "block_n": 32, "block_k": 32})


def test_default_url_reads_the_environment_at_call_time(monkeypatch, tmp_path):
    monkeypatch.delenv("TRITONBLAS_DB", raising=False)
    assert default_url().endswith("/tritonblas/tuning.sqlite")
    monkeypatch.setenv("TRITONBLAS_DB", str(tmp_path / "x.sqlite"))
    assert default_url() == f"sqlite:///{tmp_path / 'x.sqlite'}"
    monkeypatch.setenv("TRITONBLAS_DB", "postgresql+psycopg://u:secret@db.example/tb")
    assert default_url() == "postgresql+psycopg://u:secret@db.example/tb"
    with pytest.raises(ValueError, match="not a database URL"):
        normalize_url("::not a url://")


def test_postgresql_without_a_driver_means_psycopg_the_extra_installs():
    assert normalize_url("postgresql://tuner@db.example/tb") == "postgresql+psycopg://tuner@db.example/tb"
    assert normalize_url("postgres://tuner:pw@db:5433/tb") == "postgresql+psycopg://tuner:pw@db:5433/tb"
    assert normalize_url("postgresql+psycopg2://tuner@db/tb") == "postgresql+psycopg2://tuner@db/tb"


def test_url_error_messages_hide_passwords():
    with pytest.raises(TuningDBError) as exc:
        TuningDB("nosuchdialect://user:hunter2@host/db")
    assert "hunter2" not in str(exc.value) and "nosuchdialect://user:***@host/db" in str(exc.value)


def test_import_opens_no_database_and_reads_no_environment(tmp_path):
    code = ("import os, tuning_db; os.environ['TRITONBLAS_DB'] = 'sqlite:////nonexistent/dir/x.sqlite'; "
            "print(tuning_db.default_url())")
    env = {"HOME": str(tmp_path), "PATH": "/usr/bin:/bin", "XDG_CACHE_HOME": str(tmp_path / "cache")}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "sqlite:////nonexistent/dir/x.sqlite"
    assert not (tmp_path / "cache").exists()


# Keys that differ from the first only in the scale mode or the operand dtypes: each its own problem.
SEPARATE_KEYS = [quant_key(scales="row"), quant_key(scales="tensor"), quant_key(scales="row_a"),
                 quant_key(scales="row", b="e5m2"), quant_key(scales="row", a="int8", b="int8"),
                 key(layout="nt")]


def test_quantized_winners_store_look_up_and_keep_scale_modes_apart(db):
    configs = [SMALL, BIG, SK, TUNED, SMALL, BIG]
    for i, (k, c) in enumerate(zip(SEPARATE_KEYS, configs, strict=True)):
        db.upsert_winner(winner(k, ms=1.0 + i, config=c))
        db.record_measurements(k, ENV, [measurement(c, 1.0 + i)])
    assert db.stats(ENV)["problems"] == len(SEPARATE_KEYS)
    for i, (k, c) in enumerate(zip(SEPARATE_KEYS, configs, strict=True)):
        assert db.get_winner(k, ENV).config == c and db.get_winner(k, ENV).key == k
        assert db.lookup(k.model_copy(update={"device_name": "NVIDIA H100"}), ENV).median_ms == 1.0 + i
        assert [m.config for m in db.measurements(k, ENV)] == [c]
    assert [w.key.scales for w in db.winners(env=ENV)] == ["row", "row_a", "tensor", "row", "none", "row"]
    assert db.get_winner(quant_key(scales="row_b"), ENV) is None
    assert "e4m3xe5m2->bf16 nt bias=none scales=row sm_90" in SEPARATE_KEYS[3].describe()
