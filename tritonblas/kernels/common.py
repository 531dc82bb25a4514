"""`@triton.jit` building blocks shared by every GEMM kernel: tile order, K loop, epilogue.

Every kernel path ends in `epilogue`, so bias indexing and scaling are written (and tested) once.
"""

import triton
import triton.language as tl


@triton.jit
def tile_coords(tile_id, M, N, SPEC: tl.constexpr):
    """Grouped ordering: SPEC.GROUP_M row-tiles share B tiles in L2 before moving right."""
    num_pid_m = tl.cdiv(M, SPEC.BLOCK_M)
    num_pid_n = tl.cdiv(N, SPEC.BLOCK_N)
    tiles_per_group = SPEC.GROUP_M * num_pid_n
    group_id = tile_id // tiles_per_group
    first_m = group_id * SPEC.GROUP_M
    group_rows = min(num_pid_m - first_m, SPEC.GROUP_M)
    pid_m = first_m + ((tile_id % tiles_per_group) % group_rows)
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def make_operand_descs(
    a_ptr, b_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    A_COL: tl.constexpr, B_COL: tl.constexpr,
):
    """TMA descriptors over A and B in their storage order; out-of-bounds boxes read as zeros."""
    if A_COL:
        a_desc = tl.make_tensor_descriptor(a_ptr, [K, M], [stride_ak, 1], [BLOCK_K, BLOCK_M])
    else:
        a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [stride_am, 1], [BLOCK_M, BLOCK_K])
    if B_COL:
        b_desc = tl.make_tensor_descriptor(b_ptr, [N, K], [stride_bn, 1], [BLOCK_N, BLOCK_K])
    else:
        b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [stride_bk, 1], [BLOCK_K, BLOCK_N])
    return a_desc, b_desc


@triton.jit
def operand_sources(
    a_ptr, b_ptr, a_host, b_host,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,
    SPEC: tl.constexpr,
):
    """What the K loop reads A and B through (k_loop's `ab`: the pointers, the TMA descriptors or the
    pointers again, the sizes, the strides). SPEC.HOST_DESC: the descriptors came built from the host
    (a_host, b_host: launch.gemm._host_descriptors, the same shapes, strides and boxes as
    make_operand_descs), so no program builds and fences its own: that cost a small problem's kernel
    1.1-2.3 us (016dd08:scripts/tma_desc_probe.py, graph replay, H200)."""
    a_desc, b_desc = a_ptr, b_ptr
    if SPEC.USE_TMA:
        if SPEC.HOST_DESC:
            a_desc, b_desc = a_host, b_host
        else:
            a_desc, b_desc = make_operand_descs(
                a_ptr=a_ptr, b_ptr=b_ptr,
                M=M, N=N, K=K,
                stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
                BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N, BLOCK_K=SPEC.BLOCK_K,
                A_COL=SPEC.A_COL, B_COL=SPEC.B_COL,
            )
    return a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn


@triton.jit
def widened(idx, INT64: tl.constexpr):
    """`idx` as int64 when the launch needs 64-bit offsets (INT64, chosen on the host by
    launch.gemm.needs_int64): an index times a stride then never wraps past 2**31 elements. Problems that
    fit keep 32-bit index arithmetic, as before."""
    # One return: triton refuses returns of two types even under a constexpr branch.
    wide = idx
    if INT64:
        wide = idx.to(tl.int64)
    return wide


@triton.jit
def k_step(stride, BLOCK_K: tl.constexpr, INT64: tl.constexpr):
    """The pointer increment of one K block, BLOCK_K * stride, computed in 64 bits when INT64 (a
    column-major A with M > 2**31 / BLOCK_K would wrap it in 32)."""
    step = BLOCK_K * stride
    if INT64:
        step = tl.full((), BLOCK_K, tl.int64) * stride
    return step


# fp8 dots without fast accumulation hand the tensor cores' partial sums to the fp32 accumulator at
# least every this many K elements: CUTLASS's promotion interval for Hopper fp8 (4 wgmma of K = 32), what
# cuBLAS (torch._scaled_mm with use_fast_accum=False) runs; the tensor cores' own fp8 accumulation keeps
# fewer mantissa bits than fp32 (DeepSeek-V3 report, sec. 3.3.2).
FP8_PROMOTE_K = tl.constexpr(128)


