"""Compile the Gluon kernels (tritonblas/kernels/blockscaled_gluon.py, scaled_gluon.py, grouped_gluon.py)
for sm_90 on a machine without a GPU, and print one JSON line a case: shared memory, spilled stores,
wgmma and wait counts in the machine code. Run as a child process by tests/test_gluon_block.py and
tests/test_gluon_grouped.py: Gluon kernels do not exist under TRITON_INTERPRET=1, which the test process
sets.

    python tests/gluon_compile.py            # every case of CASES
    python tests/gluon_compile.py --grouped  # every tile of grouped.select.GLUON_TILES
"""

from __future__ import annotations

import json
import os
import shutil
import sys

import torch

# (out dtype, stages, bias)
CASES = [(torch.bfloat16, 6, True), (torch.float32, 5, False), (torch.float8_e4m3fn, 4, True)]


def _compiled(kernel, sig: dict, consts: dict, maxnreg: int):
    """triton.compile of a Gluon kernel for the H200; `sig` the pointers' and descriptors' types (the other
    parameters are int32 or `consts`' constexprs)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource

    names = kernel.arg_names
    sig.update({name: "i32" for name in names if name not in sig and name not in consts})
    sig.update({name: "constexpr" for name in consts})
    src = GluonASTSource(kernel, sig, constexprs={(names.index(k), ): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 128), options=dict(num_warps=4, maxnreg=maxnreg))


def _counts(compiled, wgmma: str) -> dict:
    sass = compiled.asm["sass"]
    return {"shared": compiled.metadata.shared, "spills": sass.count("STL"), "wgmma": sass.count(wgmma),
            "waits": sass.count("WARPGROUP.DEPBAR")}


def compile_case(out_dtype: torch.dtype, stages: int, bias: bool, scales: str = "block") -> dict:
    """The block-scaled kernel (`scales` "block") or the tensor- and row-wise one ("row") of one case."""
    from triton.runtime.jit import mangle_type

    from tritonblas.launch.blockscaled import (
        GLUON_MAXNREG,
        _gluon_kernel,
        _scaled_gluon_kernel,
        gluon_descriptors,
    )

    kernel = _gluon_kernel() if scales == "block" else _scaled_gluon_kernel()
    a = torch.empty(256, 256, dtype=torch.float8_e4m3fn)
    out = torch.empty(256, 256, dtype=out_dtype)
    descs = gluon_descriptors(a, a.t(), out)
    short = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv"}[out_dtype]
    sig = {"c_ptr": f"*{short}", "bias_ptr": f"*{short}", "sa_ptr": "*fp32", "sb_ptr": "*fp32",
           "a_desc": mangle_type(descs[0]), "b_desc": mangle_type(descs[1]), "c_desc": mangle_type(descs[2])}
    consts = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=stages, GROUP_M=8, HAS_BIAS=bias)
    if scales == "block":
        consts["SCALE_BLOCK"] = 128
    compiled = _compiled(kernel, sig, consts, GLUON_MAXNREG)
    return {"scales": scales, "out": short, "stages": stages, "bias": bias, **_counts(compiled, "QGMMA")}


def compile_grouped(tile: tuple[int, int, int, int], stages: int, experts: int) -> dict:
    """The Gluon grouped kernel of one tile (grouped.select.GLUON_TILES) for bf16 without bias, the
    group table sized for `experts` (E_PAD)."""
    from triton.runtime.jit import mangle_type

    from tritonblas.config import GemmConfig
    from tritonblas.grouped.forms import GroupedShape
    from tritonblas.grouped.gluon import gluon_descriptors, gluon_plan
    from tritonblas.launch.blockscaled import GLUON_MAXNREG

    bm, bn, bk, warps = tile
    config = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages, tma=True,
                        gluon=True)
    a = torch.empty(1024, 512, dtype=torch.bfloat16)
    w = torch.empty(experts, 256, 512, dtype=torch.bfloat16).transpose(1, 2)
    out = torch.empty(1024, 256, dtype=torch.bfloat16)
    plan = gluon_plan(None, GroupedShape("2d3d", experts, 1024, 256, 512, (1024, 256)), out, config, 132)
    descs = gluon_descriptors(a, w, out, config)
    sig = {"c_ptr": "*bf16", "bias_ptr": "*bf16", "offs_ptr": "*i32", "a_desc": mangle_type(descs[0]),
           "b_desc": mangle_type(descs[1]), "c_desc": mangle_type(descs[2])}
    compiled = _compiled(plan.kernel, sig, dict(plan.constexprs), GLUON_MAXNREG)
    return {"tile": list(tile), "stages": stages, "experts": experts, **_counts(compiled, "HGMMA")}


def _use_system_cuobjdump() -> None:
    """A triton without its bundled cuobjdump (a copy slimmed to travel) reads SASS with the system's,
    where there is one (TRITON_CUOBJDUMP_PATH, else PATH, else CUDA's default folder)."""
    from triton import knobs

    try:
        _ = knobs.nvidia.cuobjdump.path
    except RuntimeError:
        found = shutil.which("cuobjdump") or "/usr/local/cuda/bin/cuobjdump"
        if os.path.isfile(found):
            os.environ["TRITON_CUOBJDUMP_PATH"] = found


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: Gluon kernels do not exist in the interpreter")
    _use_system_cuobjdump()
    if sys.argv[1:] == ["--grouped"]:
        from tritonblas.grouped.select import GLUON_TILES

        for i, (tile, stages) in enumerate(GLUON_TILES.items()):
            print(json.dumps(compile_grouped(tile, stages, 256 if i == 0 else 128)), flush=True)
        return 0
    for scales in ("block", "row"):
        for case in CASES:
            print(json.dumps(compile_case(*case, scales)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
