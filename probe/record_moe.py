"""Record the GEMM problems the MoE bench models run (train 4x256, prefill 256, decode b1/b8) to a shapes file."""
import sys, os
sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "scripts"))
import torch, tritonblas, transformers
from lm_common import build_config, build_model

out = sys.argv[1]
for name in ("qwen3moe", "mixtral"):
    config = build_config(name, 2, False)
    torch.manual_seed(0)
    model = build_model(name, config, torch.device("cuda")).to(torch.bfloat16)
    ids = torch.randint(config.vocab_size, (4, 256), device="cuda")
    with tritonblas.enable(record=out):
        model.train()
        model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
        model.zero_grad(set_to_none=True)
        model.eval()
        with torch.no_grad():
            model(ids[:1], use_cache=True, logits_to_keep=1)
            for b in (1, 8):
                prompt = torch.randint(config.vocab_size, (b, 128), device="cuda")
                cache = transformers.DynamicCache(config=config)
                o = model(prompt, use_cache=True, past_key_values=cache, logits_to_keep=1)
                t = o.logits[:, -1].argmax(-1, keepdim=True)
                for _ in range(2):
                    t = model(t, use_cache=True, past_key_values=cache).logits[:, -1].argmax(-1, keepdim=True)
    torch.cuda.synchronize()
    del model
    torch.cuda.empty_cache()
print(open(out).read())
