"""Kernel time of fixed configs, to compare two trees' kernels on the same configs. Run from each
tree's root on a GPU:
    python tests/kernel_ab.py            # one line per (problem, config): eager and graph-replay us
    python tests/kernel_ab.py --fixup    # only the Stream-K fix-up cases (FIXUP_CASES)
    python tests/kernel_ab.py --chunks   # only the chunked, deferred fix-up's cases (CHUNK_CASES)
    python tests/kernel_ab.py --chunks --both-modes   # and each with data-parallel tiles both ways
    python tests/kernel_ab.py --bigtile  # 128x256 tiles: one exact wave, and a wave plus a split part
    python tests/kernel_ab.py --reduce   # the Stream-K fix-up in a reduce kernel against in the kernel
    python tests/kernel_ab.py --splitk   # 512x512x32768 split 8 ways: stages x loads x fix-up kind
    python tests/kernel_ab.py --hdesc    # TMA winners with device- and host-built descriptors
or this file against another tree's package (`bash scripts/h200_run.sh ab`); a config the tree does not
know (a field it lacks) prints "n/a". A benchmark, not a test (not collected: no test_ prefix).
Eager is `tritonblas.matmul` with the config, host time included; "graph" is the same call replayed from
a CUDA graph of REPS calls, per call: the kernel's own time, which is what the kernel levers change.
"""

import sys

REPS = 20
SK = dict(streamk=True, tma=True)  # Stream-K on TMA loads: the family the streamk class tunes to
CASES = [  # (m, n, k, config fields): the persistent and Stream-K kernels, TMA and pointer loads
    (4096, 4096, 4096, dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True,
                            flatten=True)),
    (3000, 2000, 5000, dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3)),
    (16, 4096, 14336, dict(block_m=16, block_n=64, block_k=256, num_warps=4, num_stages=5)),
    (1920, 1920, 8192, dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, streamk=True)),
    # The tree fix-up (kernel-levers row 24): S splits of each leftover tile, S >= 12 takes the tree.
    (256, 256, 65536, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, **SK)),  # S 33
    (128, 128, 8192, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, **SK)),  # S 128
    (512, 512, 32768, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=3, **SK)),  # S 8
    (768, 3072, 8192, dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, **SK)),  # S 11
    (2176, 2176, 4096, dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, **SK)),  # S 5
    (256, 2048, 28672, dict(block_m=64, block_n=128, block_k=64, num_warps=4, num_stages=4, **SK)),  # S 2
    (1024, 1024, 16384, dict(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, **SK)),  # S 2
]
# Host-built vs device-built descriptors (kernel-levers row 25): small problems, both families.
for _m, _n, _k, _bm, _bn in ((256, 256, 256, 64, 64), (512, 512, 512, 64, 128), (768, 768, 768, 64, 128),
                             (1024, 1024, 512, 128, 128), (1024, 1024, 1024, 64, 128),
                             (64, 1024, 512, 64, 64), (128, 128, 8192, 128, 128)):
    for _host in (False, True):
        CASES.append((_m, _n, _k, dict(block_m=_bm, block_n=_bn, block_k=64, num_warps=4, num_stages=4,
                                       tma=True, streamk=_k >= 8192, host_descriptors=_host)))

# The fix-up's pipelined reads (kernel-levers row 30) by mainloop kind: the streamk class's winners
# (pointer loads, 5-6 stages, 4 warps) and the same tiles by TMA at 3 stages; `--fixup` runs only these.
FIXUP_CASES = []
for _m, _n, _k, _bm, _bn, _bk in ((768, 3072, 8192, 128, 128, 64), (2176, 2176, 4096, 128, 128, 64),
                                  (512, 512, 32768, 128, 128, 64), (512, 512, 32768, 64, 128, 128),
                                  (256, 256, 65536, 128, 128, 64), (256, 2048, 28672, 128, 128, 64)):
    for _tma, _stages in ((False, 5), (True, 3)):
        FIXUP_CASES.append((_m, _n, _k, dict(block_m=_bm, block_n=_bn, block_k=_bk, num_warps=4,
                                             num_stages=_stages if _bk == 64 else 4, **dict(SK, tma=_tma))))

