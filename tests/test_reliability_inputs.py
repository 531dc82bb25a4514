"""Hostile inputs: the case lists here ARE the table of docs/reliability.md.

Each case is (id, what is tried, the call, the error or exit code, a message fragment naming the
argument). Op cases also check that `out` and every operand are untouched; file cases that the
database is byte-for-byte as it was (or, when it did not exist, still does not). Cases already tried
elsewhere (tests/test_ops_errors.py, tests/test_db_exchange.py) are listed in the same table and checked
to be there by `test_docs_table_lists_every_case`, so the document and the tests cannot drift.
"""

from __future__ import annotations

import ast
import json
import re
import sqlite3
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pydantic
import pytest
import torch
from helpers.bad_inputs import (
    BAD_EDITS,
    BAD_TEXTS,
    CASES,
    HUGE,
    M,
    N,
    assert_refused_and_untouched,
    edit_json,
    tensor,
)
from helpers.db import SMALL, grid_winners
from typer.testing import CliRunner

import tritonblas
from tritonblas import GemmConfig
from tritonblas.cli import app
from tritonblas.config import MAX_GRID
from tritonblas.selection import dispatch
from tritonblas.tuning import benchmark as benchmark_module
from tuning_db import EnvIdentity, TuningDB
from tuning_db import exchange as ex

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "reliability.md"
f16 = torch.float16


@dataclass(frozen=True)
class Case:
    id: str
    what: str
    run: Callable
    error: type[BaseException] | tuple | int  # exception type(s) (library calls) or exit code (CLI)
    match: str  # regex the message must contain: it names the argument, file, entry or field


def _cfg(**kw) -> GemmConfig:
    return GemmConfig(**{"block_m": 16, "block_n": 16, "block_k": 16, **kw})


def _csr(t: torch.Tensor) -> torch.Tensor:
    return t.float().to_sparse_csr().to(t.dtype)


def _nested(t: torch.Tensor) -> torch.Tensor:
    with warnings.catch_warnings():  # "nested tensors are a prototype": not what is tested
        warnings.simplefilter("ignore")
        return torch.nested.nested_tensor([t[0], t[1]])


