"""The test matrix: every shape the kernel/API tests use is listed here, with the configs that force
each kernel path at a shape and the float64 reference check.

The interpreter runs one tiny-tile launch in ~0.05-0.3 s, so the suites take a pairwise covering set
of the factors (every pair of factor values appears in some case) rather than their cross product.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from tritonblas import GemmConfig
from tritonblas.arch import INTERPRETER_DEVICE
from tritonblas.launch.streamk import program_count

# Ragged sizes: none is a multiple of a 16/32 block, so every tile edge is partial somewhere.
RAGGED = (1, 15, 17, 33, 100, 127)

# (M, N, K) for the path x layout x dtype x op matrix.
SHAPES = [
    (15, 17, 33),
    (17, 33, 100),
    (33, 100, 127),
    (100, 15, 17),
    (127, 33, 15),  # K below one 16-block: a single masked K step
    (1, 127, 100),  # M = 1: every row tile wraps onto row 0
    (127, 1, 33),  # N = 1: every column tile wraps onto column 0
    (100, 127, 1),  # K = 1: one masked K step, nothing for Stream-K to split
]

# Shapes of the bias x beta/alpha matrix: one with room for every Stream-K split, and M = 1, where
# (M, 1) and (1, N) biases and a scalar all broadcast the same way.
BIAS_SHAPES = [(33, 17, 100), (1, 33, 100)]

# Degenerate sizes: no K (C = beta * bias, or zeros), empty outputs, and 1x1x1.
EDGE_SHAPES = [
    (17, 33, 0),  # K = 0: nothing to accumulate; out = beta * bias or zeros
    (1, 1, 0),  # K = 0 at the smallest output
    (0, 17, 33),  # M = 0: empty output, nothing launched
    (17, 0, 33),  # N = 0: empty output
    (0, 0, 0),  # everything empty
    (0, 15, 0),  # empty output and no K
    (1, 1, 1),  # one product
]

# One mid-size ragged problem for the autograd, compile and out= tests: ragged in every dim, with room
# for a Stream-K split of the forward GEMM.
MID_SHAPE = (33, 17, 100)

# The error tests: M != 2 so a (2, N) bias cannot broadcast; K >= N so out can be a view of a.
ERROR_SHAPE = (5, 4, 6)

# x shapes for linear (K = 33 features last): every rank torch accepts, and empty leading dims.
LINEAR_X_SHAPES = [
    (33,),  # 1-D x: a single row, result (N,)
    (3, 5, 33),
    (2, 3, 4, 33),
    (0, 33),  # no rows
    (3, 0, 33),  # no rows in a middle dim
    "transposed",  # a non-contiguous (3, 5, 33) x: reshape must copy, the result must not care
]

# Aligned sizes for the tensor-descriptor (TMA) path: leading dims are 16-byte multiples in fp16 and
# fp32, yet 104, 40 and 72 are not multiples of a 32 block, so descriptors must zero-fill edges.
TMA_SHAPES = [(104, 40, 72), (8, 136, 200)]

# The GPU bias x beta/alpha matrix: Stream-K room with ragged N/K, and M = 1.
GPU_BIAS_SHAPES = [(513, 1000, 777), (1, 4096, 4096)]

# Real sizes for the GPU suite, including the seed's failing shapes.
GPU_SHAPES = [
    (12, 12, 512),  # seed failure: one tile, small M/N, long K
    (15, 17, 512),  # seed failure: ragged M and N
    (19, 13, 512),  # seed failure: ragged M and N
    (127, 4097, 4095),  # seed failure: N and K one past / one short of a power of two
    (1, 4096, 4096),  # GEMV-like
    (4096, 1, 4096),  # single output column
    (513, 1000, 777),  # Stream-K with N and K not multiples of 16
    (2048, 2048, 2047),  # K not a multiple of 16
    (1024, 1030, 4096),  # N not a multiple of 16
    (8192, 8192, 1024),  # large: many full waves
]

LAYOUTS = ("nn", "nt", "tn", "tt", "strided")
DTYPES = {"fp16": torch.float16, "fp32": torch.float32}  # the interpreter's tl.dot on bf16 is garbage
GPU_DTYPES = {"bf16": torch.bfloat16, **DTYPES}
# Kernel paths: Persistent (plain, flattened tile x K loop, warp-specialized), Stream-K with one tile
# split over 3+ programs / data-parallel plus split tiles (its data-parallel loop also flattened or
# warp-specialized) / idle programs, and the heuristic's choice.
PATHS = ("persistent", "persistent_flat", "sk_shared", "sk_mixed", "sk_mixed_flat", "sk_idle", "heuristic")
# bias kinds addmm accepts, including stride-0 expanded views and a transposed (non-contiguous) one.
BIASES = ("scalar0d", "one", "row", "row2d", "col", "full", "full_t", "expand_row", "expand_col",
          "expand_scalar")
# name -> (beta, alpha); "beta0_nan" fills the input with NaN, which beta=0 must ignore like torch.
SCALES = {"unit": (1, 1), "scaled": (0.5, -2.0), "beta0_nan": (0.0, 1.5), "alpha0": (2, 0.0)}
SM_COUNT = INTERPRETER_DEVICE.sm_count


def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def pairwise(factors: dict[str, Sequence], allowed: Callable[[dict], bool]) -> list[dict]:
    """A small deterministic set of allowed combinations covering every allowed pair of values."""
    names = list(factors)
    combos = [dict(zip(names, vals, strict=True)) for vals in itertools.product(*factors.values())]
    combos = [c for c in combos if allowed(c)]
    idx = list(itertools.combinations(range(len(names)), 2))
    cover = [{(i, c[names[i]], j, c[names[j]]) for i, j in idx} for c in combos]
    todo = set().union(*cover)
    chosen = []
    while todo:
        best = max(range(len(combos)), key=lambda i: len(cover[i] & todo))
        chosen.append(combos[best])
        todo -= cover[best]
    return chosen


@dataclass(frozen=True)
class StreamKPlan:
    """How the Stream-K kernel splits a problem, derived independently of the kernel: the T tiles left
    after full waves each get S = min(programs // T, iters) K segments, and program p < S*T runs
    segment p // T of leftover tile p % T."""

    programs: int
    tiles: int
    dp_tiles: int
    iters: int  # K iterations per tile

    @property
    def splits(self) -> int:
        sk_tiles = self.tiles - self.dp_tiles
        return min(self.programs // sk_tiles, self.iters) if sk_tiles else 0

    @property
    def owners(self) -> tuple[tuple[int, ...], ...]:
        """Per Stream-K tile: the programs that run part of its K loop, in segment order."""
        sk_tiles = self.tiles - self.dp_tiles
        return tuple(tuple(t + j * sk_tiles for j in range(self.splits)) for t in range(sk_tiles))

    @property
    def max_sharing(self) -> int:
        return max((len(o) for o in self.owners), default=0)

    @property
    def idle(self) -> int:
        """Programs that run no Stream-K segment."""
        return self.programs - self.splits * (self.tiles - self.dp_tiles)

    @property
    def slots(self) -> frozenset[int]:
        """Workspace slots the partials of split tiles go to: slot p for program p."""
        return frozenset(p for own in self.owners if len(own) > 1 for p in own)

    @property
    def groups(self) -> int:
        """Fix-up groups per split tile: Q = cdiv(S, ceil(sqrt(S))) for S >= 12, else one (no tree)."""
        s = self.splits
        return 1 if s < 12 else cdiv(s, math.isqrt(s - 1) + 1)

    @property
    def group_slots(self) -> frozenset[int]:
        """Slots of the tree fix-up's group sums, after the programs' own: Q per split tile."""
        if self.groups == 1:
            return frozenset()
        return frozenset(range(self.programs, self.programs + (self.tiles - self.dp_tiles) * self.groups))

    def workspace(self, config: GemmConfig) -> tuple[int, int]:
        """(fp32 floats, counters) the launch sizes its Stream-K scratch to."""
        sk_tiles = self.tiles - self.dp_tiles
        tree = sk_tiles * self.groups if self.groups > 1 else 0
        return (self.programs + tree) * config.block_m * config.block_n, sk_tiles + tree


def sk_plan(config: GemmConfig, m: int, n: int, k: int, sm_count: int = SM_COUNT) -> StreamKPlan:
    progs = program_count(config, m, n, k, sm_count)
    tiles = cdiv(m, config.block_m) * cdiv(n, config.block_n)
    return StreamKPlan(progs, tiles, tiles // progs * progs, cdiv(k, config.block_k))


SK_GOALS: dict[str, Callable[[StreamKPlan], bool]] = {
    "sk_shared": lambda p: p.max_sharing >= 3,  # one tile's K loop split over 3+ programs
    "sk_mixed": lambda p: p.dp_tiles > 0 and p.max_sharing >= 2,  # data-parallel and split tiles
    "sk_idle": lambda p: p.dp_tiles > 0 and p.idle > 0 and p.max_sharing >= 2,  # fewer iters than programs
    "sk_tma": lambda p: p.max_sharing >= 2,  # a split tile, its K loop on tensor descriptors
}


def sk_goal(path: str) -> Callable[[StreamKPlan], bool]:
    """The split a Stream-K path asks for; "_flat" only changes its data-parallel loop."""
    return SK_GOALS[path.removesuffix("_flat")]


def sk_config(bm: int, bn: int, bk: int, grid: int) -> GemmConfig:
    return GemmConfig(block_m=bm, block_n=bn, block_k=bk, grid=grid, streamk=True)


# (id, shape, config, programs, dp tiles, owners of each Stream-K tile, idle programs, partial slots),
# worked out by hand from the kernel's docstring: S = min(programs // leftover tiles, K iterations)
# segments per leftover tile, program p runs segment p // T of leftover tile p % T.
STREAMK_SPLITS = [
    # 1 tile, 8 K iterations over 4 programs: every program holds a quarter of the one tile.
    ("one_tile_four_programs", (15, 17, 127), sk_config(32, 32, 16, 4), 4, 0, ((0, 1, 2, 3),), 0,
     {0, 1, 2, 3}),
    # grid 64 is capped at the 3 K iterations there are.
    ("grid_capped_by_iterations", (15, 17, 33), sk_config(32, 32, 16, 64), 3, 0, ((0, 1, 2),), 0, {0, 1, 2}),
    # 8 tiles on 6 programs: 6 data-parallel, 2 split three ways (4 K iterations: segments of 1, 1, 2).
    ("dp_and_sk", (100, 33, 100), sk_config(32, 32, 32, 6), 6, 6, ((0, 2, 4), (1, 3, 5)), 0,
     {0, 1, 2, 3, 4, 5}),
    # 2 leftover tiles x 2 iterations on 6 programs: 4 programs take one iteration, 2 take none.
    ("idle_programs", (100, 33, 40), sk_config(32, 32, 32, 6), 6, 6, ((0, 2), (1, 3)), 2, {0, 1, 2, 3}),
    # 3 leftover tiles on 5 programs: one segment each (no split, no partial), 2 programs idle.
    ("leftover_tiles_unsplit", (100, 33, 100), sk_config(32, 32, 32, 5), 5, 5, ((0,), (1,), (2,)), 2,
     set()),
    # tiles a multiple of the grid: all data-parallel, no Stream-K iteration, nothing to fix up.
    ("all_data_parallel", (64, 64, 100), sk_config(32, 32, 32, 2), 2, 4, (), 2, set()),
    # one program: every tile is its own, in the data-parallel loop.
    ("single_program", (33, 17, 100), sk_config(16, 16, 16, 1), 1, 6, (), 1, set()),
    # 1 leftover tile of 7 iterations after a full wave of 7: shared by all seven programs.
    ("tile_shared_by_seven", (63, 17, 100), sk_config(16, 16, 16, 7), 7, 7, ((0, 1, 2, 3, 4, 5, 6),), 0,
     {0, 1, 2, 3, 4, 5, 6}),
]


# Tiny tiles and grids keep interpreter launches short; the GPU suite uses real tiles and grids
# around the H200's 132 SMs.
_BLOCKS = [(32, 32, 32), (32, 16, 16), (16, 32, 16), (16, 16, 16)]
_GPU_BLOCKS = [(128, 128, 64), (128, 64, 64), (64, 64, 64), (64, 64, 32)]


@functools.cache
def config_for_path(path: str, m: int, n: int, k: int, gpu: bool = False) -> GemmConfig | None:
    """The config that runs `path` at (m, n, k); None for the heuristic's own choice.

    Raises LookupError when no config realizes the path at this shape (e.g. K = 1 has no K loop to
    split).
    """
    if path == "heuristic":
        return None
    flags = {"flatten": path.endswith("_flat"), "tma": path.endswith("_tma")}
    if path.startswith("persistent"):
        if gpu:
            return GemmConfig(block_m=128, block_n=128, block_k=64, num_warps=8, num_stages=3, grid=132,
                              **flags)
        # Fewer programs than tiles, so programs loop; group_m=2 makes several tile groups.
        bm = 16 if m < 64 else 32
        return GemmConfig(block_m=bm, block_n=16, block_k=32, group_m=2, grid=3, **flags)
    goal = sk_goal(path)
    blocks, grids = (_GPU_BLOCKS, range(100, 265)) if gpu else (_BLOCKS, range(2, 25))
    for (bm, bn, bk), grid in itertools.product(blocks, grids):
        warps = 8 if gpu and bm * bn >= 128 * 128 else 4
        config = GemmConfig(block_m=bm, block_n=bn, block_k=bk, group_m=2 if not gpu else 8, grid=grid,
                            streamk=True, num_warps=warps, num_stages=3 if gpu else 2, **flags)
        if goal(sk_plan(config, m, n, k)):
            return config
    raise LookupError(f"no config realizes {path} at {m}x{n}x{k}")


@functools.cache
def path_feasible(path: str, m: int, n: int, k: int, gpu: bool = False) -> bool:
    try:
        config_for_path(path, m, n, k, gpu)
    except LookupError:
        return False
    return True


def operands(m: int, n: int, k: int, dtype: torch.dtype, layout: str, device: str = "cpu",
             seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """A (m, k) and B (k, n) as views in `layout`: 't' is a transposed view, 'strided' slices both."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        return torch.randn(shape, generator=g, dtype=torch.float32).to(dtype=dtype, device=device)

    if layout == "strided":  # no unit stride in either dim: the pointer path with general strides
        return rand(m, 2 * k)[:, ::2], rand(2 * k, 3 * n)[::2, ::3]
    a = rand(m, k) if layout[0] == "n" else rand(k, m).t()
    b = rand(k, n) if layout[1] == "n" else rand(n, k).t()
    return a, b


def make_bias(kind: str, m: int, n: int, dtype: torch.dtype, device: str = "cpu", seed: int = 1,
              nan: bool = False) -> torch.Tensor | None:
    """The bias (addmm's input) of `kind`; `nan` fills it with NaN (for beta = 0, which must ignore it)."""
    g = torch.Generator().manual_seed(seed)

    def rand(*shape: int) -> torch.Tensor:
        t = torch.randn(shape, generator=g, dtype=torch.float32)
        return (t.fill_(float("nan")) if nan else t).to(dtype=dtype, device=device)

    return {
        "none": lambda: None,
        "scalar0d": lambda: rand(),
        "one": lambda: rand(1),
        "row": lambda: rand(n),
        "row2d": lambda: rand(1, n),
        "col": lambda: rand(m, 1),
        "full": lambda: rand(m, n),
        "full_t": lambda: rand(n, m).t(),
        "expand_row": lambda: rand(n).expand(m, n),
        "expand_col": lambda: rand(m, 1).expand(m, n),
        "expand_scalar": lambda: rand(1, 1).expand(m, n),
        "expand_1d": lambda: rand(1).expand(n),  # a (N,) linear bias with stride 0
    }[kind]()


def reference(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, beta: float = 1.0,
              alpha: float = 1.0) -> torch.Tensor:
    """alpha * a @ b + beta * bias in float64 (on a's device); beta == 0 ignores bias (NaN included)."""
    ref = alpha * (a.double() @ b.double())
    if bias is not None and beta != 0:
        ref = ref + beta * bias.double()
    return ref


def op_reference(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float = 1,
                 alpha: float = 1) -> torch.Tensor:
    """`reference` with `run_op`'s meaning of the arguments: matmul ignores bias, linear beta/alpha."""
    if op == "matmul":
        return reference(a, b)
    return reference(a, b, bias, beta, alpha) if op == "addmm" else reference(a, b, bias)


def rel_error(x: torch.Tensor, ref: torch.Tensor) -> float:
    diff = (x.double().to(ref.device) - ref).norm().item()
    scale = ref.norm().item()
    return diff / scale if scale > 0 else diff


def assert_close(ours: torch.Tensor, theirs: torch.Tensor, ref: torch.Tensor, slack: float = 2.0,
                 k: int = 1) -> None:
    """err(ours) <= slack * err(torch) + eps, errors relative to the float64 reference.

    eps = one rounding of the output plus sqrt(k) roundings of the fp32 accumulator (the usual
    statistical bound for a length-k sum): cuBLAS reduces an M=1 fp32 GEMV as a tree, 8x below our
    blocked sequential sum at K=4096 (1.45e-7 vs 1.17e-6 on the H200), and both are correct.
    """
    assert ours.shape == theirs.shape == ref.shape, (ours.shape, theirs.shape, ref.shape)
    assert ours.dtype == theirs.dtype
    eps = torch.finfo(ours.dtype).eps / 2 + max(k, 1) ** 0.5 * torch.finfo(torch.float32).eps / 2
    err, err_torch = rel_error(ours, ref), rel_error(theirs, ref)
    assert err <= slack * err_torch + eps, f"error {err:.3g} vs torch's {err_torch:.3g}"


@dataclass
class Launch:
    a: torch.Tensor
    b: torch.Tensor
    c: torch.Tensor
    config: GemmConfig
    precision: str


def record_launches(monkeypatch) -> list[Launch]:
    """Wrap the ops' launcher: record what each launch got (operands, config, precision), then run it."""
    import tritonblas.call.run

    calls: list[Launch] = []
    real = tritonblas.call.run.launch_gemm

    def spy(a, b, c, bias, alpha, beta, config, sm_count, precision):
        calls.append(Launch(a, b, c, config, precision))
        return real(a, b, c, bias, alpha, beta, config, sm_count, precision)

    monkeypatch.setattr(tritonblas.call.run, "launch_gemm", spy)
    return calls


def run_op(op: str, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, beta: float = 1,
           alpha: float = 1, **kw) -> tuple[torch.Tensor, torch.Tensor]:
    """(tritonblas's result, torch's result) of `op` on the same inputs; linear gets weight = b.T."""
    import torch.nn.functional as F

    import tritonblas

    if op == "matmul":
        return tritonblas.matmul(a, b, **kw), torch.mm(a, b)
    if op == "addmm":
        return (tritonblas.addmm(bias, a, b, beta=beta, alpha=alpha, **kw),
                torch.addmm(bias, a, b, beta=beta, alpha=alpha))
    return tritonblas.linear(a, b.t(), bias, **kw), F.linear(a, b.t(), bias)


def prime_workspace(config: GemmConfig, plan: StreamKPlan, device: torch.device) -> torch.Tensor:
    """Size the Stream-K scratch as the launch will and fill it with NaN: the launch reuses it, so the
    slots it wrote partials to can be read back (see `written_slots`)."""
    from tritonblas.launch import scratch

    ws, _ = scratch.workspace(device, *plan.workspace(config))
    return ws.fill_(float("nan"))


def written_slots(ws: torch.Tensor, config: GemmConfig, plan: StreamKPlan, first: int = 0,
                  count: int | None = None) -> frozenset[int]:
    """Slots first .. first + count - 1 (default: the programs' own) that hold something but NaN."""
    size = config.block_m * config.block_n
    count = plan.programs if count is None else count
    return frozenset(s for s in range(first, first + count) if not ws[s * size:(s + 1) * size].isnan().all())


def same_view(x: torch.Tensor, y: torch.Tensor) -> bool:
    """x and y address the same elements (strides of size-1 dims do not matter)."""
    def strides(t: torch.Tensor) -> tuple[int, ...]:
        return tuple(s for s, n in zip(t.stride(), t.shape, strict=True) if n > 1)

    return x.data_ptr() == y.data_ptr() and x.shape == y.shape and strides(x) == strides(y)


def check_case(op: str, dtype: str, path: str, shape: tuple[int, int, int], layout: str, bias_kind: str,
               scale: str, launches: list[Launch], device: str = "cpu") -> None:
    """Run one matrix case and check it: accuracy vs float64 and torch, operands read in place, the
    exact config run, and for Stream-K the planned split (partials written, counters reset)."""
    from tritonblas.launch import scratch

    m, n, k = shape
    a, b = operands(m, n, k, GPU_DTYPES[dtype], layout, device)
    bias = make_bias(bias_kind, m, n, GPU_DTYPES[dtype], device, nan=scale == "beta0_nan")
    beta, alpha = SCALES[scale]
    config = config_for_path(path, m, n, k, device != "cpu")
    plan = ws = None
    if config is not None and config.streamk:
        plan = sk_plan(config, m, n, k)
        assert sk_goal(path)(plan), plan
        ws = prime_workspace(config, plan, a.device)
    # Path "heuristic" (config None) goes through dispatch, kernels only: on a GPU dispatch may pick
    # torch.mm (the vendor candidate), which launches nothing of ours.
    ours, theirs = run_op(op, a, b, bias, beta, alpha, config=config,
                          backend=None if config is not None else "triton")
    assert_close(ours, theirs, op_reference(op, a, b, bias, beta, alpha), k=a.shape[-1])
    (call,) = launches
    # The kernel reads the caller's tensors in place: no copy, whatever the layout.
    assert same_view(call.a, a) and same_view(call.b, b)
    if config is not None:
        assert call.config == config  # config= runs exactly that config
    if plan is not None:
        # The split really happened: exactly the planned programs wrote partials, and every tile's
        # arrival counter is back at zero for the next launch.
        assert written_slots(ws, config, plan) == plan.slots
        assert not scratch.workspace(a.device, 0, 0)[1].any()


# Op variants of the path matrix -> (op, bias kind, scale); the bias matrix varies both for addmm.
MATRIX_OPS = {"matmul": ("matmul", "none", "unit"), "addmm": ("addmm", "full", "scaled"),
              "linear": ("linear", "row", "unit"), "linear_nobias": ("linear", "none", "unit"),
              "linear_expand": ("linear", "expand_1d", "unit")}
BIAS_PATHS = ("persistent", "sk_shared", "sk_mixed", "heuristic")


def matrix_cases(dtypes: Sequence[str], paths: Sequence[str], shapes: Sequence[tuple],
                 allowed: Callable[[dict], bool]) -> list[dict]:
    """Pairwise cover of op variant x dtype x path x shape x layout."""
    return pairwise({"op": list(MATRIX_OPS), "dtype": dtypes, "path": paths, "shape": shapes,
                     "layout": LAYOUTS}, allowed)


def bias_cases(dtypes: Sequence[str], shapes: Sequence[tuple], allowed: Callable[[dict], bool]) -> list[dict]:
    """Pairwise cover of addmm's bias kind x beta/alpha x dtype x path x shape x layout."""
    return pairwise({"bias": BIASES, "scale": list(SCALES), "dtype": dtypes, "path": BIAS_PATHS,
                     "shape": shapes, "layout": LAYOUTS}, allowed)


def case_id(case: dict) -> str:
    return "-".join("x".join(map(str, v)) if isinstance(v, tuple) else str(v) for v in case.values())


def check_matrix_case(case: dict, launches: list[Launch], device: str = "cpu") -> None:
    if "op" in case:
        op, bias_kind, scale = MATRIX_OPS[case["op"]]
    else:
        op, bias_kind, scale = "addmm", case["bias"], case["scale"]
    check_case(op, case["dtype"], case["path"], case["shape"], case["layout"], bias_kind, scale, launches,
               device)
