"""`tritonblas db check` on shapes files' grouped entries: the grouped table beside a config file (--file)
or beside the database (--db), its arch, kernel hash and (--strict) triton version."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
from helpers.grouped import tiny_grouped_file
from typer.testing import CliRunner

from tritonblas.cli import app
from tritonblas.config import GemmConfig
from tritonblas.grouped.tune import entry_key, table_meta
from tritonblas.grouped.usertable import user_table_path, write_table
from tritonblas.shapes import load_grouped

ROOT = Path(__file__).resolve().parent.parent
runner = CliRunner()


def _check(*args: str):
    return runner.invoke(app, ["db", "check", *args])


def _config_folder(tmp_path: Path, entries, **meta) -> Path:
    """A copy of the shipped dense file with a grouped table beside it holding `entries`' keys."""
    folder = tmp_path / "configs"
    (folder / "grouped").mkdir(parents=True)
    shutil.copy(ROOT / "configs" / "sm_90.json", folder / "sm_90.json")
    winners = {entry_key(e): GemmConfig(block_m=16, block_n=32, block_k=32) for e in entries}
    write_table(folder / "grouped" / "sm_90.json", "sm_90", winners, {**table_meta("cpu"), **meta})
    return folder / "sm_90.json"


def test_the_shipped_grouped_table_covers_the_class_file():
    result = _check("--shapes", str(ROOT / "scripts/classes/grouped.yaml"), "--file",
                    str(ROOT / "configs/sm_90.json"))
    assert result.exit_code == 0, result.output
    assert "grouped entries have a winner for sm_90" in result.output


def test_an_entry_without_a_winner_is_listed_and_fails(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    entries = load_grouped(shapes)
    config_file = _config_folder(tmp_path, entries[:1])
    result = _check("--shapes", shapes, "--file", str(config_file))
    assert result.exit_code == 1
    assert "missing: grouped E=2 16x32x64 fp16 nt: no winner for 2d3d E=2" in result.output
    assert "1 of 2 grouped entries have no winner that serves" in result.output
    assert "all 0 problems" not in result.output  # no dense problem in the file: no dense report


@pytest.mark.parametrize(
    "meta, strict, reason",
    [
        ({"kernel_hash": "0123456789abcdef"}, False, "the table is stale (grouped kernel 0123456789abcdef"),
        ({"triton": "0.0.1"}, True, "tuned under triton 0.0.1"),
    ],
    ids=["stale", "strict"],
)
def test_a_table_that_does_not_serve_fails_every_entry(tmp_path, meta, strict, reason):
    shapes = tiny_grouped_file(tmp_path)
    config_file = _config_folder(tmp_path, load_grouped(shapes), **meta)
    result = _check("--shapes", shapes, "--file", str(config_file), *(["--strict"] if strict else []))
    assert result.exit_code == 1
    assert result.output.count(reason) == 2


def test_another_triton_serves_without_strict(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    config_file = _config_folder(tmp_path, load_grouped(shapes), triton="0.0.1")
    result = _check("--shapes", shapes, "--file", str(config_file))
    assert result.exit_code == 0, result.output


def test_a_table_of_another_arch_is_an_error(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    config_file = _config_folder(tmp_path, load_grouped(shapes), arch="sm_80")
    result = _check("--shapes", shapes, "--file", str(config_file))
    assert result.exit_code == 1
    assert "holds winners for sm_80, not sm_90" in result.output


def test_with_db_the_users_table_beside_the_database_is_checked(tmp_path):
    shapes = tiny_grouped_file(tmp_path)
    db = tmp_path / "t.sqlite"
    assert runner.invoke(app, ["db", "import", "--file", str(ROOT / "configs/sm_90.json"), "--db",
                               str(db)]).exit_code == 0
    result = _check("--shapes", shapes, "--db", str(db), "--arch", "sm_90")
    assert result.exit_code == 1
    assert f"no grouped table at {user_table_path('sm_90', str(db))}" in result.output
    winners = {entry_key(e): GemmConfig(block_m=16, block_n=32, block_k=32) for e in load_grouped(shapes)}
    write_table(user_table_path("sm_90", str(db)), "sm_90", winners, table_meta("cpu"))
    result = _check("--shapes", shapes, "--db", str(db), "--arch", "sm_90")
    assert result.exit_code == 0, result.output