@triton.jit
def mma8(a, b, acc, FAST_ACC: tl.constexpr, BLOCK_K: tl.constexpr):
    """acc += a @ b for 8-bit operands. fp8: FAST_ACC leaves the accumulation to the tensor cores
    (triton's sm_90 default, max_num_imprecise_acc 2**30: never promoted), else promoted every
    FP8_PROMOTE_K (the accurate one, as torch._scaled_mm's use_fast_accum=False). int8: into the int32
    accumulator. The K loops call it only for 8-bit operands, so a 16- or 32-bit launch has no inlined
    scope more than before: triton 3.9's ptxas reorders instructions around a scope's debug labels."""
    if a.dtype == tl.int8:
        acc = tl.dot(a, b, acc, out_dtype=tl.int32)
    elif FAST_ACC:
        acc = tl.dot(a, b, acc)
    else:
        acc = tl.dot(a, b, acc, max_num_imprecise_acc=FP8_PROMOTE_K if BLOCK_K > FP8_PROMOTE_K else BLOCK_K)
    return acc


@triton.jit
def k_loop_tma(
    acc, a_desc, b_desc,
    pid_m, pid_n, iter_start, iter_end,
    SPEC: tl.constexpr,
):
    """acc += A[tile_m, k] @ B[k, tile_n] through TMA: the copy engine zero-fills ragged edges, so no
    masks and no index arithmetic in the loop."""
    off_m = pid_m * SPEC.BLOCK_M
    off_n = pid_n * SPEC.BLOCK_N
    for i in range(iter_start, iter_end):
        off_k = i * SPEC.BLOCK_K
        if SPEC.A_COL:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if SPEC.B_COL:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        if a.dtype.primitive_bitwidth == 8:
            acc = mma8(a=a, b=b, acc=acc, FAST_ACC=SPEC.FAST_ACC, BLOCK_K=SPEC.BLOCK_K)
        else:
            acc = tl.dot(a, b, acc, input_precision=SPEC.PRECISION)
    return acc


@triton.jit
def hinted_offsets(idx, stride, DIV: tl.constexpr):
    """idx * stride, declared a multiple of DIV. The hint goes on this tensor, not on the scalar stride:
    a hint on a kernel argument is silently dropped, which left 1024x1024x1000 bf16 at 178 us against
    12 us for 1024^3 (016dd08:scripts/ragged_probe.py, 2026-11-30)."""
    offs = idx * stride
    if DIV > 1:
        offs = tl.multiple_of(offs, DIV)
    return offs


@triton.jit
def wrapped_index(pid, extent, BLOCK: tl.constexpr, DIV: tl.constexpr):
    """(pid * BLOCK + arange(BLOCK)) % extent: rows/columns past the edge wrap to valid memory.

    When DIV (a power of two, <= 16 <= BLOCK) divides `extent`, every aligned run of DIV indices is
    still contiguous and starts at a multiple of DIV after wrapping, so the hint is true and loads
    along this axis vectorize; without it 1024x1000x1024 ran 4x slower than 1024^3."""
    idx = (pid * BLOCK + tl.arange(0, BLOCK)) % extent
    if DIV > 1:
        idx = tl.max_contiguous(tl.multiple_of(idx, DIV), DIV)
    return idx


