"""The `tritonblas` and `tritonblas-tune` commands through typer's CliRunner: help, version, and every
user mistake ending in one clear line and exit code 2. No kernel runs here (see test_cli_e2e.py)."""

import pytest
from helpers.cli import TINY
from typer.main import get_command
from typer.testing import CliRunner

import tritonblas
from tritonblas.cli import app, tune_app
from tritonblas.cli import common as cli_common

runner = CliRunner()
pytestmark = pytest.mark.usefixtures("private_default_db")


def _commands(group, path=()):
    for name, cmd in group.commands.items():
        yield (*path, name), cmd
        if hasattr(cmd, "commands"):
            yield from _commands(cmd, (*path, name))


ALL_COMMANDS = list(_commands(get_command(app)))


def test_command_tree_is_complete():
    names = {" ".join(p) for p, _ in ALL_COMMANDS}
    assert {"tune", "bench", "explain", "warmup", "db", "db export", "db import", "db check", "db list",
            "db show", "db stats", "db prune"} <= names


@pytest.mark.parametrize("path", [p for p, _ in ALL_COMMANDS], ids=" ".join)
def test_every_command_has_help(path):
    cmd = dict(ALL_COMMANDS)[path]
    assert (cmd.help or "").strip(), f"{' '.join(path)} has no help text"
    result = runner.invoke(app, [*path, "--help"])
    assert result.exit_code == 0, result.output
    assert "Usage: tritonblas " + " ".join(path) in " ".join(result.output.split())
    for param in cmd.params:
        if param.name != "help" and getattr(param, "param_type_name", "") == "option":
            assert (param.help or "").strip(), f"{' '.join(path)} {param.opts} has no help"


@pytest.mark.parametrize("path", [(), *(p for p, _ in ALL_COMMANDS)],
                         ids=lambda p: " ".join(p) or "tritonblas")
def test_every_command_shows_examples_of_itself(path):
    """Every command and subcommand (each `db` one too) ends its help with examples that run it."""
    result = runner.invoke(app, [*path, "--help"], env={"COLUMNS": "200"})
    assert result.exit_code == 0 and "Examples" in result.output
    examples = result.output.split("Examples", 1)[1]
    assert " ".join(["tritonblas", *path]) + (" " if path else "") in examples


def test_tune_app_examples_name_tritonblas_tune():
    help_text = runner.invoke(tune_app, ["--help"], env={"COLUMNS": "200"}).output
    assert "tritonblas-tune --shapes" in help_text and "tritonblas tune" not in help_text
    assert "tritonblas tune --shapes" in runner.invoke(app, ["tune", "--help"], env={"COLUMNS": "200"}).output


def test_every_command_attaches_help_one_way():
    """Each command's help is its function's docstring (cli.common.command), examples included."""
    import inspect

    for path, cmd in ALL_COMMANDS:
        if cmd.callback is not None:
            assert (cmd.help or "").strip() == (inspect.getdoc(cmd.callback) or "").strip(), path


def test_tune_app_help_and_version():
    result = runner.invoke(tune_app, ["--help"])
    assert result.exit_code == 0 and "--shapes" in result.output and "--devices" in result.output
    result = runner.invoke(tune_app, ["--version"])
    assert result.exit_code == 0 and result.output.startswith(f"tritonblas {tritonblas.__version__}")


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0
    assert result.output.startswith(f"tritonblas {tritonblas.__version__} (triton ")


def test_no_arguments_shows_help():
    result = runner.invoke(app, [])
    assert "Usage" in result.output and "explain" in result.output


