"""Shared memory that triton asks for, over the heuristic's and the tuner's config space (issue 21).

Compiles GEMM kernels for the H200 (sm_90) on this machine, no GPU needed, and records the bytes of
shared memory each asks for (triton's `metadata.shared`; a launch fails with OutOfResources when it is
over the device's 232448 B per block). The records are the test data of tests/test_smem_records.py,
which proves `config.config_supports` against them, and what `config.smem_bytes` is fitted to.

Each row is compiled as a real launch would be: the GEMM's arguments come from tritonblas.launch itself
(`launch_gemm` on meta tensors with the problem's dense strides, the padded copy's strides for
aligned_copy, the Stream-K workspace), taken at triton's launch (`JITFunction.run` replaced by a
recorder), and go through triton's own binder, so every specialization a launch gets (integers equal
to 1 as constants, 16-divisible integers and pointers as `tt.divisibility=16`) and every constexpr
launch sets (INT64 included) is the launch's. Compilation stops at the pass of the LLVM-IR stage that
allocates shared memory (--full-llir runs the whole stage: the same bytes on 60 of 60 sampled configs,
6.6x slower; a full compile through ptxas is slower still).

The space: block sizes 16-256 each, 4 or 8 warps, 1-6 stages, Persistent and Stream-K, TMA on and off,
flatten, aligned_copy (where a leading dim is misaligned), group 4/8/16 and a
2-per-SM grid now and then; problems in every layout and dtype (fp32 at tf32 and ieee precision), with
even, ragged and short K (11, 127, 1), misaligned leading dims, one-tile problems, M = 1, every bias
kind. Configs that `config_supports` refuses for reasons other than shared memory (registers, the
fp32 block_k rule, TMA alignment) are left out: they never run. Rows are drawn with
a fixed seed, weighted towards the configs whose footprint is near the limit.

Run it on a CPU machine (TRITON_INTERPRET is dropped for its compiling processes); the records file's
header lists the commands that wrote it:
    python scripts/smem_sweep.py                       # 3000 draws, 4476 rows with fp32's twins, ~6 min
    python scripts/smem_sweep.py --seed 2 --rows 1200  # more rows, merged into the file, ~3 min
Rows already in the file for the same triton version and kernel key (triton's cache keys of the GEMM
kernels) are not compiled again, so a re-run with the same arguments costs nothing, and one after a
kernel change measures everything again (the file then holds the new kernels' rows only; --fresh
forces it, e.g. after a change to launch's arguments). The last line compares the rows with the
current predicate: rows over the limit that it accepts (must be 0) and feasible rows it refuses.
--check compares the harness with the H200's own figures in a tuning run's measurements instead (the
JSON rows that `git show 016dd08:scripts/export_measurements.py` wrote from a tuning database, such as
`git show 016dd08:docs/benchmarks/h200-tune4-measurements.json`).
docs/notes/shared-memory.md tells the story.
"""

from __future__ import annotations

import argparse
import datetime
import itertools
import json
import math
import multiprocessing
import os
import random
import sys
import time
from pathlib import Path

from tritonblas.arch import DeviceInfo
from tritonblas.config import GemmConfig, config_supports
from tritonblas.problem import DTYPE_BYTES, Problem, aligned_leading_dim, operands_aligned

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_OUT = ROOT / "tests" / "data" / "smem_records.json"
LIMIT = 232448  # H200: shared memory one block may opt into
SM_COUNT = 132
H200 = DeviceInfo(arch="sm_90", name="NVIDIA H200", sm_count=SM_COUNT, smem_per_block=LIMIT)
# Every rule of config_supports but shared memory: the configs that could reach a launch.
_UNBOUNDED = DeviceInfo(arch="sm_90", name="sm_90 without a shared-memory limit", sm_count=SM_COUNT,
                        smem_per_block=1 << 40)

PROBLEM_COLUMNS = ["m", "n", "k", "dtype", "layout", "bias", "precision"]
CONFIG_COLUMNS = ["block_m", "block_n", "block_k", "group_m", "num_warps", "num_stages", "streamk", "grid",
                  "tma", "flatten", "aligned_copy"]
COLUMNS = [*PROBLEM_COLUMNS, *CONFIG_COLUMNS, "shared"]

