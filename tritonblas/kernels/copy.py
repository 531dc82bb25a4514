"""The aligned copy: an operand whose leading dimension is not a multiple of 16 bytes (4095, 4097) is
copied into a buffer whose rows are padded to one, so the GEMM can read it by TMA or vectorized loads.

torch's own `copy_` into the padded view cannot vectorize either side of such a copy: on the H200 it
took 45.1 us for the 4095x4097 bf16 B of 127x4097x4095, where this kernel takes 27.0 us and a plain
contiguous `clone` 24.2 us (016dd08:scripts/copy_probe.py, 2026-11-30).
"""

import triton
import triton.language as tl


@triton.jit
def pad_copy_kernel(
    src_ptr, dst_ptr,
    rows, cols,
    stride_r, stride_c, lead_dst,
    BLOCK_R: tl.constexpr, BLOCK_C: tl.constexpr,
):
    """dst[r, c] = src[r, c] for a rows x cols block each program; dst has unit column stride."""
    pid = tl.program_id(0)
    col_blocks = tl.cdiv(cols, BLOCK_C)
    # int64 row offsets: a padded operand may hold more than 2**31 elements.
    r = ((pid // col_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    c = ((pid % col_blocks) * BLOCK_C + tl.arange(0, BLOCK_C))[None, :]
    mask = (r < rows) & (c < cols)
    x = tl.load(src_ptr + r * stride_r + c * stride_c, mask=mask)
    tl.store(dst_ptr + r * lead_dst + c, x, mask=mask)


@triton.jit
def pad_copy_words_kernel(
    src_ptr, dst_ptr,
    rows, cols,
    stride_r, lead_words,
    BLOCK_R: tl.constexpr, BLOCK_W: tl.constexpr,
):
    """The aligned copy of one- and two-byte elements (fp8, int8, bf16, fp16) whose rows are contiguous,
    in 4-byte words, counting in bytes (`cols`, `stride_r`): a row of 1001 bytes starts at any byte, so
    pad_copy_kernel loads it an element at a time. Here each destination word is two aligned source
    words shifted together: loads and stores a word at a time. src_ptr must be 4-byte aligned, dst rows
    `lead_words` words apart. The bytes of a row's last word past `cols` land in the padding, which
    nothing reads (the GEMM's view and descriptors end at the row's last element)."""
    pid = tl.program_id(0)
    word_blocks = tl.cdiv(tl.cdiv(cols, 4), BLOCK_W)
    r = ((pid // word_blocks) * BLOCK_R + tl.arange(0, BLOCK_R)).to(tl.int64)[:, None]
    w = ((pid % word_blocks) * BLOCK_W + tl.arange(0, BLOCK_W))[None, :]
    row_start = r * stride_r  # in bytes
    first = row_start // 4  # the aligned word holding the row's first byte
    shift = ((row_start % 4) * 8).to(tl.uint32)
    src = src_ptr.to(tl.pointer_type(tl.uint32))
    dst = dst_ptr.to(tl.pointer_type(tl.uint32))
    inside = (r < rows) & (w * 4 < cols)
    lo = tl.load(src + first + w, mask=inside, other=0)
    # the next word only where it holds bytes of this row: never a byte past the source's end
    hi = tl.load(src + first + w + 1, mask=inside & ((first + w + 1) * 4 < row_start + cols), other=0)
    word = tl.where(shift == 0, lo, (lo >> shift) | (hi << ((32 - shift) % 32)))
    tl.store(dst + r * lead_words + w, word, mask=inside)
