"""The one place that maps a GemmConfig to kernel arguments and a grid, and launches it.

Kernels (and so triton) are imported on first launch, not when `tritonblas` is imported.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field

import torch

from ..arith import cdiv
from ..config import GemmConfig
from ..problem import aligned_leading_dim
from . import compile_key, direct, scratch
from .arguments import Scales, gemm_args, reduce_args, scale_args, scale_modes
from .streamk import fixup_plan, program_count, reduce_chunks, streamk_split, streamk_workspace


@functools.cache
def _kernels():
    from ..kernels.copy import pad_copy_kernel, pad_copy_words_kernel
    from ..kernels.persistent import persistent_gemm_kernel
    from ..kernels.reduce import splitk_reduce_kernel
    from ..kernels.streamk import streamk_gemm_kernel

    return persistent_gemm_kernel, streamk_gemm_kernel, pad_copy_kernel, splitk_reduce_kernel, \
        pad_copy_words_kernel


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


def tma_ready(t: torch.Tensor) -> tuple[bool, bool]:
    """(usable by TMA, column-major): one unit stride, 16-byte aligned base and leading stride."""
    col = _is_col_major(t)
    s0, s1 = t.stride()
    lead, unit = (s1, s0) if col else (s0, s1)
    ok = unit == 1 and (lead * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
    return ok, col


def _aligned(t: torch.Tensor, slot: int, held: list | None = None, stream: int | None = None) -> torch.Tensor:
    """`t` itself when TMA can read it, else a copy in the same order with a 16-byte aligned leading dim,
    in a padded buffer of operand `slot` (0 for A, 1 for B) held by the call that owns `held` (on its
    `stream`, None while captured). Without `held` (tests, probes), the buffer goes back to the pool once
    the copy is enqueued.

    An odd leading dimension (4095, 4097) defeats both vectorized loads and TMA; one copy at memory
    speed can cost less than a GEMM that loads one element at a time. The tuner decides per problem.
    """
    ok, col = tma_ready(t)
    if ok:
        return t
    if held is None:
        return scratch.as_own_call(_aligned, t.device, t, slot)
    src = t.t() if col else t  # rows along dim 0, the contiguous (or copied-to-contiguous) axis along 1
    rows, cols = src.shape
    buf = scratch.padded_buffer(slot, rows, aligned_leading_dim(cols, t.element_size()), t, held, stream)
    if src.numel():
        lead, aligned = buf.stride(0), src.data_ptr() % 16 == 0
        plan = _cached_plan(copy_key(src, lead, aligned), lambda: _copy_plan(src, lead, aligned))
        launch_plan(plan, (src, buf), ())
    view = buf[:, :cols]
    return view.t() if col else view


# pad_copy_kernel's block: 16 x 256 elements per program (27.0 us for the 33.5 MB B of 127x4097x4095,
# 016dd08:scripts/copy_probe.py).
_COPY_ROWS, _COPY_COLS = 16, 256
# pad_copy_words_kernel's block: rows x 4-byte words per program (docs/notes/kernel-levers.md, row 47).
_WORD_ROWS, _WORD_COLS = 4, 256


def copy_key(src: torch.Tensor, lead: int, aligned: bool) -> tuple:
    """The plan key of the pad copy of `src` into rows `lead` elements apart, from a pointer 16-byte
    `aligned` or not: _aligned stores the copy's plan by it, and a prepared launch finds it there."""
    return ("pad_copy", src.shape, src.stride(), lead, src.dtype, src.device, aligned)


