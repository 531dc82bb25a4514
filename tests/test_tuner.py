"""Tuner flow with injected benchmarks (timings fake, rows/winners/statuses real, in a real tuning_db)."""

from __future__ import annotations

import ast
import math
import time
from functools import partial

import pytest
from helpers.fakes import FakeBench, candidate_calls, fake_ms
from triton.compiler.errors import CompilationError
from triton.runtime.errors import OutOfResources

from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch
from tritonblas.config import GemmConfig, config_supports
from tritonblas.launch import streamk as launch_streamk
from tritonblas.launch.streamk import program_count
from tritonblas.problem import Problem
from tritonblas.selection import heuristic
from tritonblas.tuning.protocol import BenchResult
from tritonblas.tuning.run import Interrupted, tune_problems
from tritonblas.tuning.space import SEEDS_FIRST, _canonical, _neighbours, candidate_space
from tritonblas.tuning.tuner import MIN_TIMED, REMATCH_ROUNDS, tune_problem
from tuning_db import TuningDB

H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
SMALL_SMEM = device_for_arch("gfx942", "MI300X", 304)  # 64 KiB of shared memory: prunes big tiles
P = Problem(512, 512, 512, "bf16")
# Space problems: a large square one (many waves), few tiles with a long K (Stream-K splits), a
# transposed fp32 one with a bias, and a tiny one.
SPACE_PROBLEMS = [Problem(8192, 8192, 8192, "bf16"), Problem(256, 256, 16384, "fp16"),
                  Problem(1000, 3000, 200, "fp32", "tn", "row"), Problem(16, 16, 16, "fp16")]
SPACE_DEVICES = [H200, INTERPRETER_DEVICE, SMALL_SMEM]


@pytest.fixture
def db(tmp_path):
    with TuningDB(str(tmp_path / "tune.sqlite")) as d:
        yield d


def test_picks_the_fastest_and_stores_every_row(db):
    bench = FakeBench(torch_ms=2.0)
    out = tune_problem(P, H200, db, bench=bench, budget_s=60, early_stop=False)
    space = candidate_space(P, H200)
    assert out.status == "tuned" and out.candidates == len(space)
    # Every candidate once: the kernels in the heuristic's order, then torch.mm (first in the space);
    # then the fastest kernel again, beside torch.mm's baseline, before it wins.
    best = min(space, key=fake_ms)
    assert space[0].backend == "torch" and best.backend == "triton"
    assert bench.calls == [*space[1:], space[0], *[best] * REMATCH_ROUNDS]
    stored = db.get_winner(out.key)
    assert stored.config == best == out.winner.config
    assert stored.median_ms == pytest.approx(fake_ms(best))
    assert stored.torch_ms == 2.0 and stored.speedup == pytest.approx(2.0 / fake_ms(best))
    rows = db.measurements(out.key)
    assert len(rows) == len(space) and {r.status for r in rows} == {"ok"}
    assert rows[0].config == best and rows[0].tflops == pytest.approx(2 * 512**3 / (fake_ms(best) * 1e9))


def test_failing_candidates_are_recorded_and_never_chosen(db):
    space = candidate_space(P, H200)
    fastest = sorted(space, key=fake_ms)
    outcomes = {
        fastest[0]: OutOfResources(300000, 232448, "shared memory"),
        fastest[1]: CompilationError("src", ast.parse("x").body[0], "bad"),
        fastest[2]: lambda: BenchResult("wrong_result", rel_error=0.5, note="off"),
        fastest[3]: RuntimeError("CUDA error: an illegal memory access was encountered"),
        fastest[4]: lambda: BenchResult("wrong_result", rel_error=math.nan),  # NaN output
        fastest[5]: lambda: time.sleep(0.3) or BenchResult("ok", 1e-3),  # fastest, but over the limit
    }
    out = tune_problem(P, H200, db, bench=FakeBench(outcomes), budget_s=60, early_stop=False,
                       candidate_timeout_s=0.2)
    assert out.winner.config == fastest[6]
    status = {m.config: m for m in db.measurements(out.key)}
    expected = ["out_of_resources", "compile_error", "wrong_result", "launch_error", "wrong_result",
                "timeout"]
    assert [status[c].status for c in fastest[:6]] == expected
    assert status[fastest[2]].rel_error == 0.5
    assert status[fastest[4]].rel_error is None and "nan" in status[fastest[4]].note
    assert "illegal memory access" in status[fastest[3]].note
    assert all(status[c].median_ms is None for c in fastest[:6])


