"""The real benchmark: run a candidate through the public ops on random inputs, verify it, time it.

Protocol (identity.TIMING_PROTOCOL): triton.testing.do_bench, median with the 20th/80th percentiles.
do_bench zeroes a 256 MB buffer before every repetition, so each one starts with a cold L2 (no need
to rotate inputs), and that memset keeps the GPU busy while the host enqueues the next launch, so even
for tiny problems the host-side launch overhead is not in the measured time: it measures what a CUDA
graph would, without the cost of capturing one per candidate.

That holds for the host, not for small problems' kernels. Those (`replayed`: `Problem.small`, every
problem of the small class) are timed as CUDA-graph replays of REPLAY_CALLS calls instead, per call:
after the 256 MB memset their kernels of 3-5 us read 10-20 us with p20-p80 spreads as wide as the gaps
between candidates (the tune-all run of 2026-11-30 on 512x512x512 fp16: 49 candidates at medians
13.3-18.5 us, torch.mm among them), so the winner was a draw: the shipped 64x16x256 ran 9.7 us in the
bench where the others ran 7.5. Back-to-back replays time the kernel as a model calls it, its operands in
L2.

Correctness: the candidate's relative Frobenius error against an fp64 reference must be at most twice
torch's own error on the same inputs plus one unit roundoff of the output dtype.

Quantized problems (scaled_mm) are timed through tritonblas.scaled_mm(config=...) against torch's own
call of them (`scaled`: inputs, reference and calls); where torch refuses the problem (e.g.
torch._scaled_mm's multiples of 16) there is no vendor time.

In Triton's interpreter (CPU tensors) the same code runs with wall-clock timing: the numbers mean
nothing there, but verification, statuses and winners are real, which is what the CPU tests need.
"""

from __future__ import annotations

import os
import statistics
import time
from dataclasses import dataclass

import torch

from ..arch import DeviceInfo
from ..config import GemmConfig
from ..parallel import run_first_launches
from ..problem import Problem
from ..validate import TORCH_DTYPE_OF
from . import scaled
from .protocol import Benchmark, BenchResult, error_result

# Unit roundoff of the output dtype: the error allowance on top of twice torch's own error.
UNIT_ROUNDOFF = {"fp16": 2.0**-11, "bf16": 2.0**-8, "fp32": 2.0**-24, "e4m3": 2.0**-4, "e5m2": 2.0**-3}


REPLAY_CALLS = 20


def replayed(problem: Problem) -> bool:
    """Whether GpuBenchmark times `problem`'s candidates (and torch.mm) as CUDA-graph replays (see the
    module docstring): the small problems (Problem.small). A skinny problem's weight (1x4096x4096: 32
    MB) stays on the cold-L2 protocol, as a decode step meets it. An empty output (M or N = 0) launches
    nothing, so there is no graph to capture."""
    return problem.m * problem.n != 0 and problem.small


@dataclass
class _Inputs:
    problem: Problem
    a: torch.Tensor
    b: torch.Tensor
    bias: torch.Tensor | None
    out: torch.Tensor
    ref: torch.Tensor
    ref_norm: float
    tolerance: float
    backend: str | None = None  # what config=None calls pass: dispatch's backend restriction
    scaled: scaled.ScaledOperands | None = None  # a quantized problem's operands, scales and reference
    vendor_ok: bool | None = None  # whether torch runs the problem (None: not tried yet)


def _bias(kind: str, m: int, n: int, dtype: torch.dtype, device: torch.device,
          gen: torch.Generator) -> torch.Tensor | None:
    shapes = {"none": None, "scalar": (1, 1), "row": (n,), "column": (m, 1), "full": (m, n)}
    shape = shapes[kind]
    if shape is None:
        return None
    return torch.randn(shape, generator=gen, dtype=torch.float32, device=device).to(dtype)


def rel_error(x: torch.Tensor, ref: torch.Tensor, ref_norm: float) -> float:
    return ((x.double() - ref).norm().item()) / max(ref_norm, 1e-300)


