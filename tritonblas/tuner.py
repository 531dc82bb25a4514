"""Autotuner: measure a heuristic-derived candidate space per problem; store every row and the winner.

Flow per problem: skip it when the database already holds a fresh winner (unless forced); build the
candidate space (heuristic top-k, their neighbours, grid variants; pruned by `config_supports`); let the
benchmark compile and verify them in parallel (`prepare`), then time them in the heuristic's order under
a time budget, telling the benchmark the cutoff past which a candidate is a clear loser; time torch.mm
in the same run; record all rows and the winner in one go, so an interrupted problem leaves nothing
half-written and finished problems stay committed.

The benchmark is injectable: any `Benchmark` (or a plain `(config, problem, device) -> BenchResult`
callable) runs the whole flow, so tests drive it on CPU with fake timings.
"""

from __future__ import annotations

import inspect
import itertools
import math
import socket
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import datetime, timezone
from typing import Literal

from . import heuristic
from .config import DeviceInfo, GemmConfig, Problem, config_supports
from .launch import is_out_of_resources, program_count

Status = Literal["ok", "compile_error", "out_of_resources", "wrong_result", "timeout", "launch_error"]
FAILURES = ("compile_error", "out_of_resources", "wrong_result", "timeout", "launch_error")
# A candidate whose quick timing is this much slower than the best so far is a clear loser.
LOSER_FACTOR = 1.5
# Share of the budget that ahead-of-time compilation may take; the rest is for timing.
PREPARE_SHARE = 0.6
# Candidates already compiled and verified when the budget runs out are still timed, up to this many
# in all (a timing costs ~30 ms on a GPU): on a cold compile cache a 6 s budget went entirely to
# compiling for 127x4097x4095, and only 1 of the 16 candidates compiled in parallel was timed
# (tuning run of 2026-11-30).
MIN_TIMED = 8


# How many of the heuristic's best configs get neighbours and grid variants added.
NEIGHBOUR_SEEDS = 4
# Seeds timed before the first seed's neighbours (candidate_space).
SEEDS_FIRST = 5


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _with(cfg: GemmConfig, **changes) -> GemmConfig:
    """A validated copy (model_copy would skip validation)."""
    return GemmConfig.model_validate({**cfg.model_dump(), **changes})