def test_prepare_failures_are_not_timed_and_a_failing_prepare_is_survived(db):
    space = candidate_space(P, H200)

    class Prepared(FakeBench):
        def prepare(self, configs, problem, device, deadline=None):
            self.deadline = deadline
            return {space[0]: BenchResult("compile_error", note="ptxas died")}

    bench = Prepared()
    before = time.monotonic()
    out = tune_problem(P, H200, db, bench=bench, budget_s=60)
    # prepare may take its share of the budget, the rest is left for timing
    assert before + 0.6 * 60 <= bench.deadline <= time.monotonic() + 0.6 * 60
    assert space[0] not in bench.calls and out.winner.config != space[0]
    assert {m.config: m.status for m in db.measurements(out.key)}[space[0]] == "compile_error"

    class BrokenPrepare(FakeBench):
        def prepare(self, configs, problem, device, deadline=None):
            raise RuntimeError("thread pool gone")

    bench = BrokenPrepare()
    out = tune_problem(P, H200, db, bench=bench, budget_s=60, force=True, early_stop=False)
    assert candidate_calls(bench.calls) == [*space[1:], space[0]] and out.status == "tuned"  # torch.mm last


def test_all_failing_gives_no_winner_but_keeps_the_rows(db):
    space = candidate_space(P, H200, top_k=2, neighbour_seeds=0)
    bench = FakeBench({c: RuntimeError("launch failed") for c in space})
    out = tune_problem(P, H200, db, bench=bench, top_k=2, neighbour_seeds=0)
    assert out.status == "no_winner" and out.winner is None and db.get_winner(out.key) is None
    assert [m.status for m in db.measurements(out.key)] == ["launch_error"] * len(space)


def test_budget_stops_measuring(db):
    bench = FakeBench(sleep_s=0.03)
    out = tune_problem(P, H200, db, bench=bench, budget_s=0.1)
    timed = candidate_calls(bench.calls)
    assert 1 <= len(timed) <= 0.1 / 0.03 + 2 < out.candidates
    assert out.winner.config in timed and len(db.measurements(out.key)) == len(timed)


def test_budget_waits_for_a_first_working_candidate(db):
    space = candidate_space(P, H200)
    bench = FakeBench({c: RuntimeError("no") for c in space[:3]})
    out = tune_problem(P, H200, db, bench=bench, budget_s=1e-9)
    # space[0] is torch.mm, timed after the kernels whatever the budget.
    assert candidate_calls(bench.calls) == [*space[1:4], space[0]] and out.winner.config == space[3]


def test_compiled_candidates_are_timed_past_the_budget_up_to_a_minimum(db):
    # Past the deadline only candidates the benchmark has ready (compiled, verified) are timed, until
    # MIN_TIMED have been timed in all; the others would compile now and are skipped.
    space = candidate_space(P, H200, vendor=False)  # the kernels (test_backend: with torch.mm first)
    ready = set(space[3::2])

    class ReadyBench(FakeBench):
        def ready(self, config):
            return config in ready

    bench = ReadyBench()
    tune_problem(P, H200, db, bench=bench, budget_s=1e-9, vendor=False)
    assert bench.calls[0] == space[0]  # the first working candidate, ready or not
    assert len(bench.calls) == MIN_TIMED and set(bench.calls[1:]) <= ready
    assert bench.calls[1:] == [c for c in space if c in ready][:MIN_TIMED - 1]


