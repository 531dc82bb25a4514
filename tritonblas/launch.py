"""The one place that maps a GemmConfig to kernel arguments and a grid, and launches it.

Kernels (and so triton) are imported on first launch, not when `tritonblas` is imported.
"""

from __future__ import annotations

import functools

import torch

from .config import GemmConfig

_workspaces: dict[torch.device, tuple[torch.Tensor, torch.Tensor]] = {}


@functools.cache
def _kernels():
    from .kernels.persistent import persistent_gemm_kernel
    from .kernels.streamk import streamk_gemm_kernel

    return persistent_gemm_kernel, streamk_gemm_kernel


def _descriptor_scratch(size: int, alignment: int, stream: int | None) -> torch.Tensor:
    # Called inside the launch, with the tensors' device current (see _launch).
    return torch.empty(size, dtype=torch.int8, device=torch.cuda.current_device())


def _ensure_allocator() -> None:
    """Device-side tensor descriptors need global scratch; triton asks its allocator at launch."""
    from triton.runtime import _allocation

    if _allocation._allocator.get() is _allocation._NULL_ALLOCATOR:
        _allocation.set_allocator(_descriptor_scratch)


def _is_col_major(t: torch.Tensor) -> bool:
    return t.stride(1) != 1 and t.stride(0) == 1


def _lead_divisor(t: torch.Tensor) -> int:
    """The power of two (at most 16) that divides the operand's leading stride."""
    lead = t.stride(1) if _is_col_major(t) else t.stride(0)
    div = 16
    while div > 1 and lead % div:
        div //= 2
    return div


def _tma_ready(t: torch.Tensor) -> tuple[bool, bool]:
    """(usable by TMA, column-major): one unit stride, 16-byte aligned base and leading stride."""
    col = _is_col_major(t)
    s0, s1 = t.stride()
    lead, unit = (s1, s0) if col else (s0, s1)
    ok = unit == 1 and (lead * t.element_size()) % 16 == 0 and t.data_ptr() % 16 == 0
    return ok, col