def _copy_plan(src: torch.Tensor, lead: int, aligned: bool) -> Plan:
    """The pad copy of `src` (rows along dim 0) into rows `lead` elements apart: one- and two-byte
    elements in contiguous rows from an aligned pointer a word at a time (the word kernel counts in
    bytes), any other source an element at a time."""
    rows, cols = src.shape
    size = src.element_size()
    if size <= 2 and src.stride(1) == 1 and aligned:
        row_bytes = cols * size
        return Plan(_kernels()[4], cdiv(rows, _WORD_ROWS) * cdiv(cdiv(row_bytes, 4), _WORD_COLS),
                    (rows, row_bytes, src.stride(0) * size, lead * size // 4),
                    dict(BLOCK_R=_WORD_ROWS, BLOCK_W=_WORD_COLS), 4, 1, None)
    return Plan(_kernels()[2], cdiv(rows, _COPY_ROWS) * cdiv(cols, _COPY_COLS),
                (rows, cols, *src.stride(), lead), dict(BLOCK_R=_COPY_ROWS, BLOCK_C=_COPY_COLS), 4, 1, None)


@dataclass(slots=True, eq=False)
class LaunchState:
    """What a plan's first launch learns: written once, at that launch (launch_plan; grouped.gluon's for
    its `direct`), each field from empty straight to ready, which is all a reader sees (_cached_plan)."""

    compiled: object = None  # triton's CompiledKernel once launched through the C launcher; written last
    constexpr_args: tuple = ()  # the constexprs' values in the kernel's argument order, for the C launcher
    direct: object = None  # launch.direct's launch of `compiled`, where this triton's launcher allows one


@dataclass(frozen=True, slots=True, eq=False)
class Plan:
    """Everything a launch needs that depends only on the plan key (see launch_gemm), frozen: shared by
    every thread, stream and capture; what its first launch writes lives in `state`."""

    kernel: object
    progs: int
    ints: tuple
    constexprs: dict  # the kernel's compile-time choices by name (kernels/specs.py bundles them)
    num_warps: int
    num_stages: int
    workspace: tuple[int, int] | None  # (partial floats, counters) for Stream-K
    tma: bool = False  # device-side descriptors: needs triton's allocator in the launching thread
    then: Plan | None = None  # Stream-K with reduce_kernel: kernels/reduce.py's launch, on (ws, c, bias)
    descs: tuple | None = None  # a prepared launch's host descriptors: (shape, strides, box) of A and B
    copies: tuple | None = None  # a prepared launch's pad copies of A and B (launch/prepared.py), None: none
    maxnreg: int | None = None  # a register cap per thread (warp-specialized Gluon kernels), None: triton's
    host_objects: bool = False  # arguments only triton's `run` expands (Gluon descriptors): never direct
    state: LaunchState = field(default_factory=LaunchState, init=False)  # not an argument: empty per plan
    kwargs: dict = field(init=False)  # the kernel's constexpr keyword arguments: constexprs, bundled

    def __post_init__(self) -> None:
        from ..kernels.specs import kernel_constexprs  # (imports triton: on the first plan, not at import)

        object.__setattr__(self, "kwargs", kernel_constexprs(self.kernel, self.constexprs))


plans: dict[tuple, Plan] = {}
_PLANS_CAP = 4096


def _cached_plan(key: tuple, make: Callable[[], Plan]) -> Plan:
    """The plan of `key`, built on a miss. No lock: shared by every thread, stream and graph capture, and
    safe without one. Get, clear and set are one dict operation each (atomic under the GIL), a plan is a
    pure function of its key built whole before it is stored, and it holds no device memory. So a thread
    gets its key's plan, or misses (after another thread's clear) and builds an equal one; two threads
    racing on a miss each launch their own and one is kept. A plan is frozen but for its `state`, written
    at its first launch with `compiled` last, after its handles are loaded: a reader sees None (one launch
    through triton's own path) or a ready kernel and its arguments (tests/test_launch_threads.py)."""
    plan = plans.get(key)
    if plan is None:
        if len(plans) >= _PLANS_CAP:
            plans.clear()
        plan = plans[key] = make()
    return plan


cached_plan = _cached_plan  # the one plan cache's get-or-build, for the launches of other kernel families


def launch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                alpha: float, beta: float, config: GemmConfig, sm_count: int, precision: str,
                scales: Scales = None, fast_acc: bool = False) -> None:
    """c = alpha * (a @ b * scale_a * scale_b) + beta * bias, with bias already broadcast to a 2-D view of
    c's shape; scales (scaled_mm) None for a plain GEMM, fast_acc its fp8 fast accumulation. The launch
    plan (kernel, grid, integer arguments, constexprs) is cached on everything it depends on: config,
    shapes, strides, dtype, device, precision and the 16-byte alignment of every pointer. Rebuilding it
    cost ~6 us of Python per call on this project's CPU; a hit costs one tuple hash. Scratch (padded
    copies, Stream-K workspace) is held by this call alone from before its first launch until after its
    last one is enqueued, then given back (see launch/scratch.py), or dropped if the call raised; a
    config that needs none skips all of it."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if a.dtype == torch.bfloat16 and not a.is_cuda:
        # Triton's interpreter computes tl.dot on bf16 wrongly (numpy has no bf16): hand it the exact
        # fp32 copies; the kernel still accumulates in fp32 and stores bf16.
        a, b = a.float(), b.float()
    held = stream = device = None
    if needs_scratch(config):
        device = c.device
        held, stream = [], scratch.current_stream(device)
    try:
        if config.aligned_copy:
            a, b = _aligned(a, 0, held, stream), _aligned(b, 1, held, stream)
        has_bias = bias is not None
        key = (config, a.shape, n, a.stride(), b.stride(), c.stride(), bias.stride() if has_bias else None,
               a.dtype, c.dtype, a.device, precision, sm_count, a.data_ptr() % 16 == 0,
               b.data_ptr() % 16 == 0, c.data_ptr() % 16 == 0, has_bias and bias.data_ptr() % 16 == 0,
               b.dtype, *_scale_key(scales), fast_acc)
        plan = _cached_plan(key, lambda: make_plan(a, b, c, bias, config, sm_count, precision, scales,
                                                   fast_acc))
        tensors = (a, b, c, bias if has_bias else c)
        if plan.workspace is not None:
            tensors = (*tensors, *scratch.workspace(device, *plan.workspace, held, stream))
        host = _host_descriptors(a, b, plan.constexprs) if plan.constexprs["HOST_DESC"] else (None, None)
        launch_plan(plan, *gemm_args(*tensors[:4], tensors[4:], alpha, beta, host, scale_args(scales)))
        if plan.then is not None:  # stream order: the partials are all in when it runs
            launch_plan(plan.then, *reduce_args(tensors[4], c, tensors[3], alpha, beta, scale_args(scales)))
    except BaseException:
        # A launch that raised (compile error, out of memory, KeyboardInterrupt, an interpreted kernel
        # stopped part way) may leave its scratch dirty, e.g. tile counters mid-fix-up: it is dropped
        # (to torch's allocator, which orders its reuse on this stream), never given back.
        held = None
        raise
    finally:
        if held:  # every kernel of this call is enqueued: the next user runs after
            scratch.give(held)


def _scale_key(scales: Scales) -> tuple:
    """What a plan depends on in the scales: their modes and pointers' 16-byte alignment."""
    if scales is None:
        return ()
    return (*scale_modes(scales), scales[0].data_ptr() % 16 == 0, scales[1].data_ptr() % 16 == 0)


