"""Stream-K: the split the kernel runs is the planned one, results are bitwise reproducible across
runs and workspace reuse, and every launch leaves the tile counters at zero."""

import pytest
import torch
import triton
import triton.language as tl
from helpers.shapes import (
    STREAMK_SPLITS,
    prime_workspace,
    reference,
    rel_error,
    sk_config,
    sk_plan,
    written_slots,
)

import tritonblas
from tritonblas.call import path
from tritonblas.kernels.fixup import fixup_groups
from tritonblas.launch import gemm as launch
from tritonblas.launch import scratch
from tritonblas.launch import streamk as launch_streamk
from tritonblas.launch.streamk import fixup_plan
from tritonblas.problem import Problem
from tritonblas.selection import dispatch
from tritonblas.smem import smem_bytes

CPU = torch.device("cpu")


@pytest.mark.parametrize("shape, config, programs, dp, owners, idle, slots", [s[1:] for s in STREAMK_SPLITS],
                         ids=[s[0] for s in STREAMK_SPLITS])
def test_kernel_runs_the_planned_split(shape, config, programs, dp, owners, idle, slots):
    m, n, k = shape
    plan = sk_plan(config, m, n, k)
    assert (plan.programs, plan.dp_tiles, plan.owners, plan.idle, set(plan.slots)) == (
        programs, dp, owners, idle, slots)
    a, b = torch.randn(m, k), torch.randn(k, n)
    bias = torch.randn(n)
    ws = prime_workspace(config, plan, CPU)
    out = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=config)
    # Exactly the planned programs wrote partials (the rest of the NaN-filled scratch is untouched
    # and never read), the result is right, and the counters are back at zero.
    assert written_slots(ws, config, plan) == plan.slots
    # With S >= 12 the fix-up is a tree: every group of every split tile left its sum in its slot.
    group_sums = written_slots(ws, config, plan, plan.programs, _slots(ws, config) - plan.programs)
    assert group_sums == plan.group_slots
    ref = reference(a, b, bias, 0.5, 2.0)
    assert rel_error(out, ref) <= 2 * rel_error(torch.addmm(bias, a, b, beta=0.5, alpha=2.0), ref) + 1e-7
    assert not scratch.workspace(CPU, 0, 0)[1].any()


def _slots(ws: torch.Tensor, config) -> int:
    """Workspace slots the buffer holds (the launch may have grown it past what a plan needs)."""
    return ws.numel() // (config.block_m * config.block_n)


def _problem(m, n, k, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g).to(dtype), torch.randn(k, n, generator=g).to(dtype)


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32])
def test_bitwise_reproducible_across_runs_and_workspace_reuse(dtype):
    config = sk_config(16, 16, 16, 5)
    a, b = _problem(48, 17, 100, dtype)
    first = tritonblas.matmul(a, b, config=config)
    others = [(_problem(127, 127, 127, dtype, 1), sk_config(32, 32, 16, 7)),  # grows the workspace
              (_problem(15, 17, 127, dtype, 2), sk_config(32, 32, 16, 4)),  # leaves other partials behind
              (_problem(100, 33, 40, dtype, 3), sk_config(32, 32, 32, 6))]
    for (x, y), other in others:
        tritonblas.matmul(x, y, config=other)
        assert not scratch.workspace(CPU, 0, 0)[1].any()
        again = tritonblas.matmul(a, b, config=config)
        assert torch.equal(again.view(torch.int16 if dtype == torch.float16 else torch.int32),
                           first.view(torch.int16 if dtype == torch.float16 else torch.int32))


def test_workspace_grows_and_is_reused():
    tritonblas.matmul(*_problem(127, 127, 127), config=sk_config(32, 32, 32, 7))
    ws, cnt = scratch.workspace(CPU, 0, 0)
    assert ws.numel() >= 7 * 32 * 32
    tritonblas.matmul(*_problem(15, 17, 127), config=sk_config(16, 16, 16, 3))
    assert scratch.workspace(CPU, 0, 0) == (ws, cnt)  # big enough: reused
    tritonblas.matmul(*_problem(127, 127, 127), config=sk_config(32, 32, 32, 20))
    grown, counters = scratch.workspace(CPU, 0, 0)
    assert grown.numel() >= 20 * 32 * 32 and not counters.any()


def test_each_stream_gets_its_own_scratch(monkeypatch):
    # Launches on two streams may overlap: they must never share partials, counters or copy buffers.
    streams = iter([1, 1, 2, 1, 2])
    monkeypatch.setattr(scratch, "current_stream", lambda device: next(streams))
    first, again, other = (scratch.workspace(CPU, 64, 4) for _ in range(3))
    assert first == again and first[0] is not other[0] and first[1] is not other[1]
    src = torch.randn(9, 13)
    assert launch._aligned(src, 0).data_ptr() != launch._aligned(src, 0).data_ptr()


