"""The vendor GEMM as a backend (issue 17): GemmConfig.backend "torch" runs torch.mm / torch.addmm with
the kernels' contract, pinned by `backend=`, chosen by dispatch (tuned winner, neighbour, heuristic
rule), timed by the tuner like any candidate, and carried through the database and config files."""

from __future__ import annotations

import json
from datetime import datetime, timezone
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from helpers.db import TUNED
from helpers.fakes import FakeBench, candidate_calls, fake_ms
from helpers.shapes import assert_close, make_bias, op_reference, operands, record_launches, run_op
from typer.testing import CliRunner

import tritonblas
from tritonblas.arch import INTERPRETER_DEVICE, device_for_arch
from tritonblas.call.core_op import config_from_list as _config_from_list
from tritonblas.call.core_op import config_to_list as _config_to_list
from tritonblas.cli import app
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import Problem, rows_aligned
from tritonblas.selection import dispatch, heuristic
from tritonblas.tuning.protocol import BenchResult
from tritonblas.tuning.space import candidate_space
from tritonblas.tuning.tuner import MIN_TIMED, REMATCH_ROUNDS, tune_problem
from tuning_db import EnvIdentity, Measurement, ProblemKey, TuningDB, Winner
from tuning_db.exchange import ConfigFileError, export_file, import_file, load_config_file

VENDOR = GemmConfig.vendor()
H200 = device_for_arch("sm_90", "NVIDIA H200", 132)
KERNEL = GemmConfig(block_m=16, block_n=16, block_k=16, grid=3)
DTYPES = {"fp16": torch.float16, "fp32": torch.float32, "bf16": torch.bfloat16}


@pytest.fixture
def launches(monkeypatch):
    return record_launches(monkeypatch)


@pytest.fixture
def torch_calls(monkeypatch):
    """Count the vendor calls the ops make (torch.mm and torch.addmm, as ops looks them up)."""
    calls: list[str] = []
    for name in ("mm", "addmm"):
        real = getattr(torch, name)

        def spy(*args, _real=real, _name=name, **kw):
            calls.append(_name)
            return _real(*args, **kw)

        monkeypatch.setattr(torch, name, spy)
    return calls


def winner(problem, device, config, ms, torch_ms=None) -> Winner:
    return Winner(key=ProblemKey.from_problem(problem, device), config=config, median_ms=ms,
                  torch_ms=torch_ms, created_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
                  env=EnvIdentity.current())


# --- the config ---------------------------------------------------------------------------------------

def test_vendor_config_is_one_canonical_config():
    assert VENDOR == GemmConfig(backend="torch") == GemmConfig.model_validate_json('{"backend": "torch"}')
    assert VENDOR.short() == "torch" and VENDOR.model_dump(mode="json") == {"backend": "torch"}
    with pytest.raises(ValueError, match="takes no tile fields"):
        GemmConfig(backend="torch", block_m=128)
    with pytest.raises(ValueError, match="backend"):
        GemmConfig(block_m=16, block_n=16, block_k=16, backend="cuda")
    # Any problem, any device: the tile fields mean nothing to torch.mm.
    for device in (H200, INTERPRETER_DEVICE, device_for_arch("gfx942")):
        assert config_supports(VENDOR, Problem(127, 4097, 4095, "fp32", "tt", "full"), device) is None
    assert _config_from_list(_config_to_list(VENDOR)) == VENDOR  # through the custom op's schema


def test_triton_config_json_has_no_backend_key():
    # Files and DB rows written before the field existed compare and load the same.
    assert "backend" not in KERNEL.model_dump(mode="json")
    assert GemmConfig.model_validate_json(json.dumps(KERNEL.model_dump(mode="json"))) == KERNEL
    shipped = load_config_file("configs/sm_90.json")
    raw = json.loads(Path("configs/sm_90.json").read_text())["entries"]
    assert len(raw) == len(shipped.entries)
    kernels = [e for e in raw if "backend" not in e["config"]]
    assert kernels and len(kernels) == sum(e.config.backend == "triton" for e in shipped.entries)


