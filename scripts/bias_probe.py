import statistics, torch, tritonblas
from tritonblas import GemmConfig
from tritonblas.problem import block_scale_shapes
from tritonblas.call.scaled import plan_scaled
T = GemmConfig(block_m=128, block_n=128, block_k=128, num_warps=8, num_stages=4, tma=True)
fl = torch.empty(64 * 2**20, device="cuda", dtype=torch.int32)
def bench(fn):
    ts = []
    for _ in range(20):
        fl.zero_(); s, e = torch.cuda.Event(True), torch.cuda.Event(True); s.record(); fn(); e.record(); e.synchronize(); ts.append(s.elapsed_time(e))
    return statistics.median(ts)
for m, n, k, od in [(512, 7168, 2048, torch.bfloat16), (4096, 7168, 2048, torch.bfloat16), (4096, 18432, 7168, torch.bfloat16), (4096, 7168, 16384, torch.float32), (1000, 4096, 7168, torch.bfloat16)]:
    g = torch.Generator(device="cuda").manual_seed(0)
    a = (torch.randn(m, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn)
    b = (torch.randn(n, k, device="cuda", generator=g) * 2).to(torch.float8_e4m3fn).t()
    s1, s2 = block_scale_shapes(m, n, k)
    sa = ((torch.rand(s1[::-1], device="cuda", generator=g) + .5) / 64).t(); sb = ((torch.rand(s2[::-1], device="cuda", generator=g) + .5) / 64).t()
    bias = torch.randn(n, device="cuda", dtype=od)
    d = lambda: tritonblas.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=od)
    t = lambda: tritonblas.scaled_mm(a, b, sa, sb, bias=bias, out_dtype=od, config=T)
    y1, y2 = d(), t()
    diff = ((y1.float() - y2.float()).norm() / y2.float().norm()).item()
    pick = plan_scaled(a, b, sa, sb, bias, od, False).config.short()
    td, tt = bench(d), bench(t)
    print(f"{m}x{n}x{k} bias {str(od)[6:]}: dispatch {2*m*n*k/td/1e9:.0f} TF/s, Triton kernel {2*m*n*k/tt/1e9:.0f} ({tt/td:.2f}x) diff {diff:.1e} [{pick}]", flush=True)
