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
