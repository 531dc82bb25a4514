"""Compile tritonblas' kernels for sm_90 on a machine without a GPU (ptxas ships with triton): the
interpreter runs what triton's compiler may refuse (a jit helper with two return types ran in the
interpreter and failed to compile on the H200). Run as a script, without TRITON_INTERPRET, by
tests/test_kernels_compile.py; prints one line per kernel variant: name, shared memory bytes.
"""

import itertools
import os
import sys

if os.environ.get("TRITON_INTERPRET") == "1":
    sys.exit("run without TRITON_INTERPRET=1: the interpreter has nothing to compile")

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from tritonblas.kernels.blockscaled import blockscaled_gemm_kernel  # noqa: E402
from tritonblas.kernels.copy import pad_copy_kernel, pad_copy_words_kernel  # noqa: E402
from tritonblas.kernels.persistent import persistent_gemm_kernel  # noqa: E402
from tritonblas.kernels.reduce import splitk_reduce_kernel  # noqa: E402
from tritonblas.kernels.specs import kernel_constexprs  # noqa: E402
from tritonblas.kernels.streamk import streamk_gemm_kernel  # noqa: E402

H200 = GPUTarget("cuda", 90, 128)
POINTERS = {"a_ptr": "*bf16", "b_ptr": "*bf16", "c_ptr": "*bf16", "bias_ptr": "*bf16", "ws_ptr": "*fp32",
            "counter_ptr": "*i32", "src_ptr": "*fp16", "dst_ptr": "*fp16"}


def compile_kernel(kernel, constexprs: dict, num_warps: int = 8, num_stages: int = 3,
                   types: dict | None = None, ptx: bool = False) -> int | str:
    """`constexprs`: the kernel's compile-time choices by name (bundled into its `S` where it takes one:
    kernels/specs.py) and the arguments compiled in as None."""
    choices = {name: value for name, value in constexprs.items() if name.isupper()}
    constexprs = {name: value for name, value in constexprs.items() if not name.isupper()}
    constexprs.update(kernel_constexprs(kernel, choices))
    names = kernel.arg_names
    sig = {}
    for name in names:
        if name in constexprs:
            sig[name] = "constexpr"
        elif types and name in types:
            sig[name] = types[name]
        elif name in POINTERS:
            sig[name] = POINTERS[name]
        else:
            sig[name] = "fp32" if name in ("alpha", "beta") else "i32"
    src = ASTSource(kernel, sig, constexprs={(names.index(k),): v for k, v in constexprs.items()})
    compiled = triton.compile(src, target=H200, options=dict(num_warps=num_warps, num_stages=num_stages))
    return compiled.asm["ptx"] if ptx else compiled.metadata.shared


def gemm_constexprs(kernel, **changes) -> dict:
    """The GEMM kernels' constexprs with `changes` on top of: 128x128x64 tiles, a bias, pointer loads of
    row-major operands, 32-bit offsets, descriptors built in the kernel (HOST_DESC: a_host and b_host are
    then arguments, not constants), and for Stream-K whole partials summed on arrival."""
    constexprs = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=64, GROUP_M=8, HAS_BIAS=True, EVEN_K=True,
                      PRECISION="ieee", USE_TMA=False, A_COL=False, B_COL=False, A_DIV=8, B_DIV=8,
                      FLATTEN=False, INT64=False, HOST_DESC=False, a_host=None, b_host=None,
                      A_SCALE=0, B_SCALE=0, FAST_ACC=False, a_scale_ptr=None, b_scale_ptr=None)
    if kernel is streamk_gemm_kernel:
        constexprs.update(FIXUP_CHUNKS=1, DEFERRED=False, REDUCE=False)
    constexprs.update(changes)
    if constexprs["HOST_DESC"]:
        del constexprs["a_host"], constexprs["b_host"]
    if constexprs["A_SCALE"] or constexprs["B_SCALE"]:  # (scales given: pointer arguments, not None)
        del constexprs["a_scale_ptr"], constexprs["b_scale_ptr"]
    return constexprs


def gemm_variants():
    """Each GEMM kernel once by pointers (ragged K, column-major B) and once by TMA (column-major A), both
    with 64-bit offsets: the 32-bit variants are the same code minus the widening, and the GPU suite
    compiles them on every run."""
    for kernel, tma in itertools.product((persistent_gemm_kernel, streamk_gemm_kernel), (False, True)):
        constexprs = gemm_constexprs(kernel, EVEN_K=tma, USE_TMA=tma, A_COL=tma, B_COL=not tma, INT64=True)
        yield f"{kernel.__name__} tma={tma} int64=True", kernel, constexprs, None
    # The Stream-K fix-up in row chunks, deferred (FIXUP_CHUNKS 8: config.fixup_plan's for 128x128).
    constexprs = gemm_constexprs(streamk_gemm_kernel, USE_TMA=True, FIXUP_CHUNKS=8, DEFERRED=True)
    yield "streamk_gemm_kernel tma=True chunked fix-up, deferred", streamk_gemm_kernel, constexprs, None
    # Host-built descriptors (kernel arguments of triton's tensordesc type), A column-major as above.
    for kernel in (persistent_gemm_kernel, streamk_gemm_kernel):
        constexprs = gemm_constexprs(kernel, USE_TMA=True, A_COL=True, HOST_DESC=True)
        if kernel is streamk_gemm_kernel:
            constexprs.update(FIXUP_CHUNKS=4)
        types = {"a_host": "tensordesc<bf16[64, 128]>", "b_host": "tensordesc<bf16[64, 128]>"}
        yield f"{kernel.__name__} tma=True host descriptors", kernel, constexprs, types


