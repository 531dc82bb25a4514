"""`import tritonblas` does no device work, opens no database and reads no environment: it loads none of
torch, triton, sqlalchemy or pydantic until a public name is used (measured ~1 ms on this machine)."""

import json
import subprocess
import sys

HEAVY = ["torch", "triton", "sqlalchemy", "pydantic", "tuning_db"]


def _modules_after(code: str) -> dict[str, bool]:
    probe = f"import sys, json\n{code}\nprint(json.dumps({{m: m in sys.modules for m in {HEAVY!r}}}))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})  # no TRITON_INTERPRET, no TRITONBLAS_DB
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_import_loads_nothing_heavy():
    assert _modules_after("import tritonblas") == dict.fromkeys(HEAVY, False)


def test_first_use_loads_the_ops_but_not_the_database_or_triton():
    loaded = _modules_after("import tritonblas\ntritonblas.matmul")
    assert loaded["torch"] and loaded["pydantic"]
    # tritonblas.config binds its GemmConfig to tuning_db.schemas (pydantic only); no database code loads.
    assert not loaded["triton"] and not loaded["sqlalchemy"]
    assert loaded["tuning_db"]
    _modules_after("import tritonblas\ntritonblas.matmul\nassert 'tuning_db.store' not in sys.modules")


def test_tuning_db_imports_no_tritonblas_module():
    """tuning_db stands alone: tritonblas uses it, never the reverse. Every module of it, and a database
    written and read back with its own config type, load nothing of tritonblas."""
    code = """
import pkgutil, importlib, sys, tempfile, os
from datetime import datetime, timezone
import tuning_db
for mod in pkgutil.iter_modules(tuning_db.__path__):
    importlib.import_module("tuning_db." + mod.name)
from tuning_db import TuningDB, ProblemKey, EnvIdentity, Winner, Measurement
from tuning_db.schemas import StoredConfig
env = EnvIdentity(triton_version="t", torch_version="p", kernel_hash="k", timing_protocol="x")
key = ProblemKey(m=1, n=2, k=3, a_dtype="fp16", b_dtype="fp16", out_dtype="fp16", arch="sm_90",
                 device_name="dev", sm_count=1)
cfg = StoredConfig(block=64, tiles=[1, 2])
with TuningDB(os.path.join(tempfile.mkdtemp(), "t.sqlite")) as db:
    db.record_measurements(key, env, [Measurement(config=cfg, status="ok", median_ms=1.0)])
    now = datetime.now(timezone.utc)
    db.upsert_winner(Winner(key=key, config=cfg, median_ms=1.0, created_at=now, env=env))
    assert db.get_winner(key, env).config == cfg and db.measurements(key, env)[0].config == cfg
print(sorted(m for m in sys.modules if m.split(".")[0] == "tritonblas"))
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip().splitlines()[-1] == "[]"


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    import tritonblas

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tritonblas.nope  # noqa: B018
