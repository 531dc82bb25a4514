"""Stream-K with its fix-up in a kernel of its own (GemmConfig.reduce_kernel, kernels/reduce.py): the
same bits as the in-kernel fix-up on every way a tile gets split, every bias kind, the counters left
alone, and the host side (plan, workspace, predicate, space)."""

import pytest
import torch
from helpers.shapes import BIASES, make_bias, reference, rel_error, sk_config

import tritonblas
from tritonblas import GemmConfig
from tritonblas.arch import device_for_arch
from tritonblas.config import config_supports
from tritonblas.launch import gemm as launch
from tritonblas.launch import scratch
from tritonblas.launch import streamk as launch_streamk
from tritonblas.problem import Problem
from tritonblas.selection import heuristic
from tritonblas.tuning.space import _canonical, _neighbours, candidate_space

CPU = torch.device("cpu")
H200 = device_for_arch("sm_90")

# (id, shape, config): how the tiles get split, as test_kernels_streamk.FIXUP_PATHS.
SPLITS = [
    ("no_data_parallel", (15, 17, 127), sk_config(32, 32, 16, 4)),  # 1 tile in 4 segments
    ("data_parallel_first", (100, 33, 100), sk_config(32, 32, 32, 6)),  # 6 data-parallel, 2 split 3 ways
    # S 33: in the kernel a two-level tree (launch_streamk.TREE_MIN_SPLITS), another sum order, so equal bits
    # there are the fp16 cast's rounding, not a guarantee (on the H200, bf16 at S 33 differs in the last
    # bit: test_gpu); the reduce kernel still sums the 33 slots in order.
    ("tree_sized", (16, 16, 640), sk_config(16, 16, 16, 33)),
    ("ragged_many_tiles", (63, 17, 100), sk_config(16, 16, 16, 7)),  # a wave of 7, 1 tile split 7 ways
]


def _with_reduce(config: GemmConfig) -> GemmConfig:
    return GemmConfig.model_validate({**config.model_dump(), "reduce_kernel": True})


@pytest.mark.parametrize("shape, config", [s[1:] for s in SPLITS], ids=[s[0] for s in SPLITS])
def test_reduce_kernel_gives_the_in_kernel_fixup_bits(shape, config):
    m, n, k = shape
    g = torch.Generator().manual_seed(1)
    a, b = torch.randn(m, k, generator=g).half(), torch.randn(k, n, generator=g).half()
    bias = torch.randn(n, generator=g).half()
    fixup = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=config)
    reduced = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=_with_reduce(config))
    again = tritonblas.addmm(bias, a, b, beta=0.5, alpha=2.0, config=_with_reduce(config))
    assert torch.equal(reduced.view(torch.int16), again.view(torch.int16))  # run to run
    # S <= programs: below the tree, the in-kernel order and bits
    if config.grid < launch_streamk.TREE_MIN_SPLITS:
        assert torch.equal(fixup.view(torch.int16), reduced.view(torch.int16))
    assert not scratch.workspace(CPU, 0, 0)[1].any()  # no counter touched, none left set
    ref = reference(a, b, bias, 0.5, 2.0)
    assert rel_error(reduced, ref) <= 2 * rel_error(torch.addmm(bias, a, b, beta=0.5, alpha=2.0), ref) + 1e-3


@pytest.mark.parametrize("kind", BIASES)
def test_reduce_kernel_takes_every_bias_kind(kind):
    # The reduce kernel runs the shared epilogue on row chunks: each bias view indexed by the chunk's rows.
    m, n, k = 37, 21, 96
    g = torch.Generator().manual_seed(2)
    a, b = torch.randn(m, k, generator=g).half(), torch.randn(k, n, generator=g).half()
    bias = make_bias(kind, m, n, torch.float16, "cpu")
    config = _with_reduce(sk_config(32, 16, 16, 8))
    out = tritonblas.addmm(bias, a, b, beta=0.5, alpha=-2.0, config=config)
    ref = reference(a, b, bias, 0.5, -2.0)
    assert rel_error(out, ref) <= 2 * rel_error(torch.addmm(bias, a, b, beta=0.5, alpha=-2.0), ref) + 1e-3