def reduce_variants():
    """Stream-K with its fix-up left to kernels/reduce.py (REDUCE), and that kernel (8 chunks, a bias)."""
    yield "streamk_gemm_kernel reduce kernel next", streamk_gemm_kernel, \
        gemm_constexprs(streamk_gemm_kernel, REDUCE=True), None
    constexprs = dict(BLOCK_M=128, BLOCK_N=128, GROUP_M=8, HAS_BIAS=True, INT64=False, FIXUP_CHUNKS=8,
                      A_SCALE=0, B_SCALE=0, a_scale_ptr=None, b_scale_ptr=None)
    yield "splitk_reduce_kernel", splitk_reduce_kernel, constexprs, None


def _quant_types(a: str, b: str, out: str) -> dict:
    return {"a_ptr": f"*{a}", "b_ptr": f"*{b}", "c_ptr": f"*{out}", "bias_ptr": "*bf16",
            "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"}


def quant_variants():
    """scaled_mm's launches (kernels/common.epilogue's scales, int32 accumulation, fp8 saturation):
    fp8 by pointers (e4m3 x e5m2, row-wise scales, accurate accumulation, B column-major: "nt"), by TMA
    (tensor-wise, fast accumulation, an fp8 output), Stream-K with its chunked fix-up (row_a) and with
    the reduce kernel, and int8 (int32 accumulators; Stream-K partials converted to fp32)."""
    fp8 = dict(BLOCK_K=128, A_DIV=16, B_DIV=16)
    yield "persistent_gemm_kernel fp8 e4m3xe5m2->bf16 row", persistent_gemm_kernel, gemm_constexprs(
        persistent_gemm_kernel, B_COL=True, A_SCALE=2, B_SCALE=2, **fp8), \
        _quant_types("fp8e4nv", "fp8e5", "bf16")
    yield "persistent_gemm_kernel fp8 e4m3->e4m3 tensor tma fast", persistent_gemm_kernel, gemm_constexprs(
        persistent_gemm_kernel, USE_TMA=True, B_COL=True, A_SCALE=1, B_SCALE=1, FAST_ACC=True, **fp8), \
        _quant_types("fp8e4nv", "fp8e4nv", "fp8e4nv")
    yield "streamk_gemm_kernel fp8 e4m3->fp16 row_a chunked", streamk_gemm_kernel, gemm_constexprs(
        streamk_gemm_kernel, B_COL=True, A_SCALE=2, B_SCALE=1, FIXUP_CHUNKS=4, **fp8), \
        _quant_types("fp8e4nv", "fp8e4nv", "fp16")
    yield "streamk_gemm_kernel int8->bf16 row reduce kernel next", streamk_gemm_kernel, gemm_constexprs(
        streamk_gemm_kernel, B_COL=True, A_SCALE=2, B_SCALE=2, REDUCE=True, **fp8), \
        _quant_types("i8", "i8", "bf16")
    yield "persistent_gemm_kernel int8->fp32 tensor", persistent_gemm_kernel, gemm_constexprs(
        persistent_gemm_kernel, A_SCALE=1, B_SCALE=1, **fp8), _quant_types("i8", "i8", "fp32")
    constexprs = dict(BLOCK_M=128, BLOCK_N=128, GROUP_M=8, HAS_BIAS=True, INT64=False, FIXUP_CHUNKS=8,
                      A_SCALE=2, B_SCALE=2)
    yield "splitk_reduce_kernel row scales -> e5m2", splitk_reduce_kernel, constexprs, \
        {"c_ptr": "*fp8e5", "a_scale_ptr": "*fp32", "b_scale_ptr": "*fp32"}


def block_variants():
    """scaled_mm with block-wise scales (kernels/blockscaled.py): e4m3 x e5m2 -> bf16 by pointers with a
    ragged K, B column-major, 64-bit offsets and a 256-column tile (a vector of B scales); e4m3 -> e4m3 by
    TMA (warp-specialized K loop) with A column-major and one B scale a tile."""
    constexprs = dict(BLOCK_M=128, BLOCK_N=256, BLOCK_K=128, GROUP_M=8, HAS_BIAS=True, EVEN_K=False,
                      USE_TMA=False, A_COL=False, B_COL=True, A_DIV=16, B_DIV=16, INT64=True,
                      SCALE_BLOCK=128)
    types = {"a_ptr": "*fp8e4nv", "b_ptr": "*fp8e5", "c_ptr": "*bf16", "bias_ptr": "*bf16", "sa_ptr": "*fp32",
             "sb_ptr": "*fp32"}
    yield "blockscaled_gemm_kernel e4m3xe5m2->bf16 ragged K", blockscaled_gemm_kernel, constexprs, types
    constexprs = dict(constexprs, BLOCK_N=128, EVEN_K=True, USE_TMA=True, A_COL=True, B_COL=False,
                      INT64=False)
    types = dict(types, b_ptr="*fp8e4nv", c_ptr="*fp8e4nv")
    yield "blockscaled_gemm_kernel e4m3->e4m3 tma", blockscaled_gemm_kernel, constexprs, types


def main() -> None:
    for name, kernel, constexprs, types in (*gemm_variants(), *reduce_variants(), *quant_variants(),
                                            *block_variants()):
        print(name, compile_kernel(kernel, constexprs, types=types), flush=True)
    print("pad_copy_kernel", compile_kernel(pad_copy_kernel, dict(BLOCK_R=16, BLOCK_C=256), 4, 1))
    fp8 = {"src_ptr": "*fp8e4nv", "dst_ptr": "*fp8e4nv"}
    print("pad_copy_words_kernel e4m3",
          compile_kernel(pad_copy_words_kernel, dict(BLOCK_R=4, BLOCK_W=256), 4, 1, types=fp8))


if __name__ == "__main__":
    main()
