"""Whole models with transparent mode on against the same models without it (issue 34 item 4).

Causal and masked LMs built from Hugging Face configs (random weights, nothing downloaded; transformers is
an optional extra, imported only when a model is built), a few layers each so every one fits and runs fast:

    llama  Llama-3-8B-style: hidden 4096, intermediate 14336, 32 heads (8 KV), vocab 128256
    qwen   Qwen2-7B-style:   hidden 3584, intermediate 18944, 28 heads (4 KV), vocab 151936 (q/k/v biases)
    gpt2   GPT-2-large-style: hidden 1280, 20 heads, vocab 50257 (misaligned; Conv1D is addmm)
    bert   BERT-large-style masked LM: hidden 1024, intermediate 4096, 16 heads, vocab 30522
  and mixtures of experts (--models moe), their experts run by transformers' experts_implementation=
  "grouped_mm", so each expert GEMM is one torch._grouped_mm (aten::_grouped_mm), forward and backward:
    mixtral   Mixtral-8x7B-style: hidden 4096, 8 experts of 14336 (top 2), 32 heads (8 KV), vocab 32000
    qwen3moe  Qwen3-MoE-30B-A3B-style: hidden 2048, 128 experts of 768 (top 8), 32 heads (4 KV) of 128,
              vocab 151936

Parts, each timed for torch and for transparent mode (tritonblas.enable()) in one process, the two sides
interleaved (torch, ours, ours, torch, ...; median wall time of each, the GPU synchronized around every
timed call, so host time counts as it does for a user; each timed call after --settle untimed ones in
its side's mode, as in a user's loop, which does not switch modes between calls). A row's speedup is the
median over rounds of torch's time over ours in the same round, and its spread the middle half of those
ratios: a host whose speed drifts (this H200's moved torch's own decode 33 -> 64 ms between processes)
moves both calls of a round alike. --control times torch against itself, the protocol's own spread:
    train          forward + loss.backward() twice (the second accumulates into .grad), then
                   zero_grad(set_to_none=True): a training step with gradient accumulation
    prefill        a forward over the prompt (causal LMs: building the KV cache, last logits only)
    decode         greedy decode, --new-tokens tokens after a --prompt-len prompt, per --decode-batches,
                   a manual loop over model(ids, past_key_values=DynamicCache, use_cache=True), not
                   generate()
    decode-graph   the same with a StaticCache, each decode step (forward, argmax, feedback) captured once
                   in a CUDA graph and replayed; a side that cannot be captured is recorded, not fatal
                   (--device cpu: the graph emulated, lm_common.replay, a check of capture and replay)
Logits error: relative Frobenius error of the prefill logits (full sequence) against the same model in
float32 run by torch (a mixture of experts' experts as transformers' per-expert loop), for each side, and
a mixture of experts' share of (layer, token) expert choices equal to float32's (a random router's near-ties
move tokens to other experts in bf16: a logits error no GEMM caused); decode rows give the share of tokens
equal to torch's eager decode of the same prompt. --profile: one
training step (and one prefill, where --parts has it) of each side under torch.profiler, the kernels ours
launches more often than torch's (by
name, kind, counts and device us; copies and elementwise kernels are what issue 34 item 1 rules out) and
the host's aten::mm / aten::_grouped_mm / aten::copy_ calls.

--fp8 row|block: inference in float8 (lm_common.fp8): each nn.Linear but the output head swapped for a
float8_e4m3fn one in the bf16 model (the head, embeddings, a mixture of experts' router and experts, and
GPT-2's Conv1D layers stay bf16, as transformers' fp8 quantizers leave them; a model with no layer to
quantize, GPT-2, is skipped), and only prefill and the decodes timed (training parts and --profile, a
training step, are skipped with a note). row: weights scaled per output channel, activations per token,
torch._scaled_mm, which transparent mode routes: our side is transparent mode, as for bf16. block:
128x128 weight blocks, 1x128 activation blocks, torch.nn.functional.scaled_mm on torch's side (a torch
without it: the option is refused), which transparent mode does not route: our side is transparent mode
with each quantized layer's GEMM switched to tritonblas.scaled_mm (lm_common.fp8.block_by_tritonblas);
block runs end to end on the GPU only (--device cpu: torch's block-wise op has no CPU kernel, and the
emulated graph replays aten ops, not our side's direct Triton launches: those rows record the failures).
Logits error with --fp8: against the unquantized bf16 model run by torch (the quantization's own error,
where the bf16 rows' reference is float32: the dtype's), experts compared to that model's choices, and
ours against torch's fp8 logits (ours_vs_torch: the two sides' agreement).

    python scripts/model_bench.py --json model_bench.json              # the dense models, all parts, bf16
    python scripts/model_bench.py --models moe --quick                 # the mixtures of experts
    python scripts/model_bench.py --models llama gpt2 --parts train --quick --profile
    python scripts/model_bench.py --fp8 row --models llama moe --quick   # float8 inference
    TRITON_INTERPRET=1 python scripts/model_bench.py --device cpu --tiny --quick --dtype fp32  # CPU smoke
"""

