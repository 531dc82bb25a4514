"""scripts/model_bench.py (issue 34 item 4) on the CPU: its options, the interleaved timer (on a fake
clock), the table, token agreement; with transformers installed, the model configs at full size and the
parts on toy-sized models (the static-cache decoder's steps against the dynamic-cache decode, a whole run
through transparent mode in the interpreter); --fp8 (lm_common.fp8): its quantizers, its float8 Linear on
both sides (block: ours only, torch's block-wise op has no CPU kernel), the swap, a tiny --fp8 row run.
--help without a GPU: tests/test_scripts.py."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import sys
from pathlib import Path

import pytest
import torch
from helpers.quant import needs_cpu_rowwise

SCRIPTS = Path(__file__).resolve().parent.parent / "scripts"


@pytest.fixture(scope="module")
def mb():
    sys.path.insert(0, str(SCRIPTS))  # the script imports its lm_common package as a sibling
    try:
        spec = importlib.util.spec_from_file_location("model_bench", SCRIPTS / "model_bench.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["model_bench"] = module  # dataclasses look their module up there
        spec.loader.exec_module(module)
        yield module
    finally:
        sys.modules.pop("model_bench", None)
        sys.path.remove(str(SCRIPTS))


def test_quick_fills_only_what_was_not_given(mb):
    args = mb.parse_args(["--quick", "--reps", "5"])
    assert (args.reps, args.warmup, args.new_tokens, args.train_seq) == (5, 1, 16, 256)
    full = mb.parse_args([])
    assert (full.reps, full.new_tokens, full.decode_batches) == (10, 64, [1, 8])
    assert full.models == mb.GROUPS["dense"]


def test_models_takes_groups(mb):
    assert mb.GROUPS == {"dense": ["llama", "qwen", "gpt2", "bert"], "moe": ["mixtral", "qwen3moe"]}
    assert mb.parse_args(["--models", "moe"]).models == ["mixtral", "qwen3moe"]
    assert mb.parse_args(["--models", "gpt2", "moe", "mixtral"]).models == ["gpt2", "mixtral", "qwen3moe"]


@pytest.mark.parametrize("argv", [["--reps", "0"], ["--decode-batches", "1", "0"], ["--warmup", "-1"]])
def test_bad_sizes_are_refused(mb, argv):
    with pytest.raises(SystemExit):
        mb.parse_args(argv)


class FakeClock:
    """Time advances only when a side's timed call says so."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_interleaved_alternates_and_times_only_the_run(mb):
    clock, log = FakeClock(), []

    def side(name: str, cost_s: list[float]):
        @contextlib.contextmanager
        def mode():
            log.append(f"{name} on")
            yield
            log.append(f"{name} off")

        def setup():
            clock.now += 100.0  # untimed
            return name

        def run(state):
            assert state == name
            log.append(f"{name} run")
            clock.now += cost_s.pop(0)
            return len(cost_s)

        return mb.Side(name, mode, run, setup)

    torch_side = side("torch", [9.0, 0.001, 0.003, 0.002])
    ours_side = side("ours", [9.0, 0.004, 0.001, 0.002])
    syncs = []
    medians = mb.interleaved([torch_side, ours_side], reps=3, warmup=1, sync=lambda: syncs.append(1),
                             clock=clock)
    assert medians == pytest.approx({"torch": 2.0, "ours": 2.0})  # ms; the 9 s warm-ups are dropped
    assert torch_side.times_ms == pytest.approx([1.0, 3.0, 2.0])
    assert ours_side.times_ms == pytest.approx([4.0, 1.0, 2.0])
    runs = [e.split()[0] for e in log if e.endswith("run")]
    assert runs == ["torch", "ours", "ours", "torch", "torch", "ours", "ours", "torch"]
    assert log[:3] == ["torch on", "torch run", "torch off"]  # each call inside its side's mode
    assert len(syncs) == 16  # before and after every call
    assert torch_side.result == 0 and ours_side.result == 0  # the last timed call's


