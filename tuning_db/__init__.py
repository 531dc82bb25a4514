"""tuning_db: the persistent tuning database of tritonblas (SQLAlchemy; SQLite by default).

    from tuning_db import TuningDB, ProblemKey, EnvIdentity, Measurement, Winner
    db = TuningDB()                      # $TRITONBLAS_DB, else ~/.cache/tritonblas/tuning.sqlite
    db.upsert_winner(winner); db.get_winner(key)   # a miss (None) when stale or absent

Importing opens no database and reads no environment variable.
"""

from .engine import default_url, normalize_url
from .errors import (
    CorruptDatabaseError,
    DatabaseLockedError,
    ReadOnlyDatabaseError,
    SchemaTooNewError,
    TuningDBError,
)
from .migrations import LATEST as SCHEMA_VERSION
from .schemas import EnvIdentity, GemmShape, Measurement, ProblemKey, Winner, config_json
from .store import ImportPolicy, TuningDB

__all__ = ["TuningDB", "ProblemKey", "GemmShape", "EnvIdentity", "Measurement", "Winner", "ImportPolicy",
           "default_url", "normalize_url", "config_json", "SCHEMA_VERSION", "TuningDBError",
           "CorruptDatabaseError", "SchemaTooNewError", "DatabaseLockedError", "ReadOnlyDatabaseError"]