# (m, n, k): what each brings.
SHAPES = [
    (4096, 4096, 4096),  # aligned, K even for every block_k
    (4096, 4096, 4000),  # aligned, K ragged for block_k >= 64
    (1000, 1000, 1000),  # 16-byte aligned leads that are no multiple of 16 elements, ragged K
    (4095, 4097, 127),  # issue 21: the MLP's dB, misaligned leads, short ragged K
    (127, 4097, 4095),  # the same MLP's forward
    (2911, 926, 11),  # issue 21: a random problem, K shorter than any block
    (1024, 1030, 4096),  # one misaligned operand (the GPU suite's 1024x1030x4096)
    (16, 4096, 14336),  # decode-like, one row of tiles
    (1, 4096, 4096),  # M == 1: a constant in the kernel
    (256, 256, 65536),  # few tiles: a single program for 256x256 tiles
    (4096, 4096, 1),  # K == 1
    (17000, 128256, 4096),  # more than 2**31 output elements (64-bit offsets)
]
DTYPES = ("fp16", "bf16", "fp32")
LAYOUTS = ("nn", "nt", "tn", "tt")
BIASES = ("none", "none", "none", "row", "column", "full", "scalar")
BLOCKS = (16, 32, 64, 128, 256)
STAGES = (1, 2, 3, 4, 5, 6)

# Always measured: the configs of the issue on its problems (fp16 and bf16, every layout).
_ISSUE_CONFIGS = [dict(block_m=256, block_n=64, block_k=64, num_warps=8, num_stages=5),
                  dict(block_m=256, block_n=64, block_k=64, num_warps=4, num_stages=5),
                  dict(block_m=256, block_n=128, block_k=64, num_warps=8, num_stages=4)]
_ISSUE_SHAPES = [(4095, 4097, 127), (2911, 926, 11)]


def problem_variants() -> list[tuple[Problem, str]]:
    """(problem without bias, precision) for every shape, dtype, layout; fp32 at both precisions."""
    out = []
    for (m, n, k), dtype, layout in itertools.product(SHAPES, DTYPES, LAYOUTS):
        for precision in (("tf32", "ieee") if dtype == "fp32" else ("tf32",)):
            out.append((Problem(m, n, k, dtype, layout), precision))
    return out


def config_space(problem: Problem) -> list[GemmConfig]:
    """The space's configs that config_supports allows for `problem` but for shared memory (group 8,
    default grid; the sampler varies those)."""
    copies = (False,) if operands_aligned(problem) else (False, True)
    out = []
    for bm, bn, bk, warps, stages, sk, tma, flat, copy in itertools.product(
            BLOCKS, BLOCKS, BLOCKS, (4, 8), STAGES, (False, True), (False, True), (False, True), copies):
        cfg = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=warps, num_stages=stages,
                         streamk=sk, tma=tma, flatten=flat, aligned_copy=copy)
        if config_supports(cfg, problem, _UNBOUNDED) is None:
            out.append(cfg)
    return out


def _weight(cfg: GemmConfig, problem: Problem) -> float:
    """Sampling weight: high where the footprint is within reach of the limit. `low` is one buffer of
    A and B per stage; `high` adds a stage and an output tile, about the most triton was seen to add."""
    elt = DTYPE_BYTES[problem.dtype]
    per_stage = (cfg.block_m + cfg.block_n) * cfg.block_k * elt
    low = per_stage * cfg.num_stages
    high = low + per_stage + cfg.block_m * cfg.block_n * DTYPE_BYTES[problem.out] + 1024
    if low > 1.3 * LIMIT:
        return 0.05
    if high < 0.8 * LIMIT:
        return 0.15
    return 1.0


