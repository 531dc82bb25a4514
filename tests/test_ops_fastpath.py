"""The per-call cache of ops (a repeated call skips the checks it already passed): it is taken, it
computes what the checked path computes, and every input the checks refuse is still refused with the
same error once the cache holds a valid call of the same shapes."""

import pytest
import torch
import torch.nn.functional as F
from helpers.bad_inputs import CASES, TINY
from helpers.shapes import ERROR_SHAPE, record_launches

import tritonblas
from tritonblas.call import ops
from tritonblas.call import path as call_path
from tritonblas.call import run as call_run
from tritonblas.selection import dispatch

M, N, K = ERROR_SHAPE
f16 = torch.float16


def _t(*shape, dtype=f16):
    return torch.randn(*shape).to(dtype)


@pytest.fixture
def x():
    from types import SimpleNamespace

    return SimpleNamespace(a=_t(M, K), b=_t(K, N), bias=_t(N), out=torch.full((M, N), 7.0, dtype=f16),
                           w=_t(N, K))


def _warm(x) -> None:
    """Fill the cache with valid calls on tensors of the fixture's shapes, dtypes and devices."""
    a, b, bias, w = x.a.clone(), x.b.clone(), x.bias.clone(), x.w.clone()
    out = torch.empty(M, N, dtype=f16)
    for _ in range(2):
        tritonblas.matmul(a, b, out=out)
        tritonblas.matmul(a, b)
        tritonblas.addmm(bias, a, b, out=out)
        tritonblas.addmm(bias, a, b)
        tritonblas.linear(a, w, bias)
        tritonblas.linear(a, w)
        tritonblas.matmul(a, b, out=out, config=TINY)  # config= calls have plans too
        tritonblas.addmm(bias, a, b, config=TINY)
        tritonblas.linear(a, w, bias, config=TINY)