def needs_scratch(config: GemmConfig) -> bool:
    """Padded copies or the Stream-K workspace: device memory a launch takes besides the caller's tensors
    (launch/scratch.py), and launches besides the GEMM's: dearer on the host than torch's op."""
    return config.aligned_copy or config.streamk


def _host_descriptors(a: torch.Tensor, b: torch.Tensor, constexprs: dict) -> tuple:
    """TMA descriptors of A and B built here, as kernel arguments (config.host_descriptors): the same
    storage-order shapes, strides and boxes as the kernels' make_operand_descs builds on the device.
    Made per call (they hold the tensors); triton's launcher encodes each into the launch."""
    geometry_a, geometry_b = descriptor_geometry(a, b, constexprs)
    return descriptor(a, *geometry_a), descriptor(b, *geometry_b)


def descriptor_geometry(a: torch.Tensor, b: torch.Tensor, constexprs: dict) -> tuple:
    """((shape, strides, box) of A, the same of B): all a descriptor needs but its base pointer."""
    bm, bn, bk = constexprs["BLOCK_M"], constexprs["BLOCK_N"], constexprs["BLOCK_K"]
    (m, k), n = a.shape, b.shape[1]
    if constexprs["A_COL"]:
        geometry_a = ([k, m], [a.stride(1), 1], [bk, bm])
    else:
        geometry_a = ([m, k], [a.stride(0), 1], [bm, bk])
    if constexprs["B_COL"]:
        geometry_b = ([n, k], [b.stride(1), 1], [bn, bk])
    else:
        geometry_b = ([k, n], [b.stride(0), 1], [bk, bn])
    return geometry_a, geometry_b


