"""The library's logger, `logging.getLogger("tritonblas")`, and TRITONBLAS_LOG.

What is logged:
  DEBUG    each dispatch decision: problem, device, source, config, backend (once per problem, device
           and restriction until the selections are dropped: `dispatch.clear_cache()`), and what
           transparent mode leaves to torch (once per kind of call);
  INFO     the tuning database opened, transparent mode on and off, each problem recorded to a file;
  WARNING  fallbacks (a selected config triton could not compile) and database or config-file
           trouble. These are RuntimeWarnings too (`warnings.warn`), as before.
The logger has a NullHandler, so nothing is printed unless the application configures logging or sets
TRITONBLAS_LOG=debug|info|warning|error: read once, when the library first logs (never at import),
it sets the logger's level and, where no handler would print the records, adds one on stderr.
"""

from __future__ import annotations

import logging
import os
import threading

logger = logging.getLogger("tritonblas")
logger.addHandler(logging.NullHandler())  # a library's logger: silent unless the application asks
_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_configured = False
_lock = threading.Lock()


def get() -> logging.Logger:
    """The logger, after TRITONBLAS_LOG has been applied (the first call reads it)."""
    global _configured
    if _configured:
        return logger
    with _lock:  # once, even when threads log their first records together
        if _configured:
            return logger
        try:
            configure(os.environ.get("TRITONBLAS_LOG", ""))
        except ValueError as exc:  # a typo in the environment must not fail a matmul
            import warnings

            warnings.warn(f"tritonblas: {exc}; ignored", RuntimeWarning, stacklevel=3)
        _configured = True  # last: a thread that sees it finds the logger configured
    return logger


def configure(level: str) -> None:
    """What TRITONBLAS_LOG=`level` does: the logger's level, and a stderr handler where the records
    would reach none (no handler of the application's on the logger or the root). An empty `level`
    changes nothing; an unknown one is refused."""
    name = level.strip().lower()
    if not name:
        return
    if name not in _LEVELS:
        raise ValueError(f"TRITONBLAS_LOG must be one of {', '.join(_LEVELS)}, got {level!r}")
    logger.setLevel(_LEVELS[name])
    handlers = logger.handlers + logging.getLogger().handlers
    if not any(not isinstance(h, logging.NullHandler) for h in handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(logging.Formatter("%(name)s %(levelname)s: %(message)s"))
        logger.addHandler(handler)


def warn(message: str, stacklevel: int = 2) -> None:
    """A RuntimeWarning (what callers and tests have always seen) and the same text at WARNING."""
    import warnings

    warnings.warn(message, RuntimeWarning, stacklevel=stacklevel + 1)
    get().warning(message)
