"""Builders of the dispatch tests: winners of Problems, and putting them in the user DB or a shipped file
(dispatch is pointed at both by the `paths` fixture of tests/conftest.py)."""

from __future__ import annotations

from datetime import datetime, timezone

from tritonblas.arch import DeviceInfo
from tritonblas.config import GemmConfig
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tuning_db import EnvIdentity, ProblemKey, TuningDB, Winner
from tuning_db.exchange import export_file


def winner(problem: Problem, device: DeviceInfo, config: GemmConfig, ms: float,
           env: EnvIdentity | None = None, torch_ms: float | None = None) -> Winner:
    return Winner(key=ProblemKey.from_problem(problem, device), config=config, median_ms=ms,
                  torch_ms=torch_ms, created_at=datetime(2026, 11, 29, tzinfo=timezone.utc),
                  env=env or EnvIdentity.current())


def put(url: str, *winners: Winner, measurements: tuple = ()) -> None:
    with TuningDB(url) as db:
        for w in winners:
            db.upsert_winner(w)
        for key, env, rows in measurements:
            db.record_measurements(key, env, rows)
    dispatch.clear_cache()


def ship(shipped_dir, device: DeviceInfo, *winners: Winner, env: EnvIdentity | None = None) -> None:
    with TuningDB(str(shipped_dir.parent / f"ship-{device.sm_count}.sqlite")) as db:
        for w in winners:
            db.upsert_winner(w)
        export_file(db, shipped_dir / f"{device.arch}.json", device.arch, env=env)
    dispatch.set_shipped_dir(shipped_dir)