@pytest.mark.parametrize("args", [
    ["tune", "--shapes", TINY],
    ["bench", "--shapes", TINY],
])
def test_no_gpu_is_one_line_and_exit_2(no_gpu, tmp_path, args):
    result = runner.invoke(app, [*args, "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2
    lines = result.stderr.strip().splitlines()
    assert lines == [cli_common.NO_GPU_MESSAGE]
    assert "CUDA or ROCm GPU" in lines[0] and "TRITON_INTERPRET=1" in lines[0]
    assert not (tmp_path / "t.sqlite").exists()  # nothing written


def test_tune_app_no_gpu(no_gpu):
    result = runner.invoke(tune_app, ["--shapes", TINY])
    assert result.exit_code == 2 and result.stderr.strip() == cli_common.NO_GPU_MESSAGE


def test_explain_without_gpu_asks_for_arch(no_gpu):
    result = runner.invoke(app, ["explain", "64", "64", "64"])
    assert result.exit_code == 2 and "--arch sm_90" in result.stderr


@pytest.mark.parametrize("args", [
    ["tune", "--shapes", TINY, "--dtypes", "fp8"],
    ["bench", "--shapes", TINY, "--dtypes", "fp16,int4"],  # int8 is a dtype (quantized)
    ["explain", "64", "64", "64", "--dtype", "float16"],
    ["db", "check", "--shapes", TINY, "--dtypes", "f32"],
])
def test_unknown_dtype_lists_valid_ones(args):
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert "unknown dtype" in result.stderr and "valid dtypes: fp16, bf16, fp32" in result.stderr


@pytest.mark.parametrize("text, fragment", [
    ("shapes:\n  - {m: 1, n: 2, k: 3, layout: xn}\n", ":2: shapes entry 1: field 'layout'"),
    ("shapes: [\n", "invalid YAML"),
])
def test_bad_shapes_file_names_file_entry_field(tmp_path, text, fragment):
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    for cmd in (["tune"], ["bench"], ["db", "check"]):
        result = runner.invoke(app, [*cmd, "--shapes", str(bad), "--db", str(tmp_path / "t.sqlite")])
        assert result.exit_code == 2, (cmd, result.output)
        assert str(bad) in result.stderr and fragment in result.stderr
        assert "Traceback" not in result.output
    assert not (tmp_path / "t.sqlite").exists()


def test_missing_shapes_file(tmp_path):
    result = runner.invoke(app, ["tune", "--shapes", str(tmp_path / "none.yaml")])
    assert result.exit_code == 2 and "none.yaml: cannot read shapes file" in result.stderr


@pytest.mark.parametrize("devices, fragment", [
    ("a,b", "comma-separated GPU indices"),
    ("0,0", "lists a device twice"),
    (",", "names no device"),
    ("-1", "non-negative"),
])
def test_bad_devices(tmp_path, monkeypatch, devices, fragment):
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # any index is a CPU worker: only the syntax is checked
    result = runner.invoke(app, ["tune", "--shapes", TINY, "--devices", devices,
                                 "--db", str(tmp_path / "t.sqlite")])
    assert result.exit_code == 2 and fragment in result.stderr
    assert not (tmp_path / "t.sqlite").exists()


def test_device_beyond_the_gpus_present(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(cli_common, "gpu_count", lambda: 2)
    result = runner.invoke(app, ["tune", "--shapes", TINY, "--devices", "0,2"])
    assert result.exit_code == 2 and "--devices 2 does not exist; this host has GPUs 0..1" in result.stderr


@pytest.mark.parametrize("args, fragment", [
    (["--budget-s", "0"], "--budget-s must be a positive number"),
    (["--budget-s", "nan"], "--budget-s must be a positive number"),
])
def test_bad_tune_options(tmp_path, args, fragment):
    result = runner.invoke(app, ["tune", "--shapes", TINY, "--db", str(tmp_path / "t.sqlite"), *args])
    assert result.exit_code == 2 and fragment in result.stderr


def test_export_to_a_directory_is_refused(tmp_path):
    result = runner.invoke(app, ["tune", "--shapes", TINY, "--db", str(tmp_path / "t.sqlite"),
                                 "--export", str(tmp_path)])
    assert result.exit_code == 2 and "is a directory" in result.stderr


def test_bench_with_missing_db_file(tmp_path):
    result = runner.invoke(app, ["bench", "--shapes", TINY, "--db", str(tmp_path / "nope.sqlite")])
    assert result.exit_code == 2 and "error: --db: no tuning database at" in result.stderr


def test_explain_for_an_arch_without_gpu(no_gpu, tmp_path):
    from tritonblas.selection import dispatch
    from tuning_db import TuningDB

    TuningDB(str(tmp_path / "empty.sqlite")).close()
    dispatch.set_shipped_dir(tmp_path)  # no shipped file either
    try:
        result = runner.invoke(app, ["explain", "4096", "4096", "4096", "--dtype", "bf16", "--arch", "sm_90",
                                     "--top", "3", "--db", str(tmp_path / "empty.sqlite")])
    finally:
        dispatch.set_shipped_dir(None)
    assert result.exit_code == 0, result.output
    out = result.output
    assert "4096x4096x4096 bf16, layout nn, bias none, on sm_90, 132 SMs" in out
    assert "source:   heuristic" in out
    assert "top 3 of" in out and "*1" in out  # with no tuned data the heuristic's first is selected


def test_explain_uses_the_shipped_sm_90_file(no_gpu, tmp_path):
    from tuning_db import TuningDB

    TuningDB(str(tmp_path / "empty.sqlite")).close()
    result = runner.invoke(app, ["explain", "4096", "4096", "4096", "--dtype", "bf16", "--arch", "sm_90",
                                 "--db", str(tmp_path / "empty.sqlite")])
    assert result.exit_code == 0, result.output
    assert "source:   shipped" in result.output


DIRECT = tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64)
STREAMK = tritonblas.GemmConfig(block_m=64, block_n=64, block_k=64, streamk=True, grid=132)


@pytest.mark.parametrize("config, kernel_ms, torch_ms, explicit, routed", [
    (DIRECT, 0.100, 0.200, "run the kernel", "run the kernel"),
    (DIRECT, 0.100, 0.102, "run the kernel", "calls (launched from C++) run the kernel"),
    (DIRECT, 0.100, 0.1005, "run the kernel", "beats torch's op by 0.5 us, less than the 1 us"),
    (STREAMK, 0.100, 0.105, "beats torch's op by 5.0 us, less than the 10 us", "less than the 165 us"),
    (STREAMK, 0.100, 0.300, "run the kernel", "calls (launched from C++) run the kernel"),
    (DIRECT, 0.020, 0.100, "run the kernel", "run the kernel"),  # (wins by 80 us: more than the trip costs)
])
def test_explain_says_what_eager_calls_run(no_gpu, tmp_path, config, kernel_ms, torch_ms, explicit, routed):
    """A kernel that wins by less than the host time its call costs above torch's runs only under graph
    capture (call.path.eager_torch_reason): explain says so for explicit and routed calls."""
    from helpers.dispatch import put, winner

    from tritonblas.arch import device_for_arch
    from tritonblas.problem import Problem

    url = str(tmp_path / "db.sqlite")
    put(url, winner(Problem(2048, 2048, 2048, "bf16"), device_for_arch("sm_90"), config, kernel_ms,
                    torch_ms=torch_ms))
    result = runner.invoke(app, ["explain", "2048", "2048", "2048", "--dtype", "bf16", "--arch", "sm_90",
                                 "--db", url])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())  # (the console wraps long lines)
    assert f"torch.mm {torch_ms:.4g} ms in the same run" in text.split("time:")[1].split("eager:")[0]
    eager, routed_calls = text.split("eager:")[1].split("routed:")
    assert explicit in eager and routed in routed_calls.split("heuristic ranking")[0], result.output


@pytest.mark.parametrize("kernel_ms, eager", [(0.0045, "explicit calls run triton P 64x64x64"),
                                              (0.0300, None)])
def test_explain_says_when_eager_explicit_calls_of_a_torch_pick_run_its_kernel(no_gpu, tmp_path, monkeypatch,
                                                                             kernel_ms, eager):
    """torch.mm won the tuning run, its fastest kernel by 0.1 us (call.path.eager_kernel_reason): explicit
    eager calls run the kernel; a kernel longer than such a call's host time: torch.mm only."""
    from helpers.dispatch import put, winner

    from tritonblas import native
    from tritonblas.arch import device_for_arch
    from tritonblas.call import path as call_path
    from tritonblas.launch import direct
    from tritonblas.problem import Problem
    from tuning_db import EnvIdentity, Measurement, ProblemKey

    monkeypatch.setattr(direct, "expected", lambda: True)  # (this triton's launcher: as on the H200)
    monkeypatch.setattr(native, "front", lambda: None)  # (the rule holds without the C++ front)
    url, device = str(tmp_path / "db.sqlite"), device_for_arch("sm_90")
    problem = Problem(512, 512, 512, "bf16")
    torch_ms = kernel_ms - 0.0001
    put(url, winner(problem, device, tritonblas.GemmConfig.vendor(), torch_ms, torch_ms=torch_ms),
        measurements=[(ProblemKey.from_problem(problem, device), EnvIdentity.current(),
                       [Measurement(config=DIRECT, status="ok", median_ms=kernel_ms)])])
    result = runner.invoke(app, ["explain", "512", "512", "512", "--dtype", "bf16", "--arch", "sm_90",
                                 "--db", url])
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "backend: torch" in text
    if eager is None:
        assert "eager:" not in text
    else:
        assert eager in text.split("eager:")[1] and "torch.mm under CUDA graph capture" in text
        host_us = call_path.EXPLICIT_TORCH_HOST_US
        assert f"shorter than an explicit call's host time ({host_us:.0f} us)" in text


@pytest.mark.parametrize("flag, family", [("--streamk", "SK "), ("--no-streamk", "P ")])
def test_explain_family_restriction(no_gpu, flag, family):
    result = runner.invoke(app, ["explain", "256", "256", "65536", "--arch", "sm_90", flag])
    assert result.exit_code == 0, result.output
    selected = next(line for line in result.output.splitlines() if line.startswith("selected:"))
    assert selected.split(":", 1)[1].strip().startswith(family)


@pytest.mark.parametrize("args, fragment", [
    (["--arch", "sm_1"], "unknown arch 'sm_1'"),
    (["--layout", "xx"], "'xx' is not one of"),
    (["--bias", "diag"], "'diag' is not one of"),
])
def test_explain_bad_arguments(no_gpu, args, fragment):
    result = runner.invoke(app, ["explain", "64", "64", "64", *args])
    assert result.exit_code == 2 and fragment in result.output