# --- the ops ------------------------------------------------------------------------------------------

@pytest.mark.parametrize("layout", ["nn", "nt", "tn", "tt", "strided"])
@pytest.mark.parametrize("dtype", list(DTYPES))
@pytest.mark.parametrize("op", ["matmul", "addmm", "linear"])
def test_torch_backend_runs_every_op_and_layout(op, dtype, layout, launches, torch_calls):
    m, n, k = 33, 17, 100
    a, b = operands(m, n, k, DTYPES[dtype], layout)
    bias = make_bias("row", m, n, DTYPES[dtype])
    ours, theirs = run_op(op, a, b, bias, 0.5, -2.0, backend="torch")
    assert_close(ours, theirs, op_reference(op, a, b, bias, 0.5, -2.0), k=k)
    assert not launches and torch_calls  # torch ran it, no kernel


BIAS_KINDS = ["scalar0d", "one", "row", "row2d", "col", "full", "full_t", "expand_row", "expand_col"]


@pytest.mark.parametrize("kind", BIAS_KINDS)
@pytest.mark.parametrize("beta, alpha", [(1, 1), (0.5, -2.0), (0.0, 1.5), (2.0, 0.0)])
def test_torch_backend_bias_semantics(kind, beta, alpha, launches):
    m, n, k = 33, 17, 100
    a, b = operands(m, n, k, torch.float32, "nn")
    bias = make_bias(kind, m, n, torch.float32, nan=beta == 0)
    ours = tritonblas.addmm(bias, a, b, beta=beta, alpha=alpha, backend="torch")
    kernels = tritonblas.addmm(bias, a, b, beta=beta, alpha=alpha, config=KERNEL)
    ref = op_reference("addmm", a, b, bias, beta, alpha)
    assert_close(ours, torch.addmm(bias, a, b, beta=beta, alpha=alpha), ref, k=k)
    assert_close(ours, kernels, ref, k=k) and not torch.isnan(ours).any()
    assert len(launches) == 1  # the kernel call only


@pytest.mark.parametrize("shape", [(0, 5, 7), (5, 0, 7), (5, 7, 0)], ids=str)
def test_torch_backend_empty_and_k0(shape):
    m, n, k = shape
    a, b = operands(m, n, k, torch.float32, "nn")
    bias = torch.randn(n)
    got = tritonblas.addmm(bias, a, b, beta=0.5, backend="torch")
    torch.testing.assert_close(got, torch.addmm(bias, a, b, beta=0.5))
    out = torch.full((m, n), 7.0)
    assert tritonblas.matmul(a, b, out=out, backend="torch") is out
    torch.testing.assert_close(out, torch.zeros(m, n))


def test_torch_backend_out_and_linear_nd(torch_calls):
    a, b = operands(33, 17, 100, torch.float16, "tn")
    out = torch.empty(33, 17, dtype=torch.float16)
    assert tritonblas.matmul(a, b, out=out, backend="torch") is out
    torch.testing.assert_close(out, a @ b)
    x = torch.randn(2, 3, 100, dtype=torch.float16)
    w, bias = torch.randn(17, 100, dtype=torch.float16), torch.randn(17, dtype=torch.float16)
    for _ in range(2):  # the second call takes the per-call cache
        torch.testing.assert_close(tritonblas.linear(x, w, bias, backend="torch"), F.linear(x, w, bias))
    assert len(torch_calls) == 3