def _neighbours(cfg: GemmConfig) -> Iterable[GemmConfig]:
    """One lever moved at a time, in the order their moves won: of the 44 winners of the tuning run of
    2026-11-30 (docs/benchmarks/h200-tune3-measurements.json), 28 were a seed and 16 a seed's
    neighbour, 12 of those of the first seed; by lever: stages 9, group 2, tma 2, warp specialization
    2, block_k 1. So: stages +-1, tma, warp specialization (8 warps only), flatten, group,
    halved/doubled blocks, the other warp count, an aligned copy of misaligned operands."""
    for s in (cfg.num_stages + 1, cfg.num_stages - 1):
        if 1 <= s <= 8:
            yield _with(cfg, num_stages=s)
    yield _with(cfg, tma=not cfg.tma)
    yield _with(cfg, warp_specialize=not cfg.warp_specialize, num_warps=8)
    yield _with(cfg, flatten=not cfg.flatten)
    for g in (4, 16, 8):
        yield _with(cfg, group_m=g)
    for name in ("block_k", "block_m", "block_n"):
        for v in (getattr(cfg, name) // 2, getattr(cfg, name) * 2):
            if 16 <= v <= 256:
                yield _with(cfg, **{name: v})
    yield _with(cfg, num_warps=8 if cfg.num_warps == 4 else 4)
    yield _with(cfg, aligned_copy=not cfg.aligned_copy, tma=True)  # a padded copy is TMA-ready


def _grids(cfg: GemmConfig, problem: Problem, device: DeviceInfo) -> Iterable[GemmConfig]:
    """Grid variants. Persistent: one program per SM, or two (a second resident CTA hides latency).
    Stream-K: the same, plus grids that split each tile into exactly s pieces when tiles < SMs."""
    sms = device.sm_count
    tiles = _cdiv(problem.m, cfg.block_m) * _cdiv(problem.n, cfg.block_n)
    grids = [None, 2 * sms]
    if cfg.streamk and tiles < sms:
        grids += [tiles * s for s in (2, 3, 4) if tiles * s <= 2 * sms]
    for g in grids:
        yield _with(cfg, grid=g)


def _canonical(cfg: GemmConfig, problem: Problem, device: DeviceInfo,
               enable_streamk: bool | None = None) -> GemmConfig:
    """One config per schedule (dedup): a Stream-K config that splits no tile is its persistent twin
    (unless the family is forced), and a grid that launches as many programs as the default one is
    the default one. In a cold-cache run of scripts/tune_quality.py (2026-11-30), 4096x1024x512's
    tuned winner was a Stream-K config splitting nothing, timed in place of the flattened persistent
    twin that won the exhaustive search by 6%."""
    args = (problem.m, problem.n, problem.k, device.sm_count)
    if cfg.streamk and enable_streamk is None and not heuristic.splits_tiles(cfg, problem,
                                                                              program_count(cfg, *args)):
        cfg = _with(cfg, streamk=False)
    if cfg.grid is None:
        return cfg
    if program_count(cfg, *args) == program_count(_with(cfg, grid=None), *args):
        return _with(cfg, grid=None)
    return cfg


def _seeds(ranked: list[GemmConfig], top_k: int) -> list[GemmConfig]:
    """The best config of each of the top_k best distinct tiles (block sizes and family), a third of
    them from each family: the model's near-ties (stages, warps) come back as neighbours."""
    firsts: dict[tuple, GemmConfig] = {}
    for cfg in ranked:
        firsts.setdefault((cfg.block_m, cfg.block_n, cfg.block_k, cfg.streamk), cfg)
    tiles = list(firsts.values())
    chosen = [c for fam in (False, True) for c in [t for t in tiles if t.streamk == fam][:top_k // 3]]
    for cfg in tiles:
        if len(chosen) >= top_k:
            break
        if cfg not in chosen:
            chosen.append(cfg)
    return [c for c in tiles if c in set(chosen)]


def vendor_candidate(device: DeviceInfo, enable_streamk: bool | None = None,
                     vendor: bool | None = None) -> bool:
    """Whether torch.mm (GemmConfig.vendor()) is a candidate. vendor None: yes on a GPU when no kernel
    family is asked for; not in Triton's interpreter, where torch.mm runs natively and the kernels are
    emulated, so it would win every CPU tuning run and hide the kernels from the tests that tune
    through them (vendor=True times it there too)."""
    if enable_streamk is not None:
        return False
    return device.arch != "interpreter" if vendor is None else vendor


def candidate_space(problem: Problem, device: DeviceInfo, *, top_k: int = 10, exhaustive: bool = False,
                    enable_streamk: bool | None = None, neighbour_seeds: int = NEIGHBOUR_SEEDS,
                    vendor: bool | None = None) -> list[GemmConfig]:
    """Feasible, deduplicated candidates in heuristic order: the best SEEDS_FIRST distinct tiles, the
    first one's neighbours, the other tiles, then neighbours and grid variants of the best few.

    The vendor GEMM (see vendor_candidate) comes first: it compiles nothing and times in ~30 ms, so a
    budget spent on compiles never leaves it out, and its time sets the early-stop cutoff for the
    kernels (LOSER_FACTOR). A kernel that ties it exactly loses the tie (_pick: earlier first).

    exhaustive: every config of the heuristic's grid first, then the same additions, so the normal
    space is a subset of the exhaustive one.
    """
    ranked = [e.config for e in heuristic.rank(problem, device, enable_streamk)]
    seeds = _seeds(ranked, top_k)
    # On a cold compile cache a budget of 4-6 s times the first ~8 candidates only (MIN_TIMED), so the
    # first seed's neighbours come before the other seeds: on the rows of the tuning run of 2026-11-30
    # the best of the first 8 was more than 2% behind the problem's best on 9 of 44 problems in the
    # order seeds-then-neighbours, on 1 in this order (python scripts/tuner_order.py ROWS).
    extra = itertools.chain.from_iterable(_neighbours(c) for c in seeds[1:neighbour_seeds])
    pool = [*seeds[:SEEDS_FIRST], *(_neighbours(seeds[0]) if seeds and neighbour_seeds else ()),
            *seeds[SEEDS_FIRST:], *(ranked if exhaustive else []), *extra]
    pool += [g for c in seeds[:neighbour_seeds] for g in _grids(c, problem, device)]
    out: dict[GemmConfig, None] = {}
    if vendor_candidate(device, enable_streamk, vendor):
        out[GemmConfig.vendor()] = None
    for cfg in pool:
        if enable_streamk is not None and cfg.streamk != enable_streamk:
            continue
        cfg = _canonical(cfg, problem, device, enable_streamk)
        if cfg not in out and config_supports(cfg, problem, device) is None:
            out[cfg] = None
    return list(out)

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


def as_benchmark(bench: Benchmark | BenchmarkFn | None) -> Benchmark:
    if bench is None:
        from .benchmark import GpuBenchmark

        return GpuBenchmark()
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


@dataclass
class TuneOutcome:
    """What tuning one problem did. `status`: tuned | skipped (fresh winner kept) | no_winner."""

    problem: Problem
    key: object
    status: Literal["tuned", "skipped", "no_winner"]
    winner: object | None = None
    measurements: list = field(default_factory=list)
    torch_ms: float | None = None
    elapsed_s: float = 0.0
    candidates: int = 0
    reason: str = ""

    @property
    def winner_config(self) -> GemmConfig | None:
        return None if self.winner is None else self.winner.config


class TuningInterrupted(KeyboardInterrupt):
    """Ctrl-C during tune_many: `outcomes` holds the problems finished (and committed) before it."""

    def __init__(self, outcomes: list[TuneOutcome]) -> None:
        super().__init__(f"tuning interrupted after {len(outcomes)} finished problem(s)")
        self.outcomes = outcomes


def _check_problem(problem: Problem) -> None:
    if not isinstance(problem, Problem):
        raise TypeError(f"problem must be a tritonblas.Problem, got {type(problem).__name__}")
    if problem.out != problem.dtype:
        raise ValueError(f"problem out_dtype {problem.out} differs from dtype {problem.dtype}; the kernels "
                         "write the operand dtype")


def _tflops(problem: Problem, ms: float | None) -> float | None:
    if ms is None or problem.m * problem.n * problem.k == 0:
        return None
    return 2.0 * problem.m * problem.n * problem.k / (ms * 1e-3) / 1e12


def _measurement(config: GemmConfig, result: BenchResult, problem: Problem):
    from tuning_db import Measurement

    err = result.rel_error
    note = result.note
    if err is not None and not math.isfinite(err):
        note = f"rel_error {err}; {note}"
        err = None
    ok = result.status == "ok"
    return Measurement(config=config, status=result.status, median_ms=result.median_ms if ok else None,
                       p20_ms=result.p20_ms if ok else None, p80_ms=result.p80_ms if ok else None,
                       tflops=_tflops(problem, result.median_ms) if ok else None, rel_error=err,
                       note=note[:512])


def _run_one(bench: Benchmark, config: GemmConfig, problem: Problem, device: DeviceInfo,
             cutoff_ms: float | None, timeout_s: float) -> BenchResult:
    """One candidate: exceptions and over-long runs become recorded failures, never a crash."""
    start = time.monotonic()
    try:
        result = bench(config, problem, device, cutoff_ms=cutoff_ms)
    except Exception as exc:  # a failing candidate must not stop the tuning of the others
        return error_result(exc)
    if not isinstance(result, BenchResult):
        return BenchResult("launch_error", note=f"benchmark returned {type(result).__name__}, "
                                                "not a BenchResult")
    took = time.monotonic() - start
    if took > timeout_s:
        return BenchResult("timeout", rel_error=result.rel_error,
                           note=f"took {took:.1f} s, limit {timeout_s:.1f} s")
    return result


def _measure_all(bench: Benchmark, space: list[GemmConfig], problem: Problem, device: DeviceInfo,
                 deadline: float, early_stop: bool, timeout_s: float) -> dict[GemmConfig, BenchResult]:
    start = time.monotonic()
    prepare_by = deadline if math.isinf(deadline) else start + PREPARE_SHARE * (deadline - start)
    try:
        results = dict(bench.prepare(space, problem, device, deadline=None if math.isinf(prepare_by)
                                     else prepare_by))
    except Exception as exc:  # prepare is an optimisation: on failure each candidate compiles on its own
        results = {}
        prepare_note = f"prepare failed ({type(exc).__name__}: {exc})"[:200]
    else:
        prepare_note = ""
    best: float | None = None
    timed = 0
    for config in space:
        if config in results:
            continue
        if best is not None and time.monotonic() >= deadline:
            if timed >= MIN_TIMED:
                break
            if not bench.ready(config):
                continue  # would compile now: past the budget only compiled candidates are timed
        cutoff = best * LOSER_FACTOR if early_stop and best is not None else None
        result = _run_one(bench, config, problem, device, cutoff, timeout_s)
        if prepare_note and result.status != "ok":
            result = BenchResult(result.status, result.median_ms, result.p20_ms, result.p80_ms,
                                 result.rel_error, f"{result.note}; {prepare_note}"[:500])
        results[config] = result
        timed += config.backend == "triton"  # MIN_TIMED counts kernels: torch.mm is timed besides them
        if result.status == "ok" and (best is None or result.median_ms < best):
            best = result.median_ms
    return results


def _pick(results: dict[GemmConfig, BenchResult], space: list[GemmConfig]) -> GemmConfig | None:
    """Fastest ok candidate; on equal medians the earlier one in heuristic order."""
    ok = [(results[c].median_ms, i, c) for i, c in enumerate(space)
          if c in results and results[c].status == "ok"]
    return min(ok)[2] if ok else None


def _baseline(bench: Benchmark, problem: Problem, device: DeviceInfo) -> float | None:
    try:
        ms = bench.baseline(problem, device)
    except Exception:  # torch failing to time is no reason to lose the tuning result
        return None
    return ms if ms is not None and math.isfinite(ms) and ms > 0 else None


def tune_problem(problem: Problem, device: DeviceInfo, db, *, bench: Benchmark | BenchmarkFn | None = None,
                 budget_s: float = 5.0, force: bool = False, top_k: int = 10, exhaustive: bool = False,
                 early_stop: bool = True, candidate_timeout_s: float = 60.0,
                 enable_streamk: bool | None = None, neighbour_seeds: int = NEIGHBOUR_SEEDS,
                 vendor: bool | None = None) -> TuneOutcome:
    """Tune one problem on `device` and store every measurement and the winner in `db` (a TuningDB).

    vendor: whether torch.mm is timed as a candidate (default: on a GPU, see vendor_candidate); it is
    stored like any candidate (a measurement row, and the winner when fastest), and the winner's torch_ms
    stays the baseline timed by bench.baseline (the direct torch call).

    exhaustive=True measures the whole space (every config of the heuristic's grid, plus what the
    normal mode adds) with no budget and no early stop: the reference the normal mode is judged by.
    """
    from tuning_db import EnvIdentity, ProblemKey, Winner

    _check_problem(problem)
    if not (isinstance(budget_s, (int, float)) and budget_s > 0):
        raise ValueError(f"budget_s must be a positive number of seconds, got {budget_s!r}")
    if not (isinstance(top_k, int) and top_k >= 1):
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    bench = as_benchmark(bench)
    key = ProblemKey.from_problem(problem, device)
    start = time.monotonic()
    if not force and db.has_fresh_winner(key):
        return TuneOutcome(problem, key, "skipped", winner=db.get_winner(key), reason="fresh winner in db")
    space = candidate_space(problem, device, top_k=top_k, exhaustive=exhaustive,
                            enable_streamk=enable_streamk, neighbour_seeds=neighbour_seeds, vendor=vendor)
    deadline = math.inf if exhaustive else start + budget_s
    try:
        results = _measure_all(bench, space, problem, device, deadline, early_stop and not exhaustive,
                               candidate_timeout_s)
        torch_ms = _baseline(bench, problem, device)
    finally:
        bench.finish(problem)
    env = EnvIdentity.current()
    measured = [c for c in space if c in results]
    rows = [_measurement(c, results[c], problem) for c in measured]
    best = _pick(results, space)
    winner = None
    if best is not None:
        ms = results[best].median_ms
        winner = Winner(key=key, config=best, median_ms=ms, torch_ms=torch_ms,
                        speedup=None if torch_ms is None else torch_ms / ms, source="tuned",
                        host=socket.gethostname()[:255], created_at=datetime.now(timezone.utc), env=env)
    db.record_measurements(key, env, rows)
    if winner is not None:
        db.upsert_winner(winner)
    elapsed = time.monotonic() - start
    status = "tuned" if winner is not None else "no_winner"
    reason = "" if winner else f"none of {len(measured)} measured candidates ran correctly"
    return TuneOutcome(problem, key, status, winner, rows, torch_ms, elapsed, len(space), reason)


def tune_many(problems: Iterable[Problem], device: DeviceInfo, db, *,
              progress: Callable[[TuneOutcome], None] | None = None, **options) -> list[TuneOutcome]:
    """Tune each problem in turn (see tune_problem for options); rerunning skips finished ones.

    Ctrl-C raises TuningInterrupted (a KeyboardInterrupt) carrying the finished outcomes: their rows are
    already committed; the interrupted problem wrote nothing.
    """
    problems = list(problems)
    for p in problems:
        _check_problem(p)
    outcomes: list[TuneOutcome] = []
    try:
        for problem in problems:
            outcome = tune_problem(problem, device, db, **options)
            outcomes.append(outcome)
            if progress is not None:
                progress(outcome)
    except KeyboardInterrupt as exc:
        raise TuningInterrupted(outcomes) from exc
    return outcomes

