"""The rough edges a new user hits (issue 18, part 7), through typer's CliRunner: each mistake is one
line on stderr, a non-zero exit, no traceback, and nothing written; and one convention across commands."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest
from helpers.cli import TINY, one_line_error
from helpers.db import key, winner
from typer.testing import CliRunner

from tritonblas.cli import app
from tuning_db import EnvIdentity, TuningDB

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("private_default_db")


@pytest.fixture
def tuned(tmp_path) -> Path:
    path = tmp_path / "tuned.sqlite"
    with TuningDB(str(path)) as db:
        db.upsert_winner(winner(key(16, 64, 32), env=EnvIdentity.current()))
    return path


@pytest.fixture
def text_file(tmp_path) -> Path:
    path = tmp_path / "notes.txt"
    path.write_text("not a tuning database\n" * 20)
    return path


def test_export_into_a_directory_is_one_line(tuned, tmp_path):
    (tmp_path / "out").mkdir()
    result = runner.invoke(app, ["db", "export", "--db", str(tuned), "-o", str(tmp_path / "out")])
    line = one_line_error(result)
    assert "is a directory" in line and list((tmp_path / "out").iterdir()) == []


@pytest.mark.parametrize("args", [
    ["explain", "64", "64", "64", "--arch", "sm_90"],
    ["bench", "--shapes", TINY],
    ["warmup", "--shapes", TINY],
    ["tune", "--shapes", TINY],
    ["db", "stats"], ["db", "list"], ["db", "check", "--shapes", TINY],
], ids=lambda a: " ".join(a[:2]))
def test_a_db_that_is_not_a_tuning_database_is_an_error_everywhere(args, text_file):
    line = one_line_error(runner.invoke(app, [*args, "--db", str(text_file)]), code=1)
    assert str(text_file) in line and "not an SQLite database" in line
    assert text_file.read_text() == "not a tuning database\n" * 20


@pytest.mark.parametrize("sizes, fragment", [
    (["-16", "24", "40"], "M must be from 1 to 16777216 (as in a shapes file), got -16"),
    (["16", "-24", "40"], "N must be from 1 to 16777216"),
    (["0", "24", "40"], "M must be from 1 to 16777216 (as in a shapes file), got 0"),
    (["33554432", "24", "40"], "got 33554432"),
    (["16", "24.5", "40"], "N must be a whole number from 1 to 16777216, got '24.5'"),
    (["16", "24", "x"], "K must be a whole number"),
])
def test_explain_sizes_are_checked_as_a_shapes_file_checks_them(no_gpu, sizes, fragment):
    assert fragment in one_line_error(runner.invoke(app, ["explain", *sizes, "--arch", "sm_90"]))
    assert fragment in one_line_error(runner.invoke(app, ["db", "show", *sizes]))


def test_a_shapes_file_refuses_the_same_sizes(tmp_path):
    for m in (0, 2**25):
        (tmp_path / "s.yaml").write_text(f"shapes:\n  - {{m: {m}, n: 24, k: 40}}\n")
        line = one_line_error(runner.invoke(app, ["db", "check", "--shapes", str(tmp_path / "s.yaml")]))
        assert "must be between 1 and 16777216" in line


@pytest.mark.parametrize("option", ["--json", "--plot"])
def test_bench_checks_its_outputs_before_it_runs(tmp_path, option):
    (tmp_path / "dir").mkdir()
    result = runner.invoke(app, ["bench", "--shapes", TINY, option, str(tmp_path / "dir")])
    assert f"{option} {tmp_path / 'dir'} is a directory" in one_line_error(result)
    assert "tritonblas vs torch.mm" not in result.output  # nothing ran
    (tmp_path / "file").write_text("x")
    result = runner.invoke(app, ["bench", "--shapes", TINY, option, str(tmp_path / "file" / "b")])
    line = one_line_error(result)
    assert "is not a directory" in line


def test_outputs_into_a_missing_folder_are_created_and_the_help_says_so(tuned, tmp_path):
    out = tmp_path / "new" / "deeper" / "sm_90.json"
    result = runner.invoke(app, ["db", "export", "--db", str(tuned), "-o", str(out)])
    assert result.exit_code == 0 and out.is_file(), result.output
    for args in (["db", "export"], ["bench"], ["tune"]):
        help_text = " ".join(runner.invoke(app, [*args, "--help"], env={"COLUMNS": "300"}).output.split())
        assert "Missing folders are created" in help_text, args


def test_exports_get_the_permissions_of_any_other_output(tuned, tmp_path):
    old = os.umask(0o022)
    try:
        out = tmp_path / "sm_90.json"
        assert runner.invoke(app, ["db", "export", "--db", str(tuned), "-o", str(out)]).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o644
        out.chmod(0o640)  # a file replaced keeps its permissions
        assert runner.invoke(app, ["db", "export", "--db", str(tuned), "-o", str(out)]).exit_code == 0
        assert stat.S_IMODE(out.stat().st_mode) == 0o640
    finally:
        os.umask(old)
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


def test_devices_are_indices_and_a_stored_device_is_a_name(tuned, tmp_path):
    texts = {tuple(a): " ".join(runner.invoke(app, [*a, "--help"], env={"COLUMNS": "300"}).output.split())
             for a in (["tune"], ["bench"], ["warmup"], ["db", "export"])}
    assert "--devices" in texts[("tune",)] and "GPU indices" in texts[("tune",)]
    assert "GPU index" in texts[("bench",)] and "GPU index" in texts[("warmup",)]
    assert "--device-name" in texts[("db", "export")] and "--device " not in texts[("db", "export")]
    out = tmp_path / "h200.json"
    result = runner.invoke(app, ["db", "export", "--db", str(tuned), "--device-name", "NVIDIA H200",
                                 "-o", str(out)])
    assert result.exit_code == 0 and json.loads(out.read_text())["header"]["device_name"] == "NVIDIA H200"


def test_one_dtype_default_and_enums_for_layout_and_bias(no_gpu, tuned):
    assert "16x64x32 fp16" in runner.invoke(app, ["db", "show", "16", "64", "32", "--dtype", "fp16", "--db",
                                                  str(tuned)], env={"COLUMNS": "300"}).output
    result = runner.invoke(app, ["db", "show", "16", "64", "32", "--db", str(tuned)])
    assert result.exit_code == 1 and "no winner stored for 16x64x32 bf16 nn" in result.stderr  # bf16 default
    assert "bf16" in runner.invoke(app, ["explain", "64", "64", "64", "--arch", "sm_90"]).output
    for args in (["db", "show", "1", "2", "3"], ["explain", "1", "2", "3", "--arch", "sm_90"]):
        assert runner.invoke(app, [*args, "--layout", "xn"]).exit_code == 2
        assert runner.invoke(app, [*args, "--bias", "diag"]).exit_code == 2


def test_import_and_check_take_the_file_the_same_way(tuned, tmp_path):
    out = tmp_path / "a.json"
    runner.invoke(app, ["db", "export", "--db", str(tuned), "-o", str(out)])
    fresh = tmp_path / "fresh.sqlite"
    assert runner.invoke(app, ["db", "import", "--file", str(out), "--db", str(fresh)]).exit_code == 0
    assert runner.invoke(app, ["db", "import", str(out), "--db", str(fresh)]).exit_code == 2


def test_stats_says_which_schema_version_is_which(tuned):
    out = runner.invoke(app, ["db", "stats", "--db", str(tuned)]).output
    from tuning_db import SCHEMA_VERSION

    assert f"db_schema_version: {SCHEMA_VERSION}" in out
    assert "config_file_version: 2 (the header schema_version" in out


@pytest.mark.parametrize("arch, sms", [("sm_80", 108), ("sm_86", 72), ("sm_90", 132), ("sm_100", 148),
                                       ("sm_120", 170), ("gfx942", 304)])
def test_explain_takes_sm_counts_per_arch(no_gpu, arch, sms):
    result = runner.invoke(app, ["explain", "4096", "4096", "4096", "--arch", arch, "--top", "1"])
    assert result.exit_code == 0, result.output
    assert f"on {arch}, {sms} SMs" in result.output
    result = runner.invoke(app, ["explain", "4096", "4096", "4096", "--arch", arch, "--sms", "84",
                                 "--top", "1"])
    assert f"on {arch}, 84 SMs" in result.output


def test_an_unknown_arch_is_one_line(no_gpu, tuned, tmp_path):
    line = one_line_error(runner.invoke(app, ["explain", "64", "64", "64", "--arch", "sm_1"]))
    assert "unknown arch 'sm_1'; known: sm_80" in line and "sm_100" in line and "sm_120" in line
    line = one_line_error(runner.invoke(app, ["db", "export", "--db", str(tuned), "--arch", "sm_1",
                                              "-o", str(tmp_path / "x.json")]))
    assert "unknown arch 'sm_1'" in line and not (tmp_path / "x.json").exists()


def test_sms_needs_an_arch(no_gpu):
    assert "--sms goes with --arch" in one_line_error(runner.invoke(app, ["explain", "64", "64", "64",
                                                                          "--sms", "84"]))


def test_select_without_a_gpu_says_how_to_ask_for_one(monkeypatch):
    import torch

    import tritonblas

    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    with pytest.raises(RuntimeError, match=r"sees none.*device_for_arch\('sm_90'\).*explain M N K --arch"):
        tritonblas.select(64, 64, 64, "bf16")
    from tritonblas.arch import device_for_arch

    assert tritonblas.select(64, 64, 64, "bf16", device=device_for_arch("sm_80")).device.sm_count == 108


@pytest.mark.parametrize("args, expected", [
    (["explain"], "Missing argument 'm'. (see 'tritonblas explain --help')"),
    (["bench", "--nope"], "No such option: --nope (see 'tritonblas bench --help')"),
    (["db", "show", "--layout", "xx", "1", "2", "3"], "Invalid value for '--layout'"),
    (["nocmd"], "No such command 'nocmd'. (see 'tritonblas --help')"),
])
def test_typer_usage_errors_are_one_line_too(args, expected):
    """typer's own usage errors (unknown option or command, missing argument, bad choice) read like ours:
    one line naming the problem and the help to run, not a usage line and a five-line box."""
    assert expected in one_line_error(runner.invoke(app, args, prog_name="tritonblas"))


def test_tritonblas_tune_usage_error_is_one_line():
    from tritonblas.cli import tune_app

    line = one_line_error(runner.invoke(tune_app, ["--nope"], prog_name="tritonblas-tune"))
    assert "No such option: --nope" in line and "tritonblas-tune --help" in line


def test_no_arguments_still_show_help():
    result = runner.invoke(app, [], prog_name="tritonblas")
    assert "Usage: tritonblas" in result.output and "Commands" in result.output