from __future__ import annotations

import argparse
import contextlib
import functools
import json
import sys
from collections.abc import Callable
from datetime import datetime, timezone
from typing import Any

from lm_common import (
    GROUPS,
    MODELS,
    EagerDecoder,
    GraphDecoder,
    build_config,
    build_model,
    config_facts,
    max_positions,
    prefill_outputs,
    reference_experts,
    rel_error,
)
from lm_common import fp8 as fp8_lib
from lm_common.profile import compare
from lm_common.report import format_row, table
from lm_common.timing import Side, interleaved, paired_speedup

PARTS = ("train", "prefill", "decode", "decode-graph")
DTYPES = ("bf16", "fp16", "fp32")
QUICK = {"reps": 3, "warmup": 1, "new_tokens": 16, "train_seq": 256, "prefill_seq": 256}


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter, epilog=__doc__)
    p.add_argument("--models", nargs="+", choices=(*MODELS, *GROUPS), default=["dense"],
                   help="models or groups: dense (default: " + ", ".join(GROUPS["dense"]) + "), moe ("
                   + ", ".join(GROUPS["moe"]) + ")")
    p.add_argument("--parts", nargs="+", choices=PARTS, default=list(PARTS))
    p.add_argument("--layers", type=int, default=2, help="transformer layers per model (default 2)")
    p.add_argument("--dtype", choices=DTYPES, default="bf16")
    p.add_argument("--train-batch", type=int, default=4)
    p.add_argument("--train-seq", type=int, default=512, help="tokens per training sequence (default 512)")
    p.add_argument("--prefill-batch", type=int, default=1)
    p.add_argument("--prefill-seq", type=int, default=2048, help="capped at a model's positions")
    p.add_argument("--decode-batches", type=int, nargs="+", default=[1, 8])
    p.add_argument("--prompt-len", type=int, default=128)
    p.add_argument("--new-tokens", type=int, default=64)
    p.add_argument("--reps", type=int, default=10, help="timed calls per side (median)")
    p.add_argument("--warmup", type=int, default=2, help="untimed calls per side first (compiles)")
    p.add_argument("--settle", type=int, default=1,
                   help="untimed calls before each timed one, in its side's mode (default 1): what a "
                   "user's loop has run before a call; 0 times the first call after each switch")
    p.add_argument("--quick", action="store_true",
                   help="a fast look: 3 reps, 1 warm-up, 16 new tokens, 256-token sequences "
                   "(where not given)")
    p.add_argument("--tiny", action="store_true", help="toy-sized models of the same architectures")
    p.add_argument("--python-kernels", action="store_true",
                   help="run transparent mode's Python kernels, not its C++ ones (tritonblas.native)")
    p.set_defaults(native_kernels=True)  # run() settles it: False with --python-kernels or where none build
    p.add_argument("--device", default="cuda", help="cuda (default) or cpu (a smoke test: transparent "
                   "mode routes CPU tensors only under TRITON_INTERPRET=1)")
    p.add_argument("--profile", action="store_true",
                   help="also profile one training step (and one prefill where --parts has it) of each side "
                   "(torch.profiler, CUDA kernels) and list the kernels ours launches more often than "
                   "torch's (copies, elementwise, ...)")
    p.add_argument("--control", action="store_true",
                   help="time torch's own model on both sides (the 'ours' column too): the spread the "
                   "protocol gives two equal sides on this host, which a row's speedup must clear")
    p.add_argument("--record", default=None, metavar="FILE",
                   help="add every GEMM problem transparent mode meets to this shapes file (tritonblas "
                   "tune --shapes FILE tunes them)")
    p.add_argument("--fp8", choices=fp8_lib.MODES, default=None,
                   help="float8 inference (bf16 model, each nn.Linear but the output head quantized): row "
                   "(per-channel weights, per-token activations, torch._scaled_mm) or block (128x128 "
                   "weights, 1x128 activations, block-wise scaled_mm); prefill and decode parts only")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--json", default=None, help="write the results to this JSON file")
    args = p.parse_args(argv)
    args.models = list(dict.fromkeys(m for name in args.models for m in GROUPS.get(name, [name])))
    if args.quick:  # what the command line left at its default
        for key, value in QUICK.items():
            if getattr(args, key) == p.get_default(key):
                setattr(args, key, value)
    sizes = (args.layers, args.train_batch, args.train_seq, args.prefill_batch, args.prefill_seq,
             args.prompt_len, args.new_tokens, args.reps, *args.decode_batches)
    if min(sizes) < 1 or args.warmup < 0:
        p.error("sizes, --reps and --decode-batches must be positive, --warmup not negative")
    if args.fp8:
        _fp8_options(p, args)
    return args


