"""The binding of tuning_db (the storage, which imports nothing of tritonblas and stores configs as JSON
objects) to tritonblas: `tritonblas.config` calls `bind_tuning_db` when it is imported, so whatever
reads the database in this process (dispatch, the tuner, the CLI) gets GemmConfigs back, config files
are checked with `config_supports`, and stale results are told by tritonblas.identity. tuning_db.schemas
loads pydantic only, no database."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .arch import device_for_arch
from .problem import Problem

if TYPE_CHECKING:
    from .config import GemmConfig


def bind_tuning_db() -> None:
    """Bind GemmConfig, config_supports, the known archs and the running code's identity (once per
    process, from tritonblas.config)."""
    from tuning_db import schemas

    from .config import GemmConfig, config_supports  # (config imports this module)

    def supports(config: GemmConfig, key) -> str | None:
        device = device_for_arch(key.arch, key.device_name, key.sm_count)
        return config_supports(config, Problem.from_key(key), device)

    def current_env() -> schemas.EnvIdentity:
        from . import identity  # torch loads here, on first use

        return schemas.EnvIdentity(triton_version=identity.triton_version(),
                                   torch_version=identity.torch_version(), kernel_hash=identity.kernel_hash(),
                                   timing_protocol=identity.TIMING_PROTOCOL)

    schemas.bind(config_type=GemmConfig, supports=supports, check_arch=device_for_arch,
                 is_vendor=lambda config: config.is_vendor, current_env=current_env)
