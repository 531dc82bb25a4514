"""Where a Stream-K launch spends its time, per program: %globaltimer stamps at each phase boundary of a
copy of kernels/streamk.py's kernel body (the same jit helpers, so the same code between the stamps).
A diagnostic, not a test (not collected: no test_ prefix). On a GPU, from the repository root:
    python tests/streamk_timeline.py            # the CASES below, each in its launch's own mode
    python tests/streamk_timeline.py --both     # and with the other fix-up mode forced
    python tests/streamk_timeline.py --splitk   # split-K problems beside unsplit ones of equal K loops
Per case: the launch's kernel time (graph replay of tritonblas.matmul with the config, as kernel_ab.py),
torch.mm's, and from one stamped launch the phases' end times over the programs (min / median / max, us
from the first program's start), the last program to finish and its phase lengths.
"""

import sys

import triton
import triton.language as tl
from kernel_ab import _graph_us  # tests/ is the script's directory: the same replay timing

from tritonblas.kernels.common import epilogue, k_loop, operand_sources, tile_coords
from tritonblas.kernels.streamk import _claim_chunks, finish_segment

STAMPS = 6  # per program: start, then the end of each phase (names in _phases), then its SM id


@triton.jit
def _now():
    return tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False,
                                     pack=1)


@triton.jit
def _smid():
    return tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)


@triton.jit
def _segment(a_ptr, b_ptr, a_desc, b_desc, c_ptr, bias_ptr, ws_ptr, counter_ptr, ts_ptr, M, N, K, NUM_PROGS,
             stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
             alpha, beta, pid, dp_tiles, sk_tiles, splits, iters_per_tile, STAMP: tl.constexpr,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
             HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr, USE_TMA: tl.constexpr,
             A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr,
             INT64: tl.constexpr, FIXUP_CHUNKS: tl.constexpr, DEFERRED: tl.constexpr):
    """streamk._split_segment with stamps STAMP (K loop done) and STAMP + 1 (stored, arrived, settled)."""
    sk_tile = pid % sk_tiles
    seg = pid // sk_tiles
    pid_m, pid_n = tile_coords(dp_tiles + sk_tile, M, N, BLOCK_M, BLOCK_N, GROUP_M)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                 pid_m, pid_n, seg * iters_per_tile // splits, (seg + 1) * iters_per_tile // splits,
                 BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64)
    tl.store(ts_ptr + pid * 8 + STAMP, _now())
    finish_segment(acc, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
                   stride_biasn, alpha, beta, pid_m, pid_n, pid, sk_tile, sk_tiles, splits, seg,
                   NUM_PROGS, BLOCK_M, BLOCK_N, HAS_BIAS, INT64, FIXUP_CHUNKS, DEFERRED, False)
    tl.store(ts_ptr + pid * 8 + STAMP + 1, _now())


