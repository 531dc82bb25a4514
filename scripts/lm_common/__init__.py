"""Hugging Face models for scripts/model_bench.py: the configs (random weights, nothing downloaded;
transformers imported only when a model is built) and the greedy decoders it times."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any, Protocol


@dataclass(frozen=True)
class ModelSpec:
    kind: str  # "causal" or "masked"
    config_class: str  # a transformers config class
    fields: dict  # the full-size model's config
    tiny: dict  # --tiny: the same architecture at toy size (CPU smoke)
    experts: bool = False  # a mixture of experts, built with experts_implementation="grouped_mm"


_NO_DROPOUT = {"attention_dropout": 0.0}
MODELS = {
    "llama": ModelSpec("causal", "LlamaConfig", dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        vocab_size=128256, max_position_embeddings=8192, rope_theta=500000.0, tie_word_embeddings=False,
        **_NO_DROPOUT), dict(hidden_size=64, intermediate_size=160, num_attention_heads=4,
                             num_key_value_heads=2, vocab_size=259)),
    "qwen": ModelSpec("causal", "Qwen2Config", dict(
        hidden_size=3584, intermediate_size=18944, num_attention_heads=28, num_key_value_heads=4,
        vocab_size=151936, max_position_embeddings=32768, tie_word_embeddings=False, **_NO_DROPOUT),
        dict(hidden_size=56, intermediate_size=150, num_attention_heads=4, num_key_value_heads=2,
             vocab_size=263)),
    "gpt2": ModelSpec("causal", "GPT2Config", dict(
        n_embd=1280, n_head=20, vocab_size=50257, n_positions=1024, resid_pdrop=0.0, embd_pdrop=0.0,
        attn_pdrop=0.0), dict(n_embd=48, n_head=4, vocab_size=257, bos_token_id=0, eos_token_id=0)),
    "bert": ModelSpec("masked", "BertConfig", dict(
        hidden_size=1024, intermediate_size=4096, num_attention_heads=16, vocab_size=30522,
        max_position_embeddings=512, hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0),
        dict(hidden_size=48, intermediate_size=100, num_attention_heads=4, vocab_size=251)),
    # Mixtral-8x7B-style: 8 experts of 14336, top 2 (expert GEMMs of ~512 rows each per 2048 tokens)
    "mixtral": ModelSpec("causal", "MixtralConfig", dict(
        hidden_size=4096, intermediate_size=14336, num_attention_heads=32, num_key_value_heads=8,
        num_local_experts=8, num_experts_per_tok=2, vocab_size=32000, max_position_embeddings=32768,
        tie_word_embeddings=False, **_NO_DROPOUT),
        dict(hidden_size=64, intermediate_size=96, num_attention_heads=4, num_key_value_heads=2,
             num_local_experts=4, vocab_size=259), experts=True),
    # Qwen3-MoE-30B-A3B-style, fine-grained: 128 experts of 768, top 8 (~128 rows each per 2048 tokens,
    # a few at decode)
    "qwen3moe": ModelSpec("causal", "Qwen3MoeConfig", dict(
        hidden_size=2048, moe_intermediate_size=768, num_attention_heads=32, num_key_value_heads=4,
        head_dim=128, num_experts=128, num_experts_per_tok=8, norm_topk_prob=True, vocab_size=151936,
        max_position_embeddings=40960, tie_word_embeddings=False, **_NO_DROPOUT),
        dict(hidden_size=64, moe_intermediate_size=32, num_attention_heads=4, num_key_value_heads=2,
             head_dim=16, num_experts=16, num_experts_per_tok=4, vocab_size=263), experts=True),
}
# --models takes these names for groups of models
GROUPS = {"dense": [n for n, s in MODELS.items() if not s.experts],
          "moe": [n for n, s in MODELS.items() if s.experts]}


def build_config(name: str, layers: int, tiny: bool):
    """The model's transformers config (transformers imported here: an optional extra)."""
    try:
        import transformers
    except ImportError as exc:
        raise SystemExit("model_bench needs transformers (pip install 'transformers>=5.17')") from exc
    spec = MODELS[name]
    config = getattr(transformers, spec.config_class)(**{**spec.fields, **(spec.tiny if tiny else {})})
    config.num_hidden_layers = layers  # GPT-2's n_layer too (its attribute map)
    return config


