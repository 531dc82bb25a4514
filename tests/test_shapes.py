"""shapes.yaml loading: grid expansion, dtype resolution, and errors that say file, entry, field, line."""

from pathlib import Path

import pytest

from tritonblas.problem import Problem
from tritonblas.shapes import ShapesError, load_problems, load_shapes

DATA = Path(__file__).parent / "data"
BENCH_SUITE = Path("/work/shared/bench/shapes.yaml")
FP8_CLASS = Path(__file__).parent.parent / "scripts" / "classes" / "fp8.yaml"


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


def _fp8(m: int, n: int, k: int, scales: str, bias: str = "none", a: str = "e4m3") -> Problem:
    return Problem(m, n, k, a, "nt", bias, "bf16", scales=scales)


def test_the_fp8_class_loads_into_its_quantized_problems():
    assert load_problems(FP8_CLASS) == [
        _fp8(8192, 8192, 8192, "row"), _fp8(4096, 4096, 4096, "tensor"), _fp8(8192, 28672, 4096, "row"),
        _fp8(8192, 4096, 14336, "row"), _fp8(2048, 6144, 4096, "row", "row"), _fp8(512, 4096, 4096, "tensor"),
        _fp8(64, 8192, 8192, "row"), _fp8(16, 6144, 4096, "row"), _fp8(1024, 10240, 8192, "row", a="e5m2"),
        _fp8(4095, 4095, 4095, "tensor"), _fp8(2048, 50257, 768, "row"), _fp8(1000, 1000, 1001, "row")]


# File text, and the problems it loads into: top-level fields serve every entry without its own, out_dtype
# defaults to scaled_mm's (A's dtype for fp8, bf16 for int8), b_dtype mixes fp8 operands.
QUANT_FILES = [
    ("scales: row\nout_dtype: fp16\ndtypes: [e4m3]\nshapes:\n  - {m: 16, n: 32, k: 64}\n"
     "  - {m: 16, n: 32, k: 64, scales: tensor, out_dtype: fp32}\n",
     [Problem(16, 32, 64, "e4m3", "nn", "none", "fp16", scales="row"),
      Problem(16, 32, 64, "e4m3", "nn", "none", "fp32", scales="tensor")]),
    ("shapes:\n  - {m: 16, n: 32, k: 64, dtypes: [e5m2, int8], scales: row_a}\n",
     [Problem(16, 32, 64, "e5m2", "nn", "none", "e5m2", scales="row_a"),
      Problem(16, 32, 64, "int8", "nn", "none", "bf16", scales="row_a")]),
    ("shapes:\n  - {m: 16, n: 32, k: 64, dtypes: [e4m3], b_dtype: e5m2, scales: row_b, bias: row, "
     "out_dtype: e4m3, layout: nt}\n", [Problem(16, 32, 64, "e4m3", "nt", "row", "e4m3", "e5m2", "row_b")]),
]


@pytest.mark.parametrize("text, problems", QUANT_FILES)
def test_quantized_entries_resolve_scales_and_output_dtypes(tmp_path, text, problems):
    path = tmp_path / "q.yaml"
    path.write_text(text)
    assert load_problems(path) == problems


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
    ("shapes:\n  - m: 1\n    n: 2\n    k: 3\n    dtypes: [int4]\n", [":5", "entry 1", "valid dtypes"]),
    # Quantized problems: the dtypes, scales, output dtype and bias must go together.
    ("dtypes: [e4m3]\nshapes:\n  - {m: 1, n: 2, k: 3}\n",
     [":3", "entry 1", "field 'scales'", "needs scales"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3}\n  - {m: 1, n: 2, k: 3, scales: row}\n",
     [":3", "entry 2", "field 'scales'", "bf16 is a plain GEMM"]),
    ("scales: tensor\nshapes:\n  - {m: 1, n: 2, k: 3, dtypes: [e4m3, fp16]}\n",
     [":3", "entry 1", "field 'scales'", "fp16 is a plain GEMM"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, scales: blockwise}\n", [":2", "field 'scales'", "'row_a'", "'block'"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, dtypes: [e4m3], scales: row, bias: full}\n",
     [":2", "entry 1", "field 'bias'", "bias none or row"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, dtypes: [int8], scales: row, out_dtype: int8}\n",
     [":2", "field 'out_dtype'", "output dtype of bf16"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, dtypes: [int8], b_dtype: e4m3, scales: row}\n",
     [":2", "field 'b_dtype'", "int8 operands go with int8 only"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, out_dtype: fp32}\n", [":2", "field 'out_dtype'", "plain GEMM of bf16"]),
    ("shapes:\n  - {m: 1, n: 2, k: 3, b_dtype: e4m3}\n", [":2", "field 'b_dtype'", "plain GEMM"]),
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
    with pytest.raises(ShapesError, match="unknown dtype 'f16'; valid dtypes: fp16, bf16, fp32, e4m3"):
        load_shapes(DATA / "grid.yaml", dtypes=["f16"])
