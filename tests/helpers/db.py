"""Builders of the tuning-DB tests and the database spoilers they share.

Every DB test takes the `db_url` fixture (tests/conftest.py, built by `empty_db`), which runs it on
an SQLite file and on PostgreSQL. The PostgreSQL case needs TRITONBLAS_TEST_PG_URL
(scripts/ci-postgres.sh starts a throwaway server and sets it in CI) and is skipped only when that
variable is unset.
"""

from __future__ import annotations

import os
import sqlite3
from collections.abc import Iterator
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import sqlalchemy as sa

from tritonblas.config import GemmConfig
from tuning_db import EnvIdentity, Measurement, ProblemKey, TuningDB, Winner
from tuning_db.migrations import LATEST, MIGRATIONS_TABLE

PG_ENV = "TRITONBLAS_TEST_PG_URL"
BACKENDS = ["sqlite", "postgresql"]

# A fixed running environment, so freshness in the tests does not depend on the installed versions.
ENV = EnvIdentity(triton_version="3.6.0", torch_version="2.13.0", kernel_hash="k1", timing_protocol="p1")
# Same triton and kernels, other torch: still fresh (torch does not change a Triton kernel's speed).
ENV_OTHER_TORCH = ENV.model_copy(update={"torch_version": "2.12.0"})
# Other kernel sources: stale. Other triton, same kernels: serves, after the running version's.
ENV_NEW_KERNELS = ENV.model_copy(update={"kernel_hash": "k2"})
ENV_OLD_TRITON = ENV.model_copy(update={"triton_version": "3.5.0"})

T0 = datetime(2026, 11, 1, 12, 0, 0, 123456, tzinfo=timezone.utc)
SMALL = GemmConfig(block_m=32, block_n=32, block_k=32, num_warps=4, num_stages=2)
BIG = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)
SK = GemmConfig(block_m=64, block_n=64, block_k=32, streamk=True, grid=132)
# Not what the heuristic picks for 1024^3 bf16 on an H200, so a hit is visible (the dispatch tests).
TUNED = GemmConfig(block_m=64, block_n=128, block_k=128, group_m=4, num_warps=4, num_stages=4)


def pg_url_or_skip() -> str:
    url = os.environ.get(PG_ENV, "").strip()
    if not url:
        pytest.skip(f"{PG_ENV} is not set (scripts/ci-postgres.sh starts a PostgreSQL server for CI)")
    return url


def drop_everything(url: str) -> None:
    engine = sa.create_engine(url)
    try:
        md = sa.MetaData()
        md.reflect(engine)
        md.drop_all(engine)
    finally:
        engine.dispose()


def empty_db(backend: str, tmp_path: Path) -> Iterator[str]:
    """Body of each module's `db_url` fixture: a fresh SQLite file, or the test PostgreSQL database
    emptied before and after the test."""
    if backend == "sqlite":
        yield str(tmp_path / "tuning.sqlite")
        return
    url = pg_url_or_skip()
    drop_everything(url)
    yield url
    drop_everything(url)


def key(m: int = 128, n: int = 96, k: int = 64, dtype: str = "fp16", **kw) -> ProblemKey:
    fields = dict(m=m, n=n, k=k, a_dtype=dtype, b_dtype=dtype, out_dtype=dtype, layout="nn", bias="none",
                  arch="sm_90", device_name="NVIDIA H200", sm_count=132)
    return ProblemKey(**{**fields, **kw})


def quant_key(m: int = 128, n: int = 96, k: int = 64, scales: str = "row", a: str = "e4m3", b: str = "e4m3",
              out: str = "bf16", **kw) -> ProblemKey:
    """The key of a quantized problem (scaled_mm), layout nt as torch._scaled_mm takes it."""
    return key(m, n, k, **{**dict(a_dtype=a, b_dtype=b, out_dtype=out, layout="nt", scales=scales), **kw})


def winner(k: ProblemKey | None = None, ms: float = 1.0, config: GemmConfig = SMALL, env: EnvIdentity = ENV,
           at: datetime = T0, **kw) -> Winner:
    fields = dict(key=k or key(), config=config, median_ms=ms, torch_ms=2.0, speedup=2.0 / ms,
                  source="tuned", host="node-1", created_at=at, env=env)
    return Winner(**{**fields, **kw})


def measurement(config: GemmConfig = SMALL, ms: float | None = 1.0, status: str = "ok", **kw) -> Measurement:
    times = {} if ms is None else dict(median_ms=ms, p20_ms=ms * 0.9, p80_ms=ms * 1.1, tflops=1.5,
                                       rel_error=1e-3)
    return Measurement(config=config, status=status, **{**times, **kw})


def grid_winners(count: int, env: EnvIdentity = ENV) -> list[Winner]:
    """`count` distinct problems with distinct times, creation times a minute apart."""
    return [winner(key(m=16 * (i + 1), n=64 + i % 3, k=32), ms=0.5 + i / 7, env=env,
                   at=T0 + timedelta(minutes=i), config=(SMALL, BIG, SK)[i % 3])
            for i in range(count)]


def newer_schema(path: str) -> None:
    """Turn the SQLite database at `path` into one of a schema newer than this code knows."""
    TuningDB(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"INSERT INTO {MIGRATIONS_TABLE} (version, name, applied_at) VALUES (?, ?, ?)",
                     (LATEST + 1, "from the future", "2030-01-01 00:00:00"))