@triton.jit
def timeline_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta, a_host, b_host, ts_ptr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr,
    HAS_BIAS: tl.constexpr, EVEN_K: tl.constexpr, PRECISION: tl.constexpr,
    USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
    A_DIV: tl.constexpr, B_DIV: tl.constexpr, FLATTEN: tl.constexpr, WARP_SPEC: tl.constexpr,
    INT64: tl.constexpr, HOST_DESC: tl.constexpr, FIXUP_CHUNKS: tl.constexpr, DEFERRED: tl.constexpr,
    REDUCE: tl.constexpr,
):
    """streamk_gemm_kernel's body with stamps: 0 start; deferred: 1 segment's K loop, 2 its partial
    settled, 3 data-parallel tiles, 4 claims; else 1 data-parallel tiles, 2 K loop, 3 settled, 4 = 3."""
    tl.static_assert(not REDUCE, "the timeline stamps the in-kernel fix-up (reduce_kernel=False)")
    pid = tl.program_id(0)
    tl.store(ts_ptr + pid * 8, _now())
    tl.store(ts_ptr + pid * 8 + 7, _smid().to(tl.int64))
    a_desc, b_desc = operand_sources(a_ptr, b_ptr, a_host, b_host, M, N, K, stride_am, stride_ak,
                                     stride_bk, stride_bn, BLOCK_M, BLOCK_N, BLOCK_K, USE_TMA, HOST_DESC,
                                     A_COL, B_COL)
    num_tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    iters_per_tile = tl.cdiv(K, BLOCK_K)
    dp_tiles = (num_tiles // NUM_PROGS) * NUM_PROGS
    sk_tiles = num_tiles - dp_tiles
    splits = min(NUM_PROGS // max(sk_tiles, 1), iters_per_tile)
    in_split = pid < splits * sk_tiles
    if DEFERRED:
        if in_split:
            _segment(a_ptr, b_ptr, a_desc, b_desc, c_ptr, bias_ptr, ws_ptr, counter_ptr, ts_ptr, M, N, K,
                     NUM_PROGS, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     stride_biasm, stride_biasn, alpha, beta, pid, dp_tiles, sk_tiles, splits,
                     iters_per_tile, 1, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, HAS_BIAS, EVEN_K, PRECISION,
                     USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64, FIXUP_CHUNKS, DEFERRED)
    for tile_id in tl.range(pid, dp_tiles, NUM_PROGS, flatten=FLATTEN, warp_specialize=WARP_SPEC):
        pid_m, pid_n = tile_coords(tile_id, M, N, BLOCK_M, BLOCK_N, GROUP_M)
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        acc = k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk,
                     stride_bn, pid_m, pid_n, 0, iters_per_tile, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K,
                     PRECISION, USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64)
        epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
                 alpha, beta, pid_m, pid_n, BLOCK_M, BLOCK_N, HAS_BIAS, INT64)
    if DEFERRED:
        tl.store(ts_ptr + pid * 8 + 3, _now())
        if in_split:
            _claim_chunks(c_ptr, bias_ptr, ws_ptr, counter_ptr, M, N, stride_cm, stride_cn, stride_biasm,
                          stride_biasn, alpha, beta, pid, dp_tiles, sk_tiles, splits, BLOCK_M, BLOCK_N,
                          GROUP_M, HAS_BIAS, INT64, FIXUP_CHUNKS)
        tl.store(ts_ptr + pid * 8 + 4, _now())
    else:
        tl.store(ts_ptr + pid * 8 + 1, _now())
        if in_split:
            _segment(a_ptr, b_ptr, a_desc, b_desc, c_ptr, bias_ptr, ws_ptr, counter_ptr, ts_ptr, M, N, K,
                     NUM_PROGS, stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn,
                     stride_biasm, stride_biasn, alpha, beta, pid, dp_tiles, sk_tiles, splits,
                     iters_per_tile, 2, BLOCK_M, BLOCK_N, BLOCK_K, GROUP_M, HAS_BIAS, EVEN_K, PRECISION,
                     USE_TMA, A_COL, B_COL, A_DIV, B_DIV, INT64, FIXUP_CHUNKS, DEFERRED)
        tl.store(ts_ptr + pid * 8 + 4, _now())


_TILE = dict(block_k=64, streamk=True)
CASES = [  # (m, n, k, config fields): the streamk class's worst rows on their shipped winners, and more
    (768, 3072, 8192, dict(_TILE, block_m=128, block_n=128, num_warps=4, num_stages=5, group_m=4)),  # S 11
    (768, 3072, 8192, dict(_TILE, block_m=128, block_n=128, num_warps=4, num_stages=5, tma=True)),
    (2176, 2176, 4096, dict(_TILE, block_m=128, block_n=128, num_warps=4, num_stages=5, group_m=4)),  # S 5
    (2176, 2176, 4096, dict(_TILE, block_m=128, block_n=256, num_warps=8, num_stages=3, tma=True)),  # S 6
    (256, 2048, 28672, dict(_TILE, block_m=128, block_n=128, num_warps=4, num_stages=6)),  # 32 tiles, S 4
    (512, 512, 32768, dict(_TILE, block_m=64, block_n=128, block_k=128, num_warps=4, num_stages=4)),  # S 4
    (1024, 1024, 16384, dict(_TILE, block_m=128, block_n=128, num_warps=4, num_stages=5, tma=True)),  # S 2
]


# Few tiles, long K (no data-parallel tile), each beside a problem whose 128 tiles run the same K loop
# unsplit: whether a split program's K loop runs at the unsplit rate, and what its partial and fix-up
# add (h200-streamk-timeline11*.txt); `--splitk` runs only these.
_SPLIT = dict(block_k=64, streamk=True, block_m=128, block_n=128, num_warps=4)
SPLITK_CASES = [
    (512, 512, 32768, dict(_SPLIT, num_stages=6)),  # S 8: 64 iterations a program
    (1024, 2048, 4096, dict(_SPLIT, num_stages=6)),  # 128 tiles, S 1: 64 iterations, unsplit
    (1024, 1024, 16384, dict(_SPLIT, num_stages=5, tma=True)),  # S 2: 128 iterations
    (1024, 2048, 8192, dict(_SPLIT, num_stages=5, tma=True)),  # S 1: 128 iterations, unsplit
    (1024, 1024, 16384, dict(_SPLIT, num_stages=6)),  # S 2 by pointers
    (256, 2048, 28672, dict(_SPLIT, num_stages=6)),  # S 4: 112 iterations
    (512, 3584, 7168, dict(_SPLIT, num_stages=6)),  # 112 tiles, S 1: 112 iterations, unsplit
    (512, 512, 32768, dict(_SPLIT, num_stages=5, tma=True)),  # S 8 by TMA
    (512, 512, 32768, dict(_SPLIT, num_stages=4, tma=True)),
]


