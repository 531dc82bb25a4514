"""Tuning grouped GEMMs from the command line: `tritonblas tune --shapes` tunes a file's `op: grouped`
entries into the user table grouped-<arch>.json next to the database (merged with what it held), dispatch
reads it before the shipped table (source "user"), a table it cannot read costs one warning and never a
call, and `tritonblas warmup --shapes` runs the grouped entries. Interpreter, CPU, tiny sizes; the
timings mean nothing there, the winners' bookkeeping does."""

from __future__ import annotations

import json
import time
import warnings
from pathlib import Path

import pytest
import torch
from helpers.grouped import POINTERS, assert_close, tiny_grouped_file
from typer.testing import CliRunner

from tritonblas.arch import DeviceInfo
from tritonblas.cli import app, tune_app
from tritonblas.config import GemmConfig
from tritonblas.device import tensor_device_info
from tritonblas.grouped import tune, tuner, usertable
from tritonblas.grouped.op import grouped_mm
from tritonblas.grouped.select import GroupedKey, select
from tritonblas.grouped.usertable import read_doc, table_folder, user_table_path
from tritonblas.selection import dispatch
from tritonblas.shapes import load_grouped
from tuning_db.location import default_path

runner = CliRunner()
OTHER = GroupedKey("2d3d", 8, 48, 48, 4, "fp16", "nt")  # a key the tiny file does not have


@pytest.fixture(autouse=True)
def own_db(tmp_path, monkeypatch):
    """$TRITONBLAS_DB in tmp_path; dispatch's choice restored and its selections dropped after."""
    monkeypatch.setenv("TRITONBLAS_DB", str(tmp_path / "default.sqlite"))
    with dispatch.using_database(None):
        yield
    dispatch.clear_cache()


def _device() -> DeviceInfo:
    return tensor_device_info(torch.empty(1))


def _table(tmp_path: Path) -> Path:
    return tmp_path / f"grouped-{_device().arch}.json"


def _tune(app_, args: list[str]):
    result = runner.invoke(app_, args)
    assert result.exit_code == 0, result.output
    return result