def test_reduce_plan_and_workspace():
    # 256x256x65536 on 128x128 tiles: 4 tiles split 33 ways on 132 programs; the reduce kernel sums each
    # tile in 8 row chunks (4 x 4 chunks would leave most SMs idle), and no tree slots are sized.
    config = _with_reduce(GemmConfig(block_m=128, block_n=128, block_k=64, streamk=True))
    assert launch_streamk.reduce_chunks(4, 132) == 8 and launch_streamk.reduce_chunks(64, 128) == 4
    assert launch_streamk.streamk_workspace(config, 256, 256, 65536, 132) == (132 * 128 * 128, 4)
    a, b = torch.empty(48, 96, dtype=torch.float16), torch.empty(96, 17, dtype=torch.float16)
    plan = launch.make_plan(a, b, torch.empty(48, 17, dtype=torch.float16), None,
                             _with_reduce(sk_config(16, 16, 16, 8)), 8, "ieee")
    # 3 x 2 = 6 tiles on 8 programs: no full wave, S = 1: nothing split, so no reduce launch.
    assert plan.constexprs["REDUCE"] is False and plan.then is None
    plan = launch.make_plan(a, b, torch.empty(48, 17, dtype=torch.float16), None,
                             _with_reduce(sk_config(32, 32, 16, 8)), 8, "ieee")
    # 2 tiles split 4 ways: the reduce kernel runs 2 tiles x 4 chunks (4 x 2 fills the 8 programs).
    assert plan.constexprs["REDUCE"] is True and plan.then.progs == 2 * 4


def test_reduce_kernel_config_predicate_and_space():
    problem = Problem(256, 256, 65536, "bf16")
    sk = GemmConfig(block_m=128, block_n=128, block_k=64, streamk=True, num_stages=4)
    assert "reduce" in _with_reduce(sk).short() and "reduce_kernel" not in sk.model_dump()
    persistent = GemmConfig(block_m=128, block_n=128, block_k=64, reduce_kernel=True)
    assert "streamk" in config_supports(persistent, problem, H200)
    assert _with_reduce(sk) in list(_neighbours(sk))
    # A Stream-K config that splits nothing is its persistent twin, reduce kernel or not.
    big = Problem(4096, 4096, 4096, "bf16")
    assert _canonical(_with_reduce(sk), big, H200) == GemmConfig.model_validate(
        {**sk.model_dump(), "streamk": False})
    # The heuristic offers it where no data-parallel tile hides the fix-up (4 tiles), not on 4096^3.
    assert any(c.reduce_kernel for c in heuristic.candidates(problem, H200))
    assert not any(c.reduce_kernel for c in heuristic.candidates(big, H200))


def test_no_reduce_kernel_on_small_problems():
    # A small problem's kernel takes a few us: the reduce kernel's second launch is host time an eager
    # call pays (128x128x8192 on the H200: host 31 -> 48 us a call; `git show
    # 016dd08:scripts/reduce_host_probe.py`), which the tuner's graph replays of small problems would
    # not see. Neither the heuristic nor the tuner's space offers it there; a long-K problem of few
    # tiles (32 of 128x128) still gets it.
    small, long_k = Problem(128, 128, 8192, "bf16"), Problem(256, 2048, 28672, "bf16")
    assert small.small and not long_k.small
    sk = GemmConfig(block_m=32, block_n=32, block_k=128, streamk=True)
    assert not _canonical(_with_reduce(sk), small, H200).reduce_kernel
    wide = GemmConfig(block_m=128, block_n=128, block_k=64, streamk=True)
    assert _canonical(_with_reduce(wide), long_k, H200).reduce_kernel
    assert not any(c.reduce_kernel for c in heuristic.candidates(small, H200))
    assert not any(c.reduce_kernel for c in candidate_space(small, H200, exhaustive=True))
    assert any(c.reduce_kernel for c in candidate_space(long_k, H200))
