"""Whether two trees launch the same sm_90 machine code for a config file's Triton configs: the proof that
tuned configs may be re-stamped with a new kernel hash (tritonblas/identity.py) instead of re-tuned.

A diagnostic, not collected by pytest. Per tree a capture and a compile, each a child process with the
tree on PYTHONPATH (and no bytecode written: a read-only tree stays so), then a comparison:

    python tests/same_code.py --tree /work/wt/old --file configs/sm_90.json --out old.json
    python tests/same_code.py --tree /work/main --file configs/sm_90.json --out new.json
    python tests/same_code.py --compare old.json new.json     # exit 0: identical; 1: differences listed

1. Capture (TRITON_INTERPRET=1): each entry's Triton winner, and the Triton config a vendor entry carries
   ("kernel", what backend="triton" runs there; --winners-only skips them), is called as the tuner timed it
   on CPU tensors of its problem (torch.empty: nothing is touched), planned for the header's H200 (its SM
   count sets the grid): plain entries by matmul/addmm(..., out=, config=), quantized ones ("scales": the
   fp8 entries of configs/sm_90.json, configs/block/) by tuning/scaled.py's op_call (scaled_mm(...,
   config=)), a grouped table's winners (configs/grouped/, {"winners": [{"config", "key"}]}: the file's
   kind is told by its content) by grouped/tuner.py's run_config (grouped_mm has no config=) on balanced
   groups of the key's rows. Torch and gluon configs are counted, not captured: the Gluon kernels are no
   InterpretedFunctions and launch on CUDA tensors only (on the CPU a gluon config runs its Triton twin,
   not what the GPU runs). The launch is stubbed at triton's level (InterpretedFunction.run, below any
   host path): every kernel a call launches (GEMM, Stream-K reduce, pad copy) is recorded with its grid,
   options and triton's own specialization of its arguments (JITFunction's binder on the real arguments
   for a CUDA sm_90 target: dtypes, 16-byte alignment, integers equal to 1, descriptors), what a first
   launch on the GPU compiles.
2. Compile (no interpreter): each distinct launch once (--jobs processes; triton's cache serves re-runs),
   against its own tree's kernel, for GPUTarget("cuda", 90, 128): sha256 of the PTX less debug
   information and comments, sha256 of the cubin's .text sections (the machine code), shared memory,
   num_warps.
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import hashlib
import importlib
import json
import os
import re
import struct
import subprocess
import sys
import time
import types
from pathlib import Path

TARGET = ("cuda", 90, 128)
# What a launch must agree on, beside its entry, for the two trees' machine code to be the same.
COMPARED = ("kernel", "grid", "options", "ptx_sha256", "text_sha256", "shared", "num_warps")
# SM counts of the devices a header may name without one (a grouped table's: "arch" and "device" only).
_SM_COUNTS = {"NVIDIA H200": 132}
# An operand dtype's name in triton's signature where it is not the file's (fp8: *fp8e4nv).
_TRITON_NAMES = {"e4m3": "fp8e4nv", "e5m2": "fp8e5"}


# --- capture (child, TRITON_INTERPRET=1) -----------------------------------------------------------------

def _jsonable(value: object) -> object:
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if type(value).__name__ == "constexpr":  # a field of a kernel's constexpr bundle (kernels/specs.py)
        return _jsonable(value.value)
    raise TypeError(f"launch value {value!r} of type {type(value).__name__} has no JSON form")


def _describe(arg: object) -> object:
    """An argument as the report shows it (the specialization is what compiles)."""
    if hasattr(arg, "data_ptr") and hasattr(arg, "dtype"):
        return f"tensor {str(arg.dtype).removeprefix('torch.')} align16={arg.data_ptr() % 16 == 0}"
    if type(arg).__name__ == "TensorDescriptor":
        return f"descriptor {str(arg.base.dtype).removeprefix('torch.')} block={list(arg.block_shape)}"
    return _jsonable(arg)


class Recorder:
    """Stands in for InterpretedFunction.run: records a launch as JITFunction.run would compile it."""

    def __init__(self) -> None:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import make_backend

        self.backend = make_backend(GPUTarget(*TARGET))
        self.jits: dict[int, tuple] = {}
        self.launches: list[dict] = []

    def _jit(self, fn):
        from triton.runtime.jit import JITFunction, create_function_from_signature

        if id(fn) not in self.jits:
            jit = JITFunction(fn.fn, **fn.kwargs)
            self.jits[id(fn)] = jit, create_function_from_signature(jit.signature, jit.params, self.backend)
        return self.jits[id(fn)]

    def run(self, fn, *args, grid, warmup, **kwargs) -> None:
        jit, binder = self._jit(fn)
        bound, specialization, options = binder(*args, **kwargs)
        _, signature, constexprs, attrs = jit._pack_args(self.backend, kwargs, bound, specialization, options)
        grid = tuple(grid(bound) if callable(grid) else grid)
        self.launches.append({
            "kernel": f"{fn.fn.__module__}.{fn.fn.__name__}",
            "grid": [int(g) for g in grid + (1,) * (3 - len(grid))],
            "options": {name: _jsonable(v) for name, v in sorted(options.items())},
            "signature": signature,
            "constexprs": [[list(path), _jsonable(v)] for path, v in constexprs.items()],
            "attrs": [[list(path), _jsonable(v)] for path, v in attrs.items()],
            "args": {name: _describe(v) for name, v in bound.items()},
        })


def _h200(data: dict):
    try:
        from tritonblas.arch import device_for_arch
    except ImportError:  # a tree from before the packages (issue 35)
        from tritonblas.config import device_for_arch

    header = data.get("header", data)  # (a grouped table's header is its top level)
    name = header.get("device_name") or header.get("device", "")
    return device_for_arch(header["arch"], name, header.get("sm_count") or _SM_COUNTS.get(name))


# The functions through which the op learns its tensors' device, in the trees of 2026-12 (the old tree
# returns config.INTERPRETER_DEVICE from the first two, the new asks the third).
_DEVICE_FUNCTIONS = ("device_info", "tensor_device_info", "interpreter_device")
# The modules of the quantized and grouped calls, which bind them by name too (absent from older trees).
_CALL_MODULES = ("tritonblas.call.scaled", "tritonblas.tuning.scaled", "tritonblas.grouped.tuner")


def _patch_device(device) -> list[int]:
    """CPU tensors on the interpreter are planned for `device` (the header's H200) instead of the
    interpreter's 4-SM stand-in: every tritonblas module's binding of a device function answers `device`
    where it answered the interpreter. Returns a counter of those answers: none means the patch missed."""
    import tritonblas
    import tritonblas.device

    tritonblas.matmul  # noqa: B018 (loads the call path, whose modules bind them by name, before patching)
    for module in _CALL_MODULES:
        with contextlib.suppress(ModuleNotFoundError):
            importlib.import_module(module)

    used = [0]

    def wrap(fn):
        def as_h200(*args, **kwargs):
            info = fn(*args, **kwargs)
            if info.arch != "interpreter":
                return info
            used[0] += 1
            return device
        return as_h200

    patched = {name: wrap(getattr(tritonblas.device, name)) for name in _DEVICE_FUNCTIONS
               if hasattr(tritonblas.device, name)}
    for name, module in list(sys.modules.items()):
        for attr, fn in patched.items():
            if name.startswith("tritonblas") and hasattr(module, attr):
                setattr(module, attr, fn)
    return used


def _problem_text(p: dict) -> str:
    if "groups" in p:  # a grouped table's key
        return "grouped " + " ".join(f"{name}={p[name]}" for name in sorted(p))
    quant = f"x{p['b_dtype']}->{p['out_dtype']} scales={p['scales']}" if "scales" in p else ""
    return f"{p['m']}x{p['n']}x{p['k']} {p['a_dtype']}{quant} {p['layout']} bias={p['bias']}"


def _runs(data: dict, winners_only: bool) -> tuple[list[tuple[str, dict, dict]], dict[str, int]]:
    """(key, problem, config) of each Triton config the file says runs, and how many distinct torch and
    gluon configs it leaves out: a dense file's entries' winners and, unless winners_only, the Triton config
    some vendor entries carry ("kernel": what backend="triton" runs there once the file is imported;
    tuning_db/exchange.py); a grouped table's winners, their key the problem."""
    found = [(w["key"], "winner", w["config"]) for w in data.get("winners", [])]
    for e in data.get("entries", []):
        kernel = None if winners_only else (e.get("kernel") or {}).get("config")
        found += [(e, role, c) for role, c in (("winner", e["config"]), ("kernel", kernel)) if c is not None]
    runs, skipped = [], {"torch": set(), "gluon": set()}
    for problem, role, config in found:
        key = f"{_problem_text(problem)} {role} {json.dumps(config, sort_keys=True, separators=(',', ':'))}"
        if config.get("backend", "triton") != "triton":
            skipped["torch"].add(key)
        elif config.get("gluon"):
            skipped["gluon"].add(key)
        else:
            runs.append((key, problem, config))
    return runs, {why: len(keys) for why, keys in skipped.items()}


def _call(problem: dict, config) -> None:
    """The call the tuner timed this problem's config with, on empty CPU tensors laid out as it laid them.
    The interpreter's launch paths hand the kernels fp32 copies of bf16 operands (numpy has no bf16); a GPU
    hands them the bf16 tensors, so meanwhile Tensor.float leaves a bf16 CPU tensor as it is (and so copies
    nothing)."""
    import torch

    real_float = torch.Tensor.float
    torch.Tensor.float = lambda t, *args, **kwargs: (
        t if t.dtype is torch.bfloat16 and not t.is_cuda else real_float(t, *args, **kwargs))
    scaled = problem.get("scales", "none") != "none"
    try:
        (_grouped_call if "groups" in problem else _scaled_call if scaled else _plain_call)(problem, config)
    finally:
        torch.Tensor.float = real_float


def _dtype(name: str):
    from tritonblas.validate import TORCH_DTYPE_OF

    return TORCH_DTYPE_OF[name]


def _operand(rows: int, cols: int, transposed: bool, dtype, *groups: int):  # as scaled.random_operand
    import torch

    if transposed:  # column-major: the transpose of a row-major cols x rows tensor (of each group)
        return torch.empty(*groups, cols, rows, dtype=dtype).transpose(-2, -1)
    return torch.empty(*groups, rows, cols, dtype=dtype)


def _plain_call(entry: dict, config) -> None:
    """tuning/benchmark.py's _call: matmul/addmm(..., out=, config=)."""
    import torch

    import tritonblas

    if not entry["a_dtype"] == entry["b_dtype"] == entry["out_dtype"]:
        raise ValueError(f"entry {_problem_text(entry)}: mixed dtypes without scales are not supported")
    dtype = _dtype(entry["a_dtype"])
    m, n, k, layout = entry["m"], entry["n"], entry["k"], entry["layout"]
    a, b = _operand(m, k, layout[0] == "t", dtype), _operand(k, n, layout[1] == "t", dtype)
    shape = {"none": None, "scalar": (1, 1), "row": (n,), "column": (m, 1), "full": (m, n)}[entry["bias"]]
    out = torch.empty(m, n, dtype=dtype)
    if shape is None:
        tritonblas.matmul(a, b, out=out, config=config)
    else:
        tritonblas.addmm(torch.empty(shape, dtype=dtype), a, b, out=out, config=config)


def _scaled_call(entry: dict, config) -> None:
    """tuning/scaled.py's op_call (scaled_mm(..., config=), into out= but block-wise) on operands as
    scaled.make lays them out: scales by laid_out_scales (block-wise: outer-dim-major), bias of bias_dtype."""
    import torch

    from tritonblas.problem import Problem
    from tritonblas.tuning import scaled

    problem = Problem.from_key(types.SimpleNamespace(**entry))
    m, n, k, layout = problem.m, problem.n, problem.k, problem.layout
    a = _operand(m, k, layout[0] == "t", _dtype(problem.dtype))
    b = _operand(k, n, layout[1] == "t", _dtype(problem.b))
    scale_a, scale_b = scaled.laid_out_scales(problem, lambda shape: torch.empty(shape, dtype=torch.float32))
    out = _dtype(problem.out)
    bias = None if problem.bias == "none" else torch.empty(n, dtype=scaled.bias_dtype(out))
    ops = scaled.ScaledOperands(a, b, scale_a, scale_b, bias, out, ref=None, one_cast=None,
                                block=problem.scales == "block")
    scaled.op_call(ops, torch.empty(m, n, dtype=out), config, None)()


def _grouped_call(key: dict, config) -> None:
    """grouped/tuner.py's run_config (grouped_mm has no config=) on the operands grouped/tune.py's operands
    lays out for the MoE forward (2d3d): rows x groups rows in balanced groups (the top of the key's rows
    bucket), the weights (E, N, K) used transposed for layout nt, else (E, K, N)."""
    import torch

    from tritonblas.grouped import tune, tuner

    if key["form"] != "2d3d":
        raise ValueError(f"{_problem_text(key)}: the tuner's grouped problems are 2d3d")
    groups, n, k, dtype = key["groups"], key["n"], key["k"], _dtype(key["dtype"])
    m, (a_col, b_col) = key["rows"] * groups, (c == "t" for c in key["layout"])
    x = _operand(m, k, a_col, dtype)
    w = _operand(k, n, b_col, dtype, groups)
    offs = torch.tensor(tune.group_sizes(m, groups, "balanced"), dtype=torch.int64).cumsum(0).to(torch.int32)
    tuner.run_config(x, w, offs, config, tune.shape_of(x, w, offs))


def _check_operands(key: str, problem: dict, launches: list[dict]) -> None:
    """A GEMM launch takes the problem's operand dtypes (not a bf16 copy to fp32 that _call missed)."""
    a = problem.get("a_dtype") or problem["dtype"]
    for launch in launches:
        for name, dtype in (("a_ptr", a), ("b_ptr", problem.get("b_dtype", a))):
            want = f"*{_TRITON_NAMES.get(dtype, dtype)}"
            if launch["signature"].get(name, want) != want:
                got = launch["signature"][name]
                raise RuntimeError(f"{key}: {launch['kernel']} got {name} {got}, not {want} (a copy the "
                                   "interpreter's launch path makes that _call does not keep from it?)")


def capture(tree: str, file: str, winners_only: bool) -> dict:
    from triton.runtime.interpreter import InterpretedFunction

    import tritonblas
    from tritonblas.config import GemmConfig

    if not Path(tritonblas.__file__).resolve().is_relative_to(Path(tree).resolve()):
        raise RuntimeError(f"tritonblas imported from {tritonblas.__file__}, not from --tree {tree}")
    data = json.loads(Path(file).read_text())
    runs, skipped = _runs(data, winners_only)
    used = _patch_device(_h200(data))
    recorder = Recorder()
    InterpretedFunction.run = lambda self, *args, **kwargs: recorder.run(self, *args, **kwargs)
    entries: dict[str, list] = {}
    for key, problem, config in runs:
        if key in entries:  # the same problem and config in rows of two triton versions: one launch
            continue
        recorder.launches = []
        _call(problem, GemmConfig.model_validate(config))
        if not recorder.launches:
            raise RuntimeError(f"{key}: the call launched no kernel")
        _check_operands(key, problem, recorder.launches)
        entries[key] = recorder.launches
    if entries and not used[0]:
        raise RuntimeError("the device patch was never used: the calls did not plan for the header's device")
    return {"tree": str(Path(tree).resolve()), "file": str(file), "skipped": skipped,
            "entries": [{"key": key, "launches": launches} for key, launches in entries.items()]}


# --- compile (child, no interpreter) ------------------------------------------------------------------------

def _compile_key(launch: dict) -> str:
    return json.dumps([launch[k] for k in ("kernel", "signature", "constexprs", "attrs", "options")])


def _text_sections(cubin: bytes) -> bytes:
    """The bytes of an ELF64 cubin's .text.* sections (the kernels' machine code), by section name."""
    shoff, = struct.unpack_from("<Q", cubin, 0x28)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", cubin, 0x3A)

    def section(i: int) -> tuple[int, int, int]:
        name, _, _, _, offset, size = struct.unpack_from("<IIQQQQ", cubin, shoff + i * shentsize)
        return name, offset, size

    _, names_at, _ = section(shstrndx)
    found = []
    for i in range(shnum):
        name_at, offset, size = section(i)
        name = cubin[names_at + name_at:cubin.index(b"\0", names_at + name_at)]
        if name.startswith(b".text"):
            found.append(name + b"\0" + cubin[offset:offset + size])
    if not found:
        raise RuntimeError("the cubin has no .text section")
    return b"".join(sorted(found))


# A debug section's body is .b8/.b32 data and label references: no brace inside.
_DEBUG_SECTION = re.compile(r"\.section\s+\.debug\w*\s*\{[^}]*\}")
# Labels only the debug sections refer to (scope ranges): numbered by the source's lines, not the code.
_DEBUG_LABEL = re.compile(r"\$L__tmp\d+:")


def strip_ptx(ptx: str) -> str:
    """PTX less what does not reach the machine code: debug sections and labels, .loc/.file lines,
    comments."""
    ptx = _DEBUG_SECTION.sub("", ptx)
    lines = (re.sub(r"//.*", "", line).strip() for line in ptx.splitlines())
    return "\n".join(line for line in lines
                     if line and not line.startswith((".loc", ".file")) and not _DEBUG_LABEL.fullmatch(line))


def _bundled(fn, value: object) -> object:
    """A constexpr as the kernel takes it: the JSON list of a constexpr bundle's fields back into the
    kernel's bundle (kernels/specs.py, in trees from 2026-12-04 on), any other value as it is."""
    try:
        from tritonblas.kernels.specs import SPECS
    except ImportError:  # a tree from before the bundles
        return value
    spec = SPECS.get(fn.__name__)
    if spec is None or not isinstance(value, list):
        return value
    import triton.language as tl

    return spec(*(tl.constexpr(v) for v in value))


def compile_one(key: str) -> dict:
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    kernel, signature, constexprs, attrs, options = json.loads(key)
    module, name = kernel.rsplit(".", 1)
    fn = getattr(importlib.import_module(module), name)
    src = ASTSource(fn, signature, constexprs={tuple(p): _bundled(fn, v) for p, v in constexprs},
                    attrs={tuple(p): v for p, v in attrs})
    compiled = triton.compile(src, target=GPUTarget(*TARGET), options=dict(options, debug=False))
    ptx = strip_ptx(compiled.asm["ptx"])
    return {"ptx_sha256": hashlib.sha256(ptx.encode()).hexdigest(),
            "text_sha256": hashlib.sha256(_text_sections(compiled.asm["cubin"])).hexdigest(),
            "shared": compiled.metadata.shared, "num_warps": compiled.metadata.num_warps}


def compile_all(plans: dict, jobs: int) -> dict:
    """Compiles each distinct launch once (in `jobs` processes) and fills in every launch's results."""
    import triton

    import tritonblas  # the compile processes import the kernels from the tree the capture planned

    if not Path(tritonblas.__file__).resolve().is_relative_to(Path(plans["tree"])):
        raise RuntimeError(f"tritonblas imported from {tritonblas.__file__}, not from {plans['tree']}")
    keys = sorted({_compile_key(launch) for e in plans["entries"] for launch in e["launches"]})
    with concurrent.futures.ProcessPoolExecutor(max_workers=jobs) as pool:
        results = dict(zip(keys, pool.map(compile_one, keys), strict=True))
    for entry in plans["entries"]:
        for launch in entry["launches"]:
            launch.update(results[_compile_key(launch)])
    plans["distinct_compiles"], plans["triton_version"] = len(keys), triton.__version__
    return plans


# --- the two steps for one tree, and the comparison -----------------------------------------------------

def _child(step: str, tree: str, arg: str, out: Path, *flags: str) -> None:
    # The tree first; the caller's PYTHONPATH after it (PYTHONPATH=/work/triton39:... picks the triton).
    path = os.pathsep.join(p for p in (tree, *os.environ.get("PYTHONPATH", "").split(os.pathsep)) if p)
    env = {**os.environ, "PYTHONPATH": path, "PYTHONDONTWRITEBYTECODE": "1"}  # a read-only tree stays so
    env.pop("TRITON_INTERPRET", None)
    if step == "capture":
        env["TRITON_INTERPRET"] = "1"
    cmd = [sys.executable, __file__, f"--{step}", arg, "--tree", tree, "--out", str(out), *flags]
    subprocess.run(cmd, env=env, check=True)


def plan_tree(tree: str, file: str, out: Path, jobs: int, winners_only: bool) -> None:
    t0 = time.monotonic()
    captured = out.with_suffix(".captured.json")
    _child("capture", tree, file, captured, *(["--winners-only"] if winners_only else []))
    t1 = time.monotonic()
    _child("compile", tree, str(captured), out, "--jobs", str(jobs))
    captured.unlink()
    plans = json.loads(out.read_text())
    launches = sum(len(e["launches"]) for e in plans["entries"])
    skipped = {"torch": 0, "gluon": 0, **plans.get("skipped", {})}
    print(f"{tree}: {len(plans['entries'])} entries, {launches} launches, {plans['distinct_compiles']} "
          f"distinct compiles; capture {t1 - t0:.0f} s, compile {time.monotonic() - t1:.0f} s\n  not "
          f"captured: {skipped['torch']} torch configs (no Triton kernel), {skipped['gluon']} gluon configs "
          "(the Gluon kernels launch on CUDA tensors only: on the CPU their Triton twins run)")


def compare(a: dict, b: dict) -> list[str]:
    """The differences between two trees' plans, entry by entry (the first's order), launch by launch."""
    diffs = []
    ea, eb = ({e["key"]: e["launches"] for e in p["entries"]} for p in (a, b))
    diffs += [f"{key}: only in the first" for key in ea if key not in eb]
    diffs += [f"{key}: only in the second" for key in eb if key not in ea]
    for key in (k for k in ea if k in eb):
        la, lb = ea[key], eb[key]
        if len(la) != len(lb):
            lines = [f"  kernels {[x['kernel'] for x in la]} vs {[y['kernel'] for y in lb]}"]
        else:
            pairs = enumerate(zip(la, lb, strict=True))
            lines = [line for i, (x, y) in pairs for line in _launch_diff(i, x, y)]
        if lines:
            diffs += [f"{key}:", *lines]
    return diffs


def _launch_diff(i: int, x: dict, y: dict) -> list[str]:
    fields = [f for f in COMPARED if x[f] != y[f]]
    if not fields:
        return []
    lines = [f"  launch {i} {x['kernel']}: {f} {_short(x[f])} vs {_short(y[f])}" for f in fields]
    cx, cy = dict(_named_constexprs(x)), dict(_named_constexprs(y))
    lines.append(f"    (constexprs that differ: {_dict_diff(cx, cy)}; "
                 f"signature that differs: {_dict_diff(x['signature'], y['signature'])})")
    return lines


def _short(value: object) -> object:
    return value[:16] if isinstance(value, str) and len(value) == 64 else value  # a sha256


def _named_constexprs(launch: dict) -> list[tuple[str, object]]:
    names = list(launch["signature"])
    return [(names[path[0]], v) for path, v in launch["constexprs"]]


def _dict_diff(x: dict, y: dict) -> dict:
    return {k: (x.get(k, "-"), y.get(k, "-")) for k in x.keys() | y.keys() if x.get(k, "-") != y.get(k, "-")}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--tree", help="the tree whose tritonblas is planned")
    ap.add_argument("--file", help="a config file (configs/sm_90.json)")
    ap.add_argument("--out", type=Path, help="where the plans go (JSON)")
    ap.add_argument("--jobs", type=int, default=os.cpu_count() or 1, help="compile processes")
    ap.add_argument("--compare", nargs=2, metavar=("A", "B"), help="two plans files: exit 0 when identical")
    ap.add_argument("--winners-only", action="store_true",
                    help="skip the Triton configs vendor entries carry (\"kernel\")")
    ap.add_argument("--capture", help=argparse.SUPPRESS)
    ap.add_argument("--compile", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.compare:
        a, b = (json.loads(Path(p).read_text()) for p in args.compare)
        if a["triton_version"] != b["triton_version"]:
            print(f"note: triton {a['triton_version']} vs {b['triton_version']}")
        diffs = compare(a, b)
        if diffs:
            print("\n".join(diffs))
            sys.exit(1)
        launches = sum(len(e["launches"]) for e in a["entries"])
        print(f"{len(a['entries'])} entries, {launches} launches: identical")
    elif args.capture:
        args.out.write_text(json.dumps(capture(args.tree, args.capture, args.winners_only), indent=1))
    elif args.compile:
        args.out.write_text(json.dumps(compile_all(json.loads(Path(args.compile).read_text()), args.jobs),
                                       indent=1))
    elif args.tree and args.file and args.out:
        plan_tree(args.tree, args.file, args.out, args.jobs, args.winners_only)
    else:
        ap.error("give --tree, --file and --out, or --compare A B")


if __name__ == "__main__":
    main()
