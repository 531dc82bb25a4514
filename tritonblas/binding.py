"""The binding of tuning_db (the storage, which imports nothing of tritonblas and stores configs as JSON
objects) to tritonblas: `tritonblas.config` calls `bind_tuning_db` when it is imported, so whatever
reads the database in this process (dispatch, the tuner, the CLI) gets GemmConfigs back, config files
are checked with `config_supports`, and stale results are told by tritonblas.identity. tuning_db.schemas
loads pydantic only, no database."""

from __future__ import annotations

from collections.abc import Callable

from pydantic import BaseModel

from .arch import DeviceInfo, device_for_arch
from .problem import Problem


def bind_tuning_db(config_type: type[BaseModel],
                   config_supports: Callable[[BaseModel, Problem, DeviceInfo], str | None]) -> None:
    """Bind the config type (GemmConfig) and its feasibility predicate, the known archs and the running
    code's identity (once per process, from tritonblas.config, which passes its own two names: this
    module imports nothing of it)."""
    from tuning_db import schemas

    def supports(config: BaseModel, key) -> str | None:
        device = device_for_arch(key.arch, key.device_name, key.sm_count)
        return config_supports(config, Problem.from_key(key), device)

    def current_env() -> schemas.EnvIdentity:
        from . import identity  # torch loads here, on first use

        return schemas.EnvIdentity(triton_version=identity.triton_version(),
                                   torch_version=identity.torch_version(), kernel_hash=identity.kernel_hash(),
                                   timing_protocol=identity.TIMING_PROTOCOL,
                                   family_hashes=identity.family_hashes())

    schemas.bind(config_type=config_type, supports=supports, check_arch=device_for_arch,
                 is_vendor=lambda config: config.is_vendor, current_env=current_env)
