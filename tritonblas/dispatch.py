"""Config selection at call time. (v0: heuristic only; the tuning DB layers come with issue 4.)"""

from __future__ import annotations

import functools

from . import heuristic
from .config import DeviceInfo, GemmConfig, Problem, require_supported


@functools.lru_cache(maxsize=4096)
def select_config(key: tuple, device: DeviceInfo, enable_streamk: bool | None) -> GemmConfig:
    m, n, k, dtype, layout, bias = key
    return heuristic.choose(Problem(m, n, k, dtype, layout, bias), device, enable_streamk)


def check_user_config(config: GemmConfig, m: int, n: int, k: int, dtype: str, device: DeviceInfo) -> None:
    require_supported(config, Problem(m, n, k, dtype), device)
