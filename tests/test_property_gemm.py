"""Property-based tests in Triton's interpreter: random problems, layouts, bias shapes, scales, both
kernel families and random configs, against a float64 reference under the suite's tolerance rule
(`shapes.assert_close`: error at most twice torch's own error on the same inputs, plus half an ulp).

Examples are derandomized (the same ones on every run, so CI is reproducible) and few: an interpreter
launch costs 0.05-0.5 s, so sizes are bounded by the work they make (tiles x K steps), not only by
the dimensions.
"""

from __future__ import annotations

import contextlib
import math
import threading
from collections.abc import Iterator

import pytest
import torch
from helpers.shapes import DTYPES, LAYOUTS, assert_close, make_bias, op_reference, operands, run_op, sk_plan
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from tritonblas import GemmConfig
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.config import config_supports
from tritonblas.launch import scratch
from tritonblas.problem import Problem

CPU = torch.device("cpu")
# Tiles x K steps an example may launch: keeps one example well under a second in the interpreter.
MAX_STEPS = 160
PROPERTY = settings(deadline=None, derandomize=True, database=None,
                    suppress_health_check=[HealthCheck.too_slow])
# Mostly small sizes (most bugs live at tile edges), sometimes up to 130 (several tiles per dim).
dims = st.one_of(st.integers(1, 40), st.integers(1, 130))
# beta/alpha: torch's defaults, exact scales, zeros (beta = 0 must ignore a NaN input), and any
# moderate float.
scales = st.one_of(st.sampled_from([1.0, 0.0, 0.5, -2.0]), st.floats(-3, 3, allow_nan=False, width=32))
# GemmConfig's on/off options besides the family (tma, flatten, ...), whatever they are now.
FLAGS = tuple(f for f, info in GemmConfig.model_fields.items() if info.annotation is bool and f != "streamk")
BIAS_KINDS = {"matmul": ["none"], "linear": ["none", "row", "expand_1d"],
              "addmm": ["scalar0d", "one", "row", "row2d", "col", "full", "full_t", "expand_row",
                        "expand_col", "expand_scalar"]}


def _steps(config: GemmConfig, m: int, n: int, k: int) -> int:
    tiles = math.ceil(m / config.block_m) * math.ceil(n / config.block_n)
    return tiles * max(1, math.ceil(k / config.block_k))


@st.composite
def gemm_configs(draw, m: int, n: int, k: int, streamk: bool) -> GemmConfig:
    """Any valid GemmConfig of the family with tiles that keep the example cheap; feasibility is the
    test's business (config_supports decides, and an infeasible one must be refused)."""
    bm, bn, bk = (draw(st.sampled_from([16, 32, 64])) for _ in range(3))
    while _steps(GemmConfig(block_m=bm, block_n=bn, block_k=bk), m, n, k) > MAX_STEPS and bk < 64:
        bk *= 2
    # every flag GemmConfig has (present and future) at random; Stream-K keeps the persistent-only
    # ones off, or nearly all its examples would be refusals
    flags = {f: draw(st.sampled_from([False, False, False, True])) for f in FLAGS}  # each on 1 in 4
    if streamk:
        flags.update(flatten=False)
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, group_m=draw(st.sampled_from([1, 2, 4, 8])),
                      num_warps=draw(st.sampled_from([1, 2, 4, 8])),
                      num_stages=draw(st.integers(1, 4)), streamk=streamk,
                      grid=draw(st.none() | st.integers(1, 24)), **flags)


@st.composite
def problems(draw, out: str | None) -> dict:
    op = draw(st.sampled_from(["matmul", "addmm", "linear"] if out is None else ["matmul", "addmm"]))
    m, n, k = draw(dims), draw(dims), draw(dims)
    family = draw(st.sampled_from(["heuristic", "persistent", "streamk"]))
    config = None if family == "heuristic" else draw(gemm_configs(m, n, k, family == "streamk"))
    if config is not None and _steps(config, m, n, k) > MAX_STEPS:
        # big blocks could not bring the work down: shrink the problem instead
        m, n = min(m, 2 * config.block_m), min(n, 2 * config.block_n)
    return dict(op=op, m=m, n=n, k=k, dtype=draw(st.sampled_from(sorted(DTYPES))),
                layout=draw(st.sampled_from(LAYOUTS)), bias=draw(st.sampled_from(BIAS_KINDS[op])),
                beta=draw(scales) if op == "addmm" else 1.0, alpha=draw(scales) if op == "addmm" else 1.0,
                config=config, enable_streamk=draw(st.sampled_from([None, False, True])) if config is None
                else None, seed=draw(st.integers(0, 2**16)), out=out)


