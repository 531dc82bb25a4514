"""Where the time of a GEMM with an odd leading dimension goes: the aligned copy vs the GEMM after it.

Usage (GPU host): python scripts/copy_probe.py [--shape 127x4097x4095] [--dtype bf16] [--json out.json]
Times (median of do_bench, us): tritonblas.matmul as dispatched; torch.mm; each operand's padded copy
as launch._aligned makes it (kernels/copy.py); a contiguous clone of B (the bandwidth reference); the
GEMM alone on operands copied beforehand (the dispatched config without the copy); and two other ways
to fill the padded layout: torch's copy_ into the padded view (launch._aligned before kernels/copy.py)
and a flat Triton copy that reads the source in aligned 16-byte runs.
"""

from __future__ import annotations

import argparse
import json

import torch
import triton
import triton.language as tl
import triton.testing

import tritonblas
from tritonblas import launch
from tritonblas.device import device_info

_DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16}


@triton.jit
def _copy_flat(src, dst, numel, cols, lead_dst, BLOCK: tl.constexpr):
    """The same copy read as one flat, aligned array: loads vectorize, stores scatter by row."""
    i = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    i = tl.max_contiguous(tl.multiple_of(i, BLOCK), BLOCK)
    mask = i < numel
    x = tl.load(src + i, mask=mask)
    tl.store(dst + (i // cols) * lead_dst + i % cols, x, mask=mask)


def us(fn) -> float:
    return triton.testing.do_bench(fn, warmup=10, rep=50) * 1000


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shape", default="127x4097x4095")
    ap.add_argument("--dtype", choices=list(_DTYPES), default="bf16")
    ap.add_argument("--json")
    args = ap.parse_args()
    m, n, k = (int(x) for x in args.shape.split("x"))
    dtype = _DTYPES[args.dtype]
    a = torch.randn(m, k, device="cuda", dtype=dtype)
    b = torch.randn(k, n, device="cuda", dtype=dtype)
    out = torch.empty(m, n, device="cuda", dtype=dtype)
    sel = tritonblas.select(m, n, k, dtype, device=a.device)
    info = device_info(a.device)
    a_al, b_al = launch._aligned(a, 2), launch._aligned(b, 3)  # slots of their own
    plain = sel.config.model_copy(update={"aligned_copy": False})
    lead = b_al.stride(0)
    buf = torch.empty(k, lead, device="cuda", dtype=dtype)
    torch_copy = lambda: buf[:, :n].copy_(b)  # noqa: E731  (launch._aligned before kernels/copy.py)
    flat = lambda: _copy_flat[(triton.cdiv(k * n, 2048),)](b, buf, k * n, n, lead, 2048)  # noqa: E731
    for fn in (torch_copy, flat):
        buf.zero_()
        fn()
        if not torch.equal(buf[:, :n], b):
            raise SystemExit(f"{fn} copied wrongly")
    times = {
        "matmul (dispatched)": us(lambda: tritonblas.matmul(a, b, out=out)),
        "torch.mm": us(lambda: torch.mm(a, b, out=out)),
        "copy A (launch._aligned)": us(lambda: launch._aligned(a, 0)),
        "copy B (launch._aligned)": us(lambda: launch._aligned(b, 1)),
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
