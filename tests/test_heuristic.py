"""Properties of the analytical heuristic: feasible, deterministic, ordered, family-restricted, never
faster than the roofline, monotone in K, and Stream-K for few tiles with a long K."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tritonblas.arch import INTERPRETER_DEVICE, DeviceInfo, device_for_arch
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import Problem, operand_alignment
from tritonblas.selection import heuristic

ROOT = Path(__file__).resolve().parent.parent
H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
DEVICES = [H200, device_for_arch("sm_80", "A100", 108), device_for_arch("gfx942", "MI300X", 304),
           INTERPRETER_DEVICE]

dims = st.integers(min_value=1, max_value=20000)
problems = st.builds(Problem, dims, dims, dims, st.sampled_from(["fp16", "bf16", "fp32"]),
                     st.sampled_from(["nn", "nt", "tn", "tt"]),
                     st.sampled_from(["none", "scalar", "row", "column", "full"]))
devices = st.sampled_from(DEVICES)
families = st.sampled_from([None, False, True])
# Derandomized: CI sees the same examples every run (400 random examples per property passed on
# 2026-11-30 before this was fixed).
FAST = settings(max_examples=30, deadline=None, derandomize=True, database=None)


@FAST
@given(problems, devices, families)
def test_ranked_candidates_are_feasible_ordered_and_of_the_family(problem, device, family):
    ranked = heuristic.rank(problem, device, family)
    assert ranked
    assert all(config_supports(e.config, problem, device) is None for e in ranked)
    times = [e.total_us for e in ranked]
    # ties (to 1e-6 us) are broken by the config's text, for determinism
    assert all(b >= a - 1e-5 for a, b in zip(times, times[1:], strict=False))
    if family is not None:
        assert {e.config.streamk for e in ranked} == {family}
    assert heuristic.choose(problem, device, family) == ranked[0].config
    assert ranked[0].config.short() in ranked[0].why()


@FAST
@given(problems, devices)
def test_deterministic(problem, device):
    again = DeviceInfo(**vars(device))  # an equal, distinct device object
    assert heuristic.rank(problem, device) == heuristic.rank(problem, again)


@FAST
@given(problems, devices)
def test_no_estimate_beats_the_roofline(problem, device):
    floor = heuristic.roofline_us(problem, device)
    for e in heuristic.rank(problem, device)[:20]:
        assert e.total_us >= floor * (1 - 1e-9)
        assert e.compute_us >= 0 and e.memory_us >= 0 and 0 < e.efficiency <= 1
        assert 0 <= e.edge_waste < 1


def _load_widths(problem: Problem) -> tuple:
    return (operand_alignment(problem),
            *(f(problem, copied) for f in (heuristic.pointer_efficiency, heuristic.element_wide_loads)
              for copied in (False, True)))


@FAST
@given(problems, devices)
def test_more_k_never_predicts_faster(problem, device):
    longer = Problem(problem.m, problem.n, problem.k * 2, problem.dtype, problem.layout, problem.bias)
    # Doubling K can make a misaligned leading dim aligned (K = 4 -> 8 in fp16), which really is faster
    # (no padded copy of that operand, or wider loads: an odd K lead becomes even, 8 becomes 16):
    # compare only problems whose loads are alike.
    assume(_load_widths(longer) == _load_widths(problem))
    assert heuristic.rank(longer, device)[0].total_us >= heuristic.rank(problem, device)[0].total_us


# Few output tiles (far fewer than the H200's 132 SMs) and a long K: Persistent would leave most SMs
# idle, Stream-K spreads the K iterations over all of them.
FEW_TILES_LONG_K = [(256, 256, 16384), (128, 128, 65536), (512, 256, 32768), (64, 1024, 16384)]


@pytest.mark.parametrize("mnk", FEW_TILES_LONG_K)
@pytest.mark.parametrize("dtype", ["fp16", "bf16"])
def test_prefers_streamk_when_tiles_are_few_and_k_is_long(mnk, dtype):
    problem = Problem(*mnk, dtype)
    best = heuristic.rank(problem, H200)[0]
    tiles = -(-mnk[0] // best.config.block_m) * -(-mnk[1] // best.config.block_n)
    assert best.config.streamk and tiles < H200.sm_count
    persistent = heuristic.rank(problem, H200, enable_streamk=False)[0]
    assert persistent.total_us > best.total_us


@FAST
@given(problems)
def test_full_waves_make_streamk_no_better_than_persistent_with_the_same_tile(problem):
    for e in heuristic.rank(problem, H200, enable_streamk=False)[:5]:
        c = e.config
        tiles = -(-problem.m // c.block_m) * -(-problem.n // c.block_n)
        if tiles % H200.sm_count == 0:
            sk = heuristic.estimate(c.model_copy(update={"streamk": True}), problem, H200)
            assert e.total_us <= sk.total_us


@pytest.mark.parametrize("mnk", [(0, 64, 64), (64, 0, 64), (64, 64, 0), (0, 0, 0)])
@pytest.mark.parametrize("device", DEVICES, ids=lambda d: d.arch)
def test_empty_problems_are_ranked(mnk, device):
    # Outputs with no element (M or N = 0) have no tiles: the Stream-K grids priced for few tiles
    # divided by that count, and select() raised ZeroDivisionError for 0x5x5.
    ranked = heuristic.rank(Problem(*mnk, "bf16"), device)
    assert ranked and config_supports(ranked[0].config, Problem(*mnk, "bf16"), device) is None


def test_no_feasible_config_is_a_clear_error():
    tiny = DeviceInfo(arch="sm_90", name="no-smem", sm_count=8, smem_per_block=1024)
    problem = Problem(128, 128, 128, "fp16")
    assert heuristic.rank(problem, tiny) == []
    with pytest.raises(RuntimeError, match="no feasible config"):
        heuristic.choose(problem, tiny)


def test_small_shared_memory_prunes_big_pipelines():
    mi300 = DEVICES[2]
    for e in heuristic.rank(Problem(4096, 4096, 4096, "fp16"), mi300):
        c = e.config
        assert (c.block_m + c.block_n) * c.block_k * 2 * c.num_stages <= mi300.smem_per_block


# (problem, copied, expected pointer_efficiency); the measured cases are in docs/notes/kernel-levers.md.
POINTER_CASES = [
    (Problem(1024, 1024, 1024, "bf16"), False, 1.0),
    (Problem(1024, 1000, 1024, "bf16"), False, 1.0),  # B wraps at N=1000: 2000-byte rows still vectorize
    (Problem(1024, 1024, 1000, "bf16"), False, heuristic._UNSPECIALIZED_K_LEAD_EFFICIENCY),  # A's lead
    (Problem(127, 4097, 4095, "bf16"), False, heuristic._MISALIGNED_EFFICIENCY),
    (Problem(127, 4097, 4095, "bf16"), True, heuristic._MISALIGNED_EFFICIENCY),  # N=4097 still wraps odd
    (Problem(127, 4096, 4095, "bf16"), True, 1.0),  # the copy pads A's lead to 4096
    (Problem(127, 1024, 1024, "bf16", "tn"), False, heuristic._MISALIGNED_EFFICIENCY),  # A wraps at M=127
]


@pytest.mark.parametrize("problem, copied, expected", POINTER_CASES, ids=lambda x: str(x))
def test_pointer_efficiency(problem, copied, expected):
    assert heuristic.pointer_efficiency(problem, copied) == expected


def test_ragged_k_lead_prefers_tma_and_a_copy_is_read_by_tma():
    # Measured on the H200: 1000^3 bf16 ran 16.5 us by TMA vs 47.2 us by pointers; 127x4097x4095 with a
    # copy 73.6 us by TMA vs 367 us by pointers, and without a copy 205 us by pointers even split over
    # 132 programs (2026-11-30).
    assert heuristic.choose(Problem(1000, 1000, 1000, "bf16"), H200).tma
    for family in (None, True, False):
        pick = heuristic.choose(Problem(127, 4097, 4095, "bf16"), H200, enable_streamk=family)
        assert pick.tma and pick.aligned_copy, family


@FAST
@given(problems)
def test_streaming_efficiency_grows_with_stages_up_to_five_and_saturates(problem):
    base = heuristic.choose(problem, H200)
    effs = [heuristic.streaming_efficiency(base.model_copy(update={"num_stages": s}), problem)
            for s in (2, 3, 4, 5, 6)]
    assert all(0 < e <= 1 for e in effs)
    assert effs[0] <= effs[1] <= effs[2] <= effs[3] == effs[4]


def test_default_group_and_one_program_per_sm_are_preferred_as_measured():
    # Tuning run of 2026-11-30: group 4/16 took 2.3-2.5% longer than 8; two programs per SM that cannot
    # share it, 6% (Persistent) and 13% (Stream-K) longer than one.
    problem = Problem(8192, 8192, 8192, "bf16")
    base = heuristic.choose(problem, H200)
    t = heuristic.estimate(base, problem, H200).total_us
    for changes in ({"group_m": 4}, {"group_m": 16}, {"grid": 2 * H200.sm_count}):
        assert heuristic.estimate(base.model_copy(update=changes), problem, H200).total_us > t


def test_shared_memory_estimate_matches_what_the_h200_compiled():
    # Every config triton refused for shared memory in the first H200 tuning run (its refused rows,
    # from `git show 016dd08:docs/benchmarks/h200-tune-measurements.json`) is refused by the
    # predicate; the GPU suite's fp32 128x128x64 at 3 stages with a ragged K compiled and ran there
    # (2026-11-30), so it must stay feasible.
    rows = json.loads((ROOT / "tests/data/h200_smem_refused.json").read_text())
    refused = [r for r in rows if r["status"] == "out_of_resources" and "shared memory" in r["note"]]
    assert refused
    for r in refused:
        problem = Problem(r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["bias"])
        assert config_supports(GemmConfig(**r["config"]), problem, H200) is not None, r
    for streamk in (False, True):
        fp32 = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, streamk=streamk)
        assert config_supports(fp32, Problem(2048, 2048, 2047, "fp32"), H200) is None


@pytest.mark.parametrize("problem, copied, expected", [
    (Problem(127, 4097, 4095, "bf16"), False, True),  # odd leading dims
    (Problem(127, 4097, 4095, "bf16"), True, True),  # copied, B still wraps at N = 4097
    (Problem(128, 4096, 4095, "bf16"), True, False),  # A padded by the copy, B aligned
    (Problem(128, 4096, 4095, "bf16"), False, True),
    (Problem(700, 1500, 1024, "bf16"), False, False),  # 3000-byte rows: 4-element loads
], ids=str)
def test_element_wide_loads(problem, copied, expected):
    assert heuristic.element_wide_loads(problem, copied) is expected


def test_streamk_split_pays_its_fill_and_its_partials_store():
    # The Stream-K timeline (`git show 016dd08:tests/streamk_timeline.py`): a split segment's pipeline
    # fill and its fp32 partial's store and arrival sit on the critical path; the estimate charges them
    # where a tile is split and not otherwise.
    split = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=5, streamk=True)
    assert heuristic.split_fixed_us(split) == pytest.approx(1.5 + 2.0)
    assert heuristic.split_fixed_us(split.model_copy(update={"block_n": 256})) == pytest.approx(1.5 + 4.0)
    est = heuristic.estimate(split, Problem(768, 3072, 8192, "bf16"), H200)  # 12 tiles split 11 ways
    assert est.fixup_us >= heuristic.split_fixed_us(split)
    whole = heuristic.estimate(split, Problem(768, 2816, 8192, "bf16"), H200)  # 132 tiles: one full wave
    assert whole.fixup_us == 0
