"""Helpers the Gluon probes in scripts/ share (gluon_probe.py, gluon_pingpong_probe.py, gluon_tall_probe.py,
gluon_cluster_probe.py, gluon_splitk_probe.py): the grouped tile order and a register store as jit
functions, register budgets, shared layouts, an sm_90 compile check that needs no GPU, and the timing
against torch.mm every probe reports. A package, not a script: scripts/*.py are the commands."""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

import torch
import triton
from triton.experimental import gluon
from triton.experimental.gluon import language as gl
from triton.experimental.gluon.language.nvidia.hopper import warpgroup_mma, warpgroup_mma_wait
from triton.experimental.gluon.nvidia.hopper import TensorDescriptor


def max_registers(num_warps: int) -> int:
    """maxnreg for the whole kernel: the default partition's warps plus the producer's warpgroup (warps are
    allocated by groups of 4) must fit the 64K-register file at one CTA per SM, rounded down to a multiple of
    8. The compiler then moves registers from the producer (setmaxnreg.dec) to the consumer (.inc)."""
    return min(256, 65536 // ((num_warps + 4) * 32) // 8 * 8)


@gluon.jit
def tile_offsets(tile, num_pid_m, num_pid_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                 GROUP_M: gl.constexpr):
    # Triton's grouped order: GROUP_M consecutive tile rows sweep the columns together, so the B columns
    # they read are reused from L2 while they are hot.
    tiles_per_group = GROUP_M * num_pid_n
    first_m = (tile // tiles_per_group) * GROUP_M
    group_rows = gl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile % tiles_per_group) % group_rows
    pid_n = (tile % tiles_per_group) // group_rows
    return pid_m * BLOCK_M, pid_n * BLOCK_N


@gluon.jit
def mma_step(a_smem, b_smem, acc, NUM_OUTSTANDING: gl.constexpr):
    """One k-step's async wgmma into acc, then wait until at most NUM_OUTSTANDING k-steps are in flight
    (the caller may then hand back the stage that many steps behind)."""
    acc = warpgroup_mma(a_smem, b_smem, acc, is_async=True)
    acc, _, _ = warpgroup_mma_wait(num_outstanding=NUM_OUTSTANDING, deps=(acc, a_smem, b_smem))
    return acc


@gluon.jit
def store_direct(acc, c_ptr, stride_cm, M, N, off_m, off_n, BLOCK_M: gl.constexpr, BLOCK_N: gl.constexpr,
                  layout: gl.constexpr):
    """The tile stored from registers with masked pointer stores: no shared memory for it, so that wide
    tiles keep their pipeline stages (256x160: three 52 KiB stages fit beside no 80 KiB output tile)."""
    rows = off_m + gl.arange(0, BLOCK_M, layout=gl.SliceLayout(1, layout))
    cols = off_n + gl.arange(0, BLOCK_N, layout=gl.SliceLayout(0, layout))
    mask = (rows[:, None] < M) & (cols[None, :] < N)
    gl.store(c_ptr + rows[:, None] * stride_cm + cols[None, :], acc.to(c_ptr.dtype.element_ty), mask=mask)


GL_DTYPES = {torch.bfloat16: gl.bfloat16, torch.float16: gl.float16}
SHORT = {torch.bfloat16: "bf16", torch.float16: "fp16"}  # dtype names of triton signatures


def shared_layouts(gdt, boxes):
    """The NVMMA shared layouts (widest swizzle the tile rows allow) of the tiles: the host descriptors
    carry them and the kernel allocates its smem buffers with the same ones."""
    return tuple(gl.NVMMASharedLayout.get_default_for(box, gdt) for box in boxes)


def compile_sm90(kernel, descs: dict, consts: dict, scalars: dict, num_warps: int, maxnreg: int):
    """Compile a Gluon kernel for GPUTarget("cuda", 90, 128) without a GPU, as the launcher would: each
    tensor-descriptor argument (descs: name -> (block shape, shared layout, torch dtype)) is typed with the
    string triton.runtime.jit.mangle_type gives a descriptor of that block (built here on a CPU tensor);
    consts are the constexprs, scalars the other arguments' types ("i32", "*bf16")."""
    from triton.backends.compiler import GPUTarget
    from triton.experimental.gluon._runtime import GluonASTSource
    from triton.runtime.jit import mangle_type

    sig = {name: mangle_type(TensorDescriptor.from_tensor(torch.empty(256, 256, dtype=tdt), box, layout))
           for name, (box, layout, tdt) in descs.items()}
    sig.update({k: "constexpr" for k in consts}, **scalars)
    names = kernel.arg_names
    src = GluonASTSource(kernel, sig, constexprs={(names.index(k), ): v for k, v in consts.items()})
    return triton.compile(src, target=GPUTarget("cuda", 90, 128),
                          options=dict(num_warps=num_warps, maxnreg=maxnreg))


def report(label: str, compiled, maxnreg: int) -> None:
    """One line on a compiled kernel: shared memory, registers and spills (cuobjdump), warps, and whether
    the PTX has async wgmma, TMA and register reallocation."""
    cuobjdump = os.path.join(os.path.dirname(triton.__file__), "backends", "nvidia", "bin", "cuobjdump")
    ptx = compiled.asm["ptx"]
    regs = "?"
    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        out = subprocess.run([cuobjdump, "-res-usage", f.name], capture_output=True, text=True).stdout
        m = re.search(r"REG:(\d+)", out)
        regs = m.group(1) if m else regs
        m = re.search(r"LOCAL:(\d+)", out)  # bytes of local memory a thread: spills when not 0
        regs += f", local {m.group(1)} B" if m else ""
    setmaxnreg = sorted(set(re.findall(r"setmaxnreg\.(inc|dec)\.sync\.aligned\.u32\s+(\d+)", ptx)))
    print(f"{label}: shared={compiled.metadata.shared} B, regs={regs} (maxnreg {maxnreg}), "
          f"warps={compiled.metadata.num_warps}, wgmma.mma_async={'wgmma.mma_async' in ptx}, "
          f"cp.async.bulk.tensor={'cp.async.bulk.tensor' in ptx}, "
          f"setmaxnreg={' '.join(f'{d}:{n}' for d, n in setmaxnreg) or 'absent'}")


def timed_problem(M: int, N: int, K: int):
    """Random bf16 operands of an MxNxK problem, their fp32 product (TF32 off: a true fp32 reference), an
    output buffer, and torch.mm's do_bench median in ms on them."""
    from triton.testing import do_bench

    torch.backends.cuda.matmul.allow_tf32 = False
    a = torch.randn(M, K, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(K, N, device="cuda", dtype=torch.bfloat16)
    ref = a.float() @ b.float()
    out = torch.empty(M, N, device="cuda", dtype=torch.bfloat16)
    torch_ms = do_bench(lambda: torch.mm(a, b, out=out), return_mode="median")
    return a, b, ref, out, torch_ms


def time_variant(label: str, problem: tuple[int, int, int], launch, c: torch.Tensor, ref: torch.Tensor,
                 torch_ms: float) -> dict:
    """One kernel variant of the sibling probes: its relative error against the fp32 product, its
    do_bench median beside torch.mm's, as a row and a printed line."""
    from triton.testing import do_bench

    launch()
    torch.cuda.synchronize()
    rel = ((c.float() - ref).norm() / ref.norm()).item()
    ms = do_bench(launch, return_mode="median")
    M, N, K = problem
    row = dict(m=M, n=N, k=K, variant=label, us=ms * 1e3, torch_us=torch_ms * 1e3, ratio=torch_ms / ms,
               rel_err=rel, ok=rel < 1e-2)
    print(f"{M}x{N}x{K} {label:32s} {row['us']:8.1f} us | torch.mm {row['torch_us']:8.1f} us | "
          f"torch/ours {row['ratio']:.3f}x | rel err {rel:.2e}{'' if row['ok'] else ' MISMATCH'}")
    return row


def write_rows(json_path: str | None, rows: list[dict]) -> None:
    if json_path:
        with open(json_path, "w") as f:
            json.dump({"device": torch.cuda.get_device_name(), "triton": triton.__version__, "rows": rows}, f,
                      indent=1)


def probe_main(doc: str, compile_only, bench, default_shapes: list, add_arguments=None) -> int:
    """The command line of a probe compiled by this machine's triton: --compile-only (no GPU), or
    bench(shapes, args) on an H200 with --shapes and --json; add_arguments(parser) adds a probe's own
    options."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0])
    parser.add_argument("--compile-only", action="store_true", help="compile for sm_90 (no GPU needed)")
    parser.add_argument("--shapes", metavar="MxNxK,...", help="bf16 problems to time (default: SHAPES)")
    parser.add_argument("--json", metavar="PATH", help="write the rows to PATH")
    if add_arguments:
        add_arguments(parser)
    args = parser.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        sys.exit("run without TRITON_INTERPRET=1: Gluon kernels do not run in the interpreter")
    if args.compile_only:
        return compile_only()
    if not torch.cuda.is_available():
        sys.exit("no CUDA GPU: run with --compile-only")
    return bench(parse_shapes(args.shapes, default_shapes), args)


def parse_shapes(text: str | None, default: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """"MxNxK,..." as (M, N, K) tuples; default when text is None."""
    return [tuple(int(d) for d in s.split("x")) for s in text.split(",")] if text else default
