"""Config selection at call time, in layers: in-process cache -> user tuning DB -> shipped
configs/<arch>.json -> nearest tuned neighbour -> the analytical heuristic.

The DB and shipped layers take winners of the running kernel sources, the running triton version's
first, else another version's (feasibility checked here as for any config); `Selection.detail` says
which triton tuned it.

The dispatch key is a `Problem` (m, n, k, dtypes, layout, bias kind, scale mode): a quantized problem
(scaled_mm) goes through the same layers, its vendor (torch._scaled_mm / torch._int_mm) only where
config_supports says torch takes it. What the layers read (the user DB, the shipped files, the configs
that failed here) is held in `sources`: the user DB (`userdb`: found by tuning_db.default_url(), so
$TRITONBLAS_DB) is opened on the first cache miss, once per process; a cached selection never touches it
again. A DB that cannot be used costs one warning per process, never a failed matmul: selection goes on
without it. A SQLite DB file that does not exist is simply skipped: dispatch never creates one. The
neighbour layer's distance and search are `neighbors`'.

Selections are cached here (`_selections`) and in the call path's plans, both `caches.new()` dicts.
Dropping them (`clear_cache`, `set_database`, `set_shipped_dir`, a config reported as failing to
compile) is `caches.invalidate()`; an entry computed from what was read before a drop is never stored
after it (`caches.store`).
"""

from __future__ import annotations

import dataclasses
import functools
import logging
from dataclasses import dataclass
from typing import Literal

from tuning_db.vocabulary import BiasKind

from .. import caches, log
from ..arch import DeviceInfo
from ..config import GemmConfig, config_supports, require_supported, torch_blockwise_fits
from ..problem import Problem, vendor_name
from . import heuristic, neighbors, sources
from .sources import (  # noqa: F401  (the public names, where callers find them)
    clear_cache,
    database_choice,
    set_database,
    set_shipped_dir,
    shipped_name,
    using_database,
)

Source = Literal["db", "shipped", "neighbor", "heuristic", "user"]
# A neighbour's config that the model predicts this much slower than its own best pick for the new
# shape is not used: 2000x3000x1000 took a 2048^3-like pointer config at 0.30x torch.mm, where K=1000
# (a leading dim triton does not specialize) wants TMA (bench of untuned shapes, 2026-11-30).
NEIGHBOR_SLACK = 1.5


@dataclass(frozen=True)
class Selection:
    """What dispatch chose for a problem, where it came from and its measured or predicted time."""

    config: GemmConfig
    source: Source
    time_ms: float  # 0.0: not known (the torch backend pinned by the caller)
    measured: bool
    problem: Problem
    device: DeviceInfo
    detail: str = ""
    enable_streamk: bool | None = None
    torch_ms: float = 0.0  # torch's own op timed against the kernel in its tuning run; 0.0: not known

    @property
    def backend(self) -> str:
        """What runs: "triton" (the kernels) or "torch" (torch.mm / torch.addmm; torch._scaled_mm or
        torch._int_mm for a quantized problem)."""
        return self.config.backend

    def ranked(self, limit: int = 10) -> list[heuristic.Estimate]:
        """The heuristic's ranking for this problem, within the family restriction if there was one."""
        return heuristic.rank(self.problem, self.device, self.enable_streamk)[:limit]

    def describe(self) -> str:
        kind = "measured" if self.measured else "predicted"
        extra = f" ({self.detail})" if self.detail else ""
        time = f": {self.time_ms:.4g} ms {kind}" if self.time_ms else ""
        what = self.config.short() if self.backend == "torch" else f"triton {self.config.short()}"
        return f"{what} from {self.source}{extra}{time}"


# Selections by (problem, device, enable_streamk, backend); dropped with the plans (caches.invalidate).
_selections: dict[tuple, Selection] = caches.new()


def _family_ok(config: GemmConfig, enable_streamk: bool | None, backend: str | None = None) -> bool:
    """Whether the call's restriction allows `config`: a family (enable_streamk) or backend "triton"
    allows kernels only, backend "torch" the vendor only (pinned before any layer is asked)."""
    if config.backend == "torch":
        return enable_streamk is None and backend != "triton"
    return backend != "torch" and (enable_streamk is None or config.streamk == enable_streamk)