def test_clear_losers_get_a_cutoff_and_exhaustive_gets_none(db):
    bench = FakeBench()
    tune_problem(P, H200, db, bench=bench, budget_s=60)
    best = math.inf
    timed = candidate_calls(bench.calls)
    for config, cutoff in zip(timed, bench.cutoffs[:len(timed)], strict=True):
        # torch.mm (timed last) is never cut off: it is the bar every kernel is judged by.
        vendor = config.backend == "torch"
        assert cutoff == (None if best == math.inf or vendor else pytest.approx(1.5 * best))
        best = min(best, fake_ms(config))
    bench = FakeBench()
    out = tune_problem(P, H200, db, bench=bench, exhaustive=True, force=True, budget_s=1e-9)
    assert bench.cutoffs == [None] * len(bench.calls)
    space = candidate_space(P, H200, exhaustive=True)
    assert candidate_calls(bench.calls) == [*space[1:], space[0]] and out.candidates == len(space)


def test_plain_function_benchmark(db):
    calls = []

    def bench(config, problem, device):
        calls.append(config)
        return BenchResult("ok", fake_ms(config))

    out = tune_problem(P, H200, db, bench=bench, budget_s=60, top_k=3, neighbour_seeds=1)
    assert out.winner.config == min(calls, key=fake_ms) and len(candidate_calls(calls)) == out.candidates


def test_rerun_skips_fresh_winners_unless_forced(db):
    problems = [P, Problem(64, 128, 256, "fp16", "nt", "column")]
    first = tune_problems(problems, H200, db, bench=FakeBench(), top_k=2, neighbour_seeds=0)
    assert [o.status for o in first] == ["tuned", "tuned"]
    unused = FakeBench()
    again = tune_problems(problems, H200, db, bench=unused, top_k=2, neighbour_seeds=0)
    assert [o.status for o in again] == ["skipped", "skipped"] and unused.calls == []
    assert [o.winner.config for o in again] == [o.winner.config for o in first]
    forced = FakeBench()
    rows = tune_problems(problems[:1], H200, db, bench=forced, force=True, top_k=2, neighbour_seeds=0)
    assert rows[0].status == "tuned" and forced.calls


def test_ctrl_c_keeps_finished_problems_and_rerun_resumes(db):
    problems = [Problem(64, 64, 64 * i, "fp16") for i in (1, 2, 3)]
    seen = []

    class CtrlC(FakeBench):
        """Ctrl-C in the middle of the third problem, after one of its candidates was measured."""

        def __call__(self, config, problem, device, *, cutoff_ms=None):
            if problem == problems[2]:
                self.third = getattr(self, "third", 0) + 1
                if self.third == 2:
                    raise KeyboardInterrupt
            return super().__call__(config, problem, device, cutoff_ms=cutoff_ms)

    with pytest.raises(Interrupted) as info:
        tune_problems(problems, H200, db, bench=CtrlC(), top_k=2, neighbour_seeds=0,
                      on_event=lambda ev: ev.row is not None and seen.append(ev.row))
    assert isinstance(info.value, KeyboardInterrupt)
    assert [o.problem for o in info.value.rows] == problems[:2] == [o.problem for o in seen]
    keys = [o.key for o in info.value.rows]
    assert all(db.get_winner(k) is not None for k in keys)
    stats = db.stats()  # the interrupted problem wrote nothing, not even its one measured candidate
    assert stats["winners"] == 2 and stats["measurements"] == sum(o.measured for o in seen)
    resumed = tune_problems(problems, H200, db, bench=FakeBench(), top_k=2, neighbour_seeds=0)
    assert [o.status for o in resumed] == ["skipped", "skipped", "tuned"]


@pytest.mark.parametrize("kwargs, error", [
    (dict(budget_s=0), ValueError), (dict(budget_s="5"), ValueError), (dict(top_k=0), ValueError),
    (dict(bench=42), TypeError)])
