"""Grouped GEMM (mixture-of-experts layers): one persistent launch over every group's output tiles.

The groups' sizes live on the device (`offs`, torch._grouped_mm's int32 group ends), so the host never
reads them: each program loads them once into registers, numbers all groups' tiles one after another
(a cumulative sum) and runs the tiles whose number is its own modulo the grid, finding each one's group
by a comparison against those sums. (Walking the groups one dependent load at a time, as triton's
tutorial 08 does, cost ~1 us a group per program: 130 us of a 128-expert decode step.) Groups of no
rows have no tiles, so a decode step reads only the active experts' weights. Each tile is a dense tile
of its group: the K loop (pointers) and the one epilogue are common.py's.

JAGGED says which dimension `offs` cuts: 0 none (3-D x 3-D, batched), 1 the rows of a 2-D A (the MoE
forward, 2-D x 3-D), 2 the columns of a 2-D B (3-D x 2-D), 3 K (2-D x 2-D, the weight gradient).
Launched by grouped.launch (`plan`: the arguments in order and specs.GroupedSpec's fields, `run`).
"""

import triton
import triton.language as tl

from .common import epilogue, k_loop_ptr, tile_coords


@triton.jit
def group_table(offs_ptr, E, total, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                JAGGED: tl.constexpr, E_PAD: tl.constexpr):
    """Every group's (start, size) along the cut dimension and its tiles, as E_PAD-long vectors held in
    registers: one load of offs per program, no walk through the groups per tile. Group E is the tail
    past the last end (written as zeros: torch leaves it unspecified). Ends are clamped into
    [start, total], so decreasing or too large offsets never reach outside the operands."""
    gi = tl.arange(0, E_PAD)
    starts = tl.zeros((E_PAD,), dtype=tl.int32)
    ends = tl.full((E_PAD,), 0, dtype=tl.int32) + total
    if JAGGED > 0:
        starts = tl.load(offs_ptr + gi - 1, mask=(gi > 0) & (gi <= E), other=0)
        starts = tl.where(gi > E, total, starts)
        ends = tl.load(offs_ptr + gi, mask=gi < E, other=total)
        starts = tl.minimum(tl.maximum(starts, 0), total)
        ends = tl.minimum(tl.maximum(ends, starts), total)
    sizes = ends - starts
    if JAGGED == 1:
        tiles = tl.cdiv(sizes, BLOCK_M) * tl.cdiv(N, BLOCK_N)
    elif JAGGED == 2:
        tiles = tl.cdiv(M, BLOCK_M) * tl.cdiv(sizes, BLOCK_N)
    else:
        tiles = tl.where(gi < E, tl.cdiv(M, BLOCK_M) * tl.cdiv(N, BLOCK_N), 0)
    return gi, starts, sizes, tiles


@triton.jit
def pick(values, gi, g):
    """values[g] of a vector in registers."""
    return tl.sum(tl.where(gi == g, values, 0), axis=0)


@triton.jit
def k_loop_rows(
    acc, a_desc, b_desc,
    a_row0, b_row0, pid_m, pid_n, iters,
    SPEC: tl.constexpr,
):
    """acc += A @ B through 2-D TMA descriptors over the operands' storage, every group's rows one after
    another: a group's operand starts at row a_row0 / b_row0. A box that runs past a group's M (N) reads
    the next group's rows, whose products land in rows (columns) the masked store drops; one that runs
    past K is zero-filled (K is the descriptor's inner extent, or, across groups, a whole number of
    blocks: the host's condition)."""
    off_m = pid_m * SPEC.BLOCK_M
    off_n = pid_n * SPEC.BLOCK_N
    for i in range(iters):
        off_k = i * SPEC.BLOCK_K
        if SPEC.A_COL:
            a = a_desc.load([a_row0 + off_k, off_m]).T
        else:
            a = a_desc.load([a_row0 + off_m, off_k])
        if SPEC.B_COL:
            b = b_desc.load([b_row0 + off_n, off_k]).T
        else:
            b = b_desc.load([b_row0 + off_k, off_n])
        acc = tl.dot(a, b, acc, input_precision=SPEC.PRECISION)
    return acc