def test_the_speedup_pairs_each_round(mb):
    """A host that slows down for half the rounds: the median of the round ratios sees the sides equal,
    the ratio of the medians does not."""
    torch_side = mb.Side("torch", contextlib.nullcontext, lambda _: None, times_ms=[10, 10, 10, 20, 20])
    ours_side = mb.Side("ours", contextlib.nullcontext, lambda _: None, times_ms=[10, 10, 20, 20, 20])
    # (the slow phase began between the sides of round 3: medians 10 and 20)
    assert mb.paired_speedup(torch_side, ours_side) == pytest.approx((1.0, 1.0, 1.0))
    ours_side.times_ms = [5, 10, 10, 10, 40]
    assert mb.paired_speedup(torch_side, ours_side) == pytest.approx((1.0, 1.0, 2.0))  # 2, 1, 1, 2, 0.5
    lone = mb.Side("x", contextlib.nullcontext, lambda _: None, times_ms=[4.0])
    assert mb.paired_speedup(lone, mb.Side("y", contextlib.nullcontext, lambda _: None, times_ms=[2.0])) \
        == (2.0, 2.0, 2.0)


def test_control_times_torch_on_both_sides(mb):
    from tritonblas.transparent import is_enabled

    (_, torch_mode), (_, ours_mode) = mb.sides(native=False, control=True)
    assert torch_mode is ours_mode is contextlib.nullcontext
    (_, torch_mode), (_, ours_mode) = mb.sides(native=False)
    with ours_mode():
        assert is_enabled()
    assert mb.parse_args(["--control"]).control and not mb.parse_args([]).control


def test_interleaved_settles_each_side_in_its_mode_before_timing(mb):
    clock, log = FakeClock(), []

    def side(name: str):
        @contextlib.contextmanager
        def mode():
            log.append(f"{name} on")
            yield
            log.append(f"{name} off")

        def run(state):
            log.append(f"{name} run")
            clock.now += 5.0 if log[-2] == f"{name} on" else 0.001  # the first call after a switch: slow

        return mb.Side(name, mode, run)

    sides = [side("torch"), side("ours")]
    assert mb.interleaved(sides, reps=2, warmup=0, clock=clock, settle=1) == pytest.approx(
        {"torch": 1.0, "ours": 1.0})
    assert log[:4] == ["torch on", "torch run", "torch run", "torch off"]
    assert mb.interleaved(sides, reps=2, warmup=0, clock=clock)["ours"] > 1000  # settle=0 times the switch


def _row(**over) -> dict:
    return {"model": "llama", "part": "decode", "batch": 8, "prompt": 128, "new_tokens": 64, **over}


def _doc(*models: dict) -> dict:
    return {"device": "NVIDIA H200", "dtype": "bf16", "torch": "2.11", "transformers": "5.17.0", "reps": 10,
            "models": list(models)}


def test_rows_and_table(mb):
    timed = _row(torch_ms=10.0, ours_ms=8.0, speedup=1.25, ours_tokens_as_torch_eager=0.96875)
    assert mb.format_row(timed) == ("| llama | decode | b8 p128+64 | 10.000 | 8.000 | 1.250x | "
                                    "tokens as torch eager: 0.97 |")
    failed = _row(part="decode-graph", torch_ms=5.0, error_ours="RuntimeError: capture failed")
    assert mb.format_row(failed) == ("| llama | decode-graph | b8 p128+64 | 5.000 | - | - | "
                                     "ours failed: RuntimeError: capture failed |")
    doc = _doc({"model": "llama", "params": 1_500_000_000, "rows": [timed, failed],
                "logits_error": {"torch": 0.0123, "ours": 0.0125}})
    text = mb.table(doc)
    assert mb.format_row(timed) in text and mb.format_row(failed) in text
    off = _row(part="decode-graph", ours_tokens_as_torch_eager=0.0, torch_tokens_as_torch_eager=0.0)
    assert mb.format_row(off).endswith("| tokens as torch eager: 0.00; torch's own: 0.00 |")
    assert "| llama | 1500.0M | 1.230e-02 | 1.250e-02 | - |" in text
    doc["models"][0]["logits_error"].update(experts_as_fp32_torch=0.9375, experts_as_fp32_ours=0.96875)
    assert "| llama | 1500.0M | 1.230e-02 | 1.250e-02 | 0.938 / 0.969 |" in mb.table(doc)
    assert "logits error torch (bf16 vs fp32)" in text and "vs transparent mode" in text
    spread = _row(torch_ms=10.0, ours_ms=8.0, speedup=1.25, speedup_middle_half=[1.2, 1.31])
    assert mb.format_row(spread).endswith("| 1.250x | rounds 1.200-1.310x |")
    assert "vs torch again (--control" in mb.table({**doc, "control": True})


