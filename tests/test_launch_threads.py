"""Scratch ownership under host threads (issue 19), with the kernel launches stubbed.

Triton's interpreter is not thread-safe, so here every launch is replaced by a stub that does the
kernel's work in torch (the pad copy, the GEMM in float64) and checks what the real kernels rely on:
the scratch a call holds (padded A and B, Stream-K partials and counters) is its own while it is in
flight. Barriers put all eight threads' calls in flight at once, each past its pad copies and inside its
GEMM launch, as two host threads on one stream interleave on a GPU. On the old launch.py (one padded
buffer and one workspace per device and stream, reused by every call) the shared-stream cases fail: every
thread's GEMM read the last thread's copy. The GPU suite (tests/test_gpu.py) runs the real kernels.
"""

import dataclasses
import threading
from concurrent.futures import ThreadPoolExecutor

import pytest
import torch
from helpers.shapes import reference, rel_error

import tritonblas
from tritonblas import GemmConfig
from tritonblas.launch import gemm as launch
from tritonblas.launch import scratch

THREADS = 8
CALLS = 6
CPU = torch.device("cpu")
# fp32 13x17x9: A's leading dim 9 and B's 17 are not 16-byte multiples, so aligned_copy copies both.
SHAPE = (13, 17, 9)
_BASE = dict(block_m=16, block_n=16, block_k=16, num_warps=4, num_stages=2)
CONFIGS = {
    "copy_streamk": GemmConfig(**_BASE, streamk=True, grid=3, aligned_copy=True),
    "copy_persistent": GemmConfig(**_BASE, grid=2, aligned_copy=True),
    "streamk": GemmConfig(**_BASE, streamk=True, grid=3),
}


class StubKernels:
    """Stands in for launch.launch_plan: the pad copy copies, the GEMM computes alpha * a @ b + beta * bias
    in float64. With `barrier`, every GEMM launch waits for all threads' launches twice: once holding its
    scratch with its copies done (then it fills the Stream-K partials and counters with a mark of its own),
    and once after every thread has done so (then it checks its marks survived and leaves the counters
    at zero, as the kernel's last arriver does). What went wrong is collected in `problems`, never
    raised in a launch, so that no thread leaves the others waiting at a barrier."""

    def __init__(self, barrier: threading.Barrier | None = None) -> None:
        self.barrier = barrier
        self.problems: list[str] = []
        self.held: list[tuple[int, int, frozenset[int]]] = []  # (thread, call, scratch pointers)
        self.calls = threading.local()
        self.lock = threading.Lock()

    def __call__(self, plan, tensors, floats) -> None:
        if len(tensors) == 2:  # the pad copy: (source, padded buffer)
            src, buf = tensors
            buf[:, :src.shape[1]].copy_(src)
            return
        a, b, c, bias = tensors[:4]
        call = getattr(self.calls, "n", 0)
        self.calls.n = call + 1
        me = threading.get_ident()
        scratch = [a, b, *tensors[4:]]  # A and B: padded copies on the copy path, else the caller's
        with self.lock:
            self.held.append((me, call, frozenset(t.untyped_storage().data_ptr() for t in scratch)))
        ws = cnt = None
        mark = float(len(self.held))
        if plan.workspace is not None:
            ws, cnt = tensors[4], tensors[5]
            partials, counters = plan.workspace
            if cnt[:counters].any():
                self.problems.append(f"call {call}: counters handed over not zero")
        if self.barrier is not None:
            self.barrier.wait()  # every thread's call in flight, its scratch taken and its copies done
        if ws is not None:
            ws[:partials].fill_(mark)
            cnt[:counters].fill_(int(mark))
        if self.barrier is not None:
            self.barrier.wait()
        if ws is not None:
            if not (ws[:partials] == mark).all() or not (cnt[:counters] == int(mark)).all():
                self.problems.append(f"call {call}: another call wrote this one's Stream-K workspace")
            cnt.zero_()
        alpha, beta = floats[:2]  # (then the host-built descriptors, None here)
        out = alpha * (a.double() @ b.double())
        if plan.constexprs["HAS_BIAS"]:
            out = out + beta * bias.double()
        c.copy_(out)


@pytest.fixture
def stub(monkeypatch):
    def install(barrier: threading.Barrier | None = None) -> StubKernels:
        kernels = StubKernels(barrier)
        monkeypatch.setattr(launch, "launch_plan", kernels)
        return kernels

    return install