def _phases(deferred: bool) -> list[str]:
    if deferred:
        return ["segment K loop", "partial settled", "data-parallel", "claims"]
    return ["data-parallel", "segment K loop", "settled+fix-up", "(end)"]


def _report(ts, deferred: bool, progs: int) -> None:
    import statistics

    start = min(int(ts[p][0]) for p in range(progs))
    names = _phases(deferred)
    rows = []
    for p in range(progs):
        t = [int(x) for x in ts[p][:5]]
        # A phase a program skipped has no stamp (0): it ended when the phase before it did.
        for i in range(1, 5):
            if t[i] == 0:
                t[i] = t[i - 1]
        rows.append([(x - start) / 1e3 for x in t])
    print("    phase ends (us from the first start): min / median / max", flush=True)
    for i, name in enumerate(["start", *names]):
        col = [r[i] for r in rows]
        print(f"      {name:16s} {min(col):7.2f} {statistics.median(col):7.2f} {max(col):7.2f}")
    last = max(range(progs), key=lambda p: rows[p][4])
    steps = [rows[last][i + 1] - rows[last][i] for i in range(4)]
    phases = ", ".join(f"{n} {s:.2f}" for n, s in zip(names, steps, strict=True))
    print(f"    last program {last} (SM {int(ts[last][7])}): start {rows[last][0]:.2f}, {phases}; "
          f"end {rows[last][4]:.2f} us")


def _run(torch, do_bench, m, n, k, fields, other: bool) -> None:
    import tritonblas
    from tritonblas import arith, launch

    torch.manual_seed(0)
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
    out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
    cfg = tritonblas.GemmConfig(**fields)
    plan = launch._make_plan(a, b, out, None, cfg, torch.cuda.get_device_properties(0).multi_processor_count,
                             "tf32")
    constexprs = dict(plan.constexprs)
    if other:  # the fix-up mode the launch does not take
        force = not constexprs["DEFERRED"]
        constexprs["DEFERRED"] = force
        tile = cfg.block_m * cfg.block_n
        constexprs["FIXUP_CHUNKS"] = max(1, min(8, tile // (arith.DEFERRED_CHUNK if force else 4096)))
        if not (force or cfg.tma):
            constexprs["FIXUP_CHUNKS"] = 1
    floats, counters = plan.workspace
    floats += plan.progs * cfg.block_m * cfg.block_n  # room for group slots in any mode
    ws = torch.empty(floats, device="cuda", dtype=torch.float32)
    cnt = torch.zeros(counters + 4 * plan.progs, device="cuda", dtype=torch.int32)
    ts = torch.zeros(plan.progs, 8, device="cuda", dtype=torch.int64)
    launch._ensure_allocator()

    def stamped():
        timeline_kernel[(plan.progs,)](a, b, out, out, ws, cnt, *plan.ints, 1.0, 0.0, None, None, ts,
                                       **constexprs, num_warps=plan.num_warps, num_stages=plan.num_stages)

    for _ in range(3):
        ts.zero_()
        stamped()
    torch.cuda.synchronize()
    err = (out.float() - (a.float() @ b.float())).abs().max().item()
    stamped_us = do_bench(stamped, rep=100) * 1e3
    ts.zero_()
    stamped()
    torch.cuda.synchronize()
    deferred = constexprs["DEFERRED"]
    graph = _graph_us(torch, do_bench, lambda: tritonblas.matmul(a, b, config=cfg, out=out))
    torch_graph = _graph_us(torch, do_bench, lambda: torch.mm(a, b, out=out))
    print(f"{m}x{n}x{k} {cfg.short()} deferred={deferred} chunks={constexprs['FIXUP_CHUNKS']} "
          f"progs={plan.progs}: graph {graph:.2f} us (torch.mm {torch_graph:.2f}), stamped eager "
          f"{stamped_us:.1f} us, max err {err:.3g}", flush=True)
    _report(ts.cpu().tolist(), deferred, plan.progs)


def main() -> int:
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return 0
    import torch
    from triton.testing import do_bench

    for m, n, k, fields in SPLITK_CASES if "--splitk" in sys.argv else CASES:
        for other in (False, True) if "--both" in sys.argv else (False,):
            _run(torch, do_bench, m, n, k, fields, other)
    return 0


if __name__ == "__main__":
    sys.exit(main())
