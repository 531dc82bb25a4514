"""The kernel hash is of the code that decides what is compiled and launched (issue 35): an edit to a
comment, a docstring or the layout keeps it (and so the shipped winners fresh); a changed kernel
constexpr or planning constant or function changes it. Edits are made to copies of the sources."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tritonblas import identity

# (id, file, text in it, replacement, whether the hash stays)
EDITS = [
    ("kernel_comment", "fixup.py", "_CLAIM_BIT = tl.constexpr(20)",
     "# why 20, said again\n_CLAIM_BIT = tl.constexpr(20)  # and here", True),
    ("kernel_docstring", "fixup.py", '"""Rows `offs` of workspace slot', '"""Reworded: rows `offs` of slot',
     True),
    ("kernel_module_docstring", "reduce.py", '"""The Stream-K fix-up as a kernel of its own',
     '"""A reworded first line', True),
    ("kernel_lines_moved", "common.py", "import triton\n", "\n\n\nimport triton\n", True),
    ("planning_comment", "launch/gemm.py", "    # K == 0 has no iterations to split",
     "    # (reworded) K == 0 has no iterations to split", True),
    ("planning_docstring", "launch/streamk.py", '"""(FIXUP_CHUNKS, DEFERRED) of a Stream-K launch',
     '"""The (FIXUP_CHUNKS, DEFERRED) of a Stream-K launch', True),
    ("host_code_outside_planning", "launch/gemm.py", "    if m == 0 or n == 0:\n        return\n",
     "    if not (m and n):\n        return None\n", True),
    ("kernel_constexpr", "fixup.py", "_CLAIM_BIT = tl.constexpr(20)", "_CLAIM_BIT = tl.constexpr(21)",
     False),
    ("kernel_constexpr_default", "specs.py", "    FIXUP_CHUNKS: int = 1\n", "    FIXUP_CHUNKS: int = 2\n",
     False),
    ("kernel_code", "copy.py", "mask = (r < rows) & (c < cols)", "mask = (r < rows)", False),
    ("tree_threshold", "launch/streamk.py", "TREE_MIN_SPLITS = 12", "TREE_MIN_SPLITS = 16", False),
    ("defer_threshold", "launch/streamk.py", "DEFER_MIN_SPLITS = 6", "DEFER_MIN_SPLITS = 5", False),
    ("fixup_plan", "launch/streamk.py", "return (chunks(4096) if tma else 1), False",
     "return (chunks(2048) if tma else 1), False", False),
    ("make_plan_constexpr", "launch/gemm.py", "EVEN_K=k % config.block_k == 0,", "EVEN_K=False,", False),
    ("copy_block", "launch/gemm.py", "_COPY_ROWS, _COPY_COLS = 16, 256", "_COPY_ROWS, _COPY_COLS = 16, 128",
     False),
    ("copy_launch", "launch/gemm.py", "dict(BLOCK_R=_COPY_ROWS, BLOCK_C=_COPY_COLS), 4, 1,",
     "dict(BLOCK_R=_COPY_ROWS, BLOCK_C=_COPY_COLS), 8, 1,", False),
    ("word_copy_block", "launch/gemm.py", "_WORD_ROWS, _WORD_COLS = 4, 256",
     "_WORD_ROWS, _WORD_COLS = 4, 128", False),
    ("word_copy_rule", "launch/gemm.py", "if size <= 2 and", "if size <= 4 and", False),
    ("reduce_chunks", "launch/streamk.py", "return 8 if 4 * sk_tiles < programs else 4",
     "return 8 if 2 * sk_tiles < programs else 4", False),
]


def _edited(file: str, old: str, new: str) -> tuple[dict[str, str], dict[str, str]]:
    kernels, planning = identity.sources()
    texts = kernels if file in kernels else planning
    assert texts[file].count(old) == 1, f"{file} no longer holds {old!r}: update EDITS"
    texts[file] = texts[file].replace(old, new)
    return kernels, planning


