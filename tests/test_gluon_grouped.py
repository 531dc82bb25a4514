"""The Gluon grouped kernel (kernels/grouped_gluon.py): on any machine, that each of its tiles compiles for
sm_90 under this triton without spills or serialized wgmma, which keys and configs it runs
(grouped.select.gluon_refusal), what the tuner and the heuristic offer, and which kernel a call runs when
the Gluon one cannot take its tensors; on the GPU (TRITONBLAS_TEST_GPU=1), its results against float64 on
balanced, skewed and empty groups, a tail, bias, fp16, 256 experts, and a CUDA graph replayed with new
counts. tests/test_grouped.py's `gluon` path runs its small cases too."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers.grouped import assert_close
from helpers.hashes import assert_family_hash_moves

import tritonblas
from tritonblas import GemmConfig, identity
from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch
from tritonblas.device import interpreter_enabled
from tritonblas.grouped import select as grouped_select
from tritonblas.grouped.forms import GroupedKey, GroupedShape
from tritonblas.grouped.gluon import gluon_ready, gluon_twin
from tritonblas.grouped.select import (
    GLUON_DEFAULT,
    GLUON_TILES,
    grouped_supports,
    heuristic,
    vendor_preferred,
)
from tritonblas.grouped.tune import candidates

H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
ROOT = Path(__file__).resolve().parent.parent
GPU = torch.cuda.is_available() and not interpreter_enabled()
GLUON_CONFIGS = [GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, tma=True,
                            gluon=True) for (bm, bn, bk, w), s in GLUON_TILES.items()]


def _key(groups=128, n=1536, k=2048, rows=256, dtype="bf16", layout="nt", form="2d3d") -> GroupedKey:
    return GroupedKey(form, groups, n, k, rows, dtype, layout)


def test_every_tile_compiles_for_sm_90_without_spills_or_serialized_wgmma():
    """tests/gluon_compile.py --grouped: each GLUON_TILES entry at its deepest ring (the first with the
    group table of 256 experts): no spilled register, fewer waits than wgmma (ptxas serializing them puts
    a wait after each), shared memory within the H200's."""
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    done = subprocess.run([sys.executable, str(ROOT / "tests" / "gluon_compile.py"), "--grouped"], env=env,
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.startswith("{")]
    assert len(rows) == len(GLUON_TILES)
    for row in rows:
        assert row["spills"] == 0 and 0 < row["waits"] < row["wgmma"], row
        assert row["shared"] <= H200.smem_per_block, row


@pytest.mark.parametrize("config, key, device, says", [
    (GLUON_CONFIGS[0], _key(), H200, None),
    (GLUON_CONFIGS[3], _key(rows=1, dtype="fp16"), H200, None),
    (GLUON_CONFIGS[0], _key(), INTERPRETER_DEVICE, "sm_90"),
    (GLUON_CONFIGS[0], _key(), device_for_arch("sm_80", "NVIDIA A100", 108), "sm_90"),
    (GLUON_CONFIGS[0], _key(layout="nn"), H200, "layout nt"),
    (GLUON_CONFIGS[0], _key(form="3d3d"), H200, "MoE forward"),
    (GLUON_CONFIGS[0], _key(dtype="fp32"), H200, "bf16 or fp16"),
    (GLUON_CONFIGS[0].model_copy(update={"num_stages": 5}), _key(), H200, "4 stages at most"),
    (GLUON_CONFIGS[0].model_copy(update={"block_k": 128}), _key(), H200, "tiles"),
    (GLUON_CONFIGS[0].model_copy(update={"tma": False}), _key(), H200, "persistent TMA"),
    (GLUON_CONFIGS[0].model_copy(update={"grid": 264}), _key(), H200, "persistent TMA"),
    (GLUON_CONFIGS[0].model_copy(update={"streamk": True}), _key(), H200, "no streamk"),
], ids=["fits", "decode_fp16", "interpreter", "sm_80", "nn", "batched", "fp32", "deep_ring", "other_tile",
        "pointers", "two_programs_an_sm", "streamk"])
def test_where_a_gluon_config_runs(config, key, device, says):
    ok, reason = grouped_supports(config, key, device)
    assert ok if says is None else (not ok and says in reason), reason