def test_k0_with_streamk_config_runs_persistent_and_needs_no_workspace():
    out = tritonblas.addmm(torch.ones(5), torch.randn(3, 0), torch.randn(0, 5), beta=2.0,
                           config=sk_config(16, 16, 16, 4))
    assert torch.equal(out, torch.full((3, 5), 2.0))


@triton.jit
def _groups_kernel(splits_ptr, out_ptr):
    i = tl.program_id(0)
    group, groups = fixup_groups(tl.load(splits_ptr + i))
    tl.store(out_ptr + 2 * i, group)
    tl.store(out_ptr + 2 * i + 1, groups)


def test_host_and_kernel_agree_on_the_fixup_tree():
    """The host sizes the group slots and counters the kernel's tree uses: the two (G, Q) must match,
    and the groups must cover the S segments with none empty."""
    splits = torch.arange(1, 140, dtype=torch.int32)
    out = torch.zeros(2 * len(splits), dtype=torch.int32)
    _groups_kernel[(len(splits),)](splits, out)
    for s, (g, q) in zip(splits.tolist(), out.view(-1, 2).tolist(), strict=True):
        assert (g, q) == launch_streamk.fixup_groups(s), s
        assert (q - 1) * g < s <= q * g  # the last group holds at least one segment
        assert q == 1 or g * g >= s > (g - 1) * (g - 1)  # G = ceil(sqrt(S)) once there is a tree


@pytest.mark.parametrize("shape, config", [
    ((16, 16, 640), sk_config(16, 16, 16, 33)),  # 1 tile in 33 segments: 6 groups, the last of 3
    ((48, 32, 320), sk_config(16, 16, 16, 78)),  # 6 tiles in 13 segments: 4 groups each, the last of 1
    ((40, 72, 300), sk_config(16, 16, 16, 20)),  # 15 tiles on 20 programs: 1 segment each, no split
], ids=["one_tile_33_splits", "six_tiles_13_splits", "unsplit"])
def test_tree_fixup_is_right_and_bitwise_reproducible(shape, config):
    m, n, k = shape
    plan = sk_plan(config, m, n, k)
    a, b = _problem(m, n, k, torch.float16, seed=7)
    ws = prime_workspace(config, plan, CPU)
    first = tritonblas.matmul(a, b, config=config)
    assert written_slots(ws, config, plan) == plan.slots
    group_sums = written_slots(ws, config, plan, plan.programs, _slots(ws, config) - plan.programs)
    assert group_sums == plan.group_slots
    ref = reference(a, b)
    assert rel_error(first, ref) <= 2 * rel_error(torch.mm(a, b), ref) + 1e-3
    assert not scratch.workspace(CPU, 0, 0)[1].any()
    assert torch.equal(tritonblas.matmul(a, b, config=config).view(torch.int16), first.view(torch.int16))


# The fix-up's row chunks over every way a tile gets summed, the mode and the chunk count forced
# (config.fixup_plan defers 128x128 tiles and up only, and gives the interpreter's small tiles one
# chunk): the same sums in the same order, so the same bits, and every counter back at zero.
FIXUP_PATHS = [
    # 6 data-parallel tiles, then 2 split 3 ways: with 4 chunks the program of segment 0 claims chunks 0
    # and 3 after its data-parallel tile; segment 2's claim comes after the last arrival.
    ("deferred", (100, 33, 100), sk_config(32, 32, 32, 6), True),
    # 1 data-parallel wave of 7, 1 tile split 7 ways: chunk c's claimer runs before the last arrival
    # (the interpreter runs programs in order), so the last arrival sums the claimed chunks.
    ("deferred_last_arrival_sums", (63, 17, 100), sk_config(16, 16, 16, 7), True),
    # 2 data-parallel waves of 4 tiles, 1 tile split 4 ways, S = 4 < chunks (8): claims wrap around.
    ("deferred_more_chunks_than_splits", (48, 48, 64), sk_config(16, 16, 16, 4), True),
    # The same two problems with the data-parallel tiles first: the last arrival sums every chunk.
    ("data_parallel_first", (100, 33, 100), sk_config(32, 32, 32, 6), False),
    ("data_parallel_first_seven", (63, 17, 100), sk_config(16, 16, 16, 7), False),
    # 1 tile in 4 segments, no data-parallel tile.
    ("no_data_parallel", (15, 17, 127), sk_config(32, 32, 16, 4), False),
    # 1 tile in 33 segments, no data-parallel tile: the two-level tree, group sums chunk by chunk.
    ("tree", (16, 16, 640), sk_config(16, 16, 16, 33), False),
    # 1 tile split 13 ways after a full wave of 13, deferred: no tree (no group slots, no group counters).
    ("deferred_no_tree", (112, 32, 208), sk_config(16, 16, 16, 13), True),
]