# One row (decode) is the case that regressed: its broadcast view has stride (N, 1), not (0, 1).
@pytest.mark.parametrize("m", [1, 33])
@pytest.mark.parametrize("kind", ["row", "row2d", "expand_row"])
def test_torch_backend_hands_a_row_bias_to_torch_as_a_vector(monkeypatch, m, kind):
    """cuBLASLt fuses a bias into the GEMM only when torch.addmm gets it as an (N,) vector; a 2-D view
    is copied into the output first (1x6144x4096 bf16 on the H200: 58.7 vs 24.1 us)."""
    n, k = 17, 100
    a, b = operands(m, n, k, torch.float32, "nt")
    bias = make_bias(kind, m, n, torch.float32)
    seen: list[tuple[int, ...]] = []
    real = torch.addmm

    def spy(input, *args, **kw):
        seen.append(tuple(input.shape))
        return real(input, *args, **kw)

    monkeypatch.setattr(torch, "addmm", spy)
    got = tritonblas.addmm(bias, a, b, backend="torch")
    assert seen == [(n,)]
    assert_close(got, real(bias, a, b), op_reference("addmm", a, b, bias, 1.0, 1.0), k=k)


def test_torch_backend_autograd_runs_torch_in_backward(torch_calls, launches):
    x = torch.randn(33, 100, requires_grad=True)
    w = torch.randn(17, 100, requires_grad=True)
    bias = torch.randn(17, requires_grad=True)
    tritonblas.linear(x, w, bias, backend="torch").square().sum().backward()
    x2, w2, b2 = (t.detach().clone().requires_grad_() for t in (x, w, bias))
    F.linear(x2, w2, b2).square().sum().backward()
    for ours, theirs in ((x, x2), (w, w2), (bias, b2)):
        torch.testing.assert_close(ours.grad, theirs.grad, rtol=1e-5, atol=1e-4)
    assert not launches and len(torch_calls) == 3  # forward, dX and dW all by torch


def test_torch_backend_under_torch_compile():
    torch._dynamo.reset()

    def f(x, w, bias):
        return tritonblas.linear(x, w, bias, backend="torch") + tritonblas.matmul(x, w.t(), backend="triton")

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x, w, bias = torch.randn(33, 100), torch.randn(17, 100), torch.randn(17)
    torch.testing.assert_close(compiled(x, w, bias), f(x, w, bias), rtol=1e-5, atol=1e-4)
    torch._dynamo.reset()


def test_backend_pinning(paths, launches, torch_calls):
    url, _ = paths
    p = Problem(33, 17, 100, "fp32")
    a, b = operands(p.m, p.n, p.k, torch.float32, "nn")
    # A tuned winner that is the vendor: dispatch runs torch; backend="triton" keeps to the kernels.
    with TuningDB(url) as db:
        db.upsert_winner(winner(p, INTERPRETER_DEVICE, VENDOR, 0.01))
    dispatch.clear_cache()
    tritonblas.matmul(a, b)
    assert torch_calls == ["mm"] and not launches
    tritonblas.matmul(a, b, backend="triton")
    assert torch_calls == ["mm"] and len(launches) == 1
    assert dispatch.select(33, 17, 100, "fp32", backend="triton").backend == "triton"
    sel = dispatch.select(33, 17, 100, "fp32")
    assert (sel.source, sel.backend) == ("db", "torch") and "torch.mm was the fastest" in sel.detail
    # backend="torch" pins the vendor whatever is tuned.
    with TuningDB(url) as db:
        db.upsert_winner(winner(p, INTERPRETER_DEVICE, KERNEL, 0.001))
    dispatch.clear_cache()
    tritonblas.matmul(a, b, backend="torch")
    tritonblas.addmm(torch.randn(17), a, b, backend="torch")
    assert torch_calls == ["mm", "mm", "addmm"]
    pinned = dispatch.select(33, 17, 100, "fp32", backend="torch")
    assert (pinned.config, pinned.source, pinned.backend) == (VENDOR, "user", "torch")
    assert "torch" in pinned.describe()


