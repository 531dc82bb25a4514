"""shapes.yaml loading: grid expansion, dtype resolution, and errors that say file, entry, field, line."""

from pathlib import Path

import pytest

from tritonblas.problem import Problem
from tritonblas.shapes import ShapesError, load_problems, load_shapes

DATA = Path(__file__).parent / "data"
BENCH_SUITE = Path("/work/shared/bench/shapes.yaml")


def test_grid_file_expands_every_feature():
    specs = load_shapes(DATA / "grid.yaml")
    assert [s.dtypes for s in specs] == [("bf16", "fp16"), ("fp32",), ("bf16", "fp16"), ("bf16", "fp16")]
    grid = specs[1].problems()
    assert len(grid) == 3 * 2
    assert {(p.m, p.k) for p in grid} == {(m, k) for m in (1, 16, 128) for k in (4096, 8192)}
    assert all(p.n == 4096 and p.layout == "tn" and p.bias == "column" and p.dtype == "fp32" for p in grid)
    assert specs[3].problems() == [Problem(8, 8, 8, "bf16", "tt", "full"),
                                   Problem(8, 8, 8, "fp16", "tt", "full")]
    assert specs[1].source.endswith("grid.yaml entry 2")


def test_duplicates_are_tuned_once_in_file_order():
    problems = load_problems(DATA / "grid.yaml")
    assert len(problems) == len(set(problems)) == 2 + 6 + 2
    assert problems[0] == Problem(64, 64, 64, "bf16")


def test_dtypes_override_replaces_every_list():
    problems = load_problems(DATA / "grid.yaml", dtypes=["fp16"])
    assert {p.dtype for p in problems} == {"fp16"}
    assert len(problems) == 1 + 6 + 1


@pytest.mark.skipif(not BENCH_SUITE.exists(), reason="the shared benchmark suite is only on the dev host")
def test_shared_bench_suite_loads():
    problems = load_problems(BENCH_SUITE)
    assert len(problems) == 22 * 2
    assert Problem(127, 4097, 4095, "fp16") in problems


# Each bad file with the fragments its error must contain: where (file:line, entry) and what (field).
BAD_FILES = [
    # unclosed flow mapping: the parser notices at the end of the stream, line 3
    ("shapes:\n  - {m: 16, n: 16, k: 16\n", [":3", "invalid YAML", "expected ','"]),
    ("shapes:\n\t- {m: 1, n: 1, k: 1}\n", [":2", "invalid YAML"]),              # tab indentation
    ("- {m: 1, n: 1, k: 1}\n", ["expected a mapping"]),                         # top level is a list
    ("# only a comment\n", ["the file is empty"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3}\n  - {m: 1, m: 2, n: 2, k: 3}\n", [":3", "key 'm' is given twice"]),
    ("dtypes: [fp16]\n", ["field 'shapes'", "Field required"]),                 # no shapes at all
    ("shapes: []\n", ["field 'shapes'"]),                                       # empty suite
    ("shapes:\n  - {m: 1, n: 2}\n", [":2", "entry 1", "field 'k'", "Field required"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3}\n  - {m: 0, n: 2, k: 3}\n", [":3", "entry 2", "field 'm'"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3.5}\n", [":2", "field 'k'", "integer"]),   # float dim
    ("shapes:\n  - {m: true, n: 2, k: 3}\n", ["field 'm'", "integer"]),         # bool is not an int here
    ("shapes:\n  - {m: [], n: 2, k: 3}\n", ["field 'm'", "empty list"]),
    ("shapes:\n  - {m: [1, x], n: 2, k: 3}\n", ["field 'm'", "'x'"]),
    ("shapes:\n  - {m: 1, n: 2, k: 99999999}\n", ["field 'k'", "16777216"]),    # beyond the DB key bound
    ("dtypes: [fp8]\nshapes:\n  - {m: 1, n: 2, k: 3}\n", [":1", "field 'dtypes'", "fp16, bf16, fp32"]),
    ("shapes:\n  - m: 1\n    n: 2\n    k: 3\n    dtypes: [int8]\n", [":5", "entry 1", "valid dtypes"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, layout: xn}\n", ["field 'layout'", "'nt'"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, bias: diag}\n", ["field 'bias'", "'row'"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, lay0ut: nt}\n", ["field 'lay0ut'", "Extra inputs"]),  # typo'd key
]


@pytest.mark.parametrize("text, fragments", BAD_FILES)
def test_bad_files_name_file_entry_field_and_line(tmp_path, text, fragments):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ShapesError) as exc:
        load_shapes(path)
    message = str(exc.value)
    assert str(path) in message
    for fragment in fragments:
        assert fragment in message, message


def test_missing_file_names_it(tmp_path):
    with pytest.raises(ShapesError, match="nope.yaml: cannot read"):
        load_shapes(tmp_path / "nope.yaml")


def test_bad_dtype_override_lists_valid_ones():
    with pytest.raises(ShapesError, match="unknown dtype 'f16'; valid dtypes: fp16, bf16, fp32"):
        load_shapes(DATA / "grid.yaml", dtypes=["f16"])