def _vendor_ok(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
               backend: str | None) -> bool:
    """Whether the vendor may answer: the call allows it, and torch takes the problem (config_supports:
    every plain one; a quantized one where torch._scaled_mm's size and layout rules hold)."""
    vendor = GemmConfig.vendor()
    return _family_ok(vendor, enable_streamk, backend) and _feasible(vendor, problem, device)


def _vendor_contends(problem: Problem, device: DeviceInfo) -> bool:
    """Whether a neighbour's torch pick may answer `problem`: everywhere but on a block-wise problem that
    torch's block-wise op does not take (a bias, another output dtype, partial blocks), where torch's side
    is the dequantized fp32 product: with a bias, 22-46 TF/s against the Triton kernel's 445-951 on
    512x7168x2048, 4096x7168x2048 and 4096x18432x7168 (2026-12-04, H200), their no-bias twins torch picks."""
    return problem.scales != "block" or torch_blockwise_fits(problem, device.arch)


def _feasible(config: GemmConfig, problem: Problem, device: DeviceInfo) -> bool:
    """Feasible by the predicate, and not one triton already failed to compile for this problem here."""
    return config_supports(config, problem, device) is None and \
        config not in sources.failed_configs(problem, device)


def report_compile_failure(problem: Problem, device: DeviceInfo, config: GemmConfig,
                           exc: BaseException) -> None:
    """A dispatched config that triton refused to compile (out of shared memory or registers, where
    the predicate's estimate said it fits) is never selected again for that problem in this process;
    the next selection is the next layer's or the next ranked candidate (ops retries the call)."""
    report_refusal(problem, device, config, "could not be compiled", exc)


def report_refusal(problem: Problem, device: DeviceInfo, config: GemmConfig, what: str,
                   exc: BaseException) -> None:
    """A dispatched config that failed to run for `problem` (`what` it did: triton could not compile
    it, torch's op refused the call) is never selected again for that problem in this process."""
    sources.mark_failed(problem, device, config)
    lines = str(exc).splitlines() or [type(exc).__name__]
    log.warn(f"tritonblas: {config.short()} {what} for {problem.short()} on {device.name} ({lines[0]}); "
             "using the next candidate", stacklevel=5)


def _from_db(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
             backend: str | None = None) -> Selection | None:
    from pydantic import ValidationError

    from tuning_db import ProblemKey

    try:
        key = ProblemKey.from_problem(problem, device)
    except ValidationError:  # beyond what a key can hold (a dim over 2**24): nothing can be stored
        return None
    winner = sources.db_call(lambda db: db.lookup(key))
    if winner is None:
        return None
    if _family_ok(winner.config, enable_streamk, backend) and _feasible(winner.config, problem, device):
        return Selection(winner.config, "db", winner.median_ms, True, problem, device,
                         f"tuned on {winner.key.device_name}{_tuned_under(winner)}"
                         + _vendor_won(winner, problem), torch_ms=winner.torch_ms or 0.0)
    # The winner is of another family or backend: the fastest measurement of the asked-for one made
    # under the winner's triton version.
    for m in sources.db_call(lambda db: db.measurements(key, winner.env)) or []:
        if m.status == "ok" and _family_ok(m.config, enable_streamk, backend) and \
                _feasible(m.config, problem, device):
            return Selection(m.config, "db", m.median_ms, True, problem, device, "fastest of its family")
    return None


def _vendor_won(w, problem: Problem) -> str:
    return f": {vendor_name(problem)} was the fastest candidate" if w.config.backend == "torch" else ""


def _tuned_under(w) -> str:
    """Which triton tuned a stored winner: one of another version than the running one serves (same
    kernels, feasibility checked again here), and says so."""
    from .. import identity

    other = f" (another version than the running {identity.triton_version()})" if w.other_triton else ""
    return f" under triton {w.env.triton_version}{other}"


def _from_shipped(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
                  backend: str | None = None) -> Selection | None:
    entry = sources.shipped_table(device.arch).get(sources.arch_key(problem))
    if entry is None:
        return None
    config, ms, why, torch_ms = entry.config, entry.median_ms, _vendor_won(entry, problem), entry.torch_ms
    if not _family_ok(config, enable_streamk, backend):
        # torch.mm won, the call wants a kernel: the fastest kernel of the same tuning run, if any.
        kernel = sources.shipped_kernel(device.arch, problem)
        if kernel is None or not _family_ok(kernel.config, enable_streamk, backend):
            return None
        config, ms, why = kernel.config, kernel.median_ms, ": the fastest kernel of its tuning run"
    if not _feasible(config, problem, device):
        return None
    where = (f"configs/{shipped_name(device.arch, problem.scales)}, tuned on {entry.key.device_name}"
             f"{_tuned_under(entry)}")
    return Selection(config, "shipped", ms, True, problem, device, where + why, torch_ms=torch_ms or 0.0)