# Library calls: call(x, out) with x the ERROR_SHAPE operands of the conftest fixture (M, N, K = 5, 4, 6).
OP_CASES = [
    # layouts torch has but a kernel cannot read
    Case("a_sparse_coo", "A as a sparse COO tensor", lambda x, o: tritonblas.matmul(
        x.a.float().to_sparse().half(), x.b, out=o), TypeError, r"\ba must be a dense \(strided\) tensor"),
    Case("b_sparse_csr", "B as a sparse CSR tensor", lambda x, o: tritonblas.matmul(x.a, _csr(x.b), out=o),
         TypeError, r"\bb must be a dense .*sparse_csr"),
    Case("a_nested", "A as a nested tensor", lambda x, o: tritonblas.matmul(_nested(x.a), x.b, out=o),
         TypeError, r"\ba must be a dense .*nested"),
    Case("input_sparse", "addmm input as a sparse tensor", lambda x, o: tritonblas.addmm(
        x.bias.float().to_sparse().half(), x.a, x.b, out=o), TypeError, r"\binput must be a dense"),
    Case("linear_weight_sparse", "linear weight as a sparse tensor", lambda x, o: tritonblas.linear(
        x.a, x.w.float().to_sparse().half()), TypeError, r"\bweight must be a dense"),
    # dtypes
    Case("a_complex64", "complex operands", lambda x, o: tritonblas.matmul(
        x.a.to(torch.complex64), x.b.to(torch.complex64)), TypeError, r"\ba has unsupported dtype"),
    Case("a_float8", "float8_e4m3fn operands", lambda x, o: tritonblas.matmul(
        x.a.to(torch.float8_e4m3fn), x.b.to(torch.float8_e4m3fn)), TypeError, r"\ba has unsupported dtype"),
    Case("a_bool", "bool operands", lambda x, o: tritonblas.matmul(x.a > 0, x.b > 0), TypeError,
         r"\ba has unsupported dtype torch.bool"),
    Case("linear_bias_int32", "int32 linear bias", lambda x, o: tritonblas.linear(x.a, x.w, x.bias.int()),
         TypeError, r"\bbias has unsupported dtype"),
    Case("linear_x_float64", "float64 x for linear", lambda x, o: tritonblas.linear(x.a.double(), x.w),
         TypeError, r"\bx has unsupported dtype"),
    # devices
    Case("out_meta", "out on the meta device, operands on CPU", lambda x, o: tritonblas.matmul(
        x.a, x.b, out=o.to("meta")), ValueError, r"\bout is on meta"),
    Case("linear_weight_meta", "linear weight on the meta device", lambda x, o: tritonblas.linear(
        x.a, x.w.to("meta")), ValueError, r"\bweight is on meta"),
    # no such GPU here: a RuntimeError without CUDA, a ValueError with fewer than 100 GPUs
    Case("select_device_missing", "dispatch.select on device cuda:99", lambda x, o: dispatch.select(
        8, 8, 8, "fp16", device="cuda:99"), (RuntimeError, ValueError), r"\bdevice cuda:99"),
    # an index, as torch.device takes it: the accelerator's device 3 in a CUDA build of torch (none here:
    # a RuntimeError naming it), refused by a CPU build (a ValueError)
    Case("select_device_int", "dispatch.select with device=3", lambda x, o: dispatch.select(
        8, 8, 8, "fp16", device=3), (RuntimeError, ValueError),
         r"\bdevice (must be a torch.device|cuda:3)"),
    # strides and overlapping out
    Case("out_overlaps_a_offset", "out a reshaped view of A's storage at an offset", lambda x, o:
         tritonblas.matmul(x.a, x.b, out=x.a.view(-1)[2:2 + M * N].view(M, N)), ValueError,
         r"\bout overlaps a\b"),
    Case("out_overlaps_input_row", "addmm input a row view inside out", lambda x, o: tritonblas.addmm(
        o.view(-1)[1:N + 1], x.a, x.b, out=o), ValueError, r"\bout overlaps input"),
    Case("out_expanded_column", "out a column expanded to (M, N): stride 0 along N", lambda x, o:
         tritonblas.matmul(x.a, x.b, out=o[:, :1].expand(M, N)), ValueError, r"\bout has internal overlap"),
    Case("out_self_overlapping_strides", "out with strides (1, 1): elements alias each other",
         lambda x, o: tritonblas.matmul(x.a, x.b, out=o.as_strided((M, N), (1, 1))), ValueError,
         r"\bout has internal overlap"),
    # non-broadcastable bias
    Case("input_column_too_long", "addmm input of shape (M+1, 1)", lambda x, o: tritonblas.addmm(
        tensor(M + 1, 1), x.a, x.b, out=o), ValueError, r"\binput of shape \(6, 1\) cannot be broadcast"),
    Case("input_empty", "addmm input of shape (0,)", lambda x, o: tritonblas.addmm(
        tensor(0), x.a, x.b, out=o), ValueError, r"\binput of shape \(0,\) cannot be broadcast"),
    Case("linear_bias_0d", "0-d linear bias", lambda x, o: tritonblas.linear(
        x.a, x.w, torch.tensor(1.0, dtype=f16)), ValueError, r"\bbias must be 1-D"),
    # scalars and options
    Case("beta_bool", "beta=True", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, beta=True, out=o),
         TypeError, r"\bbeta must be a real number, got bool"),
    Case("alpha_complex", "alpha=1j", lambda x, o: tritonblas.addmm(x.bias, x.a, x.b, alpha=1j, out=o),
         TypeError, r"\balpha must be a real number, got complex"),
    Case("alpha_tensor", "alpha as a 0-d tensor", lambda x, o: tritonblas.addmm(
        x.bias, x.a, x.b, alpha=torch.tensor(2.0), out=o), TypeError, r"\balpha must be a real number"),
    Case("enable_streamk_conflict", "enable_streamk=False with a Stream-K config", lambda x, o:
         tritonblas.matmul(x.a, x.b, enable_streamk=False, config=_cfg(streamk=True), out=o), ValueError,
         r"\benable_streamk=False conflicts with config"),
    # infeasible configs: each rule of config_supports
    Case("config_tma_misaligned", "tma with a 12-byte leading dim (K = 6 fp16)", lambda x, o:
         tritonblas.matmul(x.a, x.b, config=_cfg(streamk=True, tma=True), out=o), ValueError,
         r"\bconfig SK .*not feasible.*tensor descriptors \(tma\) need leading dimensions"),
    Case("config_ws_removed", "warp_specialize=True (a removed lever)", lambda x, o: tritonblas.matmul(
        x.a, x.b, config=_cfg(warp_specialize=True), out=o), ValueError, r"\bwarp_specialize was removed"),
    Case("config_accumulator_regs", "256x256 tile on 4 warps", lambda x, o: tritonblas.matmul(
        x.a, x.b, config=_cfg(block_m=256, block_n=256, num_stages=1), out=o), ValueError,
         r"\bconfig .*512 registers per thread"),
    Case("config_fp32_block_k", "fp32 with block_k=256", lambda x, o: tritonblas.matmul(
        x.a.float(), x.b.float(), config=_cfg(block_k=256, num_stages=1)), ValueError,
         r"\bconfig .*block_k <= 128"),
    Case("config_linear_infeasible", "linear with an over-sized config", lambda x, o: tritonblas.linear(
        x.a, x.w, config=HUGE), ValueError, r"\bconfig .*shared memory"),
    # malformed configs: pydantic names the field
    Case("config_grid_too_big", f"grid={MAX_GRID + 1}", lambda x, o: _cfg(grid=MAX_GRID + 1),
         pydantic.ValidationError, r"\bgrid\b"),
    Case("config_group_m_0", "group_m=0", lambda x, o: _cfg(group_m=0), pydantic.ValidationError,
         r"\bgroup_m\b"),
    Case("config_block_m_512", "block_m=512", lambda x, o: _cfg(block_m=512), pydantic.ValidationError,
         r"\bblock_m\b"),
    Case("config_stages_9", "num_stages=9", lambda x, o: _cfg(num_stages=9), pydantic.ValidationError,
         r"\bnum_stages\b"),
    Case("config_streamk_str", "streamk='yes' (strict: no coercion)", lambda x, o: _cfg(streamk="yes"),
         pydantic.ValidationError, r"\bstreamk\b"),
    Case("config_tma_int", "tma=1 (strict: an int is not a bool)", lambda x, o: _cfg(tma=1),
         pydantic.ValidationError, r"\btma\b"),
    Case("config_json_extra_field", "GemmConfig JSON with an unknown field", lambda x, o:
         GemmConfig.model_validate_json('{"block_m": 16, "block_n": 16, "block_k": 16, "exec": "rm"}'),
         pydantic.ValidationError, r"\bexec\b"),
]


