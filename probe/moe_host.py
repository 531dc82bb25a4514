"""Diagnostic: where transparent mode's eager MoE decode spends host time (cProfile, torch.profiler)."""
import contextlib, cProfile, io, pstats, sys, time, os
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import torch
import tritonblas
from lm_common import build_config, build_model, EagerDecoder

class B:  # what EagerDecoder reads of a bench
    pass

def main(name, batch=1, tokens=16):
    config = build_config(name, 2, False)
    torch.manual_seed(0)
    model = build_model(name, config, torch.device("cuda")).to(torch.bfloat16)
    b = B(); b.model, b.config, b.cache_kw, b.keep_last, b.torch = model, config, "past_key_values", {"logits_to_keep": 1}, torch
    prompt = torch.randint(config.vocab_size, (batch, 128), device="cuda")
    dec = EagerDecoder(b, prompt, tokens)
    for side, mode in (("torch", contextlib.nullcontext), ("ours", tritonblas.enable)):
        with torch.no_grad(), mode():
            for _ in range(2):
                dec.run(dec.setup())
            torch.cuda.synchronize()
            ts = []
            for _ in range(5):
                st = dec.setup(); torch.cuda.synchronize(); t0 = time.perf_counter(); dec.run(st); torch.cuda.synchronize(); ts.append((time.perf_counter()-t0)*1e3)
            print(f"== {name} b{batch} {side}: ms per {tokens} tokens {sorted(ts)}", flush=True)
            st = dec.setup(); torch.cuda.synchronize()
            pr = cProfile.Profile(); pr.enable(); dec.run(st); torch.cuda.synchronize(); pr.disable()
            s = io.StringIO(); pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(22); print(s.getvalue()[:6000])
            from torch.profiler import profile, ProfilerActivity
            st = dec.setup(); torch.cuda.synchronize()
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                dec.run(st); torch.cuda.synchronize()
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25, max_name_column_width=60))

for name in sys.argv[1:] or ["mixtral", "qwen3moe"]:
    main(name)
    torch.cuda.empty_cache()
