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
    assert not loaded["triton"] and not loaded["tuning_db"] and not loaded["sqlalchemy"]


def test_unknown_attribute_is_an_attribute_error():
    import pytest

    import tritonblas

    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        tritonblas.nope  # noqa: B018