def build_model(name: str, config, device):
    """Random weights (the model's own init), float32, sdpa attention, on `device`; a mixture of experts
    runs its experts through torch._grouped_mm (experts_implementation="grouped_mm"), the op transparent
    mode routes."""
    import torch
    import transformers

    auto = transformers.AutoModelForCausalLM if MODELS[name].kind == "causal" else \
        transformers.AutoModelForMaskedLM
    experts = {"experts_implementation": "grouped_mm"} if MODELS[name].experts else {}
    with torch.device(device):
        model = auto.from_config(config, attn_implementation="sdpa", **experts)
    return model.float().eval()


@contextlib.contextmanager
def reference_experts(name: str, model) -> Iterator[None]:
    """The float32 reference logits' experts: transformers' loop of per-expert linears ("eager"), the same
    math in any dtype on any device, where torch._grouped_mm's fast path takes bf16 only; grouped_mm
    again after."""
    if not MODELS[name].experts:
        yield
        return
    model.set_experts_implementation("eager")
    try:
        yield
    finally:
        model.set_experts_implementation("grouped_mm")


def prefill_outputs(name: str, model, ids) -> tuple[Any, Any]:
    """(logits, expert choices) of a forward over `ids`; the choices (a mixture of experts' alone, else
    None): each layer's top-k experts per token, sorted, (layers, tokens, k). A random router's top-k is
    near a tie for many tokens, so the dtype alone moves some tokens to other experts, which changes their
    logits far more than rounding does: the choices tell that apart from a GEMM's error."""
    if not MODELS[name].experts:
        return model(ids).logits, None
    import torch

    out = model(ids, output_router_logits=True)
    k = model.config.num_experts_per_tok
    # softmax is monotonic: the top-k of the router's logits are the top-k of its probabilities
    return out.logits, torch.stack([r.float().topk(k, dim=-1).indices.sort(-1).values
                                    for r in out.router_logits])


def rel_error(x, ref) -> float:
    """Relative Frobenius error, accumulated in float64."""
    import torch

    ref = ref.float()
    diff = torch.linalg.vector_norm(x.float() - ref, dtype=torch.float64).item()
    scale = torch.linalg.vector_norm(ref, dtype=torch.float64).item()
    return diff / scale if scale > 0 else diff


def config_facts(config) -> dict:
    """The config's sizes, for the JSON."""
    keys = ("hidden_size", "intermediate_size", "num_attention_heads", "num_key_value_heads", "vocab_size",
            "n_embd", "n_head", "num_experts", "num_experts_per_tok", "moe_intermediate_size")
    return {k: getattr(config, k) for k in keys if isinstance(getattr(config, k, None), int)}


def max_positions(config) -> int:
    return getattr(config, "max_position_embeddings", None) or config.n_positions


class ModelRunner(Protocol):
    """What the decoders use of model_bench's Bench."""

    model: Any
    config: Any
    device: Any  # a torch.device
    torch: Any  # the torch module
    cache_kw: str  # the model's name for its KV cache argument (past_key_values; cache after 5.17)
    keep_last: dict  # {"logits_to_keep": 1} where the model takes it


class EagerDecoder:
    """Greedy decode through a DynamicCache, one model call per token."""

    def __init__(self, bench: ModelRunner, prompt, new_tokens: int) -> None:
        self.b, self.prompt, self.new_tokens = bench, prompt, new_tokens

    def setup(self):
        import transformers

        cache = transformers.DynamicCache(config=self.b.config)
        out = self.b.model(self.prompt, use_cache=True, **{self.b.cache_kw: cache}, **self.b.keep_last)
        return cache, out.logits[:, -1].argmax(-1, keepdim=True)

    def run(self, state):
        cache, ids = state
        tokens = []
        for _ in range(self.new_tokens):
            logits = self.b.model(ids, use_cache=True, **{self.b.cache_kw: cache}).logits
            self.last_logits = logits  # (tests compare the decoders' logits)
            ids = logits[:, -1].argmax(-1, keepdim=True)
            tokens.append(ids)
        return self.b.torch.cat(tokens, 1)