@functools.cache
def _descriptor_type() -> type:
    from triton.tools.tensor_descriptor import TensorDescriptor

    return TensorDescriptor


def descriptor(base: torch.Tensor, shape: list, strides: list, block: list):
    """A TensorDescriptor without its __post_init__ checks, which cost ~5 us each on this project's CPU
    (10.4 us for the pair, timeit): the plan already holds what they check (16-byte aligned base and
    leading stride: tma_ready; power-of-two boxes: GemmConfig; positive sizes: empty outputs launch
    nothing and K = 0 plans take device-built descriptors, which no iteration reads)."""
    desc = object.__new__(_descriptor_type())
    desc.base, desc.shape, desc.strides, desc.block_shape, desc.padding = base, shape, strides, block, "zero"
    return desc


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


def make_plan(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
              config: GemmConfig, sm_count: int, precision: str, scales: Scales = None,
              fast_acc: bool = False) -> Plan:
    m, k = a.shape
    n = b.shape[1]
    persistent_kernel, streamk_kernel, _, reduce_kernel, _ = _kernels()
    progs = program_count(config, m, n, k, sm_count)
    has_bias = bias is not None
    sbm, sbn = bias.stride() if has_bias else (0, 0)
    (a_tma, a_col), (b_tma, b_col) = tma_ready(a), tma_ready(b)
    # A strided view the predicate could not see (it checks the dense layout) takes the pointer path.
    use_tma = config.tma and a_tma and b_tma
    constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                      GROUP_M=config.group_m, HAS_BIAS=has_bias, EVEN_K=k % config.block_k == 0,
                      PRECISION=precision, USE_TMA=use_tma, A_COL=a_col, B_COL=b_col,
                      A_DIV=_vector_divisor(a, 0), B_DIV=_vector_divisor(b, 1), FLATTEN=config.flatten)
    constexprs["A_SCALE"], constexprs["B_SCALE"] = scale_modes(scales)
    constexprs["FAST_ACC"] = fast_acc
    host_desc = use_tma and config.host_descriptors and k > 0  # (K = 0: a descriptor of no columns)
    ints = (m, n, k, progs, *a.stride(), *b.stride(), *c.stride(), sbm, sbn)
    streamk = config.streamk and k > 0
    workspace = streamk_workspace(config, m, n, k, progs) if streamk else None
    constexprs["INT64"] = needs_int64((a, b, c, bias), workspace[0] if workspace else 0)
    constexprs["HOST_DESC"] = host_desc
    # K == 0 has no iterations to split: the persistent kernel writes beta * bias (or zeros).
    if streamk:
        tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
        splits = streamk_split(tiles, progs, cdiv(k, config.block_k))
        constexprs["FIXUP_CHUNKS"], constexprs["DEFERRED"] = fixup_plan(config, tiles, progs, splits, use_tma)
        constexprs["REDUCE"] = config.reduce_kernel and splits > 1
        then = _reduce_plan(reduce_kernel, config, (m, n, *c.stride(), sbm, sbn), tiles, progs, splits,
                            constexprs) if constexprs["REDUCE"] else None
        return Plan(streamk_kernel, progs, ints, constexprs, config.num_warps, config.num_stages, workspace,
                    tma=use_tma and not host_desc, then=then)
    return Plan(persistent_kernel, progs, ints, constexprs, config.num_warps, config.num_stages, None,
                tma=use_tma and not host_desc)