def test_a_side_whose_logits_fail_is_recorded(mb):
    """torch._grouped_mm's CUDA fast path takes bf16 only: one side's prefill may fail where the other
    runs, which the logits table says, and the parts still run."""
    from types import SimpleNamespace

    from tritonblas.transparent import is_enabled

    class Model(torch.nn.Module):
        def forward(self, input_ids):
            if is_enabled():
                raise RuntimeError("no kernel for this dtype\nthe rest of the message")
            return SimpleNamespace(logits=input_ids.float() * 2)

    args = mb.parse_args(["--device", "cpu"])
    args.native_kernels = False
    bench = mb.Bench(args, "llama", Model(), SimpleNamespace(vocab_size=5), torch.device("cpu"))
    ids = torch.tensor([[1, 2, 3]])
    bench.ref_logits = ids.float() * 2.5
    errors = bench.logits_errors(ids)
    assert errors == {"torch": pytest.approx(0.2), "ours": None,
                      "error_ours": "RuntimeError: no kernel for this dtype"}
    text = mb.table(_doc({"model": "llama", "params": 2e6, "rows": [], "logits_error": errors}))
    assert "| llama | 2.0M | 2.000e-01 | failed: RuntimeError: no kernel for this dtype | - |" in text


def test_token_agreement_against_torchs_eager_decode(mb):
    ref, prompt = torch.tensor([[1, 2, 3, 4]]), torch.tensor([[7, 8]])
    rows = [_row(batch=1, _prompt=prompt, _results={"torch": ref, "ours": torch.tensor([[1, 2, 0, 4]])}),
            _row(part="decode-graph", batch=1, _prompt=prompt.clone(),
                 _results={"torch": ref, "ours": torch.tensor([[0, 0, 0, 4]])}),
            _row(part="train", batch=1, seq=16, _results={"torch": None, "ours": None})]
    mb._token_agreement(rows)
    assert [r.get("ours_tokens_as_torch_eager") for r in rows] == [0.75, 0.25, None]
    assert [r.get("torch_tokens_as_torch_eager") for r in rows] == [1.0, 1.0, None]
    assert not any("_results" in r or "_prompt" in r for r in rows)  # JSON-ready


def test_token_agreement_refuses_another_prompt(mb):
    """Rows decoded from different prompts do not compare (what made every graph row 0.0 on the H200)."""
    ref = torch.tensor([[1, 2]])
    rows = [_row(batch=1, _prompt=torch.tensor([[7, 8]]), _results={"torch": ref}),
            _row(part="decode-graph", batch=1, _prompt=torch.tensor([[7, 9]]), _results={"torch": ref})]
    with pytest.raises(RuntimeError, match="not the prompt of the eager decode"):
        mb._token_agreement(rows)


# --- the CUDA graph emulation (lm_common.replay) -----------------------------------------------------------

def test_recorded_graph_freezes_host_values_and_follows_tensors(mb):
    """Replays run what the capture ran: host-side values as they were at capture, tensors as they are."""
    from lm_common.replay import RecordedGraph

    buf, pos, x = torch.zeros(4), torch.zeros(1, dtype=torch.long), torch.ones(3)
    host = [0]
    outs = []

    def step():
        host[0] += 1  # a Python counter: a CUDA graph never sees it change
        buf.index_fill_(0, pos, float(host[0]))
        pos.add_(1)
        outs.append((x * 2).sum())  # a fresh tensor: the graph's buffer for it

    graph = RecordedGraph()
    with graph.capture():
        step()
    assert buf.tolist() == [0.0] * 4 and pos.item() == 0  # a capture runs nothing
    x.fill_(5.0)
    for _ in range(3):
        graph.replay()
    assert host == [1] and len(outs) == 1  # no Python ran in the replays
    assert buf.tolist() == [1.0, 1.0, 1.0, 0.0] and pos.item() == 3  # the device position advanced
    assert outs[0].item() == 30.0  # the captured output buffer holds the last replay's value
    with pytest.raises(RuntimeError, match="already captured"), graph.capture():
        pass


@pytest.mark.parametrize("body", [lambda t: t.sum().item(), lambda t: t.nonzero()])
def test_recorded_graph_refuses_host_syncs(mb, body):
    from lm_common.replay import RecordedGraph

    graph, t = RecordedGraph(), torch.ones(3)
    with pytest.raises(RuntimeError, match="host synchronization"), graph.capture():
        body(t)
    with pytest.raises(RuntimeError, match="replay before capture"):
        RecordedGraph().replay()


# --- the training-step profile (--profile; lm_common.profile) ----------------------------------------------