def _cdiv(a: int, b: int) -> int:
    return -(-a // b)


def _workspace(device: torch.device, partial_floats: int, counters: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Stream-K scratch, allocated lazily per device and grown, never shrunk.

    Counters start at zero and every launch leaves them at zero (the last arriver resets its tile), so
    reuse needs no zeroing launch. One launch at a time per device: launches on two streams at once
    must not share it.
    """
    ws, cnt = _workspaces.get(device, (None, None))
    if ws is None or ws.numel() < partial_floats:
        ws = torch.empty(max(partial_floats, 1), dtype=torch.float32, device=device)
    if cnt is None or cnt.numel() < counters:
        cnt = torch.zeros(max(counters, 1), dtype=torch.int32, device=device)
    _workspaces[device] = (ws, cnt)
    return ws, cnt


def program_count(config: GemmConfig, m: int, n: int, k: int, sm_count: int) -> int:
    """Programs launched for `config` on an (m, n, k) problem."""
    tiles = _cdiv(m, config.block_m) * _cdiv(n, config.block_n)
    grid = config.grid or sm_count
    if config.streamk and k > 0:
        return max(1, min(grid, tiles * _cdiv(k, config.block_k)))
    return max(1, min(grid, tiles))


def launch_gemm(a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, bias: torch.Tensor | None,
                alpha: float, beta: float, config: GemmConfig, sm_count: int, precision: str) -> None:
    """c = alpha * a @ b + beta * bias, with bias already broadcast to a 2-D view of c's shape."""
    m, k = a.shape
    n = b.shape[1]
    if m == 0 or n == 0:
        return
    if a.dtype == torch.bfloat16 and not a.is_cuda:
        # Triton's interpreter computes tl.dot on bf16 wrongly (numpy has no bf16): hand it the exact
        # fp32 copies; the kernel still accumulates in fp32 and stores bf16.
        a, b = a.float(), b.float()
    persistent, streamk = _kernels()
    progs = program_count(config, m, n, k, sm_count)
    has_bias = bias is not None
    bias_arg = bias if has_bias else c
    sbm, sbn = bias.stride() if has_bias else (0, 0)
    (a_tma, a_col), (b_tma, b_col) = _tma_ready(a), _tma_ready(b)
    a_div, b_div = _lead_divisor(a), _lead_divisor(b)
    # A strided view the predicate could not see (it checks the dense layout) takes the pointer path.
    use_tma = config.tma and a_tma and b_tma
    if use_tma and a.is_cuda:
        _ensure_allocator()
    constexprs = dict(BLOCK_M=config.block_m, BLOCK_N=config.block_n, BLOCK_K=config.block_k,
                      GROUP_M=config.group_m, HAS_BIAS=has_bias, EVEN_K=k % config.block_k == 0,
                      PRECISION=precision, USE_TMA=use_tma, A_COL=a_col, B_COL=b_col,
                      A_LEAD_DIV=a_div, B_LEAD_DIV=b_div, FLATTEN=config.flatten,
                      WARP_SPEC=config.warp_specialize)
    options = (config.num_warps, config.num_stages)
    strides = (*a.stride(), *b.stride(), *c.stride(), sbm, sbn)
    # K == 0 has no iterations to split: the persistent kernel writes beta * bias (or zeros).
    if config.streamk and k > 0:
        tiles = _cdiv(m, config.block_m) * _cdiv(n, config.block_n)
        ws, cnt = _workspace(c.device, 2 * progs * config.block_m * config.block_n, tiles % progs)
        _launch(streamk, progs, (a, b, c, bias_arg, ws, cnt), (m, n, k, progs, *strides), (alpha, beta),
                constexprs, options)
    else:
        _launch(persistent, progs, (a, b, c, bias_arg), (m, n, k, progs, *strides), (alpha, beta),
                constexprs, options)


_compiled: dict[tuple, object] = {}
_COMPILED_CAP = 4096


def _launch(kernel, progs: int, tensors: tuple, ints: tuple, floats: tuple, constexprs: dict,
            options: tuple[int, int]) -> None:
    """Launch through triton's C launcher once the kernel is compiled for these arguments.

    `kernel[grid](...)` re-binds and re-hashes ~30 arguments on every call: ~45 us of host time per
    launch on the H200 (scripts/dispatch_overhead.py), more than a 1024^3 GEMM takes on the GPU. The
    key here is stricter than triton's specialization (exact integers, operand dtype, 16-byte
    alignment of every pointer), so a hit runs exactly the binary triton would have picked; building
    it is one tuple, not a Python loop over the arguments.
    """
    num_warps, num_stages = options
    args = (*tensors, *ints, *floats)
    if not tensors[0].is_cuda:  # the interpreter has no compiled kernel to reuse
        kernel[(progs,)](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        return
    index = tensors[0].device.index
    if index != torch.cuda.current_device():
        # Triton launches on (and loads modules into) the current device: switch to the tensors' one.
        with torch.cuda.device(index):
            _launch(kernel, progs, tensors, ints, floats, constexprs, options)
        return
    key = (id(kernel), index, options, tensors[0].dtype, *[t.data_ptr() % 16 == 0 for t in tensors],
           *ints, *constexprs.values())
    compiled = _compiled.get(key)
    if compiled is None:
        compiled = kernel[(progs,)](*args, **constexprs, num_warps=num_warps, num_stages=num_stages)
        # The fast path passes constexprs positionally: only cache when their order is the kernel's.
        if list(kernel.arg_names[len(args):]) == list(constexprs):
            if len(_compiled) >= _COMPILED_CAP:
                _compiled.clear()
            compiled._init_handles()
            _compiled[key] = compiled
        return
    stream = torch._C._cuda_getCurrentRawStream(index)
    compiled.run(progs, 1, 1, stream, compiled.function, compiled.packed_metadata, None, None, None,
                 *args, *constexprs.values())