class GpuBenchmark(Benchmark):
    """Times candidates through tritonblas.matmul/addmm(config=...) and torch.mm on the same inputs."""

    def __init__(self, *, warmup_ms: float = 5, rep_ms: float = 20, quick_rep_ms: float = 3,
                 seed: int = 0, compile_workers: int | None = None, compile_timeout_s: float = 300,
                 cpu_reps: int = 1, torch_device: str | torch.device | None = None,
                 backend: str | None = None, replay_small: bool = True) -> None:
        """backend: for config=None (through dispatch, as users call it), the `backend=` of the call:
        None (dispatch decides), "triton" (the kernels only) or "torch". replay_small: time the
        `replayed` problems as CUDA-graph replays (the tuner); False keeps every problem on the cold
        single-call protocol (the bench's report, whose graph-replay tables come from
        scripts/graph_probe.py)."""
        self.warmup_ms, self.rep_ms, self.quick_rep_ms = warmup_ms, rep_ms, quick_rep_ms
        self.seed = seed
        self.compile_workers = compile_workers or min(16, os.cpu_count() or 1)
        self.compile_timeout_s = compile_timeout_s
        self.cpu_reps = cpu_reps
        self.torch_device = None if torch_device is None else torch.device(torch_device)
        self.backend = backend
        self.replay_small = replay_small
        self._inputs: _Inputs | None = None
        self._verified: dict[GemmConfig, float] = {}
        self._stream: torch.cuda.Stream | None = None  # where replayed problems' graphs are captured

    def _device(self, device: DeviceInfo) -> torch.device:
        if self.torch_device is not None:
            return self.torch_device
        return torch.device("cpu") if device.arch == "interpreter" else torch.device("cuda")

    def _setup(self, problem: Problem, device: DeviceInfo) -> _Inputs:
        if self._inputs is not None and self._inputs.problem == problem:
            return self._inputs
        self.finish(problem)
        dev = self._device(device)
        gen = torch.Generator(device=dev).manual_seed(self.seed)
        if problem.quantized:
            return self._setup_scaled(problem, dev, gen)
        dtype = TORCH_DTYPE_OF[problem.dtype]
        a = scaled.random_operand(problem.m, problem.k, problem.layout[0] == "t", dtype, dev, gen)
        b = scaled.random_operand(problem.k, problem.n, problem.layout[1] == "t", dtype, dev, gen)
        bias = _bias(problem.bias, problem.m, problem.n, dtype, dev, gen)
        ref = a.double() @ b.double()
        if bias is not None:
            ref = ref + bias.double()
        ref_norm = ref.norm().item()
        torch_out = self._plain_torch_call(a, b, bias, torch.empty(problem.m, problem.n, dtype=dtype,
                                                                   device=dev))()
        tolerance = 2 * rel_error(torch_out, ref, ref_norm) + UNIT_ROUNDOFF[problem.out]
        out = torch.empty(problem.m, problem.n, dtype=dtype, device=dev)
        self._inputs = _Inputs(problem, a, b, bias, out, ref, ref_norm, tolerance, self.backend)
        return self._inputs

    def _setup_scaled(self, problem: Problem, dev: torch.device, gen: torch.Generator) -> _Inputs:
        ops = scaled.make(problem, dev, gen)
        ref_norm = ops.ref.norm().item()
        tolerance = scaled.allowance(problem, ops, ref_norm, UNIT_ROUNDOFF[problem.out])
        out = torch.empty(problem.m, problem.n, dtype=ops.out_dtype, device=dev)
        self._inputs = _Inputs(problem, ops.a, ops.b, ops.bias, out, ops.ref, ref_norm, tolerance,
                               self.backend, ops)
        return self._inputs

    @staticmethod
    def _plain_torch_call(a, b, bias, out):
        if bias is None:
            return lambda: torch.mm(a, b, out=out)
        return lambda: torch.addmm(bias, a, b, out=out)

    @staticmethod
    def _torch_call(inp: _Inputs, out: torch.Tensor):
        """torch's call of the problem (torch.mm / addmm, or scaled.vendor_call); where torch refuses a
        quantized problem (found by one call, remembered with the inputs), bf16 torch.mm of its shapes:
        what a user runs where torch has no fp8 GEMM for them (scaled.bf16_call)."""
        if inp.scaled is None:
            return GpuBenchmark._plain_torch_call(inp.a, inp.b, inp.bias, out)
        fn = scaled.vendor_call(inp.scaled, out)
        if inp.vendor_ok is None:
            try:
                fn()
                inp.vendor_ok = True
            except (RuntimeError, ValueError, TypeError):
                inp.vendor_ok = False
        return fn if inp.vendor_ok else scaled.bf16_call(inp.scaled)

    @staticmethod
    def _call(config: GemmConfig | None, inp: _Inputs, out: torch.Tensor):
        import tritonblas

        backend = inp.backend if config is None else None
        if inp.scaled is not None:
            return scaled.op_call(inp.scaled, out, config, backend)
        if inp.bias is None:
            return lambda: tritonblas.matmul(inp.a, inp.b, out=out, config=config, backend=backend)
        return lambda: tritonblas.addmm(inp.bias, inp.a, inp.b, out=out, config=config, backend=backend)

    def _verify(self, config: GemmConfig | None, inp: _Inputs, out: torch.Tensor) -> BenchResult | None:
        """Compile (first launch), run once and check; None when correct."""
        try:
            got = self._call(config, inp, out)()  # (block-wise calls return their own tensor: scaled.op_call)
            err = rel_error(got if isinstance(got, torch.Tensor) else out, inp.ref, inp.ref_norm)
        except Exception as exc:  # a failing candidate is a result, not a crash
            return error_result(exc)
        if not err <= inp.tolerance:  # NaN fails too
            return BenchResult("wrong_result", rel_error=err,
                               note=f"rel. error {err:.3g} > tolerance {inp.tolerance:.3g}")
        self._verified[config] = err
        return None

    def prepare(self, configs: list[GemmConfig], problem: Problem, device: DeviceInfo,
                deadline: float | None = None) -> dict[GemmConfig, BenchResult]:
        """Compile and verify candidates in order until `deadline`; compiles run in parallel threads on
        a GPU (triton's compiler releases the GIL in its passes and in ptxas). The interpreter patches
        triton.language globally while it runs, so there it goes one at a time."""
        inp = self._setup(problem, device)
        todo = [c for c in configs if c not in self._verified]
        on_cpu = inp.a.device.type == "cpu"
        # Sequentially the candidates share the one output buffer; in threads each takes its own.
        verified, pending = run_first_launches(
            todo, lambda c: self._verify(c, inp, inp.out if on_cpu else torch.empty_like(inp.out)),
            workers=1 if on_cpu else self.compile_workers, cuda_device=None if on_cpu else inp.a.device,
            deadline=deadline, timeout_s=self.compile_timeout_s)
        # The candidates dropped at the deadline compile on demand when they are timed.
        failures = {c: r for c, r in verified.items() if r is not None}
        for c in pending:
            failures[c] = BenchResult("timeout", note=f"compile and first run took over "
                                                      f"{self.compile_timeout_s:.0f} s")
        return failures

    def ready(self, config: GemmConfig) -> bool:
        return config in self._verified

    def _time(self, fn, rep_ms: float, warmup_ms: float) -> tuple[float, float, float]:
        if self._inputs is not None and self._inputs.a.device.type == "cpu":
            times = []
            for _ in range(self.cpu_reps):
                t0 = time.perf_counter()
                fn()
                times.append((time.perf_counter() - t0) * 1e3)
            times = [max(t, 1e-6) for t in times]
            return statistics.median(times), min(times), max(times)
        import triton.testing

        calls = 1
        if self._replays(self._inputs):
            fn, calls = self._graph(fn), REPLAY_CALLS
        stats = triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, quantiles=[0.5, 0.2, 0.8])
        # An empty problem (M or N == 0) launches nothing: floor at 1 ns so an ok result has a time.
        med, p20, p80 = (max(x / calls, 1e-6) for x in stats)
        return med, p20, p80

    def _replays(self, inp: _Inputs | None) -> bool:
        return self.replay_small and inp is not None and replayed(inp.problem)

    def _graph(self, fn):
        """The replay of a CUDA graph of REPLAY_CALLS calls of `fn`, captured on this benchmark's side
        stream (one for all candidates: Stream-K scratch is kept per stream) after one call there, which
        compiles and allocates outside the capture. Captured by hand, not by `torch.cuda.graph`, which
        collects garbage and empties the allocator's cache on every capture; thread-local, so that a
        compile thread still running (parallel.run_first_launches) cannot break it."""
        device = self._inputs.a.device
        if self._stream is None or self._stream.device != device:
            self._stream = torch.cuda.Stream(device=device)
        stream = self._stream
        stream.wait_stream(torch.cuda.current_stream(device))
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.stream(stream):
            fn()
            graph.capture_begin(capture_error_mode="thread_local")
            try:
                for _ in range(REPLAY_CALLS):
                    fn()
            finally:
                graph.capture_end()
        torch.cuda.current_stream(device).wait_stream(stream)
        return graph.replay

    def __call__(self, config: GemmConfig | None, problem: Problem, device: DeviceInfo, *,
                 cutoff_ms: float | None = None) -> BenchResult:
        """Verify (once) and time `config`; config=None times what dispatch selects, as users call it."""
        inp = self._setup(problem, device)
        if config not in self._verified:
            failure = self._verify(config, inp, inp.out)
            if failure is not None:
                return failure
        fn = self._call(config, inp, inp.out)
        err = self._verified[config]
        if cutoff_ms is not None:
            med, p20, p80 = self._time(fn, self.quick_rep_ms, 1)
            if med > cutoff_ms:
                return BenchResult("ok", med, p20, p80, err,
                                   note=f"stopped early: quick median {med:.4g} > cutoff {cutoff_ms:.4g} ms")
        med, p20, p80 = self._time(fn, self.rep_ms, self.warmup_ms)
        return BenchResult("ok", med, p20, p80, err)

    def baseline(self, problem: Problem, device: DeviceInfo) -> float | None:
        inp = self._setup(problem, device)
        return self._time(self._torch_call(inp, torch.empty_like(inp.out)), self.rep_ms, self.warmup_ms)[0]

    def head_to_head(self, config: GemmConfig | None, problem: Problem, device: DeviceInfo,
                     rounds: int = 3) -> tuple[BenchResult, float | None]:
        """`config` and torch.mm timed call by call in one loop (interleaved_ms) over `rounds` times
        each side's repetition budget; the interpreter's wall clock keeps the alternating rounds."""
        inp = self._setup(problem, device)
        if inp.a.device.type == "cpu" or self._replays(inp):  # replays: alternating rounds, each its own
            return super().head_to_head(config, problem, device, rounds)
        if config not in self._verified:
            failure = self._verify(config, inp, inp.out)
            if failure is not None:
                return failure, self.baseline(problem, device)
        ours = self._call(config, inp, inp.out)
        theirs = self._torch_call(inp, torch.empty_like(inp.out))
        ours_ms, torch_ms = interleaved_ms([ours, theirs], rounds * self.rep_ms, self.warmup_ms)
        med, p20, p80 = _median_p20_p80(ours_ms)
        return BenchResult("ok", med, p20, p80, self._verified[config]), _median_p20_p80(torch_ms)[0]

    def loop_head_to_head(self, config: GemmConfig | None, problem: Problem, device: DeviceInfo, calls: int,
                          rounds: int = 5) -> tuple[float, float]:
        """(ours, torch's) ms a call in loops of `calls` back-to-back calls (loop_ms), after
        head_to_head verified `config`: what an eager loop of the problem gets, host time included."""
        inp = self._setup(problem, device)
        fns = [self._call(config, inp, inp.out), self._torch_call(inp, torch.empty_like(inp.out))]
        ours, theirs = loop_ms(fns, calls, rounds, inp.a.device)
        return ours, theirs

    def finish(self, problem: Problem) -> None:
        self._inputs = None
        self._verified.clear()