@pytest.mark.parametrize("case", OP_CASES, ids=lambda c: c.id)
def test_bad_op_input(x, case):
    assert_refused_and_untouched(x, case.run, case.error, case.match)


# --- files and the CLI: nothing may be written to the database ---

runner = CliRunner()


def _tune(tmp: Path, db: Path, text: str | bytes | None, *extra: str) -> object:
    shapes = tmp / "shapes.yaml"
    if isinstance(text, bytes):
        shapes.write_bytes(text)
    elif text is not None:
        shapes.write_text(text)
    return runner.invoke(app, ["tune", "--shapes", str(shapes), "--db", str(db), *extra])


def _bomb() -> str:
    """Nine lines whose aliases expand to 10**9 dims ("billion laughs")."""
    lines = ["a0: &a0 [1, 1, 1, 1, 1, 1, 1, 1, 1, 1]"]
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 10)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\nshapes:\n  - {m: *a8, n: 1, k: 1}\n"


GOOD_SHAPES = "dtypes: [fp16]\nshapes:\n  - {m: 16, n: 16, k: 16}\n"
# tune --shapes FILE --db DB (DB does not exist before): the run(tmp, db) result, exit code, message.
TUNE_CASES = [
    Case("yaml_python_tag", "shapes.yaml with a !!python/object/apply tag (code in data)",
         lambda t, db: _tune(t, db, f'shapes:\n  - !!python/object/apply:os.system ["touch {t}/pwned"]\n'), 2,
         r"invalid YAML: could not determine a constructor for the tag"),
    Case("yaml_alias_bomb", "shapes.yaml whose aliases expand to 10**9 values", lambda t, db: _tune(
        t, db, _bomb()), 2, r"shapes.yaml:2: YAML aliases \(\*a0\) are not supported"),
    Case("shapes_grid_too_large", "a 300 x 300 x 300 grid in one entry", lambda t, db: _tune(
        t, db, "shapes:\n  - {m: %s, n: %s, k: %s}\n" % ((list(range(1, 301)),) * 3)), 2,
         r"shapes entry 1: the file expands to more than 100000 problems"),
    Case("shapes_file_too_large", "a 5 MB shapes file", lambda t, db: _tune(
        t, db, GOOD_SHAPES + "#" * (5 * 2**20) + "\n"), 2, r"bytes is larger than the \d+-byte limit"),
    Case("shapes_not_utf8", "binary bytes as shapes.yaml", lambda t, db: _tune(t, db, b"\xff\xfe\x00\x81"),
         2, r"shapes.yaml: not UTF-8 text"),
    Case("shapes_is_directory", "a directory as --shapes", lambda t, db: runner.invoke(
        app, ["tune", "--shapes", str(t), "--db", str(db)]), 2, r"cannot read shapes file"),
    Case("shapes_missing", "a --shapes file that does not exist", lambda t, db: _tune(t, db, None), 2,
         r"shapes.yaml: cannot read shapes file"),
    Case("shapes_zero_dim", "m: 0", lambda t, db: _tune(t, db, "shapes:\n  - {m: 0, n: 16, k: 16}\n"), 2,
         r"shapes entry 1: field 'm'"),
    Case("shapes_negative_dim", "k: -16", lambda t, db: _tune(t, db, "shapes:\n  - {m: 1, n: 16, k: -16}\n"),
         2, r"field 'k'"),
    Case("shapes_unknown_key", "a misspelt key (lay0ut)", lambda t, db: _tune(
        t, db, "shapes:\n  - {m: 1, n: 2, k: 3, lay0ut: nt}\n"), 2, r"field 'lay0ut'"),
    Case("shapes_code_string", "a Python expression where a dim belongs", lambda t, db: _tune(
        t, db, "shapes:\n  - {m: '__import__(\"os\").getpid()', n: 2, k: 3}\n"), 2, r"field 'm'"),
    Case("tune_dtypes_option", "--dtypes fp8", lambda t, db: _tune(t, db, GOOD_SHAPES, "--dtypes", "fp8"), 2,
         r"fp8"),
    Case("tune_budget_negative", "--budget-s -1", lambda t, db: _tune(t, db, GOOD_SHAPES, "--budget-s", "-1"),
         2, r"--budget-s must be a positive number"),
    Case("tune_budget_nan", "--budget-s nan", lambda t, db: _tune(t, db, GOOD_SHAPES, "--budget-s", "nan"),
         2, r"--budget-s must be a positive number"),
    Case("tune_db_unknown_driver", "--db with a driver that is not installed", lambda t, db: runner.invoke(
        app, ["tune", "--shapes", str(_write(t / "s.yaml", GOOD_SHAPES)), "--db", "nosuchdb://h/x"]), 1,
         r"nosuchdb://h/x: cannot open database"),
]


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def _import(tmp: Path, db: Path, good: Path, *edit: object, text: str | None = None) -> object:
    """`tritonblas db import` of the good file with one edit (path..., value) or with `text`."""
    bad = tmp / "bad.json"
    if text is None:
        bad.write_text(json.dumps(edit_json(json.loads(good.read_text()), tuple(edit[:-1]), edit[-1])))
    else:
        bad.write_text(text)
    return runner.invoke(app, ["db", "import", "--file", str(bad), "--db", str(db)])


