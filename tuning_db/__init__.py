"""tuning_db: the persistent tuning database of tritonblas (SQLAlchemy; SQLite by default).

    from tuning_db import TuningDB, ProblemKey, EnvIdentity, Measurement, Winner
    db = TuningDB()                      # $TRITONBLAS_DB, else ~/.cache/tritonblas/tuning.sqlite
    db.upsert_winner(winner); db.get_winner(key)   # the running triton version's, or None
    db.lookup(key)   # what dispatch uses: any device of the arch, any triton version of the kernels

It imports nothing of tritonblas: configs are JSON objects of the type an application binds
(`schemas.bind`; tritonblas binds its GemmConfig). Importing opens no database and reads no
environment variable; the names below load on first use (PEP 562), so `tuning_db.schemas` alone does
not load SQLAlchemy.
"""

import importlib

_WHERE = {
    "TuningDB": "store", "ImportPolicy": "store",
    "ProblemKey": "schemas", "GemmShape": "schemas", "EnvIdentity": "schemas", "Measurement": "schemas",
    "Winner": "schemas", "config_json": "schemas",
    "default_url": "engine", "normalize_url": "engine",
    "TuningDBError": "errors", "CorruptDatabaseError": "errors", "SchemaTooNewError": "errors",
    "DatabaseLockedError": "errors", "ReadOnlyDatabaseError": "errors",
}
__all__ = [*_WHERE, "SCHEMA_VERSION"]


def __getattr__(name: str):
    if name == "SCHEMA_VERSION":
        value = importlib.import_module(".migrations", __name__).LATEST
    elif name in _WHERE:
        value = getattr(importlib.import_module(f".{_WHERE[name]}", __name__), name)
    else:
        raise AttributeError(f"module 'tuning_db' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
