"""`config_supports` against triton's own shared-memory figures (issue 21).

tests/data/smem_records.json holds what triton 3.6 asked for when compiling the kernels for the H200
(sm_90, 232448 B per block) over a sample of the heuristic's and the tuner's config space, every dtype,
layout, K residue, bias kind, the TMA / pointer / aligned-copy paths and both families (written by
scripts/smem_sweep.py, which compiles on a CPU). The predicate must refuse every config triton cannot
fit, and should refuse few that fit.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from tritonblas.arch import DeviceInfo
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import Problem
from tritonblas.selection import heuristic
from tritonblas.tuning.space import candidate_space

ROOT = Path(__file__).resolve().parent.parent
RECORDS = json.loads((ROOT / "tests" / "data" / "smem_records.json").read_text())
H200 = DeviceInfo(arch="sm_90", name="NVIDIA H200", sm_count=132, smem_per_block=232448)
# Feasible (problem, config) pairs the predicate may refuse (see test_few_feasible_refused).
MAX_WRONGLY_REFUSED = 0.04

sys.path.insert(0, str(ROOT / "scripts"))
try:
    from smem_sweep import record_config, record_problem
finally:
    sys.path.pop(0)


def _judged():
    """Per (problem, config): the most triton asked for over the precisions recorded (fp32 runs tf32 or
    ieee by the caller's allow_tf32, which the predicate cannot see: it must hold for both), and the
    predicate's refusal (None when it accepts)."""
    most: dict[tuple[Problem, GemmConfig], int] = {}
    for row in RECORDS["rows"]:
        problem, _precision = record_problem(row)
        key = (problem, record_config(row))
        most[key] = max(most.get(key, 0), row[-1])
    return [(p, cfg, shared, config_supports(cfg, p, H200)) for (p, cfg), shared in most.items()]


JUDGED = _judged()


def test_records_describe_the_h200_and_cover_the_space():
    assert RECORDS["limit"] == H200.smem_per_block and RECORDS["sm_count"] == H200.sm_count
    assert RECORDS["triton"] and RECORDS["kernel_hash"] and RECORDS["kernel_key"]
    rows = [dict(zip(RECORDS["columns"], r, strict=True)) for r in RECORDS["rows"]]
    assert len(rows) >= 4000 and not RECORDS["errors"]
    over = [r for r in rows if r["shared"] > H200.smem_per_block]
    assert len(over) >= 500  # enough refusals to fit against
    for column, values in (("dtype", {"fp16", "bf16", "fp32"}), ("layout", {"nn", "nt", "tn", "tt"}),
                           ("bias", {"none", "scalar", "row", "column", "full"}),
                           ("precision", {"tf32", "ieee"}), ("streamk", {0, 1}), ("tma", {0, 1}),
                           ("flatten", {0, 1}), ("aligned_copy", {0, 1}),
                           ("num_warps", {4, 8}), ("num_stages", {1, 2, 3, 4, 5, 6})):
        assert {r[column] for r in rows} == values, column
        assert {r[column] for r in over} == values or column == "num_stages", column
    assert {r["k"] for r in rows} >= {1, 11, 127, 1000, 4000, 4095, 4096}
    assert {r["k"] % r["block_k"] == 0 for r in over} == {True, False}  # even and ragged K


def test_no_config_triton_cannot_fit_is_accepted():
    accepted = [(cfg.short(), p, shared) for p, cfg, shared, reason in JUDGED
                if shared > H200.smem_per_block and reason is None]
    assert not accepted, f"{len(accepted)} configs over the limit accepted, e.g. {accepted[:5]}"


def test_few_feasible_refused():
    """(problem, config) pairs that fit but are refused for shared memory: the estimate's slack."""
    feasible = [(p, cfg, shared, reason) for p, cfg, shared, reason in JUDGED
                if shared <= H200.smem_per_block]
    refused = [x for x in feasible if x[3] is not None]
    print(f"{len(refused)} of {len(feasible)} feasible (problem, config) pairs refused")
    assert all("shared memory" in reason for *_, reason in refused)
    assert len(refused) <= MAX_WRONGLY_REFUSED * len(feasible), refused[:10]


ISSUE_CASES = [  # issue 21: dispatched on the H200, refused by triton ("Required: 262144 / 262176")
    ("P 256x64x64 w8 s5", (4095, 4097, 127), ("fp16", "bf16")),
    ("P 256x64x64 w4 s5", (4095, 4097, 127), ("fp16", "bf16")),
    ("P 256x128x64 w8 s4", (4095, 4097, 127), ("fp16", "bf16")),
    ("P 256x128x64 w8 s4", (2911, 926, 11), ("fp16",)),
]


def _issue_config(text: str) -> GemmConfig:
    _, tile, warps, stages = text.split()
    bm, bn, bk = (int(x) for x in tile.split("x"))
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, group_m=8, num_warps=int(warps[1:]),
                      num_stages=int(stages[1:]), tma=True, flatten=True, aligned_copy=True)


@pytest.mark.parametrize("text, shape, dtypes", ISSUE_CASES, ids=lambda x: str(x))
@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt"])
def test_issue_21_configs_are_refused(text, shape, dtypes, layout):
    cfg = _issue_config(text)
    for dtype in dtypes:
        problem = Problem(*shape, dtype, layout)
        reason = config_supports(cfg, problem, H200)
        assert reason is not None and "shared memory" in reason, (text, problem)
        recorded = [shared for p, c, shared, _ in JUDGED if p == problem and c == cfg]
        assert recorded and recorded[0] > H200.smem_per_block  # triton's own figure, in the records


@pytest.mark.parametrize("shape, dtype, layout", [((4095, 4097, 127), "fp16", "tn"),
                                                  ((4095, 4097, 127), "bf16", "tn"),
                                                  ((2911, 926, 11), "fp16", "nn"),
                                                  ((127, 4097, 4095), "bf16", "nn")])
def test_heuristic_and_tuner_offer_nothing_over_the_limit(shape, dtype, layout):
    """Every candidate the heuristic ranks and the tuner would time fits by the predicate, and none is
    one of the records over the limit."""
    problem = Problem(*shape, dtype, layout)
    over = {c for p, c, shared, _ in JUDGED if p == problem and shared > H200.smem_per_block}
    ranked = [e.config for e in heuristic.rank(problem, H200)]
    space = candidate_space(problem, H200)
    assert ranked and space
    assert not over & set(ranked) and not over & set(space)
    assert all(config_supports(c, problem, H200) is None for c in ranked + space)
