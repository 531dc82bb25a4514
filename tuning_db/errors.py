"""Errors of the tuning database. Every message names the file or URL it is about."""

from __future__ import annotations


class TuningDBError(RuntimeError):
    """Base class: the tuning database could not do what was asked; nothing was written."""


class CorruptDatabaseError(TuningDBError):
    """The file is not an SQLite database, or a damaged one. It is left as it was."""


class SchemaTooNewError(TuningDBError):
    """The database was written by a newer tritonblas (a later schema). It is left as it was."""


class DatabaseLockedError(TuningDBError):
    """Another process held the write lock for longer than the busy timeout."""


class ReadOnlyDatabaseError(TuningDBError):
    """The database (or the directory it would be created in) cannot be written."""