@pytest.mark.parametrize("call", [
    lambda a, b, kw: tritonblas.matmul(a, b, **kw),
    lambda a, b, kw: tritonblas.addmm(torch.zeros(17), a, b, **kw),
    lambda a, b, kw: tritonblas.linear(a, b.t(), **kw),
    lambda a, b, kw: dispatch.select(33, 17, 100, "fp32", **kw),
], ids=["matmul", "addmm", "linear", "select"])
def test_bad_backend_values(call):
    a, b = operands(33, 17, 100, torch.float32, "nn")
    for bad in ("cuda", "Torch", 1, True):
        with pytest.raises(ValueError, match="backend"):
            call(a, b, {"backend": bad})
    with pytest.raises(ValueError, match="backend='torch' conflicts with config"):
        call(a, b, {"backend": "torch", "config": KERNEL})
    with pytest.raises(ValueError, match="backend='triton' conflicts with config"):
        call(a, b, {"backend": "triton", "config": VENDOR})
    with pytest.raises(ValueError, match="enable_streamk=True"):
        call(a, b, {"backend": "torch", "enable_streamk": True})
    with pytest.raises(ValueError, match="enable_streamk=False"):
        call(a, b, {"config": VENDOR, "enable_streamk": False})


# --- dispatch -----------------------------------------------------------------------------------------

def test_heuristic_vendor_rule():
    def vendor(p, device=H200):
        return heuristic.vendor_preferred(p, device, heuristic.rank(p, device)[0])

    assert vendor(Problem(1000, 1000, 1000, "bf16")) is not None  # odd sizes: torch.mm won (0.71x)
    assert vendor(Problem(3000, 2000, 5000, "fp16")) is not None
    assert vendor(Problem(8192, 8192, 8192, "bf16")) is None  # the kernels' home ground (1.22x)
    assert vendor(Problem(1000, 1000, 1000, "fp32")) is None  # not fit on fp32
    assert vendor(Problem(16, 6144, 4096, "bf16")) is None  # skinny: memory-bound decode
    assert vendor(Problem(1000, 1000, 1000, "bf16"), INTERPRETER_DEVICE) is None  # no threshold there


@pytest.mark.parametrize("problem, torch_predicted", [
    (Problem(2048, 1024, 30522, "bf16"), False),  # K's rows 61044 bytes: cuBLAS has no vector kernel
    (Problem(30522, 1024, 2048, "bf16", "tn"), False),  # A's leading dim 30522
    (Problem(1000, 1000, 1001, "fp16"), False),
    (Problem(127, 4097, 4095, "fp16"), True),  # M under 256: tied in its tuning run, the rule stands
    (Problem(1000, 1000, 1000, "bf16"), True),  # every row 16 bytes: the efficiency rule
])
def test_the_vendor_rule_leaves_misaligned_problems_to_the_kernels(problem, torch_predicted):
    why = heuristic.vendor_preferred(problem, H200, heuristic.rank(problem, H200)[0])
    assert (why is not None) == torch_predicted


@pytest.mark.parametrize("problem, misaligned", [
    (Problem(2048, 30522, 1024, "bf16", "nt"), True),  # A and B aligned, C's rows 61044 bytes
    (Problem(2048, 1024, 30522, "bf16"), True),
    (Problem(30522, 1024, 2048, "bf16", "tn"), True),
    (Problem(30522, 1024, 2048, "bf16", "nn"), False),
    (Problem(1000, 1000, 1000, "bf16"), False),
])
def test_rows_aligned(problem, misaligned):
    assert rows_aligned(problem) != misaligned


@pytest.fixture
def user_db(paths):
    """`paths` with the user DB file created (explain's --db refuses a file that does not exist)."""
    with TuningDB(paths[0]):
        pass
    return paths


def test_heuristic_layer_answers_with_the_vendor(user_db):
    sel = dispatch.select(1000, 1000, 1000, "bf16", device=H200)
    assert (sel.source, sel.backend) == ("heuristic", "torch") and "roofline" in sel.detail
    assert dispatch.select(1000, 1000, 1000, "bf16", device=H200, backend="triton").backend == "triton"
    assert dispatch.select(1000, 1000, 1000, "bf16", device=H200, enable_streamk=True).config.streamk
    result = CliRunner().invoke(app, ["explain", "1000", "1000", "1000", "--arch", "sm_90", "--top", "2",
                                      "--db", user_db[0]])
    assert result.exit_code == 0, result.output
    assert "selected: torch" in result.output and "backend:  torch" in result.output
    assert "torch.mm predicted faster" in result.output


