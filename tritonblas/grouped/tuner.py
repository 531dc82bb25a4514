"""Tuning one grouped entry: every candidate timed on balanced and Zipf-skewed counts with torch's own
grouped GEMM interleaved, ranked by the slower of the two relative to torch, the float64 check of the
winner (a candidate that fails it gives way to the next), and torch's op as the winner where the best
kernel loses to it on either draw.

Timing is CUDA events over back-to-back calls on a GPU (L2 not flushed: a layer's weights are read once
per call and exceed L2 at every training size), time.perf_counter on the CPU under TRITON_INTERPRET=1,
where the times mean nothing and torch's op is never the winner (as the dense tuner's torch.mm is a
candidate on a GPU only).
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, field, replace

import torch

from ..config import GemmConfig
from ..device import tensor_device_info
from ..shapes import GroupedEntry
from .forms import GroupedShape
from .select import GroupedKey
from .tune import candidates, entry_key, operands, reference_error, shape_of

# A candidate is correct when its float64 error is at most twice torch's plus one bf16 rounding (2^-7,
# the unit the tests' assert_close allows: triton 3.6's interpreter truncates bf16 stores).
ROUNDING = 2.0**-7

Draws = dict[str, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]


@dataclass
class TunedRow:
    """One entry's outcome. status: "tuned" (a kernel wins), "torch" (torch's op wins: the best kernel
    is slower on a draw, or none ran correctly), "skipped" (the user table held the key), "failed"."""

    entry: GroupedEntry
    key: GroupedKey | None
    status: str
    winner: GemmConfig | None = None
    best: GemmConfig | None = None  # the fastest kernel that passed the check (what `us` times)
    us: dict[str, float] = field(default_factory=dict)  # by draw: "balanced", "zipf"
    torch_us: dict[str, float] = field(default_factory=dict)
    error: float | None = None
    torch_error: float | None = None
    candidates: int = 0  # timed (ran without an error)
    notes: list[str] = field(default_factory=list)  # candidates skipped or rejected, and why
    elapsed_s: float = 0.0

    @property
    def ok(self) -> bool:
        return self.status != "failed"

    @property
    def ratio(self) -> dict[str, float]:
        """torch's time over ours, by draw."""
        return {k: self.torch_us[k] / v for k, v in self.us.items() if k in self.torch_us and v > 0}

    @property
    def worst_ratio(self) -> float | None:
        return min(self.ratio.values()) if self.ratio else None


def draws_of(entry: GroupedEntry, device: str) -> Draws:
    """The operands each draw times: balanced and zipf counts for a balanced entry, zipf only else."""
    if entry.group_sizes != "balanced":
        return {"zipf": operands(entry, device)}
    return {kind: operands(replace(entry, group_sizes=kind), device) for kind in ("balanced", "zipf")}


def reps_for(flops: float) -> int:
    return int(min(200, max(10, 2e12 / max(flops, 1))))


def timed_us(fn: Callable[[], object], reps: int, cuda: bool) -> float:
    """Median time of one call over `reps` back-to-back calls, three rounds (CUDA events on a GPU; on
    the CPU, perf_counter over one call: the interpreter's times only have to exist)."""
    fn()
    if not cuda:
        start = time.perf_counter()
        fn()
        return (time.perf_counter() - start) * 1e6
    rounds = []
    for _ in range(3):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(reps):
            fn()
        end.record()
        end.synchronize()
        rounds.append(start.elapsed_time(end) * 1000 / reps)
    return statistics.median(rounds)


def run_config(x, w, offs, config: GemmConfig, shape: GroupedShape) -> torch.Tensor:
    """The grouped product by `config` (vendor: what grouped_mm runs for dispatch's torch pick)."""
    from . import launch
    from .op import grouped_mm

    if config.is_vendor:
        return grouped_mm(x, w, offs=offs, backend="torch")
    out = torch.empty(shape.out_shape, dtype=x.dtype, device=x.device)
    launch.run(x, w, out, None, offs, shape, config, tensor_device_info(x).sm_count, "tf32")
    return out