def _reduce_plan(kernel, config: GemmConfig, output_ints: tuple, tiles: int, programs: int, splits: int,
                 constexprs: dict) -> Plan:
    """kernels/reduce.py's launch after a Stream-K launch with REDUCE: one program per row chunk of
    each split tile; output_ints (M, N, C's strides, the bias's) and the bias and 64-bit offsets
    (constexprs) are the main launch's."""
    sk_tiles = tiles % programs
    chunks = reduce_chunks(sk_tiles, programs)  # (at most 8 <= block_m: 16 rows or more)
    ints = (*output_ints, tiles - sk_tiles, sk_tiles, splits)
    reduce_constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, GROUP_M=config.group_m,
                             HAS_BIAS=constexprs["HAS_BIAS"], INT64=constexprs["INT64"], FIXUP_CHUNKS=chunks,
                             A_SCALE=constexprs["A_SCALE"], B_SCALE=constexprs["B_SCALE"])
    return Plan(kernel, sk_tiles * chunks, ints, reduce_constexprs, config.num_warps, 1, None)


# torch.cuda.current_device() without its lazy-init call: a CUDA tensor in hand means CUDA is initialized.
current_device = getattr(torch._C, "_cuda_getDevice", torch.cuda.current_device)


def launch_plan(plan: Plan, tensors: tuple, floats: tuple) -> None:
    """Launch through triton's C launcher once the plan's kernel is compiled.

    `kernel[grid](...)` re-binds and re-hashes ~30 arguments on every call: ~45 us of host time per
    launch on the H200 (scripts/dispatch_overhead.py), more than a 1024^3 GEMM takes on the GPU. The
    plan key is stricter than triton's specialization (exact integers, dtypes, 16-byte alignment of
    every pointer, device), so the cached binary is exactly the one triton would have picked.
    """
    args = (*tensors, *plan.ints, *floats)
    options = {} if plan.maxnreg is None else {"maxnreg": plan.maxnreg}
    if not tensors[0].is_cuda:  # the interpreter has no compiled kernel to reuse
        plan.kernel[(plan.progs,)](*args, **plan.kwargs, num_warps=plan.num_warps,
                                   num_stages=plan.num_stages, **options)
        return
    index = tensors[0].get_device()  # an int: .device.index builds a device object first
    if index != current_device():
        # Triton launches on (and loads modules into) the current device: switch to the tensors' one.
        with torch.cuda.device(index):
            launch_plan(plan, tensors, floats)
        return
    if plan.tma:
        scratch.ensure_allocator()
    state = plan.state
    compiled = state.compiled
    if compiled is None:
        compile_key.install_quietly()  # waits for compile_key.prefetch's thread, if one is running
        compiled = plan.kernel[(plan.progs,)](*args, **plan.kwargs, num_warps=plan.num_warps,
                                              num_stages=plan.num_stages, **options)
        # The C launcher takes constexprs by position: in the kernel's order, whatever the dict's.
        names = plan.kernel.arg_names[len(args):]
        if sorted(names) == sorted(plan.kwargs):
            state.constexpr_args = tuple(plan.kwargs[name] for name in names)
            compiled._init_handles()
            # Host descriptors go direct only with their geometry planned (prepare_launch's): launch_gemm
            # hands TensorDescriptor objects, which only `run` expands.
            if not plan.host_objects and (plan.descs is not None or not plan.constexprs.get("HOST_DESC")):
                state.direct = direct.make(compiled, plan.progs, plan.descs, descriptor)
            state.compiled = compiled  # last: a reader that sees it sees the two above
        return
    stream = torch._C._cuda_getCurrentRawStream(index)
    if state.direct is not None and plan.descs is None:  # (a prepared plan's descriptors come as objects)
        state.direct.launch(stream, (*args, *state.constexpr_args))
        return
    compiled.run(plan.progs, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *args, *state.constexpr_args)