def _operands(seed: int, shape=SHAPE) -> tuple[torch.Tensor, torch.Tensor]:
    m, n, k = shape
    g = torch.Generator().manual_seed(seed)
    return torch.randn(m, k, generator=g), torch.randn(k, n, generator=g)


def _hammer(config: GemmConfig, calls: int = CALLS) -> list[tuple[int, float]]:
    """THREADS threads x `calls` matmuls, each on its own inputs: (seed, relative error) per call."""
    def work(thread: int) -> list[tuple[int, float]]:
        errors = []
        for i in range(calls):
            seed = 1000 * thread + i
            a, b = _operands(seed)
            errors.append((seed, rel_error(tritonblas.matmul(a, b, config=config), reference(a, b))))
        return errors

    with ThreadPoolExecutor(THREADS) as pool:
        return [e for f in [pool.submit(work, t) for t in range(THREADS)] for e in f.result()]


@pytest.mark.parametrize("streams", ["one_stream", "own_streams"])
@pytest.mark.parametrize("path", list(CONFIGS))
def test_threads_in_flight_at_once_never_share_scratch(path, streams, stub, monkeypatch):
    if streams == "own_streams":  # as one CUDA stream per thread: the stream id is the thread's
        monkeypatch.setattr(scratch, "current_stream", lambda device: threading.get_ident())
    kernels = stub(threading.Barrier(THREADS, timeout=60))
    errors = _hammer(CONFIGS[path])
    wrong = [(seed, round(err, 2)) for seed, err in errors if err > 1e-6]
    assert not wrong, f"{len(wrong)} of {len(errors)} calls wrong (seed, relative error): {wrong[:4]}"
    assert not kernels.problems, f"{len(kernels.problems)} problems: {kernels.problems[:2]}"
    # The barrier put each thread's i-th call in flight together: no two of them held one buffer.
    for call in range(CALLS):
        held = [ptrs for _, c, ptrs in kernels.held if c == call]
        assert len(held) == THREADS
        assert len(frozenset().union(*held)) == sum(map(len, held)), f"call {call}: scratch shared"


def _copy_streamk_call(kernels: StubKernels, seed: int = 0) -> frozenset[int]:
    """One checked matmul down the copy + Stream-K path: the scratch pointers its GEMM launch held."""
    a, b = _operands(seed)
    assert rel_error(tritonblas.matmul(a, b, config=CONFIGS["copy_streamk"]), reference(a, b)) < 1e-6
    return kernels.held[-1][2]


def test_scratch_is_reused_call_after_call_and_counters_are_zero(stub):
    # No allocation per call on one thread (the host cost the kept scratch exists for), and counters
    # the previous launch left at zero.
    kernels = stub()
    assert len({_copy_streamk_call(kernels, seed) for seed in range(3)}) == 1 and not kernels.problems


def test_after_threads_the_pool_keeps_one_set_per_call_that_was_in_flight(stub):
    scratch.free_lists.clear()
    stub(threading.Barrier(THREADS, timeout=60))
    assert all(err < 1e-6 for _, err in _hammer(CONFIGS["copy_streamk"], calls=3))
    kept = {key[0]: len(free) for key, free in scratch.free_lists.items() if key[-1] == 0}
    assert kept == {0: THREADS, 1: THREADS, "streamk": THREADS}, kept


def test_a_graph_capture_allocates_its_own_and_leaves_the_pool_alone(stub, monkeypatch):
    # While the stream is captured, scratch comes from the graph's private pool (fresh allocations)
    # and nothing is taken from or given to the kept buffers: a replay must not write eager memory.
    kernels = stub()
    eager = _copy_streamk_call(kernels)
    pool = {key: list(free) for key, free in scratch.free_lists.items()}
    stream = scratch.current_stream
    # as while torch.cuda.is_current_stream_capturing():
    monkeypatch.setattr(scratch, "current_stream", lambda device: None)
    assert not _copy_streamk_call(kernels) & eager
    assert {key: list(free) for key, free in scratch.free_lists.items()} == pool
    monkeypatch.setattr(scratch, "current_stream", stream)
    assert _copy_streamk_call(kernels) == eager  # the eager calls' buffers, as before the capture


def test_the_custom_ops_body_pools_no_scratch(stub):
    """What compiled code runs (tritonblas::gemm) allocates its scratch per call: a CUDA graph's warm-up
    (torch.compile, mode="reduce-overhead") allocates from the graph's pool, and a buffer kept from
    there is refused by cudagraph trees."""
    from tritonblas.call import core_op

    stub()
    a, b = _operands(0)
    scratch.free_lists.clear()
    core_op.gemm(a, b, None, 0.0, 1.0, -1, core_op.config_to_list(CONFIGS["copy_streamk"]))
    assert not any(scratch.free_lists.values())
    tritonblas.matmul(a, b, config=CONFIGS["copy_streamk"])  # an eager call pools, as before
    assert any(scratch.free_lists.values())


