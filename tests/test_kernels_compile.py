"""Every kernel compiles for the H200 (sm_90) on this CPU machine: see tests/compile_sm90.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_sm90.py")
H200_SHARED = 232448  # bytes a block may opt into
GEMM_KERNELS = ("persistent_gemm_kernel", "streamk_gemm_kernel")
OTHER_KERNELS = ("splitk_reduce_kernel", "pad_copy_kernel", "pad_copy_words_kernel")
# The block-scaled kernel's 128x128 fp8 B tile (its variants' BLOCK_K x BLOCK_N, one byte each).
BLOCK_KERNEL, BLOCK_B_TILE_BYTES = "blockscaled_gemm_kernel", 128 * 128
# The GEMM variants' 64x128 bf16 B tile. The reduce and copy kernels need none: they move data between
# global memory and registers (triton 3.6 still reports 8192 bytes of layout scratch for them, 3.7+ 0).
B_TILE_BYTES = 64 * 128 * 2


@pytest.mark.skipif(sys.platform != "linux", reason="triton ships ptxas for Linux")
def test_kernels_compile_for_sm_90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPT.parent.parent), env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    # compile_sm90's gemm variants, the reduce kernel and its Stream-K mode, scaled_mm's launches (fp8,
    # int8, the reduce kernel with scales), the block-scaled kernel, the copy kernels
    assert len(lines) == 19, run.stdout
    variants = dict(line.rsplit(" ", 1) for line in lines)
    assert {name.split()[0] for name in variants} == {*GEMM_KERNELS, *OTHER_KERNELS, BLOCK_KERNEL}, run.stdout
    for name, shared in variants.items():
        # Every variant fits the H200's shared memory a block (these are 3-stage 128x128x64 tiles), and
        # wgmma reads its B operand from shared memory: a GEMM holds at least one BLOCK_K x BLOCK_N tile.
        floor = B_TILE_BYTES if name.split()[0] in GEMM_KERNELS else \
            BLOCK_B_TILE_BYTES if name.split()[0] == BLOCK_KERNEL else 0
        assert floor <= int(shared) <= H200_SHARED, f"{name}: {shared} bytes"