@pytest.mark.parametrize("file, old, new, same", [e[1:] for e in EDITS], ids=[e[0] for e in EDITS])
def test_the_hash_follows_the_code_not_the_text(file, old, new, same):
    assert (identity.code_hash(*_edited(file, old, new)) == identity.code_hash(*identity.sources())) is same


def _move(planning: dict[str, str], names: dict, name: str, source: str, target: str, edit=lambda text: text):
    """`planning` and `names` with the top-level definition of `name` moved from `source` to `target`."""
    text = planning[source]
    start = text.index(f"def {name}(")
    start = text.rindex("\n\n\n", 0, start) + 3  # with its decorators
    end = text.index("\n\n\n", start)
    moved = dict(planning, **{source: text[:start] + text[end:],
                              target: planning[target] + "\n\n\n" + edit(text[start:end]) + "\n"})
    return moved, dict(names, **{source: tuple(n for n in names[source] if n != name),
                                 target: (*names[target], name)})


def test_a_planning_function_moved_to_another_module_keeps_the_hash():
    kernels, planning = identity.sources()
    moved, names = _move(planning, identity.PLANNING, "fixup_deferred", "launch/streamk.py", "problem.py")
    assert identity.code_hash(kernels, moved, names) == identity.code_hash(kernels, planning)


def test_a_relative_import_is_hashed_as_written_from_the_package():
    # launch/gemm.py's _kernels imports `..kernels.copy`; moved to arith.py it reads `.kernels.copy`.
    kernels, planning = identity.sources()
    moved, names = _move(planning, identity.PLANNING, "_kernels", "launch/gemm.py", "arith.py",
                         lambda code: code.replace("from ..kernels.", "from .kernels."))
    assert identity.code_hash(kernels, moved, names) == identity.code_hash(kernels, planning)
    wrong, _ = _move(planning, identity.PLANNING, "_kernels", "launch/gemm.py", "arith.py")
    assert identity.code_hash(kernels, wrong, names) != identity.code_hash(kernels, planning)


def test_a_planning_name_not_found_is_an_error_naming_it():
    kernels, planning = identity.sources()
    names = dict(identity.PLANNING, **{"arith.py": (*identity.PLANNING["arith.py"], "TREE_MAX_SPLITS")})
    with pytest.raises(LookupError, match="arith.py defines no TREE_MAX_SPLITS"):
        identity.code_hash(kernels, planning, names)


@pytest.fixture
def memo_home(tmp_path, monkeypatch):
    """kernel_hash's memo in a folder of this test's, computed afresh."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    identity.kernel_hash.cache_clear()
    yield tmp_path / "tritonblas" / "kernel-hash.json"
    identity.kernel_hash.cache_clear()


def test_kernel_hash_is_the_code_hash_of_the_installed_sources_kept_on_disk(memo_home):
    assert identity.kernel_hash() == identity.code_hash(*identity.sources())
    memo = json.loads(memo_home.read_text())
    assert memo["kernel_hash"] == identity.kernel_hash()
    # A later process takes the memo of the same sources (here one with another hash, to tell) ...
    memo_home.write_text(json.dumps({**memo, "kernel_hash": "0123456789abcdef"}))
    identity.kernel_hash.cache_clear()
    assert identity.kernel_hash() == "0123456789abcdef"
    # ... and recomputes for other sources, or a memo that is not a hash.
    other_sources = {**memo, "sources": "other", "kernel_hash": "0123456789abcdef"}
    for stale in (other_sources, {**memo, "kernel_hash": "x"}):
        memo_home.write_text(json.dumps(stale))
        identity.kernel_hash.cache_clear()
        assert identity.kernel_hash() == identity.code_hash(*identity.sources())


def test_import_and_first_use_compute_no_hash():
    probe = ("import sys, tritonblas\ntritonblas.matmul\nm = sys.modules.get('tritonblas.identity')\n"
             "print(m is None or m.kernel_hash.cache_info().currsize == 0)")
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True,
                         env={"PATH": "/usr/bin:/bin"})
    assert out.stdout.strip().splitlines()[-1] == "True"