@triton.jit
def k_loop_ptr(
    acc, a_ptr, b_ptr,
    M, N, K,
    stride_am, stride_ak, stride_bk, stride_bn,
    pid_m, pid_n, iter_start, iter_end,
    SPEC: tl.constexpr,
):
    """acc += A[tile_m, k] @ B[k, tile_n] over K iterations [iter_start, iter_end), by pointers.

    Rows/columns past M/N are wrapped (modulo) instead of masked: they read valid memory and the
    epilogue's masked store drops them. Only the ragged last K block is masked, outside the main loop.

    SPEC.A_DIV / SPEC.B_DIV: the host-verified power of two (<= 16) that divides the operand's leading stride
    and, where its contiguous axis is M (column-major A) or N (row-major B), that size too; so loads
    of A_DIV elements along the contiguous axis are aligned and contiguous. Triton itself only
    specializes integers divisible by 16, so a dimension of 1000 would load one element at a time.
    """
    rm = wrapped_index(pid=pid_m, extent=M, BLOCK=SPEC.BLOCK_M, DIV=SPEC.A_DIV if SPEC.A_COL else 1)
    rm = widened(idx=rm, INT64=SPEC.INT64)
    rn = wrapped_index(pid=pid_n, extent=N, BLOCK=SPEC.BLOCK_N, DIV=1 if SPEC.B_COL else SPEC.B_DIV)
    rn = widened(idx=rn, INT64=SPEC.INT64)
    kk = tl.arange(0, SPEC.BLOCK_K)
    rk = widened(idx=iter_start * SPEC.BLOCK_K + kk, INT64=SPEC.INT64)
    if SPEC.A_COL:
        a_ptrs = (a_ptr + rm[:, None] * stride_am
                  + hinted_offsets(idx=rk, stride=stride_ak, DIV=SPEC.A_DIV)[None, :])
    else:
        a_ptrs = (a_ptr + hinted_offsets(idx=rm, stride=stride_am, DIV=SPEC.A_DIV)[:, None]
                  + rk[None, :] * stride_ak)
    if SPEC.B_COL:
        b_ptrs = (b_ptr + rk[:, None] * stride_bk
                  + hinted_offsets(idx=rn, stride=stride_bn, DIV=SPEC.B_DIV)[None, :])
    else:
        b_ptrs = (b_ptr + hinted_offsets(idx=rk, stride=stride_bk, DIV=SPEC.B_DIV)[:, None]
                  + rn[None, :] * stride_bn)
    full_end = iter_end
    if not SPEC.EVEN_K:
        full_end = min(iter_end, K // SPEC.BLOCK_K)
    for _ in range(iter_start, full_end):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        if a.dtype.primitive_bitwidth == 8:
            acc = mma8(a=a, b=b, acc=acc, FAST_ACC=SPEC.FAST_ACC, BLOCK_K=SPEC.BLOCK_K)
        else:
            acc = tl.dot(a, b, acc, input_precision=SPEC.PRECISION)
        a_ptrs += k_step(stride=stride_ak, BLOCK_K=SPEC.BLOCK_K, INT64=SPEC.INT64)
        b_ptrs += k_step(stride=stride_bk, BLOCK_K=SPEC.BLOCK_K, INT64=SPEC.INT64)
    if not SPEC.EVEN_K:
        if iter_end > full_end:
            k_left = K - full_end * SPEC.BLOCK_K
            a = tl.load(a_ptrs, mask=kk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=kk[:, None] < k_left, other=0.0)
            if a.dtype.primitive_bitwidth == 8:
                acc = mma8(a=a, b=b, acc=acc, FAST_ACC=SPEC.FAST_ACC, BLOCK_K=SPEC.BLOCK_K)
            else:
                acc = tl.dot(a, b, acc, input_precision=SPEC.PRECISION)
    return acc


@triton.jit
def k_loop(acc, ab, pid_m, pid_n, iter_start, iter_end, SPEC: tl.constexpr):
    """The K loop of one tile (or one Stream-K segment of it), by TMA or by pointers. `ab`: what A and B
    are read through, (a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn)."""
    a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn = ab
    if SPEC.USE_TMA:
        acc = k_loop_tma(
            acc=acc, a_desc=a_desc, b_desc=b_desc,
            pid_m=pid_m, pid_n=pid_n, iter_start=iter_start, iter_end=iter_end,
            SPEC=SPEC,
        )
    else:
        acc = k_loop_ptr(
            acc=acc, a_ptr=a_ptr, b_ptr=b_ptr,
            M=M, N=N, K=K,
            stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
            pid_m=pid_m, pid_n=pid_n, iter_start=iter_start, iter_end=iter_end,
            SPEC=SPEC,
        )
    return acc


@triton.jit
def scaled(out, a_scale_ptr, b_scale_ptr, rm, rn, M, N, A_SCALE: tl.constexpr, B_SCALE: tl.constexpr):
    """out * scale_a * scale_b (see epilogue); two single values are multiplied together first, as
    cuBLASLt's tensor-wise alpha."""
    if A_SCALE == 1 and B_SCALE == 1:
        out = out * (tl.load(a_scale_ptr) * tl.load(b_scale_ptr))
    else:
        if A_SCALE == 1:
            out = out * tl.load(a_scale_ptr)
        elif A_SCALE == 2:
            out = out * tl.load(a_scale_ptr + rm, mask=rm < M, other=0.0)[:, None]
        if B_SCALE == 1:
            out = out * tl.load(b_scale_ptr)
        elif B_SCALE == 2:
            out = out * tl.load(b_scale_ptr + rn, mask=rn < N, other=0.0)[None, :]
    return out


@triton.jit
def saturated(out, dtype: tl.constexpr):
    """fp32 `out` clamped to the finite range of an fp8 `dtype` (e4m3fn +-448, e5m2 +-57344), NaN kept:
    a finite result never becomes inf or NaN (torch's saturated fp8 casts); other dtypes as they are."""
    if dtype == tl.float8e4nv:
        out = tl.clamp(out, -448.0, 448.0, propagate_nan=tl.PropagateNan.ALL)
    elif dtype == tl.float8e5:
        out = tl.clamp(out, -57344.0, 57344.0, propagate_nan=tl.PropagateNan.ALL)
    return out


@triton.jit
def epilogue(acc, out, pid_m, pid_n, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, SPEC: tl.constexpr):
    """C = alpha * (acc * scale_a * scale_b) + beta * bias in fp32, one cast to the output dtype (an
    fp8 output saturated to its finite range first), masked store. `out`: what it reads and writes,
    (c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
    alpha, beta).

    The bias is a 2-D view of what torch.addmm broadcasts (stride 0 along broadcast dims), so scalar,
    row (N,), column (M, 1) and full (M, N) biases are all the same code. SPEC.A_SCALE / SPEC.B_SCALE
    (scaled_mm): 0 none, 1 one fp32 value, 2 an fp32 vector along M (scale_a) / N (scale_b), contiguous.
    The tile is BLOCK_M x BLOCK_N (SPEC's, or a row chunk of it: fixup.chunk_epilogue).
    """
    c_ptr, bias_ptr, a_scale_ptr, b_scale_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn, \
        alpha, beta = out
    rm = widened(idx=pid_m * BLOCK_M + tl.arange(0, BLOCK_M), INT64=SPEC.INT64)
    rn = widened(idx=pid_n * BLOCK_N + tl.arange(0, BLOCK_N), INT64=SPEC.INT64)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    # (a no-op for the fp32 accumulator; an int32 one is exact, its fp32 value rounded above 2**24)
    out = acc.to(tl.float32)
    if SPEC.A_SCALE + SPEC.B_SCALE > 0:  # (called only when scaled: see mma8 on inlined scopes)
        out = scaled(out=out, a_scale_ptr=a_scale_ptr, b_scale_ptr=b_scale_ptr, rm=rm, rn=rn, M=M, N=N,
                     A_SCALE=SPEC.A_SCALE, B_SCALE=SPEC.B_SCALE)
    out = out * alpha
    if SPEC.HAS_BIAS:
        bias = tl.load(bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn, mask=mask,
                       other=0.0)
        out += bias.to(tl.float32) * beta
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    if c_ptr.dtype.element_ty.is_fp8():
        out = saturated(out=out, dtype=c_ptr.dtype.element_ty)
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=mask)