def test_explain_backend_option(user_db):
    url, _ = user_db
    out = CliRunner().invoke(app, ["explain", "4096", "4096", "4096", "--arch", "sm_90", "--top", "1",
                                      "--db", url, "--backend", "torch"]).output
    assert "selected: torch" in out and "backend='torch' given by the caller" in out
    out = CliRunner().invoke(app, ["explain", "1000", "1000", "1000", "--arch", "sm_90", "--top", "1",
                                      "--db", url, "--backend", "triton"]).output
    assert "backend:  triton" in out


NEAR_P = Problem(1024, 1024, 1024, "bf16")


def test_vendor_neighbour_only_when_close(paths):
    url, _ = paths
    with TuningDB(url) as db:
        db.upsert_winner(winner(NEAR_P, H200, VENDOR, 0.01))
    dispatch.clear_cache()
    # Same sizes, another bias kind: the vendor serves (it runs every bias kind and layout).
    near = dispatch.select(1024, 1024, 1024, "bf16", bias="row", layout="nt", device=H200)
    assert (near.source, near.backend) == ("neighbor", "torch")
    assert "distance 0.75 (sizes 0.00 + bias none 0.25 + layout nn 0.5)" in near.detail
    # 4x in M (distance 2): the vendor winner says the kernels lost there, not what to run here.
    far = dispatch.select(4096, 1024, 1024, "bf16", device=H200)
    assert far.source != "neighbor" or far.backend == "triton"


@pytest.mark.parametrize("tuned, asked", [
    (NEAR_P, (1024, 1024, 1025)),  # A's rows 2050 bytes: cuBLAS's aligned win says nothing there
    (Problem(1024, 1024, 1025, "bf16"), (1024, 1024, 1024)),  # nor its misaligned one here
])
def test_vendor_neighbour_only_with_the_same_row_alignment(paths, tuned, asked):
    url, _ = paths
    with TuningDB(url) as db:
        db.upsert_winner(winner(tuned, H200, VENDOR, 0.01))
    dispatch.clear_cache()
    assert dispatch.select(*asked, "bf16", device=H200).source != "neighbor"
    assert dispatch.select(tuned.m, tuned.n, tuned.k, "bf16", bias="row", device=H200).source == "neighbor"


def test_kernel_neighbour_gives_way_to_the_vendor_rule(paths):
    url, _ = paths
    kernel = TUNED  # a config the model keeps as a neighbour near 1024^3
    with TuningDB(url) as db:
        db.upsert_winner(winner(NEAR_P, H200, kernel, 0.01))
    dispatch.clear_cache()
    # 1024x1024x2048: the model puts its best kernel far from the roofline, where torch.mm won.
    sel = dispatch.select(1024, 1024, 2048, "bf16", device=H200)
    assert (sel.source, sel.backend) == ("heuristic", "torch")
    assert dispatch.select(1024, 1024, 2048, "bf16", device=H200, backend="triton").config == kernel
    assert dispatch.select(1024, 1024, 1024, "bf16", device=H200).config == kernel  # tuned: it runs