@pytest.mark.parametrize("shape, config, deferred", [p[1:] for p in FIXUP_PATHS],
                         ids=[p[0] for p in FIXUP_PATHS])
def test_fixup_chunks_give_the_same_bits_on_every_path(monkeypatch, shape, config, deferred):
    m, n, k = shape
    a, b = _problem(m, n, k, torch.float16, seed=3)
    bias = torch.randn(n).to(torch.float16)
    outs = []
    for chunks in (1, 2, 4, 8):
        plan = lambda *_args, chunks=chunks: (chunks, deferred)  # noqa: E731
        monkeypatch.setattr(launch, "fixup_plan", plan)  # the launch's constexprs
        monkeypatch.setattr(launch_streamk, "fixup_plan", plan)  # and the workspace it sizes
        dispatch.clear_cache()  # the call path's plans, which hold the launch's constexprs
        outs.append(tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=config))
        assert next(iter(path.plans.values())).launch.constexprs["DEFERRED"] is deferred
        assert not scratch.workspace(CPU, 0, 0)[1].any()
    assert all(torch.equal(o.view(torch.int16), outs[0].view(torch.int16)) for o in outs[1:])
    ref = reference(a, b, bias, 0.5, 2.0)
    assert rel_error(outs[0], ref) <= 2 * rel_error(torch.addmm(bias, a, b, beta=0.5, alpha=2.0), ref) + 1e-3


def test_fixup_plan_rule():
    def plan(bm, bn, tiles, splits, tma=False):
        return fixup_plan(sk_config(bm, bn, 64, 132), tiles, 132, splits, tma)
    # Deferred: chunks of 2048 fp32, at most 8 (the counter's claim bits), so 8 claimers on 128x128.
    # Summed on arrival: chunks of 4096 fp32 (32 values a thread on 4 warps) on TMA; a pointer tile
    # reads whole partials.
    assert [plan(128, 128, 144, 11), plan(128, 256, 153, 6), plan(256, 256, 140, 16)] == [
        (8, True), (8, True), (8, True)]
    assert [plan(128, 128, 196, 2), plan(128, 128, 196, 2, tma=True), plan(64, 128, 32, 4, tma=True)] == [
        (1, False), (4, False), (2, False)]
    assert plan(64, 64, 144, 11) == (1, False)  # one chunk's worth: not deferred
    problem = Problem(768, 3072, 8192, "bf16")
    tma = sk_config(128, 128, 64, 132).model_copy(update={"tma": True, "num_stages": 3})
    # The fix-up reads into registers: Stream-K asks for the persistent kernel's shared memory.
    assert smem_bytes(tma, problem) == smem_bytes(tma.model_copy(update={"streamk": False}), problem)
    a, b = _problem(48, 17, 96, torch.float16)
    launched = launch.make_plan(a, b, torch.empty(48, 17, dtype=torch.float16), None,
                                 sk_config(64, 128, 16, 5).model_copy(update={"tma": True}), 4, "ieee")
    # (A row of 17 halves cannot be read by TMA: the pointer loop runs, so whole partials.)
    assert (launched.constexprs["FIXUP_CHUNKS"], launched.constexprs["DEFERRED"]) == (1, False)


def test_fixup_deferred_rule():
    # Deferred: data-parallel tiles (tiles >= programs), S >= 6, tiles of 8 chunks (128x128 and up).
    assert launch_streamk.fixup_deferred(144, 132, 11, 8)  # 768x3072x8192 on 128x128 tiles
    # 1792^3-ish: two splits, data-parallel tiles first
    assert not launch_streamk.fixup_deferred(196, 132, 2, 8)
    assert not launch_streamk.fixup_deferred(144, 132, 11, 2)  # 768^3 on 64x64 tiles: two chunks
    assert not launch_streamk.fixup_deferred(16, 132, 8, 8)  # no data-parallel tile to hide it behind
    # The launch and the workspace follow it: no tree (so no group slots) where deferred.
    config = sk_config(128, 128, 64, 132)
    assert launch_streamk.streamk_workspace(config, 128, 13 * 128, 128 * 64, 12) == (12 * 128 * 128, 1)
    # One tile split 12 ways on 12 programs: the tree, G 4, Q 3.
    assert launch_streamk.streamk_workspace(config, 128, 128, 128 * 64, 12) == ((12 + 3) * 128 * 128, 1 + 3)