def test_the_tuner_times_the_gluon_tiles_right_after_the_heuristics():
    offered = candidates(_key(), H200)
    assert len(set(offered)) == len(offered) and all(c.gluon for c in offered[:5])
    assert {(c.block_m, c.block_n, c.block_k, c.num_warps) for c in offered if c.gluon} == set(GLUON_TILES)
    assert not any(c.gluon for c in candidates(_key(layout="nn"), H200))
    assert not any(c.gluon for c in candidates(_key(), INTERPRETER_DEVICE))
    assert not any(c.gluon for c in candidates(_key(rows=32), H200))  # decode: the Triton tiles


@pytest.mark.parametrize("key, expect", [
    (_key(), GLUON_DEFAULT),  # Qwen3-MoE gate_up, 256 rows an expert
    (_key(n=2048, k=768), GLUON_DEFAULT),  # a short K: the Gluon kernel, no longer torch's op
    (_key(groups=8, n=28672, k=4096, rows=1024), "torch"),  # Mixtral: CUTLASS holds large groups
    (_key(rows=1), "triton"),  # decode: the 16-row Triton tile
    (_key(layout="nn", k=768), "torch"),  # a short K where the Gluon kernel cannot run
])
def test_the_heuristic_for_keys_nobody_tuned(key, expect):
    if expect == "torch":
        assert vendor_preferred(key, H200)
        return
    assert not vendor_preferred(key, H200)
    config = heuristic(key, H200)
    assert config == expect if isinstance(expect, GemmConfig) else not config.gluon


def test_grouped_bench_against_times_the_gluon_configs_beside_a_tables_winner():
    """scripts/grouped_bench.py --against: an nt key past 64 rows an expert gets the table's kernel winner
    and the Gluon configs (torch's op is always timed); a key the Gluon kernel does not run is kept."""
    import importlib.util

    from tritonblas.shapes import GroupedEntry

    spec = importlib.util.spec_from_file_location("grouped_bench", ROOT / "scripts" / "grouped_bench.py")
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    entry = GroupedEntry(groups=128, m=32768, n=1536, k=2048, layout="nt")
    held = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=4, tma=True)
    key = bench.tune.entry_key(entry)
    offered = bench.against(entry, {key: held}, H200)
    assert offered[0] == held and all(c.gluon for c in offered[1:]) and len(offered) == 6
    assert all(c.gluon for c in bench.against(entry, {key: GemmConfig.vendor()}, H200))
    assert bench.against(GroupedEntry(groups=128, m=32768, n=1536, k=2048, layout="nn"), {}, H200) is None
    assert bench.against(GroupedEntry(groups=128, m=64, n=1536, k=2048, layout="nt"), {}, H200) is None


def test_tensors_the_gluon_kernel_cannot_take_run_its_triton_twin():
    """On the CPU (the interpreter), and on any device for a row-major weight, unaligned rows or an fp32
    output, a Gluon config's call runs the Triton grouped kernel with the same tile, which the predicate
    accepts wherever the Gluon one is accepted."""
    x = torch.empty(64, 32, dtype=torch.bfloat16)
    w = torch.empty(4, 48, 32, dtype=torch.bfloat16).transpose(1, 2)
    out = torch.empty(64, 48, dtype=torch.bfloat16)
    shape = GroupedShape("2d3d", 4, 64, 48, 32, (64, 48))
    assert not gluon_ready(x, w, out, shape)  # CPU tensors
    for config in GLUON_CONFIGS:
        twin = gluon_twin(config, 2)
        assert not twin.gluon and twin.model_copy(update={"gluon": True}) == config
        assert grouped_supports(twin, _key(), H200)[0]
        wide = gluon_twin(config, 4)  # fp32 operands: a shallower ring that fits
        assert 1 <= wide.num_stages < config.num_stages
        assert grouped_supports(wide, _key(dtype="fp32"), H200)[0]


def test_the_gluon_kernel_is_in_the_grouped_family_hash():
    """An edit to the Gluon grouped kernel or its planning changes the grouped family's hash, not the
    dense one."""
    assert_family_hash_moves(
        identity.GROUPED_KERNELS, identity.GROUPED_PLANNING, identity.grouped_kernel_hash(),
        ("grouped_gluon.py", "PRODUCER_REGS = gl.constexpr(64)", "PRODUCER_REGS = gl.constexpr(56)"),
        ("grouped/gluon.py", "_TWIN_RING_BYTES = 200 * 1024", "_TWIN_RING_BYTES = 100 * 1024"))


# --- on the GPU ------------------------------------------------------------------------------------------

gpu = pytest.mark.skipif(not GPU, reason="needs a CUDA GPU and TRITONBLAS_TEST_GPU=1")


