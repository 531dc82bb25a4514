"""scaled_mm with block-wise fp8 scales (DeepSeek-V3, transformers' FineGrainedFP8): A scaled per 1x128
block of a row, B per 128x128 block, one persistent launch over the output tiles.

The scales change every 128 elements of K, so they cannot wait for the epilogue as tensor- and row-wise
ones do. Each K step (BLOCK_K divides SCALE_BLOCK, so a step never straddles two blocks) takes a fresh
tensor-core product and adds it to the fp32 accumulator times scale_a[rows, kb] * scale_b[kb, cols //
SCALE_BLOCK]: a scale constant over its block factors out of that block's steps, and the product is
promoted to fp32 every BLOCK_K elements (DeepSeek-V3's accurate accumulation), whatever use_fast_accum
says. One flat K loop, so triton software-pipelines the operand and scale loads across block boundaries.
The epilogue is common.py's with no scale of its own (A_SCALE = B_SCALE = 0): the bias and the one cast.
Persistent scheduling only: a Stream-K segment would hand the fix-up partial sums (config.block_refusal).
Operands through TMA descriptors (USE_TMA) or pointers, rows and columns past the edge wrapped as
k_loop_ptr's. Launched by launch.blockscaled (`block_plan`: specs.BlockSpec; launch.arguments.block_args).
"""

import triton
import triton.language as tl

from .common import epilogue, hinted_offsets, k_step, make_operand_descs, tile_coords, widened, wrapped_index


@triton.jit
def operand_pointers(a_ptr, b_ptr, rm, rn, rk, stride_am, stride_ak, stride_bk, stride_bn,
                     A_COL: tl.constexpr, B_COL: tl.constexpr, A_DIV: tl.constexpr, B_DIV: tl.constexpr):
    """Pointers to a tile's first K step of A (rm x rk) and B (rk x rn), the contiguous axis hinted."""
    if A_COL:
        a_ptrs = (a_ptr + rm[:, None] * stride_am
                  + hinted_offsets(idx=rk, stride=stride_ak, DIV=A_DIV)[None, :])
    else:
        a_ptrs = (a_ptr + hinted_offsets(idx=rm, stride=stride_am, DIV=A_DIV)[:, None]
                  + rk[None, :] * stride_ak)
    if B_COL:
        b_ptrs = (b_ptr + rk[:, None] * stride_bk
                  + hinted_offsets(idx=rn, stride=stride_bn, DIV=B_DIV)[None, :])
    else:
        b_ptrs = (b_ptr + hinted_offsets(idx=rk, stride=stride_bk, DIV=B_DIV)[:, None]
                  + rn[None, :] * stride_bn)
    return a_ptrs, b_ptrs


@triton.jit
def step_operands(a_src, b_src, a_ptrs, b_ptrs, off_m, off_n, step, k_left,
                  BLOCK_K: tl.constexpr, USE_TMA: tl.constexpr, MASK_K: tl.constexpr,
                  A_COL: tl.constexpr, B_COL: tl.constexpr):
    """One K step's A and B tiles: TMA boxes (ragged edges zero-filled by the copy engine), or loads
    through the step's pointers, masked along K where MASK_K (K not a whole number of steps)."""
    if USE_TMA:
        off_k = step * BLOCK_K
        if A_COL:
            a = a_src.load([off_k, off_m]).T
        else:
            a = a_src.load([off_m, off_k])
        if B_COL:
            b = b_src.load([off_n, off_k]).T
        else:
            b = b_src.load([off_k, off_n])
    elif MASK_K:
        kk = tl.arange(0, BLOCK_K)
        a = tl.load(a_ptrs, mask=kk[None, :] < k_left, other=0.0)
        b = tl.load(b_ptrs, mask=kk[:, None] < k_left, other=0.0)
    else:
        a = tl.load(a_ptrs)
        b = tl.load(b_ptrs)
    return a, b


