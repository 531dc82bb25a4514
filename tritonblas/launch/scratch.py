"""Scratch: device memory a launch needs besides the caller's tensors, namely the padded copies of
misaligned operands (aligned_copy configs) and the Stream-K partials and tile counters.

It is kept between calls: allocating the padded buffers per call cost host time that the 127x4097x4095
path, bound by its three launches, could not hide (73-100 us in a 44-problem bench, 50 us alone;
tritonblas bench, H200, 2026-11-30). Kept scratch was once one buffer per (device, stream), reused by
every call "in stream order", but stream order only orders one host thread's launches: with two threads
on one stream, A's copy, B's copy into the same buffer, then A's GEMM read B's data (70 wrong results
of 160 calls, 8 threads on the default stream, 127x4097x4095, H200, 2026-11-30; issue 19).

So a buffer is owned by one call at a time. A call takes its scratch out of free_lists (by device
and stream; a padded buffer also by operand slot, shape and dtype), enqueues all its kernels, and only
then gives it back (launch.gemm.launch_gemm). A buffer taken is never handed to another call until given
back, and a later call on the same stream that takes it enqueues its kernels after the giving call's
(the give happens after those launches returned), so on the GPU they run in that order too. Two
streams never share: the key holds the stream. Stream-K counters are left at zero by every launch (the
last arriver resets its tile), so a counter buffer given back is zero for the next user on its stream;
a fresh one is zeroed.

A call that raises drops what it holds instead of giving it back: a launch that failed part way (a
compile error, out of memory, KeyboardInterrupt, an interpreted kernel stopped mid-fix-up) may leave
tile counters set or a copy half done, which the next user would read (NaN results, issue 33).
Dropping costs nothing on the success path. Dropping a buffer (a fault, growth, the cap) hands it to
torch's caching allocator, which reuses memory freed on a stream only for work later on that stream:
every buffer here is allocated and used on its key's one.

Take and give are deque.pop and deque.append, which Python documents as thread-safe (each element is
popped by exactly one caller), plus a dict.get/setdefault on keys of built-in types at take (atomic in
CPython; a list replaced by a drop at the cap at worst drops the buffers given back to it). A lock
around them cost 0.45 us more per buffer (3 buffers taken and given: 1.05 -> 2.42 us, timeit, 2-core
CPU); the lock is kept for the cap's bookkeeping on the allocation path.

The global scratch of a launch with device-side tensor descriptors (launch.direct: triton asks its
allocator for it at each launch of `CompiledKernel.run`) is pooled the same way, by device and stream,
taken for one launch and given back once it is enqueued.

While the current stream is captured into a CUDA graph, scratch is allocated per call and never pooled:
allocations during capture come from the graph's private memory pool, which the graph owns, so a replay
touches only its own memory. A pooled buffer captured into a graph would be written by every replay,
whenever it runs, while eager calls use the same buffer.

The same holds in the custom op's body (call.core_op, what compiled code runs): torch.compile's CUDA
graphs (mode="reduce-overhead") run a warm-up before capture with this thread's allocations going to the
graph's pool, and a buffer kept from there is a live tensor in that pool the graph does not own, which
cudagraph trees refuse ("tensor(s) in the cudagraph pool not tracked as outputs"). So that body runs
`unpooled()`: its scratch is allocated per call, as under capture.

Host cost before/after, every kernel launch stubbed: docs/reliability.md, "Threads, streams and CUDA
graphs" (tests/scratch_overhead.py).
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections import deque
from collections.abc import Callable, Iterator

import torch

from ..contract import POOL_CAP_BYTES

free_lists: dict[tuple, deque] = {}  # key -> buffers no call holds, the last given back last
_lock = threading.Lock()  # the allocation count below, and dropping the pool at the cap
_allocated = [0, 0]  # bytes, buffers allocated into the pool since it was last dropped
# The pool is dropped (and started over) once this much was allocated into it, as the padded buffers
# were before: a process cycling through many shapes does not keep every one's buffers.
CAP_BYTES = POOL_CAP_BYTES  # (the C++ records' kept buffers keep to it too)
CAP_BUFFERS = 4096
_unpooled = threading.local()  # depth: inside unpooled() on this thread


def take(key: tuple) -> tuple[deque, object | None]:
    """(the free list of `key`, a buffer from it now the caller's alone or None when none is free). The
    buffer goes back to that list: no second lookup when it is given back."""
    free = free_lists.get(key)
    if free is None:
        free = free_lists.setdefault(key, deque())
    try:
        return free, free.pop()
    except IndexError:  # none free (another call may have taken the last one since)
        return free, None


def count_new(key: tuple, free: deque, nbytes: int) -> None:
    """Count a buffer about to be allocated for `key` (its free list `free`); at the cap, drop every
    free buffer and start the pool over with this one (as the padded buffers were: one buffer over the
    cap is still kept). Buffers other calls hold now go back to dropped lists: dropped too."""
    with _lock:
        total = _allocated[0] = _allocated[0] + nbytes
        count = _allocated[1] = _allocated[1] + 1
        if total > CAP_BYTES or count > CAP_BUFFERS:
            free_lists.clear()
            free.clear()
            free_lists[key] = free
            _allocated[:] = [nbytes, 1]


def give(held: list[tuple[deque, object]]) -> None:
    """Give back what one call held, as (free list, buffer), once all its kernels are enqueued."""
    for free, buf in held:
        free.append(buf)


def as_own_call(fn: Callable, device: torch.device, *args):
    """fn(*args, held, stream) as a call of its own (tests, probes): its scratch is given back once fn
    has enqueued its kernels, or dropped if fn raised."""
    held: list = []
    result = fn(*args, held, current_stream(device))
    give(held)
    return result


@contextlib.contextmanager
def unpooled() -> Iterator[None]:
    """Calls on this thread allocate their scratch per call and pool none of it (see above)."""
    _unpooled.depth = getattr(_unpooled, "depth", 0) + 1
    try:
        yield
    finally:
        _unpooled.depth -= 1


def current_stream(device: torch.device) -> int | None:
    """The stream whose scratch a call on `device` uses: its current stream (0 off CUDA), or None while
    that stream is being captured into a CUDA graph, or inside unpooled() (then nothing is pooled)."""
    if getattr(_unpooled, "depth", 0):
        return None
    if device.type != "cuda":
        return 0
    index = torch._C._cuda_getDevice() if device.index is None else device.index  # "cuda": the current one
    if torch._C._cuda_getDevice() != index:  # torch asks the current device's stream
        with torch.cuda.device(index):
            return current_stream(device)
    return _cuda_stream(index)


def _cuda_stream(index: int) -> int | None:
    """current_stream of CUDA device `index`, the current device."""
    if getattr(_unpooled, "depth", 0) or torch._C._cuda_isCurrentStreamCapturing():
        return None
    return torch._C._cuda_getCurrentRawStream(index)


def workspace_elements(partial_floats: int, counters: int) -> tuple[int, int]:
    """The elements of a Stream-K launch's partials (fp32) and tile counters (int32) as workspace() and
    the C++ side's records (launch/native.py) allocate them: at least one each, so each has an address."""
    return max(partial_floats, 1), max(counters, 1)


def workspace(device: torch.device, partial_floats: int, counters: int, held: list | None = None,
              stream: int | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream-K scratch (partials, tile counters) for one launch, held by the call that owns `held` (on
    its `stream`, None while captured) until it gives it back. A kept pair too small is grown, never
    shrunk. Without `held` (tests, probes): the pair the next such launch on the current stream takes."""
    if held is None:
        return as_own_call(workspace, device, device, partial_floats, counters)
    key = ("streamk", device, stream)
    free, pair = take(key) if stream is not None else (None, None)
    ws, cnt = pair if pair is not None else (None, None)
    floats, ints = workspace_elements(partial_floats, counters)
    if ws is None or ws.numel() < floats:
        if stream is not None:
            count_new(key, free, 4 * floats)
        ws = torch.empty(floats, dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < ints:
        if stream is not None:
            count_new(key, free, 4 * ints)
        cnt = torch.zeros(ints, dtype=torch.int32, device=device)
    if stream is not None:
        held.append((free, (ws, cnt)))
    return ws, cnt


def padded_buffer(slot: int, rows: int, lead: int, like: torch.Tensor, held: list,
                   stream: int | None) -> torch.Tensor:
    """A rows x lead buffer of `like`'s dtype for operand `slot`, held by the call that owns `held`. Keyed
    by slot too, so that a call's A and B of one shape keep to their own buffer call after call."""
    device = like.device
    key = (slot, rows, lead, like.dtype, device, stream)
    free, buf = take(key) if stream is not None else (None, None)
    if buf is None:
        if stream is not None:
            count_new(key, free, rows * lead * like.element_size())
        buf = torch.empty((rows, lead), dtype=like.dtype, device=device)
    if stream is not None:
        held.append((free, buf))
    return buf


def descriptor_buffer(nbytes: int) -> tuple[deque | None, torch.Tensor]:
    """Global scratch for one launch with device-side tensor descriptors on the current device and stream
    (launch.direct: each program writes its descriptors there): (the free list it goes back to once the
    launch is enqueued, the buffer), or (None, a buffer of the launch's own) under capture or unpooled().
    A kept buffer too small is replaced."""
    index = torch._C._cuda_getDevice()
    stream = _cuda_stream(index)
    key = ("descriptors", index, stream)
    free, buf = take(key) if stream is not None else (None, None)
    if buf is None or buf.numel() < nbytes:
        if stream is not None:
            count_new(key, free, nbytes)
        buf = torch.empty(nbytes, dtype=torch.uint8, device=torch.device("cuda", index))
    return free, buf


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # Called inside the launch, with the tensors' device current (see launch.gemm's launch_plan).
    return torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())


@functools.cache
def _allocator_var():
    from triton.runtime import _allocation

    return _allocation._allocator, _allocation._NULL_ALLOCATOR


def ensure_allocator() -> None:
    """Device-side tensor descriptors need global scratch, which triton asks its allocator for at every
    launch. The allocator is a ContextVar: set in one thread, unset in the next. So it is checked at
    each TMA launch, not once per plan: a plan built in the tuner's compile threads (or a user's
    thread) and launched from another failed with "no allocator was set" (311 TMA candidates lost in
    the first two-GPU tuning run)."""
    var, null = _allocator_var()
    if var.get() is null:
        import triton

        triton.set_allocator(_descriptor_scratch)