def _from_neighbor(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
                   backend: str | None = None) -> Selection | None:
    """The nearest tuned problem of the same arch and dtypes whose config is feasible here
    (neighbors.nearest: another bias kind, or another layout for a TMA config, at a penalty), unless
    the model puts its config far behind its own pick or prefers torch.mm."""
    pool = list(sources.shipped_table(device.arch).values()) + sources.db_neighbors(device.arch)
    found = neighbors.nearest(problem, pool, lambda config: _family_ok(config, enable_streamk, backend)
                              and _feasible(config, problem, device)
                              and (config.backend != "torch" or _vendor_contends(problem, device)))
    if found is None:
        return None
    w, d, why = found
    tuned = (f"tuned for {w.key.m}x{w.key.n}x{w.key.k} {w.key.layout} bias={w.key.bias}, distance {d:.2f} "
             f"({why})")
    if w.config.backend == "torch":
        return Selection(w.config, "neighbor", 0.0, False, problem, device, tuned + _vendor_won(w, problem))
    est = heuristic.estimate(w.config, problem, device).total_us / 1000
    ranked = heuristic.rank(problem, device, enable_streamk)
    if ranked and est > NEIGHBOR_SLACK * ranked[0].total_us / 1000:
        return None
    # A kernel neighbour gives way to the heuristic's vendor rule: where the model puts its best kernel
    # far from the roofline, even the tuned kernel lost to torch.mm (20 of the 22 such problems of the
    # tuning run of 2026-11-30), and a neighbour's config is no better than the tuned one. On the untuned
    # shapes' bench this turns the three neighbour picks that lost (3072^3 0.75x, 768x2304x768 0.85x,
    # 256x14336x4096 0.92x) to torch.mm, and leaves the four that held (0.97-1.02x) to their neighbour.
    if ranked and _vendor_ok(problem, device, enable_streamk, backend) and \
            heuristic.vendor_preferred(problem, device, ranked[0]) is not None:
        return None
    return Selection(w.config, "neighbor", est, False, problem, device, tuned)


def _from_heuristic(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
                    backend: str | None = None) -> Selection:
    failed = sources.failed_configs(problem, device)
    ranked = [e for e in heuristic.rank(problem, device, enable_streamk) if e.config not in failed]
    if _vendor_ok(problem, device, enable_streamk, backend):
        why = heuristic.vendor_preferred(problem, device, ranked[0] if ranked else None)
        if why is not None:
            return Selection(GemmConfig.vendor(), "heuristic", 0.0, False, problem,
                             device, f"{vendor_name(problem)} predicted faster: {why}")
    if not ranked:
        raise RuntimeError(f"no feasible config for {problem.short()} on {device.name}")
    return Selection(ranked[0].config, "heuristic", ranked[0].total_us / 1000, False, problem, device,
                     ranked[0].why())


def _select(problem: Problem, device: DeviceInfo, enable_streamk: bool | None,
            backend: str | None) -> Selection:
    if backend == "torch":  # pinned by the caller: nothing to look up, if torch takes the problem
        reason = config_supports(GemmConfig.vendor(), problem, device)
        if reason is not None:
            raise ValueError(f"backend='torch': {vendor_name(problem)} cannot run {problem.short()} on "
                             f"{device.name}: {reason}")
        return Selection(GemmConfig.vendor(), "user", 0.0, False, problem, device,
                         "backend='torch' given by the caller")
    for layer in (_from_db, _from_shipped, _from_neighbor, _from_heuristic):
        found = layer(problem, device, enable_streamk, backend)
        if found is not None:
            return dataclasses.replace(found, enable_streamk=enable_streamk)
    raise AssertionError("unreachable: the heuristic layer always answers")