SENTINEL = 777.0
# out=: none, a dense tensor, a transposed view, or a view with stride 2 along N inside a larger
# sentinel-filled buffer (a store past a tile edge would show up in the sentinel)
OUT_KINDS = (None, "dense", "transposed", "strided")


def _out_buffer(kind: str, m: int, n: int, dtype: torch.dtype) -> torch.Tensor:
    return torch.full((n, m) if kind == "transposed" else (m + 3, 2 * n + 5), SENTINEL, dtype=dtype)


def _out_view(kind: str, buf: torch.Tensor, m: int, n: int) -> torch.Tensor:
    if kind == "dense":
        return buf[:m, :n]  # rows of a wider buffer: row stride 2n + 5
    if kind == "transposed":
        return buf.t()
    return buf[1:m + 1, 2:2 + 2 * n:2]


def _feasible(config: GemmConfig, p: dict) -> list[bool]:
    """config_supports under each layout: how the op reads the operands' strides (a size-1 dim has
    any stride) is its business. A config every layout accepts must run; one none accepts (a rule
    that does not depend on the layout) must be refused."""
    return [config_supports(config, Problem(p["m"], p["n"], p["k"], p["dtype"], lay), INTERPRETER_DEVICE)
            is None for lay in ("nn", "nt", "tn", "tt")]


@pytest.mark.parametrize("out_kind", OUT_KINDS)
@settings(PROPERTY, max_examples=25)
@given(data=st.data())
def test_random_problems_match_float64(out_kind, data):
    p = data.draw(problems(out_kind), label="problem")
    dtype = DTYPES[p["dtype"]]
    a, b = operands(p["m"], p["n"], p["k"], dtype, p["layout"], seed=p["seed"])
    bias = make_bias(p["bias"], p["m"], p["n"], dtype, seed=p["seed"] + 1,
                     nan=p["beta"] == 0.0 and p["op"] == "addmm")
    kw = {"config": p["config"]} if p["config"] is not None else {"enable_streamk": p["enable_streamk"]}
    buf = out = None
    if p["out"] is not None:
        buf = _out_buffer(p["out"], p["m"], p["n"], dtype)
        kw["out"] = out = _out_view(p["out"], buf, p["m"], p["n"])
    before = [t.clone() for t in (a, b, bias) if t is not None]
    feasible = [True] if p["config"] is None else _feasible(p["config"], p)
    try:
        ours, theirs = run_op(p["op"], a, b, bias, p["beta"], p["alpha"], **kw)
    except ValueError as e:
        assert not all(feasible) and "not feasible" in str(e), e
        assert buf is None or bool((buf == SENTINEL).all()), "a refused call wrote to out"
        event("refused: infeasible config")
        return
    event(f"size {'<= 40' if max(p['m'], p['n'], p['k']) <= 40 else '41-130'}")
    event(f"ran {p['op']} {'heuristic' if p['config'] is None else 'SK' if p['config'].streamk else 'P'}")
    assert any(feasible), "an infeasible config ran"
    assert_close(ours, theirs, op_reference(p["op"], a, b, bias, p["beta"], p["alpha"]))
    if out is not None:
        assert ours is out
        inside = torch.zeros(buf.shape, dtype=torch.bool)
        _out_view(p["out"], inside, p["m"], p["n"]).fill_(True)
        assert bool((buf[~inside] == SENTINEL).all()), "a store landed outside out"
    after = [t for t in (a, b, bias) if t is not None]
    assert all(torch.equal(x, y) for x, y in zip(before, after, strict=True) if not x.isnan().any())


# --- Stream-K: determinism, and no program ever waits on another ---

def _sk_config(draw, m: int, n: int, k: int) -> GemmConfig:
    config = draw(gemm_configs(m, n, k, streamk=True))
    return config.model_copy(update={**dict.fromkeys(FLAGS, False), "grid": draw(st.integers(2, 24))})


