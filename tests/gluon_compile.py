"""Compile the Gluon block kernel (tritonblas/kernels/blockscaled_gluon.py) for sm_90 on a machine without
a GPU, and print one JSON line a case: shared memory, spilled stores, wgmma and promotion counts in the
machine code. Run as a child process by tests/test_gluon_block.py: Gluon kernels do not exist under
TRITON_INTERPRET=1, which the test process sets.

    python tests/gluon_compile.py            # every case of CASES
"""

from __future__ import annotations

import json
import os
import sys

import torch

# (out dtype, stages, bias)
CASES = [(torch.bfloat16, 6, True), (torch.float32, 5, False), (torch.float8_e4m3fn, 4, True)]


def compile_case(out_dtype: torch.dtype, stages: int, bias: bool) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    from tritonblas.launch.blockscaled import GLUON_MAXNREG, _gluon_kernel, gluon_descriptors

    kernel = _gluon_kernel()
    a = torch.empty(256, 256, dtype=torch.float8_e4m3fn)
    out = torch.empty(256, 256, dtype=out_dtype)
    descs = gluon_descriptors(a, a.t(), out)
    short = {torch.bfloat16: "bf16", torch.float32: "fp32", torch.float8_e4m3fn: "fp8e4nv"}[out_dtype]
    sig = {"c_ptr": f"*{short}", "bias_ptr": f"*{short}", "sa_ptr": "*fp32", "sb_ptr": "*fp32",
           "a_desc": mangle_type(descs[0]), "b_desc": mangle_type(descs[1]), "c_desc": mangle_type(descs[2])}
    consts = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, STAGES=stages, GROUP_M=8, SCALE_BLOCK=128,
                  HAS_BIAS=bias)
    names = kernel.arg_names
    sig.update({name: "i32" for name in names if name not in sig and name not in consts})
    sig.update({name: "constexpr" for name in consts})
    src = GluonASTSource(kernel, sig, constexprs={(names.index(k), ): v for k, v in consts.items()})
    compiled = triton.compile(src, target=GPUTarget("cuda", 90, 128),
                              options=dict(num_warps=4, maxnreg=GLUON_MAXNREG))
    sass = compiled.asm["sass"]
    return {"out": short, "stages": stages, "bias": bias, "shared": compiled.metadata.shared,
            "spills": sass.count("STL"), "wgmma": sass.count("QGMMA"),
            "waits": sass.count("WARPGROUP.DEPBAR")}


def main() -> int:
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: Gluon kernels do not exist in the interpreter")
    for case in CASES:
        print(json.dumps(compile_case(*case)), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