def test_tma_neighbours_cross_layouts_pointer_ones_do_not(paths):
    url, _ = paths
    tma = GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=4, num_stages=4, tma=True)
    ptr = tma.model_copy(update={"tma": False})
    big = Problem(4096, 4096, 4096, "bf16")
    with TuningDB(url) as db:
        db.upsert_winner(winner(big, H200, tma, 0.2))
    dispatch.clear_cache()
    sel = dispatch.select(4096, 4096, 2048, "bf16", layout="nt", bias="row", device=H200)
    assert (sel.source, sel.config) == ("neighbor", tma)
    assert "layout nn 0.5" in sel.detail and "bias none 0.25" in sel.detail
    assert dispatch.select(4096, 4096, 2048, "fp16", layout="nt", device=H200).source != "neighbor"
    with TuningDB(url) as db:
        db.upsert_winner(winner(big, H200, ptr, 0.1))
    dispatch.clear_cache()
    assert dispatch.select(4096, 4096, 2048, "bf16", layout="nt", device=H200).source != "neighbor"
    assert dispatch.select(4096, 4096, 2048, "bf16", device=H200).config == ptr


# --- the tuner, the database and config files ---------------------------------------------------------

def test_vendor_candidate_comes_first_on_gpus_only():
    p = Problem(512, 512, 512, "bf16")
    assert candidate_space(p, H200)[0] == VENDOR
    assert candidate_space(p, H200, vendor=False)[0] != VENDOR
    assert VENDOR not in candidate_space(p, H200, enable_streamk=False)
    assert VENDOR not in candidate_space(p, INTERPRETER_DEVICE)  # emulated kernels vs native torch.mm
    assert candidate_space(p, INTERPRETER_DEVICE, vendor=True)[0] == VENDOR


def test_vendor_is_timed_after_the_kernels_besides_their_minimum(tmp_path):
    # Past the budget MIN_TIMED kernels are still timed (the compiled ones); torch.mm does not take a slot
    # and is timed last, after the compile threads (timed first it read 25.3 us for an 11.1 us torch.mm).
    p = Problem(512, 512, 512, "bf16")
    space = candidate_space(p, H200)
    bench = FakeBench()
    bench.ready = lambda config: True
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        tune_problem(p, H200, db, bench=bench, budget_s=1e-9)
    assert space[0] == VENDOR and candidate_calls(bench.calls) == [*space[1:MIN_TIMED + 1], VENDOR]


def test_tuned_vendor_winner_is_stored_and_dispatched(paths, torch_calls, launches):
    url, _ = paths
    p = Problem(33, 17, 100, "fp32")
    bench = FakeBench({VENDOR: BenchResult("ok", 0.1, 0.09, 0.11, 0.0)}, torch_ms=0.1)
    with TuningDB(url) as db:
        out = tune_problem(p, INTERPRETER_DEVICE, db, bench=bench, budget_s=60, early_stop=False, vendor=True)
        assert bench.calls[-1] == VENDOR and all(fake_ms(c) > 0.1 for c in bench.calls[:-1])
        assert out.winner.config == VENDOR and out.winner.speedup == pytest.approx(1.0)
        rows = {m.config: m for m in db.measurements(out.key)}
        assert rows[VENDOR].status == "ok" and rows[VENDOR].median_ms == 0.1 and len(rows) == out.candidates
        assert db.get_winner(out.key).config == VENDOR
    dispatch.clear_cache()
    a, b = operands(p.m, p.n, p.k, torch.float32, "nn")
    torch.testing.assert_close(tritonblas.matmul(a, b), a @ b)
    assert torch_calls == ["mm"] and not launches
    # The kernels alone: the fastest kernel measured in the same run.
    tritonblas.matmul(a, b, backend="triton")
    fastest = min((c for c in rows if c.backend == "triton"), key=fake_ms)
    assert [x.config for x in launches] == [fastest]


