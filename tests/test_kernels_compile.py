"""Every kernel compiles for the H200 (sm_90) on this CPU machine: see tests/compile_sm90.py."""

import os
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).with_name("compile_sm90.py")


@pytest.mark.skipif(sys.platform != "linux", reason="triton ships ptxas for Linux")
def test_kernels_compile_for_sm_90():
    env = {k: v for k, v in os.environ.items() if k != "TRITON_INTERPRET"}
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(SCRIPT.parent.parent), env.get("PYTHONPATH")]))
    run = subprocess.run([sys.executable, str(SCRIPT)], env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr[-3000:]
    lines = run.stdout.splitlines()
    # compile_sm90's gemm variants, the reduce kernel and its Stream-K mode, the copy kernel
    assert len(lines) == 11, run.stdout
    # warp_specialize on 8 warps compiles to the code without it, which is why the tuner does not try it
    assert lines.pop() == "warp_specialize_8_warps same", run.stdout
    for line in lines:
        name, shared = line.rsplit(" ", 1)
        # Every variant fits the H200's 232448 bytes a block (these are 3-stage 128x128x64 tiles).
        assert 0 < int(shared) <= 232448, line
