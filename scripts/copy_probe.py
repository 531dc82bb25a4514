"""Where the time of a GEMM with an odd leading dimension goes: the aligned copy vs the GEMM after it.

Usage (GPU host): python scripts/copy_probe.py [--shape 127x4097x4095] [--dtype bf16] [--json out.json]
Times (median of do_bench, us): tritonblas.matmul as dispatched; torch.mm; each operand's padded copy
by the library's copy kernel (kernels/copy.py, the 16x256 blocks launch uses for aligned_copy); a
contiguous clone of B (the bandwidth reference); the GEMM alone on operands copied beforehand (the
dispatched config without the copy, through launch.launch_gemm); and two other ways to fill the padded
layout: torch's copy_ into the padded view (the aligned copy before kernels/copy.py) and a flat Triton
copy that reads the source in aligned 16-byte runs.
"""

from __future__ import annotations

import argparse
import json

import triton
import triton.language as tl

# The block of each program of the library's copy kernel, as launch uses it for aligned_copy.
COPY_ROWS, COPY_COLS = 16, 256


@triton.jit
def _copy_flat(src, dst, numel, cols, lead_dst, BLOCK: tl.constexpr):
    """The same copy read as one flat, aligned array: loads vectorize, stores scatter by row."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.max_contiguous(tl.multiple_of(i, BLOCK), BLOCK)
    mask = i < numel
    x = tl.load(src + i, mask=mask)
    tl.store(dst + (i // cols) * lead_dst + i % cols, x, mask=mask)


def us(fn) -> float:
    import triton.testing

    return triton.testing.do_bench(fn, warmup=10, rep=50) * 1000


def padded(t):
    """An empty buffer for row-major `t` with its leading dim rounded up to 16 bytes, and a function
    that copies `t` into it with the library's copy kernel; returns (the aligned view, the copy)."""
    import torch

    from tritonblas.config import aligned_leading_dim
    from tritonblas.kernels.copy import pad_copy_kernel

    rows, cols = t.shape
    buf = torch.empty(rows, aligned_leading_dim(cols, t.element_size()), device=t.device, dtype=t.dtype)
    grid = (triton.cdiv(rows, COPY_ROWS) * triton.cdiv(cols, COPY_COLS),)

    def copy():
        pad_copy_kernel[grid](t, buf, rows, cols, t.stride(0), t.stride(1), buf.stride(0),
                              BLOCK_R=COPY_ROWS, BLOCK_C=COPY_COLS, num_warps=4, num_stages=1)
    return buf[:, :cols], copy


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="127x4097x4095")
    ap.add_argument("--dtype", choices=["bf16", "fp16"], default="bf16")
    ap.add_argument("--json")
    args = ap.parse_args()
    import torch

    import tritonblas
    from tritonblas import launch
    from tritonblas.device import device_info

    if not torch.cuda.is_available():
        raise SystemExit("copy_probe.py measures on a GPU; none is available")
    m, n, k = (int(x) for x in args.shape.split("x"))
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[args.dtype]
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    sel = tritonblas.select(m, n, k, dtype, device=a.device, backend="triton")  # the kernels' copy path
    info = device_info(a.device)
    (a_al, copy_a), (b_al, copy_b) = padded(a), padded(b)
    plain = sel.config.model_copy(update={"aligned_copy": False})
    lead = b_al.stride(0)
    buf = torch.empty(k, lead, device="cuda", dtype=dtype)
    torch_copy = lambda: buf[:, :n].copy_(b)  # noqa: E731  (the aligned copy before kernels/copy.py)
    flat = lambda: _copy_flat[(triton.cdiv(k * n, 2048),)](b, buf, k * n, n, lead, 2048)  # noqa: E731
    for name, fn, got, want in (("copy A", copy_a, a_al, a), ("copy B", copy_b, b_al, b),
                                ("torch copy_", torch_copy, buf[:, :n], b), ("flat", flat, buf[:, :n], b)):
        got.zero_()
        fn()
        if not torch.equal(got, want):
            raise SystemExit(f"{name} copied wrongly")
    times = {
        "matmul (dispatched)": us(lambda: tritonblas.matmul(a, b, out=out, backend="triton")),
        "torch.mm": us(lambda: torch.mm(a, b, out=out)),
        "copy A (kernels/copy.py)": us(copy_a),
        "copy B (kernels/copy.py)": us(copy_b),
        "B.clone()": us(lambda: b.clone()),
        "GEMM on copies": us(lambda: launch.launch_gemm(a_al, b_al, out, None, 1.0, 0.0, plain,
                                                        info.sm_count, "tf32")),
        "copy B, torch copy_": us(torch_copy),
        "copy B, triton flat": us(flat),
    }
    print(f"{args.shape} {args.dtype}, config {sel.config.short()} ({sel.source})")
    for name, t in times.items():
        print(f"  {name:28s} {t:8.1f} us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"shape": args.shape, "dtype": args.dtype, "config": sel.config.short(),
                       "us": times}, f, indent=1)


if __name__ == "__main__":
    main()