def call_order(rep: int, count: int) -> list[int]:
    """Which function goes when in repetition `rep` of interleaved_ms: in order, then reversed, so
    each side follows the other as often as it leads (what runs just before a call warms the clock
    and the caches it finds)."""
    order = list(range(count))
    return order if rep % 2 == 0 else order[::-1]


def interleaved_ms(fns: list, rep_ms: float, warmup_ms: float) -> list[list[float]]:
    """Per function, the ms of each of its calls, timed as triton.testing.do_bench times one (the L2 flushed
    before every call, CUDA events around it) but with the functions' calls interleaved in one loop
    (call_order). Timed in separate do_bench runs, the same cuBLAS call on both sides read 0.93x-1.07x on
    large GEMMs (016dd08:docs/benchmarks/h200-classes-rematch-a.json, 2026-11-30): the clock drifted between
    runs. Each function gets about the repetitions do_bench would give it for `rep_ms`."""
    import triton

    driver = triton.runtime.driver.active
    device = driver.get_device_interface()
    cache = driver.get_empty_cache_for_benchmark()

    def one_round(rep: int = 0) -> None:
        for j in call_order(rep, len(fns)):
            driver.clear_cache(cache)
            fns[j]()

    one_round()
    device.synchronize()
    start, end = device.Event(enable_timing=True), device.Event(enable_timing=True)
    start.record()
    for rep in range(3):
        one_round(rep)
    end.record()
    device.synchronize()
    round_ms = max(start.elapsed_time(end) / 3, 1e-3)
    for rep in range(max(1, int(warmup_ms * len(fns) / round_ms))):
        one_round(rep)
    reps = max(5, int(rep_ms * len(fns) / round_ms))
    events = [[(device.Event(enable_timing=True), device.Event(enable_timing=True)) for _ in range(reps)]
              for _ in fns]
    for rep in range(reps):
        for j in call_order(rep, len(fns)):
            driver.clear_cache(cache)
            events[j][rep][0].record()
            fns[j]()
            events[j][rep][1].record()
    device.synchronize()
    return [[max(s.elapsed_time(e), 1e-6) for s, e in per_fn] for per_fn in events]