def sample(rows: int, seed: int) -> list[tuple]:
    """`rows` distinct (problem, precision, config) tasks, round-robin over the problem variants, each
    config drawn by _weight; the issue's cases first; then the other precision of each fp32 task."""
    rng = random.Random(seed)
    variants = problem_variants()
    rng.shuffle(variants)
    tasks: dict[tuple, None] = {}
    for (m, n, k), dtype, layout, kw in itertools.product(_ISSUE_SHAPES, ("fp16", "bf16"), LAYOUTS,
                                                           _ISSUE_CONFIGS):
        problem = Problem(m, n, k, dtype, layout)
        cfg = GemmConfig(**kw, tma=True, flatten=True, aligned_copy=not operands_aligned(problem))
        if config_supports(cfg, problem, _UNBOUNDED) is None:
            tasks[task_key(problem, "tf32", cfg)] = None
    spaces: dict[Problem, tuple[list[GemmConfig], list[float]]] = {}
    for i in itertools.cycle(range(len(variants))):
        if len(tasks) >= rows:
            break
        problem, precision = variants[i]
        if problem not in spaces:
            space = config_space(problem)
            spaces[problem] = space, list(itertools.accumulate(_weight(c, problem) for c in space))
        space, cum = spaces[problem]
        cfg = rng.choices(space, cum_weights=cum)[0]
        changes = {}
        if rng.random() < 0.1:
            changes["group_m"] = rng.choice((4, 16))
        if rng.random() < 0.1:
            changes["grid"] = 2 * SM_COUNT
        if changes:
            cfg = GemmConfig.model_validate({**cfg.model_dump(), **changes})
        problem = Problem(problem.m, problem.n, problem.k, problem.dtype, problem.layout, rng.choice(BIASES))
        tasks.setdefault(task_key(problem, precision, cfg), None)
    # fp32 at both precisions (the predicate cannot tell which a call will use): every drawn fp32 row
    # gets its twin.
    precision_at = PROBLEM_COLUMNS.index("precision")
    for task in list(tasks):
        if task[PROBLEM_COLUMNS.index("dtype")] == "fp32":
            twin = "ieee" if task[precision_at] == "tf32" else "tf32"
            tasks.setdefault((*task[:precision_at], twin, *task[precision_at + 1:]), None)
    return list(tasks)


def task_key(problem: Problem, precision: str, cfg: GemmConfig) -> tuple:
    return (problem.m, problem.n, problem.k, problem.dtype, problem.layout, problem.bias, precision,
            *(int(v) if isinstance(v, bool) else v for v in (getattr(cfg, c) for c in CONFIG_COLUMNS)))


def record_problem(row: list | tuple) -> tuple[Problem, str]:
    m, n, k, dtype, layout, bias, precision = row[:len(PROBLEM_COLUMNS)]
    return Problem(m, n, k, dtype, layout, bias), precision


def record_config(row: list | tuple) -> GemmConfig:
    values = row[len(PROBLEM_COLUMNS):len(PROBLEM_COLUMNS) + len(CONFIG_COLUMNS)]
    fields = dict(zip(CONFIG_COLUMNS, values, strict=True))
    for name in ("streamk", "tma", "flatten", "aligned_copy"):
        fields[name] = bool(fields[name])
    return GemmConfig(**fields)


# ---- worker side: compile one task for sm_90 ------------------------------------------------------

_W: dict = {}


class _Stop(Exception):
    """Raised at the shared-memory allocation with the bytes triton settled on."""


class _Launched(Exception):
    """Raised by the GEMM's launch with the kernel and the arguments launch_gemm gave it."""


def _init_worker(full_llir: bool = False) -> None:
    os.environ.pop("TRITON_INTERPRET", None)  # compiling for sm_90 needs triton's JIT, not its interpreter
    import torch
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import JITFunction

    from tritonblas.launch import gemm as launch

    class OnDevice(torch.Tensor):
        """A meta tensor that says it is on the GPU, so launch_gemm takes its GPU path (it hands CPU
        bf16 to the interpreter as fp32)."""

        @property
        def is_cuda(self) -> bool:
            return True

    def launched(self, *args, grid, warmup, **kwargs):
        raise _Launched(self, args, kwargs)

    def stop_at_allocation(backend, stages, options, language, capability):
        """Replaces the LLVM-IR stage: its first passes, up to shared-memory allocation (triton 3.6's
        make_llir; the rest lowers to LLVM and changes no allocation), then stop with `ttg.shared`. With
        --full-llir the whole stage runs first (the check that both agree)."""
        from triton._C.libtriton import ir, nvidia, passes
        from triton.backends.nvidia.compiler import get_ptx_version_from_options

        llir = stages["llir"]

        def run(src, metadata):
            if _W["full_llir"]:
                llir(src, metadata)
                raise _Stop(metadata["shared"])
            pm = ir.pass_manager(src.context)
            passes.ttgpuir.add_combine_tensor_select_and_if(pm)
            passes.ttgpuir.add_allocate_warp_groups(pm)
            passes.convert.add_scf_to_cf(pm)
            passes.gluon.add_inliner(pm)
            nvidia.passes.ttgpuir.add_allocate_shared_memory_nv(
                pm, capability, get_ptx_version_from_options(options, backend.target.arch))
            pm.run(src, "smem_sweep")
            raise _Stop(src.get_int_attr("ttg.shared"))

        stages["llir"] = run
        for later in list(stages)[list(stages).index("llir") + 1:]:
            del stages[later]

    # launch_gemm runs as on a GPU up to triton's launch, which hands over the kernel and its arguments;
    # meta tensors have device index None, which stands for the current device.
    JITFunction.run = launched
    torch.cuda.current_device = lambda: None
    knobs.runtime.add_stages_inspection_hook = stop_at_allocation
    target = GPUTarget("cuda", 90, 32)  # what triton's driver reports for an H200
    _W.update(torch=torch, triton=triton, knobs=knobs, ASTSource=ASTSource, launch=launch, target=target,
              backend=make_backend(target), OnDevice=OnDevice, binders={}, full_llir=full_llir)