@triton.jit
def full_tiles(ab, out, first_tile, end_tile, tile_step, iters, SPEC: tl.constexpr):
    """Whole tiles first_tile, first_tile + tile_step, ... below end_tile, each over its `iters` K
    blocks: the persistent kernel's loop, and Stream-K's data-parallel one (`ab`: k_loop's, `out`:
    epilogue's)."""
    a_ptr, _, _, _, M, N, _, _, _, _, _ = ab
    # flatten lets the pipeliner prefetch the next tile's first K blocks during this tile's epilogue.
    for tile_id in tl.range(first_tile, end_tile, tile_step, flatten=SPEC.FLATTEN):
        pid_m, pid_n = tile_coords(tile_id=tile_id, M=M, N=N, SPEC=SPEC)
        # int8 operands accumulate exactly in int32 (as torch._int_mm), every other dtype in fp32
        acc = tl.zeros((SPEC.BLOCK_M, SPEC.BLOCK_N),
                       dtype=tl.int32 if a_ptr.dtype.element_ty == tl.int8 else tl.float32)
        acc = k_loop(acc=acc, ab=ab, pid_m=pid_m, pid_n=pid_n, iter_start=0, iter_end=iters, SPEC=SPEC)
        epilogue(acc=acc, out=out, pid_m=pid_m, pid_n=pid_n, BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N,
                 SPEC=SPEC)
