"""`tritonblas bench` with a fake benchmark: the numbers, the JSON, the plot and the exit code are checked
against timings we chose (the interpreter run in test_cli_e2e.py shows the real flow works)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tritonblas.bench import BenchRow, geomean, write_plot
from tritonblas.cli import app
from tritonblas.problem import Problem
from tritonblas.tuning import benchmark as benchmark_module
from tritonblas.tuning.protocol import Benchmark, BenchResult

runner = CliRunner()
TINY = Path(__file__).parent / "data" / "tiny.yaml"
# m -> (our ms, torch ms); m = 19 gives a wrong result. Speedups 2.0 and 0.5: geomean exactly 1.0.
TIMES = {16: (1.0, 2.0), 17: (4.0, 2.0)}
# m -> (our, torch's) ms a call in the eager loop: loop speedups 0.5 and 4.0, geomean sqrt(2)
LOOP_TIMES = {16: (4.0, 2.0), 17: (1.0, 4.0)}
WRONG_M = 19


class TimedBench(Benchmark):
    """Our side (config None: through dispatch) and torch's side take the times in TIMES."""

    def __init__(self) -> None:
        self.configs = []
        self.loops = []

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        self.configs.append(config)
        if problem.m == WRONG_M:
            return BenchResult("wrong_result", rel_error=0.5, note="fake: wrong")
        return BenchResult("ok", TIMES[problem.m][0], rel_error=1e-4)

    def baseline(self, problem, device):
        return TIMES.get(problem.m, (0, 3.0))[1]

    def loop_head_to_head(self, config, problem, device, calls, rounds=5):
        self.loops.append((config, problem.m, calls, rounds))
        return LOOP_TIMES[problem.m]


@pytest.fixture
def timed(monkeypatch, tmp_path):
    bench = TimedBench()

    def build(**kw):
        bench.kwargs = kw
        return bench

    monkeypatch.setattr(benchmark_module, "GpuBenchmark", build)
    monkeypatch.setenv("TRITONBLAS_DB", str(tmp_path / "absent.sqlite"))  # dispatch: no user DB
    return bench


def _shapes(tmp_path, ms) -> str:
    path = tmp_path / "shapes.yaml"
    path.write_text(f"dtypes: [fp16]\nshapes:\n  - {{m: {list(ms)}, n: 32, k: 32}}\n")
    return str(path)


def test_bench_table_json_and_geomean(timed, tmp_path):
    js = tmp_path / "b.json"
    result = runner.invoke(app, ["bench", "--shapes", _shapes(tmp_path, [16, 17]), "--json", str(js)])
    assert result.exit_code == 0, result.output
    assert timed.configs == [None, None]  # our side went through dispatch, no pinned config
    # The report times every problem as users call it, not as the tuner replays small ones.
    assert timed.kwargs["replay_small"] is False
    assert "geomean speedup over torch.mm: 1.000x" in result.output
    doc = json.loads(js.read_text())
    assert [r["speedup"] for r in doc["rows"]] == [2.0, 0.5]
    assert doc["rows"][0]["tflops"] == pytest.approx(2 * 16 * 32 * 32 / 1e9)
    assert doc["rows"][0]["torch_tflops"] == pytest.approx(2 * 16 * 32 * 32 / 2e9)
    assert all(r["source"] == "heuristic" and r["config"]["block_m"] >= 16 for r in doc["rows"])
    assert doc["geomean_speedup"] == pytest.approx(1.0)
    # the eager loop after the single calls, through dispatch (the interpreter's token loop here)
    assert timed.loops == [(None, 16, 2, 1), (None, 17, 2, 1)]
    assert [(r["loop_ms"], r["torch_loop_ms"], r["loop_speedup"]) for r in doc["rows"]] == [
        (4.0, 2.0, 0.5), (1.0, 4.0, 4.0)]
    assert doc["geomean_loop_speedup"] == pytest.approx(2**0.5)
    assert "1.414x in an eager loop of back-to-back calls" in " ".join(result.output.split())