_TORCH_DTYPES = {"fp16": "float16", "bf16": "bfloat16", "fp32": "float32"}


def _operands(problem: Problem, aligned_copy: bool):
    """A, B, C and the broadcast bias as ops builds them, dense in the problem's layout, on meta. With
    aligned_copy, an operand whose leading dim is not 16-byte aligned is the padded buffer's view that
    launch's aligned copy would hand the GEMM (rows padded to aligned_leading_dim, same order), so
    launch_gemm finds it aligned and launches no copy."""
    torch = _W["torch"]
    dtype = getattr(torch, _TORCH_DTYPES[problem.dtype])
    elt = DTYPE_BYTES[problem.dtype]
    m, n, k = problem.m, problem.n, problem.k

    def tensor(shape, stride=None):
        t = (torch.empty(shape, dtype=dtype, device="meta") if stride is None
             else torch.empty_strided(shape, stride, dtype=dtype, device="meta"))
        return t.as_subclass(_W["OnDevice"])

    def padded(t):
        s0, s1 = t.stride()
        col = s1 != 1 and s0 == 1
        if ((s1 if col else s0) * elt) % 16 == 0:
            return t
        src = t.t() if col else t
        rows, cols = src.shape
        view = tensor((rows, aligned_leading_dim(cols, elt)))[:, :cols]
        return view.t() if col else view

    a = tensor((m, k), (k, 1)) if problem.layout[0] == "n" else tensor((m, k), (1, m))
    b = tensor((k, n), (n, 1)) if problem.layout[1] == "n" else tensor((k, n), (1, k))
    if aligned_copy:
        a, b = padded(a), padded(b)
    c = tensor((m, n), (n, 1))
    bias = {"none": None, "scalar": (), "row": (n,), "column": (m, 1), "full": (m, n)}[problem.bias]
    if bias is not None:
        bias = torch.broadcast_to(tensor(bias), (m, n))
    return a, b, c, bias


def compile_task(task: tuple) -> tuple[tuple, int | None, str]:
    """(task, shared bytes or None, error) for one (problem, precision, config) task."""
    problem, precision = record_problem(task)
    cfg = record_config(task)
    try:
        return task, _shared(problem, precision, cfg), ""
    except Exception as exc:  # a config triton cannot compile at all: recorded apart
        first = (str(exc).strip().splitlines() or [""])[0][:200]
        return task, None, f"{type(exc).__name__}: {first}"


def _shared(problem: Problem, precision: str, cfg: GemmConfig) -> int:
    a, b, c, bias = _operands(problem, cfg.aligned_copy)
    try:
        _W["launch"].launch_gemm(a, b, c, bias, 1.0, 0.0 if bias is None else 1.0, cfg, SM_COUNT,
                                 precision)
    except _Launched as hit:
        kernel, args, kwargs = hit.args
    else:
        raise RuntimeError("launch_gemm launched nothing")
    backend, knobs = _W["backend"], _W["knobs"]
    binder = _W["binders"].get(kernel)
    if binder is None:
        from triton.runtime.jit import create_function_from_signature

        binder = _W["binders"][kernel] = create_function_from_signature(kernel.signature, kernel.params,
                                                                         backend)
    # As JITFunction.run builds a launch's compile: bind, specialize, pack, compile.
    kwargs = dict(kwargs, debug=kernel.debug or knobs.runtime.debug,
                  instrumentation_mode=knobs.compilation.instrumentation_mode)
    bound, specialization, options = binder(*args, **kwargs)
    options, signature, constexprs, attrs = kernel._pack_args(backend, kwargs, bound, specialization,
                                                              options)
    try:
        compiled = _W["triton"].compile(_W["ASTSource"](kernel, signature, constexprs, attrs),
                                        target=_W["target"], options=options.__dict__)
    except _Stop as stop:
        return int(stop.args[0])
    return int(compiled.metadata.shared)  # a full compile found in triton's cache


