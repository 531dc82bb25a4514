"""The one place that maps a GemmConfig to kernel arguments and a grid, and launches it.

Kernels (and so triton) are imported on first launch, not when `tritonblas` is imported.
"""

from __future__ import annotations

import functools
import threading
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

import torch

from .arith import cdiv
from .config import GemmConfig, aligned_leading_dim


@functools.cache
def _kernels():
    from .kernels.copy import pad_copy_kernel
    from .kernels.persistent import persistent_gemm_kernel
    from .kernels.streamk import streamk_gemm_kernel

    return persistent_gemm_kernel, streamk_gemm_kernel, pad_copy_kernel


@functools.cache
def prefetch_compile_key() -> None:
    """Start, once per process, a thread that loads (or computes and stores) triton's compile-cache key
    (tritonblas.compile_key): it runs while the calling thread selects a config and imports the
    kernels, and the first launch waits for it instead of hashing triton's files a second time."""
    threading.Thread(target=_install_compile_key, name="tritonblas-triton-key", daemon=True).start()


def _install_compile_key() -> None:
    try:
        from . import compile_key

        compile_key.install()
    except Exception:  # noqa: BLE001 (only a head start: triton computes its key itself if this failed)
        pass


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # Called inside the launch, with the tensors' device current (see _launch).
    return torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())


@functools.cache
def _allocator_var():
    from triton.runtime import _allocation

    return _allocation._allocator, _allocation._NULL_ALLOCATOR


def _ensure_allocator() -> None:
    """Device-side tensor descriptors need global scratch, which triton asks its allocator for at every
    launch. The allocator is a ContextVar: set in one thread, unset in the next. So it is checked at
    each TMA launch, not once per plan: a plan built in the tuner's compile threads (or a user's
    thread) and launched from another failed with "no allocator was set" (311 TMA candidates lost in
    the first two-GPU tuning run)."""
    var, null = _allocator_var()
    if var.get() is null:
        import triton

        triton.set_allocator(_descriptor_scratch)


def is_out_of_resources(exc: BaseException) -> bool:
    """Whether triton refused to compile a config for the device (shared memory or registers)."""
    return any(cls.__name__ == "OutOfResources" for cls in type(exc).__mro__)


def _is_col_major(t: torch.Tensor) -> bool:
    return t.stride(1) != 1 and t.stride(0) == 1


def _pow2_divisor(x: int) -> int:
    """The largest power of two, at most 16, that divides x."""
    div = 16
    while div > 1 and x % div:
        div //= 2
    return div


def _vector_divisor(t: torch.Tensor, wrapped_dim: int) -> int:
    """The kernel's A_DIV/B_DIV: a power of two dividing the leading stride and, when the contiguous axis
    is the one the kernel wraps at the edge (M of A: dim 0, N of B: dim 1), that axis' size too."""
    col = _is_col_major(t)
    div = _pow2_divisor(t.stride(1) if col else t.stride(0))
    if (0 if col else 1) == wrapped_dim:
        div = min(div, _pow2_divisor(t.shape[wrapped_dim]))
    return div