def _moe(groups: int, sizes: list[int], n: int, k: int, dtype=torch.bfloat16, tail: int = 0, bias=False):
    """x (rows, K), the weights as (E, K, N) over (E, N, K) storage, offs, bias (E, N) or None."""
    rows = sum(sizes) + tail
    x = torch.randn(rows, k, device="cuda").to(dtype)
    w = torch.randn(groups, n, k, device="cuda").div(k ** 0.5).to(dtype).transpose(1, 2)
    offs = torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32)
    b = torch.randn(groups, n, device="cuda").to(dtype) if bias else None
    return x, w, offs, b


def _run(config, x, w, offs, bias=None):
    """The launch twice, into two outputs (the first through triton, the second through its C launcher:
    grouped.gluon.run_gluon); equal bit for bit, the second returned."""
    from tritonblas.grouped import launch

    shape = GroupedShape("2d3d", w.shape[0], x.shape[0], w.shape[2], x.shape[1], (x.shape[0], w.shape[2]))
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    outs = [torch.full(shape.out_shape, float("nan"), device="cuda", dtype=x.dtype) for _ in range(2)]
    for out in outs:
        launch.run(x, w, out, bias, offs, shape, config, sms, "tf32")
    assert torch.equal(outs[0], outs[1])
    return outs[1]


SKEWED = [300, 0, 1, 129, 64, 0, 700, 2, 255, 257, 0, 31]


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("config", GLUON_CONFIGS, ids=lambda c: c.short().replace(" ", "_"))
@pytest.mark.parametrize("bias", [False, True])
def test_gpu_every_tile_matches_float64(config, bias):
    """Skewed counts (empty groups, one row, groups across tile edges), a tail of zeros, a ragged N."""
    torch.manual_seed(0)
    x, w, offs, b = _moe(len(SKEWED), SKEWED, 328, 256, tail=37, bias=bias)
    assert gluon_ready(x, w, torch.empty(1, 328, device="cuda", dtype=x.dtype),
                       GroupedShape("2d3d", len(SKEWED), x.shape[0], 328, 256, (x.shape[0], 328)))
    out = _run(config, x, w, offs, b)
    assert (out[sum(SKEWED):] == 0).all()
    assert_close(out, x, w, offs, b)


@gpu
@pytest.mark.gpu
@pytest.mark.parametrize("config", [GLUON_CONFIGS[0], GLUON_CONFIGS[3]], ids=["cooperative", "pingpong"])
def test_gpu_256_experts_fp16_and_bias(config):
    """The group table of 512 entries (DeepSeek-V3's 256 experts and the tail), fp16, a bias."""
    torch.manual_seed(1)
    sizes = [int(s) for s in torch.randint(0, 40, (256,))]
    x, w, offs, b = _moe(256, sizes, 64, 128, dtype=torch.float16, tail=5, bias=True)
    assert_close(_run(config, x, w, offs, b), x, w, offs, b)


@gpu
@pytest.mark.gpu
def test_gpu_grouped_mm_picks_and_replays_the_gluon_kernel_in_a_graph(monkeypatch):
    """Through grouped_mm with a Gluon selection: captured once, replayed after the counts change on the
    device, right each time; a fresh thread launches too (its context made current)."""
    import threading

    config = GLUON_CONFIGS[0]
    picked = grouped_select.GroupedSelection
    monkeypatch.setattr(grouped_select, "select", lambda key, device, backend=None: picked(config, "", key))
    import tritonblas.grouped.op as op
    from tritonblas import caches

    monkeypatch.setattr(op, "select", grouped_select.select)
    caches.invalidate()
    torch.manual_seed(2)
    x, w, offs, _ = _moe(8, [64] * 8, 256, 512)
    tritonblas.grouped_mm(x, w, offs=offs)
    stream = torch.cuda.Stream()
    with torch.cuda.stream(stream):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=stream):
            out = tritonblas.grouped_mm(x, w, offs=offs)
    for sizes in ([64] * 8, [0, 300, 1, 0, 100, 50, 10, 51], [512, 0, 0, 0, 0, 0, 0, 0]):
        offs.copy_(torch.tensor(sizes, device="cuda").cumsum(0).to(torch.int32))
        graph.replay()
        torch.cuda.synchronize()
        assert_close(out, x, w, offs, None)
    got = {}
    thread = threading.Thread(target=lambda: got.setdefault("out", tritonblas.grouped_mm(x, w, offs=offs)))
    thread.start()
    thread.join()
    assert_close(got["out"], x, w, offs, None)