@st.composite
def streamk_cases(draw) -> tuple:
    m, n, k = draw(st.integers(1, 64)), draw(st.integers(1, 64)), draw(st.integers(2, 130))
    config = _sk_config(draw, m, n, k)
    # four launches per example: keep each one small
    m, n = min(m, 2 * config.block_m), min(n, 2 * config.block_n)
    return m, n, k, config, draw(st.sampled_from(sorted(DTYPES))), draw(st.permutations(range(24)))


def _bits(t: torch.Tensor) -> torch.Tensor:
    return t.view(torch.int16 if t.element_size() == 2 else torch.int32)


@contextlib.contextmanager
def program_order(order: list[int]) -> Iterator[list[int]]:
    """Run the interpreter's programs in `order` (restricted to the launched ones) instead of 0, 1, ...:
    the interpreter runs one program at a time to completion, so a program that waited on another
    one still to come would never return. Yields the program ids in the order they ran."""
    from triton.runtime import interpreter

    builder = interpreter.interpreter_builder
    set_dim, set_idx = builder.set_grid_dim, builder.set_grid_idx
    state: dict = {"perm": []}
    ran: list[int] = []

    def dim(nx, ny, nz):
        state["perm"] = [p for p in order if p < nx] + list(range(len(order), nx))
        return set_dim(nx, ny, nz)

    builder.set_grid_dim = dim
    builder.set_grid_idx = lambda x, y, z: ran.append(state["perm"][x]) or set_idx(state["perm"][x], y, z)
    try:
        yield ran
    finally:
        del builder.set_grid_dim, builder.set_grid_idx


def _run_with_timeout(fn, timeout_s: float = 60.0):
    """fn() in a daemon thread: a hang fails the test instead of stopping the suite."""
    box: dict = {}
    thread = threading.Thread(target=lambda: box.update(out=fn()), daemon=True)
    thread.start()
    thread.join(timeout_s)
    assert not thread.is_alive(), f"launch did not finish in {timeout_s} s: a program waits on another"
    return box["out"]


@settings(PROPERTY, max_examples=25)
@given(streamk_cases(), st.integers(1, 40), st.integers(1, 40), st.integers(1, 100))
def test_streamk_is_bitwise_reproducible_in_any_program_order(case, m2, n2, k2):
    """Same bits on a rerun, after another launch reused (and dirtied) the workspace, and with the
    programs run in a random order one at a time: the last arriver, whoever it is, sums the partials in
    program order, and no program waits for another."""
    m, n, k, config, dtype, order = case
    plan = sk_plan(config, m, n, k)
    shared = plan.max_sharing
    event("no tile split" if shared < 2 else f"a tile split over {'3+' if shared >= 3 else 2} programs")
    a, b = operands(m, n, k, DTYPES[dtype], "nn", seed=m * n + k)
    import tritonblas

    first = tritonblas.matmul(a, b, config=config)
    assert_close(first, a @ b, op_reference("matmul", a, b, None))
    x, y = operands(m2, n2, k2, DTYPES[dtype], "nn", seed=1)
    tritonblas.matmul(x, y, config=config.model_copy(update={"grid": 24 - config.grid % 7}))
    again = tritonblas.matmul(a, b, config=config)
    with program_order(list(order)):
        shuffled = _run_with_timeout(lambda: tritonblas.matmul(a, b, config=config))
    assert torch.equal(_bits(again), _bits(first)) and torch.equal(_bits(shuffled), _bits(first))
    assert not scratch.workspace(CPU, 0, 0)[1].any()  # every tile counter back at zero


@pytest.mark.parametrize("order", ["reversed", "odd_first"])
def test_streamk_split_tile_finishes_whoever_arrives_last(order):
    """A tile shared by every program, its owners run last-first or interleaved."""
    from helpers.shapes import STREAMK_SPLITS

    import tritonblas

    _, (m, n, k), config, programs, *_ = next(s for s in STREAMK_SPLITS if s[0] == "tile_shared_by_seven")
    perm = list(range(programs))[::-1] if order == "reversed" else [1, 3, 5, 0, 2, 4, 6]
    a, b = operands(m, n, k, torch.float32, "nn", seed=3)
    first = tritonblas.matmul(a, b, config=config)
    with program_order(perm) as ran:
        shuffled = _run_with_timeout(lambda: tritonblas.matmul(a, b, config=config))
    assert ran == perm
    assert torch.equal(shuffled, first)
