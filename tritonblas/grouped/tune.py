"""Tuning grouped GEMMs: the problems of a shapes file's `op: grouped` entries, their candidate configs,
timing against torch's own grouped GEMM on the same operands (calls interleaved), the float64 check, and
the table of winners (configs/grouped/<arch>.json) that dispatch reads.

Each candidate is timed on balanced counts and on Zipf-skewed ones (a few experts take most rows), and
ranked by the slower of the two relative to torch's op: a winner must not fall apart when routing skews.
"""

from __future__ import annotations

import math
import random

import torch

from ..arch import TMA_ARCHS, DeviceInfo
from ..config import GemmConfig
from ..shapes import GroupedEntry
from ..validate import TORCH_DTYPE_OF
from .forms import GroupedShape, check_args
from .select import GLUON_TILES, GroupedKey, grouped_supports, heuristic, key_of

GROUP_SIZES = ("balanced", "zipf")


def group_sizes(m: int, groups: int, kind: str, seed: int = 0) -> list[int]:
    """How m rows split over the groups: "balanced" (as even as can be; fewer rows than groups land on
    evenly spaced groups) or "zipf" (weights 1/rank^1.2 over the groups in a random order)."""
    if kind not in GROUP_SIZES:
        raise ValueError(f"group_sizes must be one of {', '.join(GROUP_SIZES)}, got {kind!r}")
    if kind == "balanced":
        sizes = [0] * groups
        for i in range(m):
            sizes[(i * groups // m) if m < groups else i % groups] += 1
        return sizes
    rng = random.Random(seed)
    weights = [1 / (r + 1) ** 1.2 for r in range(groups)]
    rng.shuffle(weights)
    total = sum(weights)
    sizes = [int(m * w / total) for w in weights]
    for i in sorted(range(groups), key=lambda i: -weights[i])[: m - sum(sizes)]:
        sizes[i] += 1
    return sizes




def operands(entry: GroupedEntry, device: str, seed: int = 0):
    """(x (m, K), the weights as (E, K, N), offs) of an entry, in its layout: x column-major where the
    layout's first letter is "t"; the weights (E, N, K) row-major used transposed where the second is
    ("nt": as nn.Linear stores them), else (E, K, N) row-major."""
    gen = torch.Generator(device=device).manual_seed(seed)  # (drawn where they live: 7.5e9 weights)
    dtype = TORCH_DTYPE_OF[entry.dtype]
    a_col, b_col = (c == "t" for c in entry.layout)
    if a_col:
        x = torch.randn(entry.k, entry.m, generator=gen, device=device, dtype=dtype).t() / math.sqrt(entry.k)
    else:
        x = torch.randn(entry.m, entry.k, generator=gen, device=device, dtype=dtype) / math.sqrt(entry.k)
    if b_col:
        w = torch.randn(entry.groups, entry.n, entry.k, generator=gen, device=device, dtype=dtype).transpose(
            1, 2
        )
    else:
        w = torch.randn(entry.groups, entry.k, entry.n, generator=gen, device=device, dtype=dtype)
    sizes = group_sizes(entry.m, entry.groups, entry.group_sizes, seed)
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(device=device, dtype=torch.int32)
    return x, w, offs


def entry_key(entry: GroupedEntry) -> GroupedKey:
    """The dispatch key of an entry's problem as `operands` builds it."""
    shape = GroupedShape("2d3d", entry.groups, entry.m, entry.n, entry.k, (entry.m, entry.n))
    a_col, b_col = (c == "t" for c in entry.layout)
    return key_of(shape, TORCH_DTYPE_OF[entry.dtype], a_col, b_col)


def candidates(key: GroupedKey, device: DeviceInfo) -> list[GemmConfig]:
    """The configs worth timing for a key, the heuristic's first; each one grouped_supports accepts."""
    tma = device.arch in TMA_ARCHS
    if device.arch == "interpreter":  # small tiles: the interpreter's time grows with the tile
        grid = [(bm, bn, 32, 4, 1) for bm in (16, 32) for bn in (32, 64)]
    elif key.rows <= 16:
        grid = [
            (bm, bn, bk, 4, s) for bm in (16, 32, 64) for bn in (64, 128) for bk in (128, 256) for s in (3, 4)
        ]
    else:
        grid = [
            (bm, bn, bk, w, s)
            for bm in (64, 128)
            for bn in (128, 256)
            for bk in (64, 128)
            for w in (4, 8)
            for s in (3, 4)
        ]
    configs = [heuristic(key, device)]
    configs += [c for c in gluon_candidates(key, device) if c != configs[0]]
    for bm, bn, bk, w, s in grid:
        if w == 4 and bm * bn > 128 * 128:
            continue
        config = GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, tma=tma)
        if config not in configs and grouped_supports(config, key, device)[0]:
            configs.append(config)
    return configs


def gluon_candidates(key: GroupedKey, device: DeviceInfo) -> list[GemmConfig]:
    """The Gluon kernel's tiles at their deepest ring (and the cooperative 128 x 256 tile without the
    grouped tile order too) where it runs the key: first after the heuristic's, so a quick tuning run
    (the first few candidates) times them. None below 64 rows a group: there the Gluon launch's host
    time (its descriptors built each call) outweighs its gain in a host-bound model step (kernel-levers
    G9), and the 16-row Triton tiles read each active decode expert's weights once."""
    if key.rows < 64:
        return []
    configs = [GemmConfig(block_m=bm, block_n=bn, block_k=bk, num_warps=w, num_stages=s, tma=True, gluon=True)
               for (bm, bn, bk, w), s in GLUON_TILES.items()]
    configs.insert(1, configs[0].model_copy(update={"group_m": 1}))
    return [c for c in configs if grouped_supports(c, key, device)[0]]


def reference_error(out: torch.Tensor, x, w, offs) -> float:
    """Relative Frobenius error of `out` against the float64 loop of the groups (a sample of rows)."""
    ends = offs.tolist()
    starts = [0, *ends[:-1]]
    errs, norms = 0.0, 0.0
    for g, (s, e) in enumerate(zip(starts, ends, strict=True)):
        if e > s and g % max(1, len(ends) // 16) == 0:
            ref = x[s:e].double() @ w[g].double()
            errs += (out[s:e].double() - ref).norm().item() ** 2
            norms += ref.norm().item() ** 2
    return math.sqrt(errs / max(norms, 1e-300))


def table_meta(device: str) -> dict:
    """What a table says it was tuned with: triton, torch, the grouped kernel's hash, the device."""
    from ..identity import grouped_kernel_hash, triton_version

    name = torch.cuda.get_device_name(torch.device(device)) if device.startswith("cuda") else "interpreter"
    return {"triton": triton_version(), "torch": torch.__version__.split("+")[0],
            "kernel_hash": grouped_kernel_hash(), "device": name}


def shape_of(x, w, offs) -> GroupedShape:
    return check_args(x, w, offs, None, None, read_offs=False)


__all__ = [
    "GROUP_SIZES",
    "GroupedEntry",
    "candidates",
    "entry_key",
    "gluon_candidates",
    "group_sizes",
    "key_of",
    "operands",
    "reference_error",
    "shape_of",
    "table_meta",
]