@pytest.mark.parametrize("torch_ms, vendor_wins", [
    (0.3, True),  # torch.mm beats every kernel (fake times 0.5-1.5 ms) although its candidate read 5 ms
    (None, False),  # no baseline: the candidate's own (slow) timing stands
])
def test_fastest_kernel_meets_torch_again_before_it_wins(tmp_path, torch_ms, vendor_wins):
    # torch.mm timed as a candidate while kernels compiled read 71.1 us against its 29.3 us baseline
    # (512x4096x4096 nt row bf16, tune-all run of 2026-11-30) and a 50.3 us kernel won: the fastest kernel
    # and torch.mm's baseline are timed again side by side (tuner._rematch), and that decides.
    p = Problem(33, 17, 100, "fp32")
    bench = FakeBench({VENDOR: BenchResult("ok", 5.0, 4.9, 5.1, 0.0)}, torch_ms=torch_ms)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        out = tune_problem(p, INTERPRETER_DEVICE, db, bench=bench, budget_s=60, early_stop=False, vendor=True)
        rows = {m.config: m for m in db.measurements(out.key)}
        assert rows[VENDOR].median_ms == 5.0  # the candidate's row keeps what it read
        fastest = min((c for c in rows if c.backend == "triton"), key=fake_ms)
        assert bench.calls[len(rows):] == [fastest] * REMATCH_ROUNDS
        assert out.winner.config == (VENDOR if vendor_wins else fastest)
        assert out.winner.median_ms == (torch_ms if vendor_wins else fake_ms(fastest))
        assert db.get_winner(out.key).config == out.winner.config
    # Not without the vendor candidate: a kernel-only tuning keeps its fastest kernel.
    with TuningDB(str(tmp_path / "k.sqlite")) as db:
        out = tune_problem(p, INTERPRETER_DEVICE, db, bench=FakeBench(torch_ms=0.3), budget_s=60,
                           early_stop=False, vendor=False)
        assert out.winner.config.backend == "triton"
        assert out.winner.speedup == pytest.approx(0.3 / out.winner.median_ms)


def test_final_match_is_the_benchmarks_side_by_side_timing(tmp_path):
    # The final match is bench.head_to_head (on a GPU: calls interleaved one by one, as `tritonblas
    # bench` times a row), and its numbers decide, whatever the candidates read before.
    class SideBySide(FakeBench):
        def head_to_head(self, config, problem, device, rounds=3):
            self.matched = (config, rounds)
            return BenchResult("ok", 9.0, 9.0, 9.0, 0.0), 4.0  # torch.mm faster side by side

    p = Problem(33, 17, 100, "fp32")
    bench = SideBySide({VENDOR: BenchResult("ok", 50.0, 50.0, 50.0, 0.0)}, torch_ms=50.0)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        out = tune_problem(p, INTERPRETER_DEVICE, db, bench=bench, budget_s=60, early_stop=False, vendor=True)
    fastest = min((c for c in candidate_space(p, INTERPRETER_DEVICE, vendor=True) if c.backend == "triton"),
                  key=fake_ms)
    assert bench.matched == (fastest, REMATCH_ROUNDS)
    assert out.winner.config == VENDOR and out.winner.median_ms == 4.0 and out.winner.torch_ms == 4.0


def test_a_failing_rematch_keeps_the_candidates_timings(tmp_path):
    # The final match runs the fastest kernel again: an error there (out of memory, say) ends the match
    # and is no timing, not a crash; the kernel's candidate timing and torch.mm's baseline decide.
    p = Problem(33, 17, 100, "fp32")
    calls = {}

    def once_then_fail(config):
        def outcome():
            calls[config] = calls.get(config, 0) + 1
            if calls[config] > 1:
                raise RuntimeError("CUDA out of memory")
            return BenchResult("ok", fake_ms(config), fake_ms(config), fake_ms(config), 0.0)
        return outcome

    space = candidate_space(p, INTERPRETER_DEVICE, vendor=True)
    bench = FakeBench({c: once_then_fail(c) for c in space if c.backend == "triton"}, torch_ms=5.0)
    bench.outcomes[VENDOR] = BenchResult("ok", 5.0, 4.9, 5.1, 0.0)
    with TuningDB(str(tmp_path / "t.sqlite")) as db:
        out = tune_problem(p, INTERPRETER_DEVICE, db, bench=bench, budget_s=60, early_stop=False, vendor=True)
    fastest = min((c for c in space if c.backend == "triton"), key=fake_ms)
    assert calls[fastest] == 2  # its candidate timing, then the final match's first call, which raised
    assert out.winner.config == fastest and out.winner.median_ms == fake_ms(fastest)
    assert out.winner.torch_ms == 5.0