# ---- the run ----------------------------------------------------------------------------------------


def kernel_key() -> str:
    """sha256 (16 hex digits) over triton's cache keys of the GEMM kernels: their source and that of
    every jit function they call, with line numbers. Records are reused while it holds (triton would
    reuse its binaries too); a change of comments outside the kernels' functions keeps it."""
    import hashlib

    from tritonblas.kernels.persistent import persistent_gemm_kernel
    from tritonblas.kernels.streamk import streamk_gemm_kernel

    h = hashlib.sha256()
    for kernel in (persistent_gemm_kernel, streamk_gemm_kernel):
        h.update(kernel.cache_key.encode())
    return h.hexdigest()[:16]


def _header() -> dict:
    from tritonblas import identity

    return {"triton": identity.triton_version(), "kernel_hash": identity.kernel_hash(),
            "kernel_key": kernel_key(), "target": "cuda sm_90 (H200)", "limit": LIMIT, "sm_count": SM_COUNT}


_REUSE_KEYS = ("triton", "kernel_key", "limit", "sm_count")


def _load(path: Path, header: dict | None) -> tuple[dict[tuple, int], dict[tuple, str]]:
    """Rows and errors of an earlier run of the same triton and kernels (any run with header None);
    nothing otherwise."""
    if not path.exists():
        return {}, {}
    data = json.loads(path.read_text())
    if header is not None and any(data.get(key) != header[key] for key in _REUSE_KEYS):
        print(f"{path}: recorded for triton {data.get('triton')}, kernels {data.get('kernel_key')}; "
              f"measuring again for triton {header['triton']}, kernels {header['kernel_key']}")
        return {}, {}
    if data.get("columns") != COLUMNS:
        return {}, {}
    rows = {tuple(r[:-1]): r[-1] for r in data["rows"]}
    errors = {tuple(e[:-1]): e[-1] for e in data.get("errors", [])}
    return rows, errors


def _write(path: Path, header: dict, rows: dict[tuple, int], errors: dict[tuple, str], meta: dict) -> None:
    """Compact JSON: one record a line, columns named once."""
    head = {"about": "triton's required shared memory (metadata.shared, bytes) per GEMM launch; written by "
                     "scripts/smem_sweep.py, checked by tests/test_smem_records.py",
            **header, **meta, "columns": COLUMNS}
    lines = ["{" + ", ".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in head.items()) + ","]
    body = sorted([*rows.items()], key=lambda kv: tuple(str(x) for x in kv[0]))
    lines.append('"rows": [')
    lines.append(",\n".join(json.dumps([*key, value], separators=(",", ":")) for key, value in body))
    lines.append("],")
    err = sorted(errors.items(), key=lambda kv: tuple(str(x) for x in kv[0]))
    lines.append('"errors": [')
    lines.append(",\n".join(json.dumps([*key, value], separators=(",", ":")) for key, value in err))
    lines.append("]}")
    tmp = path.with_suffix(".tmp")
    tmp.write_text("\n".join(lines) + "\n")
    tmp.replace(path)


def summarize(rows: dict[tuple, int]) -> dict:
    """How the current predicate does on the rows."""
    over = accepted = feasible = refused = 0
    for key, shared in rows.items():
        problem, _ = record_problem(key)
        ok = config_supports(record_config(key), problem, H200) is None
        if shared > LIMIT:
            over += 1
            accepted += ok
        else:
            feasible += 1
            refused += not ok
    return {"rows": len(rows), "over_limit": over, "over_limit_accepted": accepted, "feasible": feasible,
            "feasible_refused": refused}