GRAPHS = ("cuda", "emulated")  # GraphDecoder's capture kinds: torch.cuda.CUDAGraph, or replay.RecordedGraph


class GraphDecoder:
    """Greedy decode through a StaticCache, one decode step (forward, argmax, the token fed back, the
    attention mask grown by one) captured in a graph and replayed; setup() re-runs the prefill eagerly in
    place.
    The mask is kept in a static 4-D tensor, which the model uses as it is: nothing about it is derived
    on the host per call, so no data-dependent check can break the capture (transformers' own mask for a
    StaticCache gives the same logits, checked with transformers 5.24).

    graph: "cuda" (torch.cuda.graph, the documented pattern: warm-up steps on a side stream, then the
    capture), "emulated" (lm_common.replay.RecordedGraph on any device: the same setup, warm-up steps and
    capture, then replays with every host-side value frozen at capture, as a CUDA graph's are) or None (the
    step run eagerly each time)."""

    def __init__(self, bench: ModelRunner, prompt, new_tokens: int, graph: str | None = "cuda") -> None:
        import transformers

        torch = bench.torch
        if graph not in (*GRAPHS, None):
            raise ValueError(f"graph must be one of {GRAPHS} or None, not {graph!r}")
        if graph == "cuda" and bench.device.type != "cuda":
            raise RuntimeError("CUDA graphs need a CUDA device")
        self.b, self.prompt, self.new_tokens = bench, prompt, new_tokens
        batch, plen = prompt.shape
        self.cache = transformers.StaticCache(config=bench.config, max_cache_len=plen + new_tokens)
        self.ids = torch.zeros(batch, 1, dtype=torch.long, device=bench.device)
        self.pos = torch.zeros(1, dtype=torch.long, device=bench.device)
        self.mask = torch.zeros(batch, 1, 1, plen + new_tokens, dtype=torch.bool, device=bench.device)
        self.tokens = torch.zeros(batch, new_tokens, dtype=torch.long, device=bench.device)
        self.graph = None
        if graph is not None:
            self._capture(graph)

    def _capture(self, kind: str) -> None:
        torch = self.b.torch
        self.setup()  # allocates the cache (lazily, at its first update)
        if kind == "cuda":
            stream = torch.cuda.Stream()
            stream.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(stream):  # warm-up off the capture stream, as torch.cuda.graph asks
                self._warm_up()
            torch.cuda.current_stream().wait_stream(stream)
            self.setup()  # the warm-up steps advanced the cache, the position and the mask
            self.graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(self.graph):
                self.step()
        else:
            from .replay import RecordedGraph

            self._warm_up()
            self.setup()
            self.graph = RecordedGraph()
            with self.graph.capture():
                self.step()

    def _warm_up(self) -> None:
        for _ in range(2):
            self.step()

    def setup(self) -> None:
        plen = self.prompt.shape[1]
        self.cache.reset()
        out = self.b.model(self.prompt, use_cache=True, **{self.b.cache_kw: self.cache}, **self.b.keep_last)
        self.ids.copy_(out.logits[:, -1].argmax(-1, keepdim=True))
        self.pos.fill_(plen)
        self.mask.zero_()
        self.mask[..., :plen] = True

    def step(self) -> None:
        self.mask.index_fill_(-1, self.pos, True)
        logits = self.b.model(self.ids, attention_mask=self.mask, use_cache=True,
                              **{self.b.cache_kw: self.cache}).logits
        self.last_logits = logits  # (in a graph: its output buffer)
        nxt = logits[:, -1].argmax(-1, keepdim=True)
        self.tokens.index_copy_(1, self.pos - self.prompt.shape[1], nxt)
        self.ids.copy_(nxt)
        self.pos.add_(1)

    def run(self, _):
        for _ in range(self.new_tokens):
            if self.graph is None:
                self.step()
            else:
                self.graph.replay()
        return self.tokens.clone()
