"""The benchmark behind `tritonblas bench`: ours (through dispatch, as users call it) against torch.mm.

Both sides run on the same inputs with the tuner's timing protocol (tuning.benchmark.GpuBenchmark:
do_bench median with a cold L2 on a GPU; a wall-clock median of a few runs in Triton's interpreter,
where the numbers only show that the flow works). Our result is also checked against an fp64
reference, so a fast wrong answer is reported as such, never as a speedup. Then both sides run an eager
loop of back-to-back calls (tuning.benchmark.loop_ms), which counts the host's time per call where it
exceeds the kernel's, as a decode step does, and the single timed calls cannot. `run_bench` measures;
`write_json` and `write_plot` record the rows (scripts/bench_report.py reads the JSON back).
"""

from __future__ import annotations

import json
import statistics
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path

from .arch import DeviceInfo
from .arith import tflops
from .config import GemmConfig
from .problem import Problem

# Wall-clock repetitions per side in the interpreter (the median of them is reported).
CPU_REPS = 3
# The eager loop (tuning.benchmark.loop_ms): back-to-back calls for about LOOP_MS per side and round,
# between LOOP_CALLS of them, in LOOP_ROUNDS interleaved rounds; the interpreter runs a token loop.
LOOP_MS, LOOP_CALLS, LOOP_ROUNDS = 2.0, (10, 200), 5


@dataclass(frozen=True)
class BenchRow:
    problem: Problem
    status: str  # "ok" or why ours did not run correctly (wrong_result, launch_error, ...)
    source: str = ""
    config: GemmConfig | None = None
    ms: float | None = None
    torch_ms: float | None = None
    rel_error: float | None = None
    note: str = ""
    # Run-time fallbacks: RuntimeWarnings of configs dispatch selected and triton refused to compile
    # (issue 21: the feasibility predicate should leave none; call.run's `_fall_back` is the safety net).
    fallbacks: int = 0
    # ms a call in an eager loop of back-to-back calls, ours and torch's (host time included; the
    # columns above time each call alone, after an L2 flush that hides the host's work): None if not run
    loop_ms: float | None = None
    torch_loop_ms: float | None = None

    def _tflops(self, ms: float | None) -> float | None:
        return tflops(self.problem.m, self.problem.n, self.problem.k, ms)

    @property
    def tflops(self) -> float | None:
        return self._tflops(self.ms)

    @property
    def torch_tflops(self) -> float | None:
        return self._tflops(self.torch_ms)

    @property
    def speedup(self) -> float | None:
        """torch.mm time over ours: above 1 we are faster."""
        ok = self.status == "ok" and self.ms and self.torch_ms
        return self.torch_ms / self.ms if ok else None

    @property
    def loop_speedup(self) -> float | None:
        """torch's time a call over ours in the eager loop."""
        ok = self.status == "ok" and self.loop_ms and self.torch_loop_ms
        return self.torch_loop_ms / self.loop_ms if ok else None

    def to_json(self) -> dict:
        p = self.problem
        # A quantized problem's key in full (rows of plain problems read as before the fields).
        quantized = {"b_dtype": p.b, "out_dtype": p.out, "scales": p.scales} if p.quantized else {}
        return {"m": p.m, "n": p.n, "k": p.k, "dtype": p.dtype, "layout": p.layout, "bias": p.bias,
                **quantized, "status": self.status, "source": self.source,
                "config": None if self.config is None else self.config.model_dump(),
                "backend": None if self.config is None else self.config.backend,
                "ms": self.ms, "torch_ms": self.torch_ms, "tflops": self.tflops,
                "torch_tflops": self.torch_tflops, "speedup": self.speedup, "rel_error": self.rel_error,
                "note": self.note, "fallbacks": self.fallbacks, "loop_ms": self.loop_ms,
                "torch_loop_ms": self.torch_loop_ms, "loop_speedup": self.loop_speedup}


def geomean(values: list[float]) -> float | None:
    return statistics.geometric_mean(values) if values else None


def is_fallback_warning(w: warnings.WarningMessage) -> bool:
    """A RuntimeWarning of dispatch.report_compile_failure: a selected config triton refused to compile
    (out of shared memory or registers), the call re-run with the next selection."""
    return issubclass(w.category, RuntimeWarning) and "could not be compiled" in str(w.message)


def fallback_count(rows: list[BenchRow]) -> int:
    return sum(r.fallbacks for r in rows)