def loop_ms(fns: list, calls: int, rounds: int, device: torch.device) -> list[float]:
    """Per function, the median over `rounds` (interleaved: call_order) of the ms a call takes in a loop
    of `calls` back-to-back calls from an idle device, L2 not flushed. Where the host takes longer to
    issue a call than the device to run it (a decode step, any small GEMM), the device waits, so this
    counts the host's time, which interleaved_ms (a flush kernel before every call, hiding the host's
    work behind it) does not. CUDA events on a GPU, the wall clock in the interpreter."""
    cuda = device.type == "cuda"
    per_fn: list[list[float]] = [[] for _ in fns]
    for rep in range(rounds):
        for j in call_order(rep, len(fns)):
            fns[j]()  # (its first call after the other side's loop: not timed)
            if cuda:
                torch.cuda.synchronize(device)
                start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                start.record()
                for _ in range(calls):
                    fns[j]()
                end.record()
                end.synchronize()
                ms = start.elapsed_time(end)
            else:
                t0 = time.perf_counter()
                for _ in range(calls):
                    fns[j]()
                ms = (time.perf_counter() - t0) * 1e3
            per_fn[j].append(max(ms / calls, 1e-6))
    return [statistics.median(times) for times in per_fn]


def _median_p20_p80(times: list[float]) -> tuple[float, float, float]:
    """do_bench's quantiles (0.5, 0.2, 0.8), interpolated the same way (torch.quantile's linear)."""
    q = torch.quantile(torch.tensor(times, dtype=torch.float64), torch.tensor([0.5, 0.2, 0.8],
                                                                               dtype=torch.float64))
    return tuple(float(x) for x in q)
