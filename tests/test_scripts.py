"""scripts/ keeps running against today's code (issue 14).

Every `scripts/*.py` (found by glob, so a script added later is covered without touching this file):
- `--help` exits 0 and prints its usage, with no GPU visible (argparse runs before torch or CUDA);
- reaches only public names of `tritonblas` and `tuning_db`, and every name it takes from them exists
  (checked on the source: a GPU-only script cannot run here, but a renamed or private import fails);
and the scripts that need no GPU run for real on the data in docs/benchmarks/.

The subprocesses run in parallel (about 10 s on 2 cores); under pytest-xdist each runs on demand.
"""

from __future__ import annotations

import ast
import concurrent.futures as cf
import importlib
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
SCRIPTS = sorted((ROOT / "scripts").glob("*.py"))
SHELL = sorted((ROOT / "scripts").glob("*.sh"))
BENCH = ROOT / "docs" / "benchmarks"
PACKAGES = ("tritonblas", "tuning_db")

# Offline scripts run for real: (id, argv after the script, text the output must hold).
RUNS = {
    "bench_report": (["bench_report.py", str(BENCH / "h200-bench-shipped.json")], "geomean speedup"),
    "heuristic_vs_sweep": (["heuristic_vs_sweep.py", str(BENCH / "h200-sweep1-bf16.json"),
                            str(BENCH / "h200-tune4-measurements.json"), "--min-us", "0"], "geomean"),
    "eager_bound": (["eager_bound.py", str(BENCH / "h200-graph-skinny.json"), "--rows"],
                    "efficiency 1.00: geomean bound 1.213x over 22 rows"),
    "tuner_order": (["tuner_order.py", str(BENCH / "h200-tune4-measurements.json"), "--first", "8"],
                    "regret geomean"),
    # On the CPU: the select and no-launch rows, in Triton's interpreter.
    "dispatch_overhead": (["dispatch_overhead.py", "--calls", "20", "--trials", "1"], "us/call"),
    # A fresh process per first call: one problem, cold and warm.
    "warmup_check": (["warmup_check.py", "--shapes", str(ROOT / "tests" / "data" / "tiny.yaml"),
                      "--limit", "1"], "warm first call"),
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
                subprocess.run, [sys.executable, *argv], cwd=ROOT, env=self.env, capture_output=True,
                text=True, timeout=120, check=False)

    def result(self, key: str, argv: list[str]) -> subprocess.CompletedProcess:
        self.submit(key, argv)
        return self.futures[key].result()


def _help_argv(script: Path) -> list[str]:
    return [str(script), "--help"]


def _run_argv(name: str) -> list[str]:
    return [str(ROOT / "scripts" / RUNS[name][0][0]), *RUNS[name][0][1:]]


@pytest.fixture(scope="module")
def runner(tmp_path_factory):
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1", "PYTHONUNBUFFERED": "1",
           "TRITONBLAS_DB": str(tmp_path_factory.mktemp("scripts") / "absent.sqlite"),
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    run = Runner(env)
    if "PYTEST_XDIST_WORKER" not in os.environ:  # one process runs them all: start them all at once,
        for name in RUNS:  # the longest first
            run.submit(f"run:{name}", _run_argv(name))
        for script in SCRIPTS:
            run.submit(f"help:{script.name}", _help_argv(script))
    yield run
    run.pool.shutdown(wait=True, cancel_futures=True)


def _output(proc: subprocess.CompletedProcess) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-3000:]}\n--- stderr\n{proc.stderr[-3000:]}"


def test_scripts_are_found():
    assert len(SCRIPTS) >= 5, SCRIPTS


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_help_exits_0_without_a_gpu(runner, script):
    proc = runner.result(f"help:{script.name}", _help_argv(script))
    assert proc.returncode == 0, _output(proc)
    assert proc.stdout.lstrip().startswith("usage:"), _output(proc)
    assert "Traceback" not in proc.stderr, _output(proc)


@pytest.mark.parametrize("name", RUNS)
def test_offline_script_runs_on_the_committed_data(runner, name):
    proc = runner.result(f"run:{name}", _run_argv(name))
    assert proc.returncode == 0, _output(proc)
    assert RUNS[name][1] in proc.stdout, _output(proc)


@pytest.mark.parametrize("script", SHELL, ids=lambda p: p.name)
def test_shell_scripts_parse(script):
    proc = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stderr


def _module_names(tree: ast.Module) -> tuple[list[tuple[str, str, int]], dict[str, str]]:
    """(module, name, line) of every name imported from PACKAGES, and the local names bound to their
    modules (`from tritonblas import launch`, `import tritonblas.heuristic as h`)."""
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
                    if alias.asname:
                        modules[alias.asname] = alias.name
                    else:
                        modules[alias.name.split(".")[0]] = alias.name.split(".")[0]
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


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
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
        + "\nUse public API, turn the script into a test, or move a retired probe's findings to docs/notes "
          "(issue 14).")