# The fix-up's row chunks, claimed after the data-parallel tiles (kernel-levers row 31): the streamk and
# small classes' shipped Stream-K winners, 128x128 TMA tiles (row 30's pipelined set) and 128x256 tiles
# on 8 warps where the deferred fix-up splits them; `--chunks` runs only these.
CHUNK_CASES = []
for _m, _n, _k, _bm, _bn, _bk, _w, _s, _tma in (
        (768, 3072, 8192, 128, 128, 64, 4, 5, False), (2176, 2176, 4096, 128, 128, 64, 4, 5, False),
        (1792, 1792, 8192, 128, 128, 64, 4, 5, False), (256, 2048, 28672, 128, 128, 64, 4, 6, False),
        (512, 512, 32768, 64, 128, 128, 4, 4, False), (1024, 1024, 16384, 128, 128, 64, 4, 5, True),
        (768, 3072, 8192, 128, 128, 64, 4, 3, True), (2176, 2176, 4096, 128, 128, 64, 4, 3, True),
        (256, 256, 65536, 128, 128, 64, 4, 3, True), (128, 128, 8192, 128, 128, 64, 4, 3, True),
        (2176, 2176, 4096, 128, 256, 64, 8, 3, True), (6144, 1024, 8192, 128, 256, 64, 8, 3, True),
        (768, 768, 768, 64, 64, 128, 4, 4, False), (128, 128, 8192, 32, 32, 256, 4, 5, False),
        (64, 1024, 512, 16, 64, 256, 4, 5, False), (896, 3072, 8192, 128, 128, 64, 4, 5, False),
        (1536, 3072, 8192, 128, 128, 64, 4, 5, False)):
    CHUNK_CASES.append((_m, _n, _k, dict(block_m=_bm, block_n=_bn, block_k=_bk, num_warps=_w, num_stages=_s,
                                         streamk=True, tma=_tma)))

# Where 128x256 Stream-K tiles lose their time (one tree, not an A/B; `--bigtile` runs only these): one
# exact wave of 132 tiles (1536x2816x4096) on both kernels, then 2176x2176x4096 (153 tiles: a wave and
# 21 tiles split 6 ways) on both, with the data-parallel loop's levers.
_BIG = dict(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True)
BIGTILE_CASES = [(3000, 2000, 5000, dict(_BIG, streamk=True)), (6144, 1024, 8192, dict(_BIG, streamk=True)),
                 (1024, 1024, 16384, dict(_BIG, block_n=128, num_warps=4, num_stages=5, streamk=True)),
                 (1792, 1792, 8192, dict(_BIG, block_n=128, num_warps=4, num_stages=5, streamk=True)),
                 (512, 1024, 32768, dict(_BIG, block_n=128, num_warps=4, num_stages=5, streamk=True)),
                 (256, 256, 65536, dict(_BIG, block_n=128, num_warps=4, streamk=True)),
                 (512, 512, 32768, dict(_BIG, streamk=True)),
(1536, 2816, 4096, dict(_BIG)), (1536, 2816, 4096, dict(_BIG, streamk=True)),
                 (2176, 2176, 4096, dict(_BIG)), (2176, 2176, 4096, dict(_BIG, streamk=True)),
                 (2176, 2176, 4096, dict(_BIG, streamk=True, flatten=True)),
                 (2176, 2176, 4096, dict(_BIG, streamk=True, warp_specialize=True)),
                 (2176, 2176, 4096, dict(_BIG, flatten=True)),
                 (1536, 2816, 4096, dict(_BIG, flatten=True))]

# The fix-up in a kernel of its own (GemmConfig.reduce_kernel) against the in-kernel one, on the few-tile
# long-K problems (no data-parallel tile) and their shipped winners, and two with data-parallel tiles;
# `--reduce` runs only these.
REDUCE_CASES = []
for _m, _n, _k, _fields in ((256, 2048, 28672, dict(block_m=128, block_n=128, block_k=64, num_stages=6)),
                            (512, 512, 32768, dict(block_m=64, block_n=128, block_k=128, num_stages=4)),
                            (1024, 1024, 16384, dict(block_m=128, block_n=128, block_k=64, num_stages=5,
                                                     tma=True)),
                            (256, 256, 65536, dict(block_m=128, block_n=128, block_k=64, num_stages=3,
                                                   tma=True)),
                            (128, 128, 8192, dict(block_m=32, block_n=32, block_k=128, num_stages=5)),
                            # a data-parallel wave and a split remainder (deferred claims in the kernel)
                            (768, 3072, 8192, dict(block_m=128, block_n=128, block_k=64, num_stages=6)),
                            (2176, 2176, 4096, dict(block_m=128, block_n=128, block_k=64, num_stages=5))):
    for _reduce in (False, True):
        REDUCE_CASES.append((_m, _n, _k, dict(_fields, num_warps=4, streamk=True,
                                              **({"reduce_kernel": True} if _reduce else {}))))


# 512x512x32768 (16 tiles of 128x128, S 8) over stages, loads and where the fix-up runs (`--splitk`), and
# TMA tiles with descriptors built in the kernel and on the host (`--hdesc`; h200-hdesc-ab11.txt).
SPLITK_CASES = [(512, 512, 32768, dict(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=s,
                                       streamk=True, tma=tma, reduce_kernel=r))
                for tma in (False, True) for s in (4, 5, 6) for r in (False, True)]