KERNEL_KINDS = {  # kernel name (as torch.profiler gives it): kind
    "void at::native::elementwise_kernel<128, 4, at::native::gpu_kernel_impl_nocast<at::native::"
    "direct_copy_kernel_cuda(at::TensorIteratorBase&)::{lambda()#3}>>(int, T1)": "copy",
    "Memcpy DtoD (Device -> Device)": "copy",
    "void at::native::vectorized_elementwise_kernel<4, CUDAFunctor_add<c10::BFloat16>>": "elementwise",
    "Memset (Device)": "memset",
    "persistent_gemm_kernel": "gemm",
    "pad_copy_kernel": "copy",
    "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n_tilesize128x128x64": "gemm",
    "nvjet_tst_128x256_64x4_2x1_v_bz_coopA_NTN": "gemm",
    "void splitKreduce_kernel<32, 16, int, float, __nv_bfloat16, float>": "gemm",
    # torch._grouped_mm's CUTLASS kernel (its name spells copy atoms) and ours
    "_ZN7cutlass13device_kernelIN2at4cuda6detail25enable_3x_kernel_for_sm9xINS_4gemm6kernel13Gemm"
    "UniversalINS5_17GroupProblemShapeIN4cute5tupleIJiiiEEEEENS_13SM90_TMA_LOAD_CopyE": "gemm",
    "grouped_gemm_kernel": "gemm",
    "void at::native::(anonymous namespace)::cunn_SoftMaxForward<4, float>": "other",
}


@pytest.mark.parametrize("name", list(KERNEL_KINDS))
def test_kernel_kinds(mb, name):
    from lm_common.profile import kernel_kind

    assert kernel_kind(name) == KERNEL_KINDS[name]


def _event(name: str, us: float, device: str = "CUDA"):
    """A FunctionEvent as torch.profiler's events() gives them (a kernel: device_type CUDA)."""
    from torch.autograd import DeviceType
    from torch.autograd.profiler_util import FunctionEvent

    return FunctionEvent(id=0, name=name, thread=0, start_us=100.0, end_us=100.0 + us,
                         device_type=getattr(DeviceType, device))


def test_tallies_of_profiler_events(mb):
    from lm_common.profile import kernel_tally, op_tally

    events = [_event("gemm", 10.0), _event("copy", 2.0), _event("gemm", 12.5)]
    events += [_event(op, 0.0, "CPU") for op in ("aten::mm", "aten::mm", "aten::copy_", "aten::add")]
    assert kernel_tally(events) == {"gemm": {"count": 2, "us": 22.5}, "copy": {"count": 1, "us": 2.0}}
    ops = op_tally(events)
    assert (ops["aten::mm"], ops["aten::copy_"], ops["aten::addmm"]) == (2, 1, 0) and "aten::add" not in ops


def test_surplus_lists_what_one_side_launches_more_often(mb):
    from lm_common.profile import surplus

    copy = "void at::native::elementwise_kernel<128, 4, direct_copy_kernel_cuda>"
    tallies = {"torch": {"cublas_gemm": {"count": 6, "us": 600.0}, "add": {"count": 2, "us": 4.0}},
               "ours": {"triton_gemm": {"count": 6, "us": 590.0}, "add": {"count": 2, "us": 4.5},
                        copy: {"count": 3, "us": 1236.0}}}
    extra = surplus(tallies, "ours", "torch")
    assert [r["name"] for r in extra] == [copy, "triton_gemm"]  # the most extra time first; "add" even
    assert extra[0] == {"name": copy, "kind": "copy", "ours_count": 3, "torch_count": 0, "ours_us": 1236.0,
                        "torch_us": 0.0}
    assert [r["name"] for r in surplus(tallies, "torch", "ours")] == ["cublas_gemm"]


def _profile(extra: list[dict]) -> dict:
    ops = {"aten::mm": 4, "aten::_grouped_mm": 2, "aten::copy_": 1}
    return {"kernels": {"torch": {"launches": 10, "us": 100.0, "gemm_us": 60.0},
                        "ours": {"launches": 13, "us": 130.0, "gemm_us": 45.0}},
            "host_ops": {"torch": ops, "ours": {**ops, "aten::copy_": 4}}, "ours_extra": extra,
            "torch_extra": [], "ours_extra_copy_or_elementwise_launches": 3}