def test_scratch_is_dropped_when_a_launch_fails(stub, monkeypatch):
    # A launch that raised may have left its scratch dirty (counters mid-fix-up: issue 33), so the call
    # drops it instead of giving it back: the next call takes fresh scratch, which the pool then keeps.
    kernels = stub()
    first = _copy_streamk_call(kernels)
    failed: list[torch.Tensor] = []  # kept alive, so that no later buffer can take their addresses

    def fail(plan, tensors, floats):
        if len(tensors) > 2:
            failed.extend((*tensors[:2], *tensors[4:]))  # padded A and B, partials and counters
            raise RuntimeError("launch failed")
        kernels(plan, tensors, floats)

    monkeypatch.setattr(launch, "launch_plan", fail)
    with pytest.raises(RuntimeError, match="launch failed"):
        tritonblas.matmul(*_operands(1), config=CONFIGS["copy_streamk"])
    monkeypatch.setattr(launch, "launch_plan", kernels)
    assert frozenset(t.untyped_storage().data_ptr() for t in failed) == first  # it had taken the pool's
    after = _copy_streamk_call(kernels)
    assert not after & first
    assert _copy_streamk_call(kernels) == after


def _workspace_on(stream: int, floats: int = 40, counters: int = 2) -> tuple[torch.Tensor, torch.Tensor]:
    """A Stream-K workspace taken on `stream` and given back, as one call would."""
    held: list = []
    pair = scratch.workspace(CPU, floats, counters, held, stream)
    scratch.give(held)
    return pair


def test_pool_dropped_at_the_cap_starts_over(monkeypatch):
    scratch.free_lists.clear()
    monkeypatch.setattr(scratch, "_allocated", [0, 0])
    monkeypatch.setattr(scratch, "CAP_BYTES", 64 * 4)
    held: list = []
    ws, cnt = scratch.workspace(CPU, 40, 2, held, 0)  # 168 bytes, held by a call on stream 0
    kept = _workspace_on(1)  # 168 more on stream 1: over the cap, the pool starts over with this one
    scratch.give(held)  # stream 0's pair, held through the drop, goes back to a dropped list
    assert _workspace_on(1) == kept  # the newest is kept and reused
    assert _workspace_on(0)[0] is not ws  # the dropped one is not
    # One buffer over the cap is still kept, as the padded buffers were before.
    monkeypatch.setattr(scratch, "CAP_BYTES", 64)
    big = _workspace_on(2, floats=100)
    assert _workspace_on(2, floats=100) == big


def test_plan_cache_under_threads_with_clears_returns_the_plan_of_its_key(monkeypatch):
    # _cached_plan is a get, then (on a miss) clear-at-cap and set: each one step under the GIL, and a
    # plan is built whole before it is stored, so a thread sees its key's plan or builds it again.
    monkeypatch.setattr(launch, "_PLANS_CAP", 3)
    monkeypatch.setattr(launch, "plans", {})

    def work(thread: int) -> list[bool]:
        return [launch._cached_plan(("k", i % 7), lambda i=i: launch.Plan(
            None, i % 7, (), {}, 4, 2, None)).progs == i % 7 for i in range(thread, thread + 400)]

    with ThreadPoolExecutor(THREADS) as pool:
        assert all(all(f.result()) for f in [pool.submit(work, t) for t in range(THREADS)])


def test_a_plan_is_frozen_and_its_launch_state_starts_empty():
    # One plan is shared by every thread through the cache: its description cannot change under them,
    # and only its state is written, at its first launch.
    a, b, c = torch.randn(16, 32), torch.randn(32, 16), torch.empty(16, 16)
    plan = launch.make_plan(a, b, c, None, GemmConfig(**_BASE), 4, "ieee")
    for name, value in (("progs", 2), ("descs", ()), ("copies", None), ("state", None)):
        with pytest.raises(dataclasses.FrozenInstanceError):
            setattr(plan, name, value)
    assert (plan.state.compiled, plan.state.constexpr_args, plan.state.direct) == (None, (), None)
    plan.state.compiled = object()
    described = dataclasses.replace(plan, descs=((1,), (1,)))  # a new plan: its own, empty state
    assert described.descs == ((1,), (1,)) and described.state.compiled is None