@triton.jit
def grouped_gemm_kernel(
    a_ptr, b_ptr, c_ptr, bias_ptr, offs_ptr, a_desc, b_desc,
    E, M, N, K, NUM_PROGS,
    stride_ag, stride_am, stride_ak,
    stride_bg, stride_bk, stride_bn,
    stride_cg, stride_cm, stride_cn,
    stride_biasg, stride_biasn,
    SPEC: tl.constexpr,  # specs.GroupedSpec: the tile, how A and B are read, the groups' form
):
    """M, N, K: each group's sizes, the jagged one the operand's whole extent. SPEC.TAIL: the rows (columns)
    past the last group end get zero tiles. Strides `_g` step from one group to the next (0 for a 2-D
    operand); a jagged group starts `start` elements along its jagged dimension."""
    total = M
    if SPEC.JAGGED == 2:
        total = N
    elif SPEC.JAGGED == 3:
        total = K
    gi, starts, sizes, tiles = group_table(offs_ptr=offs_ptr, E=E, total=total, M=M, N=N,
                                           BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N, JAGGED=SPEC.JAGGED,
                                           E_PAD=SPEC.E_PAD)
    ends = tl.cumsum(tiles, axis=0)  # each group's tiles end here, in the one numbering of all tiles
    for tile in range(tl.program_id(0), tl.sum(tiles, axis=0), NUM_PROGS):
        g = tl.sum((ends <= tile).to(tl.int32), axis=0)
        start = pick(values=starts, gi=gi, g=g)
        size = pick(values=sizes, gi=gi, g=g)
        first = pick(values=ends - tiles, gi=gi, g=g)
        m_g = M
        n_g = N
        k_g = K
        if SPEC.JAGGED == 1:
            m_g = size
        elif SPEC.JAGGED == 2:
            n_g = size
        elif SPEC.JAGGED == 3:
            k_g = size
        beta = 1.0
        if g == E:  # the tail: no product, no bias
            k_g = 0
            beta = 0.0
        # The group's bases in 64 bits: E x N x K weights pass 2**31 elements (DeepSeek-V3: 7.5e9).
        gw = tl.minimum(g, E - 1).to(tl.int64)
        start_w = start.to(tl.int64)
        a_base = a_ptr + gw * stride_ag
        b_base = b_ptr + gw * stride_bg
        c_base = c_ptr + gw * stride_cg
        bias_base = bias_ptr
        if SPEC.HAS_BIAS:
            bias_base += gw * stride_biasg
        if SPEC.JAGGED == 1:
            a_base += start_w * stride_am
            c_base += start_w * stride_cm
        elif SPEC.JAGGED == 2:
            b_base += start_w * stride_bn
            c_base += start_w * stride_cn
            if SPEC.HAS_BIAS:
                bias_base += start_w * stride_biasn
        elif SPEC.JAGGED == 3:
            a_base += start_w * stride_ak
            b_base += start_w * stride_bk
        pid_m, pid_n = tile_coords(tile_id=tile - first, M=m_g, N=n_g, SPEC=SPEC)
        acc = tl.zeros((SPEC.BLOCK_M, SPEC.BLOCK_N), dtype=tl.float32)
        iters = tl.cdiv(k_g, SPEC.BLOCK_K)
        if SPEC.USE_TMA:
            # Each operand's first row of group g in its descriptor: a 2-D operand cut along its rows
            # starts at `start`, a 3-D one at g times its rows (storage order) per group.
            if SPEC.JAGGED == 1:
                a_row0 = start
            elif SPEC.A_COL:
                a_row0 = g * K
            else:
                a_row0 = g * M
            if SPEC.JAGGED == 2:
                b_row0 = start
            elif SPEC.B_COL:
                b_row0 = g * N
            else:
                b_row0 = g * K
            acc = k_loop_rows(
                acc=acc, a_desc=a_desc, b_desc=b_desc,
                a_row0=a_row0, b_row0=b_row0, pid_m=pid_m, pid_n=pid_n, iters=iters,
                SPEC=SPEC,
            )
        else:
            acc = k_loop_ptr(
                acc=acc, a_ptr=a_base, b_ptr=b_base,
                M=m_g, N=n_g, K=k_g,
                stride_am=stride_am, stride_ak=stride_ak, stride_bk=stride_bk, stride_bn=stride_bn,
                pid_m=pid_m, pid_n=pid_n, iter_start=0, iter_end=iters,
                SPEC=SPEC,
            )
        out = (c_base, bias_base, None, None, m_g, n_g, stride_cm, stride_cn, 0, stride_biasn, 1.0, beta)
        epilogue(acc=acc, out=out, pid_m=pid_m, pid_n=pid_n, BLOCK_M=SPEC.BLOCK_M, BLOCK_N=SPEC.BLOCK_N,
                 SPEC=SPEC)
