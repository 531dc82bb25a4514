"""What each program in scripts/ does, checked on a CPU (issue 35).

scripts/ holds only programs that the README, the docs or CI run (at most 11; shapes files beside
them). For each: `--help` exits 0 without a GPU, it reaches only public names of tritonblas/tuning_db
that exist, and what it does that a CPU can do is run:
- bench_report.py: the table and the per-file summary of a small bench JSON written by tritonblas.bench;
- h200_run.sh: its usage, an unknown mode refused before any install, every mode the docs name exists;
- dispatch_overhead.py, warmup_check.py: a real run in Triton's interpreter;
- graph_probe.py: its roofline limit, problem specs and operands (the timing needs a GPU);
- gpu_smoke.py: says it needs a GPU and exits non-zero;
- smem_sweep.py: `--summary` of the committed shared-memory records;
- mlp_step.py: tests/test_mlp_step.py runs its whole flow;
- cli_reference.py: tests/test_cli_reference.py regenerates docs/cli.md's reference with it.
- model_bench.py: tests/test_model_bench.py for the dense models; here, with transformers installed, a whole
  run of the toy mixtures of experts (their expert GEMMs torch._grouped_mm) through transparent mode.
- grouped_bench.py: its shapes file's entries, and without a GPU it says so and exits non-zero.

The subprocesses start together in a thread pool (about 10 s on 2 cores); under pytest-xdist each
runs on demand.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import importlib
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tritonblas import GemmConfig, Problem
from tritonblas.arch import device_for_arch
from tritonblas.bench import BenchRow, write_json
from tritonblas.selection.heuristic import roofline_us

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = ROOT / "scripts"
PROGRAMS = sorted(p for p in SCRIPTS.iterdir() if p.suffix in (".py", ".sh"))
PYTHON = [p for p in PROGRAMS if p.suffix == ".py"]
H200_RUN = SCRIPTS / "h200_run.sh"
# Commands with a --help: not ci-postgres.sh, which .ci/run sources (it starts a PostgreSQL server).
COMMANDS = [*PYTHON, H200_RUN]
MAX_PROGRAMS = 13
PACKAGES = ("tritonblas", "tuning_db")
TINY = ROOT / "tests" / "data" / "tiny.yaml"

# Runs in the interpreter: (id, argv after python). Each test below reads its own.
RUNS = {
    "dispatch_overhead": [str(SCRIPTS / "dispatch_overhead.py"), "--m", "4", "--n", "32", "--k", "32",
                          "--dtype", "fp16", "--calls", "3", "--trials", "1"],
    "gpu_smoke": [str(SCRIPTS / "gpu_smoke.py")],
    "grouped_bench": [str(SCRIPTS / "grouped_bench.py"),
                      "--shapes", str(SCRIPTS / "classes" / "grouped.yaml")],
    "smem_summary": [str(SCRIPTS / "smem_sweep.py"), "--summary"],
}


class Runner:
    """Runs each command once, in a thread pool (a subprocess each); results by key."""

    def __init__(self, env: dict[str, str]) -> None:
        self.env = env
        self.pool = cf.ThreadPoolExecutor(max_workers=max(2, os.cpu_count() or 2))
        self.futures: dict[str, cf.Future] = {}

    def submit(self, key: str, argv: list[str]) -> None:
        if key not in self.futures:
            self.futures[key] = self.pool.submit(
                subprocess.run, argv, cwd=ROOT, env=self.env, capture_output=True, text=True, timeout=180,
                check=False)

    def result(self, key: str, argv: list[str]) -> subprocess.CompletedProcess:
        self.submit(key, argv)
        return self.futures[key].result()


def _help_argv(script: Path) -> list[str]:
    return ["bash" if script.suffix == ".sh" else sys.executable, str(script), "--help"]


@pytest.fixture(scope="module")
def env(tmp_path_factory) -> dict[str, str]:
    return {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1",
            "TRITONBLAS_DB": str(tmp_path_factory.mktemp("scripts") / "absent.sqlite"),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}


@pytest.fixture(scope="module")
def runner(env):
    run = Runner(env)
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process runs them all: start them all at once
        for name, argv in RUNS.items():
            run.submit(name, [sys.executable, *argv])
        for script in COMMANDS:
            run.submit(f"help:{script.name}", _help_argv(script))
    yield run
    run.pool.shutdown(wait=True, cancel_futures=True)


def _run(runner: Runner, name: str) -> subprocess.CompletedProcess:
    return runner.result(name, [sys.executable, *RUNS[name]])


def _output(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def _module(name: str):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _docs_text() -> str:
    files = [ROOT / "README.md", ROOT / ".ci" / "run", *sorted((ROOT / "docs").rglob("*.md"))]
    return "\n".join(f.read_text() for f in files if f.exists())


# --- scripts/ holds the product only


def test_every_program_is_run_by_the_readme_docs_or_ci():
    # Programs, shapes files beside them, and packages a program imports: no data of experiments.
    program_text = "\n".join(p.read_text() for p in PROGRAMS)
    helper_packages = {d.name for d in SCRIPTS.iterdir() if (d / "__init__.py").is_file()
                       and re.search(rf"\bfrom {d.name}\b|\bimport {d.name}\b", program_text)}
    others = [p.relative_to(SCRIPTS) for p in SCRIPTS.rglob("*") if p.is_file() and p not in PROGRAMS
              and p.suffix not in (".yaml", ".txt") and p != SCRIPTS / "classes" / "README.md"
              and "__pycache__" not in p.parts and p.relative_to(SCRIPTS).parts[0] not in helper_packages]
    assert not others, others
    assert 0 < len(PROGRAMS) <= MAX_PROGRAMS, [p.name for p in PROGRAMS]
    docs = _docs_text()
    unnamed = [p.name for p in PROGRAMS if not re.search(rf"\b{re.escape(p.name)}\b", docs)]
    assert not unnamed, f"scripts/ programs nothing documents or runs (experiments leave main): {unnamed}"


@pytest.mark.parametrize("script", COMMANDS, ids=lambda p: p.name)
def test_help_exits_0_without_a_gpu(runner, script):
    proc = runner.result(f"help:{script.name}", _help_argv(script))
    assert proc.returncode == 0, _output(proc)
    assert "usage:" in proc.stdout, _output(proc)
    assert "Traceback" not in proc.stderr, _output(proc)


# --- bench_report.py: a bench JSON of three rows, one of them failed

BENCH_ROWS = [  # (problem, status, config, ms, torch_ms)
    (Problem(1024, 1024, 1024, "bf16"), "ok", GemmConfig(block_m=128, block_n=128, block_k=64), 0.010, 0.012),
    (Problem(4096, 4096, 4096, "fp16"), "ok", GemmConfig(backend="torch"), 0.200, 0.190),
    (Problem(512, 512, 512, "fp16", "nt", "row"), "launch_error", None, None, 0.004),
]


@pytest.fixture(scope="module")
def bench_json(tmp_path_factory) -> Path:
    # the eager loop's times: the ok rows' at 0.9x and 1.1x of torch's speed, the failed one none
    loops = [(0.010, 0.009), (0.200, 0.220), (None, None)]
    rows = [BenchRow(p, status, "shipped", cfg, ms, torch_ms, 1e-3, "", 0, *loop)
            for (p, status, cfg, ms, torch_ms), loop in zip(BENCH_ROWS, loops, strict=True)]
    path = tmp_path_factory.mktemp("bench") / "bench.json"
    write_json(path, rows, device_for_arch("sm_90", "NVIDIA H200"), "sqlite:///empty.sqlite")
    return path


def _report(env, *args: str) -> str:
    proc = subprocess.run([sys.executable, str(SCRIPTS / "bench_report.py"), *args], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, _output(proc)
    return proc.stdout


def _tflops(p: Problem, ms: float) -> str:
    return f"{2 * p.m * p.n * p.k / (ms * 1e9):.0f}"


def test_bench_report_table_has_a_row_per_problem(env, bench_json):
    lines = _report(env, str(bench_json)).splitlines()
    h200 = device_for_arch("sm_90")
    for p, status, cfg, ms, torch_ms in BENCH_ROWS:
        row = next(line for line in lines if line.startswith(f"| {p.short()} |"))
        if status == "ok":
            frac = roofline_us(p, h200) / (ms * 1e3)
            assert row.startswith(f"| {p.short()} | {_tflops(p, ms)} | {_tflops(p, torch_ms)} "
                                  f"| {torch_ms / ms:.2f}x | ")
            assert row.endswith(f" | {frac:.2f} | shipped | `{cfg.short()}` |")
        else:  # no time of ours: no ratio, the status instead of the config
            assert row == f"| {p.short()} | - | {_tflops(p, torch_ms)} | - | - | - | shipped | {status} |"
    assert "geomean speedup over torch.mm: 1.068x over 3 problems; lowest 0.95x" in lines  # sqrt(1.2 * 0.95)
    assert "in an eager loop of back-to-back calls: 0.995x over 2 problems; lowest 0.90x" in lines
    assert lines[-1] == "run-time fallbacks (configs triton refused): 0"


def test_bench_report_by_file_summarizes_the_problems_each_file_lists(env, bench_json, tmp_path):
    listed = tmp_path / "two.yaml"
    listed.write_text("shapes:\n  - {m: 1024, n: 1024, k: 1024, dtypes: [bf16]}\n"
                      "  - {m: 4096, n: 4096, k: 4096, dtypes: [fp16]}\n")
    other = tmp_path / "none.yaml"
    other.write_text("shapes:\n  - {m: 64, n: 64, k: 64, dtypes: [fp16]}\n")
    lines = _report(env, str(bench_json), "--by-file", str(listed), str(other)).splitlines()
    row = next(line for line in lines if line.startswith(f"| `{listed}` |"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    # two problems, geomean 1.068x, the lowest the torch.mm row, one below 0.97x, one torch.mm ran
    assert cells[1:6] == ["2", "1.068x", "0.95x (4096x4096x4096 fp16 nn, torch)", "1", "1"]
    assert f"| `{other}` | 0 | - | - | - | - | - | - |" in lines


# --- h200_run.sh: the modes


def _modes() -> list[str]:
    match = re.search(r'^MODES="([^"]+)"', H200_RUN.read_text(), re.MULTILINE)
    assert match, "h200_run.sh lists its modes in MODES"
    return match.group(1).split("|")


def _bash(*args: str) -> subprocess.CompletedProcess:
    # NO_WHEELS and an OUT of its own: were the mode check to come after the set-up, nothing is installed.
    env = {**os.environ, "NO_WHEELS": "1", "OUT": "/nonexistent/out"}
    return subprocess.run(["bash", str(H200_RUN), *args], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=30, check=False)


@pytest.mark.parametrize("args", [[], ["tune"], ["--devices"], ["check extra"]], ids=repr)
def test_h200_run_refuses_an_unknown_mode_before_doing_anything(args):
    proc = _bash(*args)
    assert proc.returncode == 2, _output(proc)
    assert f"unknown mode '{args[0] if args else ''}'" in proc.stderr, _output(proc)
    assert "usage: bash scripts/h200_run.sh " + "|".join(_modes()) in proc.stderr
    assert proc.stdout == "", _output(proc)


def test_h200_run_help_describes_every_mode_and_each_has_a_branch():
    proc = _bash("--help")
    assert proc.returncode == 0, _output(proc)
    branches = re.findall(r"^  ([a-z0-9-]+)\)", H200_RUN.read_text(), re.MULTILINE)
    assert sorted(branches) == sorted(_modes())
    for mode in _modes():
        assert re.search(rf"^\s+{mode}\s", proc.stdout, re.MULTILINE), f"--help does not describe {mode}"


def test_the_docs_name_only_modes_h200_run_has():
    # A mode of an older commit is named with it: "`bash scripts/h200_run.sh sk` of f8b1b77".
    text = _docs_text() + H200_RUN.read_text()
    named = set(re.findall(r"h200_run\.sh ([a-z][a-z0-9-]*)\b(?!`? of [0-9a-f]{7})", text))
    assert named, "the docs say how to run h200_run.sh"
    assert named <= set(_modes()), named - set(_modes())


def test_shell_scripts_parse():
    for script in (p for p in PROGRAMS if p.suffix == ".sh"):
        proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
        assert proc.returncode == 0, (script.name, proc.stderr)


# --- the GPU programs, as far as a CPU goes


def test_dispatch_overhead_times_each_op_beside_the_torch_op_it_replaces(runner):
    proc = _run(runner, "dispatch_overhead")
    assert proc.returncode == 0, _output(proc)
    rows = re.findall(r"^  (\S.*?)\s+([\d.]+)\s+([\d.]+)\s+([+-][\d.]+) us/call$", proc.stdout, re.MULTILINE)
    assert [r[0] for r in rows] == ["linear", "linear, w grad", "matmul", "linear, no C++ front",
                                    "routed F.linear", "routed F.linear, w grad", "routed, Python kernels",
                                    "add, not routed"], _output(proc)
    for _, torch_us, ours_us, diff in rows:
        assert float(torch_us) > 0 and float(ours_us) > 0
        assert abs(float(ours_us) - float(torch_us) - float(diff)) < 0.02, _output(proc)
    # In the interpreter our GEMMs run Triton's kernels on the CPU: far slower than torch's, which
    # shows that the rows time the calls they name.
    assert float(rows[0][2]) > float(rows[0][1])


def test_warmup_check_times_a_cold_and_a_warm_first_call(env, tmp_path):
    out = tmp_path / "warm.json"
    argv = [str(SCRIPTS / "warmup_check.py"), "--shapes", str(TINY), "--limit", "1", "--backend", "triton",
            "--json", str(out)]
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=180, check=False)
    assert proc.returncode == 0, _output(proc)
    rows = json.loads(out.read_text())["rows"]
    assert [r["problem"] for r in rows] == ["32x32x32 fp16 nn"]
    assert rows[0]["status"] in ("compiled", "cached") and rows[0]["config"]
    assert all(rows[0][key] > 0 for key in ("cold_s", "warm_s", "torch_first_s"))
    assert "warm first call: max" in proc.stdout


def test_gpu_smoke_says_it_needs_a_gpu(runner):
    proc = _run(runner, "gpu_smoke")
    assert proc.returncode != 0 and "runs on a GPU; none is available" in proc.stderr, _output(proc)


def test_grouped_bench_reads_its_shapes_and_says_it_needs_a_gpu(runner):
    proc = _run(runner, "grouped_bench")
    assert proc.returncode == 2 and "needs a CUDA GPU" in proc.stderr, _output(proc)


def test_smem_sweep_summary_of_the_committed_records(runner):
    proc = _run(runner, "smem_summary")
    assert proc.returncode == 0, _output(proc)
    summary = json.loads(proc.stdout.strip().splitlines()[-1])
    records = json.loads((ROOT / "tests" / "data" / "smem_records.json").read_text())
    assert summary["rows"] == len(records["rows"])
    assert summary["over_limit_accepted"] == 0  # the predicate refuses every config triton refused


@pytest.mark.parametrize("problem, expected_us", [
    (Problem(8192, 8192, 8192, "bf16"), 2 * 8192**3 / 800e6),  # compute bound: FLOPs / 800 TFLOP/s
    (Problem(1, 4096, 4096, "bf16"), 2 * (4096 + 4096 * 4096 + 4096) / 4.3e6),  # bytes / 4.3 TB/s
    (Problem(1, 4096, 4096, "fp32"), 4 * (4096 + 4096 * 4096 + 4096) / 4.3e6),
], ids=str)
def test_graph_probe_limit_is_the_class_roofline(problem, expected_us):
    assert _module("graph_probe").limit_us(problem) == pytest.approx(expected_us)


def test_graph_probe_reads_problem_specs_and_shapes_files():
    probe = _module("graph_probe")
    assert probe.problems_of("1000x1000x1000,16x32x64", "fp16") == [Problem(1000, 1000, 1000, "fp16"),
                                                                    Problem(16, 32, 64, "fp16")]
    assert probe.problems_of(str(TINY), "bf16") == [Problem(32, 32, 32, "fp16"),
                                                    Problem(16, 48, 64, "fp16", "nt", "row")]


def test_graph_probe_operands_follow_layout_and_bias():
    a, b, bias, out = _module("graph_probe").operand_set(Problem(16, 48, 64, "fp16", "nt", "row"), "cpu")
    assert a.shape == (16, 64) and a.is_contiguous()
    assert b.shape == (64, 48) and b.t().is_contiguous()  # "t": B is stored (N, K)
    assert bias.shape == (48,) and out.shape == (16, 48)


# --- model_bench.py: the mixtures of experts at toy size, every part, both sides (ours in the interpreter)

MOE_LAYERS, MOE_EXPERTS = 2, {"mixtral": (4, 2), "qwen3moe": (16, 4)}  # model: (experts, top-k) at --tiny
# aten::_grouped_mm calls of one profiled training step: two forward and backward passes, each layer's
# experts two grouped GEMMs forward and four backward (the input's and the weight's gradient of each)
MOE_GROUPED_PER_STEP = 2 * MOE_LAYERS * (2 + 4)


def test_model_bench_runs_the_mixtures_of_experts(env, tmp_path):
    pytest.importorskip("transformers")
    out = tmp_path / "moe.json"
    argv = [str(SCRIPTS / "model_bench.py"), "--device", "cpu", "--tiny", "--models", "moe", "--dtype",
            "fp32", "--layers", str(MOE_LAYERS), "--reps", "1", "--warmup", "0", "--train-batch", "2",
            "--train-seq", "8", "--prefill-seq", "8", "--prompt-len", "4", "--new-tokens", "2",
            "--decode-batches", "1", "2", "--profile", "--json", str(out)]
    proc = subprocess.run([sys.executable, *argv], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900, check=False)
    assert proc.returncode == 0, _output(proc)
    models = json.loads(out.read_text())["models"]
    assert [m["model"] for m in models] == list(MOE_EXPERTS)
    for m in models:
        assert (m["config"]["num_experts"], m["config"]["num_experts_per_tok"]) == MOE_EXPERTS[m["model"]]
        rows = [(r["part"], r["batch"]) for r in m["rows"]]
        assert rows == [("train", 2), ("prefill", 1), ("decode", 1), ("decode", 2), ("decode-graph", 1),
                        ("decode-graph", 2)], m["rows"]
        for r in m["rows"]:
            assert r["torch_ms"] > 0 and r["ours_ms"] > 0 and not any(k.startswith("error") for k in r), r
            if r["part"] != "train" and r["part"] != "prefill":  # both decoders, both sides: the same tokens
                assert r["torch_tokens_as_torch_eager"] == r["ours_tokens_as_torch_eager"] == 1.0, r
        # fp32 against the fp32 reference (its experts as the per-expert loop): rounding only, every token
        # routed to the reference's experts
        errors = m["logits_error"]
        assert errors["torch"] < 1e-5 and errors["ours"] < 1e-5, errors
        assert errors["experts_as_fp32_torch"] == errors["experts_as_fp32_ours"] == 1.0, errors
        ops = m["profile"]["host_ops"]
        # the experts run as grouped GEMMs; a routed one adds no aten::_grouped_mm of its own
        assert ops["torch"]["aten::_grouped_mm"] == MOE_GROUPED_PER_STEP, ops
        assert ops["ours"]["aten::_grouped_mm"] == MOE_GROUPED_PER_STEP, ops
    assert "| mixtral | train | b2 s8 |" in proc.stdout
    assert "| qwen3moe | decode-graph | b2 p4+2 |" in proc.stdout


# --- every script reaches only public names that exist


def _module_names(tree: ast.Module) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """(module, name, line) of every name imported from PACKAGES, and the local names bound to their
    modules (`from tritonblas import launch`, `import tritonblas.selection.heuristic as h`)."""
    imported: list[tuple[str, str, int]] = []
    modules: dict[str, str] = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module \
                and node.module.split(".")[0] in PACKAGES:
            for alias in node.names:
                imported.append((node.module, alias.name, node.lineno))
                full = f"{node.module}.{alias.name}"
                if _is_module(full):
                    modules[alias.asname or alias.name] = full
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in PACKAGES:
                    modules[alias.asname or alias.name.split(".")[0]] = alias.name if alias.asname \
                        else alias.name.split(".")[0]
    return imported, modules


def _is_module(name: str) -> bool:
    try:
        importlib.import_module(name)
    except ImportError:
        return False
    return True


def _has(module: str, name: str) -> bool:
    return hasattr(importlib.import_module(module), name) or _is_module(f"{module}.{name}")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


@pytest.mark.parametrize("script", PYTHON, ids=lambda p: p.name)
def test_scripts_reach_only_public_names_that_exist(script):
    tree = ast.parse(script.read_text(), str(script))
    imported, modules = _module_names(tree)
    problems = []
    for module, name, line in imported:
        if _private(name) or any(_private(part) for part in module.split(".")):
            problems.append(f"line {line}: private name {module}.{name}")
        elif not _has(module, name):
            problems.append(f"line {line}: {module}.{name} does not exist")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in modules:
            module = modules[node.value.id]
            if _private(node.attr):
                problems.append(f"line {node.lineno}: private name {module}.{node.attr}")
            elif not _has(module, node.attr):
                problems.append(f"line {node.lineno}: {module}.{node.attr} does not exist")
    assert not problems, (
        f"{script.name} reaches names of tritonblas/tuning_db that are private or gone:\n  "
        + "\n  ".join(problems)
        + "\nUse public API, or turn the script into a test.")
