"""`@triton.jit` building blocks shared by every GEMM kernel: tile order, K loop, epilogue.

Every kernel path ends in `epilogue`, so bias indexing and scaling are written (and tested) once.
"""

import triton
import triton.language as tl


@triton.jit
def tile_coords(tile_id, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, GROUP_M: tl.constexpr):
    """Grouped ordering: GROUP_M row-tiles share B tiles in L2 before moving right."""
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    tiles_per_group = GROUP_M * num_pid_n
    group_id = tile_id // tiles_per_group
    first_m = group_id * GROUP_M
    group_rows = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + ((tile_id % tiles_per_group) % group_rows)
    pid_n = (tile_id % tiles_per_group) // group_rows
    return pid_m, pid_n


@triton.jit
def make_operand_descs(a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                       A_COL: tl.constexpr, B_COL: tl.constexpr):
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
def k_loop_tma(acc, a_desc, b_desc, pid_m, pid_n, iter_start, iter_end,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               A_COL: tl.constexpr, B_COL: tl.constexpr, PRECISION: tl.constexpr):
    """acc += A[tile_m, k] @ B[k, tile_n] through TMA: the copy engine zero-fills ragged edges, so no
    masks and no index arithmetic in the loop."""
    off_m = pid_m * BLOCK_M
    off_n = pid_n * BLOCK_N
    for i in range(iter_start, iter_end):
        off_k = i * BLOCK_K
        if A_COL:
            a = a_desc.load([off_k, off_m]).T
        else:
            a = a_desc.load([off_m, off_k])
        if B_COL:
            b = b_desc.load([off_n, off_k]).T
        else:
            b = b_desc.load([off_k, off_n])
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def k_loop_ptr(acc, a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
               pid_m, pid_n, iter_start, iter_end,
               BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
               EVEN_K: tl.constexpr, PRECISION: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
               A_LEAD_DIV: tl.constexpr, B_LEAD_DIV: tl.constexpr):
    """acc += A[tile_m, k] @ B[k, tile_n] over K iterations [iter_start, iter_end), by pointers.

    Rows/columns past M/N are wrapped (modulo) instead of masked: they read valid memory and the
    epilogue's masked store drops them. Only the ragged last K block is masked, outside the main loop.
    No contiguity hints on the wrapped indices: they are not contiguous at a ragged edge, and a false
    hint is how vectorized loads read the wrong address.

    A_LEAD_DIV / B_LEAD_DIV: the host-verified power of two dividing each operand's leading stride.
    Triton only specializes integers divisible by 16, so a leading dim of 1000 (16-byte rows in bf16)
    would otherwise load one element at a time: 1000^3 bf16 ran at 0.18x torch.mm without the hint.
    """
    if A_LEAD_DIV > 1:  # a stride of 1 reaches the compiler as constexpr 1, which takes no hint
        if A_COL:
            stride_ak = tl.multiple_of(stride_ak, A_LEAD_DIV)
        else:
            stride_am = tl.multiple_of(stride_am, A_LEAD_DIV)
    if B_LEAD_DIV > 1:
        if B_COL:
            stride_bn = tl.multiple_of(stride_bn, B_LEAD_DIV)
        else:
            stride_bk = tl.multiple_of(stride_bk, B_LEAD_DIV)
    rm = (pid_m * BLOCK_M + tl.arange(0, BLOCK_M)) % M
    rn = (pid_n * BLOCK_N + tl.arange(0, BLOCK_N)) % N
    rk = tl.arange(0, BLOCK_K)
    a_ptrs = a_ptr + rm[:, None] * stride_am + (iter_start * BLOCK_K + rk)[None, :] * stride_ak
    b_ptrs = b_ptr + (iter_start * BLOCK_K + rk)[:, None] * stride_bk + rn[None, :] * stride_bn
    full_end = iter_end
    if not EVEN_K:
        full_end = min(iter_end, K // BLOCK_K)
    for _ in range(iter_start, full_end):
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
        acc = tl.dot(a, b, acc, input_precision=PRECISION)
        a_ptrs += BLOCK_K * stride_ak
        b_ptrs += BLOCK_K * stride_bk
    if not EVEN_K:
        if iter_end > full_end:
            k_left = K - full_end * BLOCK_K
            a = tl.load(a_ptrs, mask=rk[None, :] < k_left, other=0.0)
            b = tl.load(b_ptrs, mask=rk[:, None] < k_left, other=0.0)
            acc = tl.dot(a, b, acc, input_precision=PRECISION)
    return acc


@triton.jit
def k_loop(acc, a_ptr, b_ptr, a_desc, b_desc, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
           pid_m, pid_n, iter_start, iter_end,
           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, EVEN_K: tl.constexpr,
           PRECISION: tl.constexpr, USE_TMA: tl.constexpr, A_COL: tl.constexpr, B_COL: tl.constexpr,
           A_LEAD_DIV: tl.constexpr, B_LEAD_DIV: tl.constexpr):
    """The K loop of one tile (or one Stream-K segment of it), by TMA or by pointers."""
    if USE_TMA:
        acc = k_loop_tma(acc, a_desc, b_desc, pid_m, pid_n, iter_start, iter_end,
                         BLOCK_M, BLOCK_N, BLOCK_K, A_COL, B_COL, PRECISION)
    else:
        acc = k_loop_ptr(acc, a_ptr, b_ptr, M, N, K, stride_am, stride_ak, stride_bk, stride_bn,
                         pid_m, pid_n, iter_start, iter_end, BLOCK_M, BLOCK_N, BLOCK_K, EVEN_K, PRECISION,
                         A_COL, B_COL, A_LEAD_DIV, B_LEAD_DIV)
    return acc


@triton.jit
def epilogue(acc, c_ptr, bias_ptr, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn,
             alpha, beta, pid_m, pid_n,
             BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, HAS_BIAS: tl.constexpr):
    """out = alpha * acc + beta * bias in fp32, one cast to the output dtype, masked store.

    The bias is a 2-D view of what torch.addmm broadcasts (stride 0 along broadcast dims), so scalar,
    row (N,), column (M, 1) and full (M, N) biases are all the same code.
    """
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    mask = (rm < M)[:, None] & (rn < N)[None, :]
    out = acc * alpha
    if HAS_BIAS:
        bias = tl.load(bias_ptr + rm[:, None] * stride_biasm + rn[None, :] * stride_biasn, mask=mask,
                       other=0.0)
        out += bias.to(tl.float32) * beta
    c_ptrs = c_ptr + rm[:, None] * stride_cm + rn[None, :] * stride_cn
    tl.store(c_ptrs, out.to(c_ptr.dtype.element_ty), mask=mask)
