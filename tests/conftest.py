"""Test set-up: kernels run in Triton's interpreter unless a CUDA GPU is present.

TRITON_INTERPRET must be set before triton is imported, so it is set here, before any test module
imports tritonblas' kernels.
"""

import os

os.environ.setdefault("TRITON_INTERPRET", "0" if os.environ.get("TRITONBLAS_TEST_GPU") == "1" else "1")

import pytest  # noqa: E402
import torch  # noqa: E402


@pytest.fixture(scope="session")
def device() -> str:
    return "cuda" if os.environ.get("TRITON_INTERPRET") != "1" and torch.cuda.is_available() else "cpu"


@pytest.fixture(params=["sqlite", "postgresql"])
def db_url(request, tmp_path):
    """An empty tuning database: an SQLite file, or the CI PostgreSQL server (skipped without one)."""
    from test_db_support import empty_db

    yield from empty_db(request.param, tmp_path)


@pytest.fixture
def db(db_url):
    from tuning_db import TuningDB

    with TuningDB(db_url) as opened:
        yield opened


@pytest.fixture
def no_gpu(monkeypatch):
    """A CPU box with the interpreter off (the GPU count is faked so this holds on a GPU host too)."""
    from tritonblas.cli import common

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(common, "gpu_count", lambda: 0)