def test_export_import_round_trip_keeps_the_backend(tmp_path):
    p, q = Problem(1000, 1000, 1000, "bf16"), Problem(4096, 4096, 4096, "bf16")
    kernel = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3)
    slower = kernel.model_copy(update={"num_stages": 4})
    with TuningDB(str(tmp_path / "a.sqlite")) as db:
        w = winner(p, H200, VENDOR, 0.0108, torch_ms=0.0108)
        db.upsert_winner(w)
        db.record_measurements(w.key, w.env, [Measurement(config=c, status="ok", median_ms=ms) for c, ms in
                                              ((VENDOR, 0.0108), (kernel, 0.015), (slower, 0.016))])
        db.upsert_winner(winner(q, H200, kernel, 0.18, torch_ms=0.19))
        cfg = export_file(db, tmp_path / "sm_90.json", "sm_90")
    text = (tmp_path / "sm_90.json").read_text()
    assert '"config": {"backend": "torch"}' in text and text.count('"backend"') == 1
    assert {e.config for e in cfg.entries} == {VENDOR, kernel}
    # The torch winner carries the fastest kernel of its run; the kernel winner carries nothing more.
    assert [(e.config, e.kernel and (e.kernel.config, e.kernel.median_ms)) for e in cfg.entries] == [
        (VENDOR, (kernel, 0.015)), (kernel, None)]
    with TuningDB(str(tmp_path / "b.sqlite")) as db:
        import_file(db, tmp_path / "sm_90.json")
        assert {w.config for w in db.winners("sm_90")} == {VENDOR, kernel}
        export_file(db, tmp_path / "again.json", "sm_90")
    assert (tmp_path / "again.json").read_text() == text
    # Shipped: the vendor entry is what dispatch runs for its problem; its kernel when asked for kernels.
    dispatch.set_shipped_dir(tmp_path)
    try:
        with dispatch.using_database(False):
            sel = dispatch.select(1000, 1000, 1000, "bf16", device=H200)
            assert (sel.source, sel.backend, sel.time_ms) == ("shipped", "torch", 0.0108)
            sel = dispatch.select(1000, 1000, 1000, "bf16", device=H200, backend="triton")
            assert (sel.source, sel.config, sel.time_ms) == ("shipped", kernel, 0.015)
            assert "fastest kernel of its tuning run" in sel.detail
            sk = dispatch.select(1000, 1000, 1000, "bf16", device=H200, enable_streamk=True)
            assert sk.source != "shipped"  # the fallback is a persistent config
    finally:
        dispatch.set_shipped_dir(None)
    # A kernel fallback belongs to a torch winner only.
    data = json.loads(text)
    data["entries"][1]["kernel"] = data["entries"][0]["kernel"]
    (tmp_path / "bad.json").write_text(json.dumps(data))
    with pytest.raises(ConfigFileError, match="kernel fallback belongs to a torch winner"):
        load_config_file(tmp_path / "bad.json")


@pytest.mark.parametrize("backend", ["triton", "torch"])
def test_bench_backend_option(tmp_path, backend):
    shapes = tmp_path / "s.yaml"
    shapes.write_text("dtypes: [fp16]\nshapes:\n  - {m: 32, n: 32, k: 32, layout: nt, bias: row}\n")
    db = str(tmp_path / "empty.sqlite")
    with TuningDB(db):
        pass
    result = CliRunner().invoke(app, ["bench", "--shapes", str(shapes), "--db", db, "--backend", backend,
                                      "--json", str(tmp_path / "b.json")])
    assert result.exit_code == 0, result.output
    doc = json.loads((tmp_path / "b.json").read_text())
    assert doc["backend_restriction"] == backend and doc["rows"][0]["backend"] == backend