@triton.jit
def blockscaled_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, sa_ptr, sb_ptr,
    M, N, K, NUM_PROGS,
    stride_am, stride_ak, stride_bk, stride_bn, stride_cm, stride_cn, stride_biasm, stride_biasn,
    stride_sam, stride_sak, stride_sbk, stride_sbn,
    SPEC: tl.constexpr,  # specs.BlockSpec: the tile, how A and B are read, the scales' block, the bias
):
    """C = sum over K steps s of (A[:, s] @ B[s, :]) * scale_a[:, kb(s)] * scale_b[kb(s), n // SCALE_BLOCK]
    (+ bias), in fp32, cast once (SCALE_BLOCK: SPEC's)."""
    num_tiles = tl.cdiv(M, SPEC.BLOCK_M) * tl.cdiv(N, SPEC.BLOCK_N)
    iters = tl.cdiv(K, SPEC.BLOCK_K)
    a_src, b_src = a_ptr, b_ptr
    if SPEC.USE_TMA:
        a_src, b_src = make_operand_descs(
            a_ptr=a_ptr, b_ptr=b_ptr,
            M=M, N=N, K=K,
            stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
            BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N, BLOCK_K=SPEC.BLOCK_K,
            A_COL=SPEC.A_COL, B_COL=SPEC.B_COL,
        )
    for tile_id in tl.range(tl.program_id(0), num_tiles, NUM_PROGS):
        pid_m, pid_n = tile_coords(tile_id=tile_id, M=M, N=N, SPEC=SPEC)
        # Wrapped rows and columns: every load in bounds, the epilogue's masked store drops the extra.
        rm = widened(idx=wrapped_index(pid=pid_m, extent=M, BLOCK=SPEC.BLOCK_M,
                                       DIV=SPEC.A_DIV if SPEC.A_COL else 1),
                     INT64=SPEC.INT64)
        rn = widened(idx=wrapped_index(pid=pid_n, extent=N, BLOCK=SPEC.BLOCK_N,
                                       DIV=1 if SPEC.B_COL else SPEC.B_DIV),
                     INT64=SPEC.INT64)
        a_ptrs, b_ptrs = operand_pointers(
            a_ptr=a_ptr, b_ptr=b_ptr, rm=rm, rn=rn,
            rk=widened(idx=tl.arange(0, SPEC.BLOCK_K), INT64=SPEC.INT64),
            stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
            A_COL=SPEC.A_COL, B_COL=SPEC.B_COL, A_DIV=SPEC.A_DIV, B_DIV=SPEC.B_DIV,
        )
        sa_ptrs = sa_ptr + rm * stride_sam
        # the tile's columns lie in one 128-column block: one B scale a step
        if SPEC.BLOCK_N <= SPEC.SCALE_BLOCK:
            sb_ptrs = sb_ptr + ((pid_n * SPEC.BLOCK_N) // SPEC.SCALE_BLOCK) * stride_sbn
        else:
            sb_ptrs = sb_ptr + (rn // SPEC.SCALE_BLOCK) * stride_sbn
        acc = tl.zeros((SPEC.BLOCK_M, SPEC.BLOCK_N), dtype=tl.float32)
        # Warp-specialized where the operands come by TMA (one producer warp group feeding the MMA ones).
        for step in tl.range(0, iters, warp_specialize=SPEC.USE_TMA):
            a, b = step_operands(
                a_src=a_src, b_src=b_src, a_ptrs=a_ptrs, b_ptrs=b_ptrs,
                off_m=pid_m * SPEC.BLOCK_M, off_n=pid_n * SPEC.BLOCK_N, step=step,
                k_left=K - step * SPEC.BLOCK_K,
                BLOCK_K=SPEC.BLOCK_K, USE_TMA=SPEC.USE_TMA, MASK_K=not SPEC.EVEN_K, A_COL=SPEC.A_COL,
                B_COL=SPEC.B_COL,
            )
            kb = (step * SPEC.BLOCK_K) // SPEC.SCALE_BLOCK
            sa = tl.load(sa_ptrs + kb * stride_sak)
            # The promotion costs CUDA-core work on every accumulator element each step: one FMA by a
            # per-row factor where the B scale is one number, twice the H200's rate of a full scale tile.
            if SPEC.BLOCK_N <= SPEC.SCALE_BLOCK:
                acc += tl.dot(a, b) * (sa * tl.load(sb_ptrs + kb * stride_sbk))[:, None]
            else:
                acc += tl.dot(a, b) * (sa[:, None] * tl.load(sb_ptrs + kb * stride_sbk)[None, :])
            if not SPEC.USE_TMA:
                a_ptrs += k_step(stride=stride_ak, BLOCK_K=SPEC.BLOCK_K, INT64=SPEC.INT64)
                b_ptrs += k_step(stride=stride_bk, BLOCK_K=SPEC.BLOCK_K, INT64=SPEC.INT64)
        out = (c_ptr, bias_ptr, None, None, M, N, stride_cm, stride_cn, stride_biasm, stride_biasn, 1.0, 1.0)
        epilogue(acc=acc, out=out, pid_m=pid_m, pid_n=pid_n, BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N,
                 SPEC=SPEC)
