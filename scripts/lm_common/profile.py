"""The kernels of one training step, torch's against transparent mode's (issue 34 item 1: a training step's
profile must have no copy kernel that torch's own step lacks): torch.profiler over one step of each side,
kernel launches tallied by name, and the kernels one side launches more often than the other."""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Iterable
from typing import Any

# Host-side ops counted too: a routed GEMM should add no aten::mm (a mixture of experts' grouped one no
# aten::_grouped_mm) of its own, a gradient in its parameter's layout no copy (AccumulateGrad copies one
# whose strides differ).
HOST_OPS = ("aten::mm", "aten::addmm", "aten::bmm", "aten::_grouped_mm", "aten::copy_", "aten::clone",
            "aten::contiguous")
# GEMMs first: CUTLASS's mangled names spell their copy atoms (torch._grouped_mm's read "copy").
_KINDS = (  # cuBLAS (sm90_xmma_gemm, nvjet, cutlass, splitKreduce) and ours (persistent/streamk/grouped_gemm_
          # kernel, splitk_reduce_kernel): what a faster GEMM can save of the step, the rest cannot.
          ("gemm", re.compile(r"gemm|matmul|nvjet|xmma|cutlass|splitk", re.I)),
          ("copy", re.compile(r"copy|memcpy|transpose", re.I)),
          ("elementwise", re.compile(r"elementwise|vectorized", re.I)),
          ("memset", re.compile(r"memset", re.I)))


def kernel_kind(name: str) -> str:
    """copy (copies, memcpys, transposes; our padded operands' too), elementwise, memset, gemm or
    other."""
    return next((kind for kind, pattern in _KINDS if pattern.search(name)), "other")


def _add(tally: dict[str, dict], name: str, us: float) -> None:
    entry = tally.setdefault(name, {"count": 0, "us": 0.0})
    entry["count"] += 1
    entry["us"] += us


def kernel_tally(events: Iterable[Any]) -> dict[str, dict]:
    """{kernel name: {"count", "us"}} of the device events among torch.profiler's FunctionEvents."""
    from torch.autograd import DeviceType

    tally: dict[str, dict] = {}
    for e in events:
        if e.device_type == DeviceType.CUDA:  # (device_time_total reads 0 unless the event knows its device)
            _add(tally, e.name, e.time_range.elapsed_us())
    return tally


def op_tally(events: Iterable[Any]) -> dict[str, int]:
    """Calls of HOST_OPS among the host events, nested calls included."""
    from torch.autograd import DeviceType

    counts = dict.fromkeys(HOST_OPS, 0)
    for e in events:
        if e.device_type == DeviceType.CPU and e.name in counts:
            counts[e.name] += 1
    return counts


def surplus(tallies: dict[str, dict[str, dict]], side: str, other: str) -> list[dict]:
    """The kernels `side` launches more often than `other` (absent there included), the most extra time
    first: name, kind, and each side's count and total us."""
    rows = []
    for name, mine in tallies[side].items():
        theirs = tallies[other].get(name, {"count": 0, "us": 0.0})
        if mine["count"] > theirs["count"]:
            rows.append({"name": name, "kind": kernel_kind(name),
                         f"{side}_count": mine["count"], f"{other}_count": theirs["count"],
                         f"{side}_us": mine["us"], f"{other}_us": theirs["us"]})
    return sorted(rows, key=lambda r: (r[f"{other}_us"] - r[f"{side}_us"], r["name"]))


def profile_step(step: Callable[[], Any], sync: Callable[[], None], cuda: bool) -> tuple[dict, dict]:
    """(kernel tally, host op tally) of one call of `step`, after an untimed one (compiles, allocator)."""
    from torch.profiler import ProfilerActivity, profile

    step()
    sync()
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
    with profile(activities=activities) as prof:
        step()
        sync()
    events = prof.events()
    return kernel_tally(events), op_tally(events)


def compare(step: Callable[[], Any], modes: dict[str, Callable[[], contextlib.AbstractContextManager]],
            sync: Callable[[], None], cuda: bool) -> dict:
    """One profiled step per side (modes: {"torch": ..., "ours": ...}); what the JSON keeps."""
    kernels, ops = {}, {}
    for side, mode in modes.items():
        with mode():
            kernels[side], ops[side] = profile_step(step, sync, cuda)
    extra = surplus(kernels, "ours", "torch")
    return {
        "kernels": {s: {"launches": sum(k["count"] for k in t.values()),
                        "us": sum(k["us"] for k in t.values()),
                        "gemm_us": sum(k["us"] for n, k in t.items() if kernel_kind(n) == "gemm")}
                    for s, t in kernels.items()},
        "host_ops": ops,
        "ours_extra": extra,
        "torch_extra": surplus(kernels, "torch", "ours"),
        "ours_extra_copy_or_elementwise_launches": sum(r["ours_count"] - r["torch_count"] for r in extra
                                 if r["kind"] in ("copy", "elementwise")),
    }
