"""tritonblas.launch.compile_key: triton's per-process key (a hash of libtriton.so and its compiler sources)
stored on disk with the stat of every file it covers, reused while they are unchanged."""

import json
import subprocess
import sys

import pytest

pytest.importorskip("triton")

PRELUDE = """
import json, sys
from triton.runtime import cache
from tritonblas.launch import compile_key
"""


def _run(code: str, cache_dir) -> str:
    out = subprocess.run([sys.executable, "-c", PRELUDE + code], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin", "TRITON_CACHE_DIR": str(cache_dir)})
    return out.stdout.strip().splitlines()[-1]


def test_the_stored_key_is_triton_own_and_is_reused(tmp_path):
    first = _run("""
own = cache.triton_key()          # triton's own function, before install
compile_key.install()
compile_key.install()             # once per process
assert cache.triton_key() == own
print(json.dumps(own))
""", tmp_path)
    stored = json.loads((tmp_path / "tritonblas-triton-key.json").read_text())
    assert stored["key"] == json.loads(first)
    # A later process with the same files takes the stored key as it is, without hashing: a planted one
    # proves it.
    stored["key"] = "planted"
    (tmp_path / "tritonblas-triton-key.json").write_text(json.dumps(stored))
    assert _run("compile_key.install(); print(cache.triton_key())", tmp_path) == "planted"


@pytest.mark.parametrize("damage", ["signature", "garbage"])
def test_a_changed_file_or_a_damaged_store_recomputes(tmp_path, damage):
    _run("compile_key.install(); print(cache.triton_key())", tmp_path)
    path = tmp_path / "tritonblas-triton-key.json"
    stored = json.loads(path.read_text())
    if damage == "signature":  # as if libtriton.so had been rebuilt: its size differs
        stored["signature"][1][1][1] += 1
        stored["key"] = "planted"
        path.write_text(json.dumps(stored))
    else:
        path.write_text("{not json")
    got = _run("own = cache.triton_key(); compile_key.install(); assert cache.triton_key() == own; "
               "print(own)", tmp_path)
    assert got != "planted"
    assert json.loads(path.read_text())["key"] == got  # rewritten