_TMA = dict(block_k=64, block_m=128, block_n=128, num_warps=4, tma=True)
_TMA_BIG = dict(block_k=64, block_m=128, block_n=256, num_warps=8, num_stages=3, tma=True)
HDESC_CASES = [(m, n, k, dict(f, host_descriptors=host)) for m, n, k, f in (
    (1024, 1024, 16384, dict(_TMA, num_stages=5, streamk=True)),
    (1792, 1792, 8192, dict(_TMA, num_stages=5, streamk=True)),
    (512, 512, 32768, dict(_TMA, num_stages=6, streamk=True, reduce_kernel=True)),
    (768, 3072, 8192, dict(_TMA, num_stages=5, streamk=True)),
    (256, 2048, 28672, dict(_TMA, num_stages=5, streamk=True, reduce_kernel=True)),
    (6144, 1024, 8192, dict(_TMA, num_stages=5, flatten=True)),
    (4096, 4096, 4096, dict(_TMA_BIG, flatten=True)),
    (2048, 2048, 8192, dict(_TMA_BIG, flatten=True)),
    (3000, 2000, 5000, dict(_TMA_BIG, streamk=True))) for host in (False, True)]


def _graph_us(torch, do_bench, call) -> float:
    """Per-call time of `call` replayed from a CUDA graph of REPS calls (captured on a side stream)."""
    stream = torch.cuda.Stream()
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):
        call()  # warm: compile and allocate outside the capture
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph, stream=stream):  # the warm call's scratch (keyed by stream) serves
        for _ in range(REPS):
            call()
    return do_bench(graph.replay, rep=200) * 1e3 / REPS


def main() -> int:
    if "--help" in sys.argv or "-h" in sys.argv:
        print(__doc__)
        return 0
    import torch
    from triton.testing import do_bench

    import tritonblas

    sets = {"--fixup": FIXUP_CASES, "--chunks": CHUNK_CASES, "--bigtile": BIGTILE_CASES,
            "--reduce": REDUCE_CASES, "--splitk": SPLITK_CASES, "--hdesc": HDESC_CASES}
    cases = next((cases for flag, cases in sets.items() if flag in sys.argv), CASES)
    for m, n, k, fields in cases:
        torch.manual_seed(0)
        a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
        b = torch.randn(k, n, device="cuda", dtype=torch.bfloat16)
        out = torch.empty(m, n, device="cuda", dtype=torch.bfloat16)
        try:
            cfg = tritonblas.GemmConfig(**fields)
        except ValueError as exc:  # pydantic's ValidationError is a ValueError
            print(f"{m}x{n}x{k} {fields}: n/a ({str(exc).splitlines()[0]})", flush=True)
            continue

        for label in _modes(m, n, cfg):
            def call(a=a, b=b, cfg=cfg, out=out):
                return tritonblas.matmul(a, b, config=cfg, out=out)

            call()
            err = (out.float() - (a.float() @ b.float())).abs().max().item()
            eager = do_bench(call, rep=100) * 1e3
            graph = _graph_us(torch, do_bench, call)
            torch_graph = _graph_us(torch, do_bench, lambda a=a, b=b, out=out: torch.mm(a, b, out=out))
            print(f"{m}x{n}x{k} {cfg.short()}{label}: eager {eager:.1f} us, graph {graph:.2f} us "
                  f"(torch.mm graph {torch_graph:.2f}), max err {err:.3g}", flush=True)
    return 0


def _modes(m: int, n: int, cfg):
    """With `--both-modes`, on a tree that has the deferred fix-up (config.fixup_plan), each problem
    with data-parallel tiles on 132 SMs runs twice, the mode forced each way; else once, as launched."""
    from tritonblas import launch

    tiles = -(-m // cfg.block_m) * -(-n // cfg.block_n)
    rule = getattr(launch, "fixup_plan", None)
    if "--whole" in sys.argv and rule is not None and cfg.streamk:
        # The rule's chunks, then whole partials (one chunk) wherever the rule does not defer.
        for whole in (False, True):
            def forced(config, tiles, programs, splits, tma, whole=whole):
                chunks, deferred = rule(config, tiles, programs, splits, tma)
                return (1 if whole and not deferred else chunks), deferred
            launch.fixup_plan = forced
            launch._plans.clear()
            yield " whole" if whole else " rule"
        launch.fixup_plan = rule
        launch._plans.clear()
        return
    if "--both-modes" not in sys.argv or rule is None or tiles < 132:
        yield ""
        return
    from tritonblas import arith

    # The chunk size deferred (2048 fp32 since row 33; a tree without arith.DEFERRED_CHUNK used 4096),
    # and summed on arrival (4096 on TMA tiles, whole partials by pointers).
    deferred_chunk = getattr(arith, "DEFERRED_CHUNK", 4096)
    for mode in (False, True):
        def forced(config, tiles, programs, splits, tma, mode=mode):
            tile = config.block_m * config.block_n
            if mode:
                return min(8, max(1, tile // deferred_chunk)), True
            return (min(8, max(1, tile // 4096)) if tma else 1), False
        launch.fixup_plan = forced
        launch._plans.clear()
        yield f" deferred={mode}"
    launch.fixup_plan = rule
    launch._plans.clear()


if __name__ == "__main__":
    sys.exit(main())