_CONFIG = ("entries", 2, "config")
# db import FILE --db DB (DB holds one winner): run(tmp, db, good_file), exit code, message.
IMPORT_CASES = [
    Case("import_yaml_text", "a YAML file given to import", lambda t, db, g: _import(
        t, db, g, text=GOOD_SHAPES), 1, r"bad.json: invalid JSON"),
    Case("import_pickle_bytes", "a pickle (code) given to import", lambda t, db, g: runner.invoke(
        app, ["db", "import", "--file", str(_bytes(t / "p.json", b"\x80\x04\x95cos\nsystem\n")),
              "--db", str(db)]),
         1, r"p.json: not UTF-8 text"),
    Case("import_infinity_speedup", "speedup: Infinity", lambda t, db, g: _import(
        t, db, g, text=re.sub(r'"speedup": [0-9.e+-]+', '"speedup": Infinity', g.read_text(), count=1)), 1,
         r"entries\[0\].*field 'speedup'"),
    Case("import_grid_too_big", f"config grid {MAX_GRID + 1}", lambda t, db, g: _import(
        t, db, g, *_CONFIG, "grid", MAX_GRID + 1), 1, r"entries\[2\].*config.grid"),
    Case("import_copy_aligned", "aligned_copy on operands already aligned", lambda t, db, g: _import(
        t, db, g, "entries", 0, "config", "aligned_copy", True), 1, r"entries\[0\].*aligned_copy applies"),
    Case("import_ws_removed", "warp_specialize: true (a removed lever)", lambda t, db, g: _import(
        t, db, g, "entries", 0, "config", "warp_specialize", True), 1,
         r"entries\[0\].*warp_specialize was removed"),
    Case("import_arch_too_small", "the sm_90 entries declared for gfx942 (64 KiB shared memory)",
         lambda t, db, g: _import(t, db, g, "header", "arch", "gfx942"), 1,
         r"entries\[1\].*infeasible on gfx942.*shared memory"),
    Case("import_negative_m", "m: -1", lambda t, db, g: _import(t, db, g, "entries", 1, "m", -1), 1,
         r"entries\[1\].*field 'm'.*greater than or equal to 0"),
    Case("import_mixed_dtypes", "a_dtype fp16, b_dtype fp32", lambda t, db, g: _import(
        t, db, g, "entries", 1, "b_dtype", "fp32"), 1, r"entries\[1\].*fp16/fp32 need scales"),
    Case("import_host_too_long", "a 1000-character host", lambda t, db, g: _import(
        t, db, g, "entries", 1, "host", "h" * 1000), 1, r"entries\[1\].*field 'host'"),
    Case("import_bad_timestamp", "created_at: 'yesterday'", lambda t, db, g: _import(
        t, db, g, "entries", 1, "created_at", "yesterday"), 1, r"entries\[1\].*created_at"),
    Case("import_count_huge", "header count 10**9", lambda t, db, g: _import(
        t, db, g, "header", "count", 10**9), 1, r"field 'header.count'"),
    Case("import_directory", "a directory given as the file", lambda t, db, g: runner.invoke(
        app, ["db", "import", "--file", str(t), "--db", str(db)]), 1, r"cannot read config file"),
]