def _tma_ready(t: torch.Tensor) -> tuple[bool, bool]:
    """(usable by TMA, column-major): one unit stride, 16-byte aligned base and leading stride."""
    col = _is_col_major(t)
    s0, s1 = t.stride()
    lead, unit = (s1, s0) if col else (s0, s1)
    ok = unit == 1 and (lead * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
    return ok, col


# Scratch: device memory a launch needs besides the caller's tensors, namely the padded copies of
# misaligned operands (aligned_copy configs) and the Stream-K partials and tile counters.
#
# It is kept between calls: allocating the padded buffers per call cost host time that the 127x4097x4095
# path, bound by its three launches, could not hide (73-100 us in a 44-problem bench, 50 us alone;
# tritonblas bench, H200, 2026-11-30). Kept scratch was once one buffer per (device, stream), reused by
# every call "in stream order", but stream order only orders one host thread's launches: with two threads
# on one stream, A's copy, B's copy into the same buffer, then A's GEMM read B's data (70 wrong results
# of 160 calls, 8 threads on the default stream, 127x4097x4095, H200, 2026-11-30; issue 19).
#
# So a buffer is owned by one call at a time. A call takes its scratch out of _scratch_free (by device
# and stream; a padded buffer also by operand slot, shape and dtype), enqueues all its kernels, and only
# then gives it back (launch_gemm's finally). A buffer taken is never handed to another call until given
# back, and a later call on the same stream that takes it enqueues its kernels after the giving call's
# (the give happens after those launches returned), so on the GPU they run in that order too. Two
# streams never share: the key holds the stream. Stream-K counters are left at zero by every launch (the
# last arriver resets its tile), so a counter buffer given back is zero for the next user on its stream;
# a fresh one is zeroed. Dropping a buffer (growth, the cap) hands it to torch's caching allocator, which
# reuses memory freed on a stream only for work later on that stream: every buffer here is allocated
# and used on its key's one.
#
# Take and give are deque.pop and deque.append, which Python documents as thread-safe (each element is
# popped by exactly one caller), plus a dict.get/setdefault on keys of built-in types at take (atomic in
# CPython; a list replaced by a drop at the cap at worst drops the buffers given back to it). A lock
# around them cost 0.45 us more per buffer (3 buffers taken and given: 1.05 -> 2.42 us, timeit, 2-core
# CPU); the lock is kept for the cap's bookkeeping on the allocation path.
#
# While the current stream is captured into a CUDA graph, scratch is allocated per call and never pooled:
# allocations during capture come from the graph's private memory pool, which the graph owns, so a replay
# touches only its own memory. A pooled buffer captured into a graph would be written by every replay,
# whenever it runs, while eager calls use the same buffer.
#
# Host cost before/after, every kernel launch stubbed: docs/reliability.md, "Threads, streams and CUDA
# graphs" (tests/scratch_overhead.py).
_scratch_free: dict[tuple, deque] = {}  # key -> buffers no call holds, the last given back last
_scratch_lock = threading.Lock()  # the allocation count below, and dropping the pool at the cap
_scratch_allocated = [0, 0]  # bytes, buffers allocated into the pool since it was last dropped
# The pool is dropped (and started over) once this much was allocated into it, as the padded buffers
# were before: a process cycling through many shapes does not keep every one's buffers.
_SCRATCH_CAP_BYTES = 1 << 31
_SCRATCH_CAP_BUFFERS = 4096


def _scratch_take(key: tuple) -> tuple[deque, object | None]:
    """(the free list of `key`, a buffer from it now the caller's alone or None when none is free). The
    buffer goes back to that list: no second lookup when it is given back."""
    free = _scratch_free.get(key)
    if free is None:
        free = _scratch_free.setdefault(key, deque())
    try:
        return free, free.pop()
    except IndexError:  # none free (another call may have taken the last one since)
        return free, None


def _scratch_new(key: tuple, free: deque, nbytes: int) -> None:
    """Count a buffer about to be allocated for `key` (its free list `free`); at the cap, drop every
    free buffer and start the pool over with this one (as the padded buffers were: one buffer over the
    cap is still kept). Buffers other calls hold now go back to dropped lists: dropped too."""
    with _scratch_lock:
        total = _scratch_allocated[0] = _scratch_allocated[0] + nbytes
        count = _scratch_allocated[1] = _scratch_allocated[1] + 1
        if total > _SCRATCH_CAP_BYTES or count > _SCRATCH_CAP_BUFFERS:
            _scratch_free.clear()
            free.clear()
            _scratch_free[key] = free
            _scratch_allocated[:] = [nbytes, 1]


def _scratch_give(held: list[tuple[deque, object]]) -> None:
    """Give back what one call held, as (free list, buffer), once all its kernels are enqueued."""
    for free, buf in held:
        free.append(buf)


def _as_own_call(fn: Callable, device: torch.device, *args):
    """fn(*args, held, stream) as a call of its own (tests, probes): its scratch is given back once fn
    has enqueued its kernels."""
    held: list = []
    try:
        return fn(*args, held, _stream(device))
    finally:
        _scratch_give(held)


def _stream(device: torch.device) -> int | None:
    """The stream whose scratch a call on `device` uses: its current stream (0 off CUDA), or None while
    that stream is being captured into a CUDA graph (then nothing is pooled; see above)."""
    if device.type != "cuda":
        return 0
    if torch._C._cuda_getDevice() != device.index:  # torch asks the current device's stream
        with torch.cuda.device(device.index):
            return _stream(device)
    if torch._C._cuda_isCurrentStreamCapturing():
        return None
    return torch._C._cuda_getCurrentRawStream(device.index)


def _workspace(device: torch.device, partial_floats: int, counters: int, held: list | None = None,
               stream: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream-K scratch (partials, tile counters) for one launch, held by the call that owns `held` (on
    its `stream`, None while captured) until it gives it back. A kept pair too small is grown, never
    shrunk. Without `held` (tests, probes): the pair the next such launch on the current stream takes."""
    if held is None:
        return _as_own_call(_workspace, device, device, partial_floats, counters)
    key = ("streamk", device, stream)
    free, pair = _scratch_take(key) if stream is not None else (None, None)
    ws, cnt = pair if pair is not None else (None, None)
    if ws is None or ws.numel() < partial_floats:
        ws = max(partial_floats, 1)
        if stream is not None:
            _scratch_new(key, free, 4 * ws)
        ws = torch.empty(ws, dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < counters:
        cnt = max(counters, 1)
        if stream is not None:
            _scratch_new(key, free, 4 * cnt)
        cnt = torch.zeros(cnt, dtype=torch.int32, device=device)
    if stream is not None:
        held.append((free, (ws, cnt)))
    return ws, cnt


def _aligned(t: torch.Tensor, slot: int, held: list | None = None, stream: int | None = None) -> torch.Tensor:
    """`t` itself when TMA can read it, else a copy in the same order with a 16-byte aligned leading dim,
    in a padded buffer of operand `slot` (0 for A, 1 for B) held by the call that owns `held` (on its
    `stream`, None while captured). Without `held` (tests, probes), the buffer goes back to the pool once
    the copy is enqueued.

    An odd leading dimension (4095, 4097) defeats both vectorized loads and TMA; one copy at memory
    speed can cost less than a GEMM that loads one element at a time. The tuner decides per problem.
    """
    ok, col = _tma_ready(t)
    if ok:
        return t
    if held is None:
        return _as_own_call(_aligned, t.device, t, slot)
    src = t.t() if col else t  # rows along dim 0, the contiguous (or copied-to-contiguous) axis along 1
    rows, cols = src.shape
    buf = _padded_buffer(slot, rows, aligned_leading_dim(cols, t.element_size()), t, held, stream)
    if src.numel():
        key = ("pad_copy", src.shape, src.stride(), buf.stride(0), src.dtype, src.device,
               src.data_ptr() % 16 == 0)
        plan = _cached_plan(key, lambda: _Plan(
            _kernels()[2], cdiv(rows, _COPY_ROWS) * cdiv(cols, _COPY_COLS),
            (rows, cols, *src.stride(), buf.stride(0)), dict(BLOCK_R=_COPY_ROWS, BLOCK_C=_COPY_COLS), 4, 1,
            None))
        _launch(plan, (src, buf), ())
    view = buf[:, :cols]
    return view.t() if col else view


def _padded_buffer(slot: int, rows: int, lead: int, like: torch.Tensor, held: list,
                   stream: int | None) -> torch.Tensor:
    """A rows x lead buffer of `like`'s dtype for operand `slot`, held by the call that owns `held`. Keyed
    by slot too, so that a call's A and B of one shape keep to their own buffer call after call."""
    device = like.device
    key = (slot, rows, lead, like.dtype, device, stream)
    free, buf = _scratch_take(key) if stream is not None else (None, None)
    if buf is None:
        if stream is not None:
            _scratch_new(key, free, rows * lead * like.element_size())
        buf = torch.empty((rows, lead), dtype=like.dtype, device=device)
    if stream is not None:
        held.append((free, buf))
    return buf


# pad_copy_kernel's block: 16 x 256 elements per program (27.0 us for the 33.5 MB B of 127x4097x4095,
# scripts/copy_probe.py).
_COPY_ROWS, _COPY_COLS = 16, 256


def program_count(config: GemmConfig, m: int, n: int, k: int, sm_count: int) -> int:
    """Programs launched for `config` on an (m, n, k) problem."""
    tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
    grid = config.grid or sm_count
    if config.streamk and k > 0:
        return max(1, min(grid, tiles * cdiv(k, config.block_k)))
    return max(1, min(grid, tiles))


@dataclass
class _Plan:
    """Everything a launch needs that depends only on the plan key (see launch_gemm)."""

    kernel: object
    progs: int
    ints: tuple
    constexprs: dict
    num_warps: int
    num_stages: int
    workspace: tuple[int, int] | None  # (partial floats, counters) for Stream-K
    tma: bool = False  # device-side descriptors: needs triton's allocator in the launching thread
    compiled: object = None  # triton's CompiledKernel once launched through the C launcher


_plans: dict[tuple, _Plan] = {}
_PLANS_CAP = 4096


def _cached_plan(key: tuple, make: Callable[[], _Plan]) -> _Plan:
    """The plan of `key`, built on a miss. No lock: shared by every thread, stream and graph capture, and
    safe without one. Get, clear and set are one dict operation each (atomic under the GIL), a plan is a
    pure function of its key built whole before it is stored, and it holds no device memory. So a thread
    gets its key's plan, or misses (after another thread's clear) and builds an equal one; two threads
    racing on a miss each launch their own and one is kept. The one field written later, `compiled`, is
    set after its handles are loaded: a reader sees None (one launch through triton's own path) or a
    ready kernel (tests/test_launch_threads.py)."""
    plan = _plans.get(key)
    if plan is None:
        if len(_plans) >= _PLANS_CAP:
            _plans.clear()
        plan = _plans[key] = make()
    return plan


def launch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                alpha: float, beta: float, config: GemmConfig, sm_count: int, precision: str) -> None:
    """c = alpha * a @ b + beta * bias, with bias already broadcast to a 2-D view of c's shape.

    The launch plan (kernel, grid, integer arguments, constexprs) is cached on everything it depends
    on: config, shapes, strides, dtype, device, precision and the 16-byte alignment of every pointer.
    Rebuilding it cost ~6 us of Python per call on this project's CPU; a hit costs one tuple hash.

    Scratch (padded copies, Stream-K workspace) is held by this call alone from before its first launch
    until after its last one is enqueued, then given back (see the comment above _scratch_free); a
    config that needs none skips all of it.
    """
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if a.dtype == torch.bfloat16 and not a.is_cuda:
        # Triton's interpreter computes tl.dot on bf16 wrongly (numpy has no bf16): hand it the exact
        # fp32 copies; the kernel still accumulates in fp32 and stores bf16.
        a, b = a.float(), b.float()
    held = stream = device = None
    if config.aligned_copy or config.streamk:
        device = c.device
        held, stream = [], _stream(device)
    try:
        if config.aligned_copy:
            a, b = _aligned(a, 0, held, stream), _aligned(b, 1, held, stream)
        has_bias = bias is not None
        key = (config, a.shape, n, a.stride(), b.stride(), c.stride(), bias.stride() if has_bias else None,
               a.dtype, c.dtype, a.device, precision, sm_count, a.data_ptr() % 16 == 0,
               b.data_ptr() % 16 == 0, c.data_ptr() % 16 == 0, has_bias and bias.data_ptr() % 16 == 0)
        plan = _cached_plan(key, lambda: _make_plan(a, b, c, bias, config, sm_count, precision))
        tensors = (a, b, c, bias if has_bias else c)
        if plan.workspace is not None:
            tensors = (*tensors, *_workspace(device, *plan.workspace, held, stream))
        _launch(plan, tensors, (alpha, beta))
    finally:
        if held:  # every kernel of this call is enqueued (or failed to launch): the next user runs after
            _scratch_give(held)


# Offsets past this many elements wrap in 32-bit index arithmetic.
INT32_OFFSETS = 2**31
# Rows and columns past a tile's edge, and the K pointer one block past the end, are formed before they
# are masked (or wrapped): the reach of a tensor counts this many elements more along every dimension
# (two of the largest block, 256).
_OFFSET_SLACK = 512


def offset_reach(t: torch.Tensor) -> int:
    """One more than the largest element offset a kernel may form on `t` (see _OFFSET_SLACK)."""
    spans = zip(t.shape, t.stride(), strict=True)
    return 1 + sum((size + _OFFSET_SLACK - 1) * abs(stride) for size, stride in spans)


def needs_int64(tensors: tuple[torch.Tensor | None, ...], workspace_floats: int = 0) -> bool:
    """Whether a launch must form its offsets in 64 bits: some operand, the output, the bias or the
    Stream-K workspace reaches 2**31 elements. Chosen per plan (so once per problem and layout), so that
    the problems that fit keep 32-bit index arithmetic and today's speed; 17000x128256x4096 (C of 2.18e9
    elements) faulted with an illegal address in 32 bits (H200, 2026-11-30)."""
    reach = max((offset_reach(t) for t in tensors if t is not None), default=0)
    return max(reach, workspace_floats) >= INT32_OFFSETS


def _make_plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
               config: GemmConfig, sm_count: int, precision: str) -> _Plan:
    m, k = a.shape
    n = b.shape[1]
    persistent_kernel, streamk_kernel, _ = _kernels()
    progs = program_count(config, m, n, k, sm_count)
    has_bias = bias is not None
    sbm, sbn = bias.stride() if has_bias else (0, 0)
    (a_tma, a_col), (b_tma, b_col) = _tma_ready(a), _tma_ready(b)
    # A strided view the predicate could not see (it checks the dense layout) takes the pointer path.
    use_tma = config.tma and a_tma and b_tma
    constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                      GROUP_M=config.group_m, HAS_BIAS=has_bias, EVEN_K=k % config.block_k == 0,
                      PRECISION=precision, USE_TMA=use_tma, A_COL=a_col, B_COL=b_col,
                      A_DIV=_vector_divisor(a, 0), B_DIV=_vector_divisor(b, 1), FLATTEN=config.flatten,
                      WARP_SPEC=config.warp_specialize)
    ints = (m, n, k, progs, *a.stride(), *b.stride(), *c.stride(), sbm, sbn)
    streamk = config.streamk and k > 0
    partial_floats = progs * config.block_m * config.block_n if streamk else 0
    constexprs["INT64"] = needs_int64((a, b, c, bias), partial_floats)
    # K == 0 has no iterations to split: the persistent kernel writes beta * bias (or zeros).
    if streamk:
        tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
        workspace = (partial_floats, tiles % progs)
        return _Plan(streamk_kernel, progs, ints, constexprs, config.num_warps, config.num_stages, workspace,
                     tma=use_tma)
    return _Plan(persistent_kernel, progs, ints, constexprs, config.num_warps, config.num_stages, None,
                 tma=use_tma)