def test_a_wrong_result_is_reported_and_exits_1(timed, tmp_path):
    js, png = tmp_path / "b.json", tmp_path / "b.png"
    result = runner.invoke(app, ["bench", "--shapes", _shapes(tmp_path, [16, WRONG_M]), "--json", str(js),
                                 "--plot", str(png)])
    assert result.exit_code == 1
    assert f"failed: {WRONG_M}x32x32 fp16 nn: wrong_result fake: wrong" in result.stderr
    assert "1 of 2 problems did not run correctly" in result.stderr
    rows = json.loads(js.read_text())["rows"]  # outputs are still written: they show what failed
    assert rows[1]["status"] == "wrong_result" and rows[1]["speedup"] is None and rows[1]["ms"] is None
    assert rows[1]["loop_ms"] is None and [m for _, m, _, _ in timed.loops] == [16]  # no loop of a wrong one
    assert png.stat().st_size > 0


def test_bad_device_for_bench(monkeypatch):
    from tritonblas.cli import common as cli_common

    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setattr(cli_common, "gpu_count", lambda: 1)
    result = runner.invoke(app, ["bench", "--shapes", str(TINY), "--device", "1"])
    assert result.exit_code == 2 and "--device 1 does not exist; this host has GPUs 0..0" in result.stderr


def test_plot_with_nothing_to_show_is_still_a_png(tmp_path):
    rows = [BenchRow(Problem(16, 16, 16, "fp16"), "wrong_result")]
    write_plot(tmp_path / "p.png", rows, "title")
    assert (tmp_path / "p.png").read_bytes().startswith(b"\x89PNG")


def test_plot_renders_through_agg_without_pyplot(tmp_path, monkeypatch):
    """pyplot would pick a GUI backend from the environment (and need a display); Agg never does."""
    monkeypatch.delenv("DISPLAY", raising=False)
    monkeypatch.setenv("MPLBACKEND", "TkAgg")
    had_pyplot = "matplotlib.pyplot" in sys.modules
    rows = [BenchRow(Problem(16, 16, 16, "fp16"), "ok", ms=1.0, torch_ms=1.5)]
    write_plot(tmp_path / "p.png", rows, "title")
    assert (tmp_path / "p.png").stat().st_size > 1000
    assert had_pyplot or "matplotlib.pyplot" not in sys.modules


@pytest.mark.parametrize("values, expected", [([2.0, 0.5], 1.0), ([4.0], 4.0), ([], None)])
def test_geomean(values, expected):
    assert geomean(values) == (None if expected is None else pytest.approx(expected))


def test_run_time_fallbacks_are_counted_in_the_table_and_json(timed, tmp_path, monkeypatch):
    """A dispatched config triton refuses (the fallback's RuntimeWarning) is counted per row and in all,
    and the row names the config that ran instead (issue 21)."""
    from triton.runtime.errors import OutOfResources

    from tritonblas.selection import dispatch

    refused = []

    def call(config, problem, device, *, cutoff_ms=None):
        if problem.m == 17 and not refused:  # as call_run._fall_back: report, then the next selection runs
            sel = dispatch.select(problem.m, problem.n, problem.k, problem.dtype, device=device)
            refused.append(sel.config)
            dispatch.report_compile_failure(problem, device, sel.config,
                                            OutOfResources(262144, 232448, "shared memory"))
        return BenchResult("ok", TIMES[problem.m][0], rel_error=1e-4)

    monkeypatch.setattr(TimedBench, "__call__", lambda self, *a, **kw: call(*a, **kw))
    js = tmp_path / "b.json"
    try:
        with pytest.warns(RuntimeWarning, match="could not be compiled"):  # still shown
            result = runner.invoke(app, ["bench", "--shapes", _shapes(tmp_path, [16, 17]), "--json",
                                         str(js)])
    finally:
        dispatch.clear_cache()  # forgets the refused config too
    assert result.exit_code == 0, result.output
    assert "run-time fallbacks (configs triton refused): 1" in " ".join(result.output.split())
    doc = json.loads(js.read_text())
    assert doc["fallback_warnings"] == 1 and [r["fallbacks"] for r in doc["rows"]] == [0, 1]
    assert doc["rows"][1]["config"] != refused[0].model_dump()  # the config that ran, not the refused one
    sys.path.insert(0, str(Path(__file__).parent.parent / "scripts"))
    try:
        import bench_report
    finally:
        sys.path.pop(0)
    line = bench_report.fallbacks_line(bench_report.rows_from(doc))
    assert line == "run-time fallbacks (configs triton refused): 1 in 17x32x32 fp16 nn (1)"


