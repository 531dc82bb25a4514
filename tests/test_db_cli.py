"""`tritonblas db ...` through typer's CliRunner: help, export/import, list/show/stats/prune, check."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers.db import BIG, ENV, SMALL, key, measurement, winner
from typer.testing import CliRunner

from tritonblas.cli.db import app
from tuning_db import EnvIdentity, TuningDB

runner = CliRunner()
CURRENT = EnvIdentity.current()
STALE = CURRENT.model_copy(update={"kernel_hash": "0ld"})
SHAPES = """
dtypes: [fp16]
shapes:
  - {m: [16, 32], n: 64, k: 32}
"""


def run(*args: str | Path, code: int = 0) -> str:
    # Wide enough that rich's tables keep every cell on one line.
    result = runner.invoke(app, [str(a) for a in args], env={"COLUMNS": "300"})
    assert result.exit_code == code, result.output
    if code:  # a handled failure: one message, never a traceback
        assert isinstance(result.exception, SystemExit), result.exception
    return result.output


@pytest.fixture
def tuned(tmp_path) -> Path:
    """A database with 16x64x32 fresh, 32x64x32 stale, and one gfx942 winner (all tuned here)."""
    path = tmp_path / "tuned.sqlite"
    with TuningDB(str(path)) as db:
        db.upsert_winner(winner(key(16, 64, 32), ms=0.5, config=BIG, env=CURRENT))
        db.upsert_winner(winner(key(32, 64, 32), ms=0.7, env=STALE))
        db.upsert_winner(winner(key(32, 64, 32, arch="gfx942", device_name="MI300X", sm_count=304),
                                env=CURRENT))
        db.record_measurements(key(16, 64, 32), CURRENT, [measurement(BIG, 0.5), measurement(
            SMALL, None, "out_of_resources", note="needs 300 KB")])
    return path


@pytest.fixture
def shapes(tmp_path) -> Path:
    path = tmp_path / "shapes.yaml"
    path.write_text(SHAPES)
    return path


@pytest.mark.parametrize("command", sorted(c.name for c in app.registered_commands))
def test_every_command_has_help(command):
    out = run(command, "--help")
    assert "Usage" in out and "--db" in out


def test_export_import_export_is_byte_identical(tuned, tmp_path):
    out = run("export", "--db", tuned, "--arch", "sm_90", "-o", tmp_path / "a.json")
    assert f"wrote 1 winners for sm_90 (NVIDIA H200; triton {CURRENT.triton_version})" in out
    fresh = tmp_path / "fresh.sqlite"
    assert "imported 1 of 1 entries" in run("import", "--file", tmp_path / "a.json", "--db", fresh)
    run("export", "--db", fresh, "-o", tmp_path / "b.json")  # the only arch there: no --arch needed
    assert (tmp_path / "a.json").read_bytes() == (tmp_path / "b.json").read_bytes()
    out = run("import", "--file", tmp_path / "a.json", "--db", fresh, "--policy", "db")
    assert "imported 0 of 1 entries" in out and "1 kept" in out


def test_export_needs_arch_when_the_db_has_several(tuned, tmp_path):
    out = run("export", "--db", tuned, "-o", tmp_path / "x.json", code=2)
    assert "--arch is needed" in out and "gfx942, sm_90" in out


def test_import_of_a_bad_file_names_the_entry_and_creates_nothing(tuned, tmp_path):
    run("export", "--db", tuned, "--arch", "sm_90", "-o", tmp_path / "a.json")
    data = json.loads((tmp_path / "a.json").read_text())
    data["entries"][0]["config"]["num_warps"] = 3
    (tmp_path / "bad.json").write_text(json.dumps(data))
    target = tmp_path / "never.sqlite"
    out = run("import", "--file", tmp_path / "bad.json", "--db", target, code=1)
    assert f"{tmp_path / 'bad.json'}: entries[0] (16x64x32): field 'config.num_warps'" in out
    assert not target.exists()
    run("import", "--file", tmp_path / "a.json", "--policy", "newest", "--db", target, code=2)


def test_list_marks_stale_winners(tuned):
    out = run("list", "--db", tuned)
    assert "3 winners" in out and out.count("fresh") == 2 and out.count("stale") == 1
    out = run("list", "--db", tuned, "--stale")
    assert "1 winners" in out and "fresh" not in out
    assert "1 winners" in run("list", "--db", tuned, "--fresh", "--arch", "sm_90")
    run("list", "--db", tuned, "--fresh", "--stale", code=2)


def test_show_lists_winner_and_measurements(tuned):
    out = run("show", "16", "64", "32", "--dtype", "fp16", "--db", tuned)
    assert BIG.short() in out and "out_of_resources" in out and "needs 300 KB" in out
    assert "no winner stored for 8x8x8 bf16 nn" in run("show", "8", "8", "8", "--db", tuned, code=1)
    run("show", "16", "64", "32", "--layout", "xx", "--db", tuned, code=2)
    run("show", "16", "64", "32", "--dtype", "fp64", "--db", tuned, code=2)


def test_stats_and_prune(tuned):
    out = run("stats", "--db", tuned)
    assert "winners: 3" in out and "stale_winners: 1" in out and "winners_by_arch: gfx942=1, sm_90=2" in out
    assert "would remove 1 stale winners" in run("prune", "--dry-run", "--db", tuned)
    assert "removed 1 stale rows" in run("prune", "--db", tuned)
    assert "stale_winners: 0" in run("stats", "--db", tuned)


def test_check_a_db_lists_missing_and_stale_problems(tuned, shapes):
    out = run("check", "--shapes", shapes, "--db", tuned, "--arch", "sm_90", code=1)
    assert "missing: 32x64x32 fp16 nn on sm_90: only stale winners (triton" in out
    assert "16x64x32" not in out and "1 of 2 problems have no winner that serves for sm_90" in out
    out = run("check", "--shapes", shapes, "--db", tuned, "--arch", "sm_90", "--dtypes", "fp16,bf16", code=1)
    assert "3 of 4 problems" in out
    out = run("check", "--shapes", shapes, "--db", tuned, "--arch", "gfx942", code=1)
    assert "missing: 16x64x32 fp16 nn on gfx942: no winner" in out


def test_check_a_file_against_its_own_arch_and_the_running_code(tmp_path, shapes):
    db_path = tmp_path / "full.sqlite"
    with TuningDB(str(db_path)) as db:  # tuned on an H100; the file is checked on this CPU-only box
        for m in (16, 32):
            db.upsert_winner(winner(key(m, 64, 32, device_name="NVIDIA H100"), env=CURRENT))
    run("export", "--db", db_path, "-o", tmp_path / "sm_90.json")
    out = run("check", "--shapes", shapes, "--file", tmp_path / "sm_90.json")
    running = CURRENT.triton_version
    assert f"all 2 problems have a fresh winner (of the running triton {running}) for sm_90" in out
    run("check", "--shapes", shapes, "--file", tmp_path / "sm_90.json", "--arch", "gfx942", code=2)
    data = json.loads((tmp_path / "sm_90.json").read_text())
    data["header"]["kernel_hash"] = "0ld"  # tuned for other kernel sources: every entry is stale
    (tmp_path / "old.json").write_text(json.dumps(data))
    out = run("check", "--shapes", shapes, "--file", tmp_path / "old.json", code=1)
    assert out.count("only stale winners (triton") == 2


@pytest.fixture
def tuned_under_36(tmp_path, monkeypatch) -> tuple[Path, Path]:
    """Both problems of SHAPES tuned for the running kernels under triton 3.6.0 (a DB and its export);
    the running code then reports triton 3.9.0."""
    from tritonblas import identity

    db_path, env = tmp_path / "t36.sqlite", CURRENT.model_copy(update={"triton_version": "3.6.0"})
    with TuningDB(str(db_path)) as db:
        for m in (16, 32):
            db.upsert_winner(winner(key(m, 64, 32), env=env))
    run("export", "--db", db_path, "-o", tmp_path / "sm_90.json")
    monkeypatch.setattr(identity, "triton_version", lambda: "3.9.0")
    return db_path, tmp_path / "sm_90.json"


OTHER = "2 tuned under triton 3.6.0 (another version than the running 3.9.0)"
COUNTED = f"holds 2 winners for sm_90 that serve (2 problems); {OTHER}"


@pytest.mark.parametrize("source", ["--file", "--db"])
def test_check_passes_on_another_triton_versions_winners_and_counts_them(tuned_under_36, shapes, source):
    where = tuned_under_36[1] if source == "--file" else tuned_under_36[0]
    out = run("check", "--shapes", shapes, source, where)
    assert COUNTED in out and "all 2 problems have a winner for sm_90" in out
    assert "0 a fresh winner (of the running triton 3.9.0), 2 only one of another triton version" in out
    out = run("check", "--shapes", shapes, source, where, "--strict", code=1)
    assert out.count("only winners of another triton version (3.6.0); --strict wants") == 2
    assert COUNTED in out and "2 of 2 problems have no fresh winner" in out


def test_check_refuses_other_kernels_in_both_modes(tuned_under_36, shapes, tmp_path):
    data = json.loads(tuned_under_36[1].read_text())
    data["header"]["kernel_hash"] = "0ld"
    (tmp_path / "old.json").write_text(json.dumps(data))
    for strict in ([], ["--strict"]):
        out = run("check", "--shapes", shapes, "--file", tmp_path / "old.json", *strict, code=1)
        assert out.count("only stale winners (triton 3.6.0, kernels 0ld)") == 2
        assert "another version" not in out


def test_import_list_and_stats_name_another_triton_versions_winners(tuned_under_36, tmp_path):
    db = tmp_path / "new.sqlite"
    out = run("import", "--file", tuned_under_36[1], "--db", db)
    assert "imported 2 of 2 entries" in out and "stale" not in out
    assert f"{OTHER}: they serve until a tuning run" in out
    out = run("list", "--db", db)
    assert out.count("triton 3.6.0") == 2 and "stale" not in out and "fresh" not in out
    assert "2 winners" in run("list", "--db", db, "--fresh")
    assert "no winners" in run("list", "--db", db, "--stale")
    out = run("stats", "--db", db)
    assert "fresh_winners: 0" in out and "other_triton_winners: 2" in out and "stale_winners: 0" in out
    assert "removed 0 stale rows" in run("prune", "--db", db)


def test_export_writes_host_names_only_with_the_option(tuned, tmp_path):
    run("export", "--db", tuned, "--arch", "sm_90", "-o", tmp_path / "a.json")
    assert '"host"' not in (tmp_path / "a.json").read_text()
    run("export", "--db", tuned, "--arch", "sm_90", "--with-host", "-o", tmp_path / "b.json")
    assert '"host": "node-1"' in (tmp_path / "b.json").read_text()
    out = run("import", "--file", tmp_path / "b.json", "--db", tmp_path / "c.sqlite")
    assert "imported 1 of 1 entries" in out


def test_check_argument_errors(tuned, shapes, tmp_path):
    run("check", "--shapes", shapes, "--db", tuned, "--file", tmp_path / "x.json", code=2)
    (tmp_path / "bad.yaml").write_text("shapes:\n  - {m: 0, n: 1, k: 1}\n")
    assert "shapes entry 1" in run("check", "--shapes", tmp_path / "bad.yaml", "--db", tuned, code=2)
    assert "cannot read config file" in run("check", "--shapes", shapes, "--file", tmp_path / "no.json",
                                            code=1)


def test_corrupt_or_missing_database_is_one_clear_line(tmp_path):
    corrupt = tmp_path / "corrupt.sqlite"
    corrupt.write_bytes(b"definitely not sqlite" * 10)
    for command in ("stats", "list", "prune"):
        out = run(command, "--db", corrupt, code=1)
        assert f"error: {corrupt}: not an SQLite database" in out and "Traceback" not in out
    assert corrupt.read_bytes() == b"definitely not sqlite" * 10
    missing = tmp_path / "typo.sqlite"
    assert f"error: --db: no tuning database at {missing}" in run("list", "--db", missing, code=2)
    assert not missing.exists()


def test_default_database_comes_from_the_environment(tuned, monkeypatch):
    monkeypatch.setenv("TRITONBLAS_DB", str(tuned))
    assert "winners: 3" in run("stats")
    assert ENV.kernel_hash not in run("stats")
