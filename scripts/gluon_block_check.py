import statistics, sys, torch, tritonblas
from tritonblas import GemmConfig
from tritonblas.problem import block_scale_shapes
F = torch.nn.functional
G = {s: GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=4, num_stages=s, tma=True, gluon=True) for s in (4, 5, 6)}
T = GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=8, num_stages=4, tma=True)
flush = torch.empty(256 * 2**20 // 4, device="cuda", dtype=torch.int32)
def bench(fn, reps=20):
    ts = []
    for _ in range(reps):
        flush.zero_(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
for m, n, k in [(4096, 7168, 16384), (4096, 18432, 7168), (512, 7168, 2048), (4096, 4096, 7168), (512, 18432, 7168), (16, 7168, 2048)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    w = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    sa_shape, sb_shape = block_scale_shapes(m, n, k)
    sa = ((torch.rand(sa_shape[::-1], device="cuda", generator=g) + .5) / 64).t()
    sb = ((torch.rand(sb_shape[::-1], device="cuda", generator=g) + .5) / 64).t()
    b = w.t()
    fl = 2 * m * n * k
    theirs = lambda: F.scaled_mm(a, b, sa, F.ScalingType.BlockWise1x128, sb, F.ScalingType.BlockWise128x128, output_dtype=torch.bfloat16)
    ref = theirs().float()
    row = [f"{m}x{n}x{k}"]
    for name, cfg in [("g4", G[4]), ("g5", G[5]), ("g6", G[6]), ("tri", T)]:
        f = lambda: tritonblas.scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, config=cfg)
        d = ((f().float() - ref).norm() / ref.norm()).item()
        row.append(f"{name} {fl / bench(f) / 1e9:6.0f} ({d:.0e})")
    row.append(f"torch {fl / bench(theirs) / 1e9:6.0f}")
    print(" | ".join(row), flush=True)