def test_bad_options_are_refused_before_anything_is_written(db, kwargs, error):
    kwargs.setdefault("bench", FakeBench())
    with pytest.raises(error, match=next(iter(kwargs)) if error is ValueError else "bench"):
        tune_problem(P, H200, db, **kwargs)
    assert db.stats()["measurements"] == 0


def test_bad_problems_are_refused(db):
    with pytest.raises(TypeError, match="problem"):
        tune_problem((64, 64, 64), H200, db, bench=FakeBench())
    with pytest.raises(ValueError, match="out_dtype"):
        tune_problems([P, Problem(64, 64, 64, "fp16", out_dtype="fp32")], H200, db, bench=FakeBench())
    assert db.stats()["measurements"] == 0  # validated up front: not even the good first problem ran


@pytest.mark.parametrize("device", SPACE_DEVICES, ids=lambda d: d.arch)
@pytest.mark.parametrize("problem", SPACE_PROBLEMS, ids=lambda p: f"{p.m}x{p.n}x{p.k}")
def test_candidate_space_is_feasible_unique_and_deterministic(problem, device):
    space = candidate_space(problem, device)
    assert space == candidate_space(problem, device)
    assert len(space) == len(set(space)) > 0
    assert all(config_supports(c, problem, device) is None for c in space)
    # A Stream-K config that splits no tile's K loop stands as its persistent twin (8192^3 on the
    # interpreter's 4 "SMs": every tile count is a multiple of 4, so no Stream-K config is left)...
    programs = partial(program_count, m=problem.m, n=problem.n, k=problem.k, sm_count=device.sm_count)
    assert all(launch_streamk.splits_tiles(c, problem, programs(c)) for c in space if c.streamk)
    candidates = heuristic.candidates(problem, device, True)
    assert any(c.streamk for c in space) == any(
        launch_streamk.splits_tiles(c, problem, device.sm_count) for c in candidates)
    for fam in (False, True):  # ... unless the family is forced
        only = candidate_space(problem, device, enable_streamk=fam)
        assert only and {c.streamk for c in only} == {fam}
    exhaustive = candidate_space(problem, device, exhaustive=True)
    assert set(space) <= set(exhaustive)
    assert set(heuristic.candidates(problem, device)) <= set(exhaustive)