def check_measurements(paths: list[Path], min_ratio: float, workers: int, full_llir: bool) -> None:
    """Compile the rows of H200 tuning runs (measurement lists as 016dd08's docs/benchmarks kept) with this
    harness and compare: an out_of_resources row must need the bytes its note says triton required, an
    ok row (it ran) must fit. Only ok rows whose A and B tiles take at least `min_ratio` of the limit
    are compiled (the ones a fit could get wrong). The runs used older kernels: a mismatch may be a
    kernel change, not the harness."""
    import re

    tasks: dict[tuple, tuple[str, int | None]] = {}
    for path in paths:
        for r in json.loads(path.read_text()):
            cfg = GemmConfig(**r["config"])
            problem = Problem(r["m"], r["n"], r["k"], r["dtype"], r["layout"], r["bias"])
            elt = DTYPE_BYTES[problem.dtype]
            tiles = (cfg.block_m + cfg.block_n) * cfg.block_k * elt * cfg.num_stages
            required = re.search(r"Required: (\d+)", r.get("note") or "")
            if r["status"] == "ok" and tiles >= min_ratio * LIMIT:
                tasks[task_key(problem, "tf32", cfg)] = (r["status"], None)
            elif r["status"] == "out_of_resources" and required:
                tasks[task_key(problem, "tf32", cfg)] = (r["status"], int(required.group(1)))
    print(f"{len(tasks)} measured rows to compile", flush=True)
    agree, disagree = 0, []
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(workers, initializer=_init_worker, initargs=(full_llir,)) as pool:
        for task, shared, error in pool.imap_unordered(compile_task, list(tasks), chunksize=4):
            status, required = tasks[task]
            ok = shared is not None and (shared == required if required else shared <= LIMIT)
            agree += ok
            if not ok:
                disagree.append((task, status, required, shared, error))
    for d in disagree:
        print("disagrees:", *d)
    print(json.dumps({"compiled": len(tasks), "agree": agree, "disagree": len(disagree)}))


def main() -> None:
    os.environ.pop("TRITON_INTERPRET", None)  # for the workers, before they import triton
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=3000, help="rows to draw (default 3000)")
    ap.add_argument("--seed", type=int, default=1, help="sampling seed (default 1)")
    ap.add_argument("--workers", type=int, default=2, help="compile processes (default 2)")
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT, help=f"records file (default {DEFAULT_OUT})")
    ap.add_argument("--dry-run", action="store_true", help="print the sample's size and stop")
    ap.add_argument("--full-llir", action="store_true",
                    help="run triton's whole LLVM-IR stage instead of stopping at the allocation pass")
    ap.add_argument("--summary", action="store_true",
                    help="only compare the file's rows with the current predicate")
    ap.add_argument("--fresh", action="store_true",
                    help="measure every row again (after a change of launch's arguments or constexprs, "
                         "which the kernel key does not see)")
    ap.add_argument("--check", type=Path, nargs="+", metavar="MEASUREMENTS",
                    help="compare the harness with tuning-run rows measured on the H200 instead of sweeping")
    ap.add_argument("--check-min", type=float, default=0.8,
                    help="with --check: ok rows whose A and B tiles take at least this share of the limit")
    args = ap.parse_args()
    if args.check:
        check_measurements(args.check, args.check_min, args.workers, args.full_llir)
        return

    if args.summary:
        print(json.dumps(summarize(_load(args.out, None)[0])))
        return
    header = _header()
    rows, errors = _load(args.out, header)
    if args.fresh:
        rows, errors = {}, {}
    tasks = sample(args.rows, args.seed)
    todo = [t for t in tasks if t not in rows and t not in errors]
    print(f"{len(tasks)} rows drawn (seed {args.seed}), {len(tasks) - len(todo)} already recorded, "
          f"{len(todo)} to compile on {args.workers} processes; triton {header['triton']}, kernels "
          f"{header['kernel_hash']}", flush=True)
    if args.dry_run or not todo:
        print(json.dumps(summarize(rows)))
        return
    # The runs whose rows the file holds, so that one can measure them all again.
    earlier = json.loads(args.out.read_text()).get("commands", []) if rows and args.out.exists() else []
    command = "python scripts/smem_sweep.py " + " ".join(sys.argv[1:])
    meta = {"date": datetime.date.today().isoformat(),
            "commands": [*(c for c in earlier if c != command), command]}
    start = time.monotonic()
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(args.workers, initializer=_init_worker, initargs=(args.full_llir,)) as pool:
        for i, (task, shared, error) in enumerate(pool.imap_unordered(compile_task, todo, chunksize=4), 1):
            if shared is None:
                errors[task] = error
            else:
                rows[task] = shared
            if i % 100 == 0 or i == len(todo):
                spent = time.monotonic() - start
                eta = spent / i * (len(todo) - i)
                print(f"{i}/{len(todo)} compiled, {spent:.0f} s, ~{math.ceil(eta)} s left, "
                      f"{len(errors)} errors", flush=True)
                _write(args.out, header, rows, errors, meta)
    print(json.dumps(summarize(rows)))


if __name__ == "__main__":
    main()