def _bytes(path: Path, data: bytes) -> Path:
    path.write_bytes(data)
    return path


def _dump(path: Path) -> list[str] | None:
    """Every row and schema statement of an SQLite file (WAL included); None if there is no file."""
    if not path.exists():
        return None
    with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
        return list(conn.iterdump())


def _check_refused(result, code: int, match: str) -> None:
    assert result.exit_code == code, result.output
    assert isinstance(result.exception, SystemExit), result.exception  # one message, no traceback
    assert re.search(match, result.output), result.output


@pytest.fixture
def no_benchmark(monkeypatch):
    """A case that got past validation must not run kernels: fail loudly instead."""
    def refuse(**kw):
        raise AssertionError("a refused input reached the benchmark")

    monkeypatch.setattr(benchmark_module, "GpuBenchmark", refuse)


@pytest.mark.parametrize("case", TUNE_CASES, ids=lambda c: c.id)
def test_bad_tune_input_exits_and_creates_no_database(tmp_path, no_benchmark, case):
    db = tmp_path / "db" / "tune.sqlite"
    _check_refused(case.run(tmp_path, db), case.error, case.match)
    assert not db.parent.exists()
    assert not (tmp_path / "pwned").exists()


@pytest.fixture
def populated(tmp_path) -> Path:
    path = tmp_path / "db.sqlite"
    with TuningDB(str(path)) as db:
        db.import_winners(grid_winners(1, EnvIdentity.current()))
    return path