@pytest.mark.parametrize("call, exc, pattern", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_after_a_cached_valid_call(x, call, exc, pattern):
    _warm(x)
    before = {name: t.clone() for name, t in vars(x).items()}
    with pytest.raises(exc, match=pattern):
        call(x, x.out)
    for name, t in before.items():
        assert torch.equal(getattr(x, name), t), name


def test_repeated_calls_skip_the_checks_and_match_torch(x, monkeypatch):
    _warm(x)

    def refuse(*args, **kw):
        raise AssertionError("checked path taken on a cache hit")

    for module in (ops, call_path):  # the ops' own checks, the shared ones and the planning
        for name in ("check_operands", "check_out", "check_bias", "check_tensor", "prepare"):
            if hasattr(module, name):
                monkeypatch.setattr(module, name, refuse)
    a, b, bias, w = x.a, x.b, x.bias, x.w
    ref = (a.float() @ b.float()).to(f16)
    torch.testing.assert_close(tritonblas.matmul(a, b), ref, rtol=2e-3, atol=2e-3)
    assert tritonblas.matmul(a, b, out=x.out) is x.out
    torch.testing.assert_close(x.out, ref, rtol=2e-3, atol=2e-3)
    torch.testing.assert_close(tritonblas.addmm(bias, a, b, beta=0.5, alpha=2), torch.addmm(
        bias.float(), a.float(), b.float(), beta=0.5, alpha=2).to(f16), rtol=2e-3, atol=4e-3)
    torch.testing.assert_close(tritonblas.linear(a, w, bias), F.linear(a.float(), w.float(), bias.float()
                                                                     ).to(f16), rtol=2e-3, atol=4e-3)


def test_config_calls_are_planned_once_per_config(x, monkeypatch):
    # config= is part of the signature: a repeated call with the same config skips its feasibility check
    # (12.1 -> 3.8 us of host time a call on the CPU box, launch stubbed), another config is checked.
    first = tritonblas.matmul(x.a, x.b, config=TINY)
    checked = []
    real = dispatch.check_user_config
    monkeypatch.setattr(dispatch, "check_user_config", lambda config, *rest: (checked.append(config),
                                                                              real(config, *rest))[1])
    assert torch.equal(tritonblas.matmul(x.a, x.b, config=TINY), first)
    assert checked == []
    other = TINY.model_copy(update={"num_stages": TINY.num_stages + 1})
    assert torch.equal(tritonblas.matmul(x.a, x.b, config=other), first)
    assert checked == [other]
    assert len({plan.config for plan in call_path.plans.values()} & {TINY, other}) == 2


def test_beta_zero_ignores_input_on_a_hit(x):
    _warm(x)
    nan = torch.full((N,), float("nan"), dtype=f16)
    for _ in range(2):
        got = tritonblas.addmm(nan, x.a, x.b, beta=0)
        assert not got.isnan().any()


def test_linear_of_nd_input_keeps_its_shape(x):
    x3 = _t(2, 3, K)
    for _ in range(2):
        y = tritonblas.linear(x3, x.w, x.bias)
        assert y.shape == (2, 3, N)
        torch.testing.assert_close(y, F.linear(x3.float(), x.w.float(), x.bias.float()).to(f16),
                                   rtol=2e-3, atol=4e-3)


def test_out_aliasing_an_input_is_refused_after_a_hit():
    a = _t(M, M)
    buf = torch.zeros(2 * M, M, dtype=f16)
    tritonblas.matmul(a, a, out=buf[:M])
    tritonblas.matmul(buf[M:], a, out=buf[:M])  # same storage, disjoint: allowed
    before = buf.clone()
    with pytest.raises(ValueError, match="out overlaps a"):
        tritonblas.matmul(buf[:M], a, out=buf[:M])
    with pytest.raises(ValueError, match="out overlaps b"):
        tritonblas.matmul(a, buf[:M], out=buf[:M])
    assert torch.equal(buf, before)


def test_grad_is_honoured_after_a_hit(x):
    _warm(x)
    a = x.a.clone().requires_grad_()
    with pytest.raises(RuntimeError, match="automatic differentiation"):
        tritonblas.matmul(a, x.b, out=x.out)
    y = tritonblas.matmul(a, x.b)
    assert y.grad_fn is not None
    with torch.no_grad():
        assert tritonblas.matmul(a, x.b, out=x.out) is x.out


def test_cpu_tensors_need_the_interpreter_after_a_hit(x, monkeypatch):
    _warm(x)
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    for call in (lambda: tritonblas.matmul(x.a, x.b, out=x.out), lambda: tritonblas.linear(x.a, x.w)):
        with pytest.raises(RuntimeError, match="TRITON_INTERPRET"):
            call()


def test_sparse_operand_with_the_strides_of_a_cached_expanded_one_is_refused():
    a = torch.ones(1, 1, dtype=torch.float32).expand(M, K)  # strides (0, 0), as a sparse COO tensor's
    b = torch.randn(K, N)
    tritonblas.matmul(a, b)
    tritonblas.matmul(a, b)
    sparse = torch.randn(M, K).to_sparse()
    assert sparse.stride() == a.stride()
    with pytest.raises(TypeError, match="a must be a dense"):
        tritonblas.matmul(sparse, b)


def test_options_the_key_cannot_hold_take_the_checks(x):
    _warm(x)
    with pytest.raises(TypeError, match="enable_streamk"):
        tritonblas.matmul(x.a, x.b, enable_streamk=1)
    with pytest.raises(TypeError, match="beta must be a real number"):
        tritonblas.addmm(x.bias, x.a, x.b, beta=True)


def test_tf32_flag_is_read_on_every_hit(monkeypatch):
    a, b = torch.randn(M, K), torch.randn(K, N)
    tritonblas.matmul(a, b)
    launches = record_launches(monkeypatch)
    old = torch.backends.cuda.matmul.allow_tf32
    try:
        for flag in (True, False):
            torch.backends.cuda.matmul.allow_tf32 = flag
            tritonblas.matmul(a, b)
            assert launches[-1].precision == ("tf32" if flag else "ieee")
    finally:
        torch.backends.cuda.matmul.allow_tf32 = old


def test_clearing_dispatch_drops_the_cached_configs(x):
    _warm(x)
    assert call_path.plans
    dispatch.clear_cache()
    assert not call_path.plans


def test_compile_after_eager_hits(x):
    _warm(x)
    torch._dynamo.reset()
    try:
        f = torch.compile(lambda a, b, out: tritonblas.matmul(a, b, out=out) + tritonblas.linear(a, x.w),
                          fullgraph=True, backend="eager")
        got = f(x.a, x.b, x.out)
        torch.testing.assert_close(got, (x.a.float() @ x.b.float() + x.a.float() @ x.w.float().t()).to(f16),
                                   rtol=2e-3, atol=4e-3)
    finally:
        torch._dynamo.reset()


def test_plans_hold_the_dispatch_key_as_a_problem(x):
    from tritonblas.problem import Problem

    dispatch.clear_cache()
    tritonblas.addmm(x.bias, x.a, x.b)
    (plan,) = call_path.plans.values()
    assert isinstance(plan, call_path.Plan) and plan.problem == Problem(M, N, K, "fp16", "nn", "row")
    assert plan.config == dispatch.select(M, N, K, "fp16", bias="row").config


SMALL = tritonblas.GemmConfig(block_m=16, block_n=16, block_k=16)
OTHER = tritonblas.GemmConfig(block_m=32, block_n=32, block_k=16)


@pytest.fixture
def switchable_heuristic(tmp_path, monkeypatch):
    """Dispatch with no DB and no shipped file, and a heuristic layer answering state["config"]; a call
    can be made to wait inside it (state["hold"]) until the test lets it go."""
    import threading

    shipped = tmp_path / "configs"
    shipped.mkdir()
    dispatch.set_shipped_dir(shipped)
    state = {"config": SMALL, "hold": None, "selecting": threading.Event(), "go": threading.Event()}

    def layer(problem, device, enable_streamk, backend=None):
        config = state["config"]
        if state["hold"] is not None and state["hold"] == problem.m:
            state["hold"] = None
            state["selecting"].set()
            assert state["go"].wait(30)
        return dispatch.Selection(config, "heuristic", 0.0, False, problem, device)

    monkeypatch.setattr(dispatch, "_from_heuristic", layer)
    with dispatch.using_database(False):
        yield state
    dispatch.set_shipped_dir(None)


@pytest.mark.parametrize("where", ["plans", "selections"])
def test_a_selection_dropped_while_a_call_selects_is_not_stored(switchable_heuristic, monkeypatch, where):
    """Another thread clears the selections (here: the database switched and the caches dropped) while a
    call is between selecting and storing its first plan: the older selection runs for that call, but
    is stored neither as a plan nor as dispatch's selection; the next call selects again."""
    import threading

    state = switchable_heuristic
    launches = record_launches(monkeypatch)
    a, b = _t(M, K), _t(K, N)
    state["hold"] = M
    first = threading.Thread(target=lambda: tritonblas.matmul(a, b, backend="triton") if where == "plans"
                             else dispatch.select(M, N, K, "fp16"))
    first.start()
    assert state["selecting"].wait(30)
    state["config"] = OTHER
    dispatch.clear_cache()
    state["go"].set()
    first.join(30)
    assert not first.is_alive()
    if where == "plans":
        assert [c.config for c in launches] == [SMALL]
    assert not call_path.plans and not dispatch._selections
    tritonblas.matmul(a, b, backend="triton")
    assert launches[-1].config == OTHER
    assert dispatch.select(M, N, K, "fp16").config == OTHER


def test_a_compile_failure_drops_the_stored_plan(switchable_heuristic, monkeypatch):
    """A plan is stored before its launch; the launch's compile failure drops it with the selections."""
    from triton.runtime.errors import OutOfResources

    launches = record_launches(monkeypatch)
    real = call_run.launch_gemm

    def refuse_small(a, b, c, bias, alpha, beta, config, sm_count, precision):
        if config == SMALL:
            switchable_heuristic["config"] = OTHER  # the next ranked candidate
            raise OutOfResources(300000, 232448, "shared memory")
        return real(a, b, c, bias, alpha, beta, config, sm_count, precision)

    monkeypatch.setattr(call_run, "launch_gemm", refuse_small)
    a, b = _t(M, K), _t(K, N)
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        tritonblas.matmul(a, b, backend="triton")
    assert not call_path.plans
    tritonblas.matmul(a, b, backend="triton")
    (plan,) = call_path.plans.values()
    assert plan.config == OTHER
    assert not launches or all(c.config == OTHER for c in launches)


# A hit launches the plan's prepared launch on the op's own tensors (a linear's weight and bias as they
# are): it must be the launch launch_gemm builds for the GEMM's 2-D operands, on the same pointers.
PREPARED = {
    "matmul": lambda a, b, w, bias, out: tritonblas.matmul(a, b, backend="triton"),
    "matmul out=": lambda a, b, w, bias, out: tritonblas.matmul(a, b, out=out, backend="triton"),
    "addmm": lambda a, b, w, bias, out: tritonblas.addmm(bias, a, b, beta=0.5, backend="triton"),
    "addmm beta=0": lambda a, b, w, bias, out: tritonblas.addmm(bias, a, b, beta=0, backend="triton"),
    "linear": lambda a, b, w, bias, out: tritonblas.linear(a, w, bias, backend="triton"),
    "linear 3-D": lambda a, b, w, bias, out: tritonblas.linear(a.view(1, M, K), w, bias, backend="triton"),
}


def _gemm_of(case, x):
    """(a, b, bias as the kernels read it, beta) of the GEMM that PREPARED[case] runs."""
    full = torch.broadcast_to(x.bias, (M, N))
    return {"matmul": (x.a, x.b, None), "matmul out=": (x.a, x.b, None), "addmm": (x.a, x.b, full),
            "addmm beta=0": (x.a, x.b, None), "linear": (x.a, x.w.t(), full),
            "linear 3-D": (x.a, x.w.t(), full)}[case]


@pytest.mark.parametrize("case", PREPARED)
def test_a_hit_runs_the_launch_launch_gemm_would_build(case, x, monkeypatch):
    from tritonblas.launch import gemm as launch

    launched = []
    monkeypatch.setattr(launch, "launch_plan", lambda plan, tensors, floats: launched.append((plan, tensors)))
    for _ in range(2):
        PREPARED[case](x.a, x.b, x.w, x.bias, x.out)
    (hit, hit_tensors), n = launched[-1], len(launched)
    a, b, bias2d = _gemm_of(case, x)
    c = x.out if case == "matmul out=" else torch.empty(M, N, dtype=f16)
    (plan,) = [p for p in call_path.plans.values() if p.launch is hit]  # the hit took a prepared launch
    launch.launch_gemm(a, b, c, bias2d, 1.0, 0.5, plan.config, plan.device.sm_count, "tf32")
    built, built_tensors = launched[n]
    assert (hit.kernel, hit.progs, hit.ints, hit.constexprs, hit.num_warps, hit.num_stages) == \
        (built.kernel, built.progs, built.ints, built.constexprs, built.num_warps, built.num_stages)
    same = [t.data_ptr() for t in hit_tensors], [t.data_ptr() for t in built_tensors]
    assert same[0][:2] == same[1][:2]  # A and B (the output and the bias: this call's own)
    assert (hit_tensors[3] is hit_tensors[2]) == (built_tensors[3] is built_tensors[2])  # a bias or not


def test_linear_of_an_nd_input_whose_reshape_copies(x):
    x3 = _t(2, K, 3).transpose(1, 2)  # (2, 3, K), K not innermost: reshape(6, K) copies
    for _ in range(2):
        torch.testing.assert_close(tritonblas.linear(x3, x.w, x.bias), F.linear(
            x3.float(), x.w.float(), x.bias.float()).to(f16), rtol=2e-3, atol=4e-3)


@pytest.mark.parametrize("op", ["matmul", "linear"])
def test_a_compile_failure_of_a_prepared_launch_falls_back(op, switchable_heuristic, monkeypatch):
    """The launch a hit runs (prepared with the plan) fails to compile as launch_gemm's would: the
    config is reported, the next selection runs, the plan is dropped."""
    from triton.runtime.errors import OutOfResources

    from tritonblas.launch import gemm as launch

    real, blocks = launch.launch_plan, []

    def refuse_small(plan, tensors, floats):
        blocks.append(plan.constexprs["BLOCK_M"])
        if plan.constexprs["BLOCK_M"] == SMALL.block_m:
            switchable_heuristic["config"] = OTHER  # the next ranked candidate
            raise OutOfResources(300000, 232448, "shared memory")
        return real(plan, tensors, floats)

    monkeypatch.setattr(launch, "launch_plan", refuse_small)
    a, b = _t(M, K), _t(K, N)
    call = {"matmul": lambda: tritonblas.matmul(a, b, backend="triton"),
            "linear": lambda: tritonblas.linear(a, b.t(), backend="triton")}[op]
    with pytest.warns(RuntimeWarning, match="could not be compiled"):
        got = call()
    assert blocks == [SMALL.block_m, OTHER.block_m] and not call_path.plans
    torch.testing.assert_close(got, (a.float() @ b.float()).to(f16), rtol=2e-3, atol=2e-3)
    call()
    assert blocks[-1] == OTHER.block_m


@pytest.mark.parametrize("layout", ["weight row-major", "weight column-major"])
def test_a_hit_builds_host_descriptors_as_launch_gemm_does(layout, monkeypatch):
    """Host-built TMA descriptors of a prepared launch: the geometry its plan keeps, on the op's own
    tensors (the weight itself as B's base) = what launch_gemm builds for the GEMM's views."""
    from tritonblas.launch import gemm as launch

    config = tritonblas.GemmConfig(block_m=16, block_n=16, block_k=16, tma=True, host_descriptors=True)
    x, w = _t(32, 48), _t(64, 48)
    if layout == "weight column-major":
        w = w.t().contiguous().t()
    ref = F.linear(x.float(), w.float()).to(f16)
    for _ in range(2):
        torch.testing.assert_close(tritonblas.linear(x, w, config=config), ref, rtol=2e-3, atol=4e-3)
    launched = []
    monkeypatch.setattr(launch, "launch_plan", lambda plan, tensors, floats: launched.append((plan, floats)))
    tritonblas.linear(x, w, config=config)
    launch.launch_gemm(x, w.t(), torch.empty(32, 64, dtype=f16), None, 1.0, 0.0, config, 4, "tf32")
    (prepared, hit), (_, built) = launched
    assert prepared.descs is not None  # the hit took the prepared launch
    for ours, theirs in zip(hit[2:4], built[2:4], strict=True):  # A's, then B's (then the scales: None)
        assert (ours.shape, ours.strides, ours.block_shape, ours.base.data_ptr()) == \
            (theirs.shape, theirs.strides, theirs.block_shape, theirs.base.data_ptr())


def _misaligned(t: torch.Tensor) -> torch.Tensor:
    """t's values in a view whose data pointer is 2 bytes past a 16-byte boundary, same shape and strides."""
    flat = torch.empty(t.numel() + 1, dtype=t.dtype)[1:]
    return flat.view(t.shape).copy_(t)


@pytest.mark.parametrize("call", ["matmul", "matmul out=", "addmm bias", "linear 3-D"])
def test_a_hit_with_a_pointer_off_16_bytes_runs_the_views_launch(x, call, monkeypatch):
    """A plan made on aligned tensors, hit by a call of the same shapes whose pointer is not 16-byte
    aligned: its prepared launch declines (nothing launched) and the views' launch fills the output the
    call already made, right."""
    calls = {"matmul": lambda a, b, bias, o: tritonblas.matmul(a, b, backend="triton"),
             "matmul out=": lambda a, b, bias, o: tritonblas.matmul(a, b, out=o, backend="triton"),
             "addmm bias": lambda a, b, bias, o: tritonblas.addmm(bias, a, b, backend="triton"),
             "linear 3-D": lambda a, b, bias, o: tritonblas.linear(a.reshape(1, M, K), b.t(), bias,
                                                                   backend="triton")}
    refs = {"matmul": lambda a, b, bias: a.float() @ b.float(),
            "matmul out=": lambda a, b, bias: a.float() @ b.float(),
            "addmm bias": lambda a, b, bias: a.float() @ b.float() + bias.float(),
            "linear 3-D": lambda a, b, bias: (a.float() @ b.float() + bias.float()).reshape(1, M, N)}
    declined = []
    real = call_run.launch_prepared

    def watched(*args):
        launched = real(*args)
        declined.append(not launched)
        return launched

    monkeypatch.setattr(call_run, "launch_prepared", watched)
    fn, ref = calls[call], refs[call]
    out = torch.empty(M, N, dtype=f16)
    for _ in range(2):  # plan, then hit
        fn(x.a, x.b, x.bias, out)
    assert declined and not any(declined), "aligned calls launch prepared"
    a, b, bias = _misaligned(x.a), x.b, _misaligned(x.bias)
    out2 = _misaligned(torch.zeros(M, N, dtype=f16))
    got = fn(a, b, bias, out2)
    assert declined[-1] is True
    if call == "matmul out=":
        assert got is out2
    torch.testing.assert_close(got.float(), ref(x.a, x.b, x.bias), rtol=2e-3, atol=2e-3)