def _launch(plan: _Plan, tensors: tuple, floats: tuple) -> None:
    """Launch through triton's C launcher once the plan's kernel is compiled.

    `kernel[grid](...)` re-binds and re-hashes ~30 arguments on every call: ~45 us of host time per
    launch on the H200 (scripts/dispatch_overhead.py), more than a 1024^3 GEMM takes on the GPU. The
    plan key is stricter than triton's specialization (exact integers, dtypes, 16-byte alignment of
    every pointer, device), so the cached binary is exactly the one triton would have picked.
    """
    args = (*tensors, *plan.ints, *floats)
    if not tensors[0].is_cuda:  # the interpreter has no compiled kernel to reuse
        plan.kernel[(plan.progs,)](*args, **plan.constexprs, num_warps=plan.num_warps,
                                   num_stages=plan.num_stages)
        return
    index = tensors[0].device.index
    if index != torch.cuda.current_device():
        # Triton launches on (and loads modules into) the current device: switch to the tensors' one.
        with torch.cuda.device(index):
            _launch(plan, tensors, floats)
        return
    if plan.tma:
        _ensure_allocator()
    compiled = plan.compiled
    if compiled is None:
        _install_compile_key()  # waits for prefetch_compile_key's thread, if one is running
        compiled = plan.kernel[(plan.progs,)](*args, **plan.constexprs, num_warps=plan.num_warps,
                                              num_stages=plan.num_stages)
        # The fast path passes constexprs positionally: only keep it when their order is the kernel's.
        if list(plan.kernel.arg_names[len(args):]) == list(plan.constexprs):
            compiled._init_handles()
            plan.compiled = compiled
        return
    stream = torch._C._cuda_getCurrentRawStream(index)
    compiled.run(plan.progs, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *args, *plan.constexprs.values())