def bench_problem(problem: Problem, info: DeviceInfo, bench) -> BenchRow:
    """One problem, counting the run-time fallbacks it took (the warnings are still shown)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        row = _bench_problem(problem, info, bench, caught)
    for w in caught:
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    return row


# Rounds of ours-then-torch (the interpreter's wall clock needs one). One round each, ours first, read
# the same cuBLAS kernel on both sides (rows where dispatch chose torch.mm) at 0.83x-1.25x, 1.047x
# geomean over the 28 above 0.1 ms (016dd08:docs/benchmarks/h200.md, 2026-11-30): the second of two long
# runs of large GEMMs ran slower. On a GPU the benchmark interleaves single calls
# (GpuBenchmark.head_to_head), so a drift of the clock between two timing runs reaches both sides alike.
BENCH_ROUNDS = 3


def _timed_head_to_head(bench, problem: Problem, info: DeviceInfo):
    """(our BenchResult, torch's median ms): config=None goes through dispatch, exactly as a user's
    tritonblas.matmul does, timed side by side with torch (bench.head_to_head)."""
    return bench.head_to_head(None, problem, info, 1 if info.arch == "interpreter" else BENCH_ROUNDS)


def _bench_problem(problem: Problem, info: DeviceInfo, bench, caught: list) -> BenchRow:
    from .selection import dispatch

    def selected():
        return dispatch.select_problem(problem, device=info, backend=getattr(bench, "backend", None))

    try:
        sel = selected()
        ours, torch_ms = _timed_head_to_head(bench, problem, info)
        fallbacks = sum(map(is_fallback_warning, caught))
        if fallbacks:
            sel = selected()  # what ran: the refused configs are no longer selected
    except Exception as exc:  # one problem failing (out of memory, say) must not lose the others
        return BenchRow(problem, "error", note=f"{type(exc).__name__}: {exc}"[:300],
                        fallbacks=sum(map(is_fallback_warning, caught)))
    finally:
        bench.finish(problem)
    ms = ours.median_ms if ours.status == "ok" else None
    loop = _loop(bench, problem, info, ms, torch_ms) if ms and torch_ms else None
    return BenchRow(problem, ours.status, sel.source, sel.config, ms, torch_ms, ours.rel_error, ours.note,
                    fallbacks, *(loop or (None, None)))


def _loop(bench, problem: Problem, info: DeviceInfo, ms: float, torch_ms: float) -> tuple | None:
    """(ours, torch's) ms a call in the eager loop, after the single calls verified ours."""
    if info.arch == "interpreter":
        return bench.loop_head_to_head(None, problem, info, 2, 1)
    calls = min(LOOP_CALLS[1], max(LOOP_CALLS[0], int(LOOP_MS / max(ms, torch_ms))))
    return bench.loop_head_to_head(None, problem, info, calls, LOOP_ROUNDS)


def run_bench(problems: list[Problem], device: int, db_url: str | None, on_row=lambda row: None,
              backend: str | None = None) -> tuple[DeviceInfo, list[BenchRow]]:
    """Each problem on GPU `device` (the interpreter's CPU "device" under TRITON_INTERPRET=1), dispatch
    reading the DB at `db_url`; `on_row` sees each row as it is measured."""
    from .device import interpreter_enabled, on_device
    from .selection import dispatch
    from .tuning.benchmark import GpuBenchmark

    rows = []
    with dispatch.using_database(db_url), on_device(device, interpreter_enabled()) as info:
        # Every problem on the cold single-call protocol, as users call it (not the tuner's replays).
        bench = GpuBenchmark(cpu_reps=CPU_REPS, backend=backend, replay_small=False)
        for p in problems:
            rows.append(bench_problem(p, info, bench))
            on_row(rows[-1])
    return info, rows


def write_json(path: Path, rows: list[BenchRow], info: DeviceInfo, db_where: str,
               backend: str | None = None) -> None:
    """Every number, with versions, device and database; a missing folder is created."""
    from . import __version__
    from .device import interpreter_enabled
    from .identity import torch_version, triton_version

    doc = {"tritonblas": __version__, "triton": triton_version(), "torch": torch_version(),
           "device": info.name, "arch": info.arch, "interpreter": interpreter_enabled(), "db": db_where,
           "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
           "geomean_speedup": geomean([r.speedup for r in rows if r.speedup]),
           "geomean_loop_speedup": geomean([r.loop_speedup for r in rows if r.loop_speedup]),
           "fallback_warnings": fallback_count(rows), "backend_restriction": backend,
           "rows": [r.to_json() for r in rows]}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(doc, indent=2) + "\n")


def write_plot(path: Path, rows: list[BenchRow], title: str) -> None:
    """Horizontal bars of speedup per problem: green where we beat torch.mm, red where we lose."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    shown = [r for r in rows if r.speedup]
    labels = [r.problem.short() for r in shown]
    values = [r.speedup for r in shown]
    fig = Figure(figsize=(9, 1.5 + 0.32 * max(len(shown), 1)), layout="constrained")
    FigureCanvasAgg(fig)  # no display: render to a file through Agg
    ax = fig.add_subplot()
    y = list(range(len(shown)))[::-1]
    ax.barh(y, values, color=["#2a9d4a" if v >= 1 else "#d1495b" for v in values])
    ax.axvline(1.0, color="black", linewidth=1)
    for yi, v in zip(y, values, strict=True):
        ax.text(v, yi, f" {v:.2f}x", va="center", fontsize=8)
    ax.set_yticks(y, labels, fontsize=8)
    ax.set_xlim(0, max([1.2, *values]) * 1.15)
    ax.set_xlabel("speedup over torch.mm (torch time / tritonblas time; > 1 is faster)")
    gm = geomean(values)
    ax.set_title(f"{title}\ngeomean {'-' if gm is None else f'{gm:.3f}x'} over {len(shown)} problems",
                 fontsize=10)
    if not shown:
        ax.text(0.5, 0.5, "no problem ran correctly on both sides", ha="center", transform=ax.transAxes)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=120)


def torch_side(problems: list[Problem]) -> str:
    """What a run of `problems` is compared with, for titles and captions: torch.mm, or with quantized
    problems among them torch's op of each (torch._scaled_mm, bf16 torch.mm where torch refuses one)."""
    return "torch" if any(p.quantized for p in problems) else "torch.mm"