@pytest.mark.parametrize("case", IMPORT_CASES, ids=lambda c: c.id)
def test_bad_config_file_import_exits_and_writes_no_row(tmp_path, good_file, populated, case):
    before = _dump(populated)
    _check_refused(case.run(tmp_path, populated, good_file), case.error, case.match)
    assert _dump(populated) == before
    missing = tmp_path / "new" / "db.sqlite"  # into a database that does not exist yet: none created
    _check_refused(case.run(tmp_path, missing, good_file), case.error, case.match)
    assert not missing.parent.exists()


def test_shipped_file_with_one_infeasible_entry_is_ignored_whole(tmp_path):
    """A shipped configs/<arch>.json is read by dispatch: one absurd entry rejects the whole file (one
    warning), so its feasible entries are not used either, and matmul still runs."""
    from tritonblas.arch import INTERPRETER_DEVICE

    env = EnvIdentity.current()
    dev = INTERPRETER_DEVICE
    with TuningDB(str(tmp_path / "src.sqlite")) as src:
        # Every entry small enough for fp32 operands; the test then spoils one.
        src.import_winners([w.model_copy(update={"config": SMALL, "key": w.key.model_copy(update={
            "arch": dev.arch, "device_name": dev.name, "sm_count": dev.sm_count, "a_dtype": "fp32",
            "b_dtype": "fp32", "out_dtype": "fp32"})}) for w in grid_winners(2, env)])
        ex.export_file(src, tmp_path / "configs" / f"{dev.arch}.json", dev.arch, env=env)
    path = tmp_path / "configs" / f"{dev.arch}.json"
    first = ex.load_config_file(path).entries[0]
    dispatch.set_shipped_dir(path.parent)
    try:
        with dispatch.using_database(False):
            assert dispatch.select(first.m, first.n, first.k, "fp32", device=dev).source == "shipped"
            data = json.loads(path.read_text())
            # 32x32x256 fits in shared memory, but fp32 allows block_k <= 128
            data["entries"][1]["config"].update(block_m=32, block_n=32, block_k=256, num_stages=1)
            path.write_text(json.dumps(data))
            dispatch.clear_cache()
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("ignore")  # numpy's deprecation notes from the interpreter
                warnings.simplefilter("always", RuntimeWarning)
                chosen = [dispatch.select(first.m, first.n, first.k, "fp32", device=dev).source,
                          dispatch.select(first.m, first.n, 8, "fp32", device=dev).source]
                a, b = torch.randn(first.m, first.k), torch.randn(first.k, first.n)
                torch.testing.assert_close(tritonblas.matmul(a, b), a @ b)
            assert chosen == ["heuristic", "heuristic"]
            assert len(caught) == 1 and "block_k <= 128" in str(caught[0].message)
    finally:
        dispatch.set_shipped_dir(None)


