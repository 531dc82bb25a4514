"""Which config a grouped GEMM runs: a tuned winner for its key (the user's table, `tritonblas tune`'s,
then the shipped one), else the nearest shipped key of the same groups, N, K, dtype and layout, else the
heuristic; and the one feasibility predicate, `grouped_supports`.

The key buckets the rows per group (a power of two): the kernel reads `offs` on the device, so the host
knows only the total rows and the groups, and calls whose counts differ share one plan.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from pathlib import Path

from .. import caches
from ..arch import TMA_ARCHS, DeviceInfo
from ..config import GemmConfig
from ..problem import DTYPE_BYTES
from ..validate import TORCH_DTYPES
from .forms import GroupedKey, GroupedShape


def rows_bucket(shape: GroupedShape) -> int:
    rows = shape.m / max(shape.groups, 1) if shape.form == "2d3d" else shape.m
    return 1 << max(0, math.ceil(math.log2(max(rows, 1))))


def key_of(shape: GroupedShape, dtype, a_col: bool, b_col: bool) -> GroupedKey:
    name = TORCH_DTYPES.get(dtype, str(dtype))
    return GroupedKey(
        form=shape.form,
        groups=shape.groups,
        n=shape.n,
        k=shape.k,
        rows=rows_bucket(shape),
        dtype=name,
        layout=("t" if a_col else "n") + ("t" if b_col else "n"),
    )


def smem_estimate(config: GemmConfig, dtype: str) -> int:
    """Operand buffers per pipeline stage and a little more: what triton 3.6 allocated on sm_90 for the
    TMA path (128x256x64, 3 stages, bf16: 147,480 B, tests/compile_sm90.py's way; the pointer path less)."""
    size = DTYPE_BYTES[dtype]
    return config.num_stages * (config.block_m + config.block_n) * config.block_k * size + 1024


# The Gluon grouped kernel's shapes (kernels/grouped_gluon.py): (block_m, block_n, block_k, num_warps) ->
# the most stages beside its output tiles. num_warps is the MMA warps a tile has: 8, two consumer warp
# groups sharing it (cooperative); 4, each consumer its own tile in turn (PINGPONG). Each compiled for
# sm_90 without spills (tests/test_gluon_grouped.py).
GLUON_TILES = {(128, 256, 64, 8): 4, (128, 128, 64, 8): 5, (128, 128, 64, 4): 5, (64, 256, 64, 4): 4}


def gluon_refusal(config: GemmConfig, key: GroupedKey, device: DeviceInfo) -> str | None:
    """Why the Gluon grouped kernel cannot run a `gluon` config for `key`, None where it can: the MoE
    forward (2d3d) with weights stored (E, N, K) (layout nt: both operands K-major), bf16 or fp16, on
    sm_90, one of its tiles, persistent TMA and no other lever. A call whose tensors it cannot take
    (unaligned rows, another output dtype) runs the Triton kernel's twin (grouped.gluon.gluon_twin)."""
    if device.arch != "sm_90":
        return f"the Gluon grouped kernel is written for sm_90 (wgmma, TMA), device is {device.arch}"
    if key.form != "2d3d" or key.layout != "nt" or key.dtype not in ("bf16", "fp16"):
        return "the Gluon grouped kernel runs the MoE forward only: 2d3d, layout nt, bf16 or fp16"
    most = GLUON_TILES.get((config.block_m, config.block_n, config.block_k, config.num_warps))
    if most is None:
        return ("the Gluon grouped kernel's tiles (block_m, block_n, block_k, num_warps) are "
                f"{sorted(GLUON_TILES)}")
    if config.num_stages > most:
        tile = f"{config.block_m}x{config.block_n}"
        return f"the Gluon grouped kernel's {tile} tile takes {most} stages at most"
    if not config.tma or config.grid is not None:
        return "gluon configs are persistent TMA configs, one program an SM"
    return None


def grouped_supports(config: GemmConfig, key: GroupedKey, device: DeviceInfo) -> tuple[bool, str]:
    """Whether `config` can run grouped GEMMs of `key` on `device`, and if not, why."""
    if config.is_vendor:
        return True, ""
    if config.gluon:
        reason = gluon_refusal(config, key, device)
        if reason is not None:
            return False, reason
    unsupported = [
        name
        for name in ("streamk", "aligned_copy", "reduce_kernel", "flatten", "host_descriptors")
        if getattr(config, name)
    ]
    if unsupported:
        return False, f"the grouped kernel has no {', '.join(unsupported)}"
    if config.tma and device.arch not in TMA_ARCHS:
        return False, f"TMA needs one of {', '.join(TMA_ARCHS)}, the device is {device.arch}"
    if key.dtype == "fp32" and config.block_k > 64:
        return False, "fp32 tiles of block_k > 64 spill"
    if device.arch != "interpreter" and smem_estimate(config, key.dtype) > device.smem_per_block:
        return (
            False,
            f"needs ~{smem_estimate(config, key.dtype)} B of shared memory, "
            f"{device.smem_per_block} B available",
        )
    return True, ""


# The heuristic's Gluon config: the cooperative 128 x 256 tile, which led the Gluon tiles on most training
# keys (docs/notes/kernel-levers.md, G8).
GLUON_DEFAULT = GemmConfig(block_m=128, block_n=256, block_k=64, num_warps=8, num_stages=3, tma=True,
                           gluon=True)


def vendor_preferred(key: GroupedKey, device: DeviceInfo) -> bool:
    """Whether torch's grouped GEMM runs a key nobody tuned better, as measured on the H200
    (scripts/grouped_bench.py, kernel-levers G6-G8): our kernels win decode (a few rows a group) and
    fine-grained experts (64 or more), the Gluon kernel also on a short K; CUTLASS holds a few large
    groups (Mixtral's 1024 rows a group), a short K where the Gluon kernel cannot run, and the weight
    gradient (2d2d: the pointer path, no TMA over a cut K). torch's op takes bf16 on CUDA only."""
    if device.arch in ("interpreter",) or key.dtype != "bf16":
        return False
    if key.form == "2d2d":
        return True
    if key.rows <= 64:
        return False
    return key.groups < 64 or (key.k < 2048 and gluon_refusal(GLUON_DEFAULT, key, device) is not None)


def heuristic(key: GroupedKey, device: DeviceInfo) -> GemmConfig:
    """A config for a key nobody tuned: torch's op where it is expected to win (vendor_preferred), else
    tiles as tall as the groups' rows (decode: 16-row tiles that read each active expert's weights
    once), past 64 rows a group the Gluon kernel where it runs the key, TMA on archs that have it."""
    tma = device.arch in TMA_ARCHS
    if device.arch == "interpreter":  # small tiles: the interpreter's time grows with the tile
        return GemmConfig(block_m=16, block_n=32, block_k=32, num_warps=4, num_stages=1)
    bk = 32 if key.dtype == "fp32" else 64
    if key.rows <= 16:
        config = GemmConfig(block_m=16, block_n=64, block_k=2 * bk, num_warps=4, num_stages=4, tma=tma)
    elif key.rows <= 64:
        config = GemmConfig(block_m=64, block_n=128, block_k=bk, num_warps=4, num_stages=4, tma=tma)
    elif gluon_refusal(GLUON_DEFAULT, key, device) is None:
        return GLUON_DEFAULT
    else:
        config = GemmConfig(
            block_m=128, block_n=256 if key.n >= 2048 else 128, block_k=bk, num_warps=8, num_stages=3, tma=tma
        )
    while not grouped_supports(config, key, device)[0] and config.num_stages > 2:
        config = config.model_copy(update={"num_stages": config.num_stages - 1})
    return config


SHIPPED = Path(__file__).resolve().parent.parent / "configs" / "grouped"


def table_for(folder: Path, arch: str, triton: str) -> Path:
    """The grouped table in `folder` for `arch` under triton `triton`: <arch>-triton-<version>.json where
    one was tuned under it (a table holds one triton version, its header's), else <arch>.json."""
    own = folder / f"{arch}-triton-{triton}.json"
    return own if own.is_file() else folder / f"{arch}.json"


@functools.cache
def shipped_table(arch: str) -> dict[GroupedKey, GemmConfig]:
    """configs/grouped's winners by key for `arch` under the running triton (table_for; {} where none
    ship)."""
    from ..identity import triton_version
    from .usertable import read_table

    return read_table(table_for(SHIPPED, arch, triton_version()))


@dataclass(frozen=True)
class GroupedSelection:
    config: GemmConfig
    source: str  # "shipped", "neighbor", "heuristic", "user"
    key: GroupedKey

    @property
    def backend(self) -> str:
        return self.config.backend


def _distance(a: GroupedKey, b: GroupedKey) -> float | None:
    if (a.form, a.groups, a.n, a.k, a.dtype, a.layout) != (b.form, b.groups, b.n, b.k, b.dtype, b.layout):
        return None
    return abs(math.log2(a.rows) - math.log2(b.rows))


@functools.lru_cache(maxsize=4096)
def select(key: GroupedKey, device: DeviceInfo, backend: str | None = None) -> GroupedSelection:
    """The config a grouped GEMM of `key` runs on `device` (backend "triton" rules torch out): the user
    table's winner (`tritonblas tune`), the shipped one, a neighbour's, the heuristic's."""
    from .usertable import dispatch_table

    def usable(c: GemmConfig) -> bool:
        return grouped_supports(c, key, device)[0] and not (backend == "triton" and c.is_vendor)

    user = dispatch_table(device.arch)[0].get(key)
    if user is not None and usable(user):
        return GroupedSelection(user, "user", key)
    table = shipped_table(device.arch)
    ok = [(k, c) for k, c in table.items() if usable(c)]
    exact = [c for k, c in ok if k == key]
    if exact:
        return GroupedSelection(exact[0], "shipped", key)
    near = [(d, c) for k, c in ok if (d := _distance(key, k)) is not None and d <= 1]
    if near:
        return GroupedSelection(min(near, key=lambda dc: dc[0])[1], "neighbor", key)
    if backend != "triton" and vendor_preferred(key, device):
        return GroupedSelection(GemmConfig.vendor(), "heuristic", key)
    return GroupedSelection(heuristic(key, device), "heuristic", key)


_CLEARS = (select.cache_clear, shipped_table.cache_clear)  # bound now: tests patch `select` itself


def clear_cache() -> None:
    from .usertable import user_table

    for clear in (*_CLEARS, user_table.cache_clear):
        clear()


caches.also_clear(clear_cache)  # dropped with dispatch's selections (tritonblas.dispatch.clear_cache())
