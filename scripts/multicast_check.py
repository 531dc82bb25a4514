"""Does the installed triton give sm_90 kernels TMA multicast across a thread-block cluster? (CPU only.)

cuBLAS's kernels for the streamk class's worst problems run in clusters (`nvjet_sm90_tst_128x160_64x5_4x1`
for 768x3072x8192, `..._320x128_64x3_1x2_..._coopB` for 2176x2176x4096: the last pair of the tile part is
the cluster shape), where one L2 read of a shared operand tile can land in the shared memory of every CTA
of the cluster. Kernel-levers row 41 found a fifth of a Gluon GEMM's time on 4096^3 spent feeding its MMA;
row 42 measured multicast anyway (scripts/gluon_cluster_probe.py, compiled by a newer triton) and it did
not buy that back. This script answers, for the triton it runs on:

1. triton.language: compiles one TMA GEMM tile for sm_90 at num_ctas 1 and 2 and reports the shared memory
   and whether the PTX has any `.multicast::cluster` copy (triton 3.6.0: none; num_ctas=2 halves the
   tile per CTA, each CTA still loading its own operands).
2. Gluon: whether `tma.async_copy_global_to_shared` / `tma.async_load` take a `multicast` argument
   (triton 3.6.0: no; triton 3.9.0's Gluon has `tma.async_load(..., multicast=True)`).

    python scripts/multicast_check.py
"""

from __future__ import annotations

import argparse
import inspect
import os
import re
import sys

import triton
import triton.language as tl
from triton.backends.compiler import GPUTarget
from triton.compiler import ASTSource


@triton.jit
def _tma_tile(a_ptr, b_ptr, c_ptr, M, N, K, BM: tl.constexpr, BN: tl.constexpr, BK: tl.constexpr):
    a_desc = tl.make_tensor_descriptor(a_ptr, [M, K], [K, 1], [BM, BK])
    b_desc = tl.make_tensor_descriptor(b_ptr, [K, N], [N, 1], [BK, BN])
    c_desc = tl.make_tensor_descriptor(c_ptr, [M, N], [N, 1], [BM, BN])
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    acc = tl.zeros([BM, BN], tl.float32)
    for k in range(0, K, BK):
        acc = tl.dot(a_desc.load([pid_m * BM, k]), b_desc.load([k, pid_n * BN]), acc)
    c_desc.store([pid_m * BM, pid_n * BN], acc.to(tl.bfloat16))


def language_multicast(num_ctas: int) -> str:
    names = _tma_tile.arg_names
    sig = dict(a_ptr="*bf16", b_ptr="*bf16", c_ptr="*bf16", M="i32", N="i32", K="i32", BM="constexpr",
               BN="constexpr", BK="constexpr")
    consts = dict(BM=256, BN=128, BK=64)
    src = ASTSource(_tma_tile, sig, constexprs={(names.index(k), ): v for k, v in consts.items()})
    try:
        compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128),
                                  options=dict(num_warps=8, num_stages=3, num_ctas=num_ctas))
    except Exception as e:  # a triton that refuses clusters says so here
        return f"num_ctas={num_ctas}: does not compile ({type(e).__name__}: {str(e).splitlines()[0][:120]})"
    ptx = compiled.asm["ptx"]
    copies = len(re.findall(r"cp\.async\.bulk\.tensor", ptx))
    multicast = len(re.findall(r"cp\.async\.bulk\.tensor\S*multicast::cluster", ptx))
    return (f"num_ctas={num_ctas}: 256x128x64 tile, shared {compiled.metadata.shared} B a CTA, "
            f"{copies} TMA copies in the PTX, {multicast} of them multicast")


def gluon_multicast() -> str:
    try:
        from triton.experimental.gluon.language.nvidia.hopper import tma
    except ImportError as e:
        return f"Gluon: not importable ({e})"
    found = []
    for name in ("async_copy_global_to_shared", "async_load"):
        fn = getattr(tma, name, None)
        if fn is not None:
            params = inspect.signature(getattr(fn, "fn", fn)).parameters
            found.append(f"tma.{name}({'multicast' if 'multicast' in params else 'no multicast'})")
    return "Gluon (hopper): " + (", ".join(found) or "no TMA load found")


def main() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0]).parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: the interpreter has nothing to compile")
    print(f"triton {triton.__version__}")
    for num_ctas in (1, 2):
        print(language_multicast(num_ctas))
    print(gluon_multicast())
    return 0


if __name__ == "__main__":
    sys.exit(main())