def torch_op(x, w, offs, shape: GroupedShape) -> torch.Tensor:
    """torch._grouped_mm where it takes the call, else the loop of torch.mm (op.vendor)."""
    from .op import vendor

    return vendor(x, w, offs, None, x.dtype, shape)


def tune_entry(entry: GroupedEntry, device: str, configs: list[GemmConfig] | None = None,
               max_candidates: int | None = None, budget_s: float | None = None,
               draws: Draws | None = None) -> TunedRow:
    """Tune one entry on `device` ("cuda", "cuda:1", "cpu" under the interpreter). `configs`: the
    candidates (default tune.candidates of the entry's key), the first `max_candidates` of them, timed
    until `budget_s` is spent (the first always); `draws`: the operands, where the caller keeps them."""
    started = time.perf_counter()
    if max_candidates is not None and max_candidates < 1:
        raise ValueError(f"tune_entry: max_candidates must be at least 1, got {max_candidates}")
    if budget_s is not None and not budget_s > 0:
        raise ValueError(f"tune_entry: budget_s must be a positive number of seconds, got {budget_s}")
    draws = draws if draws is not None else draws_of(entry, device)
    x, w, offs = next(iter(draws.values()))
    shape = shape_of(x, w, offs)
    info = tensor_device_info(x)
    key = entry_key(entry)
    cuda = x.is_cuda
    reps = reps_for(2.0 * entry.m * entry.n * entry.k)
    configs = list(configs) if configs is not None else candidates(key, info)
    configs = configs[:max_candidates] if max_candidates is not None else configs

    def torch_time(d) -> float:
        return timed_us(lambda: torch_op(d[0], d[1], d[2], shape), reps, cuda)

    row = TunedRow(entry, key, "failed", torch_us={kind: torch_time(d) for kind, d in draws.items()})
    ranked: list[tuple[float, GemmConfig, dict[str, float]]] = []
    for config in configs:
        if budget_s is not None and ranked and time.perf_counter() - started > budget_s:
            row.notes.append(f"budget of {budget_s:g} s spent after {len(ranked)} candidates")
            break
        us: dict[str, float] = {}
        try:
            for kind, (xx, ww, oo) in draws.items():
                us[kind] = timed_us(lambda xx=xx, ww=ww, oo=oo, c=config: run_config(xx, ww, oo, c, shape),
                                    reps, cuda)
                # torch again right after: the two sides see the same clocks and temperature
                row.torch_us[kind] = min(row.torch_us[kind], torch_time((xx, ww, oo)))
        except Exception as exc:  # noqa: BLE001 (a config triton refuses is skipped, and said)
            row.notes.append(f"skip {config.short()}: {type(exc).__name__}: {str(exc)[:120]}")
            continue
        ranked.append((max(us[k] / row.torch_us[k] for k in us), config, us))
    ranked.sort(key=lambda r: r[0])
    row.candidates = len(ranked)
    row.torch_error = reference_error(torch_op(x, w, offs, shape), x, w, offs)
    for _, config, us in ranked:
        err = reference_error(run_config(x, w, offs, config, shape), x, w, offs)
        if err <= 2 * row.torch_error + ROUNDING:
            row.best, row.us, row.error = config, us, err
            break
        row.notes.append(f"reject {config.short()}: error {err:.2e}, torch's {row.torch_error:.2e}")
    if row.best is None:
        row.status, row.winner = "torch", GemmConfig.vendor()
        row.notes.append("no kernel ran correctly: torch's op is the winner")
    elif cuda and (row.worst_ratio or 0.0) < 1.0:  # torch's op wins where the best kernel loses a draw
        row.status, row.winner = "torch", row.best.vendor()
    else:
        row.status, row.winner = "tuned", row.best
    row.elapsed_s = time.perf_counter() - started
    return row