def test_profile_table(mb):
    extra = [{"name": "k" * 120, "kind": "copy", "ours_count": 3, "torch_count": 0, "ours_us": 1236.0,
              "torch_us": 0.0}]
    doc = _doc({"model": "llama", "params": 1e9, "rows": [], "logits_error": {"torch": 0.0, "ours": 0.0},
                "profile": _profile(extra)})
    text = mb.table(doc)
    assert "| llama | 10 | 100 | 60 | 13 | 130 | 45 | 3 | 4 / 4 | 2 / 2 | 1 / 4 |" in text
    assert f"| llama | `{'k' * 87}...` | copy | 3 | 0 | 1236.0 | 0.0 |" in text
    doc["models"][0]["profile"] = {"error": "RuntimeError: CUPTI unavailable"}
    assert "| llama | failed: RuntimeError: CUPTI unavailable |" in mb.table(doc)
    doc["models"][0]["profile_prefill"] = _profile(extra)
    text = mb.table(doc)
    assert "Training step, one profiled call" in text and "Prefill, one profiled call" in text
    assert "kernels ours launches more often than torch's (prefill" in text.lower()
    del doc["models"][0]["profile"], doc["models"][0]["profile_prefill"]
    assert "profiled" not in mb.table(doc)


# --- with transformers -----------------------------------------------------------------------------------

FULL_SIZE = {  # model: (vocab, hidden, KV heads or None)
    "llama": (128256, 4096, 8),
    "qwen": (151936, 3584, 4),
    "gpt2": (50257, 1280, None),
    "bert": (30522, 1024, None),
    "mixtral": (32000, 4096, 8),
    "qwen3moe": (151936, 2048, 4),
}
EXPERTS = {"mixtral": (8, 2, 14336), "qwen3moe": (128, 8, 768)}  # model: (experts, top-k, expert width)


@pytest.mark.parametrize("name", list(FULL_SIZE))
def test_configs_at_full_size(mb, name):
    pytest.importorskip("transformers")
    config = mb.build_config(name, 2, tiny=False)
    vocab, hidden, kv_heads = FULL_SIZE[name]
    assert (config.vocab_size, config.hidden_size, config.num_hidden_layers) == (vocab, hidden, 2)
    if kv_heads is not None:
        assert config.num_key_value_heads == kv_heads
    if name == "gpt2":
        assert config.n_layer == 2
    if name in EXPERTS:
        width = getattr(config, "moe_intermediate_size", config.intermediate_size)
        assert (config.num_experts, config.num_experts_per_tok, width) == EXPERTS[name]


def _tiny_bench(mb, name: str, argv: list[str]):
    args = mb.parse_args(["--device", "cpu", "--tiny", "--models", name, *argv])
    config = mb.build_config(name, args.layers, tiny=True)
    torch.manual_seed(0)
    model = mb.build_model(name, config, torch.device("cpu"))
    return mb.Bench(args, name, model, config, torch.device("cpu"))


def test_decode_rows_of_a_batch_share_their_prompt(mb):
    pytest.importorskip("transformers")
    bench = _tiny_bench(mb, "llama", ["--prompt-len", "5"])
    first = bench.prompt(2)
    assert first.shape == (2, 5) and bench.prompt(2) is first
    assert bench.prompt(1).shape == (1, 5)


@pytest.mark.parametrize("name", ["llama", "gpt2", "qwen3moe"])
@pytest.mark.parametrize("graph", [None, "emulated"])
def test_static_cache_steps_decode_as_the_dynamic_cache(mb, name, graph):
    """The graph decoder (static cache, 4-D mask) gives the eager decode's tokens and logits: its step run
    eagerly, and captured and replayed as the GPU does it (the same setup, warm-up steps and capture; replays
    that change only what lives in tensors: lm_common.replay)."""
    pytest.importorskip("transformers")
    from lm_common import EagerDecoder, GraphDecoder

    bench = _tiny_bench(mb, name, [])
    prompt = bench.ids(2, 7)
    with torch.no_grad():
        eager = EagerDecoder(bench, prompt, 6)
        want = eager.run(eager.setup())
        static = GraphDecoder(bench, prompt, 6, graph=graph)
        assert (static.graph is None) == (graph is None)
        for _ in range(2):  # the second from the same cache, reset
            static.setup()
            assert torch.equal(static.run(None), want)
            # the logits too (a token's attention to the wrong slots need not move the argmax)
            torch.testing.assert_close(static.last_logits, eager.last_logits, rtol=1e-5, atol=1e-5)
    with pytest.raises(RuntimeError, match="CUDA graphs need a CUDA device"):
        GraphDecoder(bench, prompt, 6)
    with pytest.raises(ValueError, match="graph must be one of"):
        GraphDecoder(bench, prompt, 6, graph="cpu")


