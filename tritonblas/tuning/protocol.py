"""The benchmark protocol the tuner drives, and what a benchmark reports about one candidate.

`Benchmark` is the interface (prepare / ready / __call__ / baseline / head_to_head / finish);
`BenchResult` one candidate's outcome; `error_result` turns an exception of compiling or launching into
a recorded failure. The real implementation is `tuning.benchmark.GpuBenchmark`; tests drive the tuner
with fakes.
"""

from __future__ import annotations

import inspect
import math
import statistics
from collections.abc import Callable
from dataclasses import dataclass

from tuning_db.schemas import Status

from ..arch import DeviceInfo
from ..config import GemmConfig
from ..launch.gemm import is_out_of_resources
from ..problem import Problem


@dataclass(frozen=True)
class BenchResult:
    """What a benchmark says about one candidate: times in ms (None unless it ran correctly)."""

    status: Status
    median_ms: float | None = None
    p20_ms: float | None = None
    p80_ms: float | None = None
    rel_error: float | None = None
    note: str = ""

    def __post_init__(self) -> None:
        if self.status == "ok" and (self.median_ms is None or not self.median_ms > 0
                                    or not math.isfinite(self.median_ms)):
            raise ValueError(f"an ok result needs a positive finite median_ms, got {self.median_ms}")


BenchmarkFn = Callable[[GemmConfig, Problem, DeviceInfo], BenchResult]


class Benchmark:
    """The benchmark protocol the tuner drives. Subclass it, or pass a plain BenchmarkFn.

    `prepare` may compile and verify candidates ahead of timing (in parallel) and returns the failures;
    `ready` says whether a candidate is compiled and verified (timed even past the budget, see MIN_TIMED);
    `__call__` times one candidate and may stop early once it is slower than `cutoff_ms`;
    `baseline` times torch.mm on the same inputs (None when it has no such notion).
    """

    def prepare(self, configs: list[GemmConfig], problem: Problem, device: DeviceInfo,
                deadline: float | None = None) -> dict[GemmConfig, BenchResult]:
        """Optional: compile/verify ahead of timing (until `deadline`, a time.monotonic() value);
        returns the candidates that failed."""
        return {}

    def ready(self, config: GemmConfig) -> bool:
        """Optional: whether `config` is compiled and verified already, so timing it is cheap."""
        return False

    def __call__(self, config: GemmConfig, problem: Problem, device: DeviceInfo, *,
                 cutoff_ms: float | None = None) -> BenchResult:
        raise NotImplementedError

    def baseline(self, problem: Problem, device: DeviceInfo) -> float | None:
        return None

    def head_to_head(self, config: GemmConfig | None, problem: Problem, device: DeviceInfo,
                     rounds: int = 3) -> tuple[BenchResult, float | None]:
        """(`config`'s result, torch.mm's median ms) timed side by side: here `rounds` alternating rounds
        of __call__ and baseline, each side's median over them (a failure of `config` ends it early);
        a benchmark that can interleave single calls overrides this (GpuBenchmark)."""
        ours_runs, torch_runs = [], []
        for _ in range(rounds):
            ours = self(config, problem, device)
            if ours.status != "ok":
                return ours, self.baseline(problem, device)
            ours_runs.append(ours)
            torch_runs.append(self.baseline(problem, device))
        ours_runs.sort(key=lambda r: r.median_ms)
        known = [t for t in torch_runs if t is not None]
        return ours_runs[len(ours_runs) // 2], statistics.median(known) if known else None

    def loop_head_to_head(self, config: GemmConfig | None, problem: Problem, device: DeviceInfo, calls: int,
                          rounds: int = 5) -> tuple[float, float] | None:
        """Optional: (`config`'s, torch's) ms a call in loops of `calls` back-to-back calls, host time
        included (GpuBenchmark); None where the benchmark has no such loop."""
        return None

    def finish(self, problem: Problem) -> None:
        """Release what was built for `problem` (inputs, references)."""


class _FnBenchmark(Benchmark):
    def __init__(self, fn: BenchmarkFn) -> None:
        self.fn = fn
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            params = {}
        self.takes_cutoff = "cutoff_ms" in params or any(
            p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())

    def __call__(self, config, problem, device, *, cutoff_ms=None):
        if self.takes_cutoff:
            return self.fn(config, problem, device, cutoff_ms=cutoff_ms)
        return self.fn(config, problem, device)


def as_benchmark(bench: Benchmark | BenchmarkFn) -> Benchmark:
    """`bench` as a Benchmark: a plain callable is wrapped (it gets `cutoff_ms` if it takes it)."""
    if isinstance(bench, Benchmark):
        return bench
    if not callable(bench):
        raise TypeError(f"bench must be a Benchmark or a callable, got {type(bench).__name__}")
    return _FnBenchmark(bench)


def classify_error(exc: BaseException) -> Status:
    """Map an exception raised by compiling or launching a candidate to a recorded status."""
    names = {cls.__name__ for cls in type(exc).__mro__}
    text = str(exc).lower()
    if is_out_of_resources(exc) or "OutOfMemoryError" in names or "out of resource" in text:
        return "out_of_resources"
    if names & {"CompilationError", "PTXASError", "CompileTimeAssertionFailure"}:
        return "compile_error"
    return "launch_error"


def error_result(exc: BaseException) -> BenchResult:
    return BenchResult(classify_error(exc), note=f"{type(exc).__name__}: {exc}"[:500])
