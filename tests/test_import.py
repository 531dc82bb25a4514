"""`import tritonblas` does no device work, opens no database and reads no environment: it loads none of
torch, triton, sqlalchemy or pydantic until a public name is used (measured ~1 ms on this machine)."""

import json
import os
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


def test_every_public_name_and_the_readme_s_dispatch_module_load_on_first_use():
    """The names of `tritonblas.__all__`, and `tritonblas.dispatch` (the README's
    `tritonblas.dispatch.clear_cache()`), in a fresh process where nothing imported their modules yet."""
    code = ("import tritonblas\n"
            "names = [n for n in tritonblas.__all__ if getattr(tritonblas, n) is None]\n"
            "tritonblas.dispatch.clear_cache()\n"
            "print(names, tritonblas.dispatch.__name__)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.split() == ["[]", "tritonblas.selection.dispatch"]


def test_first_gemm_without_a_tuning_database_loads_no_sqlalchemy(tmp_path):
    """A user who never tuned has no database file: the first GEMM must not pay SQLAlchemy's import
    (0.3 s of a 0.9 s first call here) to find that out. With the file present it is opened."""
    code = """
import sys, json, torch, tritonblas
tritonblas.matmul(torch.ones(4, 4, dtype=torch.float16), torch.ones(4, 4, dtype=torch.float16))
from tritonblas.arch import device_for_arch
from tritonblas.selection import dispatch
# the shipped file's layer too (4096^3 bf16 is in configs/sm_90.json)
assert dispatch.select(4096, 4096, 4096, "bf16", device=device_for_arch("sm_90")).source == "shipped"
print(json.dumps("sqlalchemy" in sys.modules))
"""
    env = {"PATH": "/usr/bin:/bin", "TRITON_INTERPRET": "1", "HOME": str(tmp_path),
           "XDG_CACHE_HOME": str(tmp_path / "cache"), "TRITONBLAS_DB": str(tmp_path / "absent.sqlite")}
    if os.environ.get("PYTHONPATH"):  # the triton the suite runs on (e.g. PYTHONPATH=/work/triton39:...)
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]

    def sqlalchemy_loaded() -> bool:
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                             env=env)
        return json.loads(out.stdout.strip().splitlines()[-1])

    assert not sqlalchemy_loaded()
    del env["TRITONBLAS_DB"]  # the default file, under XDG_CACHE_HOME: absent too
    assert not sqlalchemy_loaded()
    from tuning_db import TuningDB

    TuningDB(str(tmp_path / "present.sqlite")).close()
    env["TRITONBLAS_DB"] = str(tmp_path / "present.sqlite")
    assert sqlalchemy_loaded()


def test_first_cuda_call_loads_triton_key_in_a_thread(tmp_path):
    """compile_key.prefetch installs triton's compile-cache key (tritonblas.launch.compile_key) from a
    thread, once per process, and the key is triton's own."""
    code = """
import threading
from triton.runtime import cache
from tritonblas.launch import compile_key
own = cache.triton_key
compile_key.prefetch()
compile_key.prefetch()  # once per process: one thread
threads = [t for t in threading.enumerate() if t.name == "tritonblas-triton-key"]
assert len(threads) <= 1, threads
for t in threads:
    t.join()
assert cache.triton_key is not own and cache.triton_key() == own()
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "TRITON_CACHE_DIR": str(tmp_path)})
    assert out.stdout.strip().splitlines()[-1] == "ok"