def test_tiny_run_through_transparent_mode(mb, tmp_path, capsys):
    """GPT-2 (Conv1D: addmm), every part, both sides; ours in the interpreter."""
    pytest.importorskip("transformers")
    path = tmp_path / "mb.json"
    assert mb.main(["--device", "cpu", "--tiny", "--models", "gpt2", "--dtype", "fp32", "--reps", "1",
                    "--warmup", "0", "--train-batch", "2", "--train-seq", "8", "--prefill-seq", "8",
                    "--prompt-len", "4", "--new-tokens", "2", "--decode-batches", "2", "--profile",
                    "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    (model,) = doc["models"]
    parts = [r["part"] for r in model["rows"]]
    assert parts == ["train", "prefill", "decode", "decode-graph"]
    for r in model["rows"]:
        assert r["torch_ms"] > 0 and r["ours_ms"] > 0 and r["speedup"] > 0
    for r in model["rows"][2:]:  # eager, then graph (emulated: lm_common.replay) decode of the same prompt
        assert r["torch_tokens_as_torch_eager"] == 1.0 and r["ours_tokens_as_torch_eager"] == 1.0
    graph_row = model["rows"][3]
    assert graph_row["graph"] == "emulated" and not any(k.startswith("error") for k in graph_row)
    assert model["logits_error"]["torch"] == 0.0  # fp32 against fp32: the same model, the same kernels
    assert 0 < model["logits_error"]["ours"] < 1e-5  # our kernels ran (the interpreter's, not torch's)
    # the profile on the CPU: no device kernels, the host's GEMMs (Conv1D: addmm) on both sides
    profile = model["profile"]
    assert profile["kernels"]["torch"] == {"launches": 0, "us": 0.0, "gemm_us": 0.0}
    assert profile["ours_extra"] == []
    assert profile["host_ops"]["torch"]["aten::addmm"] > 0 and profile["host_ops"]["ours"]["aten::addmm"] > 0
    prefill = model["profile_prefill"]  # --parts has prefill: one forward a side profiled too
    assert prefill["host_ops"]["ours"]["aten::addmm"] == prefill["host_ops"]["torch"]["aten::addmm"] > 0
    out = capsys.readouterr().out
    assert "| gpt2 | train |" in out and "| gpt2 | 0 | 0 | 0 | 0 | 0 |" in out


def test_record_writes_the_problems_of_our_side(mb, tmp_path):
    """--record FILE: our side's mode records every routed GEMM problem (what tritonblas tune reads); torch's
    side records nothing."""
    from tritonblas.shapes import load_problems

    path = tmp_path / "recorded.yaml"
    assert mb.parse_args(["--record", str(path)]).record == str(path)
    modes = dict(mb.sides(native=False, record=str(path)))
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    with modes["torch"]():
        torch.mm(a, b.t().contiguous().t())
    assert not path.exists()
    with modes["ours"]():
        torch.mm(a, b)
    (problem,) = load_problems(path)
    assert (problem.m, problem.n, problem.k) == (5, 3, 7)


# --- --fp8 (lm_common.fp8): the quantizers, the quantized Linear, the swap, a tiny run --------------------

def test_fp8_options(mb, capsys):
    args = mb.parse_args(["--fp8", "row", "--profile"])
    assert args.fp8 == "row" and args.parts == ["prefill", "decode", "decode-graph"] and not args.profile
    assert "train part is skipped" in capsys.readouterr().err
    assert mb.parse_args(["--fp8", "block", "--parts", "decode"]).parts == ["decode"]
    assert mb.parse_args([]).fp8 is None
    for argv in (["--fp8", "row", "--dtype", "fp32"], ["--fp8", "row", "--parts", "train"],
                 ["--fp8", "int8"]):
        with pytest.raises(SystemExit):
            mb.parse_args(argv)


def _dequantizes_to(q: torch.Tensor, scale: torch.Tensor, x: torch.Tensor) -> bool:
    """float8_e4m3fn's rounding: half a unit of 3 mantissa bits (1/16 of the value), or half the
    subnormal step (2^-10) of the scaled value."""
    return bool(((q.float() * scale - x).abs() <= x.abs() / 16 + scale * 2.0 ** -10 + 1e-30).all())


def test_fp8_quantizers(mb):
    from lm_common import fp8

    torch.manual_seed(0)
    x = torch.randn(5, 200) * torch.tensor([1e-3, 1.0, 30.0, 0.0, 2.0])[:, None]
    xq, scale = fp8.quantize_rows(x)
    assert xq.dtype == torch.float8_e4m3fn and scale.shape == (5, 1) and scale.dtype == torch.float32
    assert scale[3].item() == pytest.approx(fp8.EPS) and not xq.float().isnan().any()  # a zero row
    torch.testing.assert_close(scale[:, 0], (x.abs().amax(1) / 448).clamp(min=1e-12))
    assert xq.float().abs().amax().item() == 448.0  # each row's amax maps to float8's largest value
    assert _dequantizes_to(xq, scale, x)

    xq, scale = fp8.quantize_token_blocks(x)  # K = 200: blocks of 128 and 72
    assert scale.shape == (5, 2) and scale.stride() == (1, 5)  # outer-dim-major
    torch.testing.assert_close(scale[:, 1], (x[:, 128:].abs().amax(1) / 448).clamp(min=1e-12))
    assert _dequantizes_to(xq, scale.repeat_interleave(128, 1)[:, :200], x)

    w = torch.randn(130, 260)
    w[128:, 256:] *= 100.0  # the last, partial block's scale is its own
    wq, scale = fp8.quantize_weight_blocks(w)
    assert wq.shape == (130, 260) and scale.shape == (2, 3)
    assert scale[1, 2].item() == pytest.approx(w[128:, 256:].abs().amax().item() / 448)
    full = scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:130, :260]
    assert _dequantizes_to(wq, full, w)


def _linear(k: int = 150, n: int = 40, bias: bool = True) -> torch.nn.Linear:
    torch.manual_seed(1)
    return torch.nn.Linear(k, n, bias=bias).to(torch.bfloat16)


def _rel(x: torch.Tensor, ref: torch.Tensor) -> float:
    return ((x.float() - ref.float()).norm() / ref.float().norm()).item()


def test_fp8_row_linear_on_both_sides(mb):
    """torch._scaled_mm row-wise (torch runs it on the CPU too), and the same module in transparent mode:
    within float8's error of the bf16 Linear, our side through tritonblas."""
    needs_cpu_rowwise()
    from lm_common import fp8

    import tritonblas

    lin = _linear()
    q = fp8.Fp8Linear(lin, "row")
    assert q.weight.dtype == torch.float8_e4m3fn and q.weight_scale.shape == (1, 40)
    assert q.bias.dtype == torch.bfloat16
    x = torch.randn(2, 3, 150, dtype=torch.bfloat16)
    with torch.no_grad():
        ref, theirs = lin(x), q(x)
        with tritonblas.enable(native=False):
            ours = q(x)
        xq, sx = fp8.quantize_rows(x.reshape(6, 150))
        direct = tritonblas.scaled_mm(xq, q.weight.t(), sx, q.weight_scale, bias=q.bias,
                                      out_dtype=torch.bfloat16, backend="triton")
    assert theirs.shape == ours.shape == (2, 3, 40) and ours.dtype == torch.bfloat16
    assert 1e-3 < _rel(theirs, ref) < 0.06 and _rel(ours, ref) < 0.06
    assert torch.equal(ours.reshape(6, 40), direct)  # transparent mode ran our kernel
    assert _rel(ours, theirs) < 1e-2  # the same fp8 GEMM, bf16-rounded apart


def test_fp8_block_linear_ours(mb):
    """Our side of --fp8 block (torch's block-wise op has no CPU kernel): tritonblas.scaled_mm with the
    module's scales, equal to the GEMM of the dequantized operands and within float8's error of bf16."""
    from lm_common import fp8

    lin = _linear(k=260, n=130)
    q = fp8.Fp8Linear(lin, "block")
    assert q.weight_scale.shape == (2, 3)  # (N/128, K/128), transformers' weight_scale_inv
    x = torch.randn(5, 260, dtype=torch.bfloat16)
    with torch.no_grad(), fp8.block_by_tritonblas():
        with fp8.block_by_tritonblas():  # nested: the outer one's state comes back
            pass
        assert fp8.block_ours()
        ours = q(x)
    assert not fp8.block_ours()
    xq, sx = fp8.quantize_token_blocks(x)
    xd = xq.float() * sx.repeat_interleave(128, 1)[:, :260]
    wd = q.weight.float() * q.weight_scale.repeat_interleave(128, 0).repeat_interleave(128, 1)[:130, :260]
    want = xd @ wd.t() + q.bias.float()
    torch.testing.assert_close(ours.float(), want, rtol=1e-2, atol=1e-2)
    assert _rel(ours, lin(x)) < 0.06


def test_fp8_block_sides(mb):
    """--fp8 block: our side is transparent mode with the quantized layers' GEMM switched to tritonblas;
    torch's side neither."""
    from lm_common import fp8

    from tritonblas.transparent import is_enabled

    modes = dict(mb.sides(native=False, fp8="block"))
    with modes["ours"]():
        assert is_enabled() and fp8.block_ours()
    assert not is_enabled() and not fp8.block_ours()
    with modes["torch"]():
        assert not is_enabled() and not fp8.block_ours()
    assert dict(mb.sides(native=False, control=True, fp8="block"))["ours"] is contextlib.nullcontext


def test_quantize_model_swaps_the_linears_but_the_head(mb):
    from lm_common import fp8

    class Toy(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = torch.nn.Embedding(10, 16)
            self.block = torch.nn.ModuleDict({"up": torch.nn.Linear(16, 32), "down": torch.nn.Linear(32, 16)})
            self.norm = torch.nn.LayerNorm(16)
            self.head = torch.nn.Linear(16, 10, bias=False)

        def get_output_embeddings(self) -> torch.nn.Module:
            return self.head

    model = Toy().to(torch.bfloat16)
    assert fp8.quantize_model(model, "block") == ["block.up", "block.down"]
    assert isinstance(model.block["up"], fp8.Fp8Linear) and model.block["up"].mode == "block"
    assert type(model.head) is torch.nn.Linear and type(model.embed) is torch.nn.Embedding
    assert fp8.quantize_model(model, "row") == []  # nothing left to swap
    with pytest.raises(ValueError, match="mode must be one of"):
        fp8.Fp8Linear(torch.nn.Linear(4, 4), "tensor")


def test_fp8_table(mb):
    errors = {"torch": 0.0412, "ours": 0.0413, "ours_vs_torch": 0.0021, "experts_as_bf16_torch": 1.0,
              "experts_as_bf16_ours": 0.75}
    doc = {**_doc({"model": "mixtral", "params": 2e6, "rows": [], "logits_error": errors},
                  {"model": "gpt2", "params": 1e6, "rows": [], "skipped": "no nn.Linear to quantize"}),
           "fp8": "row"}
    text = mb.table(doc)
    assert "(fp8 row, torch" in text
    assert "| model | params | logits error torch (fp8 row vs bf16) | ours | ours vs torch | experts as " \
           "bf16's torch / ours |" in text
    assert "| mixtral | 2.0M | 4.120e-02 | 4.130e-02 | 2.100e-03 | 1.000 / 0.750 |" in text
    assert "| gpt2 | 1.0M | skipped: no nn.Linear to quantize |" in text


def test_tiny_fp8_row_run(mb, tmp_path):
    """--fp8 row end to end: Llama's seven projections a layer quantized (not lm_head), the inference
    parts on both sides (ours: transparent mode routing torch._scaled_mm, in the interpreter), each side's
    logits within float8's error of the bf16 model's and close to each other."""
    pytest.importorskip("transformers")
    needs_cpu_rowwise()
    path = tmp_path / "fp8.json"
    assert mb.main(["--device", "cpu", "--tiny", "--models", "llama", "--fp8", "row", "--layers", "1",
                    "--reps", "1", "--warmup", "0", "--prefill-seq", "8", "--prompt-len", "4",
                    "--new-tokens", "2", "--decode-batches", "2", "--json", str(path)]) == 0
    doc = json.loads(path.read_text())
    (model,) = doc["models"]
    assert doc["fp8"] == "row" and len(model["fp8_layers"]) == 7
    assert not any("lm_head" in name for name in model["fp8_layers"])
    assert [r["part"] for r in model["rows"]] == ["prefill", "decode", "decode-graph"]
    for r in model["rows"]:
        assert r["torch_ms"] > 0 and r["ours_ms"] > 0 and not any(k.startswith("error") for k in r), r
    e = model["logits_error"]
    assert 1e-3 < e["torch"] < 0.15 and 1e-3 < e["ours"] < 0.15, e
    assert e["ours_vs_torch"] < e["torch"], e