def test_candidate_space_has_neighbours_and_grids():
    long_k = Problem(256, 256, 16384, "bf16")  # 4-16 tiles on 132 SMs: Stream-K splits
    space = candidate_space(long_k, H200, vendor=False)
    seed = space[0]
    assert seed.model_copy(update={"num_warps": 8 if seed.num_warps == 4 else 4}) in space
    assert {c.group_m for c in space} >= {4, 8, 16} and {c.num_stages for c in space} >= {2, 3, 4}
    assert any(c.tma for c in space) and any(c.block_k == seed.block_k // 2 for c in space)
    tiles = (256 // seed.block_m) * (256 // seed.block_n)
    assert {c.grid for c in space if c.streamk} >= {None, 2 * tiles, 3 * tiles}
    big = candidate_space(Problem(8192, 8192, 8192, "bf16"), H200)
    assert any(c.grid == 264 and not c.streamk for c in big)  # two programs per SM
    # a grid launching as many programs as the default is the default: no duplicate measurements
    tiny = candidate_space(Problem(16, 16, 16, "fp16"), H200)
    assert all(c.grid is None for c in tiny if not c.streamk)


def test_tma_is_offered_with_host_descriptors_first_except_on_small_problems():
    # A pointer seed's TMA neighbour comes with host-built descriptors, then device-built; the tenth
    # tuning run, which offered them on TMA seeds only, timed none on the streamk class.
    seed = GemmConfig(block_m=128, block_n=128, block_k=64, num_stages=5, streamk=True)
    near = list(_neighbours(seed))
    host, device = (seed.model_copy(update={"tma": True, "host_descriptors": h}) for h in (True, False))
    assert near.index(host) + 1 == near.index(device)
    assert host in candidate_space(Problem(1792, 1792, 8192, "bf16"), H200)
    # Small problems are timed in graph replay, which hides the per-call host work the descriptors add.
    small = Problem(768, 768, 768, "bf16")
    assert small.small and not any(c.host_descriptors for c in candidate_space(small, H200))


def test_first_seed_neighbours_come_right_after_the_first_seeds():
    # A cold compile cache times only the first ~8 candidates; the first seed's stage variants won most
    # often in the tuning runs, so they come right after the best SEEDS_FIRST tiles.
    problem = Problem(127, 4096, 4096, "bf16")
    space = candidate_space(problem, H200, vendor=False)  # the kernels' order (torch.mm goes first)
    first = space[0]
    tiles = [(c.block_m, c.block_n, c.block_k, c.streamk) for c in space[:SEEDS_FIRST]]
    assert len(set(tiles)) == SEEDS_FIRST  # distinct tiles first
    deeper = first.model_copy(update={"num_stages": first.num_stages + 1})
    assert space.index(deeper) == SEEDS_FIRST


@pytest.mark.parametrize("m, n, k, splits", [
    (256, 256, 16384, True),  # 4 tiles of 128x128 on 132 programs: each K loop in 33 segments
    (4096, 1024, 512, False),  # 128 tiles of 128x256: one wave, 132 // 128 = 1 segment each
    (1536, 5632, 512, False),  # 12 x 22 = 264 tiles of 128x256: two full waves, nothing left over
    (127, 4096, 4096, True),  # 32 tiles of 128x128 after no full wave: 4 segments each
    (1024, 1024, 0, False),  # no K: nothing to split
])
def test_streamk_that_splits_nothing_is_its_persistent_twin(m, n, k, splits):
    problem = Problem(m, n, k, "bf16")
    block_n = 256 if (m, n) in {(4096, 1024), (1536, 5632)} else 128
    sk = GemmConfig(block_m=128, block_n=block_n, block_k=64, num_warps=8, num_stages=3, streamk=True)
    assert launch_streamk.splits_tiles(sk, problem, H200.sm_count) is splits
    canonical = _canonical(sk, problem, H200)
    assert canonical == (sk if splits else sk.model_copy(update={"streamk": False}))
    assert _canonical(sk, problem, H200, enable_streamk=True) == sk  # a forced family stays
    families = {c.streamk for c in heuristic.candidates(problem, H200) if c.block_m == 128
                and c.block_n == block_n and c.block_k == 64}
    assert (True in families) is splits


def test_small_shared_memory_prunes_big_tiles():
    space = candidate_space(Problem(4096, 4096, 4096, "fp16"), SMALL_SMEM, exhaustive=True)
    assert space and max(c.block_m * c.block_n for c in space) < 256 * 256


def _class_problems(name: str) -> list[Problem]:
    from pathlib import Path

    from tritonblas.shapes import load_problems

    return load_problems(Path(__file__).resolve().parent.parent / "scripts" / "classes" / f"{name}.yaml")


def test_small_problems_are_timed_in_graph_replay_and_the_rest_cold():
    from tritonblas.tuning.benchmark import replayed

    # Every problem of the small class (operands of a few MB, kernels of a few us, where the cold-L2
    # protocol's spread was wider than the gaps between candidates) is replayed ...
    assert all(replayed(p) for p in _class_problems("small"))
    # ... and no problem whose time is its operands' trip from HBM (a decode step's weight) or its
    # math (the large and Stream-K classes).
    for name in ("skinny", "large", "streamk"):
        assert not any(replayed(p) for p in _class_problems(name)), name
    assert replayed(Problem(1024, 1024, 1024, "bf16"))  # 2**31 FLOPs, 4 MB: the edge, included
    assert not replayed(Problem(1024, 1024, 1025, "bf16"))
    assert not replayed(Problem(1, 4096, 4096, "bf16"))  # 32 MB of weight
    assert not replayed(Problem(0, 64, 64, "bf16"))  # nothing launches: no graph to capture
    assert replayed(Problem(64, 64, 0, "bf16"))  # K = 0 still launches (beta * bias or zeros)