# --- data, never code ---

_UNSAFE_CALLS = {("yaml", "load"), ("yaml", "unsafe_load"), ("yaml", "full_load"), ("pickle", "load"),
                 ("pickle", "loads"), ("marshal", "loads"), ("shelve", "open")}


def test_library_never_evaluates_file_content():
    """No eval/exec, no pickle/marshal/shelve, no yaml loader but safe_load in the library."""
    found = []
    for path in sorted([*(ROOT / "tritonblas").rglob("*.py"), *(ROOT / "tuning_db").rglob("*.py")]):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Call):
                f = node.func
                name = (f.value.id, f.attr) if isinstance(f, ast.Attribute) and isinstance(
                    f.value, ast.Name) else (None, getattr(f, "id", None))
                if name in _UNSAFE_CALLS or name[1] in ("eval", "exec") and name[0] is None:
                    found.append(f"{path.relative_to(ROOT)}:{node.lineno}: {name}")
            if isinstance(node, ast.Import | ast.ImportFrom):
                mods = [a.name for a in node.names] + [getattr(node, "module", None) or ""]
                found += [f"{path.relative_to(ROOT)}:{node.lineno}: import {m}" for m in mods
                          if m.split(".")[0] in ("pickle", "marshal", "shelve", "dill")]
    assert found == []


def test_file_models_forbid_unknown_fields_and_bound_sizes():
    from tritonblas import shapes

    for model in (shapes.ShapesFile, shapes.ShapeEntry, ex.FileHeader, ex.FileEntry, ex.ConfigFile,
                  GemmConfig):
        assert model.model_config.get("extra") == "forbid", model
    assert ex.MAX_FILE_BYTES <= 64 * 2**20 and ex.MAX_ENTRIES <= 100_000
    assert shapes.MAX_FILE_BYTES <= 4 * 2**20 and shapes.MAX_PROBLEMS <= 100_000


# --- the document lists every case ---

def _node_ids() -> list[str]:
    mine = [f"tests/test_reliability_inputs.py::{fn}[{c.id}]" for fn, cases in (
        ("test_bad_op_input", OP_CASES), ("test_bad_tune_input_exits_and_creates_no_database", TUNE_CASES),
        ("test_bad_config_file_import_exits_and_writes_no_row", IMPORT_CASES)) for c in cases]
    ops = [f"tests/test_ops_errors.py::test_bad_input_names_argument_and_writes_nothing[{c[0]}]"
           for c in CASES]
    edits = [f"tests/test_db_exchange.py::test_bad_file_is_rejected_naming_the_entry_and_nothing_is_imported"
             f"[sqlite-{c[0]}]" for c in BAD_EDITS]
    texts = [f"tests/test_db_exchange.py::test_malformed_text_is_rejected[sqlite-{c[0]}]"
             for c in BAD_TEXTS]
    return mine + ops + edits + texts


def test_docs_table_lists_every_case():
    rows = [line for line in DOC.read_text().splitlines() if line.startswith("| ")]
    listed = re.findall(r"`(tests/test_[a-z_]+\.py::test_[a-z_]+\[[^\]]+\])` \|$", "\n".join(rows), re.M)
    expected = _node_ids()
    assert len(expected) == len(set(expected)) >= 40
    assert sorted(set(expected) - set(listed)) == [], "cases missing from docs/reliability.md"
    assert sorted(set(listed) - set(expected)) == [], "rows of docs/reliability.md without a case"