def _selection(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None,
              backend: str | None = None) -> Selection:
    """What runs `problem` on `device` and why, cached until the selections are dropped. backend: None
    (either), "triton" (kernels only) or "torch" (the vendor, pinned). Each decision is logged once
    (DEBUG) when it is made."""
    args = (problem, device, enable_streamk, backend)
    found = _selections.get(args)
    if found is None:
        read_at = caches.generation()
        found = _select(problem, device, enable_streamk, backend)
        if caches.store(read_at, _selections, args, found):
            _log_decision(found)
    return found


def select_config(problem: Problem, device: DeviceInfo, enable_streamk: bool | None = None,
                  backend: str | None = None) -> GemmConfig:
    """The config of `_selection(...)`: what ops plans with."""
    return _selection(problem, device, enable_streamk, backend).config


def _log_decision(sel: Selection) -> None:
    logger = log.get()
    if logger.isEnabledFor(logging.DEBUG):
        p = sel.problem
        only = {None: "", True: " (Stream-K only)", False: " (persistent only)"}[sel.enable_streamk]
        scales = f" scales={p.scales}" if p.quantized else ""
        logger.debug("dispatch %dx%dx%d %s layout=%s bias=%s%s on %s%s: backend=%s source=%s config=%s",
                     p.m, p.n, p.k, p.dtypes_text(), p.layout, p.bias, scales, sel.device.name, only,
                     sel.backend, sel.source, sel.describe())


def check_user_config(config: GemmConfig, problem: Problem, device: DeviceInfo) -> None:
    """ValueError unless `config` can run this problem; the layout matters (TMA's leading dims)."""
    if not _user_config_ok(config, problem, device):
        require_supported(config, problem, device)


@functools.lru_cache(maxsize=4096)
def _user_config_ok(config: GemmConfig, problem: Problem, device: DeviceInfo) -> bool:
    """Cached feasibility for config= calls (the tuner times candidates through them: keep them cheap).
    A function of its arguments alone: nothing a drop of the selections changes."""
    return config_supports(config, problem, device) is None


def select_problem(problem: Problem, **kwargs) -> Selection:
    """select() for a Problem in hand (the tuner's and the bench's): its dtypes, scales, layout, bias."""
    return select(problem.m, problem.n, problem.k, problem.dtype, out_dtype=problem.out_dtype,
                  layout=problem.layout, bias=problem.bias, scales=problem.scales, b_dtype=problem.b_dtype,
                  **kwargs)


def select(m: int, n: int, k: int, dtype: object, *, out_dtype: object = None, layout: str = "nn",
           bias: BiasKind | None = None, enable_streamk: bool | None = None, device: object = None,
           config: GemmConfig | None = None, backend: str | None = None, scales: str | None = None,
           b_dtype: object = None) -> Selection:
    """The config matmul/addmm/linear (or, with `scales`, scaled_mm) would run for this problem, with its
    source and time; `Selection.backend` says whether the kernels ("triton") or the vendor ("torch")
    run it.

    dtype: "fp16" | "bf16" | "fp32" or a torch dtype; layout: "nn" | "nt" | "tn" | "tt"; bias: None or
    a bias kind ("none", "scalar", "row", "column", "full"); device: None (the current CUDA device, or
    the interpreter), a torch device or a DeviceInfo. `config` pins a config (source "user") after
    checking that it can run the problem. backend: None (dispatch decides), "triton" (kernels only),
    "torch" (the vendor pinned). A quantized problem: `scales` "tensor" | "row" | "row_a" | "row_b" |
    "block" (fp8: 1x128 blocks of A's rows, 128x128 blocks of B), dtype "e4m3" | "e5m2" | "int8" (or
    the torch dtype), b_dtype B's where it differs (e4m3 with e5m2),
    out_dtype default as scaled_mm's (A's dtype for fp8, bf16 for int8), bias None or "row", e.g.
    select(4096, 4096, 4096, "e4m3", scales="row", out_dtype="bf16", layout="nt").
    """
    from ..validate import check_options, device_info_of, problem_of

    problem = problem_of(m, n, k, dtype, out_dtype, layout, bias, scales=scales, b_dtype=b_dtype)
    check_options(enable_streamk, config, backend)  # the same checks as matmul's, conflicts included
    info = device_info_of(device)
    if config is not None:
        require_supported(config, problem, info)
        est = 0.0 if config.backend == "torch" else heuristic.estimate(config, problem, info).total_us / 1000
        return Selection(config, "user", est, False, problem, info, "given by the caller")
    return _selection(problem, info, enable_streamk, backend)