def test_a_gpu_bench_alternates_ours_and_torch_and_reports_medians():
    from tritonblas.arch import device_for_arch
    from tritonblas.bench import BENCH_ROUNDS, _timed_head_to_head
    from tritonblas.problem import Problem
    from tritonblas.tuning.protocol import Benchmark, BenchResult

    calls, ours_ms, torch_ms = [], iter([3.0, 1.0, 2.0]), iter([5.0, 9.0, 4.0])

    class Alternating(Benchmark):  # the protocol's head_to_head: rounds of one call to each side
        def __call__(self, config, problem, device):
            calls.append("ours")
            return BenchResult("ok", median_ms=next(ours_ms))

        def baseline(self, problem, device):
            calls.append("torch")
            return next(torch_ms)

    ours, torch_median = _timed_head_to_head(Alternating(), Problem(64, 64, 64, "bf16"),
                                             device_for_arch("sm_90"))
    assert BENCH_ROUNDS == 3 and calls == ["ours", "torch"] * 3
    assert ours.median_ms == 2.0 and torch_median == 5.0


def test_interleaved_timing_alternates_which_side_goes_first():
    # GpuBenchmark.head_to_head times ours and torch call by call in one loop (interleaved_ms); each
    # side must lead as often as it follows, or whatever the first call leaves behind (a warmer clock,
    # caches) favours one side.
    from tritonblas.tuning.benchmark import call_order

    orders = [call_order(rep, 2) for rep in range(6)]
    assert orders == [[0, 1], [1, 0]] * 3
    assert all(sorted(call_order(rep, 3)) == [0, 1, 2] for rep in range(4))


def test_the_eager_loop_counts_the_host_time_of_each_call():
    """loop_ms times back-to-back calls (here on the CPU's wall clock): a call that spends 2 ms on the host
    reads 2 ms, though the single-call protocol's flush would hide it on a GPU; the sides alternate."""
    import time

    import torch

    from tritonblas.tuning.benchmark import loop_ms

    order = []

    def slow():
        order.append("slow")
        time.sleep(0.002)

    def fast():
        order.append("fast")

    slow_ms, fast_ms = loop_ms([slow, fast], calls=5, rounds=3, device=torch.device("cpu"))
    assert 2.0 <= slow_ms < 20.0 and fast_ms < 1.0
    # each round: one untimed call, then the loop; the second round the other side first
    assert order[:12] == ["slow"] * 6 + ["fast"] * 6 and order[12:18] == ["fast"] * 6


@pytest.mark.parametrize("ms, torch_ms, calls", [(0.05, 0.04, 40), (1.0, 3.0, 10), (0.001, 0.002, 200)])
def test_a_gpu_loop_runs_about_loop_ms_a_side(ms, torch_ms, calls):
    from tritonblas.arch import device_for_arch
    from tritonblas.bench import LOOP_ROUNDS, _loop

    bench = TimedBench()
    assert _loop(bench, Problem(16, 32, 32, "fp16"), device_for_arch("sm_90"), ms, torch_ms) == LOOP_TIMES[16]
    assert bench.loops == [(None, 16, calls, LOOP_ROUNDS)]