def _fp8_options(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """--fp8: a bf16 model, inference parts only (a float8 layer has no backward here)."""
    if args.dtype != "bf16":
        p.error("--fp8 quantizes the bf16 model: --dtype must be bf16")
    if args.fp8 == "block" and not fp8_lib.torch_has_block():
        p.error("--fp8 block: this torch has no torch.nn.functional.scaled_mm with block-wise scaling")
    if "train" in args.parts:
        print("model_bench: --fp8 times inference only: the train part is skipped", file=sys.stderr)
        args.parts = [part for part in args.parts if part != "train"]
    if args.profile:
        print("model_bench: --fp8: --profile (a training step) is skipped", file=sys.stderr)
        args.profile = False
    if not args.parts:
        p.error("--fp8: no inference part (prefill, decode, decode-graph) to time")


# --- timing --------------------------------------------------------------------------------------------

def _why(exc: Exception) -> str:
    first = str(exc).splitlines()[0] if str(exc) else ""
    return f"{type(exc).__name__}: {first[:300]}"


def sides(native: bool, control: bool = False, record: str | None = None, fp8: str | None = None
          ) -> tuple[tuple[str, Callable[[], contextlib.AbstractContextManager]], ...]:
    """The two sides' modes: torch's own, and transparent mode with its C++ kernels (native) or its
    Python ones, recording its problems to `record` where given, with --fp8 block's GEMMs switched to
    tritonblas.scaled_mm too (transparent mode does not route torch's block-wise op); with `control`,
    torch's own on both sides."""
    import tritonblas

    if control:
        return ("torch", contextlib.nullcontext), ("ours", contextlib.nullcontext)
    ours = functools.partial(tritonblas.enable, record, native=native)
    if fp8 == "block":
        ours = functools.partial(_together, ours, fp8_lib.block_by_tritonblas)
    return ("torch", contextlib.nullcontext), ("ours", ours)


@contextlib.contextmanager
def _together(*modes: Callable[[], contextlib.AbstractContextManager]):
    """The modes entered in order, left in reverse."""
    with contextlib.ExitStack() as stack:
        for mode in modes:
            stack.enter_context(mode())
        yield


class Bench:
    """The parts of one model, timed torch against transparent mode."""

    def __init__(self, args: argparse.Namespace, name: str, model, config, device) -> None:
        import inspect

        import torch

        self.args, self.name, self.model, self.config, self.device = args, name, model, config, device
        self.torch = torch
        params = inspect.signature(model.forward).parameters
        self.cache_kw = "cache" if "cache" in params else "past_key_values"  # renamed after 5.17
        self.keep_last = {"logits_to_keep": 1} if "logits_to_keep" in params else {}
        self.gen = torch.Generator(device=device).manual_seed(args.seed)
        self.sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        self.prompts: dict[int, Any] = {}
        self.train_ids = None
        self.ref_name = "fp32"  # the logits errors' reference: float32 (bf16 with --fp8)

    def sides(self) -> tuple[tuple[str, Callable[[], contextlib.AbstractContextManager]], ...]:
        a = self.args
        return sides(a.native_kernels, a.control, a.record, a.fp8)

    def prompt(self, batch: int):
        """The decode prompt of a batch size, drawn once: the eager and the graph decode rows of a batch
        start from the same prompt, so their tokens compare."""
        if batch not in self.prompts:
            self.prompts[batch] = self.ids(batch, self.args.prompt_len)
        return self.prompts[batch]

    def ids(self, batch: int, seq: int):
        return self.torch.randint(self.config.vocab_size, (batch, seq), generator=self.gen,
                                  device=self.device)

    def row(self, part: str, make: Callable[[], tuple[Callable, Callable]], **facts) -> dict:
        """Time a part, torch's side against ours; make() -> (setup, run) is called once in each side's
        mode. A side that fails (one that cannot be captured in a CUDA graph, say) is recorded in the row
        (error_torch / error_ours) and the other side is still timed."""
        row = {"model": self.name, "part": part, **facts}
        timed = []
        for name, mode in self.sides():
            try:
                with mode():
                    setup, run = make()
                timed.append(Side(name, mode, run, setup))
            except Exception as exc:  # recorded: the other side, parts and models still run
                row[f"error_{name}"] = _why(exc)
                with contextlib.suppress(Exception):
                    self.sync()
        try:
            ms = interleaved(timed, self.args.reps, self.args.warmup, self.sync, settle=self.args.settle) \
                if timed else {}
        except Exception as exc:
            row["error_run"] = _why(exc)
            return row
        row.update({f"{name}_ms": t for name, t in ms.items()})
        if len(ms) == 2:
            row["speedup"], *row["speedup_middle_half"] = paired_speedup(*timed)
        row["_results"] = {s.name: s.result for s in timed}
        return row

    # --- the parts ---

    def train_step(self):
        """(ids, step): the training step the train part times and --profile profiles, on ids drawn once."""
        a, model = self.args, self.model
        if self.train_ids is None:
            self.train_ids = self.ids(a.train_batch, min(a.train_seq, max_positions(self.config)))
        ids = self.train_ids

        def step(_=None):
            for _ in range(2):  # the second backward accumulates into .grad
                model(input_ids=ids, labels=ids, use_cache=False).loss.backward()
            model.zero_grad(set_to_none=True)
        return ids, step

    @contextlib.contextmanager
    def training(self):
        self.model.train()
        try:
            yield
        finally:
            self.model.eval()

    def train(self) -> dict:
        ids, step = self.train_step()
        with self.training():
            return self.row("train", lambda: ((lambda: None), step), batch=ids.shape[0], seq=ids.shape[1])

    def profile(self) -> dict:
        """One training step of each side under torch.profiler: the kernels only ours launches."""
        _, step = self.train_step()
        with self.training():
            modes = dict(self.sides())
            return compare(step, modes, self.sync, self.device.type == "cuda")

    def prefill_call(self):
        """(ids, run): the forward over a prompt that the prefill part times and --profile profiles."""
        a = self.args
        ids = self.ids(a.prefill_batch, min(a.prefill_seq, max_positions(self.config)))
        causal = MODELS[self.name].kind == "causal"

        def run(_=None):
            with self.torch.no_grad():
                if causal:
                    return self.model(ids, use_cache=True, **self.keep_last).logits
                return self.model(ids).logits
        return ids, run

    def prefill(self) -> dict:
        ids, run = self.prefill_call()
        return self.row("prefill", lambda: ((lambda: None), run), batch=ids.shape[0], seq=ids.shape[1])

    def profile_prefill(self) -> dict:
        """One prefill of each side under torch.profiler (host-bound where the kernels' us match but the
        timed ms do not)."""
        _, run = self.prefill_call()
        return compare(run, dict(self.sides()), self.sync, self.device.type == "cuda")

    def decode(self, batch: int, graph: bool) -> dict:
        a = self.args
        prompt = self.prompt(batch)
        # off the GPU the graph is emulated (lm_common.replay): a smoke test of the capture and replay
        kind = {"graph": "cuda" if self.device.type == "cuda" else "emulated"} if graph else {}

        def make():
            decoder = GraphDecoder(self, prompt, a.new_tokens, **kind) if graph else \
                EagerDecoder(self, prompt, a.new_tokens)
            return decoder.setup, decoder.run

        with self.torch.no_grad():
            row = self.row("decode-graph" if graph else "decode", make, batch=batch, prompt=a.prompt_len,
                           new_tokens=a.new_tokens, **kind)
        row["_prompt"] = prompt
        for side in ("torch", "ours"):
            if f"{side}_ms" in row:
                row[f"{side}_ms_per_token"] = row[f"{side}_ms"] / a.new_tokens
        return row

    def logits_errors(self, ids) -> dict:
        """Each side's prefill logits against the reference's (self.ref_logits: float32, computed before
        the cast; with --fp8, the unquantized bf16 model's), a mixture of experts' share of (layer, token)
        expert choices equal to the reference's (experts_as_<ref_name>_<side>) and ours against torch's
        (ours_vs_torch); a side that fails (torch._grouped_mm in a dtype it lacks, say) is recorded as
        error_<side>."""
        out: dict[str, Any] = {}
        logits_of = {}
        with self.torch.no_grad():
            for name, mode in self.sides():
                try:
                    with mode():
                        logits, picks = prefill_outputs(self.name, self.model, ids)
                    out[name], logits_of[name] = rel_error(logits, self.ref_logits), logits
                    if picks is not None:
                        same = (picks == self.ref_picks).all(-1)
                        out[f"experts_as_{self.ref_name}_{name}"] = same.float().mean().item()
                except Exception as exc:  # recorded: the parts still run
                    out[name], out[f"error_{name}"] = None, _why(exc)
        if len(logits_of) == 2:
            out["ours_vs_torch"] = rel_error(logits_of["ours"], logits_of["torch"])
        return out


# --- the run ---------------------------------------------------------------------------------------------

DTYPE_NAMES = {"bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def bench_model(args: argparse.Namespace, name: str, device) -> dict:
    import torch

    config = build_config(name, args.layers, args.tiny)
    torch.manual_seed(args.seed)
    model = build_model(name, config, device)
    doc = {"model": name, "layers": args.layers,
           "params": sum(p.numel() for p in model.parameters()), "config": config_facts(config)}
    bench = Bench(args, name, model, config, device)
    ids = bench.ids(args.prefill_batch, min(args.prefill_seq, max_positions(config)))
    if args.fp8:
        doc["fp8_layers"] = fp8_reference(bench, ids)
        if not doc["fp8_layers"]:
            print(f"model_bench: --fp8: {name} has no nn.Linear to quantize (but its output head): skipped",
                  file=sys.stderr)
            return {**doc, "skipped": "no nn.Linear to quantize", "rows": []}
    else:
        with torch.no_grad(), reference_experts(name, model):  # the float32 model, run by torch
            bench.ref_logits, bench.ref_picks = prefill_outputs(name, model, ids)
        model.to(getattr(torch, DTYPE_NAMES[args.dtype]))
    doc["logits_error"] = bench.logits_errors(ids)
    del bench.ref_logits, bench.ref_picks
    rows = []
    for part in args.parts:
        if part.startswith("decode") and MODELS[name].kind != "causal":
            continue  # a masked LM does not decode
        if part == "train":
            new = [bench.train()]
        elif part == "prefill":
            new = [bench.prefill()]
        else:
            new = [bench.decode(b, part == "decode-graph") for b in args.decode_batches]
        rows.extend(new)
        for r in new:
            print(format_row(r), flush=True)
    _token_agreement(rows)
    doc["rows"] = rows
    if args.profile:
        profiles = {"profile": bench.profile}
        if "prefill" in args.parts:
            profiles["profile_prefill"] = bench.profile_prefill
        for key, profile in profiles.items():
            try:
                doc[key] = profile()
            except Exception as exc:  # recorded: the other models still run
                doc[key] = {"error": _why(exc)}
    del bench, model
    if device.type == "cuda":
        torch.cuda.empty_cache()
    return doc


def fp8_reference(bench: Bench, ids) -> list[str]:
    """--fp8: the model cast to bf16, its logits (and expert choices) over `ids` run by torch as the
    reference, then its nn.Linear layers quantized in place (lm_common.fp8.quantize_model): the names
    quantized, none where the model has no layer to quantize."""
    import torch

    bench.model.to(torch.bfloat16)
    bench.ref_name = "bf16"
    with torch.no_grad():  # the same experts (grouped_mm) as the sides run: only the fp8 layers differ
        bench.ref_logits, bench.ref_picks = prefill_outputs(bench.name, bench.model, ids)
    return fp8_lib.quantize_model(bench.model, bench.args.fp8)


def _token_agreement(rows: list[dict]) -> None:
    """Decode rows: the share of each side's tokens equal to torch's eager decode at the same batch, which
    must have started from the same prompt."""
    eager = {r["batch"]: (r.get("_prompt"), r["_results"]["torch"]) for r in rows
             if r["part"] == "decode" and "torch" in r.get("_results", {})}
    for r in rows:
        results, prompt = r.pop("_results", None), r.pop("_prompt", None)
        if results is None or not r["part"].startswith("decode") or r["batch"] not in eager:
            continue
        ref_prompt, ref = eager[r["batch"]]
        if prompt is None or ref_prompt is None or not ref_prompt.equal(prompt):
            raise RuntimeError(f"{r['part']} b{r['batch']}: not the prompt of the eager decode it is "
                               "compared to")
        for side, tokens in results.items():
            r[f"{side}_tokens_as_torch_eager"] = (tokens == ref).float().mean().item()


def run(args: argparse.Namespace) -> dict:
    import torch

    import tritonblas

    device = torch.device(args.device)
    if device.type == "cuda" and not torch.cuda.is_available():
        raise SystemExit("model_bench: no CUDA GPU visible (use --device cpu with TRITON_INTERPRET=1 "
                         "and --tiny for a CPU smoke run)")
    tritonblas.disable()  # torch's side is torch's own, whatever TRITONBLAS_ENABLED said
    from tritonblas import native

    args.native_kernels = not args.python_kernels and native.load()  # (where they build: else Python's)
    models = [bench_model(args, name, device) for name in args.models]
    import transformers

    return {"script": "scripts/model_bench.py", "argv": sys.argv[1:],
            "device": torch.cuda.get_device_name(device) if device.type == "cuda" else "cpu",
            "dtype": args.dtype, "fp8": args.fp8, "torch": torch.__version__,
            "transformers": transformers.__version__,
            "reps": args.reps, "transparent_kernels": "C++" if args.native_kernels else "Python",
            "control": args.control,
            "created_at": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "models": models}


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    doc = run(args)
    print(table(doc))
    if args.json:
        with open(args.json, "w") as fh:
            json.dump(doc, fh, indent=2)
            fh.write("\n")
        print(f"wrote {args.json}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
