"""Tables of grouped winners: the file format (`write_table`, `read_table`), and the user's table that
`tritonblas tune` writes and dispatch reads before the shipped one.

The user table is `grouped-<arch>.json` in the folder of the tuning database: the folder of an SQLite
file (--db, $TRITONBLAS_DB or dispatch.set_database), else (PostgreSQL and other servers) the folder of
the default database file. Grouped winners live in a file and not in the database because the
database's rows are keyed by dense problems; a JSON file in the shipped table's format needs no schema
change and exports as it is. A table that cannot be read costs one warning and is skipped: a
grouped_mm call never fails for it.
"""

from __future__ import annotations

import functools
import json
import os
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING

from .. import log
from ..config import GemmConfig

if TYPE_CHECKING:
    from .forms import GroupedKey


def key_order(key: GroupedKey) -> tuple:
    return (key.form, key.groups, key.n, key.k, key.rows, key.dtype, key.layout)


def write_table(path: Path, arch: str, winners: dict[GroupedKey, GemmConfig], meta: dict) -> None:
    """The winners as a deterministic file (sorted keys and rows): what dispatch reads."""
    rows = [{"key": asdict(k), "config": winners[k].model_dump()} for k in sorted(winners, key=key_order)]
    doc = {"arch": arch, **meta, "winners": rows}
    tmp = path.with_name(f"{path.name}.{os.getpid()}.tmp")  # renamed over it: no reader sees half a file
    try:
        tmp.write_text(json.dumps(doc, indent=1, sort_keys=True) + "\n")
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


def read_doc(path: Path) -> tuple[dict, dict[GroupedKey, GemmConfig]]:
    """(the table's other fields, its winners by key); ValueError naming the file for anything malformed."""
    from .forms import GroupedKey

    try:
        doc = json.loads(path.read_text())
        rows = doc["winners"]
        if not isinstance(rows, list):
            raise TypeError("winners is not a list")
        winners = {GroupedKey(**row["key"]): GemmConfig.model_validate(row["config"]) for row in rows}
    except (OSError, ValueError, TypeError, KeyError, AttributeError) as e:
        raise ValueError(f"grouped table {path}: {type(e).__name__}: {e}") from e
    return {k: v for k, v in doc.items() if k != "winners"}, winners


def read_table(path: Path) -> dict[GroupedKey, GemmConfig]:
    """The winners of a table file ({} where there is none); ValueError for a malformed one."""
    if not path.is_file():
        return {}
    return read_doc(path)[1]


def merge_table(path: Path, arch: str, winners: dict[GroupedKey, GemmConfig], meta: dict) -> None:
    """Write `winners` into the table at `path`, keeping the keys it held that `winners` does not have.
    A malformed file is replaced (said once as a warning): its winners could not be read anyway."""
    path.parent.mkdir(parents=True, exist_ok=True)  # the default folder, for a server database's run
    held: dict[GroupedKey, GemmConfig] = {}
    if path.is_file():
        try:
            held = read_doc(path)[1]
        except ValueError as e:
            log.warn(f"tritonblas: {e}; it is rewritten with this run's winners only")
    write_table(path, arch, {**held, **winners}, meta)


def table_folder(url: str | None) -> Path:
    """The folder of the user tables for a database URL or path (None: $TRITONBLAS_DB, else the
    default file): an SQLite file's folder, else the default database's folder. Parsed by hand: the
    dispatch path must not load SQLAlchemy (tuning_db/location.py says why)."""
    from tuning_db.location import ENV_VAR, default_path

    chosen = url if url else os.environ.get(ENV_VAR, "").strip()
    if not chosen:
        return default_path().parent
    if "://" not in chosen:
        return Path(chosen).expanduser().absolute().parent
    scheme, rest = chosen.split("://", 1)
    rest = rest.split("?", 1)[0]
    if scheme.split("+", 1)[0] == "sqlite" and rest.startswith("/") and rest not in ("/", "/:memory:"):
        return Path(rest[1:]).expanduser().absolute().parent  # sqlite:////abs and sqlite:///relative
    return default_path().parent


def user_table_path(arch: str, url: str | None) -> Path:
    return table_folder(url) / f"grouped-{arch}.json"


_warned: set[str] = set()


@functools.cache
def user_table(arch: str, url: str | None) -> dict[GroupedKey, GemmConfig]:
    """The user's winners for `arch` next to the database at `url` ({} where there are none); a table
    that cannot be read warns once per file and process and reads as {}."""
    path = user_table_path(arch, url)
    try:
        return read_table(path)
    except ValueError as e:
        if str(path) not in _warned:
            _warned.add(str(path))
            log.warn(f"tritonblas: {e}; grouped dispatch reads the shipped table instead", stacklevel=3)
        return {}


def dispatch_table(arch: str) -> tuple[dict[GroupedKey, GemmConfig], str]:
    """The user table dispatch reads for `arch` (the database dispatch.set_database chose), or ({}, "")
    where dispatch reads no user database."""
    from ..selection.dispatch import database_choice

    chosen = database_choice()
    if chosen is False:
        return {}, ""
    return user_table(arch, chosen), str(user_table_path(arch, chosen))