def test_tune_writes_the_user_table_and_dispatch_reads_it_first(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    db = str(tmp_path / "t.sqlite")
    out = _tune(app, ["tune", "--shapes", shapes, "--db", db]).output
    assert "2 grouped entries" in out and "vs torch._grouped_mm" in out
    meta, winners = read_doc(_table(tmp_path))
    entries = load_grouped(shapes)
    assert set(winners) == {tune.entry_key(e) for e in entries}
    assert meta["arch"] == _device().arch and meta["kernel_hash"]
    for config in winners.values():
        assert not config.is_vendor  # under the interpreter torch's op never wins
        assert config.short() in out
    dispatch.set_database(db)
    dispatch.clear_cache()
    for key, config in winners.items():
        picked = select(key, _device())
        assert (picked.source, picked.config) == ("user", config)
    # and a call of that key runs the user's winner, correctly
    x = torch.randn(64, 32).half()
    w = torch.randn(4, 32, 32).half().transpose(1, 2)
    offs = torch.tensor([16, 32, 48, 64], dtype=torch.int32)
    assert_close(grouped_mm(x, w, offs=offs), x, w, offs, None)
    explained = _tune(app, ["explain", "64", "32", "32", "--groups", "4", "--dtype", "fp16", "--layout", "nt",
                            "--db", db]).output
    assert "source:   user: tritonblas tune's table" in explained, explained
    # without the database (and its folder) the same key is the heuristic's again
    dispatch.set_database(False)
    assert select(tune.entry_key(entries[0]), _device()).source == "heuristic"


def test_the_table_merges_and_a_rerun_skips_what_it_holds(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    db = str(tmp_path / "t.sqlite")
    usertable.write_table(_table(tmp_path), _device().arch, {OTHER: POINTERS}, tune.table_meta("cpu"))
    _tune(tune_app, ["--shapes", shapes, "--db", db])  # the tritonblas-tune program too
    first = _table(tmp_path).read_text()
    winners = read_doc(_table(tmp_path))[1]
    assert winners[OTHER] == POINTERS and len(winners) == 3
    out = _tune(app, ["tune", "--shapes", shapes, "--db", db]).output
    assert "0 tuned" in out and "2 already in the table" in out
    assert _table(tmp_path).read_text() == first  # untouched by a run that tuned nothing
    out = _tune(app, ["tune", "--shapes", shapes, "--db", db, "--force"]).output
    assert "2 tuned" in out and read_doc(_table(tmp_path))[1][OTHER] == POINTERS
    rows = json.loads(_table(tmp_path).read_text())["winners"]
    assert [r["key"]["groups"] for r in rows] == [2, 4, 8]  # sorted: the file is deterministic


def test_only_grouped_entries_and_mixed_files(tmp_path):
    """A file of grouped entries only tunes those; a dense problem next to them is tuned first."""
    shapes = tmp_path / "mixed.yaml"
    shapes.write_text("dtypes: [fp16]\nshapes:\n  - {m: 16, n: 16, k: 16}\n"
                      "  - {op: grouped, groups: 2, m: 8, n: 16, k: 16}\n")
    out = _tune(app, ["tune", "--shapes", str(shapes), "--db", str(tmp_path / "t.sqlite"),
                      "--budget-s", "1"]).output
    assert out.index("1 problems") < out.index("1 grouped entries")
    assert "done: 1 tuned" in out and "grouped: 1 tuned" in out
    shard = _tune(app, ["tune", "--shapes", str(shapes), "--db", str(tmp_path / "s.sqlite"), "--shard", "1/2",
                        "--budget-s", "1"]).output
    assert "grouped entries" not in shard  # shard 0 tunes every grouped entry


def test_a_malformed_user_table_warns_once_and_dispatch_goes_on(tmp_path):
    db = tmp_path / "t.sqlite"
    table = _table(tmp_path)
    table.write_text('{"winners": [{"key": {"groups": 4}}]}')
    key = GroupedKey("2d3d", 4, 32, 32, 16, "fp16", "nt")
    with pytest.warns(RuntimeWarning, match="grouped-.*shipped table instead"):
        dispatch.set_database(str(db))
        picked = select(key, _device())
    assert picked.source == "heuristic"
    x = torch.randn(64, 32).half()
    w = torch.randn(4, 32, 32).half().transpose(1, 2)
    offs = torch.tensor([16, 32, 48, 64], dtype=torch.int32)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        dispatch.clear_cache()
        assert_close(grouped_mm(x, w, offs=offs), x, w, offs, None)
    assert not [w for w in seen if "grouped table" in str(w.message)]  # no second one, caches dropped
    # tuning over it replaces it (its winners could not be read anyway), saying so
    with pytest.warns(RuntimeWarning, match="rewritten"):
        usertable.merge_table(table, _device().arch, {OTHER: POINTERS}, tune.table_meta("cpu"))
    assert read_doc(table)[1] == {OTHER: POINTERS}


def test_warmup_runs_the_grouped_entries(tmp_path, monkeypatch):
    from tritonblas.grouped import launch

    launched = []
    real = launch.run
    monkeypatch.setattr(launch, "run", lambda *a, **k: launched.append(a[6]) or real(*a, **k))
    shapes = tiny_grouped_file(tmp_path)
    result = runner.invoke(app, ["warmup", "--shapes", shapes])
    assert result.exit_code == 0, result.output
    assert result.output.count(": ran, ") == 2 and "from heuristic" in result.output
    assert len(launched) == 2


def test_table_folder_follows_the_database():
    assert table_folder("/data/tune/t.sqlite") == Path("/data/tune")
    assert table_folder("sqlite:////data/tune/t.sqlite?timeout=5") == Path("/data/tune")
    assert table_folder("postgresql://tuner@db/tb") == default_path().parent
    assert table_folder("sqlite:///:memory:") == default_path().parent
    assert user_table_path("sm_90", "/x/t.sqlite") == Path("/x/grouped-sm_90.json")


def test_a_candidate_that_fails_the_float64_check_gives_way(monkeypatch):
    wrong, right = POINTERS, POINTERS.model_copy(update={"block_n": 16})
    real = tuner.run_config

    def run(x, w, offs, config, shape):
        if config == right:
            time.sleep(0.05)  # slower: `wrong` ranks first and is checked first
            return real(x, w, offs, config, shape)
        return torch.zeros(shape.out_shape, dtype=x.dtype)

    monkeypatch.setattr(tuner, "run_config", run)
    entry = load_grouped_text("{op: grouped, groups: 2, m: 16, n: 32, k: 32}")
    row = tuner.tune_entry(entry, "cpu", configs=[wrong, right])
    assert (row.status, row.winner, row.best) == ("tuned", right, right)
    assert any(n.startswith("reject") for n in row.notes) and row.candidates == 2
    assert set(row.us) == set(row.torch_us) == {"balanced", "zipf"}
    monkeypatch.setattr(tuner, "run_config", lambda x, w, offs, config, shape: torch.zeros(shape.out_shape))
    row = tuner.tune_entry(entry, "cpu", configs=[wrong])
    assert (row.status, row.winner) == ("torch", GemmConfig.vendor())


def test_tune_entry_refuses_bad_arguments():
    entry = load_grouped_text("{op: grouped, groups: 2, m: 16, n: 32, k: 32}")
    with pytest.raises(ValueError, match="max_candidates"):
        tuner.tune_entry(entry, "cpu", max_candidates=0)
    with pytest.raises(ValueError, match="budget_s"):
        tuner.tune_entry(entry, "cpu", budget_s=0)


def load_grouped_text(entry: str):
    import tempfile

    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "one.yaml"
        path.write_text(f"dtypes: [fp16]\nshapes:\n  - {entry}\n")
        return load_grouped(path)[0]


@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_an_entrys_operands_have_its_layout_and_key(layout):
    """The tuner times what dispatch will key the entry's calls by: x column-major for a first "t", the
    weights (E, N, K) used transposed for a second."""
    from tritonblas.grouped.launch import is_col_major
    from tritonblas.grouped.select import key_of
    from tritonblas.shapes import GroupedEntry

    entry = GroupedEntry(groups=3, m=20, n=24, k=40, dtype="fp32", layout=layout)
    x, w, offs = tune.operands(entry, "cpu")
    assert (x.shape, w.shape) == ((20, 40), (3, 40, 24))
    assert (is_col_major(x), is_col_major(w)) == (layout[0] == "t", layout[1] == "t")
    shape = tune.shape_of(x, w, offs)
    assert key_of(shape, x.dtype, is_col_major(x), is_col_major(w)) == tune.entry_key(entry)
    assert tune.entry_key(entry).layout == layout
