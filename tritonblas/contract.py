"""The facts the Python side and the C++ side (tritonblas/native) both hold, written once: the answers a
call key is given, the ops' codes, the key's layout, the launch record's format, and the caps both
sides' caches and buffer pools keep to.

The C++ side reads them from tritonblas/native/contract.h, which `header()` writes from this module
(`python -m tritonblas.contract` rewrites it; tests/test_contract.py fails where the committed file
differs). Python modules import them from here. No imports: every layer may read it.
"""

from __future__ import annotations

import sys
from pathlib import Path

# What the Python side answered for later calls of a key: ASK (ask again), TORCH (torch's op for good),
# EAGER_TORCH (torch's op unless the stream is being captured into a CUDA graph, where the kernels win);
# for routed calls also KERNEL (the kernel, launched from C++ from its launch record).
ASK = 0
TORCH = 1
EAGER_TORCH = 2
KERNEL = 3

# Op codes (a key's first word): transparent mode's aten kernels, then the explicit ops
# (tritonblas.matmul, ...), then transparent mode's aten::_scaled_mm and aten::_grouped_mm.
ROUTED_MM = 0
ROUTED_ADDMM = 1
ROUTED_ADDMM0 = 2  # addmm with beta == 0: another plan
MATMUL = 3
ADDMM = 4
ADDMM0 = 5
LINEAR = 6
SCALED_MM = 7
ROUTED_SCALED_MM = 8
SCALED_MM_BLOCK = 9  # scaled_mm with block-wise scales that torch's block-wise op runs (the front's)
ROUTED_GROUPED_MM = 10  # transparent mode's aten::_grouped_mm: a, b and offs in slots 0-2

# A call key (int64 words): the op, a word of the op's options, then per tensor (KEY_TENSORS of them: a,
# b, the bias, out=, scaled_mm's two scales) dtype, device type, device index, dim, sizes[MAX_DIM],
# strides[MAX_DIM].
MAX_DIM = 4
KEY_TENSORS = 6
SLOT = 4 + 2 * MAX_DIM
KEY_LEN = 2 + KEY_TENSORS * SLOT

# Launch record layout (int64 words): FORMAT, the count of buffers, the count of kernel launches;
# BUFFER_WORDS per buffer (bytes, zeroed); per launch LAUNCH_HEAD words (function handle, grid
# (programs), threads a program, dynamic shared memory bytes, global scratch bytes (0: none), the count
# of kernel parameters, the count of host descriptors (0 or 2)), a (kind, value) pair per parameter,
# DESC_WORDS per host descriptor.
FORMAT = 2
HEAD = 3
BUFFER_WORDS = 2
LAUNCH_HEAD = 7
DESC_WORDS = 10
MAX_PARAMS = 96
MAX_BUFFERS = 4
MAX_LAUNCHES = 4

# What a kernel parameter takes: the call's tensors' addresses, a constant, the call's alpha / beta, a
# launch's global scratch, a host descriptor encoded for the call (value: its index, 0 for A's and 1 for
# B's), a buffer's address (value: its index), a scaled_mm call's scales' addresses.
P_A = 0
P_B = 1
P_C = 2
P_BIAS = 3
P_I32 = 4
P_I64 = 5
P_F32 = 6
P_ALPHA = 7
P_BETA = 8
P_NULL = 9
P_SCRATCH = 10
P_DESC = 11
P_BUF = 12
P_SCALE_A = 13
P_SCALE_B = 14

# torch's ScalingType codes of F.scaled_mm's block-wise scales (1x128 blocks of A's rows, 128x128 of B),
# which the front passes to aten::_scaled_mm_v2 as F.scaled_mm does (tests/test_contract.py checks torch's).
BLOCKWISE_1X128 = 4
BLOCKWISE_128X128 = 5

# Entries a cache keeps (the plans, the selections, the C++ answers); a full one is emptied whole (a
# working set never comes near it).
CACHE_CAP = 4096
# Bytes allocated into a buffer pool (launch/scratch.py's, the C++ records' kept buffers) past which it
# starts over (Python) or allocates per call (C++).
POOL_CAP_BYTES = 1 << 31

# The header's enums (int64_t underneath, as the key's and the record's words): (C++ name, its names).
ENUMS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("Answer", ("ASK", "TORCH", "EAGER_TORCH", "KERNEL")),
    ("Op", ("ROUTED_MM", "ROUTED_ADDMM", "ROUTED_ADDMM0", "MATMUL", "ADDMM", "ADDMM0", "LINEAR", "SCALED_MM",
            "ROUTED_SCALED_MM", "SCALED_MM_BLOCK", "ROUTED_GROUPED_MM")),
    ("Kind", ("P_A", "P_B", "P_C", "P_BIAS", "P_I32", "P_I64", "P_F32", "P_ALPHA", "P_BETA", "P_NULL",
              "P_SCRATCH", "P_DESC", "P_BUF", "P_SCALE_A", "P_SCALE_B")),
)
# Constants by C++ type: sizes compared with a container's size() or used as an array's are size_t.
CONSTANTS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("int", ("MAX_DIM", "KEY_TENSORS", "SLOT", "KEY_LEN")),
    ("int64_t", ("BLOCKWISE_1X128", "BLOCKWISE_128X128", "FORMAT", "HEAD", "BUFFER_WORDS", "LAUNCH_HEAD",
                 "DESC_WORDS", "MAX_BUFFERS", "MAX_LAUNCHES", "POOL_CAP_BYTES")),
    ("size_t", ("MAX_PARAMS", "CACHE_CAP")),
)
HEADER = Path(__file__).parent / "native" / "contract.h"


def header() -> str:
    """contract.h's text: every name of ENUMS and CONSTANTS with this module's value."""
    values = globals()
    lines = ["// Written by tritonblas/contract.py (python -m tritonblas.contract): the facts the Python and",
             "// C++ sides share. Edit that module, not this file; tests/test_contract.py checks they agree.",
             "#pragma once", "", "#include <cstddef>", "#include <cstdint>", "",
             "namespace tritonblas_native {", ""]
    for kind, names in CONSTANTS:
        lines += [f"constexpr {kind} {name} = {values[name]};" for name in names]
    lines.append("")
    for enum, names in ENUMS:
        items = ", ".join(f"{name} = {values[name]}" for name in names)
        lines.append(f"enum {enum} : int64_t {{ {items} }};")
    lines += ["", "}  // namespace tritonblas_native", ""]
    return "\n".join(lines)


def write(path: Path = HEADER) -> bool:
    """Write header() to `path`; whether it changed."""
    text = header()
    if path.exists() and path.read_text() == text:
        return False
    path.write_text(text)
    return True


if __name__ == "__main__":
    print(f"{HEADER}: {'written' if write() else 'unchanged'}", file=sys.stderr)
